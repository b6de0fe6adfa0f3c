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
from pathlib import Path
from typing import Any

import psycopg

from connectors.gpu_topo import MAX_BYTES, SOURCE, GpuTopoError, parse_gpu_topo
from connectors.warehouse import land_collection
from connectors.warehouse.loader import copy_rows, record_status
from core.affinity import AffinityFinding, GpuAffinity, NodeAffinity, TopoMatrix
from core.affinity.fleet import FleetAffinity
from core.affinity.render import node_patch
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


@dataclass(frozen=True)
class DropCollection:
    """One drop directory read: what landed per host, or why the directory could not be read."""

    source: str
    landings: tuple[GpuTopoLanding, ...]
    error: str | None = None  # the directory itself was unreadable (status ``unreachable``)


def collect_drop_directory(
    conn: psycopg.Connection, run_id: str, name: str, directory: Path, suffix: str = ".txt"
) -> DropCollection:
    """Land every ``<host><suffix>`` a node agent dropped in ``directory`` (captured at the
    file's modification time, origin ``agent:<name>``). A file is read up to ``MAX_BYTES`` + 1
    bytes, so an oversized one is quarantined by the parser's size rule, never read whole; a file
    that vanishes or cannot be read is quarantined with the OS error. An unreadable directory
    lands nothing and records ``unreachable`` for the source ``name``."""
    started = datetime.now(UTC)
    try:
        files = sorted(p for p in directory.iterdir() if p.name.endswith(suffix) and len(p.name) > len(suffix))
    except OSError as exc:
        detail = f"{type(exc).__name__}: {exc.strerror or exc}"
        record_status(conn, run_id=run_id, source=SOURCE, device=name, status=CollectionStatus.UNREACHABLE,
                      started_at=started, finished_at=datetime.now(UTC), detail=f"{directory}: {detail}")  # fmt: skip
        return DropCollection(name, (), detail)
    landings = []
    for path in files:
        host = path.name[: -len(suffix)]
        try:
            with path.open("rb") as fh:
                data: str | bytes = fh.read(MAX_BYTES + 1)
                captured_at = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        except OSError as exc:
            landings.append(_unreadable(conn, run_id, host, name, f"cannot read {path.name}: {exc.strerror or exc}"))
            continue
        landings.append(land_gpu_topo(conn, run_id, host, data, f"agent:{name}", captured_at))
    return DropCollection(name, tuple(landings))


def _unreadable(conn: psycopg.Connection, run_id: str, host: str, name: str, reason: str) -> GpuTopoLanding:
    started = datetime.now(UTC)
    held = [Quarantined(source=SOURCE, reason=reason, payload=b"", device=host, context={"origin": f"agent:{name}"})]
    _, quarantined = land_collection(
        conn, run_id=run_id, source=SOURCE, device=host, table=TABLE, columns=COLUMNS, rows=[],
        quarantined=held, status=CollectionStatus.UNREACHABLE, started_at=started, detail=reason,
    )  # fmt: skip
    return GpuTopoLanding(host, CollectionStatus.UNREACHABLE, 0, quarantined, None, None)


# --- derived affinity (topology.gpu_affinity*, migration 0016) -------------------------------------

AFFINITY_COLUMNS = ("run_id", "host", "gpu", "best_nics", "path_class", "numa_node", "cpu_affinity", "rail", "rails",
                    "topology_version")  # fmt: skip
FINDING_COLUMNS = ("run_id", "host", "kind", "severity", "gpus", "nics", "detail", "evidence")


def write_affinity(
    conn: psycopg.Connection, run_id: str, fleet: FleetAffinity, topology_version: int | None, derived_at: datetime
) -> tuple[int, int]:
    """Store one derivation (replacing an earlier attempt of the same run); returns (GPU rows,
    finding rows)."""
    rows = [
        (run_id, n.host, g.gpu, list(g.best_nics), g.path_class, g.numa_node, g.cpu_affinity, g.rail, list(g.rails),
         topology_version)
        for n in fleet.nodes for g in n.gpus
    ]  # fmt: skip
    found = [
        (run_id, f.host, f.kind, f.severity.value,
         list(f.gpus or ((f.gpu,) if f.gpu is not None else ())), list(f.nics or ((f.nic,) if f.nic else ())),
         f.detail, dict(f.evidence))
        for f in fleet.findings
    ]  # fmt: skip
    with conn.transaction():
        conn.execute("DELETE FROM topology.gpu_affinity_runs WHERE run_id = %s", (run_id,))
        conn.execute(
            "INSERT INTO topology.gpu_affinity_runs (run_id, derived_at, topology_version, hosts, gpus, findings)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (run_id, derived_at, topology_version, len(fleet.nodes), len(rows), len(found)),
        )
        gpus = copy_rows(conn, "topology.gpu_affinity", AFFINITY_COLUMNS, rows)
        findings = copy_rows(conn, "topology.gpu_affinity_findings", FINDING_COLUMNS, found)
    return gpus, findings


@dataclass(frozen=True)
class StoredAffinity:
    run_id: str
    derived_at: datetime
    topology_version: int | None
    gpus: dict[str, list[dict[str, Any]]]  # host -> one object per GPU (docs/topology-json.md)


def latest_affinity(conn: psycopg.Connection) -> StoredAffinity | None:
    """The latest derivation's per-GPU rows by host, or None when none was stored."""
    run = conn.execute(
        "SELECT run_id, derived_at, topology_version FROM topology.gpu_affinity_runs ORDER BY derived_at DESC LIMIT 1"
    ).fetchone()
    if run is None:
        return None
    out: dict[str, list[dict[str, Any]]] = {}
    for host, gpu, best, path, numa, rail, rails in conn.execute(
        "SELECT host, gpu, best_nics, path_class, numa_node, rail, rails FROM topology.gpu_affinity"
        " WHERE run_id = %s ORDER BY host, gpu",
        (run[0],),
    ):
        out.setdefault(host, []).append(
            {"gpu": gpu, "best_nics": list(best), "path_class": path, "numa_node": numa, "rail": rail,
             "rails": list(rails)}
        )  # fmt: skip
    return StoredAffinity(str(run[0]), run[1], run[2], out)


def latest_node_patches(conn: psycopg.Connection, prefix: str) -> dict[str, dict[str, Any]]:
    """Host -> the partial Node ``gpufabric publish`` applies for it (the GPU-NIC affinity label
    and map annotation, :func:`core.affinity.render.node_patch`), from the latest stored
    derivation and its findings; empty when none was stored. A host the derivation did not
    cover has no entry."""
    stored = latest_affinity(conn)
    if stored is None:
        return {}
    findings: dict[str, list[AffinityFinding]] = {}
    for host, kind, detail in conn.execute(
        "SELECT host, kind, detail FROM topology.gpu_affinity_findings WHERE run_id = %s", (stored.run_id,)
    ):
        findings.setdefault(host, []).append(AffinityFinding(kind, host, detail))
    out: dict[str, dict[str, Any]] = {}
    for host, rows in stored.gpus.items():
        gpus = tuple(
            GpuAffinity(r["gpu"], tuple(r["best_nics"]), r["path_class"], r["numa_node"], None, tuple(r["rails"]))
            for r in rows
        )
        out[host] = node_patch(NodeAffinity(host, gpus, (), ()), prefix, findings.get(host, ()))
    return out
