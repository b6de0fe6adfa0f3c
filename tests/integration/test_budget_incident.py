"""The 847-pod incident against the kube twin, without and with the budget webhook (HTTPS).

The twin has no admission chain, so with the controller each pod is sent to the webhook first
and created on the twin only when admitted — what the API server would do.
"""

from __future__ import annotations

import json
import ssl
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from connectors.kube import ClusterTarget, api_client
from connectors.warehouse.ledger import ConnectionPool, read_tree, settle
from controllers.budget_webhook import make_app
from core.budget import BudgetConfig, Envelope
from simulator.budget_incident import TOTAL_PODS, ReplayResult, replay
from simulator.generator import generate
from simulator.kube import start
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from simulator.up import stop_pids
from tests.integration.test_budget_webhook import post, review, serve_https

pytestmark = pytest.mark.integration
NS = "agents"
START = datetime(2026, 12, 31, 9, 0, tzinfo=UTC)
RATE = Decimal(3)
ENVELOPE = Envelope(gpu_hours=Decimal(200), cost_usd=Decimal(600), max_live_pods=250, max_depth=3, max_fan_out=60)



@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.CoreV1Api]:
    run = start(generate(load_spec(resolve_spec_path("h100-1su"))), tmp_path_factory.mktemp("budget-twin"))
    api = api_client(ClusterTarget(kubeconfig=Path(run.extra["kubeconfig"])))
    try:
        yield client.CoreV1Api(api)
    finally:
        api.close()
        stop_pids(run.pids)


def live(core: client.CoreV1Api, root: str) -> int:
    return len(core.list_namespaced_pod(NS, label_selector=f"gpufabric.io/root-id={root}").items)


def twin_calls(core: client.CoreV1Api) -> dict[str, Any]:
    return {
        "create": lambda body: core.create_namespaced_pod(NS, body),
        "delete": lambda name: core.delete_namespaced_pod(name, NS),
    }


def readme_row(r: ReplayResult, *, hours_places: int = 1, cost_places: int = 0) -> tuple[str, ...]:
    """(pods created, denied, peak live pods, GPU-h, cost) formatted as the README's table."""
    cost = r.minutes[-1].cost_usd
    return (
        str(r.created),
        str(len(r.denials)),
        str(r.peak_live),
        f"{r.final_gpu_hours:.{hours_places}f}",
        f"${cost:,.{cost_places}f}",
    )


def test_without_controller_the_tree_outgrows_its_envelope(core: client.CoreV1Api) -> None:
    root = f"q4-{uuid.uuid4().hex[:8]}"
    r = replay(
        root,
        START,
        admit=lambda body, now: (True, ""),
        settle=lambda *a: None,
        rate_usd=RATE,
        observe=lambda: live(core, root),
        **twin_calls(core),
    )
    assert r.created == TOTAL_PODS
    assert r.peak_live == 768 and max(m.observed_live or 0 for m in r.minutes) == 768
    assert r.peak_live > ENVELOPE.max_live_pods
    assert r.final_gpu_hours > ENVELOPE.gpu_hours and r.minutes[-1].cost_usd > ENVELOPE.cost_usd
    assert r.denials == []
    # the README's row, as it prints it: 847 | 0 | 768 | 546.7 | $1,640
    assert readme_row(r) == ("847", "0", "768", "546.7", "$1,640")


