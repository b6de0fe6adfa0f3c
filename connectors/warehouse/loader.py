"""Bulk loads with COPY, and the ops tables every source writes.

Rows go in through ``COPY ... FROM STDIN`` (binary, with the column types read from the
catalogue, so Python values are encoded exactly as Postgres stores them: no CSV quoting traps
with tabs, newlines, NULL markers or backslashes). Re-loading a window is idempotent through
:func:`replace_rows`, which deletes the window by its natural key and copies in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import set_json_dumps

from core.quality import CollectionStatus, Quarantined

_JSON_OID = psycopg.postgres.types["json"].oid
_JSONB_OID = psycopg.postgres.types["jsonb"].oid

try:
    import orjson
except ImportError:  # orjson comes with dagster-dbt; without it jsonb goes through json.dumps as before
    orjson = None  # type: ignore[assignment]

_ORJSON_OPTIONS = (
    orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS if orjson else 0
)


def _jsonb_dumps(obj: Any) -> str | bytes:
    """``json.dumps`` with the same results, through orjson.

    Why: psycopg encodes jsonb with ``json.dumps``, about 2.5 us for a small dict -- the largest
    single cost of a COPY with a jsonb column (``make bench``: half the client time). orjson takes
    0.2 us. Every input where the two could disagree goes back to ``json.dumps``: what orjson
    refuses (ints over 64 bits, datetimes, dataclasses, cycles, surrogates) and any output holding
    ``null``, which is also how orjson writes NaN and Infinity (json.dumps writes ``NaN``, which
    Postgres rejects: such a row must keep failing loudly, not turn into null). A module-level
    function, not a closure: psycopg caches the dumper class per function and would leak a class
    per call for a closure.
    """
    try:
        data = orjson.dumps(obj, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(obj)
    return json.dumps(obj) if b"null" in data else data


_JSONB_DUMPS: Callable[[Any], str | bytes] | None = _jsonb_dumps if orjson is not None else None


def _table_ident(table: str) -> sql.Composable:
    schema, _, name = table.rpartition(".")
    return sql.Identifier(schema, name) if schema else sql.Identifier(name)


def column_types(conn: psycopg.Connection, table: str, columns: Sequence[str]) -> list[int]:
    """Type OIDs of ``columns`` in ``table``, in order; a clear error for a column that is not there."""
    rows = conn.execute(
        """
        SELECT a.attname, a.atttypid::int
        FROM pg_attribute a
        WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
        """,
        (table,),
    ).fetchall()
    oids: dict[str, int] = dict(rows)
    missing = [c for c in columns if c not in oids]
    if missing:
        raise ValueError(f"{table} has no column(s) {', '.join(missing)}")
    return [oids[c] for c in columns]


def copy_rows(
    conn: psycopg.Connection,
    table: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    binary: bool = True,
) -> int:
    """COPY ``rows`` into ``table``; returns the number of rows written. Caller owns the transaction."""
    statement = sql.SQL("COPY {} ({}) FROM STDIN{}").format(
        _table_ident(table),
        sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        sql.SQL(" (FORMAT BINARY)") if binary else sql.SQL(""),
    )
    # Read the types before COPY starts: the connection takes no other query until it ends.
    # Declared types make psycopg encode each value as its column's type in either format
    # (a dict becomes jsonb, an IPv4Address inet) instead of guessing from the Python type.
    types = column_types(conn, table, columns)
    count = 0
    with conn.cursor() as cur:
        # jsonb only: a json column stores the text verbatim, and orjson's spacing differs.
        if _JSONB_DUMPS is not None and _JSONB_OID in types and _JSON_OID not in types:
            set_json_dumps(_JSONB_DUMPS, cur)  # this cursor only; the caller's connection is untouched
        with cur.copy(statement) as copy:
            copy.set_types(types)
            for row in rows:
                copy.write_row(row)
                count += 1
    return count


def replace_rows(
    conn: psycopg.Connection,
    table: str,
    key: Mapping[str, Any],
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
) -> tuple[int, int]:
    """Delete the rows matching ``key`` then copy ``rows``, atomically: a re-run of the same window
    leaves exactly one copy. Returns (deleted, inserted)."""
    where = sql.SQL(" AND ").join(sql.SQL("{} = {}").format(sql.Identifier(k), sql.Placeholder()) for k in key)
    with conn.transaction():
        deleted = conn.execute(
            sql.SQL("DELETE FROM {} WHERE {}").format(_table_ident(table), where), list(key.values())
        ).rowcount
        inserted = copy_rows(conn, table, columns, rows)
    return deleted, inserted


QUARANTINE_COLUMNS = ("run_id", "source", "device", "location", "reason", "payload", "payload_bytes", "context")


def write_quarantine(conn: psycopg.Connection, run_id: str, items: Iterable[Quarantined]) -> int:
    def rows() -> Iterable[Sequence[Any]]:
        for q in items:
            text, raw = q.clipped_payload()
            context = dict(q.context)
            if len(q.payload) > len(text):
                context.setdefault("original_length", len(q.payload))
            yield (run_id, q.source, q.device, q.location, q.reason, text.replace("\x00", "\\x00"), raw, context)

    return copy_rows(conn, "ops.quarantine", QUARANTINE_COLUMNS, rows())


def record_status(
    conn: psycopg.Connection,
    *,
    run_id: str,
    source: str,
    device: str,
    status: CollectionStatus,
    started_at: datetime,
    finished_at: datetime,
    rows_landed: int = 0,
    rows_quarantined: int = 0,
    detail: str | None = None,
) -> None:
    """Upsert one device's outcome for a run (a retried run overwrites its own row)."""
    conn.execute(
        """
        INSERT INTO ops.collection_status
            (run_id, source, device, status, detail, rows_landed, rows_quarantined, started_at, finished_at)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (run_id, source, device) DO UPDATE SET
            status = EXCLUDED.status, detail = EXCLUDED.detail, rows_landed = EXCLUDED.rows_landed,
            rows_quarantined = EXCLUDED.rows_quarantined, started_at = EXCLUDED.started_at,
            finished_at = EXCLUDED.finished_at
        """,
        (run_id, source, device, str(status), detail, rows_landed, rows_quarantined, started_at, finished_at),
    )


