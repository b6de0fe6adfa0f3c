"""The warehouse side of publishing: record every publish and find what to roll back to."""

import json
from datetime import datetime
from typing import Any

import psycopg

from connectors.kube.publish import Plan
from connectors.warehouse import copy_rows
from core.publish import DesiredState


def record_run(
    conn: psycopg.Connection,
    *,
    started_at: datetime,
    cluster: str,
    topology_version: int,
    mode: str,
    status: str,
    forced: bool,
    field_manager: str,
    state: DesiredState,
    plan: Plan | None,
    message: str | None = None,
    rollback_of: int | None = None,
) -> int:
    """One row per publish attempt plus its label/object diff rows, in one transaction."""
    with conn.transaction():
        row = conn.execute(
            "INSERT INTO publish.runs (started_at, cluster, topology_version, mode, status, forced, field_manager,"
            " rollback_of, counts, message, desired) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s::jsonb)"
            " RETURNING id",
            (started_at, cluster, topology_version, mode, status, forced, field_manager, rollback_of,
             json.dumps(plan.counts() if plan else {}), message, json.dumps(state.to_json())),
        ).fetchone()  # fmt: skip
        assert row is not None
        run_id = int(row[0])
        if plan is not None:
            copy_rows(
                conn, "publish.label_changes", ("run_id", "node", "kind", "key", "change", "before", "after"),
                [(run_id, d.node, kind, c.key, c.change, c.before, c.after)
                 for d in plan.changed_nodes for kind, changes in (("label", d.labels), ("resource", d.resources))
                 for c in changes],
            )  # fmt: skip
            copy_rows(
                conn, "publish.object_changes", ("run_id", "kind", "namespace", "name", "change", "before", "after"),
                [(run_id, c.kind, c.namespace, c.name, c.change, dict(c.before) if c.before else None,
                  dict(c.after) if c.after else None) for c in plan.object_changes if c.change != "unchanged"],
            )  # fmt: skip
        copy_rows(
            conn, "publish.label_values", ("run_id", "key", "value", "level", "domain_id", "readable"),
            [(run_id, v.key, v.value, v.level, v.domain_id, v.readable) for v in state.values],
        )
    if not conn.autocommit:
        # Reads before this made the block above a savepoint; a refused publish raises right
        # after recording, and the record must survive that.
        conn.commit()
    return run_id


def applied_run_for(conn: psycopg.Connection, topology_version: int, cluster: str) -> tuple[int, dict[str, Any]] | None:
    """The newest applied publish of ``topology_version`` to ``cluster``: (run id, desired state)."""
    row = conn.execute(
        "SELECT id, desired FROM publish.runs WHERE topology_version = %s AND cluster = %s AND status = 'applied'"
        " ORDER BY id DESC LIMIT 1",
        (topology_version, cluster),
    ).fetchone()
    return (int(row[0]), dict(row[1])) if row else None


def last_applied_run(conn: psycopg.Connection, cluster: str) -> dict[str, Any] | None:
    """The newest applied (or rolled back) publish to ``cluster``: id, topology version, start."""
    row = conn.execute(
        "SELECT id, topology_version, started_at FROM publish.runs WHERE cluster = %s AND status = 'applied'"
        " ORDER BY id DESC LIMIT 1",
        (cluster,),
    ).fetchone()
    return {"id": int(row[0]), "topology_version": int(row[1]), "started_at": row[2]} if row else None


def history(conn: psycopg.Connection, limit: int = 20) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT id, started_at, cluster, topology_version, mode, status, forced, rollback_of, counts, message"
        " FROM publish.runs ORDER BY id DESC LIMIT %s",
        (limit,),
    ).fetchall()
    keys = ("id", "started_at", "cluster", "topology_version", "mode", "status", "forced", "rollback_of", "counts",
            "message")  # fmt: skip
    return [dict(zip(keys, r, strict=True)) for r in rows]
