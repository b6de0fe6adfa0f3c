"""The orphan reaper against the Kubernetes twin (real sockets) and the embedded warehouse.

One twin serves the module; every test resets it first. Audit rows are told apart by a
``controller`` name unique to the test.
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
from simulator.agents_crash import AgentSdk, CrashReplay
from simulator.generator import generate
from simulator.kube import KubeTwinAdmin, start
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from simulator.up import stop_pids

pytestmark = pytest.mark.integration
P = "gpufabric.io"



@dataclass
class Twin:
    api: client.ApiClient
    admin: KubeTwinAdmin
    kubeconfig: Path

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def pod_names(self, namespace: str) -> set[str]:
        return {str(p.metadata.name) for p in self.core.list_namespaced_pod(namespace).items if p.metadata}


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    run = start(generate(load_spec(resolve_spec_path("h100-1su"))), tmp_path_factory.mktemp("orphans-twin"))
    kubeconfig = Path(run.extra["kubeconfig"])
    api = api_client(ClusterTarget(kubeconfig=kubeconfig))
    try:
        yield Twin(api, KubeTwinAdmin.from_kubeconfig(kubeconfig), kubeconfig)
    finally:
        api.close()
        stop_pids(run.pids)


@pytest.fixture
def fresh(twin: Twin) -> Iterator[Twin]:
    twin.admin.reset()
    twin.admin.clear_faults()
    yield twin
    twin.admin.clear_faults()


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
            "SELECT pod, pod_uid, namespace, action, rule, reason, orphan_root, state, eligible_at, decided_at, "
            "evidence, dry_run FROM agents.reaper_audit WHERE controller = %s ORDER BY id", (controller,))
        cols = [c.name for c in cur.description or []]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def small_tree(api: client.ApiClient, ns: str, clock: FakeClock, workers: int = 6) -> tuple[Orchestrator, list[str]]:
    orch = Orchestrator(api, namespace=ns, agent_id=f"{ns}-o", lease_duration_s=10, clock=clock)
    orch.register()
    names = [orch.spawn(Spawn(gpus=1, agent_id=f"{ns}-w{i}"))["metadata"]["name"] for i in range(workers)]
    return orch, names


# -- the crash replay: the Done-when ---------------------------------------------------------------


def test_crash_replay_reaps_every_orphan_within_60s_and_no_healthy_pod(fresh: Twin, warehouse: Any) -> None:
    controller = f"replay-{uuid.uuid4().hex[:8]}"
    policy = OrphanPolicy(grace_s=2, delete_grace_s=0, max_deletes_per_pass=150, max_orphan_share=0.6)
    replay = CrashReplay(fresh.api, AgentSdk(Orchestrator, Spawn), lease_duration_s=3, renew_period_s=1.0)
    workload = replay.build()
    assert len(workload.pods) == 774  # 847 with the restarts below
    reaper = Reaper(fresh.api, warehouse, policy, dry_run=False, period_s=1.0, controller=controller)
    deadline = time.monotonic() + 50
    thread = threading.Thread(target=reaper.run, kwargs={"until": lambda: time.monotonic() > deadline}, daemon=True)
    thread.start()
    try:
        for tree in ("c1", "c2", "c3"):
            replay.crash(tree)
            time.sleep(1.0)
        assert len(workload.pods) == 846  # 847 created, one evicted by the crash itself
        assert workload.orphan_gpu_workers == 200
        assert len(workload.expected_orphans) == 279
        while time.monotonic() < deadline and replay.live_uids() & workload.expected_orphans:
            time.sleep(0.5)
        time.sleep(2.5)  # two more passes: nothing else may go
    finally:
        reaper.stop()
        thread.join(timeout=10)
        replay.stop()
    live = replay.live_uids()
    assert live & workload.expected_orphans == set(), "orphans left behind"
    assert workload.healthy <= live, "a pod of a healthy tree was deleted"
    rows = audit(warehouse, controller)
    deleted = [r for r in rows if r["action"] == "deleted"]
    assert {r["pod_uid"] for r in deleted} == workload.expected_orphans
    assert len(deleted) == len(workload.expected_orphans)  # each exactly once
    assert reaper.errors == 0
    # The audit explains each deletion, and none was decided before the pod became eligible (how soon
    # after is speed: bench_orphans measures crash to last deletion against a peer).
    for row in deleted:
        assert row["rule"] == "lease_expired" and row["orphan_root"] and row["evidence"]["renew_time"]
        assert row["decided_at"] >= row["eligible_at"], row
        expired = datetime.fromisoformat(row["evidence"]["expired_at"].replace("Z", "+00:00"))
        assert row["eligible_at"] == expired + timedelta(seconds=2)
    by_state = {s: sum(1 for r in deleted if r["state"] == s) for s in ("running", "gated", "suspended", "pending")}
    assert by_state["running"] == 200 and by_state["gated"] == 45 and by_state["suspended"] == 10
    for crash in workload.crashes:
        crash_rows = [r for r in deleted if r["pod_uid"] in crash.orphans]
        assert len(crash_rows) == len(crash.orphans)
        assert min(r["decided_at"] for r in crash_rows) > crash.at  # reaped because of this crash, after it


# -- re-adoption ------------------------------------------------------------------------------------


def test_restarted_orchestrator_renewing_the_same_lease_stops_reaping(fresh: Twin, warehouse: Any) -> None:
    clock, controller = FakeClock(), f"readopt-{uuid.uuid4().hex[:8]}"
    orch, workers = small_tree(fresh.api, "readopt", clock)
    policy = OrphanPolicy(grace_s=5, delete_grace_s=0, max_deletes_per_pass=2, max_orphan_share=1.0)
    reaper = Reaper(fresh.api, warehouse, policy, dry_run=False, clock=clock, controller=controller)
    clock.advance(14)  # lease 10 s + grace 5 s not yet over
    report = reaper.run_pass()
    assert report is not None and report.decisions == []
    clock.advance(2)  # crashed: no renewal for 16 s
    reaper.run_pass()
    assert fresh.pod_names("readopt") == {orch.holder, *workers} - {"agent-readopt-w0", "agent-readopt-w1"}
    restarted = Orchestrator(fresh.api, namespace="readopt", agent_id="readopt-o", holder="readopt-o-restarted",
                             lease_duration_s=10, clock=clock)
    restarted.renew()  # same Lease, new holder: the children are re-adopted
    for _ in range(3):
        clock.advance(3)
        report = reaper.run_pass()
        assert report is not None and report.decisions == []
    assert len(fresh.pod_names("readopt")) == 5
    rows = audit(warehouse, controller)
    assert [(r["pod"], r["rule"]) for r in rows if r["action"] == "deleted"] == [
        ("agent-readopt-w0", "lease_expired"), ("agent-readopt-w1", "lease_expired")]
    assert sorted(r["pod"] for r in rows if r["action"] == "deferred") == [
        "agent-readopt-o", "agent-readopt-w2", "agent-readopt-w3", "agent-readopt-w4", "agent-readopt-w5"]
    assert {r["action"] for r in rows} == {"deleted", "deferred"}  # nothing after the re-adoption
    assert rows[0]["evidence"]["holder"] == "agent-readopt-o"


def test_lease_renewed_between_list_and_delete_aborts_the_subtree(fresh: Twin, warehouse: Any) -> None:
    clock = FakeClock()
    orch, _ = small_tree(fresh.api, "race", clock, workers=3)
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

    report = reap_once(fresh.api, policy, dry_run=False, clock=RenewingClock())
    assert {str(d.action) for d in report.decisions} == {"skipped"}
    assert all(d.reason.startswith("evidence changed: lease agent-race-o renewed") for d in report.decisions)
    assert len(fresh.pod_names("race")) == 4


# -- bad input and a failing API ------------------------------------------------------------------


def raw_pod(name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> Any:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {f"{P}/{k}": v for k, v in labels.items()},
                         "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def test_bad_input_and_api_faults_never_cause_a_wrong_deletion(fresh: Twin, warehouse: Any) -> None:
    clock, controller = FakeClock(), f"bad-{uuid.uuid4().hex[:8]}"
    core = fresh.core
    ns = "bad"
    bad = {
        "partial": {"agent-id": "p1", "parent-id": "x"},
        "conflict": {"agent-id": "c1", "root-id": "c1", "parent-id": "x", "depth": "0"},
        "cycle-a": {"agent-id": "ca", "root-id": "r", "parent-id": "cb", "depth": "1"},
        "cycle-b": {"agent-id": "cb", "root-id": "r", "parent-id": "ca", "depth": "1"},
        "cross-ns": {"agent-id": "xn", "root-id": "elsewhere", "parent-id": "elsewhere", "depth": "1"},
    }
    for name, labels in bad.items():
        core.create_namespaced_pod(ns, raw_pod(name, labels))
    core.create_namespaced_pod("other", raw_pod("elsewhere", {"agent-id": "elsewhere", "root-id": "elsewhere",
                                                              "depth": "0"}))
    core.create_namespaced_pod(ns, raw_pod("bad-ttl", {"agent-id": "t", "root-id": "t", "depth": "0"},
                                           {f"{P}/expires-at": "soon"}))
    orch, _ = small_tree(fresh.api, ns, clock, workers=4)
    healthy, _ = small_tree(fresh.api, "bad-healthy", clock, workers=3)
    policy = OrphanPolicy(grace_s=5, delete_grace_s=0, max_orphan_share=1.0)
    reaper = Reaper(fresh.api, warehouse, policy, dry_run=False, clock=clock, controller=controller)
    clock.advance(30)
    healthy.renew()  # only the healthy tree's orchestrator is alive

    fresh.admin.set_faults({"paths": ["/api/v1/pods"], "methods": ["GET"], "status_5xx_next": 1})
    assert reaper.run_pass() is None and reaper.errors == 1  # could not read: acts on nothing
    assert len(fresh.pod_names(ns)) == 11

    fresh.admin.set_faults({"paths": [f"/api/v1/namespaces/{ns}/pods/agent-{ns}-w*"], "methods": ["DELETE"],
                            "status_5xx_next": 1},
                           {"paths": [f"/api/v1/namespaces/{ns}/pods/agent-{ns}-w*"], "methods": ["DELETE"],
                            "conflict_next": 1})
    first = reaper.run_pass()
    assert first is not None
    actions = {d.finding.pod.name: str(d.action) for d in first.decisions}
    assert actions[f"agent-{ns}-w0"] == "failed" and actions[f"agent-{ns}-w1"] == "failed"  # 500, then 409
    assert actions[f"agent-{ns}-w2"] == "deleted" and actions[f"agent-{ns}-w3"] == "deleted"
    assert actions[orch.holder] == "deferred"  # its children are not all gone: it waits
    assert {k for k, v in actions.items() if v == "skipped"} == {*bad, "bad-ttl"}
    fresh.admin.clear_faults()
    second = reaper.run_pass()  # recovers on the next pass
    assert second is not None
    assert [(d.finding.pod.name, str(d.action)) for d in second.decisions if str(d.action) != "skipped"] == [
        (f"agent-{ns}-w0", "deleted"), (f"agent-{ns}-w1", "deleted"), (orch.holder, "deleted")]
    assert fresh.pod_names(ns) == {*bad, "bad-ttl"}
    assert fresh.pod_names("bad-healthy") == {healthy.holder, "agent-bad-healthy-w0", "agent-bad-healthy-w1",
                                              "agent-bad-healthy-w2"}
    assert fresh.pod_names("other") == {"elsewhere"}
    rows = audit(warehouse, controller)
    reasons = {r["pod"]: r["reason"] for r in rows if r["action"] == "skipped"}
    assert reasons == {
        "partial": "partial ancestry labels: missing root-id, depth",
        "conflict": "conflicting ancestry: depth 0 needs no parent-id and root-id == agent-id",
        "cycle-a": "ancestry cycle through agent 'ca'",
        "cycle-b": "ancestry cycle through agent 'cb'",
        "cross-ns": "parent 'elsewhere' is in another namespace (other)",
        "bad-ttl": "expires-at annotation 'soon' is not an RFC 3339 time",
    }
    assert sum(1 for r in rows if r["action"] == "skipped") == 6  # audited once, not once per pass
    failed = {r["pod"]: r["reason"] for r in rows if r["action"] == "failed"}
    assert failed[f"agent-{ns}-w0"].startswith("HTTP 500")
    assert failed[f"agent-{ns}-w1"].startswith("HTTP 409 Conflict")


def test_dry_run_audits_would_delete_and_deletes_nothing(fresh: Twin, warehouse: Any) -> None:
    clock, controller = FakeClock(), f"dry-{uuid.uuid4().hex[:8]}"
    orch, workers = small_tree(fresh.api, "dry", clock, workers=2)
    reaper = Reaper(fresh.api, warehouse, OrphanPolicy(grace_s=5, max_orphan_share=1.0), dry_run=True, clock=clock,
                    controller=controller)
    clock.advance(16)
    reaper.run_pass()
    reaper.run_pass()
    assert fresh.pod_names("dry") == {orch.holder, *workers}
    rows = audit(warehouse, controller)
    assert [(r["pod"], r["action"], r["dry_run"]) for r in rows] == [
        ("agent-dry-w0", "would_delete", True), ("agent-dry-w1", "would_delete", True),
        (orch.holder, "would_delete", True)]


# -- the same rule from the Dagster sensor and the CLI ----------------------------------------------


def test_sensor_runs_the_same_rule_and_audits(fresh: Twin, warehouse: Any, tmp_path: Path) -> None:
    import dagster as dg

    from assets.agents import OrphanReaperResource, orphan_reaper
    from pipelines.resources import SiteConfigResource, WarehouseResource

    orch = Orchestrator(fresh.api, namespace="sensor", agent_id="sensor-o", lease_duration_s=1,
                        clock=lambda: datetime.now(UTC) - timedelta(minutes=5))
    orch.register()
    orch.spawn(Spawn(gpus=2, agent_id="sensor-w"))
    fresh.core.patch_namespaced_pod_status("agent-sensor-w", "sensor", {"status": {"phase": "Running"}})
    site = tmp_path / "gpufabric.yaml"
    site.write_text(f"version: 1\nsources:\n  kubernetes:\n    - name: sim\n      kubeconfig: {fresh.kubeconfig}\n")
    resources = {"site": SiteConfigResource(path=str(site)), "warehouse": WarehouseResource(),
                 "orphan_reaper": OrphanReaperResource(grace_s=5, max_orphan_share=1.0)}
    with dg.build_sensor_context(resources=resources) as context:
        result = orphan_reaper(context)
    assert isinstance(result, dg.SkipReason)
    assert result.skip_message == ("sim: 2 orphaned (2 GPUs held), 0 deleted, 2 would delete, 0 deferred, "
                                   "0 skipped")
    assert fresh.pod_names("sensor") == {"agent-sensor-o", "agent-sensor-w"}
    with warehouse.connect() as conn:
        rows = conn.execute("SELECT pod, action, state, gpus FROM agents.reaper_audit WHERE controller = 'sensor' "
                            "AND namespace = 'sensor' AND decided_at > now() - interval '1 minute' ORDER BY id"
                            ).fetchall()
    assert rows[-2:] == [("agent-sensor-w", "would_delete", "running", 2),
                         ("agent-sensor-o", "would_delete", "pending", 0)]


def test_cli_list_and_reap(fresh: Twin, warehouse: Any) -> None:
    from typer.testing import CliRunner

    from pipelines.cli_orphans import app

    clock = FakeClock()
    clock.now -= timedelta(minutes=5)
    small_tree(fresh.api, "cli", clock, workers=2)
    fresh.core.create_namespaced_pod("cli", raw_pod("half", {"agent-id": "h", "parent-id": "cli-o"}))
    runner = CliRunner(env={"COLUMNS": "300"})  # rich wraps table cells at 80 columns
    listed = runner.invoke(app, ["list", "--kubeconfig", str(fresh.kubeconfig), "--namespace", "cli"])
    assert listed.exit_code == 0, listed.output
    assert "partial ancestry labels: missing root-id, depth" in listed.output
    assert listed.output.count("lease_expired") == 3
    dry = runner.invoke(app, ["reap", "--dry-run", "--kubeconfig", str(fresh.kubeconfig), "--grace", "1"])
    assert dry.exit_code == 0, dry.output
    assert "deleted 0, would delete 3, deferred 0, failed 0, skipped 1, refused 0" in dry.output
    assert len(fresh.pod_names("cli")) == 4
    real = runner.invoke(app, ["reap", "--no-dry-run", "--kubeconfig", str(fresh.kubeconfig), "--grace", "1"])
    assert real.exit_code == 0, real.output
    assert "deleted 3, would delete 0" in real.output
    assert fresh.pod_names("cli") == {"half"}
