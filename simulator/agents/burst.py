"""A correlated peak of agent inference pods (issue 20, part 1): the plan, pure and deterministic.

When many agent trees hit a peak together (end of quarter, a batch of compliance portfolios),
thousands of inference pods are created within a minute or two on a cluster that is already
mostly busy. :func:`plan_burst` plans that moment from a seed: ``nodes`` fake 8-GPU nodes (every
``mig_every``-th one partitioned into MIG 1g.10gb instances, mixed strategy), a background of
training and batch pods bound to them so ``busy_fraction`` of the GPUs are taken, and ``trees``
agent trees across tenants and tiers creating ``pods`` pods inside ``window_s`` seconds.

The agents are the week's (:mod:`simulator.agents.week`): a planner root (depth 0) spawns coders
and browsers in turn, and the first coder a tool runner (depth 2); what each asks for is
:data:`AGENT_REQUESTS` (planners a whole GPU, the others a MIG 1g.10gb slice). Every pod carries
the ancestry and attribution labels the budget controller, the reaper and the cost tables read
(``<p>/agent-id``, ``root-id``, ``parent-id``, ``depth``, ``agent-type``, ``client``, ``task``,
``tier``), and the tenant's Kueue LocalQueue and tier priority class as ``gpufabric publish``
names them (:mod:`core.publish.kueue`), so Kueue's pod integration manages them once the queues
of :meth:`BurstPlan.kueue_objects` are applied.

Correlated: trees start in ``waves`` (a scheduler tick, a portfolio batch landing), a few seconds
of jitter each, and each tree spawns its children within a quarter of the window; every creation
falls inside the window. Nothing here talks to a cluster: ``simulator/agents/burst_driver.py``
replays a plan against a real API server.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from core.publish.kueue import KueuePolicy, Pool, TenantSpec, dns_name, render_kueue
from core.publish.labels import HOSTNAME_LABEL, LabelScheme, pool_name
from simulator.agents.week import DENOMINATOR, H100, _labels, _uid
from simulator.controlplane.nodes import RUN_SECONDS_ANNOTATION

DEFAULT_TREES = 2_000
DEFAULT_PODS = 10_000
DEFAULT_WINDOW_S = 120.0
DEFAULT_NODES = 1_024
DEFAULT_BUSY = 0.70
GPUS_PER_NODE = 8

WHOLE_GPU = "nvidia.com/gpu"
MIG_PROFILE = "1g.10gb"
MIG_RESOURCE = f"nvidia.com/mig-{MIG_PROFILE}"
MIG_PER_GPU = DENOMINATOR  # an H100 splits into seven 1g.10gb instances
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
ROLE_LABEL = "burst.gpufabric.io/role"  # burst | background: what a test or bench selects on

# What each agent type's inference pod asks for and how long it runs once Running (seconds, before
# the run's duration scale). Planners reason with a large model on a whole GPU; coders, browsers
# and tool runners call small models on a MIG 1g.10gb slice. With MIG on every 4th node the
# default burst fits the free capacity of a 70%-busy cluster if pods ran the moment they were
# created (:meth:`BurstPlan.peak_demand`: about 88% of the free whole GPUs, 75% of the free
# slices), so any lag measured comes from how pods are admitted and scheduled, not from a
# cluster too small for the work.
AGENT_REQUESTS: Mapping[str, Mapping[str, str]] = {
    "planner": {WHOLE_GPU: "1"},
    "coder": {MIG_RESOURCE: "1"},
    "tool-runner": {MIG_RESOURCE: "1"},
    "browser": {MIG_RESOURCE: "1"},
}
AGENT_RUN_S: Mapping[str, float] = {"planner": 60.0, "coder": 45.0, "browser": 30.0, "tool-runner": 15.0}
# How the peak is shaped, as fractions of the window: the last wave starts by WAVES_SPAN, a tree's
# root is at most JITTER_CAP after its wave, and its last child at most SPAWN_SPAN after its root;
# 0.55 + 0.15 + 0.25 < 1 keeps every creation inside the window.
WAVES_SPAN = 0.55
JITTER_MEAN = 0.03
JITTER_CAP = 0.15
SPAWN_SPAN = 0.25


@dataclass(frozen=True)
class BurstTenant:
    """A tenant of the burst: its share of the trees (and of the queues' nominal quota), its tiers
    with their shares of its trees, and the task its agents work on."""

    id: str
    weight: float
    tiers: tuple[tuple[str, float], ...]
    task: str


# The week's tenants (simulator/agents/week.py), now all running agent trees: globex's support
# agents, initech's inference, umbrella's evaluations, acme's batch agents beside its training.
DEFAULT_TENANTS: tuple[BurstTenant, ...] = (
    BurstTenant("globex", 0.40, (("interactive", 0.8), ("standard", 0.2)), "support"),
    BurstTenant("initech", 0.25, (("standard", 0.7), ("batch", 0.3)), "inference"),
    BurstTenant("umbrella", 0.20, (("batch", 0.6), ("standard", 0.4)), "eval"),
    BurstTenant("acme", 0.15, (("batch", 1.0),), "finetune-eval"),
)


@dataclass(frozen=True)
class BurstNode:
    """A fake GPU node: whole GPUs, or (MIG, mixed strategy) its GPUs split into 1g.10gb instances."""

    name: str
    labels: Mapping[str, str]
    capacity: Mapping[str, str]
    mig: bool

    @property
    def gpus(self) -> int:
        return GPUS_PER_NODE

    @property
    def slots(self) -> int:
        """What pods ask for on this node: whole GPUs, or MIG instances."""
        return GPUS_PER_NODE * MIG_PER_GPU if self.mig else GPUS_PER_NODE

    def description(self) -> dict[str, Any]:
        """The short node form :func:`simulator.controlplane.nodes.normalise_node` takes."""
        return {"name": self.name, "labels": dict(self.labels), "capacity": dict(self.capacity)}


@dataclass(frozen=True)
class BackgroundPod:
    """A pod that already holds GPUs when the burst starts: bound to its node (``spec.nodeName``),
    never through a queue (training and batch work submitted long before)."""

    name: str
    namespace: str
    tenant: str
    tier: str
    task: str
    node: str
    requests: Mapping[str, str]

    def labels(self, prefix: str) -> dict[str, str]:
        return {**_labels(prefix, client=self.tenant, task=self.task, tier=self.tier), ROLE_LABEL: "background"}

    def manifest(self, prefix: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": self.labels(prefix)},
            "spec": {"nodeName": self.node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "train",
                                     "resources": {"requests": dict(self.requests), "limits": dict(self.requests)}}]},
        }  # fmt: skip


@dataclass(frozen=True)
class BurstPod:
    """One pod of the burst: which tree, tenant and tier, when (seconds after the burst starts),
    what it asks for, and how long it runs once Running."""

    name: str
    namespace: str
    tree: int
    tenant: str
    tier: str
    task: str
    agent_type: str
    agent_id: str
    root_id: str
    parent_id: str | None
    depth: int
    offset_s: float
    requests: Mapping[str, str]
    run_s: float
    queue: str  # the tenant's LocalQueue (same name as its namespace, as publish renders it)
    priority_class: str  # the tier's WorkloadPriorityClass

    @property
    def is_root(self) -> bool:
        return self.parent_id is None

    @property
    def gpu_units(self) -> Fraction:
        """GPUs asked for, a MIG 1g instance counted as 1/7 (the cost tables' policy)."""
        return Fraction(int(self.requests.get(WHOLE_GPU, "0"))) + Fraction(
            int(self.requests.get(MIG_RESOURCE, "0")), MIG_PER_GPU)

    def labels(self, prefix: str, *, queues: bool = True) -> dict[str, str]:
        """The ancestry and attribution labels (the contract of ``connectors.kube.agents``), plus the
        Kueue queue and priority class when the burst goes through Kueue."""
        out = _labels(prefix, agent_id=self.agent_id, root_id=self.root_id, parent_id=self.parent_id,
                      depth=self.depth, agent_type=self.agent_type, client=self.tenant, task=self.task,
                      tier=self.tier)  # fmt: skip
        out[ROLE_LABEL] = "burst"
        if queues:
            out[QUEUE_LABEL] = self.queue
            out[PRIORITY_LABEL] = self.priority_class
        return out

    def manifest(self, prefix: str, *, expires_at: str, queues: bool = True) -> dict[str, Any]:
        """The pod an orchestrator creates: one container asking for the agent's GPU or slice, the
        absolute ``<p>/expires-at`` TTL the reaper reads, and the run time the node agent honours."""
        resources = {"requests": dict(self.requests), "limits": dict(self.requests)}
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": self.labels(prefix, queues=queues),
                         "annotations": {f"{prefix}/expires-at": expires_at,
                                         RUN_SECONDS_ANNOTATION: f"{self.run_s:.1f}"}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "agent", "image": "llm-agent", "resources": resources}]},
        }  # fmt: skip


