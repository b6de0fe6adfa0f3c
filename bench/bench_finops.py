"""The FinOps query pack on a year of a 1,024-GPU cluster running 10,000 pods a day.

Set-up (timed, reported, not compared): a fresh database on the bench server, the price book
loaded from a site file, the year generated (``simulator/agents/year.py``) and COPYed into
``raw.k8s_pod_snapshots`` / ``raw.k8s_node_snapshots``, and one full ``dbt seed`` + ``dbt run`` of
the cost fact and everything it reads (no data tests: the suite runs those).

Rows:

* **query pack** -- each ``sql/queries/*.sql`` as ``finops_reader`` with ``gpufabric.as_of`` at the
  end of the data (so "this month" and "this week" are the last ones), p95 over the rounds (ours
  read the rollups dbt keeps beside the fact: ``cost_summary_hourly``, ``agent_tree_pods_monthly``),
  against the **peer**: the same question straight off the cost fact
  (``sql/queries/from_fact/``, or the same SQL for a question that never read the fact) on an
  untuned copy of the fact (``CREATE TABLE AS``, no index, same rows), the two measured back to
  back in interleaved rounds (bench/common.py), and their answers compared (a tuning that changed
  an answer fails the bench);
* **one more hour** -- the next hour's snapshots landed, then the incremental ``dbt run`` of the
  cost fact, every model it reads and the two rollups (``COST_FACT_SELECT``: the incremental pod
  intervals and pod hours recompute only the pods seen in the lookback, the fact and the rollups
  only the lookback's hours or pods), against nothing: the peer would be a full rebuild, timed
  once as the set-up's build; the seconds of each model are printed from dbt's own log;
* **disk** -- the cost fact with its indexes, and the rollups, per month of data.

The issue's goals: p95 under 2 s per question, the hour folded in under 60 s; the exit status is
1 if one is missed. ``--quick`` uses a month (30 days), ``--days N`` any length.

``python -m bench --only finops [--quick] [-- --rounds 7 --days 365]``
"""

from __future__ import annotations

import argparse
import math
import re
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import Spread, interleaved

ROOT = Path(__file__).resolve().parents[1]
QUERIES = ROOT / "sql" / "queries"
FACT = "finops.gpu_cost_hourly"
PEER = "finops.gpu_cost_hourly_untuned"
ROLLUPS = ("finops.cost_summary_hourly", "finops.agent_tree_pods_monthly")
P95_GOAL_S = 2.0
HOUR_GOAL_S = 60.0
SITE = """version: 1
rate_cards:
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: "*", usd_per_gpu_hour: 4.00}
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: interactive, usd_per_gpu_hour: 3.50}
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: batch, usd_per_gpu_hour: 2.50}
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: standard, usd_per_gpu_hour: 3.00}
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: spot, usd_per_gpu_hour: 1.20}
  - {gpu_model: NVIDIA-B200, tier: "*", usd_per_gpu_hour: 6.50}
  - {gpu_model: NVIDIA-B200, tier: interactive, usd_per_gpu_hour: 5.80}
  - {gpu_model: NVIDIA-B200, tier: batch, usd_per_gpu_hour: 4.20}
  - {gpu_model: NVIDIA-B200, tier: standard, usd_per_gpu_hour: 5.00}
"""


# dbt's log line per model: "1 of 9 OK created sql incremental model staging.x ... [INSERT 0 5 in 1.23s]"
MODEL_TIME = re.compile(r"OK created sql (\w+) model (\S+) \.+ \[.*? in (\d+\.\d+)s\]")


def model_seconds(dbt_output: str) -> str:
    return ", ".join(f"{name.split('.')[-1]} {float(s):.1f} s ({kind})"
                     for kind, name, s in MODEL_TIME.findall(dbt_output))


