"""The 847-pod incident on the real control plane, without and with the budget webhook, and the
budget reconciler acting on pods the API server stamped.

With the controller, the webhook is registered as the ``ValidatingWebhookConfiguration`` that
``deploy/budget/budget-controller.yaml`` ships (its ``service:`` swapped for a loopback ``url:``
and our CA bundle), so kube-apiserver itself asks it about every pod create in the governed
namespace: a denied spawn is the API server's 403 carrying the webhook's reason. The replay's
pods ask for GPUs and MIG slices but no node is registered: they stay Pending, which is all the
live-pod count needs (the replay's figures are about admission, not placement).
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import yaml
from kubernetes import client

from connectors.kube import ClusterTarget, api_client
from connectors.warehouse.ledger import ConnectionPool, read_tree, settle
from controllers.budget_webhook import make_app
from controllers.tls import self_signed_cert
from core.budget import BudgetConfig, Envelope
from simulator.agents.plane import ReplaceBefore, gpu_nodes, wait_until
from simulator.budget_incident import TOTAL_PODS, ReplayResult, replay
from simulator.controlplane.api import Api, ApiError

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
START = datetime(2026, 12, 31, 9, 0, tzinfo=UTC)
RATE = Decimal(3)
ENVELOPE = Envelope(gpu_hours=Decimal(200), cost_usd=Decimal(600), max_live_pods=250, max_depth=3, max_fan_out=60)
GOVERNED = {"gpufabric.io/budget": "governed"}  # the namespace label deploy/'s webhook selects


@dataclass
class Budget:
    plane: Any
    core: client.CoreV1Api
    namespace: str
    rest: Api  # the plane's pooled client, for the replay's ~1,500 creates and deletes
    pool: ThreadPoolExecutor
    pending: list[Future[Any]] = field(default_factory=list)

    @property
    def pods_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods"

    def create_later(self, body: dict[str, Any]) -> None:
        """Create without waiting: the replay's spawns within a minute are independent when
        nothing admits them one by one (:meth:`live` waits for them)."""
        self.pending.append(self.pool.submit(self.rest.post, self.pods_path, body))

    def delete_later(self, name: str) -> None:
        """A finished pod's object is removed (never bound, it goes at once), without waiting."""
        self.pending.append(self.pool.submit(self.rest.delete, f"{self.pods_path}/{name}"))

    def live(self) -> int:
        """Once this minute's creates and deletes are done: the pods the API server holds in the
        namespace (the tree's alone). Counted by the server: a one-item page and the number of
        items left after it (``remainingItemCount``, given for lists without a selector), so
        counting 768 pods every simulated minute does not move 768 pods."""
        for future in self.pending:
            future.result()
        self.pending.clear()
        page = self.rest.get(self.pods_path, limit=1)
        return len(page.get("items") or []) + int(page["metadata"].get("remainingItemCount") or 0)


@pytest.fixture
def budget(kube_cluster: Any, kube_namespace: str) -> Iterator[Budget]:
    api = api_client(ClusterTarget(kubeconfig=kube_cluster.kubeconfig))
    core = client.CoreV1Api(api)
    core.patch_namespace(kube_namespace, {"metadata": {"labels": GOVERNED}})
    rest = kube_cluster.api()
    try:
        with ThreadPoolExecutor(8) as pool:
            yield Budget(kube_cluster, core, kube_namespace, rest, pool)
    finally:
        rest.close()
        api.close()


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


def test_without_controller_the_tree_outgrows_its_envelope(budget: Budget) -> None:
    root = f"q4-{uuid.uuid4().hex[:8]}"
    r = replay(
        root,
        START,
        admit=lambda body, now: (True, ""),
        create=budget.create_later,
        delete=budget.delete_later,
        settle=lambda *a: None,
        rate_usd=RATE,
        observe=budget.live,
    )
    assert r.created == TOTAL_PODS
    assert r.peak_live == 768 and max(m.observed_live or 0 for m in r.minutes) == 768
    assert all(m.observed_live == m.live_pods for m in r.minutes)
    assert r.peak_live > ENVELOPE.max_live_pods
    assert r.final_gpu_hours > ENVELOPE.gpu_hours and r.minutes[-1].cost_usd > ENVELOPE.cost_usd
    assert r.denials == []
    # the README's row, as it prints it: 847 | 0 | 768 | 546.7 | $1,640
    assert readme_row(r) == ("847", "0", "768", "546.7", "$1,640")


# -- the webhook, registered with the API server ----------------------------------------------------


