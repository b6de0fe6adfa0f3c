"""LLDP neighbours over SSH CLI (switches) and ``lldpctl -f json`` (GPU hosts), landed in the same
``raw.lldp_neighbor_observations`` as SNMP with ``collector`` = 'cli' / 'lldpctl'.

Thin: targets from the site config → :func:`connectors.ssh.collect` → one transaction per device
(raw rows, its quarantine, its ``ops.collection_status``) → metadata with counts per status.
Landing uses the primitives of :func:`connectors.warehouse.land_collection` with ``collector`` in
the replace key: ``land_collection`` replaces by (run_id, source = device) only, which would
delete the SNMP rows of the same switch when both assets run in one run.
No ``from __future__ import annotations`` here: Dagster reads the context annotation at runtime.
"""

import itertools
import os
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg

from assets.lldp.partitions import SWITCH_GROUPS, SWITCH_GROUPS_KEY, switches_for_run
from connectors.lldpctl import HostFilter, parse_lldpctl
from connectors.ssh import CliCollection, SshOptions, SshTarget, collect
from connectors.ssh.collector import status_of
from connectors.ssh.parsers import CliParse, check_output
from connectors.warehouse import Warehouse
from core.quality import CollectionStatus, LandingTally, Quarantined
from services.lldp_rows import TABLE
from services.lldp_rows import cli_observation_rows as observation_rows
from services.lldp_rows import land_cli as land
from settings import SecretError, Settings, Switch

__all__ = ["TABLE", "land", "observation_rows"]  # the shared writers, under the names callers use


def ssh_target(switch: Switch, timeout_s: float) -> SshTarget:
    """The collector's view of one switch; resolves its password now (SecretError if it cannot)."""
    s = switch.ssh
    assert s is not None
    return SshTarget(
        name=switch.name,
        address=switch.address,
        platform=switch.platform,
        username=s.username,
        port=s.port,
        password=s.password.resolve().get_secret_value() if s.password else None,
        key_file=str(s.key_file) if s.key_file else None,
        device_type=s.device_type,
        timeout_s=timeout_s,
    )


def targets_from(switches: Sequence[Switch], timeout_s: float = 20.0) -> tuple[list[SshTarget], list[CliCollection]]:
    targets: list[SshTarget] = []
    failed: list[CliCollection] = []
    for switch in switches:
        if switch.ssh is None:
            continue
        try:
            targets.append(ssh_target(switch, timeout_s))
        except SecretError as err:
            failed.append(CliCollection(switch.name, switch.platform, "", [], [], CollectionStatus.ERROR, str(err)))
    return targets, failed


def collect_and_land(
    conn: psycopg.Connection,
    run_id: str,
    switches: Sequence[Switch],
    options: SshOptions,
    timeout_s: float = 20.0,
    progress: Callable[[CliCollection], None] | None = None,
) -> dict[str, Any]:
    started = datetime.now(UTC)
    targets, failed = targets_from(switches, timeout_s)
    tally = LandingTally()
    for c in itertools.chain(failed, collect(targets, options, progress)):
        landed = land(
            conn,
            run_id=run_id,
            collector="cli",
            device=c.device,
            platform=c.platform,
            neighbors=c.neighbors,
            quarantined=c.quarantined,
            status=c.status,
            started_at=started,
            detail=c.detail,
        )
        tally.add(c.status, *landed)
    return tally.counts()


def land_lldpctl_files(
    conn: psycopg.Connection, run_id: str, paths: Sequence[Path], host_filter: HostFilter | None = None
) -> dict[str, Any]:
    """Host-side: one ``<host>.json`` file of ``lldpctl -f json`` per GPU host (collected over SSH
    or dropped by a DaemonSet); the host name is the file stem."""
    started = datetime.now(UTC)
    tally = LandingTally()
    dropped = 0
    rails: dict[str, dict[str, int]] = {}
    for path in paths:
        host = path.stem
        raw = path.read_bytes()
        parse = CliParse()
        try:
            text = check_output(raw)
        except ValueError as err:
            parse.quarantined.append(
                Quarantined(
                    source="lldpctl",
                    device=host,
                    reason=str(err),
                    payload=raw,
                    location="output",
                    context={"command": "lldpctl -f json", "platform": "linux"},
                )
            )
        else:
            result = parse_lldpctl(text, host, host_filter=host_filter)
            parse.neighbors, parse.quarantined = result.neighbors, result.quarantined
            dropped += len(result.dropped)
            rails[host] = result.rails
        status = status_of(parse)
        landed = land(
            conn,
            run_id=run_id,
            collector="lldpctl",
            device=host,
            platform="linux",
            neighbors=parse.neighbors,
            quarantined=parse.quarantined,
            status=status,
            started_at=started,
            detail=parse.quarantined[0].reason if status is CollectionStatus.INVALID else None,
        )
        tally.add(status, *landed)
    counts = tally.counts()
    return {"hosts": counts.pop("devices"), **counts, "interfaces_dropped": dropped, "rails": rails}


