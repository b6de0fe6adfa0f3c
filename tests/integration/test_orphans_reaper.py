"""The orphan reaper against the real control plane (``kube_cluster``) and the embedded warehouse.

Orchestrators heartbeat real ``coordination.k8s.io/v1`` Leases; an expired Lease is a renewTime
older than its leaseDurationSeconds, written to the API server by an orchestrator whose clock the
test holds (``FakeClock``) or that stopped renewing. Agent pods are created one API call each,
bound by kube-scheduler to fake GPU nodes of the test's own and started by the node agent; a test
waits until its pods are Running before the reaper reads them, so the resourceVersion the reaper
sees is the one its delete precondition names. Audit rows are told apart by a ``controller``
name unique to the test; tests that read the whole cluster first wait for earlier tests' pods
to be gone.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from connectors.kube import ClusterTarget, api_client
from connectors.kube.agents import Orchestrator, Spawn, reap_once
from controllers.reaper import Reaper
from core.orphans import OrphanPolicy
from simulator.agents.plane import (
    ReplaceBefore,
    delete_pods_now,
    gpu_nodes,
    namespaces,
    wait_for_no_foreign_pods,
    wait_until,
)
from simulator.agents_crash import AgentSdk, CrashReplay, gpus_requested

pytestmark = pytest.mark.integration
P = "gpufabric.io"
GPUS_PER_NODE = 8
HANG_GUARD_S = 300.0  # waits end on an event; this only stops a hung test (the machine may be loaded)


@dataclass
class Cluster:
    plane: Any
    api: client.ApiClient

    @property
    def kubeconfig(self) -> Path:
        return Path(self.plane.kubeconfig)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def namespace(self, prefix: str) -> str:
        return namespaces(self.plane, 1, prefix)[0]

    def pod_names(self, namespace: str) -> set[str]:
        return {str(p.metadata.name) for p in self.core.list_namespaced_pod(namespace).items if p.metadata}

    def pod_phases(self, namespace: str) -> dict[str, str]:
        return {str(p.metadata.name): str(p.status.phase) for p in self.core.list_namespaced_pod(namespace).items}

    def settle(self, *names: str) -> None:
        """Wait until every pod of these namespaces is Running (bound by the scheduler, started by
        the node agent): after that nothing but the test and the reaper changes them."""
        for namespace in names:
            wait_until(f"the pods of {namespace} to run",
                       lambda ns=namespace: set(self.pod_phases(ns).values()) <= {"Running"})  # type: ignore[misc]

    def gpu_node(self, name: str, gpus: int = GPUS_PER_NODE) -> None:
        self.plane.register_nodes(gpu_nodes(name, 1, gpus=gpus))


@pytest.fixture
def cluster(kube_cluster: Any) -> Iterator[Cluster]:
    api = api_client(ClusterTarget(kubeconfig=kube_cluster.kubeconfig))
    try:
        yield Cluster(kube_cluster, api)
    finally:
        api.close()


def pooled_client(kubeconfig: Path, connections: int) -> client.ApiClient:
    """An ApiClient keeping up to ``connections`` connections open (the client's default is 10)."""
    base = api_client(ClusterTarget(kubeconfig=kubeconfig))
    base.close()
    base.configuration.connection_pool_maxsize = connections
    return client.ApiClient(base.configuration)


class FakeClock:
    """One time line for orchestrators and reaper, moved by the test (no sleeping)."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def audit(warehouse: Any, controller: str) -> list[dict[str, Any]]:
    with warehouse.connect() as conn:
        cur = conn.execute(
            "SELECT pod, pod_uid, namespace, action, rule, reason, orphan_root, state, gpus, eligible_at, decided_at, "
            "evidence, dry_run FROM agents.reaper_audit WHERE controller = %s ORDER BY id", (controller,))
        cols = [c.name for c in cur.description or []]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def small_tree(cluster: Cluster, ns: str, clock: FakeClock, workers: int = 6) -> tuple[Orchestrator, list[str]]:
    """An orchestrator and ``workers`` one-GPU workers on a GPU node of their own, all Running."""
    cluster.gpu_node(f"{ns}-gpu")
    orch = Orchestrator(cluster.api, namespace=ns, agent_id=f"{ns}-o", lease_duration_s=10, clock=clock)
    orch.register()
    names = [orch.spawn(Spawn(gpus=1, agent_id=f"{ns}-w{i}"))["metadata"]["name"] for i in range(workers)]
    cluster.settle(ns)
    return orch, names


# -- the crash replay: the Done-when ---------------------------------------------------------------


def test_crash_replay_reaps_every_orphan_and_no_healthy_pod(cluster: Cluster, warehouse: Any) -> None:
    """How fast is bench_orphans' question (against a peer, on a quiet machine); this test waits
    with a hang guard only, and prints crash -> last deletion for the log."""
    controller = f"replay-{uuid.uuid4().hex[:8]}"
    mine = namespaces(cluster.plane, 3, "agents")
    # Room for every GPU the scheduled pods ask for (1-GPU pods pack exactly), and a little more.
    cluster.plane.register_nodes(gpu_nodes(f"crash-{controller[-8:]}", -(-gpus_requested() // GPUS_PER_NODE) + 4))
    policy = OrphanPolicy(grace_s=2, delete_grace_s=0, max_deletes_per_pass=150, max_orphan_share=0.6)
    # The agents and the reaper are separate programs with clients of their own; the agents' has a
    # connection for each of its ~20 heartbeat threads and 8 spawners (a full pool would make
    # every renewal a new TLS handshake).
    agents = pooled_client(cluster.kubeconfig, 32)
    reaper_api = api_client(ClusterTarget(kubeconfig=cluster.kubeconfig))
    replay = CrashReplay(agents, AgentSdk(Orchestrator, Spawn), lease_duration_s=3, renew_period_s=1.0,
                         namespaces=dict(zip(("agents-a", "agents-b", "agents-c"), mine, strict=True)))
    try:
        workload = replay.build()  # returns once kube-scheduler placed and the node agent started them
        assert len(workload.pods) == 774  # 847 with the restarts below
        wait_for_no_foreign_pods(cluster.plane, mine)  # the reaper reads the whole cluster
        reaper = Reaper(reaper_api, warehouse, policy, dry_run=False, period_s=1.0, controller=controller)
        thread = threading.Thread(target=reaper.run, daemon=True)
        thread.start()
        try:
            for tree in ("c1", "c2", "c3"):
                replay.crash(tree)
                time.sleep(1.0)
            assert len(workload.pods) == 846  # 847 created, one evicted by the crash itself
            assert workload.orphan_gpu_workers == 200
            assert len(workload.expected_orphans) == 279
            wait_until("every orphan to be reaped", lambda: not replay.live_uids() & workload.expected_orphans,
                       timeout_s=HANG_GUARD_S, interval_s=0.5)
            passes = reaper.passes
            wait_until("two more passes: nothing else may go", lambda: reaper.passes >= passes + 2,
                       timeout_s=HANG_GUARD_S)
        finally:
            reaper.stop()
            thread.join(timeout=10)
        live = replay.live_uids()
    finally:
        replay.stop()
        agents.close()
        reaper_api.close()
        delete_pods_now(cluster.plane, mine)  # ~570 running pods: the next test's reset need not wait
    assert live & workload.expected_orphans == set(), "orphans left behind"
    assert workload.healthy <= live, "a pod of a healthy tree was deleted"
    rows = audit(warehouse, controller)
    deleted = [r for r in rows if r["action"] == "deleted"]
    assert {r["pod_uid"] for r in deleted} == workload.expected_orphans
    assert len(deleted) == len(workload.expected_orphans)  # each exactly once
    assert reaper.errors == 0
    assert not [r for r in rows if r["action"] == "failed"]  # no delete refused: the pods were as listed
    # The audit explains each deletion, and none was decided before the pod became eligible (how soon
    # after is speed: bench_orphans measures crash to last deletion against a peer).
    for row in deleted:
        assert row["rule"] == "lease_expired" and row["orphan_root"] and row["evidence"]["renew_time"]
        assert row["decided_at"] >= row["eligible_at"], row
        expired = datetime.fromisoformat(row["evidence"]["expired_at"].replace("Z", "+00:00"))
        assert row["eligible_at"] == expired + timedelta(seconds=2)
    by_state = {s: sum(1 for r in deleted if r["state"] == s)
                for s in ("running", "gated", "suspended", "pending", "finished")}  # fmt: skip
    # 200 GPU workers and 3 orchestrators (which run too) were Running; the crashed root's pod had
    # failed; gated pods wait for their gate, pending ones for a CPU pool with no nodes.
    assert by_state == {"running": 203, "gated": 45, "suspended": 10, "pending": 20, "finished": 1}
    assert sum(1 for r in deleted if r["state"] == "running" and r["gpus"] == 1) == 200
    for crash in workload.crashes:
        crash_rows = [r for r in deleted if r["pod_uid"] in crash.orphans]
        assert len(crash_rows) == len(crash.orphans)
        assert min(r["decided_at"] for r in crash_rows) > crash.at  # reaped because of this crash, after it
    last = max(r["decided_at"] for r in deleted)
    print(f"first crash -> last orphan deleted: {(last - workload.crashes[0].at).total_seconds():.1f} s")


# -- re-adoption ------------------------------------------------------------------------------------


def test_restarted_orchestrator_renewing_the_same_lease_stops_reaping(cluster: Cluster, warehouse: Any) -> None:
    clock, controller = FakeClock(), f"readopt-{uuid.uuid4().hex[:8]}"
    ns = cluster.namespace("readopt")
    orch, workers = small_tree(cluster, ns, clock)
    policy = OrphanPolicy(grace_s=5, delete_grace_s=0, max_deletes_per_pass=2, max_orphan_share=1.0)
    reaper = Reaper(cluster.api, warehouse, policy, dry_run=False, clock=clock, controller=controller, namespace=ns)
    clock.advance(14)  # lease 10 s + grace 5 s not yet over
    report = reaper.run_pass()
    assert report is not None and report.decisions == []
    clock.advance(2)  # crashed: no renewal for 16 s
    reaper.run_pass()
    assert cluster.pod_names(ns) == {orch.holder, *workers} - {f"agent-{ns}-w0", f"agent-{ns}-w1"}
    restarted = Orchestrator(cluster.api, namespace=ns, agent_id=f"{ns}-o", holder=f"{ns}-o-restarted",
                             lease_duration_s=10, clock=clock)
    restarted.renew()  # same Lease, new holder: the children are re-adopted
    for _ in range(3):
        clock.advance(3)
        report = reaper.run_pass()
        assert report is not None and report.decisions == []
    assert len(cluster.pod_names(ns)) == 5
    lease = client.CoordinationV1Api(cluster.api).read_namespaced_lease(f"agent-{ns}-o", ns)
    assert lease.spec.holder_identity == f"{ns}-o-restarted"
    rows = audit(warehouse, controller)
    assert [(r["pod"], r["rule"]) for r in rows if r["action"] == "deleted"] == [
        (f"agent-{ns}-w0", "lease_expired"), (f"agent-{ns}-w1", "lease_expired")]
    assert sorted(r["pod"] for r in rows if r["action"] == "deferred") == [
        f"agent-{ns}-o", f"agent-{ns}-w2", f"agent-{ns}-w3", f"agent-{ns}-w4", f"agent-{ns}-w5"]
    assert {r["action"] for r in rows} == {"deleted", "deferred"}  # nothing after the re-adoption
    assert rows[0]["evidence"]["holder"] == f"agent-{ns}-o"


def test_lease_renewed_between_list_and_delete_aborts_the_subtree(cluster: Cluster) -> None:
    clock = FakeClock()
    ns = cluster.namespace("race")
    orch, _ = small_tree(cluster, ns, clock, workers=3)
    policy = OrphanPolicy(grace_s=5, delete_grace_s=0, max_orphan_share=1.0)
    clock.advance(20)

    class RenewingClock:
        """The orchestrator comes back while the reaper is between its list and its deletes."""

        def __init__(self) -> None:
            self.calls = 0

        def __call__(self) -> datetime:
            self.calls += 1
            if self.calls == 2:  # reap_once asks for "now" right after reading the cluster
                orch.renew()
            return clock.now

    report = reap_once(cluster.api, policy, dry_run=False, clock=RenewingClock(), namespace=ns)
    assert {str(d.action) for d in report.decisions} == {"skipped"}
    assert all(d.reason.startswith(f"evidence changed: lease agent-{ns}-o renewed") for d in report.decisions)
    assert len(cluster.pod_names(ns)) == 4


def test_a_pod_replaced_under_the_same_name_before_the_delete_is_kept(cluster: Cluster, warehouse: Any) -> None:
    """The reaper decided on pod ``w0``; before its DELETE leaves, ``w0`` is deleted and created anew
    (same name, same labels). The DELETE carries the old pod's uid as a precondition, so the real
    API server refuses it with 409 and the new pod lives; the rest of the subtree goes."""
    clock = FakeClock()
    ns = cluster.namespace("reuse")
    orch, workers = small_tree(cluster, ns, clock, workers=2)
    clock.advance(20)  # lease 10 s + grace 5 s over: the tree is orphaned
    race = ReplaceBefore(cluster.api, ns, workers[0])
    reaper_api = race.wrap(api_client(ClusterTarget(kubeconfig=cluster.kubeconfig)))
    policy = OrphanPolicy(grace_s=5, delete_grace_s=0, max_orphan_share=1.0)
    try:
        report = reap_once(reaper_api, policy, dry_run=False, clock=clock, namespace=ns)
    finally:
        reaper_api.close()
    actions = {d.finding.pod.name: (str(d.action), d.reason) for d in report.decisions}
    assert race.new_uid and race.new_uid != race.old_uid
    assert actions[workers[0]] == ("failed", (
        f'HTTP 409 Conflict: Operation cannot be fulfilled on Pod "{workers[0]}": the UID in the precondition '
        f"({race.old_uid}) does not match the UID in record ({race.new_uid}). The object might have been "
        "deleted and then recreated"))
    assert actions[workers[1]][0] == "deleted"
    assert actions[orch.holder][0] == "deferred"  # a child is still there: the parent waits
    survivor = cluster.core.read_namespaced_pod(workers[0], ns)
    assert survivor.metadata.uid == race.new_uid
    assert cluster.pod_names(ns) == {orch.holder, workers[0]}


# -- bad input and a failing API ------------------------------------------------------------------


def raw_pod(name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> Any:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {f"{P}/{k}": v for k, v in labels.items()},
                         "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def test_bad_input_and_api_faults_never_cause_a_wrong_deletion(cluster: Cluster, warehouse: Any, faults: Any) -> None:
    """The reaper talks to the API server through the fault proxy: a 500 on its pod list, then a
    500 and a 409 on two of its deletes."""
    clock, controller = FakeClock(), f"bad-{uuid.uuid4().hex[:8]}"
    core = cluster.core
    ns, other, healthy_ns = namespaces(cluster.plane, 3, "bad")
    bad = {
        "partial": {"agent-id": "p1", "parent-id": "x"},
        "conflict": {"agent-id": "c1", "root-id": "c1", "parent-id": "x", "depth": "0"},
        "cycle-a": {"agent-id": "ca", "root-id": "r", "parent-id": "cb", "depth": "1"},
        "cycle-b": {"agent-id": "cb", "root-id": "r", "parent-id": "ca", "depth": "1"},
        "cross-ns": {"agent-id": "xn", "root-id": "elsewhere", "parent-id": "elsewhere", "depth": "1"},
    }
    for name, labels in bad.items():
        core.create_namespaced_pod(ns, raw_pod(name, labels))
    core.create_namespaced_pod(other, raw_pod("elsewhere", {"agent-id": "elsewhere", "root-id": "elsewhere",
                                                            "depth": "0"}))
    core.create_namespaced_pod(ns, raw_pod("bad-ttl", {"agent-id": "t", "root-id": "t", "depth": "0"},
                                           {f"{P}/expires-at": "soon"}))
    orch, _ = small_tree(cluster, ns, clock, workers=4)
    healthy, _ = small_tree(cluster, healthy_ns, clock, workers=3)
    cluster.settle(ns, other)
    wait_for_no_foreign_pods(cluster.plane, [ns, other, healthy_ns])  # this reaper reads every namespace
    policy = OrphanPolicy(grace_s=5, delete_grace_s=0, max_orphan_share=1.0)
    proxied = api_client(ClusterTarget(kubeconfig=faults.kubeconfig))
    reaper = Reaper(proxied, warehouse, policy, dry_run=False, clock=clock, controller=controller)
    clock.advance(30)
    healthy.renew()  # only the healthy tree's orchestrator is alive
    try:
        faults.set_faults([{"paths": ["/api/v1/pods"], "methods": ["GET"], "status_5xx_next": 1}])
        assert reaper.run_pass() is None and reaper.errors == 1  # could not read: acts on nothing
        assert reaper.last_error.startswith("ServiceException: (500)")
        assert "Internal error occurred (injected by the fault proxy)" in reaper.last_error
        assert len(cluster.pod_names(ns)) == 11

        workers_glob = f"/api/v1/namespaces/{ns}/pods/agent-{ns}-w*"
        faults.set_faults([{"paths": [workers_glob], "methods": ["DELETE"], "status_5xx_next": 1},
                           {"paths": [workers_glob], "methods": ["DELETE"], "conflict_next": 1}])
        first = reaper.run_pass()
        assert first is not None
        actions = {d.finding.pod.name: str(d.action) for d in first.decisions}
        assert actions[f"agent-{ns}-w0"] == "failed" and actions[f"agent-{ns}-w1"] == "failed"  # 500, then 409
        assert actions[f"agent-{ns}-w2"] == "deleted" and actions[f"agent-{ns}-w3"] == "deleted"
        assert actions[orch.holder] == "deferred"  # its children are not all gone: it waits
        assert {k for k, v in actions.items() if v == "skipped"} == {*bad, "bad-ttl"}
        faults.clear_faults()
        second = reaper.run_pass()  # recovers on the next pass
    finally:
        proxied.close()
    assert second is not None
    assert [(d.finding.pod.name, str(d.action)) for d in second.decisions if str(d.action) != "skipped"] == [
        (f"agent-{ns}-w0", "deleted"), (f"agent-{ns}-w1", "deleted"), (orch.holder, "deleted")]
    assert cluster.pod_names(ns) == {*bad, "bad-ttl"}
    assert cluster.pod_names(healthy_ns) == {healthy.holder, *(f"agent-{healthy_ns}-w{i}" for i in range(3))}
    assert cluster.pod_names(other) == {"elsewhere"}
    rows = audit(warehouse, controller)
    reasons = {r["pod"]: r["reason"] for r in rows if r["action"] == "skipped"}
    assert reasons == {
        "partial": "partial ancestry labels: missing root-id, depth",
        "conflict": "conflicting ancestry: depth 0 needs no parent-id and root-id == agent-id",
        "cycle-a": "ancestry cycle through agent 'ca'",
        "cycle-b": "ancestry cycle through agent 'cb'",
        "cross-ns": f"parent 'elsewhere' is in another namespace ({other})",
        "bad-ttl": "expires-at annotation 'soon' is not an RFC 3339 time",
    }
    assert sum(1 for r in rows if r["action"] == "skipped") == 6  # audited once, not once per pass
    failed = {r["pod"]: r["reason"] for r in rows if r["action"] == "failed"}
    assert failed[f"agent-{ns}-w0"].startswith("HTTP 500")
    assert failed[f"agent-{ns}-w1"].startswith("HTTP 409 Conflict")


def test_the_reaper_watch_relists_after_410_and_wakes_when_a_parent_goes(
    cluster: Cluster, warehouse: Any, faults: Any
) -> None:
    """The loop's timer is an hour here, so only its pod watch can start a second pass. Through the
    fault proxy the watch first gets a 410 Expired (it re-lists and watches again); then an
    orchestrator's pod and Lease are deleted, and its workers are reaped by the pass that wakes."""
    controller = f"watch-{uuid.uuid4().hex[:8]}"
    ns = cluster.namespace("wake")
    cluster.gpu_node(f"{ns}-gpu")
    orch = Orchestrator(cluster.api, namespace=ns, agent_id=f"{ns}-o", lease_duration_s=3600)
    orch.register()
    workers = [orch.spawn(Spawn(gpus=1, agent_id=f"{ns}-w{i}"))["metadata"]["name"] for i in range(2)]
    cluster.settle(ns)
    proxied = api_client(ClusterTarget(kubeconfig=faults.kubeconfig))
    policy = OrphanPolicy(grace_s=1, delete_grace_s=0, max_orphan_share=1.0)
    reaper = Reaper(proxied, warehouse, policy, dry_run=False, period_s=3600, controller=controller, namespace=ns)
    faults.set_faults([{"paths": [f"/api/v1/namespaces/{ns}/pods"], "methods": ["GET"], "expire_watches_next": 1}])
    thread = threading.Thread(target=reaper.run, daemon=True)
    thread.start()
    try:
        wait_until("the first pass", lambda: reaper.passes == 1)
        wait_until("the watch to re-list after its 410",
                   lambda: reaper.watcher is not None and reaper.watcher.stats.lists == 2 and reaper.watcher.watching)
        assert reaper.watcher is not None and reaper.watcher.stats.expired == 1 and faults.fired["expired"] == 1
        assert reaper.passes == 1  # a re-list that loses no pod does not wake the loop
        assert cluster.pod_names(ns) == {orch.holder, *workers}  # the Lease is fresh: nothing to do
        newest = max(p.metadata.creation_timestamp for p in cluster.core.list_namespaced_pod(ns).items)
        wait_until("the workers to be older than the 1 s grace a missing parent gets",
                   lambda: datetime.now(UTC) > newest + timedelta(seconds=2))
        cluster.core.delete_namespaced_pod(orch.holder, ns, grace_period_seconds=0)
        client.CoordinationV1Api(cluster.api).delete_namespaced_lease(f"agent-{ns}-o", ns)
        wait_until("the orphaned workers to be reaped", lambda: cluster.pod_names(ns) == set())
    finally:
        reaper.stop()
        thread.join(timeout=10)
        proxied.close()
    assert reaper.passes >= 2 and reaper.errors == 0
    rows = audit(warehouse, controller)
    assert sorted((r["pod"], r["rule"]) for r in rows if r["action"] == "deleted") == [
        (w, "parent_missing") for w in sorted(workers)]


def test_dry_run_audits_would_delete_and_deletes_nothing(cluster: Cluster, warehouse: Any) -> None:
    clock, controller = FakeClock(), f"dry-{uuid.uuid4().hex[:8]}"
    ns = cluster.namespace("dry")
    orch, workers = small_tree(cluster, ns, clock, workers=2)
    reaper = Reaper(cluster.api, warehouse, OrphanPolicy(grace_s=5, max_orphan_share=1.0), dry_run=True,
                    clock=clock, controller=controller, namespace=ns)
    clock.advance(16)
    reaper.run_pass()
    reaper.run_pass()
    assert cluster.pod_names(ns) == {orch.holder, *workers}
    rows = audit(warehouse, controller)
    assert [(r["pod"], r["action"], r["dry_run"]) for r in rows] == [
        (f"agent-{ns}-w0", "would_delete", True), (f"agent-{ns}-w1", "would_delete", True),
        (orch.holder, "would_delete", True)]


# -- the same rule from the Dagster sensor and the CLI ----------------------------------------------


def test_sensor_runs_the_same_rule_and_audits(cluster: Cluster, warehouse: Any, tmp_path: Path) -> None:
    import dagster as dg

    from assets.agents import OrphanReaperResource, orphan_reaper
    from pipelines.resources import SiteConfigResource, WarehouseResource

    ns = cluster.namespace("sensor")
    cluster.gpu_node(f"{ns}-gpu")
    orch = Orchestrator(cluster.api, namespace=ns, agent_id=f"{ns}-o", lease_duration_s=1,
                        clock=lambda: datetime.now(UTC) - timedelta(minutes=5))
    orch.register()
    orch.spawn(Spawn(gpus=2, agent_id=f"{ns}-w"))
    cluster.settle(ns)
    wait_for_no_foreign_pods(cluster.plane, [ns])  # the sensor reads the whole cluster
    site = tmp_path / "gpufabric.yaml"
    site.write_text(f"version: 1\nsources:\n  kubernetes:\n    - name: sim\n      kubeconfig: {cluster.kubeconfig}\n")
    resources = {"site": SiteConfigResource(path=str(site)), "warehouse": WarehouseResource(),
                 "orphan_reaper": OrphanReaperResource(grace_s=5, max_orphan_share=1.0)}
    with dg.build_sensor_context(resources=resources) as context:
        result = orphan_reaper(context)
    assert isinstance(result, dg.SkipReason)
    assert result.skip_message == ("sim: 2 orphaned (2 GPUs held), 0 deleted, 2 would delete, 0 deferred, "
                                   "0 skipped")
    assert cluster.pod_names(ns) == {f"agent-{ns}-o", f"agent-{ns}-w"}
    with warehouse.connect() as conn:
        rows = conn.execute("SELECT pod, action, state, gpus FROM agents.reaper_audit WHERE controller = 'sensor' "
                            "AND namespace = %s ORDER BY id", (ns,)).fetchall()
    # Both run: the worker holds its 2 GPUs, the orchestrator's pod runs on no GPU.
    assert rows == [(f"agent-{ns}-w", "would_delete", "running", 2), (f"agent-{ns}-o", "would_delete", "running", 0)]


def test_cli_list_and_reap(cluster: Cluster, warehouse: Any) -> None:
    from typer.testing import CliRunner

    from pipelines.cli_orphans import app

    clock = FakeClock()
    clock.now -= timedelta(minutes=5)
    ns = cluster.namespace("cli")
    small_tree(cluster, ns, clock, workers=2)
    cluster.core.create_namespaced_pod(ns, raw_pod("half", {"agent-id": "h", "parent-id": f"{ns}-o"}))
    cluster.settle(ns)
    kubeconfig, scope = str(cluster.kubeconfig), ["--namespace", ns]
    runner = CliRunner(env={"COLUMNS": "300"})  # rich wraps table cells at 80 columns
    listed = runner.invoke(app, ["list", "--kubeconfig", kubeconfig, *scope])
    assert listed.exit_code == 0, listed.output
    assert "partial ancestry labels: missing root-id, depth" in listed.output
    assert listed.output.count("lease_expired") == 3
    dry = runner.invoke(app, ["reap", "--dry-run", "--kubeconfig", kubeconfig, "--grace", "1", *scope])
    assert dry.exit_code == 0, dry.output
    assert "deleted 0, would delete 3, deferred 0, failed 0, skipped 1, refused 0" in dry.output
    assert len(cluster.pod_names(ns)) == 4
    real = runner.invoke(app, ["reap", "--no-dry-run", "--kubeconfig", kubeconfig, "--grace", "1", *scope])
    assert real.exit_code == 0, real.output
    assert "deleted 3, would delete 0" in real.output
    # Deleted with the default 30 s grace period: the node agent (kubelet's part) finishes each.
    wait_until("the reaped pods to be gone", lambda: cluster.pod_names(ns) == {"half"})