@dataclass(frozen=True)
class BurstPlan:
    seed: int
    window_s: float
    prefix: str
    tenants: tuple[BurstTenant, ...]
    nodes: tuple[BurstNode, ...]
    background: tuple[BackgroundPod, ...]
    pods: tuple[BurstPod, ...]
    quotas: Mapping[str, int] = field(default_factory=dict)  # tenant -> nominal whole GPUs

    # -- what the plan asks of the cluster ------------------------------------------------------

    def namespaces(self) -> list[str]:
        return sorted({dns_name(t.id) for t in self.tenants})

    def tenant_specs(self) -> list[TenantSpec]:
        tiers = {t.id: sorted({tier for tier, _ in t.tiers}) for t in self.tenants}
        return [TenantSpec(t.id, t.id, tiers[t.id], gpu_quota={"H100": self.quotas.get(t.id, 0)})
                for t in self.tenants]  # fmt: skip

    def pools(self) -> list[Pool]:
        counts = Counter(n.labels[LabelScheme(prefix=self.prefix).pool_key] for n in self.nodes)
        return [Pool(name, H100, GPUS_PER_NODE, count) for name, count in sorted(counts.items())]

    def kueue_objects(self, policy: KueuePolicy | None = None) -> list[dict[str, Any]]:
        """The Topology, ResourceFlavor, Cohort, WorkloadPriorityClasses, ClusterQueues and
        LocalQueues ``gpufabric publish`` renders for these nodes and tenants, in apply order."""
        return render_kueue(LabelScheme(prefix=self.prefix), self.pools(), self.tenant_specs(), policy)

    # -- figures the tests and the bench compare against -----------------------------------------

    def capacity(self) -> tuple[int, int]:
        """(whole GPUs on whole-GPU nodes, MIG instances on MIG nodes)."""
        whole = sum(n.slots for n in self.nodes if not n.mig)
        return whole, sum(n.slots for n in self.nodes if n.mig)

    def busy(self) -> tuple[int, int]:
        """(whole GPUs, MIG instances) the background holds."""
        whole = sum(int(p.requests.get(WHOLE_GPU, "0")) for p in self.background)
        return whole, sum(int(p.requests.get(MIG_RESOURCE, "0")) for p in self.background)

    def busy_fraction(self) -> Fraction:
        """Share of all GPUs the background holds (a MIG instance is 1/7 GPU)."""
        (whole, mig), (cap_whole, cap_mig) = self.busy(), self.capacity()
        return (whole + Fraction(mig, MIG_PER_GPU)) / (cap_whole + Fraction(cap_mig, MIG_PER_GPU))

    def free(self) -> tuple[int, int]:
        """(whole GPUs, MIG instances) left free by the background."""
        (whole, mig), (cap_whole, cap_mig) = self.busy(), self.capacity()
        return cap_whole - whole, cap_mig - mig

    def peak_demand(self) -> tuple[int, int]:
        """(whole GPUs, MIG instances) the burst holds at its busiest instant if every pod ran from
        the moment it was planned for its run time: what an ideal scheduler must find free."""
        events: list[tuple[float, int, int]] = []
        for p in self.pods:
            whole, mig = int(p.requests.get(WHOLE_GPU, "0")), int(p.requests.get(MIG_RESOURCE, "0"))
            events += [(p.offset_s, whole, mig), (p.offset_s + p.run_s, -whole, -mig)]
        events.sort(key=lambda e: (e[0], e[1] + e[2]))  # at one instant, ends before starts
        held_whole = held_mig = peak_whole = peak_mig = 0
        for _, whole, mig in events:
            held_whole, held_mig = held_whole + whole, held_mig + mig
            peak_whole, peak_mig = max(peak_whole, held_whole), max(peak_mig, held_mig)
        return peak_whole, peak_mig

    def demand(self) -> tuple[int, int]:
        """(whole GPUs, MIG instances) the burst asks for in total."""
        whole = sum(int(p.requests.get(WHOLE_GPU, "0")) for p in self.pods)
        return whole, sum(int(p.requests.get(MIG_RESOURCE, "0")) for p in self.pods)


