"""The 847-pod incident against the kube twin, without and with the budget webhook (HTTPS).

The twin has no admission chain, so with the controller each pod is sent to the webhook first
and created on the twin only when admitted — what the API server would do.
"""

from __future__ import annotations

import json
import ssl
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from connectors.kube import api_client
from connectors.warehouse.ledger import ConnectionPool, read_tree, settle
from controllers.budget_webhook import make_app
from core.budget import BudgetConfig, Envelope
from simulator.budget_incident import TOTAL_PODS, replay
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


@dataclass
class Source:
    kubeconfig: Path | None = None
    context: str | None = None
    in_cluster: bool = False
    api_url: str | None = None


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.CoreV1Api]:
    run = start(generate(load_spec(resolve_spec_path("h100-1su"))), tmp_path_factory.mktemp("budget-twin"))
    api = api_client(Source(kubeconfig=Path(run.extra["kubeconfig"])))
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


def _setup_over_budget_tree(core: client.CoreV1Api, conn: Any, config: BudgetConfig, root: str) -> None:
    """A root, two running leaves (a older than b), one pending leaf c; then late telemetry says
    the tree used 12 GPU-h of a 10 GPU-h envelope."""
    from connectors.warehouse.ledger import admit
    from core.budget import parse_pod
    from simulator.budget_incident import PlannedPod, manifest

    plan = [
        PlannedPod(root, None, 0, "orchestrator", 0, 60, 1),
        PlannedPod(f"{root}-a", root, 1, "worker", 1, 60, 1),
        PlannedPod(f"{root}-b", root, 1, "worker", 2, 60, 1),
        PlannedPod(f"{root}-c", root, 1, "worker", 3, 60, 1),
    ]
    for p in plan:
        body = manifest(p, root, "acme", "standard")
        req = parse_pod(body, NS, config)
        assert not isinstance(req, type(None)) and hasattr(req, "root_id"), req
        assert admit(conn, req, START).allowed  # type: ignore[arg-type]
        core.create_namespaced_pod(NS, body)
        if not p.agent_id.endswith("-c"):
            core.patch_namespaced_pod_status(p.agent_id, NS, {"status": {"phase": "Running"}})
    conn.execute(
        "INSERT INTO agents.tree_usage (root_id, client, task, agent_type, tier, clusters, pods_total, live_pods, "
        "max_fan_out, gpus_live, gpu_hours, cost_usd, as_of) "
        "VALUES (%s,'acme','q4','orchestrator','standard','{twin}',4,4,3,4,12,36,%s)",
        (root, START),
    )


def test_reconciler_gates_first_then_newest_leaves_never_root_and_alert_only(
    core: client.CoreV1Api, warehouse: Any
) -> None:
    from datetime import timedelta

    from controllers.budget_reconciler import reconcile_once

    small = Envelope(gpu_hours=Decimal(10), cost_usd=Decimal(100), max_live_pods=10, max_depth=3, max_fan_out=10)
    for alert_only in (True, False):
        root = f"rc-{uuid.uuid4().hex[:8]}"
        config = BudgetConfig(defaults={"acme": small}, rates_usd_per_gpu_hour={"*": RATE}, alert_only=alert_only)
        created = {
            root: START,
            f"{root}-a": START + timedelta(minutes=1),
            f"{root}-b": START + timedelta(minutes=2),
            f"{root}-c": START + timedelta(minutes=3),
        }
        with psycopg_connect(warehouse) as conn:
            _setup_over_budget_tree(core, conn, config, root)
            now = START + timedelta(minutes=3, seconds=40)  # b is 100 s old, a 160 s: both past 30 s
            r = reconcile_once(
                core.api_client,
                conn,
                config,
                now,
                controller=f"test-{root}",
                roots=[root],
                pod_created=lambda p, created=created: created[p.name],
            )
            rows = conn.execute(
                "SELECT action, pod, reason FROM agents.budget_audit WHERE controller = %s ORDER BY id",
                (f"test-{root}",),
            ).fetchall()
            state = conn.execute("SELECT state FROM agents.envelopes WHERE root_id = %s", (root,)).fetchone()
        reason = f"root {root} over envelope: gpu_hours 12 > 10"
        if alert_only:
            assert [(a, p) for a, p, _ in rows] == [("alert", root)]
            assert rows[0][2] == reason
            assert state == ("open",)
            assert sorted(
                p.metadata.name
                for p in core.list_namespaced_pod(NS, label_selector=f"gpufabric.io/root-id={root}").items
            ) == sorted(created)
        else:
            assert r.trees_over == [root]
            assert [(a, p) for a, p, _ in rows] == [
                ("gate", f"{root}-c"),
                ("delete", f"{root}-b"),
                ("delete", f"{root}-a"),
            ]
            assert all(x == reason for _, _, x in rows)
            assert state == ("over_budget",)
            left = {
                p.metadata.name: p
                for p in core.list_namespaced_pod(NS, label_selector=f"gpufabric.io/root-id={root}").items
            }
            assert sorted(left) == sorted([root, f"{root}-c"])
            assert left[f"{root}-c"].metadata.annotations["gpufabric.io/suspended"] == "true"


def psycopg_connect(warehouse: Any) -> Any:
    import psycopg

    return psycopg.connect(warehouse.libpq_url, autocommit=True)
