"""Which gated burst pods to release now (issue 20, part 4): the burst admission policy, pure.

Agent pods of a burst are created with the scheduling gate :data:`GATE`; the burst admission
controller (``controllers/burst_admission.py``) removes it from the pods this module picks. The
policy exists because a scheduler flooded with thousands of pods that fit nowhere spends its time
re-queueing them (unschedulable back-off), while the pods that would fit wait behind them. So:

* **only what fits is released.** Free capacity is each node's allocatable minus the requests of
  the pods bound to it and of the pods already released but not yet bound (they are about to take
  it). Each candidate is placed on a node in a simulation (tightest fit), so a pod is released only
  when one node has room for all of it: kube-scheduler needs one node, not a cluster-wide sum.
  Only GPU resources are counted (:func:`counted`): whole ``nvidia.com/gpu`` and each MIG profile
  (``nvidia.com/mig-*``) separately, as the device plugin advertises them. CPU and memory are
  left to kube-scheduler: on GPU nodes they are not what runs out at a burst.
* **higher tiers first** (:data:`TIER_RANK`: interactive, standard, batch, then anything else),
  **oldest first** within a tier, a tree's pods **together**: the trees are ordered by their
  oldest gated pod and each tree's pods go parent before child. A pod whose parent is still gated
  waits for it (an orchestrator's children are of no use before it runs).
* **the root's envelope** (``core.budget``): a tree that is not ``open`` in the ledger, past its
  deadline, over its GPU-hours or cost, or whose released pods already reach its
  ``max_live_pods`` keeps its pods gated, each with a :data:`HELD` reason, never silently.

Nothing here talks to a cluster: the controller turns :class:`ReleasePlan` into patches.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from core.budget import TreeEnvelope, fmt

GATE = "gpufabric.io/burst-admission"
HELD = "gpufabric.io/burst-held"  # annotation: why a gated pod stays gated (over-envelope ...)
TIER_RANK: Mapping[str, int] = {"interactive": 0, "standard": 1, "batch": 2}
UNKNOWN_TIER_RANK = len(TIER_RANK)
WHOLE_GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"


def counted(resource: str) -> bool:
    """The resources the policy accounts for: whole GPUs and every MIG profile."""
    return resource == WHOLE_GPU or resource.startswith(MIG_PREFIX)


class BadQuantity(ValueError):
    """An extended-resource quantity that is not a whole number (Kubernetes allows only those)."""


def units(value: object) -> int:
    """An extended resource's quantity as served ("1", 2): a non-negative whole number."""
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if text is None or not text.isdigit() or len(text) > 9:
        raise BadQuantity(f"quantity {value!r} is not a whole number of devices")
    return int(text)


def gpu_requests(requests: Mapping[str, object]) -> dict[str, int]:
    """The counted part of a container's (or pod's) requests; :class:`BadQuantity` when malformed."""
    return {r: units(v) for r, v in requests.items() if counted(r) and units(v) > 0}


@dataclass(frozen=True)
class NodeRoom:
    """A node a released pod may land on: what it has free of each counted resource, its labels
    (for the pod's nodeSelector) and the taints kube-scheduler would refuse pods over."""

    name: str
    free: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect), NoSchedule / NoExecute only


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: tuple[str, str, str]) -> bool:
        key, value, effect = taint
        if self.effect and self.effect != effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == key
        return self.key == key and self.value == value


@dataclass(frozen=True)
class GatedPod:
    """A burst pod as the policy needs it. ``released``: its gate is gone (it is running, bound
    or on its way to the scheduler); such pods count against their tree's ``max_live_pods``."""

    namespace: str
    name: str
    uid: str
    agent_id: str
    root_id: str
    parent_id: str | None
    tier: str
    created: datetime
    requests: Mapping[str, int]
    depth: int = 0
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    held: str = ""  # the HELD annotation it carries now

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def fits(self, node: NodeRoom) -> bool:
        if any(node.labels.get(k) != v for k, v in self.node_selector.items()):
            return False
        if any(not any(t.tolerates(taint) for t in self.tolerations) for taint in node.taints):
            return False
        return all(node.free.get(r, 0) >= n for r, n in self.requests.items())


