"""Land parsed DCGM samples in ``telemetry.dcgm_samples`` / ``dcgm_series``; manage day partitions.

Why a COPY writer of our own beside :func:`connectors.warehouse.copy_rows`: a sample row is three
fixed-width values (bigint, timestamptz, float8), and psycopg's generic ``write_row`` spends
~1.5 us a row adapting them. Packing the binary COPY format with one ``struct`` call per row is
five times cheaper, and the rows are built from the parser's columns without a tuple per sample.
This is what keeps the whole path (text → parse → COPY) within reach of ``psql \\copy`` of
pre-rendered CSV (``bench/bench_dcgm_ingest.py``).

Idempotence per (series, timestamp): the fast path COPYs straight into the partitioned table
inside a savepoint; if the window was loaded before, the primary key refuses it, the savepoint
rolls back, and the batch goes through a temporary table and ``INSERT ... ON CONFLICT DO UPDATE``
instead. So a first load costs one COPY, and a re-load (a retried run, an overlapping backfill)
still leaves exactly one row per (series, timestamp).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import psycopg
from psycopg import sql

from connectors.warehouse import copy_rows, record_status, write_quarantine
from core.quality import CollectionStatus, Quarantined
from core.telemetry import SOURCE, ParsedSamples, Series

SAMPLES = "telemetry.dcgm_samples"
SERIES = "telemetry.dcgm_series"
SERIES_COLUMNS = (
    "series_id",
    "metric",
    "hostname",
    "gpu_uuid",
    "gpu",
    "device",
    "model_name",
    "pci_bus_id",
    "gpu_instance_profile",
    "gpu_instance_id",
    "namespace",
    "pod",
    "container",
    "job",
    "labels",
    "source",
)
_PARTITION_RE = re.compile(r"dcgm_samples_p(\d{8})\Z")
_PARTITION_LOCK = 0x64636D70  # "dcmp": serialises partition DDL across processes

# Binary COPY: signature, flags, header extension length; then per row a field count and
# (length, bytes) per field; -1 length is NULL; the trailer is a field count of -1.
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
_COPY_TRAILER = b"\xff\xff"
_ROW = struct.Struct("!hiqiqid")
_ROW_NULL = struct.Struct("!hiqiqi")
_PG_EPOCH_MS = 946_684_800_000  # 2000-01-01T00:00:00Z, the origin of binary timestamps
_CHUNK = 1 << 20


_PARSE_STATUSES = (CollectionStatus.OK, CollectionStatus.PARTIAL, CollectionStatus.INVALID, CollectionStatus.NO_DATA)
DAY_MS = 86_400_000
MAX_TS_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last day a partition can be named for
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _series_problem(s: Series) -> str | None:
    texts = [s.metric, s.hostname, s.gpu_uuid, s.device, s.model_name, s.pci_bus_id, s.gpu_instance_profile,
             s.namespace, s.pod, s.container, s.job, *s.labels, *s.labels.values()]  # fmt: skip
    for text in texts:
        bad = _UNSTORABLE.search(text) if text else None
        if bad is not None:
            what = "a NUL character" if bad.group() == "\x00" else f"an unpaired surrogate (U+{ord(bad.group()):04X})"
            return f"series label holds {what}, which Postgres text and jsonb cannot hold"
    return None


def storable_samples(
    parsed: ParsedSamples, *, around_ms: int | None = None, window_ms: int = DAY_MS, device: str | None = None
) -> ParsedSamples:
    """``parsed`` without what the warehouse cannot hold, moved to its quarantine with the reason.

    Hostile exposition text gets past the parser in two ways that would fail (or flood) the load:
    a label holding a NUL (the exposition format has no escape for it, so it arrives as a raw
    byte; Postgres text and jsonb cannot hold one) and an explicit sample timestamp (dcgm-exporter
    never sends one). A timestamp beyond year 9999 fails the day-partition arithmetic; one from 1970
    beside today's would create a day partition for every day in between. So samples stamped
    before 1970 or after 9999, or, when ``around_ms`` (the scrape's time) is given, more than
    ``window_ms`` away from it, are quarantined. The common case (nothing to move) costs a min/max
    and one scan of the batch's series.
    """
    span = parsed.time_range_ms()
    low, high = (0, MAX_TS_MS) if around_ms is None else (max(0, around_ms - window_ms), around_ms + window_ms)
    bad_series = {sid: why for sid, s in parsed.series.items() if (why := _series_problem(s)) is not None}
    if not bad_series and (span is None or (low <= span[0] and span[1] <= high)):
        return parsed
    out = ParsedSamples(quarantined=list(parsed.quarantined), stats=parsed.stats.copy())
    moved = 0
    for sid, ms, value in zip(parsed.series_ids, parsed.ts_ms, parsed.values, strict=True):
        why = bad_series.get(sid)
        if why is None and not low <= ms <= high:
            why = (
                f"sample timestamp {ms} ms is outside 1970..9999"
                if around_ms is None
                else f"sample timestamp {ms} ms is more than {window_ms} ms from the scrape at {around_ms} ms"
            )
        if why is None:
            out.series[sid] = parsed.series[sid]
            out.series_ids.append(sid)
            out.ts_ms.append(ms)
            out.values.append(value)
            continue
        s = parsed.series[sid]
        payload = repr({"metric": s.metric, "labels": s.labels, "value": value, "ts_ms": ms})
        out.quarantined.append(Quarantined(SOURCE, why, payload, device, f"series {sid}"))
        moved += 1
    out.stats["samples"] -= moved
    out.stats["quarantined"] += moved
    return out


def partition_name(day: date) -> str:
    return f"dcgm_samples_p{day:%Y%m%d}"


def _day(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).date()


def ensure_partitions(conn: psycopg.Connection, first: date, last: date) -> list[str]:
    """Create the missing day partitions from ``first`` to ``last`` inclusive; returns those created.

    Under a transaction-level advisory lock, so concurrent loaders never race on the DDL.
    """
    existing = set(list_partitions(conn))
    wanted = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    missing = [d for d in wanted if d not in existing]
    if not missing:
        return []
    created: list[str] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_PARTITION_LOCK,))
        existing = set(list_partitions(conn))
        for day in missing:
            if day in existing:
                continue
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            conn.execute(
                sql.SQL(
                    "CREATE TABLE telemetry.{} PARTITION OF telemetry.dcgm_samples FOR VALUES FROM ({}) TO ({})"
                ).format(
                    sql.Identifier(partition_name(day)),
                    sql.Literal(start.isoformat()),
                    sql.Literal((start + timedelta(days=1)).isoformat()),
                )
            )
            created.append(partition_name(day))
    return created


def list_partitions(conn: psycopg.Connection) -> dict[date, str]:
    """Attached day partitions of telemetry.dcgm_samples."""
    rows = conn.execute(
        """
        SELECT c.relname FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'telemetry.dcgm_samples'::regclass
        """
    ).fetchall()
    out: dict[date, str] = {}
    for (name,) in rows:
        m = _PARTITION_RE.match(name)
        if m:
            out[datetime.strptime(m.group(1), "%Y%m%d").date()] = name
    return out


def apply_retention(
    conn: psycopg.Connection, *, keep_days: int, today: date | None = None, drop: bool = False
) -> list[str]:
    """Detach (and with ``drop`` also drop) day partitions older than ``keep_days`` days.

    Detached partitions stay as plain tables (``telemetry.dcgm_samples_pYYYYMMDD``) for archiving;
    they no longer appear in the samples table or the marts.
    """
    if keep_days < 1:
        raise ValueError("keep_days must be at least 1")
    today = today or datetime.now(UTC).date()
    cutoff = today - timedelta(days=keep_days)
    done: list[str] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_PARTITION_LOCK,))
        for day, name in sorted(list_partitions(conn).items()):
            if day >= cutoff:
                continue
            conn.execute(
                sql.SQL("ALTER TABLE telemetry.dcgm_samples DETACH PARTITION telemetry.{}").format(sql.Identifier(name))
            )
            if drop:
                conn.execute(sql.SQL("DROP TABLE telemetry.{}").format(sql.Identifier(name)))
            done.append(name)
    return done


# Series ids known to be committed in a database, per (server, database, series table file): a
# fleet re-sends the same series every scrape, and asking the database about 30,000 ids per round
# costs more than the samples' COPY. Only ids *found by a query* enter the cache, so a rolled-back
# insert can never make us skip a series that is not there; TRUNCATE gives the table a new file
# node, which starts a new cache. (Deleting series rows by hand is not supported.)
_KNOWN_SERIES: dict[tuple[str, str, int], set[int]] = {}


def _known_series(conn: psycopg.Connection) -> set[int]:
    row = conn.execute("SELECT pg_relation_filenode('telemetry.dcgm_series')").fetchone()
    key = (f"{conn.info.host}:{conn.info.port}", conn.info.dbname, int(row[0]) if row and row[0] else 0)
    return _KNOWN_SERIES.setdefault(key, set())


def upsert_series(conn: psycopg.Connection, series: Iterable[Series], source: str) -> int:
    """Insert series not seen before (first sighting wins); returns how many were new."""
    known = _known_series(conn)
    candidates = [s for s in series if s.series_id not in known]
    if not candidates:
        return 0
    present = {
        r[0]
        for r in conn.execute(
            "SELECT series_id FROM telemetry.dcgm_series WHERE series_id = ANY(%s)",
            ([s.series_id for s in candidates],),
        ).fetchall()
    }
    known.update(present)
    series = [s for s in candidates if s.series_id not in present]
    rows = [
        (
            s.series_id,
            s.metric,
            s.hostname,
            s.gpu_uuid,
            s.gpu,
            s.device,
            s.model_name,
            s.pci_bus_id,
            s.gpu_instance_profile,
            s.gpu_instance_id,
            s.namespace,
            s.pod,
            s.container,
            s.job,
            s.labels,
            source,
        )
        for s in series
    ]
    if not rows:
        return 0
    conn.execute(
        "CREATE TEMP TABLE IF NOT EXISTS _dcgm_series_load (LIKE telemetry.dcgm_series INCLUDING DEFAULTS)"
        " ON COMMIT DELETE ROWS"
    )
    conn.execute("TRUNCATE _dcgm_series_load")
    copy_rows(conn, "_dcgm_series_load", SERIES_COLUMNS, rows)
    cols = sql.SQL(", ").join(map(sql.Identifier, SERIES_COLUMNS))
    return conn.execute(
        sql.SQL(
            "INSERT INTO telemetry.dcgm_series ({}) SELECT {} FROM _dcgm_series_load ON CONFLICT DO NOTHING"
        ).format(cols, cols)
    ).rowcount


def _binary_chunks(parsed: ParsedSamples) -> Iterable[bytes]:
    pack, pack_null = _ROW.pack, _ROW_NULL.pack
    buf = bytearray(_COPY_HEADER)
    last_ms = None
    us = 0
    for sid, ms, value in zip(parsed.series_ids, parsed.ts_ms, parsed.values, strict=True):
        if ms != last_ms:
            last_ms, us = ms, (ms - _PG_EPOCH_MS) * 1000
        if value is None:
            buf += pack_null(3, 8, sid, 8, us, -1)
        else:
            buf += pack(3, 8, sid, 8, us, 8, value)
        if len(buf) >= _CHUNK:
            yield bytes(buf)
            buf.clear()
    buf += _COPY_TRAILER
    yield bytes(buf)


def _copy_into(conn: psycopg.Connection, table: sql.Composable, parsed: ParsedSamples) -> None:
    with conn.cursor() as cur, cur.copy(
        sql.SQL("COPY {} (series_id, ts, value) FROM STDIN (FORMAT BINARY)").format(table)
    ) as copy:
        for chunk in _binary_chunks(parsed):
            copy.write(chunk)


@dataclass(frozen=True)
class LoadResult:
    samples: int
    new_series: int
    replaced_window: bool  # the batch overlapped earlier loads and went through ON CONFLICT
    partitions_created: tuple[str, ...] = ()


def copy_samples(conn: psycopg.Connection, parsed: ParsedSamples, *, source: str = SOURCE) -> LoadResult:
    """Series then samples, idempotently; the caller owns the enclosing transaction."""
    if not parsed.series_ids:
        return LoadResult(0, 0, False)
    span = parsed.time_range_ms()
    assert span is not None
    created = ensure_partitions(conn, _day(span[0]), _day(span[1]))
    new_series = upsert_series(conn, parsed.series.values(), source)
    replaced = False
    try:
        with conn.transaction():
            _copy_into(conn, sql.SQL(SAMPLES), parsed)
    except psycopg.errors.UniqueViolation:
        replaced = True
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS _dcgm_samples_load (LIKE telemetry.dcgm_samples) ON COMMIT DROP")
        conn.execute("TRUNCATE _dcgm_samples_load")
        _copy_into(conn, sql.Identifier("_dcgm_samples_load"), parsed)
        conn.execute(
            """
            INSERT INTO telemetry.dcgm_samples (series_id, ts, value)
            SELECT series_id, ts, value FROM _dcgm_samples_load
            ON CONFLICT (series_id, ts) DO UPDATE SET value = EXCLUDED.value
            """
        )
        conn.execute("DROP TABLE _dcgm_samples_load")
    return LoadResult(len(parsed.series_ids), new_series, replaced, tuple(created))


def land_samples(
    conn: psycopg.Connection,
    parsed: ParsedSamples,
    *,
    run_id: str,
    device: str,
    started_at: datetime,
    source: str = SOURCE,
    status: CollectionStatus | None = None,
    detail: str | None = None,
    around_ms: int | None = None,
) -> LoadResult:
    """One target's collection, atomically: samples, quarantined input and its status row.

    What the warehouse cannot hold is quarantined first (:func:`storable_samples`; ``around_ms``
    is the scrape's time for a scraped exposition)."""
    kept = storable_samples(parsed, around_ms=around_ms, device=device)
    if kept is not parsed:  # samples moved to quarantine: the status the caller judged has changed
        parsed, status = kept, kept.status if status in (None, *_PARSE_STATUSES) else status
    with conn.transaction():
        result = copy_samples(conn, parsed, source=device)
        conn.execute(
            "DELETE FROM ops.quarantine WHERE run_id = %s AND source = %s AND device = %s", (run_id, source, device)
        )
        held = write_quarantine(conn, run_id, parsed.quarantined)
        record_status(
            conn,
            run_id=run_id,
            source=source,
            device=device,
            status=status or parsed.status,
            started_at=started_at,
            finished_at=datetime.now(UTC),
            rows_landed=result.samples,
            rows_quarantined=held,
            detail=detail,
        )
    return result
