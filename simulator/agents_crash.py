"""Crash replay: an agent workload on the Kubernetes twin whose orchestrators crash mid-run.

Reproduces the incident's shape: 847 agent pods in seven trees, three orchestrator crashes that
orphan 280 pods among them 200 GPU workers, restarts under new identities, and healthy trees
running beside them the whole time. Each crash is a different failure:

1. ``root-crash``: a root orchestrator's process dies; its pod turns Failed, its Lease stops. The
   whole tree is orphaned, including sub-orchestrators that still renew their own Leases.
   A new root with a new identity starts a fresh tree.
2. ``evicted``: a sub-orchestrator's pod is deleted (eviction) and its Lease stops; its workers'
   parent is gone and the Lease runs out.
3. ``hung``: a sub-orchestrator hangs with its pod still Running; only the Lease tells. Its root
   spawns a replacement sub-orchestrator with a new identity and fresh workers.

The driver records which pods must be reaped (``expected_orphans``) and which must survive
(``healthy``), so a test can judge the reaper against ground truth. The orchestrators are the
agent SDK that agent frameworks use (``connectors.kube.agents.Orchestrator`` and ``Spawn``),
handed in by the caller (:class:`AgentSdk`): the simulator imports nothing of ours but ``core``,
and the replay drives whatever SDK it is given. An orchestrator renews its Lease on a thread;
"crash" is stopping that thread.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

ORCHESTRATOR_TTL_S = 6 * 3600


@dataclass(frozen=True)
class AgentSdk:
    """The agent SDK the replay drives: ``orchestrator(api, namespace=, agent_id=, ...)`` makes a
    handle with ``register``/``spawn``/``renew``/``start_heartbeat``/``stop``; ``spawn(**kw)`` makes
    what ``spawn`` takes (``connectors.kube.agents.Orchestrator`` and ``Spawn``)."""

    orchestrator: Callable[..., Any]
    spawn: Callable[..., Any]


@dataclass(frozen=True)
class Mix:
    """The workers one sub-orchestrator spawns."""

    gpu: int  # Running, one GPU each
    gated: int = 0  # scheduling gate (waiting for Kueue admission)
    pending: int = 0  # no gate, not scheduled
    suspended: int = 0

    @property
    def total(self) -> int:
        return self.gpu + self.gated + self.pending + self.suspended


@dataclass(frozen=True)
class TreePlan:
    name: str
    namespace: str
    subs: tuple[Mix, ...]
    crash: str | None = None  # "root-crash" | "evicted" | "hung" (the first sub crashes)
    restart: Mix | None = None  # the workload the replacement (new identity) spawns


# 847 pods; the three crashes orphan 103 + 91 + 86 = 280 pods holding 200 GPUs (70 + 65 + 65).
INCIDENT: tuple[TreePlan, ...] = (
    TreePlan("c1", "agents-a", (Mix(35, 10, 5), Mix(35, 10, 5)), crash="root-crash", restart=Mix(30)),
    TreePlan("c2", "agents-a", (Mix(65, 15, 10), Mix(40, 10)), crash="evicted"),
    TreePlan("c3", "agents-b", (Mix(65, 10, 0, 10), Mix(40, 0, 10)), crash="hung", restart=Mix(40)),
    TreePlan("h1", "agents-b", (Mix(40, 10, 5, 5),) * 3),
    TreePlan("h2", "agents-c", (Mix(45, 12, 6, 5), Mix(45, 12, 5, 5), Mix(45, 12, 5, 5))),
)


@dataclass
class Crash:
    tree: str
    kind: str
    agent_id: str
    at: datetime
    orphans: set[str]  # pod uids


@dataclass
class Workload:
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # uid -> {name, namespace, tree, gpus}
    healthy: set[str] = field(default_factory=set)
    expected_orphans: set[str] = field(default_factory=set)
    orchestrators: list[Any] = field(default_factory=list)
    crashes: list[Crash] = field(default_factory=list)

    @property
    def orphan_gpu_workers(self) -> int:
        """Orphans holding a GPU (Running); gated and suspended ones request one but hold none."""
        return sum(1 for uid in self.expected_orphans if self.pods[uid]["running_gpu"])


class CrashReplay:
    """Build the workload, then crash it on cue. ``clock`` is shared with the reaper."""

    def __init__(self, api: client.ApiClient, sdk: AgentSdk, *, plans: tuple[TreePlan, ...] = INCIDENT,
                 prefix: str = "gpufabric.io", lease_duration_s: int = 3, renew_period_s: float = 1.0,
                 clock: Callable[[], datetime] | None = None, workers: int = 8) -> None:
        self.api, self.sdk, self.plans, self.prefix = api, sdk, plans, prefix
        self._orchestrator_spawn = sdk.spawn(agent_type="orchestrator", ttl_s=ORCHESTRATOR_TTL_S)
        self.lease_duration_s, self.renew_period_s = lease_duration_s, renew_period_s
        self.clock = clock or (lambda: datetime.now(UTC))
        self.workers = workers
        self.workload = Workload()
        self._trees: dict[str, tuple[Any, list[tuple[Any, set[str], str]]]] = {}

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def build(self) -> Workload:
        """Create every tree (in parallel over the pool: ~850 creates) and start the heartbeats."""
        with ThreadPoolExecutor(self.workers) as pool:
            for index, tree in enumerate(self.plans):
                root = self.sdk.orchestrator(
                    self.api, namespace=tree.namespace, agent_id=f"{tree.name}-root-{index}",
                    lease_duration_s=self.lease_duration_s, prefix=self.prefix, clock=self.clock,
                )  # fmt: skip
                root_uid = self._record(root.register(self._orchestrator_spawn), tree.name, 0)
                subs = []
                for j, mix in enumerate(tree.subs):
                    subs.append(self._sub(pool, root, f"{tree.name}-sub-{j}", mix, tree.name))
                self._trees[tree.name] = (root, subs)
                crashed_uids = {root_uid} | {u for _, uids, _ in subs for u in uids} if tree.crash == "root-crash" \
                    else subs[0][1] if tree.crash else set()
                for _, uids, _ in subs:
                    self.workload.healthy |= uids - crashed_uids
                if root_uid not in crashed_uids:
                    self.workload.healthy.add(root_uid)
        for orch in self.workload.orchestrators:
            orch.renew()  # building took seconds: every Lease starts fresh when the clock starts
            orch.start_heartbeat(self.renew_period_s)
        return self.workload

    def _sub(self, pool: ThreadPoolExecutor, parent: Any, agent_id: str, mix: Mix,
             tree: str) -> tuple[Any, set[str], str]:
        sub = parent.child(agent_id)
        sub.renew()
        spawn = self.sdk.spawn
        own = self._record(parent.spawn(spawn(agent_type="orchestrator", ttl_s=ORCHESTRATOR_TTL_S, agent_id=agent_id)),
                           tree, 0)  # fmt: skip
        kinds = ([spawn(gpus=1, tier="gpu")] * mix.gpu + [spawn(gpus=1, tier="gpu", gated=True)] * mix.gated
                 + [spawn(tier="cpu")] * mix.pending + [spawn(gpus=1, tier="gpu", suspended=True)] * mix.suspended)
        created = list(pool.map(sub.spawn, kinds))
        uids = {own}
        running = []
        for pod, kind in zip(created, kinds, strict=True):
            holds = bool(kind.gpus and not kind.gated and not kind.suspended)
            uids.add(self._record(pod, tree, kind.gpus, running_gpu=holds))
            if holds:
                running.append(pod)
        list(pool.map(self._set_running, running))
        self.workload.orchestrators.append(sub)
        if not any(o is parent for o in self.workload.orchestrators):
            self.workload.orchestrators.append(parent)
        return sub, uids, own

    def _set_running(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": {"phase": "Running"}})

    def _record(self, pod: dict[str, Any], tree: str, gpus: int, *, running_gpu: bool = False) -> str:
        meta = pod["metadata"]
        self.workload.pods[meta["uid"]] = {"name": meta["name"], "namespace": meta["namespace"], "tree": tree,
                                           "gpus": gpus, "running_gpu": running_gpu}
        return str(meta["uid"])

    def crash(self, tree_name: str) -> Crash:
        """Crash the tree's planned orchestrator now, and start its replacement if planned."""
        plan = next(p for p in self.plans if p.name == tree_name)
        root, subs = self._trees[tree_name]
        if plan.crash == "root-crash":
            victim, orphans = root, {u for _, uids, _ in subs for u in uids}
            orphans.add(next(uid for uid, p in self.workload.pods.items()
                             if p["tree"] == tree_name and p["name"] == root.holder))
            victim.stop()
            self.core.patch_namespaced_pod_status(root.holder, root.namespace, {"status": {"phase": "Failed"}})
        else:
            victim, orphans, own = subs[0]
            victim.stop()
            if plan.crash == "evicted":
                self.core.delete_namespaced_pod(self.workload.pods[own]["name"], victim.namespace,
                                                _preload_content=False)
                orphans = orphans - {own}  # the eviction, not the reaper, removed this one
                self.workload.pods.pop(own)
        event = Crash(tree_name, str(plan.crash), victim.agent_id, self.clock(), set(orphans))
        self.workload.crashes.append(event)
        self.workload.expected_orphans |= orphans
        if plan.restart is not None:
            self._restart(plan, root)
        return event

    def _restart(self, plan: TreePlan, root: Any) -> None:
        """A replacement under a *new* identity: the old children stay orphaned (nobody adopts them)."""
        with ThreadPoolExecutor(self.workers) as pool:
            if plan.crash == "root-crash":
                new_root = self.sdk.orchestrator(
                    self.api, namespace=plan.namespace, agent_id=f"{plan.name}-root-restarted",
                    lease_duration_s=self.lease_duration_s, prefix=self.prefix, clock=self.clock,
                )  # fmt: skip
                self.workload.healthy.add(self._record(new_root.register(self._orchestrator_spawn), plan.name, 0))
                sub, uids, _ = self._sub(pool, new_root, f"{plan.name}-sub-restarted", plan.restart or Mix(0),
                                         plan.name)
                new_root.start_heartbeat(self.renew_period_s)
            else:
                sub, uids, _ = self._sub(pool, root, f"{plan.name}-sub-restarted", plan.restart or Mix(0), plan.name)
        sub.start_heartbeat(self.renew_period_s)
        self.workload.healthy |= uids

    def live_uids(self) -> set[str]:
        """Uids of every agent pod on the twin now."""
        data = self.core.list_pod_for_all_namespaces(label_selector=f"{self.prefix}/agent-id")
        return {str(p.metadata.uid) for p in data.items if p.metadata is not None}

    def stop(self) -> None:
        for orch in self.workload.orchestrators:
            orch.stop()
