"""Poll every configured switch's LLDP neighbours over SNMP and land them untouched.

Thin by design: targets from the site config → :func:`connectors.snmp.collect` (walk + pure
interpretation) → one transaction per switch (``raw.lldp_neighbor_observations``,
``raw.snmp_interfaces``, ``raw.snmp_systems``, its quarantine and its ``ops.collection_status``)
→ metadata with counts per status. One unreachable or broken switch never fails the run.
No ``from __future__ import annotations`` here: Dagster reads the context annotation at runtime.
"""

import itertools
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import psycopg

from assets.lldp.partitions import PARTITION_SET, SWITCH_GROUPS, SWITCH_GROUPS_KEY, switches_for_run
from assets.lldp.resources import SnmpCollectorResource
from connectors.snmp import CollectionStats, LldpCollection, SnmpTarget, collect
from connectors.warehouse import Warehouse
from core.quality import CollectionStatus, LandingTally
from services.lldp_rows import (  # the row writers every LLDP path shares (re-exported for callers)
    INTERFACE_COLUMNS,
    OBSERVATION_COLUMNS,
    SYSTEM_COLUMNS,
    interface_rows,
    observation_row,
    system_rows,
)
from services.lldp_rows import land_snmp as land_device
from services.lldp_rows import snmp_observation_rows as observation_rows
from settings import SecretError, Settings, Switch

__all__ = [
    "INTERFACE_COLUMNS", "OBSERVATION_COLUMNS", "SYSTEM_COLUMNS", "interface_rows", "land_device",
    "observation_row", "observation_rows", "system_rows",
]  # fmt: skip


def snmp_target(switch: Switch) -> SnmpTarget:
    """The collector's view of one configured switch; resolves its secrets now (SecretError if not)."""
    s = switch.snmp
    assert s is not None
    return SnmpTarget(
        name=switch.name,
        address=switch.address,
        port=s.port,
        version=s.version,
        community=s.community.resolve() if s.community else None,
        user=s.user,
        auth_protocol=s.auth_protocol,
        auth_key=s.auth_key.resolve() if s.auth_key else None,
        priv_protocol=s.priv_protocol,
        priv_key=s.priv_key.resolve() if s.priv_key else None,
        context=s.context,
        timeout_s=s.timeout_s,
        retries=s.retries,
        platform=switch.platform,
    )


def targets_from(switches: Sequence[Switch]) -> tuple[list[SnmpTarget], list[LldpCollection]]:
    """Targets for every switch with SNMP settings, and a failed collection for each whose secrets
    cannot be read (the message names the variable or file, never a value)."""
    targets: list[SnmpTarget] = []
    failed: list[LldpCollection] = []
    for switch in switches:
        if switch.snmp is None:
            continue  # SSH-only switch: the SSH collector's business
        try:
            targets.append(snmp_target(switch))
        except SecretError as err:
            failed.append(LldpCollection(switch.name, None, [], [], [], CollectionStatus.ERROR, str(err)))
    return targets, failed


def collect_and_land(
    conn: psycopg.Connection,
    run_id: str,
    switches: Sequence[Switch],
    options: Any,
    log: Any = None,
    stats: CollectionStats | None = None,
) -> dict[str, Any]:
    """Poll ``switches`` and land each as it completes; returns the run's counts."""
    started = datetime.now(UTC)
    targets, failed = targets_from(switches)
    addresses = {s.name: s.address for s in switches}
    tally = LandingTally()
    interfaces = 0
    for c in itertools.chain(failed, collect(targets, options, stats)):
        n, q = land_device(conn, run_id, c, addresses.get(c.device, ""), started)
        tally.add(c.status, n, q)
        interfaces += len(c.interfaces)
        if log is not None:
            extra = f" ({c.detail})" if c.detail else ""
            log.info("%s: %s%s, %d neighbours, %d quarantined", c.device, c.status, extra, n, q)
    return {**tally.counts(), "interfaces": interfaces}


@dg.asset(
    key_prefix=["raw"],
    group_name="ethernet",
    kinds={"snmp", "postgres"},
    description="LLDP neighbour tables of every switch, walked over SNMP and landed untouched "
    "(one row per neighbour per port per poll); also raw.snmp_interfaces and raw.snmp_systems. "
    "Partitioned by switch group (one run per group); an unpartitioned run polls every switch.",
    partitions_def=SWITCH_GROUPS,
    # No backfill_policy: Dagster's default launches one run per partition, so a group's retry
    # or backfill never re-polls another group's switches.
    deps=[SWITCH_GROUPS_KEY],
)
def lldp_neighbor_observations(
    context: dg.AssetExecutionContext,
    warehouse: dg.ResourceParam[Warehouse],
    site: dg.ResourceParam[Settings],
    snmp_collector: SnmpCollectorResource,
) -> dg.MaterializeResult:
    settings = site
    switches, groups = switches_for_run(
        context, settings, [s for s in settings.sources.switches if s.snmp is not None]
    )
    if not switches and not groups:
        context.log.warning("no switches with SNMP settings (sources.switches in %s)", settings.source_path)
    options = snmp_collector.options(settings.sources.collection.concurrency)
    stats = CollectionStats()
    with warehouse.connect() as conn:
        counts = collect_and_land(conn, context.run.run_id, switches, options, context.log, stats)
    return dg.MaterializeResult(
        metadata={
            "switches": dg.MetadataValue.int(counts["devices"]),
            "switch_groups": dg.MetadataValue.json(groups or "all"),
            "switches_by_status": dg.MetadataValue.json(counts["statuses"]),
            "neighbors_landed": dg.MetadataValue.int(counts["neighbors"]),
            "interfaces_landed": dg.MetadataValue.int(counts["interfaces"]),
            "rows_quarantined": dg.MetadataValue.int(counts["quarantined"]),
            "snmp_requests": dg.MetadataValue.int(stats.requests),
            "walk_seconds": dg.MetadataValue.float(round(stats.wall_s, 3)),
        }
    )


lldp_job = dg.define_asset_job("lldp_discovery", selection=[lldp_neighbor_observations])  # partitioned as the asset


@dg.schedule(
    name="lldp_every_15_minutes",
    job=lldp_job,
    cron_schedule="*/15 * * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Poll every switch's LLDP table over SNMP every 15 minutes: one run per switch group.",
)
def lldp_schedule(context: dg.ScheduleEvaluationContext) -> dg.SkipReason | list[dg.RunRequest]:
    keys = context.instance.get_dynamic_partitions(PARTITION_SET)
    if not keys:
        return dg.SkipReason("no switch groups yet: materialize the switch_groups asset first")
    tick = context.scheduled_execution_time.strftime("%Y%m%dT%H%M") if context.scheduled_execution_time else "now"
    return [dg.RunRequest(run_key=f"{key}@{tick}", partition_key=key) for key in keys]
