"""``budget show`` on a ledger written through the real admission path."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from connectors.warehouse.ledger import admit, settle
from core.budget import BudgetConfig, Envelope, PodRequest, parse_pod
from pipelines.cli_budget import app
from simulator.budget_incident import PlannedPod, manifest

pytestmark = pytest.mark.warehouse_only  # only Postgres of the site (tests/conftest.py)

NOW = datetime(2026, 12, 31, tzinfo=UTC)


def test_show_prints_tree_spend_envelope_and_state(warehouse: Any) -> None:
    root = f"cli-{uuid.uuid4().hex[:8]}"
    config = BudgetConfig(
        defaults={"acme": Envelope(Decimal(10), Decimal(30), 5, 3, 3)}, rates_usd_per_gpu_hour={"*": Decimal(3)}
    )
    with psycopg.connect(warehouse.libpq_url, autocommit=True) as conn:
        for p in (
            PlannedPod(root, None, 0, "orchestrator", 0, 60, 1),
            PlannedPod(f"{root}-a", root, 1, "worker", 0, 120, 2),
            PlannedPod(f"{root}-b", root, 1, "worker", 0, 30, 1),
        ):
            r = parse_pod(manifest(p, root, "acme", "standard"), "agents", config)
            assert isinstance(r, PodRequest)
            assert admit(conn, r, NOW).allowed
        assert settle(conn, root, f"{root}-b", Decimal("0.25"), Decimal("0.75"), NOW)
    result = CliRunner().invoke(app, ["show", root, "--database-url", warehouse.libpq_url], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == [
        "root",
        root,
        "namespace",
        "agents",
        "client",
        "acme",
        "tier",
        "standard",
        "state",
        "open",
    ]
    assert "GPU-h: reserved 5 + spent 0.25 (observed 0) of 10, left 4.75" in result.output
    assert "cost: $15.75 of $30, left $14.25" in result.output
    assert "live pods 2 of 5" in result.output
    assert f"{root} (orchestrator) pod {root}: reserved 1 GPU-h" in result.output
    assert f"{root}-a (worker) pod {root}-a: reserved 4 GPU-h" in result.output
    assert f"{root}-b (worker) pod {root}-b: settled 0.25 GPU-h" in result.output
    missing = CliRunner().invoke(app, ["show", "nope-" + root, "--database-url", warehouse.libpq_url])
    assert missing.exit_code == 1 and "no envelope for root" in missing.output
