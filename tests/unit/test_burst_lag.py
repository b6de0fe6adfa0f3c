"""Lag records from pod and Workload JSON (connectors/kube/lag.py): the API server's own times,
merged over several observations, with bad input quarantined or flagged, never dropped."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from connectors.kube.lag import LAG_COLUMNS, LagRecorder, lag_row, pod_times, workload_admission

P = "gpufabric.io"
T0 = datetime(2026, 12, 3, 16, 24, 8, tzinfo=UTC)


def stamp(seconds: int) -> str:
    return datetime.fromtimestamp(T0.timestamp() + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(uid: str = "u1", name: str = "t00001-000-planner", *, phase: str = "Pending",
        scheduled: tuple[str, int] | None = None, started: int | None = None, finished: bool = False,
        deleting: bool = False, labels: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """A pod as the API serves it: created at T0, PodScheduled (status, at), containers started."""
    status: dict[str, Any] = {"phase": phase}
    conditions = []
    if scheduled is not None:
        conditions.append({"type": "PodScheduled", "status": scheduled[0], "lastTransitionTime": stamp(scheduled[1]),
                           "reason": "SchedulingGated" if scheduled[0] == "False" else None})  # fmt: skip
    if started is not None:
        state = ({"terminated": {"startedAt": stamp(started), "finishedAt": stamp(started + 30), "exitCode": 0}}
                 if finished else {"running": {"startedAt": stamp(started)}})  # fmt: skip
        status["containerStatuses"] = [{"name": "agent", "state": state}]
        status["startTime"] = stamp(started)
        # Ready moves when a pod finishes; the lag must not.
        conditions.append({"type": "Ready", "status": "False" if finished else "True",
                           "lastTransitionTime": stamp(started + (30 if finished else 0))})  # fmt: skip
    status["conditions"] = conditions
    meta: dict[str, Any] = {"uid": uid, "name": name, "namespace": "globex", "creationTimestamp": stamp(0),
                            "resourceVersion": "1", "labels": labels if labels is not None else {
                                f"{P}/root-id": "r1", f"{P}/agent-id": "r1", f"{P}/depth": "0",
                                f"{P}/client": "globex", f"{P}/task": "support-1", f"{P}/tier": "interactive",
                                f"{P}/agent-type": "planner", "kueue.x-k8s.io/queue-name": "globex"}}  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = stamp(40)
    return {"metadata": meta,
            "spec": {"nodeName": "n1" if started is not None else None,
                     "containers": [{"name": "agent", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}]},
            "status": status}  # fmt: skip


def workload(owner: str, *, reserved: int | None, admitted: int | None) -> dict[str, Any]:
    conditions = []
    for kind, at in (("QuotaReserved", reserved), ("Admitted", admitted)):
        conditions.append({"type": kind, "status": "True" if at is not None else "False",
                           "lastTransitionTime": stamp(at if at is not None else 0)})  # fmt: skip
    return {"metadata": {"name": f"pod-{owner}", "namespace": "globex", "resourceVersion": "7",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": owner}]},
            "status": {"conditions": conditions}}  # fmt: skip


def at(seconds: int) -> datetime:
    return datetime.fromtimestamp(T0.timestamp() + seconds, UTC)


def test_a_gated_pod_is_not_scheduled_until_its_condition_turns_true() -> None:
    assert pod_times(pod(scheduled=("False", 0))).scheduled_at is None
    times = pod_times(pod(phase="Running", scheduled=("True", 3), started=4))
    assert (times.created_at, times.scheduled_at, times.running_at) == (T0, at(3), at(4))


def test_a_finished_pod_keeps_its_container_start_not_its_ready_change() -> None:
    times = pod_times(pod(phase="Succeeded", scheduled=("True", 3), started=4, finished=True))
    assert times.running_at == at(4)


def test_a_running_pod_without_container_states_falls_back_to_its_start_time() -> None:
    raw = pod(phase="Running", scheduled=("True", 2), started=5)
    del raw["status"]["containerStatuses"]
    assert pod_times(raw).running_at == at(5)


def test_unreadable_times_are_errors_the_recorder_quarantines() -> None:
    raw = pod()
    raw["metadata"]["creationTimestamp"] = "yesterday"
    with pytest.raises(ValueError, match="Invalid isoformat string: 'yesterday'"):
        pod_times(raw)
    recorder = LagRecorder(cluster="c1", prefix=P)
    recorder.pod(raw)
    nameless = pod(uid="u2")
    del nameless["metadata"]["name"]
    recorder.pod(nameless)
    recorder.pod("not a pod")  # type: ignore[arg-type]
    parsed, _ = recorder.records()
    assert parsed.records == []
    reasons = sorted(q.reason for q in parsed.quarantined)
    assert reasons == ["pod without metadata", "pod without name",
                       "unreadable time: Invalid isoformat string: 'yesterday'"]  # fmt: skip
    assert all(q.source == "kubernetes-lag" and q.device == "c1" for q in parsed.quarantined)


def test_observations_merge_to_the_earliest_of_each_time_and_admission_finds_its_pod() -> None:
    recorder = LagRecorder(cluster="c1", prefix=P)
    recorder.pod(pod(scheduled=("False", 0)))  # gated
    recorder.workload(workload("u1", reserved=2, admitted=2))
    recorder.pod(pod(phase="Running", scheduled=("True", 3), started=4))
    recorder.pod(pod(phase="Succeeded", scheduled=("True", 3), started=4, finished=True, deleting=True))
    recorder.workload(workload("u1", reserved=9, admitted=9))  # re-admitted after an eviction: the first counts
    parsed, older = recorder.records(live=[])
    (rec,) = parsed.records
    assert (rec.created_at, rec.scheduled_at, rec.running_at) == (T0, at(3), at(4))
    assert (rec.workload, rec.quota_reserved_at, rec.admitted_at) == ("pod-u1", at(2), at(2))
    assert (rec.phase, rec.node, rec.deleted, rec.queue_name) == ("Succeeded", "n1", True, "globex")
    assert (rec.attribution.client, rec.attribution.agent_type, rec.attribution.root_id) == ("globex", "planner", "r1")
    assert (rec.gpus, dict(rec.mig), rec.agent_id, rec.issues) == (0, {"1g.10gb": 1}, "r1", ())
    assert older == 0 and parsed.quarantined == []


def test_a_pod_the_reflector_no_longer_holds_was_deleted_in_the_window() -> None:
    recorder = LagRecorder(cluster="c1", prefix=P)
    recorder.pod(pod("u1", "a"))
    recorder.pod(pod("u2", "b"))
    parsed, _ = recorder.records(live=["u2"])
    assert {r.name: r.deleted for r in parsed.records} == {"a": True, "b": False}


def test_pods_older_than_the_window_are_counted_not_landed() -> None:
    recorder = LagRecorder(cluster="c1", prefix=P)
    recorder.pod(pod("u1", "old"))
    parsed, older = recorder.records(since=at(1))
    assert (parsed.records, older) == ([], 1)


def test_times_out_of_order_and_missing_labels_are_kept_as_issues() -> None:
    recorder = LagRecorder(cluster="c1", prefix=P)
    skewed = pod("u1", "a", phase="Running", scheduled=("True", 1), started=3, labels={f"{P}/root-id": "r9"})
    skewed["status"]["conditions"][0]["lastTransitionTime"] = stamp(-2)  # the scheduler's clock behind
    recorder.pod(skewed)
    recorder.pod(pod("u2", "b", phase="Running", scheduled=("True", 5), started=3))  # the kubelet's behind
    a, b = recorder.records()[0].records
    assert a.issues == ("client: missing", "task: missing", "tier: missing", "scheduled before created")
    assert (a.attribution.client, a.attribution.root_id) == ("unattributed", "r9")
    assert b.issues == ("running before scheduled",)


def test_a_workload_names_the_pods_it_owns() -> None:
    owners, reserved, admitted = workload_admission(workload("u7", reserved=1, admitted=None))
    assert (owners, reserved, admitted) == (["u7"], at(1), None)
    group = workload("u1", reserved=1, admitted=1)
    group["metadata"]["ownerReferences"].append({"kind": "Pod", "uid": "u2", "name": "y"})
    group["metadata"]["ownerReferences"].append({"kind": "Job", "uid": "j1", "name": "z"})
    assert workload_admission(group)[0] == ["u1", "u2"]


def test_a_row_has_every_column() -> None:
    recorder = LagRecorder(cluster="c1", prefix=P)
    recorder.pod(pod(phase="Running", scheduled=("True", 1), started=2))
    (rec,) = recorder.records()[0].records
    row = lag_row("run-1", "c1", at(0), at(60), rec)
    assert len(row) == len(LAG_COLUMNS)
    values = dict(zip(LAG_COLUMNS, row, strict=True))
    assert (values["run_id"], values["source"], values["client"], values["created_at"], values["running_at"]) == (
        "run-1", "c1", "globex", T0, at(2))
    assert values["issues"] == [] and values["mig"] == {"1g.10gb": 1}
