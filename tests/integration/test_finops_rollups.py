"""The query pack's rollups (issue 25, part 4): every question answers from
``finops.cost_summary_hourly`` / ``finops.agent_tree_pods_monthly`` exactly as it does straight
off the cost fact (``sql/queries/from_fact/``), across a month boundary, after a full and an
incremental build.

One fresh database and a small generated cluster (simulator/agents/year.py: 4 nodes, 150 pods a
day) from 31 March: a full build of March 31, then 1 April 00:00-06:00 landed and built
incrementally (pods running over midnight are in both months). A restatement reaching the rollups
(``gpufabric finops restate``, which builds them too) is checked in test_price_book.py, on the
database it restates anyway, which saves this module a third dbt run.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from connectors.warehouse import Warehouse, copy_rows, open_warehouse
from core.finops.records import NODE_COLUMNS, POD_COLUMNS
from services.price_book import COST_FACT_SELECT, load_price_book, run_dbt
from settings import parse_settings
from simulator.agents.year import YearSpec, node_rows, pod_rows

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)

QUERIES = Path(__file__).resolve().parents[2] / "sql" / "queries"
START = datetime(2026, 3, 31, tzinfo=UTC)
APRIL = datetime(2026, 4, 1, tzinfo=UTC)
SPEC = YearSpec(cluster="ru", start=START, days=2, nodes=4, pods_per_day=150, run_id="ru")
MODELS = [COST_FACT_SELECT]  # what the finops_cost job builds: the fact, what it reads, the rollups
MARCH_AS_OF, APRIL_AS_OF = "2026-03-31T23:30:00Z", "2026-04-01T05:30:00Z"
MARKED_HOUR = START + timedelta(hours=2)  # long before the lookback of the April build
PRICES = """version: 1
rate_cards:
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: "*", usd_per_gpu_hour: 4.00}
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: batch, usd_per_gpu_hour: 2.50}
  - {gpu_model: NVIDIA-B200, tier: "*", usd_per_gpu_hour: 6.50}
"""


def land(wh: Warehouse, since: datetime, until: datetime) -> None:
    with wh.connect() as conn, conn.transaction():
        copy_rows(conn, "raw.k8s_node_snapshots", NODE_COLUMNS, node_rows(SPEC, since=since, until=until))
        copy_rows(conn, "raw.k8s_pod_snapshots", POD_COLUMNS, pod_rows(SPEC, since=since, until=until))


def prices(wh: Warehouse) -> None:
    with wh.connect() as conn:
        load_price_book(conn, parse_settings(PRICES, "rollups.yaml").rate_cards, "rollups.yaml")


def answers(wh: Warehouse, as_of: str) -> dict[str, tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]]:
    """Per question: (the rollup's answer, the fact's answer), as finops_reader."""
    out = {}
    with wh.connect() as conn:
        conn.execute("SET ROLE finops_reader")
        conn.execute("SELECT set_config('gpufabric.as_of', %s, false)", (as_of,))
        for straight in sorted((QUERIES / "from_fact").glob("*.sql")):
            ours = conn.execute((QUERIES / straight.name).read_text()).fetchall()
            out[straight.stem] = (ours, conn.execute(straight.read_text()).fetchall())
    return out


def marked_lines(wh: Warehouse) -> int:
    with wh.connect() as conn:
        row = conn.execute('SELECT sum(lines) FROM finops.cost_summary_hourly WHERE "ChargePeriodStart" = %s',
                           (MARKED_HOUR,)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture(scope="module")
def builds(warehouse: Warehouse, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("finops-rollups")
    with warehouse.scratch_database("t_finops_rollups") as url:
        wh = open_warehouse(url)
        try:
            prices(wh)
            land(wh, START, APRIL)
            run_dbt(wh, ["build", "--select", *MODELS], target_dir=tmp)
            state: dict[str, Any] = {"first_lines": marked_lines(wh)}
            # A mark no question reads (the line count of one March hour): only a build that
            # recomputes the hour takes it away.
            with wh.connect() as conn:
                marked = conn.execute("UPDATE finops.cost_summary_hourly SET lines = lines + 1000 "
                                      'WHERE "ChargePeriodStart" = %s', (MARKED_HOUR,)).rowcount
                conn.commit()
            state["mark"] = 1000 * marked
            land(wh, APRIL, APRIL + timedelta(hours=6))
            run_dbt(wh, ["run", "--select", *MODELS], target_dir=tmp)
            state["march"], state["april"] = answers(wh, MARCH_AS_OF), answers(wh, APRIL_AS_OF)
            state["incremental_lines"] = marked_lines(wh)
            with wh.connect() as conn:
                state["both_months"] = conn.execute(
                    "SELECT count(*) FROM (SELECT resource_id FROM finops.agent_tree_pods_monthly "
                    "WHERE root_id <> 'unattributed' GROUP BY 1 HAVING count(DISTINCT month) = 2) AS p").fetchone()
            yield state
        finally:
            wh.dispose()


def test_every_question_of_the_cost_fact_has_its_straight_off_the_fact_twin() -> None:
    on_rollups = {p.name for p in QUERIES.glob("*.sql")
                  if "finops.cost_summary_hourly" in p.read_text() or "finops.agent_tree_pods_monthly" in p.read_text()}
    assert on_rollups == {p.name for p in (QUERIES / "from_fact").glob("*.sql")}
    assert {p.name for p in QUERIES.glob("*.sql")} - on_rollups == {"anomalies_this_week.sql"}


@pytest.mark.parametrize("month", ["march", "april"])
def test_the_rollups_answer_as_the_fact_does_after_an_incremental_build(builds: dict[str, Any], month: str) -> None:
    for question, (ours, fact) in builds[month].items():
        assert fact, f"{question}: no answer in {month}, nothing compared"
        assert ours == fact, question


def test_pods_across_the_month_boundary_count_in_both_months(builds: dict[str, Any]) -> None:
    assert builds["both_months"][0] > 0
    march = {r[0]: r for r in builds["march"]["top_agent_trees_by_cost"][0]}
    april = {r[0]: r for r in builds["april"]["top_agent_trees_by_cost"][0]}
    assert all(r[6] >= START and r[7] < APRIL for r in march.values())
    assert all(r[6] >= APRIL for r in april.values())


def test_an_incremental_build_leaves_hours_before_the_lookback_alone(builds: dict[str, Any]) -> None:
    assert builds["mark"] > 0 and builds["incremental_lines"] == builds["first_lines"] + builds["mark"]
