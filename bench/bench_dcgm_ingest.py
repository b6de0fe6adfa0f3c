"""DCGM ingest benchmark: exposition text → Postgres, against ``psql \\copy`` and prometheus_client.

What is measured, in one run, on one server, with the same samples:

(a) ours, end to end: the dcgm-exporter twin's exposition text for a 128-node cluster (h100-4su),
    successive scrapes 15 s apart, parsed by a fresh :class:`core.telemetry.ExpositionParser`
    (cold caches) and landed with :func:`connectors.prometheus.copy_samples` (day partitions,
    series upsert, binary COPY of the samples), one load per scrape round, one commit;
(b) the peer: ``psql \\copy`` of the same (series_id, ts, value) rows pre-rendered as CSV (rendering
    not timed, and the series rows pre-loaded for it: psql gets its input for free);
(c) ``prometheus_client.parser.text_string_to_metric_families`` on the same text, parse only
    (timed on a slice: it runs at ~20k samples/s);
(d) our parser alone, for the split of (a) between parsing and loading.

Target (issue #8): (a) at least half the speed of (b). Both loads go into the real partitioned
``telemetry.dcgm_samples`` (primary key included), truncated before each run; the stored rows are
compared by fingerprint, so a loader that drops or alters samples fails the benchmark. Every round
times (a), (b) and (d), the order rotating from round to round; figures are the median with the
spread over the rounds, and the speed ratio is taken per round.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench.common import Spread, ratios, rotation

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
    parser.add_argument("--runs", type=int, default=3, help="rounds; each times every method, order rotating")
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

    def load_ours() -> int:
        """(a) ours end to end: fresh parser, parse every scrape round, COPY, one commit."""
        truncate(series_too=True)
        p = ExpositionParser()
        with wh.connect() as conn:
            n = 0
            for rnd in rounds:
                batch = ParsedSamples()
                for body, ts, target_url in rnd:
                    batch.extend(p.parse(body, ts, device=target_url))
                n += copy_samples(conn, batch, source="bench").samples
            conn.commit()
        return n

    def parse_alone() -> None:
        """(d) our parser alone on the same texts."""
        p2 = ExpositionParser()
        for body, ts, target_url in texts:
            p2.parse(body, ts, device=target_url)

    # (c) prometheus_client's parser on a slice of the same text (it runs at ~20k samples/s)
    slice_texts: list[str] = []
    counted = 0
    for body, _, _ in texts:
        slice_texts.append(body.decode())
        counted += body.count(b"\n") - 2 * 28
        if counted >= prom_client_samples:
            break
    pc_samples = sum(len(f.samples) for text in slice_texts for f in text_string_to_metric_families(text))
    lines_total = sum(body.count(b"\n") - 2 * 28 for body, _, _ in texts)

    def prom_client_parse() -> None:
        for text in slice_texts:
            for _family in text_string_to_metric_families(text):
                pass

    # One unmeasured load of ours: it stores the series the peer's rows refer to, and the rows
    # rendered to CSV for the peer (psql gets its input for free).
    n_samples = load_ours()
    reference = fingerprint()
    if reference[0] != n_samples:
        raise BenchError(f"ours stored {reference[0]} rows, reported {n_samples}")
    with wh.connect() as conn:
        rows = conn.execute("SELECT series_id, ts, value FROM telemetry.dcgm_samples").fetchall()
    ours: list[float] = []
    parse_only: list[float] = []
    psql: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dcgm-ingest-", dir=BENCH_DATA_DIR) as tmp:
        csv_path = Path(tmp) / "samples.csv"
        with csv_path.open("w") as out:
            for sid, ts, value in rows:
                out.write(f"{sid},{ts.isoformat()},{'' if value is None else repr(value)}\n")
        del rows

        def load_psql() -> None:
            """(b) the peer: psql \\copy of the same rows (series rows already there)."""
            truncate(series_too=False)
            copy = f"\\copy telemetry.dcgm_samples (series_id, ts, value) FROM '{csv_path}' WITH (FORMAT csv)"
            done = subprocess.run([*psql_base, "-c", copy], env=psql_env, capture_output=True, text=True)
            if done.returncode != 0 or done.stdout.strip() != f"COPY {n_samples}":
                raise BenchError(f"psql \\copy: exit {done.returncode}: {done.stdout.strip()} {done.stderr.strip()}")

        # Every round runs ours, the peer and the parser alone, the order rotating over the rounds;
        # each load is checked against the first one's fingerprint.
        prom: list[float] = []
        timings = {"ours": ours, "psql": psql, "parse": parse_only, "prom_client": prom}
        loads = {"ours": load_ours, "psql": load_psql, "parse": parse_alone, "prom_client": prom_client_parse}
        for attempt in range(runs):
            for key in rotation(list(loads), attempt):
                t_start = time.perf_counter()
                loads[key]()
                timings[key].append(time.perf_counter() - t_start)
                if key in ("ours", "psql") and fingerprint() != reference:
                    raise BenchError(f"{key} stored different content from the first load of ours")
                _progress(f"round {attempt + 1}/{runs} {key}: {timings[key][-1]:.2f}s")

    wh.dispose()

    print()
    print(f"  {'method':<44} {'samples/s: median (min .. max over ' + str(runs) + ' rounds)'}")
    ours_rate = Spread.of([n_samples / t for t in ours]).fmt(",.0f")
    print(f"  {'ours: text -> parse -> COPY (end to end)':<44} {ours_rate}")
    print(f"  {'  of which parsing only':<44} {Spread.of([lines_total / t for t in parse_only]).fmt(',.0f')}"
          " (exposition lines/s)")
    peer_name = "psql \\copy of pre-rendered CSV (peer)"
    print(f"  {peer_name:<44} {Spread.of([n_samples / t for t in psql]).fmt(',.0f')}")
    print(f"  {'prometheus_client parser (parse only)':<44} {Spread.of([pc_samples / t for t in prom]).fmt(',.0f')}"
          f" (on a slice of {pc_samples:,} samples)")
    print(f"  exposition lines {lines_total:,} -> {n_samples:,} samples stored (MIG device-field repeats collapse)")
    print(f"  load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print()
    speed = Spread.of(ratios(psql, ours))  # speed ours / peer = time peer / ours, per round
    print(f"  ours end to end: {speed.fmt('.2f', 'x')} the speed of psql \\copy (target >= 0.50)")
    parse_speed = Spread.of([(lines_total / a) / (pc_samples / b) for a, b in zip(parse_only, prom, strict=True)])
    print(f"  ours parse only: {parse_speed.fmt('.1f', 'x')} prometheus_client's parser speed")
    print(f"  run id {uuid.uuid4().hex[:8]}; command: python -m bench --only dcgm_ingest")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