@dataclass(frozen=True)
class Hold:
    pod: GatedPod
    reason: str
    annotate: bool  # an envelope hold is written on the pod; a capacity wait is not (it changes every pass)


@dataclass
class ReleasePlan:
    release: list[GatedPod] = field(default_factory=list)
    held: list[Hold] = field(default_factory=list)
    # pod key -> the node the simulation placed each release on, and each released-but-unbound pod
    # (None: it fits nowhere now, e.g. a node went away): what a test checks the plan against
    placed: dict[str, str] = field(default_factory=dict)
    in_flight: dict[str, str | None] = field(default_factory=dict)

    def reasons(self) -> dict[str, str]:
        return {h.pod.key: h.reason for h in self.held}


EnvelopeOf = Callable[[str], TreeEnvelope | None]


def tier_rank(tier: str) -> int:
    return TIER_RANK.get(tier, UNKNOWN_TIER_RANK)


class Rooms:
    """Each node's free room while a plan is made, and where a pod goes: the node with the least
    room left after it (tightest fit keeps whole nodes whole for larger pods), ties by name.

    At a burst's size a plan places thousands of pods on a thousand nodes, and a scan of every node
    per pod took seconds a pass. The common pod (one resource, no nodeSelector, no tolerations: it
    can only go to an untainted node) is placed through an index instead: per resource, per free
    amount, the nodes with that much (a heap by name, entries made stale by a placement skipped
    when met). Its tightest fit is the smallest amount that holds it, then the first name: the
    same node the scan finds (tests/unit/test_burst_admission_policy.py checks both agree). Any
    other pod is placed by the scan.
    """

    def __init__(self, nodes: Sequence[NodeRoom]) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.free = {n.name: dict(n.free) for n in nodes}
        self._index: dict[str, dict[int, list[str]]] = {}  # resource -> amount free -> node names (heap)
        for node in nodes:
            if not node.taints:
                for resource, amount in node.free.items():
                    if amount > 0:
                        heapq.heappush(self._index.setdefault(resource, {}).setdefault(amount, []), node.name)

    def place(self, pod: GatedPod) -> str | None:
        """The node for ``pod`` (None when none fits); its requests are taken off that node."""
        if len(pod.requests) == 1 and not pod.node_selector and not pod.tolerations:
            ((resource, count),) = pod.requests.items()
            best = self._indexed(resource, count)
        else:
            best = self.scan(pod)
        if best is not None:
            self._take(best, pod.requests)
        return best

    def scan(self, pod: GatedPod) -> str | None:
        """The tightest fit by looking at every node (any pod; the index's reference)."""
        best: tuple[int, str] | None = None
        for name, free in self.free.items():
            node = self.nodes[name]
            if not pod.fits(NodeRoom(name, free, node.labels, node.taints)):
                continue
            left = sum(free.get(r, 0) - n for r, n in pod.requests.items())
            if best is None or (left, name) < best:
                best = (left, name)
        return None if best is None else best[1]

    def _indexed(self, resource: str, count: int) -> str | None:
        by_amount = self._index.get(resource, {})
        for amount in sorted(a for a in by_amount if a >= count):
            heap = by_amount[amount]
            while heap and self.free[heap[0]].get(resource, 0) != amount:
                heapq.heappop(heap)  # a placement since moved this node to a smaller amount
            if heap:
                return heap[0]
        return None

    def _take(self, name: str, requests: Mapping[str, int]) -> None:
        untainted = not self.nodes[name].taints
        for resource, count in requests.items():
            left = self.free[name].get(resource, 0) - count
            self.free[name][resource] = left
            if untainted and left > 0:
                heapq.heappush(self._index.setdefault(resource, {}).setdefault(left, []), name)