# ------------------------------------------------------------------------------------------------ planning


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` exactly (largest remainder; ties to the first)."""
    if total < 0 or not weights or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"cannot apportion {total} over weights {list(weights)}")
    scale = sum(weights)
    exact = [Fraction(total) * Fraction(w).limit_denominator(10**9) / Fraction(scale).limit_denominator(10**9)
             for w in weights]  # fmt: skip
    out = [int(e) for e in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


def tree_kinds(size: int) -> list[tuple[str, int]]:
    """(agent type, index of its parent in the tree or -1) of a tree of ``size`` pods, in spawn
    order: the week's shape, a planner, then coders and browsers in turn, the first coder's tool
    runner right after it."""
    kinds: list[tuple[str, int]] = [("planner", -1)]
    child = 0
    while len(kinds) < size:
        kind = "coder" if child % 2 == 0 else "browser"
        kinds.append((kind, 0))
        if child == 0 and len(kinds) < size:
            kinds.append(("tool-runner", len(kinds) - 1))
        child += 1
    return kinds


def _nodes(count: int, prefix: str, node_prefix: str, mig_every: int) -> list[BurstNode]:
    scheme = LabelScheme(prefix=prefix)
    keys = dict(scheme.level_keys())
    pool = pool_name(H100, GPUS_PER_NODE)
    nodes = []
    for i in range(count):
        name = f"{node_prefix}-{i:04d}"
        mig = mig_every > 0 and i % mig_every == mig_every - 1
        # A SuperPOD-shaped fabric: 32 nodes under one set of leaves, 4 such blocks per spine
        # group, one core pod; each HGX board is its own NVLink domain. Every TAS level is
        # labelled, as publish labels a complete node (Kueue drops nodes that miss one).
        labels = {
            HOSTNAME_LABEL: name,
            "nvidia.com/gpu.product": H100,
            "nvidia.com/gpu.count": str(GPUS_PER_NODE),
            "nvidia.com/mig.capable": "true",
            keys["pod"]: "pod-0",
            keys["spine_group"]: f"sg-{i // 128:02d}",
            keys["block"]: f"su-{i // 32:03d}",
            keys["nvlink_domain"]: name,
            keys["nvlink_sub_domain"]: name,
            scheme.pool_key: pool,
        }
        if mig:
            labels["nvidia.com/mig.strategy"] = "mixed"
            capacity = {WHOLE_GPU: "0", MIG_RESOURCE: str(GPUS_PER_NODE * MIG_PER_GPU)}
        else:
            capacity = {WHOLE_GPU: str(GPUS_PER_NODE)}
        nodes.append(BurstNode(name, labels, capacity, mig))
    return nodes


def _background(nodes: Sequence[BurstNode], busy: float, rng: random.Random, namespaces: Mapping[str, str],
                tenants: Sequence[BurstTenant]) -> list[BackgroundPod]:  # fmt: skip
    """Bound pods holding exactly round(busy x capacity) whole GPUs and MIG instances, scattered
    over shuffled nodes (free GPUs end up spread thin, as on a cluster that has been running)."""
    out: list[BackgroundPod] = []
    trainer = tenants[-1].id  # the last tenant runs the training (acme, as in the week)
    others = [t.id for t in tenants]
    for mig in (False, True):
        pool = [n for n in nodes if n.mig == mig]
        rng.shuffle(pool)
        target = round(busy * sum(n.slots for n in pool))
        free = {n.name: n.slots for n in pool}
        left = target
        if not mig:  # half of it as whole-node training jobs
            for node in pool[: (target // 2) // GPUS_PER_NODE]:
                out.append(BackgroundPod(f"bg-train-{len(out):05d}", namespaces[trainer], trainer, "batch", "pretrain",
                                         node.name, {WHOLE_GPU: str(GPUS_PER_NODE)}))
                free[node.name] = 0
                left -= GPUS_PER_NODE
        sizes = (4, 2, 1)
        resource = MIG_RESOURCE if mig else WHOLE_GPU
        while left > 0:
            size = min(rng.choice(sizes), left)
            candidates = [name for name, room in free.items() if room >= size]
            if not candidates:
                size = 1
                candidates = [name for name, room in free.items() if room >= 1]
            node_name = rng.choice(candidates)
            free[node_name] -= size
            left -= size
            tenant = rng.choice(others)
            out.append(BackgroundPod(f"bg-batch-{len(out):05d}", namespaces[tenant], tenant, "batch", "batch",
                                     node_name, {resource: str(size)}))
    return out


def _tree_sizes(trees: int, pods: int, rng: random.Random) -> list[int]:
    """Pods per tree, summing to ``pods`` exactly: a root each, the rest spread unevenly (some
    trees fan out to many children, most to a few)."""
    if trees < 1 or pods < trees:
        raise ValueError(f"a burst of {trees} trees needs at least one pod per tree, not {pods} pods")
    weights = [rng.paretovariate(2.5) for _ in range(trees)]
    return [1 + extra for extra in apportion(pods - trees, weights)]


def plan_burst(
    *,
    seed: int = 20,
    trees: int = DEFAULT_TREES,
    pods: int = DEFAULT_PODS,
    window_s: float = DEFAULT_WINDOW_S,
    nodes: int = DEFAULT_NODES,
    busy_fraction: float = DEFAULT_BUSY,
    waves: int = 4,
    mig_every: int = 4,
    duration_scale: float = 1.0,
    tenants: Sequence[BurstTenant] = DEFAULT_TENANTS,
    tenant_suffix: str = "",
    node_prefix: str = "burst",
    prefix: str = "gpufabric.io",
) -> BurstPlan:
    """The burst, from a seed: the same arguments give the same plan, pod for pod.

    ``tenant_suffix`` is appended to every tenant id (and so to its namespace and queue): a test
    on a shared plane gets tenants of its own. ``duration_scale`` stretches or shrinks how long the
    agents run once Running (a test wants seconds, the benchmark minutes).
    """
    if not 0 <= busy_fraction < 1:
        raise ValueError(f"busy_fraction must be in [0, 1), not {busy_fraction}")
    if window_s <= 0 or nodes < 1 or waves < 1 or duration_scale <= 0:
        raise ValueError("window_s, nodes, waves and duration_scale must be positive")
    rng = random.Random(seed)
    tenants = tuple(BurstTenant(f"{t.id}{tenant_suffix}", t.weight, t.tiers, t.task) for t in tenants)
    namespaces = {t.id: dns_name(t.id) for t in tenants}
    node_list = _nodes(nodes, prefix, node_prefix, mig_every)
    background = _background(node_list, busy_fraction, rng, namespaces, tenants)
    whole_capacity = sum(n.slots for n in node_list if not n.mig)
    quotas = dict(zip((t.id for t in tenants), apportion(whole_capacity, [t.weight for t in tenants]), strict=True))

    # Which tenant and tier each tree belongs to: exact shares, in a shuffled order.
    owners: list[tuple[BurstTenant, str]] = []
    for tenant, count in zip(tenants, apportion(trees, [t.weight for t in tenants]), strict=True):
        tiers = [tier for tier, _ in tenant.tiers]
        for tier, n in zip(tiers, apportion(count, [w for _, w in tenant.tiers]), strict=True):
            owners += [(tenant, tier)] * n
    rng.shuffle(owners)
    sizes = _tree_sizes(trees, pods, rng)

    planned: list[BurstPod] = []
    wave_starts = [WAVES_SPAN * window_s * w / max(1, waves - 1) for w in range(waves)]
    for tree, ((tenant, tier), size) in enumerate(zip(owners, sizes, strict=True)):
        jitter = min(rng.expovariate(1 / (JITTER_MEAN * window_s)), JITTER_CAP * window_s)
        root_at = rng.choice(wave_starts) + jitter
        gaps = [rng.uniform(0.2, 1.0) for _ in range(size - 1)]
        spread = min(SPAWN_SPAN * window_s, 0.01 * window_s * len(gaps))  # about a second apart
        scale = spread / sum(gaps) if gaps else 0.0
        ids: list[str] = []
        depths: list[int] = []
        offset = root_at
        kinds = tree_kinds(size)
        for index, (kind, parent) in enumerate(kinds):
            if index:
                offset += gaps[index - 1] * scale
            name = f"t{tree:05d}-{index:03d}-{kind}"
            agent_id = _uid(seed, f"burst/{tenant.id}/{name}").replace("-", "")[:16]
            root_id = ids[0] if ids else agent_id
            parent_id = ids[parent] if parent >= 0 else None
            depth = 0 if parent < 0 else depths[parent] + 1
            run_s = AGENT_RUN_S[kind] * rng.uniform(0.5, 1.5) * duration_scale
            ids.append(agent_id)
            depths.append(depth)
            planned.append(BurstPod(name, namespaces[tenant.id], tree, tenant.id, tier, f"{tenant.task}-{tree % 8}",
                                    kind, agent_id, root_id, parent_id, depth, round(offset, 3),
                                    AGENT_REQUESTS[kind], round(run_s, 1), namespaces[tenant.id], dns_name(tier)))
        # The planner outlives its children: a root that finished first would orphan them.
        children = [p for p in planned[-size:] if not p.is_root]
        if children:
            root = planned[-size]
            last = max(p.offset_s - root.offset_s + p.run_s for p in children)
            planned[-size] = replace(root, run_s=round(max(root.run_s, last + 5.0), 1))
    planned.sort(key=lambda p: (p.offset_s, p.tree, p.depth))
    return BurstPlan(seed, window_s, prefix, tenants, tuple(node_list), tuple(background), tuple(planned), quotas)


__all__ = [
    "AGENT_REQUESTS", "DEFAULT_BUSY", "DEFAULT_NODES", "DEFAULT_PODS", "DEFAULT_TENANTS", "DEFAULT_TREES",
    "DEFAULT_WINDOW_S", "MIG_RESOURCE", "PRIORITY_LABEL", "QUEUE_LABEL", "ROLE_LABEL", "RUN_SECONDS_ANNOTATION",
    "BackgroundPod", "BurstNode", "BurstPlan", "BurstPod", "BurstTenant", "apportion", "plan_burst", "tree_kinds",
]  # fmt: skip
