"""One price book, an incremental cost fact, and audited restatements (issue 25, parts 2 and 3).

One fresh database for the module and a small generated cluster (simulator/agents/year.py: 4
nodes, 150 pods a day) landed with COPY as a collector would have landed it, day by day:

1. price book v1 from a site file, day 1 landed, a full build;
2. the site file changes twice at once: a new H100 price from day 2 on (future of the fact), and
   the B200 price changed retroactively from the beginning; day 2 and one hour of day 3 landed,
   an incremental build of what the finops_cost job builds (``COST_FACT_SELECT``: the fact, the
   incremental pod intervals and pod hours it reads, which a build of the fact alone would leave
   at day 1, and the query pack's rollups): day 1 is not rewritten (neither change reaches it),
   day 2 has the new H100 price;
3. ``gpufabric finops restate`` over day 1: the B200 lines take the new price, nothing outside the
   range moves, the audit row carries the counts and totals measured here, and the query pack's
   rollups answer day 1 with the new prices exactly as the fact does;
4. a --full-refresh build of the fact and everything it reads: the same rows as the incremental
   builds and the restatement left, to the last digit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql
from typer.testing import CliRunner

from connectors.warehouse import Warehouse, copy_rows, open_warehouse
from core.finops.price_book import PriceBookError
from core.finops.records import NODE_COLUMNS, POD_COLUMNS
from pipelines.cli_finops import app
from services.price_book import COST_FACT_SELECT, load_price_book, run_dbt, stored_price_book
from settings import load_settings
from simulator.agents.year import YearCounts, YearSpec, node_rows, pod_rows
from tests.integration.test_finops_rollups import answers

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)

START = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)
SPEC = YearSpec(cluster="pb", start=START, days=3, nodes=4, pods_per_day=150, run_id="pb")
H100, B200 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-B200"
# Every line's cost columns: what "not rewritten" and "the same rows" compare.
LINE = ('"x_CostBasis", "ChargePeriodStart", "ResourceId", "x_Node", "ConsumedQuantity", "PricingQuantity", '
        '"ListUnitPrice", "ContractedUnitPrice", "ListCost", "EffectiveCost", "BillingCurrency", "x_GpuModel"')

V1 = """version: 1
rate_cards:
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: "*", usd_per_gpu_hour: 4.00}
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: interactive, usd_per_gpu_hour: 3.50}
  - {gpu_model: NVIDIA-B200, tier: "*", usd_per_gpu_hour: 6.50}
"""
# v2: H100 list 5.00 / interactive 4.20 from day 2 (a change ahead of the fact); B200 6.50 -> 7.00
# from the beginning (a retroactive correction: only a restatement may apply it to priced lines).
V2 = """version: 1
rate_cards:
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: "*", usd_per_gpu_hour: 4.00}
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: interactive, usd_per_gpu_hour: 3.50}
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: "*", usd_per_gpu_hour: 5.00, effective_from: 2026-03-02}
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: interactive, usd_per_gpu_hour: 4.20, effective_from: 2026-03-02}
  - {gpu_model: NVIDIA-B200, tier: "*", usd_per_gpu_hour: 7.00}
"""
OVERLAP = """version: 1
rate_cards:
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: "*", usd_per_gpu_hour: 4.00, effective_to: 2026-03-05}
  - {gpu_model: NVIDIA-H100-80GB-HBM3, tier: "*", usd_per_gpu_hour: 5.00, effective_from: 2026-03-02}
