"""The FinOps query pack (sql/queries) and ``gpufabric finops report`` against a simulated week.

Its own fresh database: the simulated week plus a runaway agent tree in its last hour, one
``dbt build``, one anomaly detection. Every query runs as ``finops_reader`` and its top lines are
checked against the simulation's own numbers.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from assets.finops.anomalies import detect_anomalies
from connectors.warehouse import Warehouse, open_warehouse
from core.finops.anomaly import Thresholds
from simulator.agents import SimWeek, runaway_tree, simulate_week
from tests.integration.test_finops_week import dbt_build, land_week, rate_cards

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
QUERIES = ROOT / "sql" / "queries"
AS_OF = "2026-11-08T23:30:00Z"


@pytest.fixture(scope="module")
def pack(warehouse: Warehouse, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    name = f"t_queries_{uuid.uuid4().hex[:10]}"
    admin_url = warehouse.base_url.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = warehouse.base_url.set(database=name).render_as_string(hide_password=False)
    try:
        wh = open_warehouse(url)
        week = simulate_week("sim-pack", namespace_suffix="-qp")
        runaway_tree(week)
        land_week(wh, week, week.pods, with_nodes=True)
        dbt_build(wh, tmp_path_factory.mktemp("dbt-queries"))
        with wh.connect() as conn:
            detect_anomalies(conn, Thresholds(), 2, "run-pack")
            conn.commit()
        yield {"wh": wh, "week": week, "url": url}
        wh.dispose()
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def run(pack: dict[str, Any], file: str) -> list[dict[str, Any]]:
    with pack["wh"].connect() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute("SET ROLE finops_reader")  # analysts' rights: finops and nothing else
        cur.execute("SELECT set_config('gpufabric.as_of', %s, false)", (AS_OF,))
        return cur.execute((QUERIES / file).read_text()).fetchall()


def test_every_query_is_tested() -> None:
    assert sorted(p.name for p in QUERIES.glob("*.sql")) == sorted(
        ["anomalies_this_week.sql", "cost_by_client_tier_this_month.sql", "efficiency_vs_cost_by_agent_type.sql",
         "idle_cost_by_gpu_model.sql", "top_agent_trees_by_cost.sql"])


def test_cost_by_client_and_tier(pack: dict[str, Any]) -> None:
    expected = pack["week"].accounting(rate_cards())
    want: dict[tuple[str, str], Decimal] = {}
    for (basis, client, _task, _agent, tier), (_q, _l, eff) in expected.tenants.items():
        if basis == "allocation":
            want[(client, tier)] = want.get((client, tier), Decimal(0)) + eff
    rows = run(pack, "cost_by_client_tier_this_month.sql")
    got = {(r["client"], r["tier"]): r["effective_cost_usd"] for r in rows if r["client"] != "(idle capacity)"}
    assert got == want
    tenants = [r for r in rows if r["client"] != "(idle capacity)"]
    assert (tenants[0]["client"], tenants[0]["tier"]) == ("acme", "batch")  # two 8-GPU training jobs lead
    idle = [r for r in rows if r["client"] == "(idle capacity)"]
    assert len(idle) == 1 and idle[0]["gpu_hours"] == sum(v[0] for k, v in expected.idle.items()
                                                         if k[0] == "allocation")


def test_top_agent_trees(pack: dict[str, Any]) -> None:
    rows = run(pack, "top_agent_trees_by_cost.sql")
    assert len(rows) == 20
    top = rows[0]
    week: SimWeek = pack["week"]
    runaway_root = next(p.uid for p in week.pods if p.name == "runaway-planner")
    assert (top["root_id"], top["client"], top["pods"], top["max_depth"]) == (runaway_root, "globex", 301, 1)
    # per-line rounding: 300 coder lines of 0.291666667 USD and a planner line of 3.441666667 USD
    assert top["effective_cost_usd"] == 300 * Decimal("0.291666667") + Decimal("3.441666667")
    assert [r["effective_cost_usd"] for r in rows] == sorted((r["effective_cost_usd"] for r in rows), reverse=True)


def test_efficiency_vs_cost(pack: dict[str, Any]) -> None:
    rows = {r["agent_type"]: r for r in run(pack, "efficiency_vs_cost_by_agent_type.sql")}
    assert set(rows) == {"unattributed", "planner", "coder", "browser", "tool-runner", "inference-server"}
    # browsers report no DCGM profiling: nothing measured, used = allocated
    assert rows["browser"]["measured_share"] == 0 and rows["browser"]["efficiency"] == 1
    for agent in ("planner", "coder", "inference-server"):
        assert rows[agent]["measured_share"] == 1
        assert 0 < rows[agent]["efficiency"] < 1
        assert rows[agent]["usd_per_used_gpu_hour"] > rows[agent]["allocated_cost_usd"] / rows[agent][
            "allocated_gpu_hours"]


def test_idle_cost_by_gpu_model(pack: dict[str, Any]) -> None:
    expected = pack["week"].accounting(rate_cards())
    rows = {r["gpu_model"]: r for r in run(pack, "idle_cost_by_gpu_model.sql")}
    assert set(rows) == {"NVIDIA-H100-80GB-HBM3", "NVIDIA-B200"}
    for model, r in rows.items():
        assert [r["idle_gpu_hours"], r["idle_cost_usd"]] == expected.idle[("allocation", model)]
    assert rows["NVIDIA-B200"]["capacity_gpu_hours"] == 8 * 168
    assert rows["NVIDIA-H100-80GB-HBM3"]["capacity_gpu_hours"] == 7 * 8 * 168


def test_anomalies_this_week(pack: dict[str, Any]) -> None:
    rows = run(pack, "anomalies_this_week.sql")
    assert [(r["client"], r["agent_type"], r["hour"]) for r in rows] == [
        ("globex", "coder", datetime(2026, 11, 8, 23, tzinfo=UTC))]
    assert rows[0]["impact_usd"] == Decimal("87.500000") and rows[0]["alert_status"] is None


def test_finops_report_cli(pack: dict[str, Any]) -> None:
    code = (
        "import sys, typer; from pipelines.cli_finops import app; "
        "sys.argv = ['gpufabric-finops', 'report', '--as-of', '2026-11-08T23:30:00', '--limit', '3']; app()"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            cwd=ROOT, env={**__import__("os").environ, "GPUFABRIC_DATABASE_URL": pack["url"],
                                           "COLUMNS": "200"}, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout
    for title in ("Cost by client and tier, this month", "Top agent trees by cost", "Idle cost by GPU model",
                  "Anomalies this week"):
        assert title in text
    assert "acme" in text and "globex" in text and "87.50" in text and "NVIDIA-B200" in text