@dataclass
class Serving:
    server: uvicorn.Server
    thread: threading.Thread
    url: str
    cert: Path

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def serve_https(app: Any, workdir: Path) -> Serving:
    """The webhook app on a loopback port of its own, with a certificate for 127.0.0.1."""
    cert, key = self_signed_cert(workdir)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, ssl_certfile=str(cert), ssl_keyfile=str(key), log_level="warning",
                                           lifespan="off"))  # fmt: skip
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until("the webhook to serve", lambda: server.started, 10)
    return Serving(server, thread, f"https://127.0.0.1:{sock.getsockname()[1]}/validate", cert)


def register_budget_webhook(b: Budget, serving: Serving) -> str:
    """deploy/'s ValidatingWebhookConfiguration, pointed at ``serving``; returns its name."""
    docs = yaml.safe_load_all((ROOT / "deploy" / "budget" / "budget-controller.yaml").read_text())
    config = next(d for d in docs if d and d["kind"] == "ValidatingWebhookConfiguration")
    name = f"gpufabric-budget-{b.namespace}"
    config["metadata"] = {"name": name}  # cert-manager's CA injection annotation has no cert-manager here
    for hook in config["webhooks"]:
        hook["clientConfig"] = {"url": serving.url, "caBundle": base64.b64encode(serving.cert.read_bytes()).decode()}
    client.AdmissionregistrationV1Api(b.core.api_client).create_validating_webhook_configuration(config)
    return name


def test_with_controller_live_pods_gpu_hours_and_cost_stay_inside(
    budget: Budget, warehouse: Any, tmp_path: Path
) -> None:
    root = f"q4-{uuid.uuid4().hex[:8]}"
    ns = budget.namespace
    config = BudgetConfig(
        defaults={"acme": ENVELOPE}, rates_usd_per_gpu_hour={"*": RATE}, governed_namespaces=frozenset({ns})
    )
    pool = ConnectionPool(warehouse.libpq_url, size=2)
    clock = [START]
    serving = serve_https(make_app(config, pool, clock=lambda: clock[0]), tmp_path)
    hook = register_budget_webhook(budget, serving)
    webhook_said = 'admission webhook "budget.gpufabric.io" denied the request: '

    def admit_and_create(body: dict[str, Any], now: datetime) -> tuple[bool, str]:
        """The create itself, one at a time in spawn order: the API server asks the webhook (whose
        clock reads the replay's ``now``) and refuses the pod if it denies."""
        clock[0] = now
        try:
            budget.rest.post(budget.pods_path, body)
        except ApiError as exc:
            if exc.status == 403 and exc.message.startswith(webhook_said):
                return False, exc.message.removeprefix(webhook_said)
            raise
        return True, ""

    def do_settle(agent: str, hours: Decimal, cost: Decimal, now: datetime) -> None:
        with pool.connection() as conn:
            assert settle(conn, root, agent, hours, cost, now)

    try:
        r = replay(
            root,
            START,
            admit=admit_and_create,
            create=lambda body: None,  # created by admit_and_create
            delete=budget.delete_later,
            settle=do_settle,
            rate_usd=RATE,
            observe=budget.live,
        )
        with pool.connection() as conn:
            tree, nodes = read_tree(conn, root)
    finally:
        client.AdmissionregistrationV1Api(budget.core.api_client).delete_validating_webhook_configuration(hook)
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
        d.startswith(f"denied: root {root} ({ns}), limit ") and "envelope gpu_hours=200" in d for d in r.denials
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


# -- the reconciler -------------------------------------------------------------------------------


def _created(core: client.CoreV1Api, namespace: str, name: str) -> datetime:
    """The pod's creationTimestamp as the API server stamped it."""
    stamp = core.read_namespaced_pod(name, namespace).metadata.creation_timestamp
    assert stamp is not None
    return stamp


def _next_second(after: datetime) -> None:
    """Wait until the clock the API server stamps with (this machine's; whole seconds) has moved
    past ``after``: a pod created now gets a later creationTimestamp."""
    while datetime.now(UTC) < after + timedelta(seconds=1):
        time.sleep(0.05)


def _phase(core: client.CoreV1Api, namespace: str, name: str) -> str:
    return str(core.read_namespaced_pod(name, namespace).status.phase)


def _unschedulable(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    conditions = core.read_namespaced_pod(name, namespace).status.conditions or []
    return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conditions)