def envelope_hold(tree: TreeEnvelope | None, live: int, now: datetime) -> str:
    """Why the tree may not have one more pod released ("" when it may). No envelope in the ledger:
    no limit here (the budget webhook, where it runs, refuses a root without one at creation)."""
    if tree is None:
        return ""
    env, root = tree.envelope, tree.root_id
    if tree.state != "open":
        return f"over-envelope: root {root} is {tree.state}"
    if env.deadline is not None and now >= env.deadline:
        return f"over-envelope: root {root} deadline {env.deadline.isoformat()} passed"
    if tree.committed_gpu_hours > env.gpu_hours:
        return f"over-envelope: root {root} gpu_hours {fmt(tree.committed_gpu_hours)} > {fmt(env.gpu_hours)}"
    if tree.committed_cost_usd > env.cost_usd:
        return f"over-envelope: root {root} cost_usd {fmt(tree.committed_cost_usd)} > {fmt(env.cost_usd)}"
    if live + 1 > env.max_live_pods:
        return f"over-envelope: root {root} has {live} released pods, envelope live_pods={env.max_live_pods}"
    return ""


def plan_release(
    gated: Iterable[GatedPod],
    released: Iterable[GatedPod],
    nodes: Sequence[NodeRoom],
    envelope_of: EnvelopeOf,
    now: datetime,
    *,
    max_release: int | None = None,
) -> ReleasePlan:
    """What to release now. ``nodes``: each node's free room after the pods bound to it; ``released``:
    pods whose gate is gone and are not finished: those still unbound are placed first (they are
    about to take room), and all of them count against their tree's ``max_live_pods``.
    ``max_release`` caps one plan (the scheduler takes a batch, the next plan sees where it went)."""
    rooms = Rooms(nodes)
    live: dict[str, int] = {}
    plan = ReleasePlan()
    for pod in sorted(released, key=lambda p: (p.created, p.key)):
        live[pod.root_id] = live.get(pod.root_id, 0) + 1
        if pod.requests:  # in flight: about to take room
            plan.in_flight[pod.key] = rooms.place(pod)
    todo = list(gated)
    gated_ids = {p.agent_id for p in todo}
    trees: dict[str, list[GatedPod]] = {}
    for pod in todo:
        trees.setdefault(pod.root_id, []).append(pod)

    def tree_order(root: str) -> tuple[int, datetime, str]:
        pods = trees[root]
        return min(tier_rank(p.tier) for p in pods), min(p.created for p in pods), root

    envelopes: dict[str, TreeEnvelope | None] = {}
    for root in sorted(trees, key=tree_order):
        if root not in envelopes:
            envelopes[root] = envelope_of(root)
        tree = envelopes[root]
        # Parent before child (creation times are whole seconds: a parent and its child often tie).
        for pod in sorted(trees[root], key=lambda p: (p.depth, p.created, p.key)):
            why = envelope_hold(tree, live.get(root, 0), now)
            if why:
                plan.held.append(Hold(pod, why, annotate=True))
                continue
            if pod.parent_id is not None and pod.parent_id in gated_ids:
                plan.held.append(Hold(pod, f"waiting: parent {pod.parent_id} is still gated", annotate=False))
                continue
            if max_release is not None and len(plan.release) >= max_release:
                plan.held.append(Hold(pod, f"waiting: this pass released its {max_release}", annotate=False))
                continue
            node = rooms.place(pod) if pod.requests else ""
            if node is None:
                asks = ", ".join(f"{n} {r}" for r, n in sorted(pod.requests.items()))
                plan.held.append(Hold(pod, f"waiting: no node has {asks} free", annotate=False))
                continue
            plan.release.append(pod)
            plan.placed[pod.key] = node
            gated_ids.discard(pod.agent_id)
            live[root] = live.get(root, 0) + 1
    return plan
