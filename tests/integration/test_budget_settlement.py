"""Settle-on-finish against Postgres, through the production path end to end: reservations
written by the real admission path; pod lists as the API serves them, parsed by
``connectors.kube.pods`` and landed by the snapshot asset's loader (``land_pod_snapshots``); the
FinOps cost fact ``finops.gpu_cost_hourly`` built by ``dbt build`` from those snapshots and the
rate-card seed; then ``settle_finished``.

The timeline is the production one: lists at 11:00 (L1) and 11:30 (L2), dbt builds the cost fact
after L2, and a third list at 11:40 (L3) lands after that build, so a pod that only ran between
L2 and L3 has no cost line yet. dbt runs once for the module into a template database; each test
settles in its own copy of it (``CREATE DATABASE ... TEMPLATE``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from connectors.kube.pods import node_snapshot, parse_pods
from connectors.warehouse import Warehouse, open_warehouse
from connectors.warehouse.ledger import admit, read_tree
from connectors.warehouse.settlement import settle_finished
from core.budget import BudgetConfig, Envelope, PodRequest, SettlementPolicy, parse_pod
from services.pod_snapshots import land_pod_snapshots
from tests.integration.test_finops_week import load_test_price_book

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)

DBT_DIR = Path(__file__).resolve().parents[2] / "dbt"
P = "gpufabric.io"
NS = "agents"
ROOT = "task-1"
CLUSTER = "c1"
T0 = datetime(2026, 12, 2, 10, 50, tzinfo=UTC)  # pods start here; their hours straddle 11:00
ADMITTED = T0 - timedelta(minutes=30)
L1, L2, L3 = T0 + timedelta(minutes=10), T0 + timedelta(minutes=40), T0 + timedelta(minutes=50)
NOCOST_START, NOCOST_END = T0 + timedelta(minutes=41), T0 + timedelta(minutes=46)  # between L2 and L3
POLICY = SettlementPolicy(cost_wait_s=3600, unseen_after_s=900)
CONFIG = BudgetConfig(
    defaults={"acme": Envelope(Decimal(100), Decimal(300), 10, 3, 10)}, rates_usd_per_gpu_hour={"*": Decimal(3)}
)
# agent -> (GPUs, expected hours): reservations 1, 2, 1, 1, 1, 1 GPU-h at $3 each (the H100
# standard tier of tests/fixtures/finops/rate_cards.yaml is $3.00 per GPU-hour too)
AGENTS = {ROOT: (1, 1), "done": (2, 1), "gone": (1, 1), "running": (1, 1), "nocost": (1, 1), "ghost": (1, 1)}
NODE = {
    "metadata": {
        "name": "node-1",
        "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
    },
    "status": {"allocatable": {"nvidia.com/gpu": "8"}},
}


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


def _rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def served(agent: str, phase: str, start: datetime | None = None, end: datetime | None = None) -> dict[str, Any]:
    """The pod as the API server lists it: uid, namespace, node, phase, start and container end."""
    pod = manifest(agent)
    pod["metadata"] |= {"uid": f"uid-{agent}", "namespace": NS}
    pod["spec"]["nodeName"] = "node-1"
    status: dict[str, Any] = {"phase": phase}
    if start is not None:
        status["startTime"] = _rfc3339(start)
    if end is not None:
        terminated = {"exitCode": 0 if phase == "Succeeded" else 1, "finishedAt": _rfc3339(end)}
        status["containerStatuses"] = [{"name": "c", "state": {"terminated": terminated}}]
    pod["status"] = status
    return pod


LISTS: dict[datetime, list[dict[str, Any]]] = {
    L1: [
        served(ROOT, "Running", T0),
        served("done", "Running", T0 + timedelta(minutes=1)),
        served("gone", "Running", T0),  # not in the next list: deleted between the two runs
        served("running", "Running", T0),
        served("nocost", "Pending"),  # admitted, not scheduled yet
    ],
    L2: [
        served(ROOT, "Running", T0),
        # 10:51 -> 11:21, 2 GPUs: 1 GPU-h, 540 s before 11:00 and 1260 s after
        served("done", "Succeeded", T0 + timedelta(minutes=1), T0 + timedelta(minutes=31)),
        served("running", "Running", T0),
        served("nocost", "Pending"),
    ],
    L3: [  # lands after dbt built the cost fact
        served(ROOT, "Running", T0),
        served("done", "Succeeded", T0 + timedelta(minutes=1), T0 + timedelta(minutes=31)),
        served("running", "Running", T0),
        # 5 minutes on 1 GPU, then failed: no cost line until dbt's next build
        served("nocost", "Failed", NOCOST_START, NOCOST_END),
    ],
}


def land_list(url: str, at: datetime) -> None:
    """One complete list of cluster c1 (and its node), landed as the snapshot asset lands it."""
    wh = open_warehouse(url)
    try:
        with wh.connect() as conn:
            pods = parse_pods(LISTS[at], cluster=CLUSTER, collected_at=at, prefix=P)
            assert pods.quarantined == []
            nodes = [node_snapshot(NODE, cluster=CLUSTER, collected_at=at)]
            land_pod_snapshots(
                conn, run_id=f"list-{at:%H%M}", cluster=CLUSTER, pods=pods, nodes=nodes,
                started_at=at - timedelta(seconds=5),
            )  # fmt: skip
            conn.commit()
    finally:
        wh.dispose()


def dbt_build_cost_fact(url: str, target: Path) -> None:
    wh = open_warehouse(url)
    try:
        load_test_price_book(wh)  # the price book dbt prices from (issue 25)
        env = dict(os.environ, **wh.libpq_env())
    finally:
        wh.dispose()
    result = subprocess.run(
        [str(Path(sys.executable).with_name("dbt")), "build", "--select", "+gpu_cost_hourly", "--project-dir",
         str(DBT_DIR), "--profiles-dir", str(DBT_DIR), "--target-path", str(target / "target"), "--log-path",
         str(target / "logs")],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-3000:]


@pytest.fixture(scope="module")
def costed_template(warehouse: Warehouse, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database with L1 and L2 landed, the cost fact built by dbt, then L3 landed."""
    name = f"t_settle_{uuid.uuid4().hex[:10]}"
    admin_url = warehouse.base_url.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = warehouse.base_url.set(database=name).render_as_string(hide_password=False)
    try:
        open_warehouse(url).dispose()  # migrate
        land_list(url, L1)
        land_list(url, L2)
        dbt_build_cost_fact(url, tmp_path_factory.mktemp("dbt-settlement"))
        land_list(url, L3)
        yield name
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _admit_all(c: psycopg.Connection) -> None:
    for agent in AGENTS:
        req = parse_pod(manifest(agent), NS, CONFIG)
        assert isinstance(req, PodRequest), req
        assert admit(c, req, ADMITTED).allowed


