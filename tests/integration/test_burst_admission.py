"""The burst admission controller on the real control plane (issue 20, part 4).

Every controller here runs as ``deploy/``'s ServiceAccount ``gpufabric-burst-admission``, bound only
by ``deploy/burst/burst-admission.yaml``'s RBAC, and campaigns for the Lease the manifest names.
Small sizes, no timing assertions: each test waits for a state (with a generous guard against a
hang) and then asserts what the controller must have done.

* the driver's gated burst (no queue label) on a 70%-busy cluster with MIG nodes: all of it runs;
* capacity short: the pods that fit are released, higher tiers first, oldest first within a tier;
  no released pod sits unschedulable; as room frees, the rest are released, until none is gated;
* a runaway tree is capped at its envelope's ``max_live_pods``, the rest held with the reason in
  ``gpufabric.io/burst-held``, and released once the envelope allows (reason removed);
* a leader killed mid-burst (SIGKILL: no Lease release) is succeeded by the standby once its
  Lease expires, and the standby finishes the burst; a SIGTERM'd leader hands the Lease back;
* warm headroom: the placeholders are created, a burst pod released into their room preempts
  exactly the one it needs, and they are refilled once the burst has gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from connectors.kube import ClusterTarget, api_client
from controllers.burst_admission import LEASE_NAME, BurstAdmission, LeaderElector
from controllers.burst_headroom import PLACEHOLDER_LABEL, PRIORITY_CLASS, Headroom
from core.budget import Envelope, TreeEnvelope
from core.burst import GATE, HELD
from simulator.agents.burst import QUEUE_LABEL, ROLE_LABEL, plan_burst
from simulator.agents.burst_driver import delete_burst, ensure_namespaces, kube_client, prefill, register_nodes, replay
from simulator.agents.plane import gpu_nodes, wait_until
from simulator.controlplane.identity import install_rbac, manifest_documents, service_account_kubeconfig

pytestmark = pytest.mark.integration

P = "gpufabric.io"
SYSTEM = "gpufabric-system"
ACCOUNT = "gpufabric-burst-admission"
HANG_GUARD_S = 120.0


@dataclass
class Plane:
    plane: Any
    api: client.ApiClient  # the admin's
    deployed: Path  # the controller's kubeconfig (deploy/'s ServiceAccount)
    namespace: str
    tag: str

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def nodes(self, count: int, gpus: int, mig: int = 0) -> list[str]:
        descriptions = gpu_nodes(f"ba{self.tag}-{uuid.uuid4().hex[:4]}", count, gpus=gpus)
        for d in descriptions:
            if mig:
                d["capacity"] = {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": str(mig)}
        return list(self.plane.register_nodes(descriptions))

    def pod(self, name: str, tier: str, *, root: str | None = None, parent: str | None = None, depth: int = 0,
            asks: str = "nvidia.com/gpu") -> str:  # fmt: skip
        labels = {f"{P}/agent-id": name, f"{P}/root-id": root or name, f"{P}/depth": str(depth), f"{P}/tier": tier,
                  f"{P}/client": "acme"}  # fmt: skip
        if parent:
            labels[f"{P}/parent-id"] = parent
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                "spec": {"schedulingGates": [{"name": GATE}], "restartPolicy": "Never",
                         "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "agent", "image": "llm-agent",
                                         "resources": {"requests": {asks: "1"}, "limits": {asks: "1"}}}]}}  # fmt: skip
        self.core.create_namespaced_pod(self.namespace, body, _preload_content=False)  # type: ignore[arg-type]
        return name

    def pods(self) -> dict[str, dict[str, Any]]:
        raw: Any = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        return {p["metadata"]["name"]: p for p in json.loads(raw.data)["items"]}

    def gated(self) -> set[str]:
        pods = self.pods().items()
        return {n for n, p in pods if any(g["name"] == GATE for g in p["spec"].get("schedulingGates") or [])}

    def running(self) -> set[str]:
        return {n for n, p in self.pods().items() if p["status"].get("phase") == "Running"}

    def delete(self, *names: str) -> None:
        for name in names:
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        wait_until("the deleted pods to be gone", lambda: not set(names) & set(self.pods()), HANG_GUARD_S)

    def lease(self) -> dict[str, Any]:
        raw: Any = client.CoordinationV1Api(self.api).read_namespaced_lease(LEASE_NAME, SYSTEM, _preload_content=False)
        spec = json.loads(raw.data).get("spec") or {}
        return {"holder": spec.get("holderIdentity") or "", "transitions": spec.get("leaseTransitions") or 0}


def held(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("annotations") or {}).get(HELD) or "")


@pytest.fixture
def plane(kube_cluster: Any, kube_namespace: str) -> Iterator[Plane]:
    install_rbac(kube_cluster)
    api = api_client(ClusterTarget(kubeconfig=kube_cluster.kubeconfig))
    try:  # an earlier test's Lease (a killed holder's) would make this test wait for it to expire
        client.CoordinationV1Api(api).delete_namespaced_lease(LEASE_NAME, SYSTEM)
    except ApiException as exc:
        if exc.status != 404:
            raise
    try:
        yield Plane(kube_cluster, api, service_account_kubeconfig(kube_cluster, ACCOUNT), kube_namespace,
                    uuid.uuid4().hex[:5])  # fmt: skip
    finally:
        api.close()


@dataclass
class Running:
    loop: BurstAdmission
    thread: threading.Thread

    def passes_after(self, extra: int) -> None:
        """Wait until the controller has run ``extra`` more passes (it had its chance to act)."""
        target = self.loop.passes + extra
        wait_until(f"{extra} more passes", lambda: self.loop.passes >= target, HANG_GUARD_S)


@pytest.fixture
def controller(plane: Plane) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(envelope_of: Callable[[str], TreeEnvelope | None] = lambda _r: None, *,
              every_namespace: bool = False, headroom: dict[str, int] | None = None) -> Running:  # fmt: skip
        api = api_client(ClusterTarget(kubeconfig=plane.deployed))
        elector = LeaderElector(api, SYSTEM, lease_duration_s=5, renew_deadline_s=4)
        loop = BurstAdmission(api, elector, envelope_of=envelope_of, period_s=0.3,
                              namespace=None if every_namespace else plane.namespace)  # fmt: skip
        if headroom is not None:
            loop.headroom = Headroom(api, lambda _gpus: headroom, namespace=SYSTEM)
        thread = threading.Thread(target=loop.run, daemon=True)
        thread.start()
        started.append(Running(loop, thread))
        return started[-1]

    yield start
    for r in started:
        r.loop.stop()
        r.thread.join(30)
        r.loop.api.close()


def test_higher_tiers_are_released_first_and_none_stays_gated_once_room_frees(
    plane: Plane, controller: Callable[..., Running]
) -> None:
    plane.nodes(2, gpus=2)  # 4 GPUs for 8 one-GPU pods, created oldest first in this order
    order = [("b1", "batch"), ("b2", "batch"), ("b3", "batch"), ("s1", "standard"), ("s2", "standard"),
             ("s3", "standard"), ("i1", "interactive"), ("i2", "interactive")]  # fmt: skip
    for name, tier in order:
        plane.pod(name, tier)
    run = controller()
    wait_until("four pods running", lambda: len(plane.running()) == 4, HANG_GUARD_S)
    run.passes_after(3)
    # The creation stamps are whole seconds: the oldest-first order within a tier is by stamp, then
    # name, so s1 and s2 (created before s3) are the two standard pods that fit.
    assert plane.running() == {"i1", "i2", "s1", "s2"}
    assert plane.gated() == {"b1", "b2", "b3", "s3"}  # released == running: none left unschedulable
    assert all(not held(p) for p in plane.pods().values())  # a wait, not a hold

    plane.delete("i1", "i2")  # two GPUs free: the next standard, then the oldest batch
    wait_until("four pods running again", lambda: len(plane.running()) == 4, HANG_GUARD_S)
    run.passes_after(3)
    assert plane.running() == {"s1", "s2", "s3", "b1"} and plane.gated() == {"b2", "b3"}

    plane.delete("s1", "s2", "s3", "b1")
    wait_until("the rest to run", lambda: plane.running() == {"b2", "b3"}, HANG_GUARD_S)
    assert plane.gated() == set()


def test_mig_slices_and_whole_gpus_are_released_by_their_own_room(
    plane: Plane, controller: Callable[..., Running]
) -> None:
    plane.nodes(1, gpus=1)
    plane.nodes(1, gpus=0, mig=3)
    plane.pod("root", "standard", root="t")
    for i in range(4):
        plane.pod(f"kid{i}", "standard", root="t", parent="root", depth=1, asks="nvidia.com/mig-1g.10gb")
    run = controller()
    wait_until("the root and three slices running", lambda: len(plane.running()) == 4, HANG_GUARD_S)
    run.passes_after(3)
    assert "root" in plane.running() and len(plane.gated()) == 1  # the fourth slice has no room


def test_the_envelope_caps_a_runaway_tree_with_a_reason(plane: Plane, controller: Callable[..., Running]) -> None:
    plane.nodes(2, gpus=8)
    plane.pod("runaway", "interactive", root="runaway")
    for i in range(5):
        plane.pod(f"runaway-{i}", "interactive", root="runaway", parent="runaway", depth=1)
    plane.pod("modest", "batch", root="modest")
    for i in range(2):
        plane.pod(f"modest-{i}", "batch", root="modest", parent="modest", depth=1)
    now = datetime.now(UTC)
    limits = {"runaway": 3}

    def envelope_of(root: str) -> TreeEnvelope | None:
        if root not in limits:
            return None
        env = Envelope(Decimal(100), Decimal(1000), limits[root], 4, 10, now + timedelta(hours=1))
        return TreeEnvelope(root, plane.namespace, "acme", "interactive", env, *(Decimal(0),) * 4)

    run = controller(envelope_of)
    reason = "over-envelope: root runaway has 3 released pods, envelope live_pods=3"

    def capped() -> bool:
        pods = plane.pods()
        return len(plane.running()) == 6 and sum(held(p) == reason
                                                 for p in pods.values()) == 3  # fmt: skip

    wait_until("the runaway tree capped and the modest one running", capped, HANG_GUARD_S)
    run.passes_after(3)
    running = plane.running()
    assert {"modest", "modest-0", "modest-1", "runaway"} <= running
    assert len([n for n in running if n.startswith("runaway")]) == 3
    assert {n for n, p in plane.pods().items() if held(p) == reason} == plane.gated()

    limits["runaway"] = 10  # the envelope raised (settlement, an operator): the held pods go, reason gone
    wait_until("the whole runaway tree running", lambda: len(plane.running()) == 9, HANG_GUARD_S)
    assert not any(held(p) for p in plane.pods().values())


def test_the_drivers_gated_burst_bypasses_kueue_and_all_of_it_runs(
    plane: Plane, controller: Callable[..., Running]
) -> None:
    """The burst path end to end: the driver's ``gate`` (no queue label), a 70%-busy cluster with MIG
    nodes, the controller over every namespace; the burst fits, so every pod must run."""
    tag = plane.tag
    plan = plan_burst(seed=5, trees=6, pods=24, window_s=1.0, nodes=12, busy_fraction=0.7, duration_scale=10,
                      tenant_suffix=f"-{tag}", node_prefix=f"g{tag}")  # fmt: skip
    (free_gpus, free_slices), (gpus, slices) = plan.free(), plan.demand()
    assert gpus <= free_gpus and slices <= free_slices and slices > 0  # it fits, and it asks for MIG slices
    api = kube_client(plane.plane.kubeconfig, pool=8)
    try:
        register_nodes(api, plan)
        ensure_namespaces(api, plan)
        assert prefill(api, plan, workers=8).ok
        report = replay(api, plan, workers=8, queues=False, gate=GATE)
        assert report.ok, report.failures
        core = client.CoreV1Api(api)

        def burst_pods() -> list[Any]:
            return [p for ns in plan.namespaces()
                    for p in core.list_namespaced_pod(ns, label_selector=f"{ROLE_LABEL}=burst").items]  # fmt: skip

        created = burst_pods()
        assert len(created) == len(plan.pods)
        assert all([g.name for g in p.spec.scheduling_gates or []] == [GATE] and QUEUE_LABEL not in p.metadata.labels
                   for p in created)  # fmt: skip
        controller(every_namespace=True)
        wait_until("every burst pod running",
                   lambda: all(p.status.phase == "Running" for p in burst_pods()), HANG_GUARD_S)  # fmt: skip
        assert not any(p.spec.scheduling_gates for p in burst_pods())
    finally:
        delete_burst(api, plan)
        api.close()


# ------------------------------------------------------------------------------------------------ failover


def _spawn(plane: Plane, identity: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "controllers", "burst-admission", "--kubeconfig", str(plane.deployed),
             "--namespace", plane.namespace, "--lease-namespace", SYSTEM, "--lease-duration", "3",
             "--period", "0.5", "--identity", identity, "--no-envelopes"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))  # fmt: skip


def test_a_killed_leaders_successor_finishes_the_burst(plane: Plane, tmp_path: Path) -> None:
    plane.nodes(1, gpus=2)
    names = [plane.pod(f"p{i}", "standard") for i in range(6)]
    procs = {who: _spawn(plane, who, tmp_path / f"{who}.log") for who in ("alpha", "beta")}
    try:
        wait_until("two pods running", lambda: len(plane.running()) == 2, HANG_GUARD_S)
        leader = plane.lease()["holder"]
        assert leader in procs, plane.lease()
        standby = next(who for who in procs if who != leader)
        before = plane.lease()["transitions"]
        procs[leader].send_signal(signal.SIGKILL)  # no chance to release the Lease
        procs[leader].wait(HANG_GUARD_S)
        plane.nodes(1, gpus=4)  # room for the other four, which only a new leader can release
        wait_until("every pod running", lambda: plane.running() == set(names), HANG_GUARD_S)
        lease = plane.lease()
        assert lease["holder"] == standby and lease["transitions"] == before + 1, lease
        assert plane.gated() == set()

        procs[standby].send_signal(signal.SIGTERM)
        assert procs[standby].wait(HANG_GUARD_S) == 0, (tmp_path / f"{standby}.log").read_text()[-3000:]
        out = (tmp_path / f"{standby}.log").read_text()
        assert "Traceback" not in out and f"lease {SYSTEM}/{LEASE_NAME} released by {standby}" in out, out[-3000:]
        assert plane.lease()["holder"] == ""  # handed back: a successor would not wait for expiry
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_follower_never_acts(plane: Plane, controller: Callable[..., Running]) -> None:
    """The Lease held by someone else (renewed by this test): a candidate releases nothing."""
    plane.nodes(1, gpus=4)
    plane.pod("waits", "interactive")
    holder = LeaderElector(plane.api, SYSTEM, identity="someone-else", lease_duration_s=5, renew_deadline_s=4)
    assert holder.tick()
    run = controller()
    while run.loop.elector.tries < 6:  # keep the Lease fresh while the candidate tries several times
        assert holder.tick()
        time.sleep(0.3)
    assert run.loop.passes == 0 and run.loop.elector.transitions == 0 and plane.gated() == {"waits"}
    holder.release()
    wait_until("the candidate to take over and release the pod", lambda: plane.running() == {"waits"}, HANG_GUARD_S)
    assert run.loop.elector.transitions == 1


# ------------------------------------------------------------------------------------------------ headroom


def test_headroom_placeholders_give_way_to_burst_pods_and_refill(
    plane: Plane, controller: Callable[..., Running]
) -> None:
    """Two GPU placeholders on 4 GPUs; 3 interactive pods: two land in free room, the third only by
    kube-scheduler preempting one placeholder (the controller counted its room as free); no room is
    left to refill it while the pods run; once they are gone the placeholders are back to two."""
    priority = next(d for d in manifest_documents() if d["kind"] == "PriorityClass")
    assert priority["metadata"]["name"] == PRIORITY_CLASS and priority["value"] < 0
    scheduling = client.SchedulingV1Api(plane.api)
    try:
        scheduling.create_priority_class(priority)
    except ApiException as exc:
        if exc.status != 409:
            raise

    def placeholders() -> list[Any]:
        return [p for p in plane.core.list_namespaced_pod(SYSTEM, label_selector=f"{PLACEHOLDER_LABEL}=true").items
                if p.metadata.deletion_timestamp is None]  # fmt: skip

    plane.nodes(2, gpus=2)
    run = controller(headroom={"nvidia.com/gpu": 2})
    assert run.loop.headroom is not None
    try:
        wait_until("two placeholders running",
                   lambda: sum(p.status.phase == "Running" for p in placeholders()) == 2, HANG_GUARD_S)  # fmt: skip
        assert all(p.spec.priority == priority["value"] and p.spec.preemption_policy == "Never"
                   for p in placeholders())  # fmt: skip
        for i in range(3):
            plane.pod(f"i{i}", "interactive")
        wait_until("the three burst pods running", lambda: plane.running() == {"i0", "i1", "i2"}, HANG_GUARD_S)
        run.passes_after(3)
        headroom = run.loop.headroom
        assert headroom.preempted == 1 and len(placeholders()) == 1 and headroom.created == 2
        assert plane.gated() == set()

        plane.delete("i0", "i1", "i2")
        wait_until("the placeholders refilled", lambda: len(placeholders()) == 2, HANG_GUARD_S)
        run.passes_after(3)
        assert headroom.created == 3 and headroom.preempted == 1 and headroom.deleted == 0 and headroom.errors == 0
    finally:
        run.loop.stop()
        run.thread.join(30)
        plane.core.delete_collection_namespaced_pod(SYSTEM, label_selector=PLACEHOLDER_LABEL, grace_period_seconds=0)
