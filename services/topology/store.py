"""The warehouse side of topology: read the latest observations, write and read versions.

Reads take, per raw table and per source, the rows of that source's latest collection (the
newest ``collected_at``): a source whose last run failed landed nothing for it, so its previous
good collection is still what the model is built from (fail soft), and two fabric managers
merge as two sources. Writes add a version only when the model's content hash differs from the
latest version's, and store the whole JSON contract beside its rows.
"""

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from connectors.warehouse import copy_rows, write_quarantine
from core.quality import Quarantined
from core.topology import Change, Observations, TopologyModel, diff_models, summarise
from services.topology import rows as R

T = TypeVar("T")

# (table, the adapter for its rows); the latest collection per source of each is read.
SOURCES: dict[str, tuple[str, Callable[[dict[str, Any]], Any]]] = {
    "ib_nodes": ("raw.ib_nodes", R.ib_node),
    "ib_links": ("raw.ib_links", R.ib_link),
    "dcim": ("raw.dcim_inventory", R.dcim_node),
    "nvlink": ("raw.nvlink_domains", R.nvlink),
    "lldp": ("raw.lldp_neighbor_observations", R.lldp),
    "eth_systems": ("raw.snmp_systems", R.eth_system),
    "eth_interfaces": ("raw.snmp_interfaces", R.eth_interface),
}

LOCK_KEY = 0x70706F6C6F6779  # pg advisory lock id for version allocation ("topology")


def _latest(conn: psycopg.Connection, table: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Rows of each source's newest collection, and {source: run_id} for the record."""
    schema, name = table.split(".")
    ident = sql.Identifier(schema, name)
    query = sql.SQL(
        "WITH latest AS (SELECT DISTINCT ON (source) source, run_id FROM {t} ORDER BY source, collected_at DESC) "
        "SELECT t.* FROM {t} t JOIN latest USING (source, run_id)"
    ).format(t=ident)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query).fetchall()
    runs = {str(r["source"]): str(r["run_id"]) for r in rows}
    return rows, runs


@dataclass
class Loaded:
    observations: Observations
    runs: dict[str, dict[str, str]]  # table key -> {source: run_id}
    rejected: list[Quarantined]


def load_observations(conn: psycopg.Connection) -> Loaded:
    """Every source's latest rows as observation records; a row the adapter cannot read is
    quarantined with the reason, never dropped silently and never fatal."""
    fields: dict[str, list[Any]] = {}
    runs: dict[str, dict[str, str]] = {}
    rejected: list[Quarantined] = []
    for key, (table, adapt) in SOURCES.items():
        rows, runs[key] = _latest(conn, table)
        out = []
        for row in rows:
            try:
                out.append(adapt(row))
            except (KeyError, TypeError, ValueError) as exc:
                rejected.append(
                    Quarantined(
                        source="topology", reason=f"{table} row unreadable: {type(exc).__name__}: {exc}",
                        payload=json.dumps(row, default=str)[:4096], device=str(row.get("source")), location=table,
                    )
                )  # fmt: skip
        fields[key] = out
    return Loaded(Observations(**fields), runs, rejected)


def latest_version(conn: psycopg.Connection) -> tuple[int, str] | None:
    row = conn.execute("SELECT version, content_hash FROM topology.versions ORDER BY version DESC LIMIT 1").fetchone()
    return (int(row[0]), str(row[1])) if row else None


def load_model(conn: psycopg.Connection, version: int | None = None) -> dict[str, Any] | None:
    """The stored JSON contract of ``version`` (default: the latest), or None."""
    if version is None:
        row = conn.execute("SELECT model FROM topology.versions ORDER BY version DESC LIMIT 1").fetchone()
    else:
        row = conn.execute("SELECT model FROM topology.versions WHERE version = %s", (version,)).fetchone()
    return dict(row[0]) if row else None


def list_versions(conn: psycopg.Connection) -> list[tuple[int, datetime, str, dict[str, Any]]]:
    rows = conn.execute("SELECT version, created_at, run_id, counts FROM topology.versions ORDER BY version").fetchall()
    return [(int(r[0]), r[1], str(r[2]), dict(r[3])) for r in rows]


@dataclass
class Written:
    version: int
    created: bool  # False: nothing changed, ``version`` is the existing latest
    changes: list[Change]


