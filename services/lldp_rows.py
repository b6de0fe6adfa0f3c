"""How LLDP collections land in ``raw.lldp_neighbor_observations`` (and, for SNMP,
``raw.snmp_interfaces`` / ``raw.snmp_systems``): the row writers every LLDP path shares.

The SNMP asset (``assets/lldp``), the CLI and lldpctl assets (``assets/lldp_cli``) and
``gpufabric ingest lldp`` (:mod:`services.lldp_ingest`) all land through these functions, so a
saved capture lands exactly the rows a live poll of the same device would. (Moved here from the
two assets, which import them, so the CLI -- which may call services but not assets -- can too.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg

from connectors.warehouse import land_collection, replace_rows
from core.lldp import LldpNeighbor
from core.quality import CollectionStatus, Quarantined

if TYPE_CHECKING:  # connectors.snmp loads pysnmp (~1 s); CLI captures and the CLI asset never need it
    from connectors.snmp import LldpCollection

SNMP_SOURCE = "snmp"  # connectors.snmp.SOURCE, the collector column of SNMP rows

TABLE = "raw.lldp_neighbor_observations"
OBSERVATION_COLUMNS = (
    "run_id", "source", "collected_at", "collector", "mib", "local_chassis_id", "local_sys_name", "platform",
    "local_port_num", "rem_index", "time_mark", "local_if_index", "local_port", "local_port_vendor",
    "chassis_id_subtype", "chassis_id_raw", "chassis_id", "port_id_subtype", "port_id_raw", "port_id",
    "port_desc", "sys_name", "sys_name_raw", "sys_desc", "remote_port", "remote_platform", "man_addrs",
)  # fmt: skip
INTERFACE_COLUMNS = (
    "run_id", "source", "collected_at", "if_index", "name", "if_name", "if_descr", "if_alias",
    "if_high_speed_mbps", "mac", "base_port",
)  # fmt: skip
SYSTEM_COLUMNS = (
    "run_id", "source", "collected_at", "address", "sys_name", "sys_name_raw", "sys_descr", "sys_object_id",
    "platform", "platform_source", "mib", "chassis_id_subtype", "chassis_id_raw", "chassis_id", "lldp_sys_name",
    "requests", "varbinds",
)  # fmt: skip


def observation_row(
    run_id: str,
    device: str,
    collected_at: datetime,
    collector: str,
    local: tuple[str | None, str | None, str | None],
    n: LldpNeighbor,
) -> tuple[Any, ...]:
    """One row of raw.lldp_neighbor_observations in OBSERVATION_COLUMNS order; shared by every
    LLDP collector. ``local`` is the polled device's own (chassis id, sys name, platform), where
    the collector knows them."""
    return (
        run_id, device, collected_at, collector, n.mib, *local,
        n.local_port_num, n.rem_index, n.time_mark, n.local_if_index, n.local_port, n.local_port_vendor,
        n.chassis_id_subtype, n.chassis_id_raw, n.chassis_id, n.port_id_subtype, n.port_id_raw, n.port_id,
        n.port_desc, n.sys_name, n.sys_name_raw, n.sys_desc, n.remote_port, n.remote_platform, list(n.man_addrs),
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------
# SNMP: one switch's walk (neighbours, interfaces, system) in one transaction
# ------------------------------------------------------------------------------------------------


def snmp_observation_rows(run_id: str, collected_at: datetime, c: LldpCollection) -> Iterator[tuple[Any, ...]]:
    system = c.system
    local = (
        system.chassis_id if system else None,
        system.lldp_sys_name or system.sys_name if system else None,
        system.platform if system else None,
    )
    for n in c.neighbors:
        yield observation_row(run_id, c.device, collected_at, SNMP_SOURCE, local, n)


def interface_rows(run_id: str, collected_at: datetime, c: LldpCollection) -> Iterator[tuple[Any, ...]]:
    for i in c.interfaces:
        yield (run_id, c.device, collected_at, i.if_index, i.name, i.if_name, i.if_descr, i.if_alias,
               i.if_high_speed_mbps, i.mac, i.base_port)  # fmt: skip


def system_rows(run_id: str, collected_at: datetime, address: str, c: LldpCollection) -> list[tuple[Any, ...]]:
    s = c.system
    if s is None:
        return []
    return [
        (run_id, c.device, collected_at, address, s.sys_name, s.sys_name_raw, s.sys_descr, s.sys_object_id,
         s.platform, s.platform_source, s.mib, s.chassis_id_subtype, s.chassis_id_raw, s.chassis_id,
         s.lldp_sys_name, c.requests, c.varbinds)
    ]  # fmt: skip


def land_snmp(
    conn: psycopg.Connection,
    run_id: str,
    c: LldpCollection,
    address: str,
    started_at: datetime,
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
            source=SNMP_SOURCE,
            device=c.device,
            table=TABLE,
            columns=OBSERVATION_COLUMNS,
            rows=snmp_observation_rows(run_id, collected_at, c),
            quarantined=c.quarantined,
            status=c.status,
            started_at=started_at,
            detail=c.detail,
            key={"collector": SNMP_SOURCE},  # CLI/lldpctl rows of the same switch and run share the table
        )


# ------------------------------------------------------------------------------------------------
# CLI and lldpctl: neighbours only
# ------------------------------------------------------------------------------------------------


def cli_observation_rows(
    run_id: str, collected_at: datetime, device: str, platform: str, collector: str, neighbors: Sequence[LldpNeighbor]
) -> Iterator[tuple[Any, ...]]:
    # CLI output does not give the polled switch's own chassis id or name; the platform is known.
    for n in neighbors:
        yield observation_row(run_id, device, collected_at, collector, (None, None, platform), n)


def land_cli(
    conn: psycopg.Connection,
    *,
    run_id: str,
    collector: str,
    device: str,
    platform: str,
    neighbors: Sequence[LldpNeighbor],
    quarantined: Sequence[Quarantined],
    status: CollectionStatus,
    started_at: datetime,
    detail: str | None,
) -> tuple[int, int]:
    """One device atomically: raw rows (replacing this run's rows of this collector), quarantine, status."""
    return land_collection(
        conn,
        run_id=run_id,
        source=collector,
        device=device,
        table=TABLE,
        columns=OBSERVATION_COLUMNS,
        rows=cli_observation_rows(run_id, datetime.now(UTC), device, platform, collector, neighbors),
        quarantined=quarantined,
        status=status,
        started_at=started_at,
        detail=detail,
        key={"collector": collector},  # SNMP rows of the same switch and run share the table
    )
