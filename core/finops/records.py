"""The snapshot records the Kubernetes connector produces and ``raw.k8s_*_snapshots`` stores."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.finops.labels import Attribution

POD_EVENTS = ("list", "ADDED", "MODIFIED", "DELETED")


@dataclass(frozen=True)
class PodSnapshot:
    """One pod as seen at ``collected_at`` (a list, or a watch event)."""

    cluster: str
    collected_at: datetime
    event: str
    uid: str
    namespace: str
    name: str
    node: str | None
    phase: str | None
    start_time: datetime | None
    end_time: datetime | None
    gpus: int
    mig: dict[str, int]
    gpu_requests: dict[str, str]
    unknown_gpu_resources: dict[str, str]
    attribution: Attribution
    labels: dict[str, Any]
    issues: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class NodeSnapshot:
    cluster: str
    collected_at: datetime
    node: str
    gpu_model: str | None
    gpu_count: int
    mig_capable: bool | None
    labels: dict[str, str]
    allocatable: dict[str, str]


POD_COLUMNS = (
    "run_id", "source", "collected_at", "event", "uid", "namespace", "name", "node", "phase", "start_time",
    "end_time", "gpus", "mig", "gpu_requests", "unknown_gpu_resources", "root_id", "parent_id", "depth", "client",
    "task", "agent_type", "tier", "labels", "issues",
)
NODE_COLUMNS = ("run_id", "source", "collected_at", "node", "gpu_model", "gpu_count", "mig_capable", "labels",
                "allocatable")


def pod_row(run_id: str, s: PodSnapshot) -> tuple[Any, ...]:
    a = s.attribution
    return (
        run_id, s.cluster, s.collected_at, s.event, s.uid, s.namespace, s.name, s.node, s.phase, s.start_time,
        s.end_time, s.gpus, s.mig, s.gpu_requests, s.unknown_gpu_resources, a.root_id, a.parent_id, a.depth,
        a.client, a.task, a.agent_type, a.tier, s.labels, list(s.issues),
    )


def node_row(run_id: str, n: NodeSnapshot) -> tuple[Any, ...]:
    return (run_id, n.cluster, n.collected_at, n.node, n.gpu_model, n.gpu_count, n.mig_capable, n.labels,
            n.allocatable)
