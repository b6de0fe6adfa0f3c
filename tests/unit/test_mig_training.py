"""Which nodes run a training job (core/mig/training.py), and that the planner leaves their GPUs alone."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.mig import apply as mig
from core.mig.demand import SliceRequest, TenantDemand
from core.mig.planner import plan
from core.mig.training import TRAINING_OWNERS, is_training_pod, training_nodes


def pod(node: str | None = "n1", *, gpus: str | None = "8", owner: str | None = "Job", phase: str = "Running",
        labels: dict[str, str] | None = None, mig: bool = False) -> dict[str, Any]:  # fmt: skip
    limits = {"nvidia.com/mig-1g.10gb": "1"} if mig else ({} if gpus is None else {"nvidia.com/gpu": gpus})
    meta: dict[str, Any] = {"name": "p", "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "job", "apiVersion": "batch/v1"}]
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"resources": {"limits": limits}}]},
            "status": {"phase": phase}}  # fmt: skip


def test_training_ranks_mark_their_nodes_and_nothing_else_does() -> None:
    pods = [
        pod("train-a"),  # an indexed Job's rank
        pod("train-b", owner="PyTorchJob", phase="Pending"),  # bound, starting
        pod("train-c", owner=None, labels={"gpufabric.io/workload": "training"}),  # said so by its submitter
        pod("done", phase="Succeeded"),  # finished: holds nothing
        pod("agent", labels={"gpufabric.io/agent-id": "a1"}),  # an agent run as a Job is not training
        pod("slice", mig=True),  # a MIG slice: a GPU already partitioned, nothing to protect here
        pod("cpu", gpus=None),  # no GPU
        pod("bare", owner=None),  # a bare pod: no training owner, no label
        pod("zero", gpus="0"),
        pod("junk", gpus="eight"),  # a malformed quantity counts as no GPU, never a crash
        pod(None),  # not scheduled yet: on no node
    ]
    assert training_nodes(pods) == {"train-a", "train-b", "train-c"}


def test_hostile_manifests_are_not_training_and_do_not_crash() -> None:
    hostile: list[Any] = [None, "pod", 7, {}, {"metadata": None}, {"metadata": {"labels": "x"}},
                          {"spec": {"containers": [None, {"resources": None}]}, "metadata": {}},
                          {"metadata": {"ownerReferences": [None, "Job"]}, "spec": {"nodeName": "n"}}]  # fmt: skip
    assert training_nodes(hostile) == frozenset()
    assert not any(is_training_pod(p) for p in hostile)


@settings(max_examples=60, deadline=None)
@given(owner=st.sampled_from([*sorted(TRAINING_OWNERS), "ReplicaSet", "Deployment", "StatefulSet", None]),
       agent=st.booleans(), gpus=st.sampled_from(["0", "1", "8", None]), phase=st.sampled_from(
           ["Pending", "Running", "Succeeded", "Failed", "Unknown"]))  # fmt: skip
def test_the_rule_as_stated(owner: str | None, agent: bool, gpus: str | None, phase: str) -> None:
    p = pod("n", owner=owner, gpus=gpus, phase=phase, labels={"gpufabric.io/agent-id": "a"} if agent else None)
    holds = gpus not in (None, "0") and phase not in ("Succeeded", "Failed")
    expected = owner in TRAINING_OWNERS and not agent and holds
    assert (training_nodes([p]) == {"n"}) == expected


def test_the_planner_never_reconfigures_a_training_nodes_gpus() -> None:
    labels = {n: {mig.GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3", mig.GFD_COUNT: "8"} for n in ("train-a", "free")}
    gpus, notes = mig.current_gpus(labels, None, training_nodes([pod("train-a")]))
    assert not notes
    demand = (TenantDemand("inference", "mig", (SliceRequest("H100-80GB", 14, "1g.10gb"),)),)
    result = plan(gpus, demand, max_per_window=8, windows=2)
    assert result.complete
    by_node: dict[str, set[str]] = {}
    for g in result.gpus:
        by_node.setdefault(g.gpu.node, set()).add(g.role)
    assert by_node["train-a"] == {"training"}
    assert not any(g.changed for g in result.gpus if g.gpu.node == "train-a")
    assert any(g.tenants for g in result.gpus if g.gpu.node == "free")
