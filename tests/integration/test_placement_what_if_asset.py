"""``placement/what_if`` and ``gpufabric placement report`` on the warehouse's latest topology
version (issue 22, part 4): the table per job size and placer, the slowdown chart, the weekly
GPU-hours and dollars (the site's rate card), and a clear failure with no version stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from typer.testing import CliRunner

from assets.placement import placement_what_if
from connectors.warehouse import open_warehouse
from pipelines.cli_placement import app
from pipelines.resources import SiteConfigResource, WarehouseResource
from services.topology import write_snapshot
from tests.unit.test_placement_advisor import three_blocks_of_four
from tests.unit.test_topology_support import AT

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)

RATE_CARDS = Path(__file__).resolve().parents[1] / "fixtures" / "finops" / "rate_cards.yaml"


def _materialize(days: float) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [placement_what_if],
        resources={"warehouse": WarehouseResource(), "site": SiteConfigResource(path=str(RATE_CARDS))},
        run_config={"ops": {"placement__what_if": {"config": {"days": days}}}},
        raise_on_error=False,
    )


def test_what_if_on_the_latest_version(fresh_database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFABRIC_DATABASE_URL", fresh_database_url)
    empty = _materialize(2.0)
    assert not empty.success
    failure: Any = empty.get_step_failure_events()[0].event_specific_data
    assert "no topology version yet: materialize topology/fabric_model first" in failure.error.message
    refused = CliRunner().invoke(app, ["report"], env={"COLUMNS": "300"})
    assert refused.exit_code == 1 and "no topology version yet" in refused.output

    with open_warehouse().connect() as conn:
        version = write_snapshot(conn, three_blocks_of_four(), run_id="fabric", created_at=AT, inputs={}).version
    result = _materialize(2.0)
    assert result.success
    meta = result.asset_materializations_for_node("placement__what_if")[0].metadata
    assert meta["topology_version"].value == version
    assert (meta["hosts"].value, meta["degraded_leaf_blocks"].value, meta["miscabled_hosts"].value) == (12, 1, 2)
    rows = [r.data for r in meta["by_job_size"].value.records]  # type: ignore[attr-defined]
    totals = {r["placer"]: r for r in rows if r["nodes"] == "all"}
    assert set(totals) == {"unaware", "kueue-required", "advisor"}
    for placer, row in totals.items():
        assert meta[f"gpu_hours_lost_per_week_{placer.replace('-', '_')}"].value == pytest.approx(
            row["gpu_hours_lost_per_week"], abs=0.06)
        assert row["usd_lost_per_week"] == pytest.approx(4.0 * row["gpu_hours_lost_per_week"], abs=2.0)  # H100 '*'
    assert str(meta["slowdown_chart"].value).startswith("![slowdown vs leaf blocks crossed](data:image/png;base64,")

    shown = CliRunner().invoke(app, ["report", "--days", "2"], env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output
    assert f"topology version {version}: 12 hosts" in shown.output and "advisor" in shown.output
