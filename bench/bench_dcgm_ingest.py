"""DCGM ingest benchmark: exposition text → Postgres, against ``psql \\copy`` and prometheus_client.

What is measured, in one run, on one server, with the same samples:

(a) ours, end to end: the dcgm-exporter twin's exposition text for a 128-node cluster (h100-4su),
    successive scrapes 15 s apart, parsed by a fresh :class:`core.telemetry.ExpositionParser`
    (cold caches) and landed with :func:`connectors.prometheus.copy_samples` (day partitions,
    series upsert, binary COPY of the samples), one load per scrape round, one commit;
(b) the peer: ``psql \\copy`` of the same (series_id, ts, value) rows pre-rendered as CSV (rendering
    not timed, and the series rows pre-loaded for it: psql gets its input for free);
(c) ``prometheus_client.parser.text_string_to_metric_families`` on the same text, parse only
    (timed on a slice and scaled: it runs at ~20k samples/s);
(d) our parser alone, for the split of (a) between parsing and loading.

Target (issue #8): (a) at least half the speed of (b). Both loads go into the real partitioned
``telemetry.dcgm_samples`` (primary key included), truncated before each run; the stored rows are
compared by fingerprint, so a loader that drops or alters samples fails the benchmark.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH_DATA_DIR = ROOT / ".data" / "bench"
DEFAULT_SAMPLES = 1_000_000
QUICK_SAMPLES = 100_000
T0 = datetime(2026, 12, 2, 0, 0, tzinfo=UTC).timestamp()
SCRAPE_S = 15


class BenchError(RuntimeError):
    """Wrong counts or content: the figures would be meaningless."""


def use_bench_server() -> None:
    os.environ["GPUFABRIC_DATA_DIR"] = str(BENCH_DATA_DIR)
    os.environ["GPUFABRIC_PG_PORT"] = "54349"


def _progress(message: str) -> None:
    print(f"  {message}", flush=True)


def render_texts(target: int, spec_name: str) -> list[list[tuple[bytes, int, str]]]:
    """Scrape rounds (every node once) of twin exposition until ``target`` samples are reached."""
    from simulator.dcgm.exposition import nodes_of, render_node
    from simulator.generator import generate
    from simulator.spec import load_spec
    from simulator.specs import resolve_spec_path

    nodes = nodes_of(generate(load_spec(resolve_spec_path(spec_name))))
    from core.telemetry import ExpositionParser

    counter = ExpositionParser()
    per_round = sum(len(counter.parse(render_node(n, T0), 0)) for n in nodes)  # samples stored per round
    rounds: list[list[tuple[bytes, int, str]]] = []
    total = 0
    k = 0
    while total < target:
        t = T0 + k * SCRAPE_S
        rounds.append([(render_node(n, t).encode(), int(t * 1000), f"http://{n.hostname}:9400/metrics") for n in nodes])
        total += per_round
        k += 1
    return rounds


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench dcgm_ingest", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SAMPLES:,} samples")
    parser.add_argument("--samples", type=int, default=None, help=f"samples to ingest (default {DEFAULT_SAMPLES:,})")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per method; the best counts")
    parser.add_argument("--spec", default="h100-4su")
    parser.add_argument("--prom-client-samples", type=int, default=50_000)
    args = parser.parse_args(list(argv))
    target = args.samples or (QUICK_SAMPLES if args.quick else DEFAULT_SAMPLES)
    try:
        return run(target, args.runs, args.spec, args.prom_client_samples)
    except BenchError as err:
        print(f"  FAILED: {err}", file=sys.stderr, flush=True)
        return 1


def run(target: int, runs: int, spec_name: str, prom_client_samples: int) -> int:
    use_bench_server()
    import psycopg
    from prometheus_client.parser import text_string_to_metric_families
    from psycopg import sql

    from bench.bench_copy_loader import _psql_command
    from connectors.prometheus import copy_samples, ensure_partitions
    from connectors.warehouse import open_warehouse
    from core.telemetry import ExpositionParser, ParsedSamples

    start = time.perf_counter()
    rounds = render_texts(target, spec_name)
    texts = [item for rnd in rounds for item in rnd]
    megabytes = sum(len(t) for t, _, _ in texts) / 1e6
    _progress(f"rendered {len(rounds)} scrape rounds x {len(rounds[0])} nodes ({megabytes:,.0f} MB"
              f" of exposition) in {time.perf_counter() - start:.1f}s")

    base = open_warehouse(run_migrations=False)
    name = "bench_dcgm"
    admin_url = base.base_url.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    wh = open_warehouse(base.base_url.set(database=name).render_as_string(hide_password=False))
    base.dispose()
    psql_base, psql_env = _psql_command(wh)

    def truncate(series_too: bool) -> None:
        with wh.connect(autocommit=True) as conn:
            conn.execute("TRUNCATE telemetry.dcgm_samples")
            if series_too:
                conn.execute("TRUNCATE telemetry.dcgm_series")
            conn.execute("VACUUM ANALYZE telemetry.dcgm_series")

    def fingerprint() -> tuple[int, str]:
        with wh.connect() as conn:
            row = conn.execute(
                "SELECT count(*), coalesce(sum(hashtextextended(s::text, 0)::numeric), 0)::text "
                "FROM (SELECT series_id, ts, value FROM telemetry.dcgm_samples) s"
            ).fetchone()
        assert row is not None
        return int(row[0]), str(row[1])

    with wh.connect() as conn:
        day = datetime.fromtimestamp(T0, UTC).date()
        ensure_partitions(conn, day, day)
        conn.commit()

    # (a) ours end to end
    ours: list[float] = []
    parse_only: list[float] = []
    n_samples = 0
    for attempt in range(1, runs + 1):
        truncate(series_too=True)
        t_start = time.perf_counter()
        p = ExpositionParser()
        with wh.connect() as conn:
            n = 0
            for rnd in rounds:
                batch = ParsedSamples()
                for body, ts, target_url in rnd:
                    batch.extend(p.parse(body, ts, device=target_url))
                n += copy_samples(conn, batch, source="bench").samples
            conn.commit()
        ours.append(time.perf_counter() - t_start)
        n_samples = n
        _progress(f"run {attempt}/{runs} ours (parse + COPY): {ours[-1]:.2f}s, {n:,} samples")
        t_start = time.perf_counter()
        p2 = ExpositionParser()
        for body, ts, target_url in texts:
            p2.parse(body, ts, device=target_url)
        parse_only.append(time.perf_counter() - t_start)
    reference = fingerprint()
    if reference[0] != n_samples:
        raise BenchError(f"ours stored {reference[0]} rows, reported {n_samples}")

    # (b) psql \copy of the same rows, pre-rendered
    with wh.connect() as conn:
        rows = conn.execute("SELECT series_id, ts, value FROM telemetry.dcgm_samples").fetchall()
    with tempfile.TemporaryDirectory(prefix="dcgm-ingest-", dir=BENCH_DATA_DIR) as tmp:
        csv_path = Path(tmp) / "samples.csv"
        with csv_path.open("w") as out:
            for sid, ts, value in rows:
                out.write(f"{sid},{ts.isoformat()},{'' if value is None else repr(value)}\n")
        del rows
        psql: list[float] = []
        for attempt in range(1, runs + 1):
            truncate(series_too=False)
            t_start = time.perf_counter()
            copy = f"\\copy telemetry.dcgm_samples (series_id, ts, value) FROM '{csv_path}' WITH (FORMAT csv)"
            done = subprocess.run([*psql_base, "-c", copy], env=psql_env, capture_output=True, text=True)
            psql.append(time.perf_counter() - t_start)
            if done.returncode != 0 or done.stdout.strip() != f"COPY {n_samples}":
                raise BenchError(f"psql \\copy: exit {done.returncode}: {done.stdout.strip()} {done.stderr.strip()}")
            _progress(f"run {attempt}/{runs} psql \\copy CSV: {psql[-1]:.2f}s")
    if fingerprint() != reference:
        raise BenchError("psql stored different content from ours")

    # (c) prometheus_client's parser on a slice of the same text
    slice_texts: list[str] = []
    counted = 0
    for body, _, _ in texts:
        slice_texts.append(body.decode())
        counted += body.count(b"\n") - 2 * 28
        if counted >= prom_client_samples:
            break
    t_start = time.perf_counter()
    pc_samples = 0
    for text in slice_texts:
        for family in text_string_to_metric_families(text):
            pc_samples += len(family.samples)
    pc_s = time.perf_counter() - t_start
    pc_rate = pc_samples / pc_s
    lines_total = sum(body.count(b"\n") - 2 * 28 for body, _, _ in texts)
    wh.dispose()

    best_ours, best_psql, best_parse = min(ours), min(psql), min(parse_only)
    print()
    print(f"  {'method':<44} {'best s':>8} {'median s':>9} {'samples/s':>11}")
    print(f"  {'ours: text -> parse -> COPY (end to end)':<44} {best_ours:>8.2f} {statistics.median(ours):>9.2f}"
          f" {n_samples / best_ours:>11,.0f}")
    print(f"  {'  of which parsing only':<44} {best_parse:>8.2f} {statistics.median(parse_only):>9.2f}"
          f" {lines_total / best_parse:>11,.0f}")
    peer_name = "psql \\copy of pre-rendered CSV (peer)"
    print(f"  {peer_name:<44} {best_psql:>8.2f} {statistics.median(psql):>9.2f}"
          f" {n_samples / best_psql:>11,.0f}")
    print(f"  {'prometheus_client parser (parse only)':<44} {lines_total / pc_rate:>8.2f}* {'':>9}"
          f" {pc_rate:>11,.0f}")
    print(f"  * timed on {pc_samples:,} samples and scaled to {lines_total:,} exposition lines")
    print(f"  exposition lines {lines_total:,} -> {n_samples:,} samples stored (MIG device-field repeats collapse)")
    print(f"  load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print()
    print(f"  ours end to end: {best_psql / best_ours:.2f}x the speed of psql \\copy (target >= 0.50)")
    print(f"  ours parse only: {(lines_total / best_parse) / pc_rate:.1f}x prometheus_client's parser")
    print(f"  run id {uuid.uuid4().hex[:8]}; command: python -m bench --only dcgm_ingest")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
