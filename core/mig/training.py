"""Which nodes run a training job's pods, so the MIG planner never reconfigures their GPUs (issue 21).

Reconfiguring MIG on a GPU means mig-manager evicting everything on it; for a training job that is
lost progress on every rank, not one restarted pod. A node counts as training when a pod bound to
it and not finished holds whole GPUs (``nvidia.com/gpu``) and belongs to a batch training workload:
owned by one of :data:`TRAINING_OWNERS` (what Kubernetes, JobSet, Kubeflow's training operator,
KubeRay and Volcano create pods from), or labelled ``<prefix>/workload=training`` by its submitter.
Agent pods (``<prefix>/agent-id``: inference sub-agents, the burst's pods) are never training, even
when an orchestrator runs them as Jobs: they are short and restartable, which is what MIG serves.
Vendor names as data; pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# ownerReferences kinds whose pods are a training job's ranks (Job: plain indexed Jobs and what
# JobSet and Kueue's MPI/PyTorch integrations create; the rest are the operators' own kinds).
TRAINING_OWNERS = frozenset({"Job", "JobSet", "PyTorchJob", "MPIJob", "TFJob", "XGBoostJob", "PaddleJob",
                             "JAXJob", "TrainJob", "RayJob", "RayCluster", "PodGroup"})  # fmt: skip
FINISHED = frozenset({"Succeeded", "Failed"})
WHOLE_GPU = "nvidia.com/gpu"


def _holds_whole_gpus(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    for container in spec.get("containers") or []:
        resources = (container or {}).get("resources") or {}
        for section in ("limits", "requests"):
            value = (resources.get(section) or {}).get(WHOLE_GPU)
            try:
                if value is not None and int(str(value)) > 0:
                    return True
            except ValueError:
                continue  # a malformed quantity holds nothing we can count
    return False


def is_training_pod(pod: Mapping[str, Any], prefix: str = "gpufabric.io") -> bool:
    """A pod of a training job that holds whole GPUs (see the module's rule)."""
    if not isinstance(pod, Mapping):
        return False
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping) or f"{prefix}/agent-id" in labels:
        return False
    if not _holds_whole_gpus(pod):
        return False
    if labels.get(f"{prefix}/workload") == "training":
        return True
    owners = meta.get("ownerReferences") or []
    return any(isinstance(o, Mapping) and o.get("kind") in TRAINING_OWNERS for o in owners)


def training_nodes(pods: Iterable[Mapping[str, Any]], prefix: str = "gpufabric.io") -> frozenset[str]:
    """Nodes with a bound, unfinished training pod."""
    out: set[str] = set()
    for pod in pods:
        if not isinstance(pod, Mapping):
            continue
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if node and phase not in FINISHED and is_training_pod(pod, prefix):
            out.add(str(node))
    return frozenset(out)