@dg.asset(
    key_prefix=["raw"],
    group_name="ethernet",
    kinds={"ssh", "postgres"},
    description="LLDP neighbour tables of every switch with SSH settings, collected over the CLI "
    "(structured output where the NOS has it, TextFSM otherwise) into raw.lldp_neighbor_observations "
    "with collector 'cli'. Partitioned by switch group like the SNMP asset (the same groups); an "
    "unpartitioned run collects every switch.",
    partitions_def=SWITCH_GROUPS,
    deps=[SWITCH_GROUPS_KEY],
)
def lldp_cli_observations(
    context: dg.AssetExecutionContext, warehouse: dg.ResourceParam[Warehouse], site: dg.ResourceParam[Settings]
) -> dg.MaterializeResult:
    settings = site
    switches, groups = switches_for_run(context, settings, [s for s in settings.sources.switches if s.ssh is not None])
    collection = settings.sources.collection
    done = Counter[str]()

    def progress(c: CliCollection) -> None:
        done["n"] += 1
        context.log.info(
            "[%d/%d] %s: %s, %d neighbours", done["n"], len(switches), c.device, c.status, len(c.neighbors)
        )

    with warehouse.connect() as conn:
        counts = collect_and_land(
            conn, context.run.run_id, switches, SshOptions(collection.concurrency), collection.timeout_s, progress
        )
    return dg.MaterializeResult(
        metadata={
            "switches": dg.MetadataValue.int(counts["devices"]),
            "switch_groups": dg.MetadataValue.json(groups or "all"),
            "switches_by_status": dg.MetadataValue.json(counts["statuses"]),
            "neighbors_landed": dg.MetadataValue.int(counts["neighbors"]),
            "rows_quarantined": dg.MetadataValue.int(counts["quarantined"]),
        }
    )


class LldpctlDropConfig(dg.Config):
    drop_dir: str = os.environ.get("GPUFABRIC_LLDPCTL_DIR", ".data/lldpctl")
    exclude: list[str] = list(HostFilter().exclude)
    rail_pattern: str = HostFilter().rail_pattern or ""


@dg.asset(
    key_prefix=["raw"],
    group_name="ethernet",
    kinds={"postgres"},
    description="GPU hosts' own LLDP view (lldpctl -f json files, one per host) with management ports and "
    "VF representors filtered out, landed with collector 'lldpctl'.",
)
def lldpctl_host_observations(
    context: dg.AssetExecutionContext, config: LldpctlDropConfig, warehouse: dg.ResourceParam[Warehouse]
) -> dg.MaterializeResult:
    paths = sorted(Path(config.drop_dir).glob("*.json"))
    flt = HostFilter(exclude=tuple(config.exclude), rail_pattern=config.rail_pattern or None)
    with warehouse.connect() as conn:
        counts = land_lldpctl_files(conn, context.run.run_id, paths, flt)
    return dg.MaterializeResult(
        metadata={
            "hosts": dg.MetadataValue.int(counts["hosts"]),
            "hosts_by_status": dg.MetadataValue.json(counts["statuses"]),
            "neighbors_landed": dg.MetadataValue.int(counts["neighbors"]),
            "rows_quarantined": dg.MetadataValue.int(counts["quarantined"]),
            "interfaces_dropped": dg.MetadataValue.int(counts["interfaces_dropped"]),
            "rails": dg.MetadataValue.json(counts["rails"]),
        }
    )