def test_with_controller_live_pods_gpu_hours_and_cost_stay_inside(
    core: client.CoreV1Api, warehouse: Any, tmp_path: Path
) -> None:
    root = f"q4-{uuid.uuid4().hex[:8]}"
    config = BudgetConfig(
        defaults={"acme": ENVELOPE}, rates_usd_per_gpu_hour={"*": RATE}, governed_namespaces=frozenset({NS})
    )
    pool = ConnectionPool(warehouse.libpq_url, size=2)
    clock = [START]
    serving, url, cert = serve_https(make_app(config, pool, clock=lambda: clock[0]), tmp_path)
    http = httpx.Client(verify=ssl.create_default_context(cafile=str(cert)), timeout=30)

    def admit(body: dict[str, Any], now: datetime) -> tuple[bool, str]:
        clock[0] = now
        resp = post(http, url, review(body, namespace=NS))
        return bool(resp["allowed"]), resp.get("status", {}).get("message", "")

    def do_settle(agent: str, hours: Decimal, cost: Decimal, now: datetime) -> None:
        with pool.connection() as conn:
            assert settle(conn, root, agent, hours, cost, now)

    try:
        r = replay(
            root,
            START,
            admit=admit,
            settle=do_settle,
            rate_usd=RATE,
            observe=lambda: live(core, root),
            **twin_calls(core),
        )
        with pool.connection() as conn:
            tree, nodes = read_tree(conn, root)
    finally:
        http.close()
        serving.stop()
        pool.close()
    per_minute = [(m.minute, m.live_pods, m.observed_live, m.gpu_hours, m.cost_usd) for m in r.minutes]
    for minute, live_pods, observed, hours, cost in per_minute:
        assert live_pods == observed, minute
        assert live_pods <= ENVELOPE.max_live_pods, minute
        assert hours <= ENVELOPE.gpu_hours, minute
        assert cost <= ENVELOPE.cost_usd, minute
    assert r.created < TOTAL_PODS and r.denials
    assert all(
        d.startswith(f"denied: root {root} (agents), limit ") and "envelope gpu_hours=200" in d for d in r.denials
    )
    limits = {d.split("limit ")[1].split(":")[0] for d in r.denials}
    assert "live_pods" in limits or "gpu_hours" in limits
    assert tree is not None and tree.committed_gpu_hours <= ENVELOPE.gpu_hours
    assert len(nodes) == r.created
    # The README's row: 194 | 437 | 194 | 199.97 | $599.92. Exactly: the GPU-hours are
    # 194 admitted pods' units x minutes (MIG slices are 3/7 of a GPU), and the webhook denied the
    # first spawn that would have taken the tree's reservations past 200 GPU-h, and every later one.
    assert readme_row(r, hours_places=2, cost_places=2) == ("194", "437", "194", "199.97", "$599.92")
    assert limits == {"gpu_hours"}
    assert abs(r.final_gpu_hours - Decimal(167978) / 840) < Decimal("1e-20")  # 199.97380952...
    # every admitted pod finished and was settled with what it used: the ledger holds the same total
    assert tree.reserved_gpu_hours == 0 and abs(tree.spent_gpu_hours - r.final_gpu_hours) < Decimal("1e-6")
    print(
        json.dumps(
            {
                "created": r.created,
                "denied": len(r.denials),
                "peak_live": r.peak_live,
                "gpu_hours": str(r.final_gpu_hours),
                "limits": sorted(limits),
            }
        )
    )


def _created(core: client.CoreV1Api, name: str) -> datetime:
    """The pod's creationTimestamp as the API server stamped it."""
    stamp = core.read_namespaced_pod(name, NS).metadata.creation_timestamp
    assert stamp is not None
    return stamp


def _next_second(after: datetime) -> None:
    """Wait until the clock the API server stamps with (this machine's; whole seconds) has moved
    past ``after``: a pod created now gets a later creationTimestamp."""
    while datetime.now(UTC) < after + timedelta(seconds=1):
        time.sleep(0.05)


def _setup_over_budget_tree(core: client.CoreV1Api, conn: Any, config: BudgetConfig, root: str) -> dict[str, datetime]:
    """A root, two running leaves and one pending leaf c, admitted through the ledger and created
    on the twin, which stamps creationTimestamp itself. Leaf ``-a`` is created a second after
    ``-b``, so by creation time ``-a`` is the newest while by name it sorts first. Then late
    telemetry says the tree used 12 GPU-h of a 10 GPU-h envelope. Returns the served timestamps."""
    from connectors.warehouse.ledger import admit
    from core.budget import PodRequest, parse_pod
    from simulator.budget_incident import PlannedPod, manifest

    now = datetime.now(UTC)
    plan = [
        PlannedPod(root, None, 0, "orchestrator", 0, 60, 1),
        PlannedPod(f"{root}-b", root, 1, "worker", 1, 60, 1),
        PlannedPod(f"{root}-a", root, 1, "worker", 2, 60, 1),
        PlannedPod(f"{root}-c", root, 1, "worker", 3, 60, 1),
    ]
    created: dict[str, datetime] = {}
    for p in plan:
        body = manifest(p, root, "acme", "standard")
        req = parse_pod(body, NS, config)
        assert isinstance(req, PodRequest), req
        assert admit(conn, req, now).allowed
        if p.agent_id.endswith("-a"):
            _next_second(created[f"{root}-b"])
        core.create_namespaced_pod(NS, body)
        created[p.agent_id] = _created(core, p.agent_id)
        if not p.agent_id.endswith("-c"):
            core.patch_namespaced_pod_status(p.agent_id, NS, {"status": {"phase": "Running"}})
    assert created[f"{root}-a"] > created[f"{root}-b"]  # the server's own stamps order them
    conn.execute(
        "INSERT INTO agents.tree_usage (root_id, client, task, agent_type, tier, clusters, pods_total, live_pods, "
        "max_fan_out, gpus_live, gpu_hours, cost_usd, as_of) "
        "VALUES (%s,'acme','q4','orchestrator','standard','{twin}',4,4,3,4,12,36,%s)",
        (root, now),
    )
    return created