def _setup_over_budget_tree(
    plane: Any, core: client.CoreV1Api, namespace: str, conn: Any, config: BudgetConfig, root: str
) -> dict[str, datetime]:
    """A root and three leaves, admitted through the ledger, on a node of the tree's own with 3
    GPUs: kube-scheduler binds the root and the one-GPU leaves ``-b`` and ``-a`` and the node agent
    runs them; ``-c`` asks for 4 GPUs and stays Pending, even once the others are gone (the
    reconciler's "gate" is an annotation the agent runtime honours; kube-scheduler does not read
    it, so a leaf that fits would be scheduled when GPUs free up). Leaf ``-a`` is created
    a second after ``-b``, so by creation time ``-a`` is the newest while by name it sorts first.
    Then late telemetry says the tree used 12 GPU-h of a 10 GPU-h envelope. Returns the
    creationTimestamps the API server stamped."""
    from connectors.warehouse.ledger import admit
    from core.budget import PodRequest, parse_pod
    from simulator.budget_incident import PlannedPod, manifest

    node = f"{root}-node"
    plane.register_nodes(gpu_nodes(node, 1, gpus=3))
    node = f"{node}-000"
    now = datetime.now(UTC)
    plan = [
        PlannedPod(root, None, 0, "orchestrator", 0, 60, 1),
        PlannedPod(f"{root}-b", root, 1, "worker", 1, 60, 1),
        PlannedPod(f"{root}-a", root, 1, "worker", 2, 60, 1),
        PlannedPod(f"{root}-c", root, 1, "worker", 3, 60, 4),  # more GPUs than the node has
    ]
    created: dict[str, datetime] = {}
    for p in plan:
        body = manifest(p, root, "acme", "standard")
        body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}  # the tree's node, not another test's
        req = parse_pod(body, namespace, config)
        assert isinstance(req, PodRequest), req
        assert admit(conn, req, now).allowed
        if p.agent_id.endswith("-a"):
            _next_second(created[f"{root}-b"])
        core.create_namespaced_pod(namespace, body)
        created[p.agent_id] = _created(core, namespace, p.agent_id)
        if p.agent_id.endswith("-c"):
            wait_until(f"{p.agent_id} to be found unschedulable",
                       lambda: _unschedulable(core, namespace, f"{root}-c"))
        else:
            wait_until(f"{p.agent_id} to run", lambda a=p.agent_id: _phase(core, namespace, a) == "Running")  # type: ignore[misc]
    assert _phase(core, namespace, f"{root}-c") == "Pending"
    assert created[f"{root}-a"] > created[f"{root}-b"]  # the server's own stamps order them
    conn.execute(
        "INSERT INTO agents.tree_usage (root_id, client, task, agent_type, tier, clusters, pods_total, live_pods, "
        "max_fan_out, gpus_live, gpu_hours, cost_usd, as_of) "
        "VALUES (%s,'acme','q4','orchestrator','standard','{twin}',4,4,3,4,12,36,%s)",
        (root, now),
    )
    return created


DEADLINE_S = 2


def _wait_until_old(stamp: datetime, seconds: int) -> None:
    while datetime.now(UTC) < stamp + timedelta(seconds=seconds):
        time.sleep(0.05)


def pods_of(core: client.CoreV1Api, namespace: str, root: str) -> dict[str, Any]:
    """The tree's pods, those being deleted (graceful deletion, finished by the node agent) left out."""
    items = core.list_namespaced_pod(namespace, label_selector=f"gpufabric.io/root-id={root}").items
    return {p.metadata.name: p for p in items if p.metadata.deletion_timestamp is None}


def wait_for_pods(core: client.CoreV1Api, namespace: str, root: str, names: set[str]) -> None:
    """Until exactly ``names`` are left of the tree (deleted pods gone, not only Terminating)."""
    selector = f"gpufabric.io/root-id={root}"
    wait_until(f"the pods of {root} to be {sorted(names)}", lambda: {
        p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=selector).items} == names)


def psycopg_connect(warehouse: Any) -> Any:
    import psycopg

    return psycopg.connect(warehouse.libpq_url, autocommit=True)


