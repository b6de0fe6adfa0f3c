"""Landing an InfiniBand fabric in the warehouse: what the ``raw/ib_*`` assets and
``gpufabric ingest ibnetdiscover`` (a saved capture, offline) both do, so both land the same rows."""

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psycopg

from connectors.ibnetdiscover import IbFabric
from connectors.warehouse import land_collection, replace_rows
from core.quality import CollectionStatus

NODE_COLUMNS = (
    "run_id", "source", "collected_at", "guid", "node_type", "port_count", "description", "system_guid",
    "vendor_id", "device_id", "lid", "node_class", "class_reason", "hostname", "hca", "switch_name", "switch_model",
)  # fmt: skip
PORT_COLUMNS = (
    "run_id", "source", "collected_at", "node_guid", "port", "port_guid", "ext_port", "peer_guid", "peer_port",
    "peer_port_guid", "peer_description", "lid", "lmc", "peer_lid", "width", "speed", "speed_gbps",
)  # fmt: skip
LINK_COLUMNS = (
    "run_id", "source", "collected_at", "a_guid", "a_port", "b_guid", "b_port", "width", "speed", "speed_gbps",
    "both_sides", "internal",
)  # fmt: skip


def node_rows(run_id: str, source: str, at: datetime, fabric: IbFabric) -> Iterator[tuple[Any, ...]]:
    for n in fabric.nodes:
        c = fabric.classes[n.guid]
        yield (
            run_id, source, at, n.guid, n.node_type, n.port_count, n.description, n.system_guid, n.vendor_id,
            n.device_id, n.lid, c.node_class.value, c.reason, c.hostname, c.hca, c.switch_name, c.switch_model,
        )  # fmt: skip


def port_rows(run_id: str, source: str, at: datetime, fabric: IbFabric) -> Iterator[tuple[Any, ...]]:
    for p in fabric.ports:
        yield (
            run_id, source, at, p.node_guid, p.port, p.port_guid, p.ext_port, p.peer_guid, p.peer_port,
            p.peer_port_guid, p.peer_description, p.lid, p.lmc, p.peer_lid, p.width, p.speed, p.speed_gbps,
        )  # fmt: skip


def link_rows(run_id: str, source: str, at: datetime, fabric: IbFabric) -> Iterator[tuple[Any, ...]]:
    for lk in fabric.links:
        yield (
            run_id, source, at, lk.a_guid, lk.a_port, lk.b_guid, lk.b_port, lk.width, lk.speed, lk.speed_gbps,
            lk.both_sides, lk.internal,
        )  # fmt: skip


def land_fabric(
    conn: psycopg.Connection,
    *,
    run_id: str,
    kind: str,
    device: str,
    fabric: IbFabric,
    started_at: datetime,
    status: CollectionStatus | None = None,
    detail: str | None = None,
) -> tuple[int, int]:
    """Nodes, ports, links, quarantine and status of one source, atomically. Returns (links, quarantined)."""
    status = status or fabric.status
    detail = detail or fabric.problem
    with conn.transaction():
        replace_rows(
            conn, "raw.ib_nodes", {"run_id": run_id, "source": device}, NODE_COLUMNS,
            node_rows(run_id, device, started_at, fabric),
        )  # fmt: skip
        replace_rows(
            conn, "raw.ib_ports", {"run_id": run_id, "source": device}, PORT_COLUMNS,
            port_rows(run_id, device, started_at, fabric),
        )  # fmt: skip
        return land_collection(
            conn,
            run_id=run_id,
            source=kind,
            device=device,
            table="raw.ib_links",
            columns=LINK_COLUMNS,
            rows=link_rows(run_id, device, started_at, fabric),
            quarantined=fabric.quarantined,
            status=status,
            started_at=started_at,
            detail=detail,
        )
