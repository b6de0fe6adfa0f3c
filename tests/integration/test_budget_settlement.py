"""Settle-on-finish against Postgres: reservations written by the real admission path, pod
snapshots and cost-fact lines as the FinOps pipeline lands them, then ``settle_finished``.

The cost fact here is a stand-in table with the contract's column names (dbt builds the real one
in ``tests/integration/test_finops_week.py``); the database is a fresh one on the shared test
server, so the stand-in never meets dbt's table.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from connectors.warehouse import open_warehouse
from connectors.warehouse.ledger import admit, read_tree
from connectors.warehouse.settlement import settle_finished
from core.budget import BudgetConfig, Envelope, PodRequest, SettlementPolicy, parse_pod

pytestmark = pytest.mark.integration

P = "gpufabric.io"
NS = "agents"
ROOT = "task-1"
T0 = datetime(2026, 12, 2, 10, 50, tzinfo=UTC)  # pods start here; their hours straddle 11:00
ADMITTED = T0 - timedelta(minutes=30)
L1, L2 = T0 + timedelta(minutes=10), T0 + timedelta(minutes=40)  # two complete pod lists of cluster c1
POLICY = SettlementPolicy(cost_wait_s=3600, unseen_after_s=900)
CONFIG = BudgetConfig(
    defaults={"acme": Envelope(Decimal(100), Decimal(300), 10, 3, 10)}, rates_usd_per_gpu_hour={"*": Decimal(3)}
)
# agent -> (GPUs, expected hours): reservations 1, 2, 1, 1, 1, 1 GPU-h at $3 each
AGENTS = {ROOT: (1, 1), "done": (2, 1), "gone": (1, 1), "running": (1, 1), "nocost": (1, 1), "ghost": (1, 1)}


def manifest(agent: str) -> dict[str, Any]:
    gpus, hours = AGENTS[agent]
    labels = {
        f"{P}/agent-id": agent,
        f"{P}/root-id": ROOT,
        f"{P}/depth": "0" if agent == ROOT else "1",
        f"{P}/client": "acme",
        f"{P}/tier": "standard",
        f"{P}/agent-type": "worker",
        f"{P}/task": "t",
    }
    if agent != ROOT:
        labels[f"{P}/parent-id"] = ROOT
    return {
        "metadata": {"name": f"pod-{agent}", "labels": labels, "annotations": {f"{P}/expected-hours": str(hours)}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }


def snapshot(agent: str, at: datetime, phase: str, start: datetime | None, end: datetime | None = None) -> tuple:
    gpus = AGENTS[agent][0]
    labels = manifest(agent)["metadata"]["labels"]
    return (
        "run",
        "c1",
        at,
        "list",
        f"uid-{agent}",
        NS,
        f"pod-{agent}",
        "node-1",
        phase,
        start,
        end,
        gpus,
        ROOT,
        ROOT if agent != ROOT else "unattributed",
        0 if agent == ROOT else 1,
        "acme",
        "t",
        "worker",
        "standard",
        json.dumps(labels),
    )


def line(agent: str, hour: int, seconds: int, quantity: str, cost: str | None, basis: str = "allocation") -> tuple:
    start = T0.replace(hour=hour, minute=0)
    return (
        f"uid-{agent}",
        "c1",
        basis,
        "workload",
        Decimal(quantity),
        None if cost is None else Decimal(cost),
        Decimal(seconds),
        start,
    )


@pytest.fixture
def conn(fresh_database_url: str) -> Iterator[psycopg.Connection]:
    wh = open_warehouse(fresh_database_url)  # migrates the fresh database
    with psycopg.connect(fresh_database_url, autocommit=True) as c:
        for agent in AGENTS:
            req = parse_pod(manifest(agent), NS, CONFIG)
            assert isinstance(req, PodRequest), req
            assert admit(c, req, ADMITTED).allowed
        yield c
    wh.dispose()


def land(conn: psycopg.Connection) -> None:
    """What FinOps would have landed by L2: two complete lists, and a cost fact built after L2."""
    snaps = [
        snapshot(ROOT, L1, "Running", T0),
        snapshot(ROOT, L2, "Running", T0),
        snapshot("done", L1, "Running", T0 + timedelta(minutes=1)),
        # 10:51 -> 11:21, 2 GPUs: 1 GPU-h, 540 s before 11:00 and 1260 s after
        snapshot("done", L2, "Succeeded", T0 + timedelta(minutes=1), T0 + timedelta(minutes=31)),
        snapshot("gone", L1, "Running", T0),  # not in the L2 list: deleted between the two runs
        snapshot("running", L1, "Running", T0),
        snapshot("running", L2, "Running", T0),
        # 20 minutes on 1 GPU, then failed; the cost fact has no line for it yet
        snapshot("nocost", L2, "Failed", T0, T0 + timedelta(minutes=20)),
    ]
    conn.execute(
        "INSERT INTO ops.collection_status (run_id, source, device, status, started_at, finished_at) VALUES "
        "('r1', 'kubernetes', 'c1', 'ok', %s, %s), ('r2', 'kubernetes', 'c1', 'ok', %s, %s)",
        (L1 - timedelta(seconds=5), L1, L2 - timedelta(seconds=5), L2),
    )
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO raw.k8s_pod_snapshots (run_id, source, collected_at, event, uid, namespace, name, node, "
            "phase, start_time, end_time, gpus, root_id, parent_id, depth, client, task, agent_type, tier, labels) "
            "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            snaps,
        )
    conn.execute("CREATE SCHEMA IF NOT EXISTS finops")
    conn.execute(
        'CREATE TABLE finops.gpu_cost_hourly ("ResourceId" text, "x_Cluster" text, "x_CostBasis" text, '
        '"x_LineType" text, "ConsumedQuantity" numeric(38, 9), "EffectiveCost" numeric(38, 9), '
        '"x_Seconds" numeric(38, 6), "ChargePeriodStart" timestamptz)'
    )
    lines = [
        line("done", 10, 540, "0.3", "0.855"),
        line("done", 11, 1260, "0.7", "1.995"),
        line("done", 10, 540, "0.12", "0.342", basis="usage"),  # other basis: ignored
        line("done", 11, 1260, "0.28", "0.798", basis="usage"),
        line("gone", 10, 600, "0.166666667", "0.475000001"),
        line("running", 10, 600, "0.166666667", "0.475000001"),  # so far; it is still running
        line("other", 10, 3600, "1", "2.85"),  # another pod entirely
    ]
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO finops.gpu_cost_hourly VALUES (%s,%s,%s,%s,%s,%s,%s,%s)", lines)


def ledger(conn: psycopg.Connection) -> dict[str, tuple[Any, ...]]:
    rows = conn.execute(
        "SELECT agent_id, state, settled_gpu_hours, settled_cost_usd FROM agents.ledger WHERE root_id = %s", (ROOT,)
    )
    return {r[0]: tuple(r[1:]) for r in rows}


def totals(conn: psycopg.Connection) -> tuple[Decimal, ...]:
    tree, _ = read_tree(conn, ROOT)
    assert tree is not None
    return (tree.reserved_gpu_hours, tree.reserved_cost_usd, tree.spent_gpu_hours, tree.spent_cost_usd)


def test_finished_pods_are_settled_with_their_measured_usage_once(conn: psycopg.Connection) -> None:
    land(conn)
    assert totals(conn) == (Decimal(7), Decimal(21), Decimal(0), Decimal(0))
    # A tree in a cluster FinOps does not collect: absent from c1's lists proves nothing about it.
    elsewhere = manifest(ROOT)
    elsewhere["metadata"]["labels"].update({f"{P}/agent-id": "root-2", f"{P}/root-id": "root-2"})
    req = parse_pod(elsewhere, NS, CONFIG)
    assert isinstance(req, PodRequest) and admit(conn, req, ADMITTED).allowed

    now = L2 + timedelta(minutes=5)
    report = settle_finished(conn, POLICY, now, prefix=P)
    assert dict(report.by_rule) == {
        "running": 2,
        "measured": 2,
        "never_seen": 1,
        "cost_pending": 1,
        "not_seen_yet": 1,
    }
    assert report.settled == 3
    rows = ledger(conn)
    # measured: the allocation lines of the pod's uid, summed over its hours; the usage basis ignored
    assert rows["done"] == ("settled", Decimal("1.000000000"), Decimal("2.850000000"))
    assert rows["gone"] == ("settled", Decimal("0.166666667"), Decimal("0.475000001"))
    # admitted, but no snapshot ever showed it though its tree's cluster c1 was listed 70 min after: released at 0
    assert rows["ghost"] == ("settled", Decimal("0E-9"), Decimal("0E-9"))
    assert rows[ROOT][0] == rows["running"][0] == rows["nocost"][0] == "reserved"
    # reservations of done (2 GPU-h / $6), gone and ghost (1 / $3 each) left reserved for spent
    assert totals(conn) == (
        Decimal(3),
        Decimal(9),
        Decimal("1.166666667"),
        Decimal("3.325000001"),
    )
    audit = conn.execute(
        "SELECT pod, action, lim FROM agents.budget_audit WHERE root_id = %s ORDER BY id", (ROOT,)
    ).fetchall()
    assert audit == [("pod-ghost", "settled", "never_seen")]

    # Idempotent: the same pass again changes nothing at all.
    before = (ledger(conn), totals(conn))
    again = settle_finished(conn, POLICY, now, prefix=P)
    assert again.settled == 0 and dict(again.by_rule) == {"running": 2, "cost_pending": 1, "not_seen_yet": 1}
    assert (ledger(conn), totals(conn)) == before


def test_a_pod_the_cost_fact_never_covers_is_settled_from_snapshots_after_the_bound(conn: psycopg.Connection) -> None:
    land(conn)
    ended = T0 + timedelta(minutes=20)
    settle_finished(conn, POLICY, ended + timedelta(seconds=3599), prefix=P)
    assert ledger(conn)["nocost"][0] == "reserved"  # still inside the bound: wait for dbt
    spent_before = totals(conn)[2:]

    report = settle_finished(conn, POLICY, ended + timedelta(seconds=3600), prefix=P)
    assert report.by_rule["estimated"] == 1 and report.settled == 1
    # 1 GPU x 1200 s = 1/3 GPU-h, priced at admission's $3 per GPU-h
    assert ledger(conn)["nocost"] == ("settled", Decimal("0.333333333"), Decimal("0.999999999"))
    assert totals(conn)[2:] == (spent_before[0] + Decimal("0.333333333"), spent_before[1] + Decimal("0.999999999"))
    reason = conn.execute(
        "SELECT reason FROM agents.budget_audit WHERE root_id = %s AND lim = 'estimated'", (ROOT,)
    ).fetchone()
    assert reason is not None and "no cost line" in reason[0]
    assert ledger(conn)["running"][0] == "reserved"  # still running after all this time


def test_without_any_cost_fact_or_snapshots_nothing_settles(conn: psycopg.Connection) -> None:
    report = settle_finished(conn, POLICY, L2 + timedelta(days=3), prefix=P)
    assert report.settled == 0 and dict(report.by_rule) == {"not_seen_yet": 6}
    assert totals(conn) == (Decimal(7), Decimal(21), Decimal(0), Decimal(0))


def test_the_asset_settles_with_the_site_files_bounds_and_reports_counts(
    conn: psycopg.Connection, fresh_database_url: str, tmp_path: Any
) -> None:
    import dagster as dg

    from assets.agents.settlement import BUDGET_SETTLEMENT, budget_settlement
    from pipelines.resources import SiteConfigResource, WarehouseResource

    land(conn)
    site = tmp_path / "gpufabric.yaml"
    site.write_text("version: 1\nbudget:\n  settlement: {cost_wait_s: 600, unseen_after_s: 900}\n")
    result = dg.materialize(
        [budget_settlement],
        resources={"warehouse": WarehouseResource(url=fresh_database_url), "site": SiteConfigResource(path=str(site))},
    )
    assert result.success
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key == BUDGET_SETTLEMENT]
    metadata = event.materialization.metadata
    # wall-clock now is long past every bound of this 2026-12-02 morning: nocost is estimated
    assert metadata["by_rule"].value == {"running": 2, "measured": 2, "never_seen": 1, "estimated": 1}
    assert metadata["settled"].value == 4
    assert metadata["released_gpu_hours"].value == 5.0
    assert ledger(conn)["nocost"][0] == "settled" and ledger(conn)["running"][0] == "reserved"
