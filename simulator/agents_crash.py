"""Crash replay: an agent workload on a real control plane whose orchestrators crash mid-run.

Reproduces the incident's shape: 847 agent pods in seven trees, three orchestrator crashes that
orphan 280 pods among them 200 GPU workers, restarts under new identities, and healthy trees
running beside them the whole time. Each crash is a different failure:

1. ``root-crash``: a root orchestrator's process dies; its pod turns Failed (its container
   exited, as kubelet reports it), its Lease stops. The whole tree is orphaned, including
   sub-orchestrators that still renew their own Leases. A new root with a new identity starts a
   fresh tree.
2. ``evicted``: a sub-orchestrator's pod is evicted (the Eviction API) and its Lease stops; its
   workers' parent is gone and the Lease runs out.
3. ``hung``: a sub-orchestrator hangs with its pod still Running; only the Lease tells. Its root
   spawns a replacement sub-orchestrator with a new identity and fresh workers.

Pods are created one API call each through the SDK and placed by kube-scheduler: GPU workers,
suspended workers and orchestrators onto the caller's fake GPU nodes (``gpus_requested`` says how
many GPUs that takes), where the node agent runs them; gated workers wait for their scheduling
gate, and "pending" workers ask for a CPU pool (``PENDING_POOL``) that has no nodes, as pods
waiting for a scaled-to-zero pool do. :meth:`CrashReplay.build` returns once every pod that can
run is Running. Plan namespaces (``agents-a``...) map to the caller's own (``namespaces``): a
test session shares one cluster.

The driver records which pods must be reaped (``expected_orphans``) and which must survive
(``healthy``), so a test can judge the reaper against ground truth. The orchestrators are the
agent SDK that agent frameworks use (``connectors.kube.agents.Orchestrator`` and ``Spawn``),
handed in by the caller (:class:`AgentSdk`): the simulator imports nothing of ours but ``core``,
and the replay drives whatever SDK it is given. An orchestrator renews its Lease on a thread;
"crash" is stopping that thread.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

ORCHESTRATOR_TTL_S = 6 * 3600
# "Pending" workers run on a CPU pool that is scaled to zero: no node has this label.
PENDING_POOL = {"gpufabric.io/pool": "cpu-burst"}


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
    pending: int = 0  # no gate, not schedulable (their node pool has no nodes)
    suspended: int = 0  # one GPU each, parked by the orchestrator (scheduled and running)

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


def gpus_requested(plans: tuple[TreePlan, ...] = INCIDENT) -> int:
    """GPUs the pods that get scheduled ask for, restarts included: the GPU workers and the
    suspended ones (gated pods are never scheduled)."""
    mixes = [m for p in plans for m in (*p.subs, *((p.restart,) if p.restart else ()))]
    return sum(m.gpu + m.suspended for m in mixes)


@dataclass
class Crash:
    tree: str
    kind: str
    agent_id: str
    at: datetime
    orphans: set[str]  # pod uids


@dataclass
class Workload:
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # uid -> {name, namespace, tree, gpus, ...}
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
                 namespaces: Mapping[str, str] | None = None, prefix: str = "gpufabric.io",
                 lease_duration_s: int = 3, renew_period_s: float = 1.0,
                 clock: Callable[[], datetime] | None = None, workers: int = 8,
                 running_timeout_s: float = 180.0) -> None:
        self.api, self.sdk, self.prefix = api, sdk, prefix
        self.plans = tuple(TreePlan(p.name, (namespaces or {}).get(p.namespace, p.namespace), p.subs, p.crash,
                                    p.restart) for p in plans)  # fmt: skip
        self.namespaces = sorted({p.namespace for p in self.plans})
        self.running_timeout_s = running_timeout_s
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
        """Create every tree (in parallel over the pool: ~850 creates), wait until every pod that
        can run is Running, and start the heartbeats."""
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
        self.wait_running()
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
                 + [spawn(tier="cpu", node_selector=PENDING_POOL)] * mix.pending
                 + [spawn(gpus=1, tier="gpu", suspended=True)] * mix.suspended)
        created = list(pool.map(sub.spawn, kinds))
        uids = {own}
        for pod, kind in zip(created, kinds, strict=True):
            holds = bool(kind.gpus and not kind.gated and not kind.suspended)
            runs = not kind.gated and not kind.node_selector
            uids.add(self._record(pod, tree, kind.gpus, running_gpu=holds, runs=runs))
        self.workload.orchestrators.append(sub)
        if not any(o is parent for o in self.workload.orchestrators):
            self.workload.orchestrators.append(parent)
        return sub, uids, own

    def _record(self, pod: dict[str, Any], tree: str, gpus: int, *, running_gpu: bool = False,
                runs: bool = True) -> str:
        meta = pod["metadata"]
        self.workload.pods[meta["uid"]] = {"name": meta["name"], "namespace": meta["namespace"], "tree": tree,
                                           "gpus": gpus, "running_gpu": running_gpu, "runs": runs}
        return str(meta["uid"])

    def wait_running(self) -> None:
        """Until kube-scheduler has bound, and the node agent started, every pod that can run."""
        runs = {uid for uid, p in self.workload.pods.items() if p["runs"]}
        deadline = time.monotonic() + self.running_timeout_s
        while True:
            waiting = runs & self._uids(field_selector="status.phase!=Running")
            if not waiting:
                return
            if time.monotonic() > deadline:
                names = sorted(self.workload.pods[u]["name"] for u in waiting)
                raise TimeoutError(f"{len(waiting)} pods not Running after {self.running_timeout_s:.0f} s "
                                   f"(is there room for {gpus_requested(self.plans)} GPUs?): {names[:5]}")
            time.sleep(0.2)

    def crash(self, tree_name: str) -> Crash:
        """Crash the tree's planned orchestrator now, and start its replacement if planned."""
        plan = next(p for p in self.plans if p.name == tree_name)
        root, subs = self._trees[tree_name]
        if plan.crash == "root-crash":
            victim, orphans = root, {u for _, uids, _ in subs for u in uids}
            orphans.add(next(uid for uid, p in self.workload.pods.items()
                             if p["tree"] == tree_name and p["name"] == root.holder))
            victim.stop()
            self._container_failed(root.holder, root.namespace)
        else:
            victim, orphans, own = subs[0]
            victim.stop()
            if plan.crash == "evicted":
                name = self.workload.pods[own]["name"]
                eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=victim.namespace))
                self.core.create_namespaced_pod_eviction(name, victim.namespace, eviction, _preload_content=False)
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

    def _container_failed(self, name: str, namespace: str) -> None:
        """What kubelet reports when the pod's only container exits with an error."""
        raw: Any = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        pod = json.loads(raw.data)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        statuses = [{"name": c["name"], "image": c["image"], "imageID": "", "ready": False, "started": False,
                     "restartCount": 0,
                     "state": {"running": None,  # a strategic merge patch would keep it otherwise
                               "terminated": {"exitCode": 1, "reason": "Error", "finishedAt": stamp}}}
                    for c in pod["spec"]["containers"]]  # fmt: skip
        body = {"metadata": {"uid": pod["metadata"]["uid"]},
                "status": {"phase": "Failed", "containerStatuses": statuses}}
        self.core.patch_namespaced_pod_status(name, namespace, body)

    def _uids(self, field_selector: str | None = None) -> set[str]:
        uids: set[str] = set()
        for namespace in self.namespaces:
            raw: Any = self.core.list_namespaced_pod(namespace, label_selector=f"{self.prefix}/agent-id",
                                                     field_selector=field_selector, _preload_content=False)
            uids |= {str(p["metadata"]["uid"]) for p in json.loads(raw.data).get("items") or []}
        return uids

    def live_uids(self) -> set[str]:
        """Uids of every agent pod of the replay's namespaces now (terminating ones included)."""
        return self._uids()

    def stop(self) -> None:
        for orch in self.workload.orchestrators:
            orch.stop()