"""


def land(wh: Warehouse, since: datetime, until: datetime) -> YearCounts:
    counts = YearCounts()
    with wh.connect() as conn, conn.transaction():
        copy_rows(conn, "raw.k8s_node_snapshots", NODE_COLUMNS, node_rows(SPEC, since=since, until=until))
        copy_rows(conn, "raw.k8s_pod_snapshots", POD_COLUMNS, pod_rows(SPEC, counts, since=since, until=until))
    return counts


def lines(wh: Warehouse, table: str = "finops.gpu_cost_hourly") -> dict[tuple[Any, ...], tuple[Any, ...]]:
    with wh.connect() as conn:
        rows = conn.execute(sql.SQL("SELECT " + LINE + " FROM {}").format(sql.SQL(table))).fetchall()
    return {r[:4]: r[4:] for r in rows}


def site(tmp: Path, name: str, text: str) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    return path


def load(wh: Warehouse, path: Path) -> Any:
    with wh.connect() as conn:
        return load_price_book(conn, load_settings(path).rate_cards, str(path))


@pytest.fixture(scope="module")
def db(warehouse: Warehouse, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("pricebook")
    with warehouse.scratch_database("t_pricebook") as url:
        wh = open_warehouse(url)
        try:
            state: dict[str, Any] = {"wh": wh, "url": url, "tmp": tmp}
            state["v1"] = load(wh, site(tmp, "v1", V1))
            state["day1"] = land(wh, START, START + DAY)
            run_dbt(wh, ["build", "--select", COST_FACT_SELECT], target_dir=tmp)
            state["after_day1"] = lines(wh)
            state["v2_path"] = site(tmp, "v2", V2)
            state["v2"] = load(wh, state["v2_path"])
            land(wh, START + DAY, START + 2 * DAY + timedelta(hours=1))
            run_dbt(wh, ["run", "--select", COST_FACT_SELECT], target_dir=tmp)
            state["after_day2"] = lines(wh)
            yield state
        finally:
            wh.dispose()


def test_loads_record_what_changed(db: dict[str, Any]) -> None:
    assert db["v1"].changed and db["v1"].rows == 3
    # v2's first difference: the B200 price from the beginning (1970-01-01), before H100's 2026-03-02
    assert db["v2"].changed and db["v2"].rows == 5 and db["v2"].changes_from.isoformat() == "1970-01-01"
    again = load(db["wh"], db["v2_path"])
    assert not again.changed and again.loaded_at == db["v2"].loaded_at


def test_the_day1_build_prices_every_line_from_the_book(db: dict[str, Any]) -> None:
    day1 = db["after_day1"]
    counts: YearCounts = db["day1"]
    assert counts.pods > 100
    workload = [v for k, v in day1.items() if k[0] == "allocation" and not k[2].startswith("pb/")]
    # every pod-hour is priced, at the v1 list price of its GPU model
    assert {(v[-1], v[2]) for v in workload} == {(H100, Decimal("4.0000")), (B200, Decimal("6.5000"))}
    # GPU-hours of the lines = the generator's own accounting of the pods that ended on day 1, plus
    # the part of the still-running ones; at least the former, and each line rounded once
    total = sum(v[0] for v in workload)
    assert total >= Decimal(counts.slice_seconds) / (7 * 3600) - Decimal(len(workload)) * Decimal("0.5e-9")


def test_a_rate_change_reaches_new_lines_only(db: dict[str, Any]) -> None:
    before, after = db["after_day1"], db["after_day2"]
    cutoff = START + DAY - timedelta(hours=4)  # older than the lookback of the day-1 build's newest line
    old = {k: v for k, v in before.items() if k[1] < cutoff}
    assert old and all(after[k] == v for k, v in old.items())
    # B200's retroactive 7.00 reached no line already priced, not even those the lookback
    # recomputed (their quantity may grow with late snapshots, their price stays)...
    assert {after[k][2] for k, v in before.items() if v[-1] == B200} == {Decimal("6.5000")}
    assert any(after[k] != v for k, v in before.items() if k[1] >= cutoff)  # the lookback did recompute
    # ...but prices every line new since, whatever its hour (a change applies to what is priced from now on)
    assert {v[2] for k, v in after.items() if v[-1] == B200 and k not in before} == {Decimal("7.0000")}
    # H100 from its effective date: 5.00 list on day 2, 4.00 on day 1
    h100 = {(k[1] >= START + DAY, v[2]) for k, v in after.items() if v[-1] == H100}
    assert h100 == {(False, Decimal("4.0000")), (True, Decimal("5.0000"))}


def test_restate_reprices_the_range_only_and_is_audited(db: dict[str, Any]) -> None:
    wh: Warehouse = db["wh"]
    before = lines(wh)
    env = {"GPUFABRIC_DATABASE_URL": db["url"]}
    result = CliRunner().invoke(app, ["restate", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-02T00:00:00Z",
                                      "--reason", "B200 contract corrected", "--config", str(db["v2_path"])],
                                env=env)
    assert result.exit_code == 0, result.output
    after = lines(wh)
    inside = {k for k in before if START <= k[1] < START + DAY}
    assert set(after) == set(before)
    assert all(after[k] == before[k] for k in set(before) - inside)
    changed = {k for k in inside if after[k] != before[k]}
    assert changed and {after[k][-1] for k in changed} == {B200}
    assert {after[k][2] for k in inside if after[k][-1] == B200} == {Decimal("7.0000")}
    with wh.connect() as conn:
        audit = conn.execute("SELECT * FROM ops.finops_restatements").fetchall()
        cols = [d.name for d in conn.execute("SELECT * FROM ops.finops_restatements LIMIT 0").description or []]
    assert len(audit) == 1
    row = dict(zip(cols, audit[0], strict=True))
    assert (row["range_from"], row["range_to"]) == (START, START + DAY)
    assert row["reason"] == "B200 contract corrected" and row["requested_by"]
    assert row["lines_before"] == row["lines_after"] == len(inside)
    assert row["lines_changed"] == len(changed)
    assert row["old_effective_cost"] == sum(before[k][5] for k in inside)
    assert row["new_effective_cost"] == sum(after[k][5] for k in inside)
    assert row["new_list_cost"] - row["old_list_cost"] == sum(after[k][4] - before[k][4] for k in changed) > 0
    assert f"{len(changed):,} of {len(inside):,} lines changed" in " ".join(result.output.split())
    with wh.connect() as conn:
        rolled = conn.execute('SELECT sum("EffectiveCost") FROM finops.cost_summary_hourly '
                              'WHERE "ChargePeriodStart" >= %s AND "ChargePeriodStart" < %s',
                              (START, START + DAY)).fetchone()
    assert rolled is not None and rolled[0] == row["new_effective_cost"] != row["old_effective_cost"]
    for question, (ours, fact) in answers(wh, "2026-03-01T23:30:00Z").items():
        assert fact and ours == fact, question


def test_full_refresh_equals_the_incremental_table(db: dict[str, Any]) -> None:
    wh: Warehouse = db["wh"]
    incremental = lines(wh)
    run_dbt(wh, ["run", "--select", COST_FACT_SELECT, "--full-refresh"], target_dir=db["tmp"])
    full = lines(wh)
    assert full == incremental
    # and the sums analysts see (ConsumedQuantity, ListCost, EffectiveCost)
    sums = [sum(v[i] for v in full.values()) for i in (0, 4, 5)]
    assert sums == [sum(v[i] for v in incremental.values()) for i in (0, 4, 5)]


def test_bad_rate_cards_are_refused_and_leave_the_book_alone(db: dict[str, Any]) -> None:
    wh: Warehouse = db["wh"]
    with wh.connect() as conn:
        kept = stored_price_book(conn)
    with pytest.raises(PriceBookError, match=r"rate_cards\[0\] \(NVIDIA-H100-80GB-HBM3, tier \*, from always\) "
                                             r"runs to 2026-03-05, overlapping rate_cards\[1\]"):
        load(wh, site(db["tmp"], "overlap", OVERLAP))
    result = CliRunner().invoke(app, ["prices", "--config", str(db["tmp"] / "overlap.yaml")],
                                env={"GPUFABRIC_DATABASE_URL": db["url"]})
    assert result.exit_code == 2 and "overlapping" in result.output
    with wh.connect() as conn:
        assert stored_price_book(conn) == kept
    assert os.environ.get("GPUFABRIC_DATABASE_URL") != db["url"]  # the CLI runs did not leak their env
