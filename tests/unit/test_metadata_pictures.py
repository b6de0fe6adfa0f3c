"""Metadata for the Dagster UI outside the topology: the cost overview's sums and chart, the p99
lag numbers, and dbt's boilerplate folded into one table row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace

import dagster as dg
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from assets.agents.burst_lag import lag_percentiles, percentile_cont
from assets.dbt.metadata import tidy, tidy_event
from assets.finops.cost_overview import IDLE, UNSET, summarise
from services.diagrams import MAX_PNG_BYTES, bar_panels_png, markdown_image

T0 = datetime(2026, 12, 2, tzinfo=UTC)


def test_cost_day_sums_by_tenant_tier_agent_type_and_keeps_idle_apart() -> None:
    day = summarise([
        ("acme", "interactive", "coder", "workload", Decimal("10.5")),
        ("acme", "batch", "planner", "workload", Decimal("2")),
        ("globex", "interactive", "coder", "workload", Decimal("4")),
        (None, None, None, "workload", Decimal("1")),
        (None, None, None, "idle", Decimal("7.25")),
        ("acme", "interactive", "coder", "workload", None),  # unpriced: counted by finops/anomalies, not here
    ])  # fmt: skip
    assert (day.workload, day.idle, day.total) == (Decimal("17.5"), Decimal("7.25"), Decimal("24.75"))
    assert dict(day.by_tenant) == {"acme": Decimal("12.5"), "globex": Decimal(4), UNSET: Decimal(1)}
    assert dict(day.by_agent_type) == {"coder": Decimal("14.5"), "planner": Decimal(2), UNSET: Decimal(1)}
    panels = dict(day.panels())
    assert panels["by tenant"][IDLE] == 7.25 and IDLE not in panels["by tier"]
    assert day.breakdown()[0] == {"tenant": "acme", "tier": "interactive", "agent_type": "coder", "cost": 10.5}


def test_cost_chart_is_a_small_png_in_markdown_even_when_empty() -> None:
    panels = [("by tenant", {f"tenant-{i:02d}": float(i) for i in range(40)}), ("by tier", {}), ("by agent type", {})]
    png = bar_panels_png("GPU cost", panels, "USD")
    assert png.startswith(b"\x89PNG") and len(png) <= MAX_PNG_BYTES
    md = markdown_image(png, "cost")
    assert md.startswith("![cost](data:image/png;base64,iVBORw0KGgo") and md.endswith(")")
    assert bar_panels_png("GPU cost", [], "USD").startswith(b"\x89PNG")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e5), min_size=1, max_size=50), st.floats(min_value=0, max_value=1))
def test_percentile_cont_matches_linear_interpolation(values: list[float], q: float) -> None:
    got = percentile_cont(values, q)
    assert got is not None and abs(got - float(np.percentile(values, q * 100))) <= 1e-6 * max(1.0, max(values))


def test_lag_p99_over_pods_that_got_there_and_none_when_none_did() -> None:
    pods = [SimpleNamespace(created_at=T0, scheduled_at=T0 + timedelta(seconds=s), running_at=None if s > 90 else
                            T0 + timedelta(seconds=s + 2)) for s in range(1, 101)]  # fmt: skip
    out = lag_percentiles(pods)
    assert out["scheduled_lag_p99_s"] == percentile_cont([float(s) for s in range(1, 101)], 0.99) == 99.01
    assert out["running_lag_p99_s"] == round(percentile_cont([float(s + 2) for s in range(1, 91)], 0.99) or 0, 3)
    assert lag_percentiles([SimpleNamespace(created_at=T0, scheduled_at=None, running_at=None)]) == {}
    assert percentile_cont([], 0.99) is None


DBT_MODEL_METADATA = {
    "Execution Duration": 1.234567,
    "unique_id": "model.gpufabric.gpu_cost_hourly",
    "invocation_id": "8e1f0c1a-0000-4000-8000-000000000000",
    "status": "success",
    "dagster/column_schema": dg.TableSchema(columns=[dg.TableColumn("ChargePeriodStart", "timestamp")]),
}


def test_dbt_boilerplate_becomes_one_table_row_and_a_duration_to_plot() -> None:
    out = tidy(DBT_MODEL_METADATA)
    assert set(out) == {"dagster/column_schema", "dbt", "duration_s"}
    assert out["duration_s"] == 1.235
    (row,) = out["dbt"].records
    assert row.data == {"node": "model.gpufabric.gpu_cost_hourly", "status": "success", "duration_s": 1.235,
                        "failed_rows": None, "invocation": "8e1f0c1a-0000-4000-8000-000000000000"}  # fmt: skip
    test_meta = tidy({"unique_id": "test.x", "invocation_id": "i", "status": "fail",
                      "dagster_dbt/failed_row_count": dg.MetadataValue.int(3)})  # fmt: skip
    assert test_meta["failed_rows"] == 3 and "duration_s" not in test_meta
    ours = {"rows": 5}
    assert tidy(ours) == ours  # an event without dbt's boilerplate passes unchanged


def test_tidy_event_keeps_the_event_and_its_output() -> None:
    event = tidy_event(dg.Output(None, output_name="finops__gpu_cost_hourly", metadata=DBT_MODEL_METADATA))
    assert isinstance(event, dg.Output) and event.output_name == "finops__gpu_cost_hourly"
    assert "invocation_id" not in event.metadata and event.metadata["dbt"].records[0].data["status"] == "success"
    check = tidy_event(dg.AssetCheckResult(passed=False, asset_key="a", check_name="c",
                                           metadata={"unique_id": "test.t", "status": "fail"}))  # fmt: skip
    assert isinstance(check, dg.AssetCheckResult) and check.passed is False and set(check.metadata) == {"dbt"}
