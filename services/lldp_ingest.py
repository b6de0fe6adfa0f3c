"""``gpufabric ingest lldp``: one saved LLDP capture read offline and landed like a live poll.

:func:`connectors.lldp_capture.read_capture` parses it with the live collectors' parsers; the rows
land through :mod:`services.lldp_rows`, the writers the SNMP/CLI/lldpctl assets use, under the
collector a live poll of that device would have used ('snmp', 'cli' or 'lldpctl').
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import psycopg

from connectors.lldp_capture import Capture, read_capture
from services.lldp_rows import land_cli, land_snmp


@dataclass
class Ingested:
    capture: Capture
    run_id: str
    landed: int
    quarantined: int


def ingest_capture(
    conn: psycopg.Connection, data: bytes, fmt: str, device: str, run_id: str, platform: str | None = None
) -> Ingested:
    """Parse and land one capture; CaptureFormatError for an unknown format (nothing landed)."""
    started = datetime.now(UTC)
    capture = read_capture(data, fmt, device, platform)
    if capture.snmp is not None:
        # the walk's own rows plus the capture's unreadable lines, under the capture's status
        walk = replace(capture.snmp, quarantined=capture.quarantined, status=capture.status, detail=capture.detail)
        landed, held = land_snmp(conn, run_id, walk, "", started)
    else:
        landed, held = land_cli(
            conn,
            run_id=run_id,
            collector=capture.collector,
            device=device,
            platform=capture.platform or "",
            neighbors=capture.neighbors,
            quarantined=capture.quarantined,
            status=capture.status,
            started_at=started,
            detail=capture.detail,
        )
    return Ingested(capture, run_id, landed, held)


def neighbour_json(capture: Capture) -> list[dict[str, Any]]:
    """The landed neighbours for ``--json``: our names, null where the device sent nothing."""
    return [
        {
            "local_port": n.local_port_vendor,
            "local_port_normalised": n.local_port,
            "remote_system_name": n.sys_name,
            "remote_chassis_id": n.chassis_id,
            "remote_chassis_id_subtype": n.chassis_id_subtype,
            "remote_port_id": n.port_id,
            "remote_port_id_subtype": n.port_id_subtype,
            "remote_port_description": n.port_desc,
            "remote_port": n.remote_port,
            "local_port_num": n.local_port_num,
            "rem_index": n.rem_index,
        }
        for n in capture.neighbors
    ]