def test_reconciler_gates_first_then_newest_leaves_never_root_and_alert_only(budget: Budget, warehouse: Any) -> None:
    """Creation times come from the API server, as in production, and ``now`` is the wall clock.
    The pods are made old enough to delete by waiting, a few seconds, for a stop deadline of
    ``DEADLINE_S`` (production uses 30 s): first pass while the leaves are younger than a 600 s
    deadline (they get one), then a pass once they are ``DEADLINE_S`` old (they are deleted)."""
    from controllers.budget_reconciler import reconcile_once

    core, ns = budget.core, budget.namespace
    small = Envelope(gpu_hours=Decimal(10), cost_usd=Decimal(100), max_live_pods=10, max_depth=3, max_fan_out=10)
    for alert_only in (True, False):
        root = f"rc-{uuid.uuid4().hex[:8]}"
        controller = f"test-{root}"
        config = BudgetConfig(defaults={"acme": small}, rates_usd_per_gpu_hour={"*": RATE}, alert_only=alert_only)
        with psycopg_connect(warehouse) as conn:
            created = _setup_over_budget_tree(budget.plane, core, ns, conn, config, root)

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
                assert sorted(pods_of(core, ns, root)) == sorted(created)
                continue
            assert first.trees_over == [root]
            # gate the pending leaf; the running leaves, newest (by the server's stamp) first, get a deadline
            assert [(a, p) for a, p, _ in audited()] == [
                ("gate", f"{root}-c"),
                ("deadline", f"{root}-a"),
                ("deadline", f"{root}-b"),
            ]
            assert state() == ("over_budget",)
            left = pods_of(core, ns, root)
            assert sorted(left) == sorted(created)
            assert left[f"{root}-c"].metadata.annotations["gpufabric.io/suspended"] == "true"
            assert left[f"{root}-a"].spec.active_deadline_seconds == 600

            # Real time passes: once the youngest leaf is DEADLINE_S old by the server's stamp, the
            # next pass deletes the leaves still there, newest first; the root is never touched.
            _wait_until_old(max(created.values()), DEADLINE_S)
            run(DEADLINE_S)
            assert [(a, p) for a, p, _ in audited()][3:] == [("delete", f"{root}-a"), ("delete", f"{root}-b")]
            assert all(x == reason for _, _, x in audited())
            assert sorted(pods_of(core, ns, root)) == sorted([root, f"{root}-c"])
            wait_for_pods(core, ns, root, {root, f"{root}-c"})


@pytest.mark.parametrize(
    ("step", "method", "answer"),
    [
        pytest.param("delete", "DELETE", "409 Conflict", id="delete"),  # the uid precondition
        pytest.param("deadline", "PATCH", "422 Unprocessable Entity", id="deadline"),  # another uid: immutable
    ],
)
def test_reconciler_step_on_a_pod_replaced_under_the_same_name_is_refused(
    budget: Budget, warehouse: Any, step: str, method: str, answer: str
) -> None:
    """The reconciler listed leaf ``-a`` and planned a step on it; before the step's request
    leaves, ``-a`` is deleted and created anew under the same name. The request names the old
    uid, so the API server refuses it: the new ``-a`` lives untouched and the step is audited as
    failed; leaf ``-b`` gets the same step as planned."""
    from controllers.budget_reconciler import reconcile_once

    core, ns = budget.core, budget.namespace
    small = Envelope(gpu_hours=Decimal(10), cost_usd=Decimal(100), max_live_pods=10, max_depth=3, max_fan_out=10)
    root = f"rr-{uuid.uuid4().hex[:8]}"
    config = BudgetConfig(defaults={"acme": small}, rates_usd_per_gpu_hour={"*": RATE})
    race = ReplaceBefore(core.api_client, ns, f"{root}-a", method=method)
    reconciler_api = race.wrap(api_client(ClusterTarget(kubeconfig=budget.plane.kubeconfig)))
    deadline_s = DEADLINE_S if step == "delete" else 600  # leaves older than this are deleted
    try:
        with psycopg_connect(warehouse) as conn:
            created = _setup_over_budget_tree(budget.plane, core, ns, conn, config, root)
            if step == "delete":
                _wait_until_old(max(created.values()), DEADLINE_S)
            result = reconcile_once(reconciler_api, conn, config, datetime.now(UTC), controller=f"test-{root}",
                                    roots=[root], deadline_s=deadline_s)  # fmt: skip
            rows = conn.execute("SELECT action, pod, reason FROM agents.budget_audit WHERE controller = %s "
                                "ORDER BY id", (f"test-{root}",)).fetchall()  # fmt: skip
    finally:
        reconciler_api.close()
    assert race.new_uid and race.new_uid != race.old_uid
    steps = {pod: (planned, outcome) for planned, pod, outcome in result.actions}
    assert steps[f"{root}-a"] == (step, f"kubernetes answered {answer}")
    assert steps[f"{root}-b"] == (step, "ok")
    audited = {pod: (action, reason) for action, pod, reason in rows}
    why = f"root {root} over envelope: gpu_hours 12 > 10"
    assert audited[f"{root}-a"] == ("failed", f"{why}; kubernetes answered {answer}")
    assert audited[f"{root}-b"][0] == step
    assert root not in audited  # the root is never touched
    survivor = core.read_namespaced_pod(f"{root}-a", ns)
    assert survivor.metadata.uid == race.new_uid and survivor.spec.active_deadline_seconds is None
    if step == "delete":
        wait_for_pods(core, ns, root, {root, f"{root}-a", f"{root}-c"})
    else:
        assert core.read_namespaced_pod(f"{root}-b", ns).spec.active_deadline_seconds == 600