def land_collection(
    conn: psycopg.Connection,
    *,
    run_id: str,
    source: str,
    device: str,
    table: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    quarantined: Sequence[Quarantined],
    status: CollectionStatus,
    started_at: datetime,
    detail: str | None = None,
    key: Mapping[str, Any] | None = None,
) -> tuple[int, int]:
    """Land one device's collection atomically: its raw rows (replacing any earlier attempt of the
    same run), its quarantined input, and its status row. Every source asset ends here, so a
    retried run never duplicates rows and status always agrees with what landed.
    Returns (rows landed, rows quarantined). ``table`` must have ``run_id`` and ``source`` columns
    where ``source`` holds ``device``; ``key`` adds columns to the replaced window, for tables
    several collectors share (LLDP over SNMP and over SSH land in one table, told apart by
    ``collector``, and must not replace each other's rows of the same run).
    """
    with conn.transaction():
        _, landed = replace_rows(conn, table, {"run_id": run_id, "source": device, **(key or {})}, columns, rows)
        conn.execute(
            "DELETE FROM ops.quarantine WHERE run_id = %s AND source = %s AND device = %s", (run_id, source, device)
        )
        held = write_quarantine(conn, run_id, quarantined)
        record_status(
            conn,
            run_id=run_id,
            source=source,
            device=device,
            status=status,
            started_at=started_at,
            finished_at=datetime.now(started_at.tzinfo),
            rows_landed=landed,
            rows_quarantined=held,
            detail=detail,
        )
    return landed, held
