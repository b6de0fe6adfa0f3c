"""Poll every configured switch's LLDP neighbours over SNMP and land them untouched.

Thin by design: targets from the site config → :func:`connectors.snmp.collect` (walk + pure
interpretation) → one transaction per switch (``raw.lldp_neighbor_observations``,
``raw.snmp_interfaces``, ``raw.snmp_systems``, its quarantine and its ``ops.collection_status``)
→ metadata with counts per status. One unreachable or broken switch never fails the run.
No ``from __future__ import annotations`` here: Dagster reads the context annotation at runtime.
"""

import itertools
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import psycopg

from assets.lldp.resources import SnmpCollectorResource
from connectors.snmp import SOURCE, CollectionStats, LldpCollection, SnmpTarget, collect
from connectors.warehouse import Warehouse, land_collection, replace_rows
from core.lldp import LldpNeighbor
from core.quality import CollectionStatus, LandingTally
from settings import SecretError, Settings, Switch

OBSERVATION_COLUMNS = (
    "run_id",
    "source",
    "collected_at",
    "collector",
    "mib",
    "local_chassis_id",
    "local_sys_name",
    "platform",
    "local_port_num",
    "rem_index",
    "time_mark",
    "local_if_index",
    "local_port",
    "local_port_vendor",
    "chassis_id_subtype",
    "chassis_id_raw",
    "chassis_id",
    "port_id_subtype",
    "port_id_raw",
    "port_id",
    "port_desc",
    "sys_name",
    "sys_name_raw",
    "sys_desc",
    "remote_port",
    "remote_platform",
    "man_addrs",
)
INTERFACE_COLUMNS = (
    "run_id",
    "source",
    "collected_at",
    "if_index",
    "name",
    "if_name",
    "if_descr",
    "if_alias",
    "if_high_speed_mbps",
    "mac",
    "base_port",
)
SYSTEM_COLUMNS = (
    "run_id",
    "source",
    "collected_at",
    "address",
    "sys_name",
    "sys_name_raw",
    "sys_descr",
    "sys_object_id",
    "platform",
    "platform_source",
    "mib",
    "chassis_id_subtype",
    "chassis_id_raw",
    "chassis_id",
    "lldp_sys_name",
    "requests",
    "varbinds",
)


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


def observation_row(
    run_id: str,
    device: str,
    collected_at: datetime,
    collector: str,
    local: tuple[str | None, str | None, str | None],
    n: LldpNeighbor,
) -> tuple[Any, ...]:
    """One row of raw.lldp_neighbor_observations in OBSERVATION_COLUMNS order; shared by every
    LLDP collector (SNMP here, CLI and lldpctl in assets/lldp_cli). ``local`` is the polled
    device's own (chassis id, sys name, platform), where the collector knows them."""
    return (
        run_id, device, collected_at, collector, n.mib, *local,
        n.local_port_num, n.rem_index, n.time_mark, n.local_if_index, n.local_port, n.local_port_vendor,
        n.chassis_id_subtype, n.chassis_id_raw, n.chassis_id, n.port_id_subtype, n.port_id_raw, n.port_id,
        n.port_desc, n.sys_name, n.sys_name_raw, n.sys_desc, n.remote_port, n.remote_platform, list(n.man_addrs),
    )  # fmt: skip


def observation_rows(run_id: str, collected_at: datetime, c: LldpCollection) -> Iterator[tuple[Any, ...]]:
    system = c.system
    local = (
        system.chassis_id if system else None,
        system.lldp_sys_name or system.sys_name if system else None,
        system.platform if system else None,
    )
    for n in c.neighbors:
        yield observation_row(run_id, c.device, collected_at, SOURCE, local, n)


def interface_rows(run_id: str, collected_at: datetime, c: LldpCollection) -> Iterator[tuple[Any, ...]]:
    for i in c.interfaces:
        yield (
            run_id,
            c.device,
            collected_at,
            i.if_index,
            i.name,
            i.if_name,
            i.if_descr,
            i.if_alias,
            i.if_high_speed_mbps,
            i.mac,
            i.base_port,
        )


def system_rows(run_id: str, collected_at: datetime, address: str, c: LldpCollection) -> list[tuple[Any, ...]]:
    s = c.system
    if s is None:
        return []
    return [
        (
            run_id,
            c.device,
            collected_at,
            address,
            s.sys_name,
            s.sys_name_raw,
            s.sys_descr,
            s.sys_object_id,
            s.platform,
            s.platform_source,
            s.mib,
            s.chassis_id_subtype,
            s.chassis_id_raw,
            s.chassis_id,
            s.lldp_sys_name,
            c.requests,
            c.varbinds,
        )
    ]


def land_device(
    conn: psycopg.Connection, run_id: str, c: LldpCollection, address: str, started_at: datetime
) -> tuple[int, int]:
    """One switch's poll in one transaction: raw rows of all three tables, quarantine, status."""
    collected_at = datetime.now(UTC)
    key = {"run_id": run_id, "source": c.device}
    with conn.transaction():
        replace_rows(conn, "raw.snmp_interfaces", key, INTERFACE_COLUMNS, interface_rows(run_id, collected_at, c))
        replace_rows(conn, "raw.snmp_systems", key, SYSTEM_COLUMNS, system_rows(run_id, collected_at, address, c))
        return land_collection(
            conn,
            run_id=run_id,
            source=SOURCE,
            device=c.device,
            table="raw.lldp_neighbor_observations",
            columns=OBSERVATION_COLUMNS,
            rows=observation_rows(run_id, collected_at, c),
            quarantined=c.quarantined,
            status=c.status,
            started_at=started_at,
            detail=c.detail,
            key={"collector": SOURCE},  # CLI/lldpctl rows of the same switch and run share the table
        )


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
    "(one row per neighbour per port per poll); also raw.snmp_interfaces and raw.snmp_systems.",
)
def lldp_neighbor_observations(
    context: dg.AssetExecutionContext,
    warehouse: dg.ResourceParam[Warehouse],
    site: dg.ResourceParam[Settings],
    snmp_collector: SnmpCollectorResource,
) -> dg.MaterializeResult:
    settings = site
    switches = [s for s in settings.sources.switches if s.snmp is not None]
    if not switches:
        context.log.warning("no switches with SNMP settings (sources.switches in %s)", settings.source_path)
    options = snmp_collector.options(settings.sources.collection.concurrency)
    stats = CollectionStats()
    with warehouse.connect() as conn:
        counts = collect_and_land(conn, context.run.run_id, switches, options, context.log, stats)
    return dg.MaterializeResult(
        metadata={
            "switches": dg.MetadataValue.int(counts["devices"]),
            "switches_by_status": dg.MetadataValue.json(counts["statuses"]),
            "neighbors_landed": dg.MetadataValue.int(counts["neighbors"]),
            "interfaces_landed": dg.MetadataValue.int(counts["interfaces"]),
            "rows_quarantined": dg.MetadataValue.int(counts["quarantined"]),
            "snmp_requests": dg.MetadataValue.int(stats.requests),
            "walk_seconds": dg.MetadataValue.float(round(stats.wall_s, 3)),
        }
    )


lldp_job = dg.define_asset_job("lldp_discovery", selection=[lldp_neighbor_observations])

lldp_schedule = dg.ScheduleDefinition(
    name="lldp_every_15_minutes",
    job=lldp_job,
    cron_schedule="*/15 * * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Poll every switch's LLDP table over SNMP every 15 minutes.",
)
