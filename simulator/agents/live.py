"""A few live agent trees on the simulated cluster, so the demo has money to show (issue 24, part 3).

Without pods, the demo's cost fact holds idle lines only and ``raw/k8s_pod_snapshots`` lands
nothing. :func:`plan_trees` plans a handful of agent trees (the week's agent types, clients and
tiers: a planner root on a whole GPU, coders and a reviewer below it, a tool runner under the
first coder), and :func:`start_trees` creates them the way an orchestrator does, one API call per
pod with the ancestry and attribution labels the budget controller, reaper and cost tables read.
kube-scheduler places them on the spec's fake nodes and the node agent runs them; the short-lived
children end Succeeded after ``run_s`` (the node agent's run-seconds annotation), the roots keep
running, so the snapshot asset sees both finished and live agents.

No Kueue queue label: Kueue's pod integration leaves them alone and they land as an agent
orchestrator's pods do on a cluster without queues. Deterministic for a seed; nothing here knows
the wall clock except the absolute TTL each pod carries for the reaper.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from simulator.agents.week import _labels, _uid
from simulator.controlplane.nodes import RUN_SECONDS_ANNOTATION

# (client, task, agent tier) per tree, cycled: the week's clients and the tiers the rate cards price.
TREE_KINDS: tuple[tuple[str, str, str], ...] = (
    ("globex", "code-review", "interactive"),
    ("initech", "support-bot", "standard"),
    ("umbrella", "eval", "batch"),
)
ROOT_RUN_S = 3600.0  # roots outlive the demo: the snapshot sees them Running
CHILD_RUN_S = (3.0, 10.0)  # children finish within seconds: the demo waits for them (wait_finished)


@dataclass(frozen=True)
class LivePod:
    name: str
    namespace: str
    agent_type: str
    agent_id: str
    root_id: str
    parent_id: str | None
    depth: int
    client: str
    task: str
    tier: str
    gpus: int
    run_s: float

    def manifest(self, prefix: str, *, expires_at: datetime) -> dict[str, Any]:
        labels = _labels(prefix, agent_id=self.agent_id, root_id=self.root_id, parent_id=self.parent_id,
                         depth=self.depth, agent_type=self.agent_type, client=self.client, task=self.task,
                         tier=self.tier)  # fmt: skip
        gpus = {"nvidia.com/gpu": str(self.gpus)}
        ttl = expires_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": labels,
                         "annotations": {f"{prefix}/expires-at": ttl,
                                         RUN_SECONDS_ANNOTATION: f"{self.run_s:.1f}"}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "agent", "image": "llm-agent",
                                     "resources": {"requests": gpus, "limits": gpus}}]},
        }  # fmt: skip


def plan_trees(namespaces: Sequence[str], *, trees: int = 6, seed: int = 24) -> list[LivePod]:
    """``trees`` agent trees spread over ``namespaces`` (roots first, then their children, in the
    order an orchestrator creates them). Each tree: a planner root (2 GPUs), 2-4 coders and a
    reviewer (1 GPU each), and a tool runner under the first coder (depth 2)."""
    if not namespaces:
        raise ValueError("no namespace to put the agent trees in")
    if trees < 1:
        raise ValueError(f"trees must be at least 1, not {trees}")
    rng = random.Random(seed)
    pods: list[LivePod] = []
    for t in range(trees):
        client, task, tier = TREE_KINDS[t % len(TREE_KINDS)]
        namespace = namespaces[t % len(namespaces)]
        root = LivePod(f"planner-{t:02d}", namespace, "planner", _uid(seed, f"root-{t}"), "", None, 0, client,
                       task, tier, 2, ROOT_RUN_S)
        root = LivePod(**{**root.__dict__, "root_id": root.agent_id})
        tree = [root]
        kinds = ["coder"] * rng.randint(2, 4) + ["reviewer"]
        for c, kind in enumerate(kinds):
            tree.append(LivePod(f"{kind}-{t:02d}-{c}", namespace, kind, _uid(seed, f"{t}-{c}"), root.agent_id,
                                root.agent_id, 1, client, task, tier, 1, round(rng.uniform(*CHILD_RUN_S), 1)))
        first_coder = tree[1]
        tree.append(LivePod(f"tool-runner-{t:02d}", namespace, "tool-runner", _uid(seed, f"{t}-tool"),
                            root.agent_id, first_coder.agent_id, 2, client, task, tier, 1,
                            round(rng.uniform(*CHILD_RUN_S), 1)))
        pods.extend(tree)
    return pods


def start_trees(core: Any, pods: Sequence[LivePod], *, prefix: str = "gpufabric.io",
                now: datetime | None = None, ttl: timedelta = timedelta(hours=2)) -> list[str]:
    """Create every pod (``core`` is a ``kubernetes.client.CoreV1Api``); a pod that already exists
    (a second demo on the same cluster) is left as it is. Returns the names created."""
    from kubernetes.client.exceptions import ApiException

    expires = (now or datetime.now(UTC)) + ttl
    created = []
    for pod in pods:
        try:
            core.create_namespaced_pod(pod.namespace, pod.manifest(prefix, expires_at=expires))
        except ApiException as exc:
            if exc.status != 409:
                raise
            continue
        created.append(pod.name)
    return created


def wait_finished(core: Any, pods: Sequence[LivePod], *, timeout_s: float = 180.0) -> None:
    """Until every pod of ``pods`` has ended (Succeeded or Failed); the timeout only guards against
    a hang (TimeoutError names the pods still going)."""
    wanted = {(p.namespace, p.name) for p in pods}
    deadline = time.monotonic() + timeout_s
    while True:
        going = set()
        for namespace in {ns for ns, _ in wanted}:
            for item in core.list_namespaced_pod(namespace).items:
                key = (namespace, item.metadata.name)
                if key in wanted and (item.status.phase or "Pending") not in ("Succeeded", "Failed"):
                    going.add(key)
        if not going:
            return
        if time.monotonic() > deadline:
            names = ", ".join(sorted(f"{ns}/{n}" for ns, n in going)[:10])
            raise TimeoutError(f"{len(going)} agent pods still not finished after {timeout_s:.0f} s: {names}")
        time.sleep(0.5)