@pytest.fixture
def costed_url(warehouse: Warehouse, costed_template: str) -> Iterator[str]:
    """This test's own copy of the template database."""
    name = f"t_settle_{uuid.uuid4().hex[:10]}"
    admin_url = warehouse.base_url.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(costed_template))
        )
    try:
        yield warehouse.base_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def costed(costed_url: str) -> Iterator[psycopg.Connection]:
    """Snapshots and dbt's cost fact in place; every agent admitted."""
    with psycopg.connect(costed_url, autocommit=True) as c:
        _admit_all(c)
        yield c


@pytest.fixture
def conn(fresh_database_url: str) -> Iterator[psycopg.Connection]:
    """Nothing collected, nothing built; every agent admitted."""
    wh = open_warehouse(fresh_database_url)  # migrates the fresh database
    with psycopg.connect(fresh_database_url, autocommit=True) as c:
        _admit_all(c)
        yield c
    wh.dispose()


def cost_fact(conn: psycopg.Connection, agent: str) -> tuple[Decimal, Decimal]:
    """(GPU-h, USD) of the agent's pod in dbt's cost fact, allocation basis."""
    row = conn.execute(
        'SELECT sum("ConsumedQuantity"), sum("EffectiveCost") FROM finops.gpu_cost_hourly '
        'WHERE "ResourceId" = %s AND "x_CostBasis" = \'allocation\' AND "x_LineType" = \'workload\'',
        (f"uid-{agent}",),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def ledger(conn: psycopg.Connection) -> dict[str, tuple[Any, ...]]:
    rows = conn.execute(
        "SELECT agent_id, state, settled_gpu_hours, settled_cost_usd FROM agents.ledger WHERE root_id = %s", (ROOT,)
    )
    return {r[0]: tuple(r[1:]) for r in rows}


def totals(conn: psycopg.Connection) -> tuple[Decimal, ...]:
    tree, _ = read_tree(conn, ROOT)
    assert tree is not None
    return (tree.reserved_gpu_hours, tree.reserved_cost_usd, tree.spent_gpu_hours, tree.spent_cost_usd)


def test_the_cost_fact_is_dbts_own(costed: psycopg.Connection) -> None:
    """What the settlement will read, as dbt built it: both hours of done priced from the rate
    card, gone up to the list it was last in, running so far, nocost not at all (yet)."""
    lines = costed.execute(
        'SELECT "ResourceId", "ChargePeriodStart", "x_Seconds", "ConsumedQuantity", "EffectiveCost" '
        "FROM finops.gpu_cost_hourly WHERE \"x_CostBasis\" = 'allocation' AND \"x_LineType\" = 'workload' "
        "ORDER BY 1, 2"
    ).fetchall()
    h10, h11 = T0.replace(minute=0), T0.replace(hour=11, minute=0)
    assert lines == [
        ("uid-done", h10, Decimal("540.000000"), Decimal("0.300000000"), Decimal("0.900000000")),
        ("uid-done", h11, Decimal("1260.000000"), Decimal("0.700000000"), Decimal("2.100000000")),
        ("uid-gone", h10, Decimal("600.000000"), Decimal("0.166666667"), Decimal("0.500000000")),
        ("uid-running", h10, Decimal("600.000000"), Decimal("0.166666667"), Decimal("0.500000000")),
        ("uid-running", h11, Decimal("1800.000000"), Decimal("0.500000000"), Decimal("1.500000000")),
        ("uid-task-1", h10, Decimal("600.000000"), Decimal("0.166666667"), Decimal("0.500000000")),
        ("uid-task-1", h11, Decimal("1800.000000"), Decimal("0.500000000"), Decimal("1.500000000")),
    ]


def test_finished_pods_are_settled_with_their_measured_usage_once(costed: psycopg.Connection) -> None:
    conn = costed
    assert totals(conn) == (Decimal(7), Decimal(21), Decimal(0), Decimal(0))
    # A tree in a cluster FinOps does not collect: absent from c1's lists proves nothing about it.
    elsewhere = manifest(ROOT)
    elsewhere["metadata"]["labels"].update({f"{P}/agent-id": "root-2", f"{P}/root-id": "root-2"})
    req = parse_pod(elsewhere, NS, CONFIG)
    assert isinstance(req, PodRequest) and admit(conn, req, ADMITTED).allowed

    now = L3 + timedelta(minutes=5)
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
    # measured: exactly dbt's allocation lines of the pod's uid, summed over its hours
    assert rows["done"] == ("settled", *cost_fact(conn, "done")) == ("settled", Decimal("1.000000000"), Decimal(3))
    assert rows["gone"] == ("settled", *cost_fact(conn, "gone"))
    assert rows["gone"] == ("settled", Decimal("0.166666667"), Decimal("0.500000000"))
    # admitted, but no snapshot ever showed it though its tree's cluster c1 was listed 80 min after: released at 0
    assert rows["ghost"] == ("settled", Decimal("0E-9"), Decimal("0E-9"))
    assert rows[ROOT][0] == rows["running"][0] == rows["nocost"][0] == "reserved"
    # reservations of done (2 GPU-h / $6), gone and ghost (1 / $3 each) left reserved for spent
    assert totals(conn) == (Decimal(3), Decimal(9), Decimal("1.166666667"), Decimal("3.500000000"))
    audit = conn.execute(
        "SELECT pod, action, lim FROM agents.budget_audit WHERE root_id = %s ORDER BY id", (ROOT,)
    ).fetchall()
    assert audit == [("pod-ghost", "settled", "never_seen")]

    # Idempotent: the same pass again changes nothing at all.
    before = (ledger(conn), totals(conn))
    again = settle_finished(conn, POLICY, now, prefix=P)
    assert again.settled == 0 and dict(again.by_rule) == {"running": 2, "cost_pending": 1, "not_seen_yet": 1}
    assert (ledger(conn), totals(conn)) == before


def test_a_pod_the_cost_fact_never_covers_is_settled_from_snapshots_after_the_bound(
    costed: psycopg.Connection,
) -> None:
    conn = costed
    assert cost_fact(conn, "nocost") == (None, None)  # dbt built before the list that shows it ran
    settle_finished(conn, POLICY, NOCOST_END + timedelta(seconds=3599), prefix=P)
    assert ledger(conn)["nocost"][0] == "reserved"  # still inside the bound: wait for dbt
    spent_before = totals(conn)[2:]

    report = settle_finished(conn, POLICY, NOCOST_END + timedelta(seconds=3600), prefix=P)
    assert report.by_rule["estimated"] == 1 and report.settled == 1
    # 1 GPU x 300 s = 1/12 GPU-h, priced at admission's $3 per GPU-h
    assert ledger(conn)["nocost"] == ("settled", Decimal("0.083333333"), Decimal("0.249999999"))
    assert totals(conn)[2:] == (spent_before[0] + Decimal("0.083333333"), spent_before[1] + Decimal("0.249999999"))
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
    costed: psycopg.Connection, costed_url: str, tmp_path: Any
) -> None:
    import dagster as dg

    from assets.agents.settlement import BUDGET_SETTLEMENT, budget_settlement
    from pipelines.resources import SiteConfigResource, WarehouseResource

    site = tmp_path / "gpufabric.yaml"
    site.write_text("version: 1\nbudget:\n  settlement: {cost_wait_s: 600, unseen_after_s: 900}\n")
    result = dg.materialize(
        [budget_settlement],
        resources={"warehouse": WarehouseResource(url=costed_url), "site": SiteConfigResource(path=str(site))},
    )
    assert result.success
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key == BUDGET_SETTLEMENT]
    metadata = event.materialization.metadata
    # wall-clock now is long past every bound of this 2026-12-02 morning: nocost is estimated
    assert metadata["by_rule"].value == {"running": 2, "measured": 2, "never_seen": 1, "estimated": 1}
    assert metadata["settled"].value == 4
    assert metadata["released_gpu_hours"].value == 5.0
    rows = ledger(costed)
    assert rows["nocost"][0] == "settled" and rows["running"][0] == "reserved"
    assert rows["done"] == ("settled", *cost_fact(costed, "done"))
