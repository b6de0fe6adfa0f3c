"""Landing one node's ``nvidia-smi topo -m`` capture: what ``gpufabric ingest gpu-topo`` (a saved
file) and the collectors (SSH, a node agent's files) all do, so every path lands the same rows.

A capture that parses lands one row in ``raw.gpu_topo_captures`` (text and parsed matrix); one
that does not lands nothing there and one row in ``ops.quarantine`` with the parser's reason and
the text; either way ``ops.collection_status`` (source ``gpu_topo``, device = host) says what
happened, all in one transaction (``land_collection``). A malformed matrix is data, never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

from connectors.gpu_topo import SOURCE, GpuTopoError, parse_gpu_topo
from connectors.warehouse import land_collection
from core.affinity import TopoMatrix
from core.quality import CollectionStatus, Quarantined

COLUMNS = ("run_id", "source", "captured_at", "collected_at", "origin", "raw_text", "gpu_count", "nic_count", "matrix")
TABLE = "raw.gpu_topo_captures"


@dataclass(frozen=True)
class GpuTopoLanding:
    host: str
    status: CollectionStatus  # ok, or invalid when quarantined
    landed: int  # rows in raw.gpu_topo_captures (0 or 1)
    quarantined: int
    matrix: TopoMatrix | None  # the parsed capture when it landed
    error: GpuTopoError | None  # why it was quarantined


def land_gpu_topo(
    conn: psycopg.Connection,
    run_id: str,
    host: str,
    text: str | bytes,
    source: str,
    captured_at: datetime,
) -> GpuTopoLanding:
    """Parse and land one capture of ``host``. ``source`` is how it reached us (``ssh``,
    ``agent``, ``file:<name>``); ``captured_at`` when the node printed it. Re-landing the same
    run and host replaces the earlier attempt."""
    started = datetime.now(UTC)
    try:
        matrix: TopoMatrix | None = parse_gpu_topo(text)
        error = None
    except GpuTopoError as exc:
        matrix, error = None, exc
    if matrix is not None:
        raw = text.decode("utf-8") if isinstance(text, bytes) else text  # parse_gpu_topo checked it decodes
        rows = [(run_id, host, captured_at, started, source, raw, len(matrix.gpus), len(matrix.nics), matrix.to_json())]
        held: list[Quarantined] = []
        status, detail = CollectionStatus.OK, "; ".join(matrix.notes) or None
    else:
        assert error is not None
        rows = []
        payload: str | bytes = text
        if isinstance(text, str) and any("\ud800" <= ch <= "\udfff" for ch in text):
            payload = text.encode("utf-8", "surrogatepass")  # kept as bytes: a text column cannot hold it
        held = [
            Quarantined(
                source=SOURCE,
                reason=error.reason,
                payload=payload,
                device=host,
                location=error.location,
                context={"origin": source, "captured_at": captured_at.isoformat()},
            )
        ]
        status, detail = CollectionStatus.INVALID, str(error)
    landed, quarantined = land_collection(
        conn,
        run_id=run_id,
        source=SOURCE,
        device=host,
        table=TABLE,
        columns=COLUMNS,
        rows=rows,
        quarantined=held,
        status=status,
        started_at=started,
        detail=detail,
    )
    return GpuTopoLanding(host, status, landed, quarantined, matrix, error)