def test_reconciler_gates_first_then_newest_leaves_never_root_and_alert_only(
    core: client.CoreV1Api, warehouse: Any
) -> None:
    """Creation times come from the API server, as in production, and ``now`` is the wall clock.
    The pods are made old enough to delete by waiting, a few seconds, for a stop deadline of
    ``DEADLINE_S`` (production uses 30 s): first pass while the leaves are younger than a 600 s
    deadline (they get one), then a pass once they are ``DEADLINE_S`` old (they are deleted)."""
    from controllers.budget_reconciler import reconcile_once

    small = Envelope(gpu_hours=Decimal(10), cost_usd=Decimal(100), max_live_pods=10, max_depth=3, max_fan_out=10)
    for alert_only in (True, False):
        root = f"rc-{uuid.uuid4().hex[:8]}"
        controller = f"test-{root}"
        config = BudgetConfig(defaults={"acme": small}, rates_usd_per_gpu_hour={"*": RATE}, alert_only=alert_only)
        with psycopg_connect(warehouse) as conn:
            created = _setup_over_budget_tree(core, conn, config, root)

            def run(deadline_s: int, conn: Any = conn, config: BudgetConfig = config, root: str = root) -> Any:
                return reconcile_once(
                    core.api_client, conn, config, datetime.now(UTC), controller=f"test-{root}", roots=[root],
                    deadline_s=deadline_s,
                )  # fmt: skip

            def audited(conn: Any = conn, controller: str = controller) -> list[tuple[str, str, str]]:
                return conn.execute(
                    "SELECT action, pod, reason FROM agents.budget_audit WHERE controller = %s ORDER BY id",
                    (controller,),
                ).fetchall()

            def state(conn: Any = conn, root: str = root) -> Any:
                return conn.execute("SELECT state FROM agents.envelopes WHERE root_id = %s", (root,)).fetchone()

            reason = f"root {root} over envelope: gpu_hours 12 > 10"
            first = run(600)
            if alert_only:
                assert [(a, p) for a, p, _ in audited()] == [("alert", root)]
                assert audited()[0][2] == reason
                assert state() == ("open",)
                assert sorted(pods_of(core, root)) == sorted(created)
                continue
            assert first.trees_over == [root]
            # gate the pending leaf; the running leaves, newest (by the server's stamp) first, get a deadline
            assert [(a, p) for a, p, _ in audited()] == [
                ("gate", f"{root}-c"),
                ("deadline", f"{root}-a"),
                ("deadline", f"{root}-b"),
            ]
            assert state() == ("over_budget",)
            left = pods_of(core, root)
            assert sorted(left) == sorted(created)
            assert left[f"{root}-c"].metadata.annotations["gpufabric.io/suspended"] == "true"
            assert left[f"{root}-a"].spec.active_deadline_seconds == 600

            # Real time passes: once the youngest leaf is DEADLINE_S old by the server's stamp, the
            # next pass deletes the leaves still there, newest first; the root is never touched.
            _wait_until_old(max(created.values()), DEADLINE_S)
            run(DEADLINE_S)
            assert [(a, p) for a, p, _ in audited()][3:] == [("delete", f"{root}-a"), ("delete", f"{root}-b")]
            assert all(x == reason for _, _, x in audited())
            assert sorted(pods_of(core, root)) == sorted([root, f"{root}-c"])


DEADLINE_S = 2


def _wait_until_old(stamp: datetime, seconds: int) -> None:
    while datetime.now(UTC) < stamp + timedelta(seconds=seconds):
        time.sleep(0.05)


def pods_of(core: client.CoreV1Api, root: str) -> dict[str, Any]:
    items = core.list_namespaced_pod(NS, label_selector=f"gpufabric.io/root-id={root}").items
    return {p.metadata.name: p for p in items}


def psycopg_connect(warehouse: Any) -> Any:
    import psycopg

    return psycopg.connect(warehouse.libpq_url, autocommit=True)