def p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_finops", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a month (30 days) and 3 rounds")
    parser.add_argument("--days", type=int, default=None, help="days of data (default 365; --quick 30)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per query (default 7; --quick 3)")
    parser.add_argument("--keep", action="store_true", help="keep the database (its name is printed)")
    args = parser.parse_args(list(argv))
    days = args.days or (30 if args.quick else 365)
    rounds = args.rounds or (3 if args.quick else 7)

    from psycopg import sql

    from connectors.warehouse import copy_rows, open_warehouse
    from core.finops.records import NODE_COLUMNS, POD_COLUMNS
    from services.price_book import COST_FACT_SELECT, load_price_book, run_dbt
    from settings import parse_settings
    from simulator.agents.year import YearCounts, YearSpec, node_rows, pod_rows

    server = open_warehouse()
    with server.scratch_database(f"bench_finops_{days}d", keep=args.keep) as url:
        wh = open_warehouse(url)
        # one more day generated than landed, so "the next hour" exists
        spec = YearSpec(days=days + 1)
        end = spec.start + timedelta(days=days)
        with wh.connect() as conn:
            load_price_book(conn, parse_settings(SITE, "bench-site.yaml").rate_cards, "bench-site.yaml")

        counts = YearCounts()
        t0 = time.perf_counter()
        with wh.connect() as conn, conn.transaction():
            n_nodes = copy_rows(conn, "raw.k8s_node_snapshots", NODE_COLUMNS, node_rows(spec, until=end))
            n_pods = copy_rows(conn, "raw.k8s_pod_snapshots", POD_COLUMNS, pod_rows(spec, counts, until=end))
        landed_s = time.perf_counter() - t0
        print(f"set-up: {days} days of {spec.gpus:,} GPUs, {counts.pods:,} pods finished ({counts.not_started:,} "
              f"never started): {n_pods:,} pod rows + {n_nodes:,} node rows generated and COPYed in {landed_s:.0f} s "
              f"({(n_pods + n_nodes) / landed_s:,.0f} rows/s)", flush=True)
        with wh.connect() as conn:
            conn.execute("ANALYZE raw.k8s_pod_snapshots")
            conn.execute("ANALYZE raw.k8s_node_snapshots")
            conn.commit()
        t0 = time.perf_counter()
        # seeds and models only: the data tests are the test suite's business (on a year, scanning
        # every row, they would take longer than the build)
        out = run_dbt(wh, ["seed", "--select", "+gpu_cost_hourly"])
        out += run_dbt(wh, ["run", "--select", COST_FACT_SELECT, "cost_anomalies"])
        built_s = time.perf_counter() - t0
        print(f"  models: {model_seconds(out)}", flush=True)
        with wh.connect() as conn:
            lines = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(FACT))).fetchone()
            conn.execute(sql.SQL("CREATE TABLE {} AS SELECT * FROM {}").format(sql.SQL(PEER), sql.SQL(FACT)))
            conn.execute(sql.SQL("ANALYZE {}").format(sql.SQL(FACT)))
            conn.execute(sql.SQL("ANALYZE {}").format(sql.SQL(PEER)))
            conn.commit()
            size = conn.execute("SELECT pg_total_relation_size(%s), pg_total_relation_size(%s), "
                                "pg_total_relation_size(%s) + pg_total_relation_size(%s)",
                                (FACT, PEER, *ROLLUPS)).fetchone()
        assert lines is not None and size is not None
        months = days / (365 / 12)
        print(f"full build of the cost fact: {lines[0]:,} lines in {built_s:.0f} s "
              f"(measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC)", flush=True)

        as_of = (end - timedelta(hours=1)).astimezone(UTC).isoformat()
        failed = 0
        with wh.connect(autocommit=True) as conn:
            conn.execute("SET ROLE finops_reader")
            conn.execute("SELECT set_config('gpufabric.as_of', %s, false)", (as_of,))

            def query(text: str) -> Any:
                return lambda: conn.execute(text).fetchall()

            print(f"\n{'question':<40} {'p95 ours':>9} {'p95 peer':>9} {'peer/ours':>10}  ours (min/median/max)")
            for path in sorted(QUERIES.glob("*.sql")):
                ours = path.read_text()
                straight = QUERIES / "from_fact" / path.name
                peer = (straight.read_text() if straight.exists() else ours).replace(FACT, PEER)
                if conn.execute(ours).fetchall() != conn.execute(peer).fetchall():
                    failed += 1
                    print(f"{path.stem}: ANSWERS DIFFER between the tuned table and the untuned copy", flush=True)
                times = interleaved({"ours": query(ours), "peer": query(peer)}, rounds)
                a, b = p95(times["ours"]), p95(times["peer"])
                flag = "" if a < P95_GOAL_S else f"  MISSED (goal < {P95_GOAL_S} s)"
                failed += a >= P95_GOAL_S
                uses_fact = "" if FACT in peer.replace(PEER, FACT) else "  (does not read the fact: same SQL)"
                print(f"{path.stem:<40} {a:>8.3f}s {b:>8.3f}s {b / a:>9.1f}x  "
                      f"{Spread.of(times['ours']).fmt('.3f', ' s')}{flag}{uses_fact}", flush=True)

        with wh.connect() as conn, conn.transaction():
            more = copy_rows(conn, "raw.k8s_node_snapshots", NODE_COLUMNS,
                             node_rows(spec, since=end, until=end + timedelta(hours=1)))
            more += copy_rows(conn, "raw.k8s_pod_snapshots", POD_COLUMNS,
                              pod_rows(spec, since=end, until=end + timedelta(hours=1)))
        t0 = time.perf_counter()
        out = run_dbt(wh, ["run", "--select", COST_FACT_SELECT])  # what the finops_cost job builds
        hour_s = time.perf_counter() - t0
        flag = "" if hour_s < HOUR_GOAL_S else f"  MISSED (goal < {HOUR_GOAL_S:.0f} s)"
        failed += hour_s >= HOUR_GOAL_S
        print(f"\none more hour ({more:,} rows landed) folded in incrementally: {hour_s:.1f} s "
              f"(a full rebuild: {built_s:.0f} s, {built_s / hour_s:.1f}x){flag}")
        print(f"  models: {model_seconds(out)}")
        print(f"disk: cost fact with indexes {size[0] / 2**20:,.0f} MiB = {size[0] / 2**20 / months:,.0f} MiB per month"
              f" (the untuned copy: {size[1] / 2**20 / months:,.0f} MiB per month); the query pack's rollups"
              f" {size[2] / 2**20 / months:,.1f} MiB per month")
        wh.dispose()
        if args.keep:
            print(f"kept database {wh.base_url.database}")
    server.dispose()
    return 1 if failed else 0
