"""Attribution labels, GPU requests and the MIG weight policy, and the pod parser built on them."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction

import pytest

from connectors.kube.pods import node_snapshot, parse_pods, pod_snapshot
from core.finops.gpu import MIG_POLICY, GpuRequests, effective_requests, mig_compute_slices, parse_gpu_requests
from core.finops.labels import UNATTRIBUTED, Attribution, attribution
from core.quality import Quarantined

P = "gpufabric.io"
T = datetime(2026, 11, 2, 10, tzinfo=UTC)


def test_full_labels_become_dimensions() -> None:
    labels = {f"{P}/root-id": "r1", f"{P}/parent-id": "p1", f"{P}/depth": "2", f"{P}/client": "globex",
              f"{P}/task": "triage", f"{P}/agent-type": "coder", f"{P}/tier": "interactive", "app": "x"}
    assert attribution(labels) == (Attribution("r1", "p1", 2, "globex", "triage", "coder", "interactive"), [])


def test_missing_labels_default_to_unattributed_and_count_only_what_matters() -> None:
    dims, issues = attribution({})
    assert dims == Attribution()
    assert dims.client == dims.root_id == UNATTRIBUTED and dims.depth is None
    assert issues == ["client: missing", "task: missing", "tier: missing"]
    # a training job has no tree: no issue for root-id/parent-id/depth/agent-type
    dims, issues = attribution({f"{P}/client": "acme", f"{P}/task": "pretrain", f"{P}/tier": "batch"})
    assert issues == [] and dims.agent_type == UNATTRIBUTED


def test_bad_label_values_are_issues_not_drops() -> None:
    labels = {f"{P}/client": "c" * 64, f"{P}/task": "bad value!", f"{P}/tier": "batch", f"{P}/depth": "two"}
    dims, issues = attribution(labels)
    assert (dims.client, dims.task, dims.tier, dims.depth) == (UNATTRIBUTED, UNATTRIBUTED, "batch", None)
    assert issues == ["depth: not a non-negative integer ('two')", "client: over 63 characters (64)",
                      "task: not a valid label value"]
    assert attribution({f"{P}/client": "c" * 63})[0].client == "c" * 63  # 63 is allowed


def test_custom_prefix() -> None:
    dims, _ = attribution({"ai.example.com/client": "x", f"{P}/client": "y"}, prefix="ai.example.com")
    assert dims.client == "x"


def test_mig_policy_is_named_versioned_and_exact() -> None:
    assert MIG_POLICY.label == "compute-slices-over-7/v1"
    assert [MIG_POLICY.weight(s) for s in (1, 3, 7)] == [Fraction(1, 7), Fraction(3, 7), Fraction(1)]
    assert mig_compute_slices("3g.40gb") == 3 and mig_compute_slices("1g.10gb+me") == 1
    with pytest.raises(ValueError):
        mig_compute_slices("9g.1tb")
    with pytest.raises(ValueError):
        MIG_POLICY.weight(8)


def test_gpu_requests_whole_mig_and_unknown() -> None:
    r = parse_gpu_requests({"nvidia.com/gpu": "2", "nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-1g.10gb+me": "2",
                            "amd.com/gpu": "1", "nvidia.com/gpu.shared": "1", "nvidia.com/mig-9g.1tb": "1",
                            "nvidia.com/gpu-x": "500m", "cpu": "8", "memory": "64Gi"})
    assert r.gpus == 2 and r.mig == {"3g.40gb": 1, "1g.10gb+me": 2}
    assert r.unknown == {"amd.com/gpu": "1", "nvidia.com/gpu.shared": "1", "nvidia.com/mig-9g.1tb": "1",
                         "nvidia.com/gpu-x": "500m"}
    assert "cpu" not in r.raw and len(r.issues) == 4
    assert r.units() == 2 + Fraction(3, 7) + Fraction(2, 7) and r.slice_units() == 19
    assert GpuRequests().units() == 0


def test_effective_requests_follow_the_scheduler_rule() -> None:
    containers = [{"resources": {"requests": {"nvidia.com/gpu": "1"}}},
                  {"resources": {"limits": {"nvidia.com/gpu": "2"}}}]  # a limit alone sets the request
    init = [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}]
    assert effective_requests(containers) == {"nvidia.com/gpu": "3"}
    assert effective_requests(containers, init) == {"nvidia.com/gpu": "4"}  # max(sum, max init)
    assert effective_requests([{"resources": {"requests": {"cpu": "1"}}}]) == {}


def pod(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "metadata": {"uid": "u1", "namespace": "ns", "name": "p", "labels": {f"{P}/client": "acme"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running", "startTime": "2026-11-02T09:00:00Z"},
    }
    base.update(kw)
    return base


def test_pod_snapshot_fields() -> None:
    s = pod_snapshot(pod(), cluster="c1", collected_at=T)
    assert not isinstance(s, Quarantined)
    assert (s.uid, s.namespace, s.name, s.node, s.phase, s.gpus) == ("u1", "ns", "p", "n1", "Running", 1)
    assert s.start_time == datetime(2026, 11, 2, 9, tzinfo=UTC) and s.end_time is None
    assert s.attribution.client == "acme" and s.issues == ("task: missing", "tier: missing")


def test_end_time_from_finished_containers_or_deletion() -> None:
    done = pod(status={"phase": "Succeeded", "startTime": "2026-11-02T09:00:00Z", "containerStatuses": [
        {"state": {"terminated": {"finishedAt": "2026-11-02T09:30:00Z"}}},
        {"state": {"terminated": {"finishedAt": "2026-11-02T09:45:10Z"}}}]})
    s = pod_snapshot(done, cluster="c1", collected_at=T)
    assert not isinstance(s, Quarantined) and s.end_time == datetime(2026, 11, 2, 9, 45, 10, tzinfo=UTC)
    s = pod_snapshot(pod(), cluster="c1", collected_at=T, event="DELETED")
    assert not isinstance(s, Quarantined) and s.end_time == T
    skewed = pod(status={"phase": "Failed", "startTime": "2026-11-02T09:00:00Z", "containerStatuses": [
        {"state": {"terminated": {"finishedAt": "2026-11-02T08:00:00Z"}}}]})
    s = pod_snapshot(skewed, cluster="c1", collected_at=T)
    assert not isinstance(s, Quarantined) and "end_time before start_time" in s.issues


def test_unidentifiable_pods_are_quarantined_with_the_reason() -> None:
    parsed = parse_pods([pod(metadata={"name": "x"}), {"spec": {}}, pod(status={"startTime": "yesterday"}), pod()],
                        cluster="c1", collected_at=T)
    assert len(parsed.records) == 1
    assert [q.reason for q in parsed.quarantined] == [
        "pod without uid, namespace", "pod without metadata", "unreadable time: Invalid isoformat string: 'yesterday'"]
    assert parsed.status == "partial"


def test_node_capacity_from_device_plugin_or_gfd_count() -> None:
    node = {"metadata": {"name": "m1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                  "nvidia.com/gpu.count": "8", "nvidia.com/mig.capable": "true"}},
            "status": {"allocatable": {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "56"}}}
    n = node_snapshot(node, cluster="c1", collected_at=T)
    assert (n.gpu_model, n.gpu_count, n.mig_capable) == ("NVIDIA-H100-80GB-HBM3", 8, True)
    bare = node_snapshot({"metadata": {"name": "cpu1"}, "status": {}}, cluster="c1", collected_at=T)
    assert (bare.gpu_model, bare.gpu_count, bare.mig_capable) == (None, 0, None)
