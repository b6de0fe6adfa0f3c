"""A simulated week of mixed GPU workloads through the production path, reconciled exactly.

One fresh database for the module. The week (simulator/agents) is rendered as the pod manifests a
collector would have seen (with their times) and the DCGM samples Prometheus would return; pods go
through ``connectors.kube.pods.parse_pods`` and ``services.pod_snapshots`` (the asset's own
loader), telemetry through ``core.telemetry.parse_matrix`` and ``land_samples``
(``pipelines.demo.land_week``, which the demo's agent history goes through too). Then one
``dbt build`` of the FinOps models and everything upstream, the anomaly detector, a runaway agent
tree landed as a second run, a second build, the detector and the alert sensor against a real
HTTP receiver on loopback that fails its first deliveries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from assets.finops.anomalies import detect_anomalies, finops_anomaly_alerts
from assets.finops.resources import AlertWebhookResource
from connectors.warehouse import Warehouse, open_warehouse
from core.finops.anomaly import Thresholds
from core.finops.money import RateCard, round_line
from core.finops.price_book import as_rate_cards, build_price_book
from pipelines import demo
from pipelines.resources import WarehouseResource
from services.price_book import COST_FACT_SELECT, load_price_book
from settings import load_settings
from simulator.agents import SimWeek, runaway_tree, simulate_week

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
DBT_DIR = ROOT / "dbt"
# The site's own selection (the fact and the query pack's rollups), plus what these tests read.
SELECT = f"{COST_FACT_SELECT} cost_anomalies int_finops_reconciliation int_finops_activity_unmatched"


# The price book these tests price with: a site file's rate_cards, loaded into finops.price_book
# before every build as the finops/price_book asset does (issue 25: no price seed any more).
PRICE_FILE = ROOT / "tests" / "fixtures" / "finops" / "rate_cards.yaml"


def rate_cards() -> list[RateCard]:
    return as_rate_cards(build_price_book(load_settings(PRICE_FILE).rate_cards))


def load_test_price_book(wh: Warehouse) -> None:
    with wh.connect() as conn:
        load_price_book(conn, load_settings(PRICE_FILE).rate_cards, str(PRICE_FILE))


def dbt_build(wh: Warehouse, target: Path) -> str:
    load_test_price_book(wh)
    result = subprocess.run(
        [str(Path(sys.executable).with_name("dbt")), "build", "--select", SELECT, "--project-dir", str(DBT_DIR),
         "--profiles-dir", str(DBT_DIR), "--target-path", str(target / "target"), "--log-path", str(target / "logs")],
        capture_output=True, text=True, env=dict(os.environ, **wh.libpq_env()), timeout=600, check=False,
    )
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-3000:]
    return result.stdout


def land_week(wh: Warehouse, week: SimWeek, pods: list[Any], *, with_nodes: bool) -> Any:
    with wh.connect() as conn:
        landed, telemetry = demo.land_week(conn, week, pods, run_id=f"sim-{uuid.uuid4()}", with_nodes=with_nodes)
        assert not telemetry.quarantined
        conn.commit()
    return landed


class Receiver:
    """A webhook receiver on loopback: records every delivery, answers 500 to the first ``fail_first``."""

    def __init__(self, fail_first: int) -> None:
        self.fail_first = fail_first
        self.calls: list[dict[str, Any]] = []
        self.accepted: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls.append(body)
                if len(outer.calls) <= outer.fail_first:
                    self.send_response(500)
                    self.end_headers()
                    return
                outer.accepted.append({"body": body, "key": self.headers.get("Idempotency-Key")})
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def week_db(warehouse: Warehouse, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    name = f"t_finops_{uuid.uuid4().hex[:10]}"
    admin_url = warehouse.base_url.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = warehouse.base_url.set(database=name).render_as_string(hide_password=False)
    receiver = Receiver(fail_first=2)
    try:
        wh = open_warehouse(url)
        week = simulate_week("sim-week", namespace_suffix="-wk")
        base_pods = list(week.pods)
        landed = land_week(wh, week, base_pods, with_nodes=True)
        target = tmp_path_factory.mktemp("dbt-finops")
        first_build = dbt_build(wh, target)
        thr = Thresholds()
        with wh.connect() as conn:
            quiet = detect_anomalies(conn, thr, 2, "run-quiet")
            conn.commit()
        runaway = runaway_tree(week)
        land_week(wh, week, runaway, with_nodes=False)
        dbt_build(wh, target)
        with wh.connect() as conn:
            loud = detect_anomalies(conn, thr, 2, "run-loud")
            again = detect_anomalies(conn, thr, 2, "run-loud-again")
            conn.commit()
        yield {"wh": wh, "week": week, "landed": landed, "quiet": quiet, "loud": loud, "again": again,
               "dbt": first_build, "receiver": receiver, "runaway": runaway}
        wh.dispose()
    finally:
        receiver.close()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def q(db: dict[str, Any], query: str, *params: Any) -> list[dict[str, Any]]:
    with db["wh"].connect() as conn, conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, params).fetchall()


def test_cost_fact_reconciles_with_the_simulation_per_dimension_and_basis(week_db: dict[str, Any]) -> None:
    week: SimWeek = week_db["week"]
    expected = week.accounting(rate_cards())
    rows = q(week_db, """
        SELECT "x_CostBasis" AS basis, "SubAccountId" AS client, "x_Task" AS task, "x_AgentType" AS agent_type,
               "x_Tier" AS tier, sum("ConsumedQuantity") AS qty, sum("ListCost") AS list, sum("EffectiveCost") AS eff
        FROM finops.gpu_cost_hourly WHERE "x_LineType" = 'workload' AND "x_Cluster" = %s
        GROUP BY 1, 2, 3, 4, 5""", week.cluster)
    actual = {(r["basis"], r["client"], r["task"], r["agent_type"], r["tier"]): [r["qty"], r["list"], r["eff"]]
              for r in rows}
    assert set(actual) == set(expected.tenants)
    for key, values in expected.tenants.items():
        assert actual[key] == values, key
    # both bases, and the usage basis really is lower where activity was measured
    assert {k[0] for k in actual} == {"allocation", "usage"}
    assert expected.measured_pod_hours > 0
    alloc = sum(v[0] for k, v in actual.items() if k[0] == "allocation")
    usage = sum(v[0] for k, v in actual.items() if k[0] == "usage")
    assert usage < alloc


def test_idle_lines_per_gpu_model_and_capacity_identity(week_db: dict[str, Any]) -> None:
    week: SimWeek = week_db["week"]
    expected = week.accounting(rate_cards())
    rows = q(week_db, """
        SELECT "x_CostBasis" AS basis, "x_GpuModel" AS model, sum("ConsumedQuantity") AS qty, sum("ListCost") AS cost
        FROM finops.gpu_cost_hourly WHERE "x_LineType" = 'idle' AND "x_Cluster" = %s GROUP BY 1, 2""", week.cluster)
    assert {(r["basis"], r["model"]): [r["qty"], r["cost"]] for r in rows} == expected.idle
    # allocated + idle = capacity for every node and hour, exactly, on both bases
    bad = q(week_db, "SELECT * FROM staging.int_finops_reconciliation WHERE NOT balanced OR NOT idle_nonnegative")
    assert bad == []
    totals = q(week_db, """SELECT "x_CostBasis" AS basis, sum("ConsumedQuantity") AS qty FROM finops.gpu_cost_hourly
                           WHERE "x_Cluster" = %s GROUP BY 1""", week.cluster)
    assert {r["basis"]: r["qty"] for r in totals} == {"allocation": expected.capacity_gpu_hours,
                                                      "usage": expected.capacity_gpu_hours}
    assert expected.capacity_gpu_hours == 64 * 168


def test_bad_input_counted_and_nothing_lost(week_db: dict[str, Any]) -> None:
    landed = week_db["landed"]
    assert landed.quarantined == 0
    assert landed.node_changes == 1
    assert landed.issues["labels_invalid"] == 1  # the 70-character task label
    assert landed.issues["gpu_requests_unknown"] == 2  # nvidia.com/gpu.shared and amd.com/gpu
    assert landed.issues["labels_missing"] == 1  # the pod without labels (client, task, tier missing)
    week: SimWeek = week_db["week"]
    ns = f"eval{week.namespace_suffix}"
    moved = q(week_db, """SELECT "x_Node" AS node, sum("x_Seconds") AS s FROM finops.gpu_cost_hourly
                          WHERE "ResourceName" = %s AND "x_CostBasis" = 'allocation' GROUP BY 1 ORDER BY 1""",
              f"{ns}/moved")
    assert [(r["node"], r["s"]) for r in moved] == [("gpu-a05", 7200), ("gpu-a06", 10800)]
    long = q(week_db, """SELECT DISTINCT "SubAccountId" AS c, "x_Task" AS t FROM finops.gpu_cost_hourly
                         WHERE "ResourceName" = %s""", f"{ns}/long-label")
    assert long == [{"c": "umbrella", "t": "unattributed"}]
    raw = q(week_db, "SELECT labels, issues FROM raw.k8s_pod_snapshots WHERE name = 'long-label' LIMIT 1")[0]
    assert raw["labels"]["gpufabric.io/task"] == "t" * 70 and raw["issues"] == ["task: over 63 characters (70)"]
    shared = q(week_db, "SELECT unknown_gpu_resources FROM raw.k8s_pod_snapshots WHERE name = 'shared-gpu' LIMIT 1")
    assert shared == [{"unknown_gpu_resources": {"nvidia.com/gpu.shared": "1"}}]
    skewed = q(week_db, "SELECT count(*) AS n FROM staging.int_finops_activity_unmatched WHERE pod = 'long-label'")
    assert skewed[0]["n"] == 1  # the skewed pod's first samples fall in the hour before it started


def test_tree_usage_matches_the_trees(week_db: dict[str, Any]) -> None:
    week: SimWeek = week_db["week"]
    trees = defaultdict(list)
    for p in week.pods:
        if p.root_id != "unattributed":
            trees[p.root_id].append(p)
    rows = {r["root_id"]: r for r in q(week_db, "SELECT * FROM agents.tree_usage")}
    assert set(rows) == set(trees)
    runaway_root = week_db["runaway"][0].uid
    r = rows[runaway_root]
    assert (r["pods_total"], r["live_pods"], r["max_depth"], r["max_fan_out"]) == (301, 0, 1, 300)
    # 1 planner x 59 min + 300 coders x 5 min, at 3.50 USD per H100 hour (interactive)
    assert r["gpu_hours"] == round_line(Fraction(59 + 1500, 60)) == Decimal("25.983333333")
    assert r["cost_usd"] == round_line(Fraction(59 + 1500, 60) * Fraction(7, 2)) == Decimal("90.941666667")
    assert r["burn_rate_usd_per_hour"] == 0 and r["client"] == "globex" and r["agent_type"] == "planner"


def test_runaway_tree_raises_exactly_one_anomaly_and_one_alert(week_db: dict[str, Any]) -> None:
    assert week_db["quiet"]["anomalies"] == []
    loud = week_db["loud"]["anomalies"]
    assert [(a.client, a.agent_type, a.tier) for a in loud] == [("globex", "coder", "interactive")]
    a = loud[0]
    assert a.hour == datetime(2026, 11, 8, 23, tzinfo=UTC) and a.method == "seasonal_hour_of_day"
    assert a.actual_usd == Decimal("87.500000") and a.expected_usd == 0 and a.impact_usd == a.actual_usd
    assert week_db["loud"]["new"] == 1 and week_db["again"]["new"] == 0
    stored = q(week_db, "SELECT * FROM finops.cost_anomalies")
    assert len(stored) == 1 and stored[0]["alert_status"] is None

    receiver: Receiver = week_db["receiver"]
    sensor_resources = {"warehouse": WarehouseResource(url=week_db["wh"].libpq_url),
                        "alert_webhook": AlertWebhookResource(url=receiver.url, backoff_s=0.01, max_attempts=4)}
    with dg.build_sensor_context(resources=sensor_resources) as context:
        first = finops_anomaly_alerts(context)
        second = finops_anomaly_alerts(context)
    assert isinstance(first, dg.SkipReason) and "delivered 1, failed 0" in (first.skip_message or "")
    assert "delivered 0, failed 0" in (second.skip_message or "")
    assert len(receiver.calls) == 3  # two 500s, then accepted
    assert len(receiver.accepted) == 1
    body = receiver.accepted[0]["body"]
    assert body["gpufabric"]["client"] == "globex" and body["gpufabric"]["agent_type"] == "coder"
    assert body["text"].startswith("GPU cost anomaly: globex / coder / interactive spent $87.50")
    assert receiver.accepted[0]["key"] == a.anomaly_id
    stored = q(week_db, "SELECT alert_status, alert_attempts FROM finops.cost_anomalies")
    assert stored == [{"alert_status": "delivered", "alert_attempts": 3}]


def test_finops_reader_reads_finops_and_nothing_else(week_db: dict[str, Any]) -> None:
    with week_db["wh"].connect() as conn:
        conn.execute("SET ROLE finops_reader")
        assert conn.execute('SELECT count(*) FROM finops.gpu_cost_hourly').fetchone()[0] > 0  # type: ignore[index]
        assert conn.execute("SELECT count(*) FROM finops.cost_anomalies").fetchone()[0] == 1  # type: ignore[index]
        for table in ("raw.k8s_pod_snapshots", "agents.tree_usage", "ops.finops_anomalies",
                      "ops.finops_restatements"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                conn.execute(f"SELECT 1 FROM {table} LIMIT 1")