def write_snapshot(
    conn: psycopg.Connection,
    model: TopologyModel,
    *,
    run_id: str,
    created_at: datetime,
    inputs: dict[str, Any],
    rejected: Sequence[Quarantined] = (),
) -> Written:
    """Add a version if the content changed since the latest; one transaction, serialised by an
    advisory lock so two derivations cannot take the same version number."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        if rejected:
            write_quarantine(conn, run_id, rejected)
        latest = latest_version(conn)
        digest = model.content_hash()
        if latest is not None and latest[1] == digest:
            return Written(latest[0], False, [])
        version = 1 if latest is None else latest[0] + 1
        doc = model.to_json(version=version, created_at=created_at)
        previous = load_model(conn, latest[0]) if latest else None
        changes = diff_models(previous, doc) if previous else []  # a first version has no diff
        counts = {
            "switches": len(model.switches),
            "compute_hosts": len(model.compute_hosts()),
            "hosts": len(model.hosts),
            "links": len(model.links),
            "findings": len(model.findings),
            "changes": summarise(changes),
        }
        conn.execute(
            "INSERT INTO topology.versions (version, created_at, run_id, content_hash, parent_version, inputs, counts,"
            " model) VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s::jsonb)",
            (version, created_at, run_id, digest, latest[0] if latest else None, json.dumps(inputs, default=str),
             json.dumps(counts), json.dumps(doc, default=str)),
        )  # fmt: skip
        _rows(conn, version, doc, changes, latest[0] if latest else None)
        return Written(version, True, changes)


def _rows(conn: psycopg.Connection, v: int, doc: dict[str, Any], changes: list[Change], parent: int | None) -> None:
    copy_rows(
        conn, "topology.switches",
        ("version", "id", "name", "fabric", "identity_kind", "tier", "tier_reason", "model", "uplinks", "downlinks",
         "rail"),
        ((v, s["id"], s["name"], s["fabric"], s["identity"]["kind"], s["tier"], s["tier_reason"], s["model"],
          s["uplinks"], s["downlinks"], s["rail"]) for s in doc["switches"]),
    )  # fmt: skip
    copy_rows(
        conn, "topology.hosts",
        ("version", "host", "role", "role_reason", "block", "spine_group", "pod", "nvlink_domain", "nvlink_sub_domain",
         "rack", "valid", "invalid_reason", "hcas", "sources"),
        ((v, h["name"], h["role"], h["role_reason"], h["domains"]["block"], h["domains"]["spine_group"],
          h["domains"]["pod"], h["nvlink"]["domain"], h["nvlink"]["sub_domain"], h["rack"], h["valid"],
          h["invalid_reason"], h["hcas"], h["sources"]) for h in doc["hosts"]),
    )  # fmt: skip
    copy_rows(
        conn, "topology.domains",
        ("version", "level", "id", "name", "members", "hosts", "design_size", "valid", "reason"),
        ((v, d["level"], d["id"], d["name"], d["members"], d["hosts"], d["design_size"], d["valid"], d["reason"])
         for d in doc["domains"]),
    )  # fmt: skip
    copy_rows(
        conn, "topology.links",
        ("version", "a_device", "a_port", "b_device", "b_port", "kind", "speed_gbps", "width", "both_sides",
         "evidence"),
        ((v, lk["a"]["device"], lk["a"]["port"], lk["b"]["device"], lk["b"]["port"], lk["kind"], lk["speed_gbps"],
          lk["width"], lk["evidence"]["both_sides"], lk["evidence"]) for lk in doc["links"]),
    )  # fmt: skip
    copy_rows(
        conn, "topology.findings",
        ("version", "seq", "kind", "severity", "message", "devices", "ports", "evidence"),
        ((v, i, f["kind"], f["severity"], f["message"], f["devices"],
          [f"{p['device']}:{p['port']}" for p in f["ports"]], f["evidence"]) for i, f in enumerate(doc["findings"])),
    )  # fmt: skip
    copy_rows(
        conn, "topology.diffs",
        ("version", "from_version", "section", "change", "key", "before", "after"),
        ((v, parent, c.section, c.change, c.key, c.before, c.after) for c in changes),
    )  # fmt: skip
