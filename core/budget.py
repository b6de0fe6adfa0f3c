"""Hierarchical budget policy for agent trees: envelopes, admission, enforcement plans.

Pure: no I/O, ``now`` is always passed in. The ledger (``connectors/warehouse/ledger.py``) holds
the root's row lock while it calls :func:`decide`, so a decision sees every reservation made
before it and none is made concurrently for the same tree.

An *envelope* caps a whole tree (everything sharing one ``<p>/root-id``): GPU-hours, cost, live
pods, depth, fan-out per parent and a deadline. It comes from the root pod's ``<p>/envelope``
annotation (JSON) or, failing that, from config defaults per (client, tier), then per client,
then ``*``. A new pod *reserves* its expected GPU-hours (GPU units, MIG weighted, x expected
hours) and cost (x the tier's rate from config); settlement later replaces the reservation with
measured usage. A node may carry ``<p>/subtree-gpu-hours``: a cap its descendants share, so a
child never reserves more than what its parent (and every ancestor) has left.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from functools import cached_property
from typing import Any

from core.finops.gpu import MIG_POLICY, effective_requests, parse_gpu_requests

DEFAULT_PREFIX = "gpufabric.io"
HARD_MAX_DEPTH = 256  # the orphan reaper's bound too: deeper is bad input, whatever the envelope says
_LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
_Q = Decimal("0.000000001")  # numeric(…, 9): the cost fact's precision


def fmt(value: Decimal) -> str:
    """A number for a message: no exponent, no trailing zeros (``0E-9`` reads as ``0``)."""
    text = format(value.normalize(), "f") if value != 0 else "0"
    return text


def q(value: Decimal) -> Decimal:
    """Round to the ledger's 9 decimals, half away from zero (as core.finops.money)."""
    return value.quantize(_Q, rounding="ROUND_HALF_UP")


@dataclass(frozen=True)
class Envelope:
    gpu_hours: Decimal
    cost_usd: Decimal
    max_live_pods: int
    max_depth: int
    max_fan_out: int
    deadline: datetime | None = None

    def describe(self) -> str:
        deadline = self.deadline.isoformat() if self.deadline else "none"
        return (
            f"envelope gpu_hours={fmt(self.gpu_hours)} cost_usd={fmt(self.cost_usd)} live_pods={self.max_live_pods} "
            f"depth={self.max_depth} fan_out={self.max_fan_out} deadline={deadline}"
        )


class Unlabeled(StrEnum):
    DENY = "deny"
    DEFAULT = "default"  # admitted as a one-pod tree of its own under the namespace default envelope


@dataclass(frozen=True)
class BudgetConfig:
    """Knobs. ``defaults`` keys: ``"client/tier"``, ``"client"`` or ``"*"`` (most specific wins).
    ``rates_usd_per_gpu_hour`` keyed by tier with ``"*"`` fallback: a flat lookup from config,
    not the dated rate cards (admission needs an estimate, settlement brings the real cost)."""

    defaults: Mapping[str, Envelope]
    rates_usd_per_gpu_hour: Mapping[str, Decimal]
    expected_hours: Mapping[str, Decimal] = field(default_factory=dict)  # by agent-type
    default_expected_hours: Decimal = Decimal(1)
    prefix: str = DEFAULT_PREFIX
    governed_namespaces: frozenset[str] | None = None  # None: every namespace
    unlabeled: Unlabeled = Unlabeled.DENY
    alert_only: bool = False

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    @cached_property
    def keys(self) -> Mapping[str, str]:
        """Every label and annotation key admission reads, prefixed once (admission's hot path)."""
        names = ("agent-id", "root-id", "parent-id", "depth", "client", "tier", "agent-type", "expected-hours",
                 "subtree-gpu-hours", "envelope")  # fmt: skip
        return {n: self.key(n) for n in names}

    def governs(self, namespace: str) -> bool:
        return self.governed_namespaces is None or namespace in self.governed_namespaces

    def rate(self, tier: str) -> Decimal | None:
        return self.rates_usd_per_gpu_hour.get(tier, self.rates_usd_per_gpu_hour.get("*"))

    def default_envelope(self, client: str, tier: str) -> Envelope | None:
        for k in (f"{client}/{tier}", client, "*"):
            if k in self.defaults:
                return self.defaults[k]
        return None


@dataclass(frozen=True)
class PodRequest:
    """What admission needs to know of a pod, parsed from its manifest."""

    namespace: str
    name: str
    agent_id: str
    root_id: str
    parent_id: str | None
    depth: int
    client: str
    tier: str
    agent_type: str
    gpu_units: Decimal
    expected_hours: Decimal
    gpu_hours: Decimal  # reservation
    cost_usd: Decimal  # reservation
    envelope: Envelope | None  # only a root resolves one
    envelope_source: str  # 'annotation', 'config' or '' (non-root)
    subtree_cap: Decimal | None
    unlabeled: bool = False

    @property
    def is_root(self) -> bool:
        return self.parent_id is None


@dataclass(frozen=True)
class Denial:
    reason: str


def _decimal(text: Any, what: str) -> Decimal:
    try:
        value = Decimal(str(text))
    except (InvalidOperation, ValueError):
        raise ValueError(f"{what}: {text!r} is not a number") from None
    if not value.is_finite() or value < 0:
        raise ValueError(f"{what}: {text!r} must be a finite number >= 0")
    return value


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{what}: {value!r} is not an integer")
    text = str(value).strip()
    if not re.fullmatch(r"\d{1,9}", text):
        raise ValueError(f"{what}: {value!r} is not a non-negative integer")
    return int(text)


def parse_envelope(text: str, base: Envelope | None) -> Envelope:
    """The ``<p>/envelope`` annotation: JSON with any of gpu_hours, cost_usd, max_live_pods,
    max_depth, max_fan_out, deadline (RFC 3339); missing keys come from ``base``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"envelope annotation is not JSON: {err.msg}") from None
    if not isinstance(data, dict):
        raise ValueError("envelope annotation must be a JSON object")
    known = {"gpu_hours", "cost_usd", "max_live_pods", "max_depth", "max_fan_out", "deadline"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"envelope annotation has unknown keys {unknown}")
    missing = known - set(data) - {"deadline"}
    if missing and base is None:
        raise ValueError(f"envelope annotation lacks {sorted(missing)} and no default applies")
    deadline = base.deadline if base else None
    if "deadline" in data:
        try:
            deadline = datetime.fromisoformat(str(data["deadline"]).replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"envelope deadline {data['deadline']!r} is not RFC 3339") from None
        if deadline.tzinfo is None:
            raise ValueError("envelope deadline needs a time zone")
    env = Envelope(
        gpu_hours=_decimal(data["gpu_hours"], "gpu_hours") if "gpu_hours" in data else base.gpu_hours,  # type: ignore[union-attr]
        cost_usd=_decimal(data["cost_usd"], "cost_usd") if "cost_usd" in data else base.cost_usd,  # type: ignore[union-attr]
        max_live_pods=_int(data["max_live_pods"], "max_live_pods") if "max_live_pods" in data else base.max_live_pods,  # type: ignore[union-attr]
        max_depth=_int(data["max_depth"], "max_depth") if "max_depth" in data else base.max_depth,  # type: ignore[union-attr]
        max_fan_out=_int(data["max_fan_out"], "max_fan_out") if "max_fan_out" in data else base.max_fan_out,  # type: ignore[union-attr]
        deadline=deadline,
    )
    return env


def parse_pod(pod: Any, namespace: str, config: BudgetConfig) -> PodRequest | Denial:
    """Parse a pod manifest (as in an AdmissionReview) into a request, or say why it is bad."""
    if not isinstance(pod, Mapping):
        return Denial("object is not a Pod manifest")
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        return Denial("pod metadata/spec malformed")
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if not isinstance(labels, Mapping) or not isinstance(annotations, Mapping):
        return Denial("pod labels/annotations malformed")
    name = str(meta.get("name") or meta.get("generateName") or "")
    containers = spec.get("containers") or []
    init_containers = spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(init_containers, list):
        return Denial("pod containers malformed")
    if not all(isinstance(c, Mapping) for c in [*containers, *init_containers]):
        return Denial("pod containers malformed")
    gpu = parse_gpu_requests(effective_requests(containers, init_containers))
    if gpu.unknown:
        return Denial(f"pod {namespace}/{name}: cannot price GPU requests {sorted(gpu.unknown)}")
    units = Decimal(gpu.slice_units(MIG_POLICY)) / Decimal(MIG_POLICY.denominator)

    k = config.keys
    ancestry = [k["agent-id"], k["root-id"], k["parent-id"], k["depth"]]
    unlabeled = not any(a in labels for a in ancestry)
    if unlabeled:
        if config.unlabeled is Unlabeled.DENY:
            return Denial(
                f"pod {namespace}/{name} has no ancestry labels ({k['root-id']}) in governed namespace {namespace}"
            )
        # Defaulted: its own one-pod tree, attributed to the namespace.
        labels = {
            k["agent-id"]: name,
            k["root-id"]: name,
            k["depth"]: "0",
            k["client"]: labels.get(k["client"], namespace),
            k["tier"]: labels.get(k["tier"], "standard"),
            k["agent-type"]: labels.get(k["agent-type"], "unlabeled"),
        }
    missing = [a for a in (k["agent-id"], k["root-id"], k["depth"], k["client"], k["tier"]) if not labels.get(a)]
    if missing:
        return Denial(f"pod {namespace}/{name}: missing ancestry labels {missing}")
    values = {a: str(labels.get(a, "")) for a in (*ancestry, k["client"], k["tier"], k["agent-type"])}
    for a, v in values.items():
        if v and not _LABEL_VALUE_RE.fullmatch(v):
            return Denial(f"pod {namespace}/{name}: label {a}={v!r} is not a valid label value")
    agent_id, root_id = values[k["agent-id"]], values[k["root-id"]]
    parent_id = values[k["parent-id"]] or None
    try:
        depth = _int(values[k["depth"]], k["depth"])
    except ValueError as err:
        return Denial(f"pod {namespace}/{name}: {err}")
    if depth > HARD_MAX_DEPTH:
        return Denial(f"pod {namespace}/{name}: depth {depth} over the hard bound {HARD_MAX_DEPTH}")
    is_root = parent_id is None
    if is_root and (depth != 0 or root_id != agent_id):
        return Denial(
            f"pod {namespace}/{name}: no {k['parent-id']} but depth={depth}, root-id={root_id}, agent-id={agent_id}: "
            "a root has depth 0 and is its own root"
        )
    if not is_root and (depth == 0 or root_id == agent_id or parent_id == agent_id):
        return Denial(
            f"pod {namespace}/{name}: inconsistent ancestry (agent {agent_id}, parent {parent_id}, root {root_id}, "
            f"depth {depth}): cycle or self-parent"
        )
    agent_type = values[k["agent-type"]] or "unknown"
    try:
        hours_text = annotations.get(k["expected-hours"])
        hours = (
            _decimal(hours_text, k["expected-hours"])
            if hours_text is not None
            else config.expected_hours.get(agent_type, config.default_expected_hours)
        )
        cap_text = annotations.get(k["subtree-gpu-hours"])
        cap = _decimal(cap_text, k["subtree-gpu-hours"]) if cap_text is not None else None
    except ValueError as err:
        return Denial(f"pod {namespace}/{name}: {err}")
    client, tier = values[k["client"]], values[k["tier"]]
    rate = config.rate(tier)
    if rate is None:
        return Denial(f"pod {namespace}/{name}: no GPU-hour rate configured for tier {tier!r}")
    gpu_hours = q(units * hours)
    envelope: Envelope | None = None
    source = ""
    if is_root:
        base = config.default_envelope(client, tier)
        text = annotations.get(k["envelope"])
        if text is not None:
            try:
                envelope = parse_envelope(str(text), base)
            except ValueError as err:
                return Denial(f"root {root_id}: {err}")
            source = "annotation"
        elif base is not None:
            envelope, source = base, "config"
        else:
            return Denial(
                f"root {root_id}: no envelope (no {k['envelope']} annotation "
                f"and no default for client {client!r} tier {tier!r})"
            )
    return PodRequest(
        namespace=namespace,
        name=name,
        agent_id=agent_id,
        root_id=root_id,
        parent_id=parent_id,
        depth=depth,
        client=client,
        tier=tier,
        agent_type=agent_type,
        gpu_units=units,
        expected_hours=hours,
        gpu_hours=gpu_hours,
        cost_usd=q(gpu_hours * rate),
        envelope=envelope,
        envelope_source=source,
        subtree_cap=cap,
        unlabeled=unlabeled,
    )


@dataclass(frozen=True)
class TreeEnvelope:
    """The ledger's row for a root, as read under its lock."""

    root_id: str
    namespace: str
    client: str
    tier: str
    envelope: Envelope
    reserved_gpu_hours: Decimal  # open reservations
    reserved_cost_usd: Decimal
    spent_gpu_hours: Decimal  # settled
    spent_cost_usd: Decimal
    observed_gpu_hours: Decimal = Decimal(0)  # from agents.tree_usage (late telemetry)
    observed_cost_usd: Decimal = Decimal(0)
    state: str = "open"

    @property
    def committed_gpu_hours(self) -> Decimal:
        return max(self.reserved_gpu_hours + self.spent_gpu_hours, self.observed_gpu_hours)

    @property
    def committed_cost_usd(self) -> Decimal:
        return max(self.reserved_cost_usd + self.spent_cost_usd, self.observed_cost_usd)


@dataclass(frozen=True)
class Node:
    """One agent of a tree in the ledger."""

    agent_id: str
    parent_id: str | None
    depth: int
    live: bool  # reserved and not yet settled
    gpu_hours: Decimal  # reserved if live, settled otherwise
    subtree_cap: Decimal | None = None


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    limit: str = (
        ""  # which limit denied: gpu_hours, cost_usd, live_pods, depth, fan_out, deadline, parent_remainder, ancestry
    )


@dataclass(frozen=True)
class TreeView:
    """What admission needs of a tree's ledger, sized by the request's ancestry rather than by
    the tree (the incident's tree had 847 pods; reading all of them per admission made its cost
    grow with the tree). The ledger reads it in SQL; :func:`view_of` derives it from a full node
    list, and the two are tested to agree."""

    live_pods: int
    agent_exists: bool  # ``req.agent_id`` already has a ledger row
    parent: Node | None
    parent_live_children: int
    tightest_cap: tuple[str, Decimal] | None  # :func:`parent_remainder` of the parent


EMPTY_VIEW = TreeView(0, False, None, 0, None)


def view_of(req: PodRequest, nodes: Sequence[Node]) -> TreeView:
    """The :class:`TreeView` of ``req`` over every node of its tree."""
    parent = next((n for n in nodes if n.agent_id == req.parent_id), None) if req.parent_id else None
    return TreeView(
        live_pods=sum(1 for n in nodes if n.live),
        agent_exists=any(n.agent_id == req.agent_id for n in nodes),
        parent=parent,
        parent_live_children=sum(1 for n in nodes if n.live and parent and n.parent_id == parent.agent_id),
        tightest_cap=parent_remainder(parent.agent_id, nodes) if parent else None,
    )


def _deny(req: PodRequest, tree: TreeEnvelope | None, limit: str, detail: str) -> Decision:
    env = tree.envelope.describe() if tree else "no envelope"
    return Decision(False, f"denied: root {req.root_id} ({req.namespace}), limit {limit}: {detail}; {env}", limit)


def decide(req: PodRequest, tree: TreeEnvelope | None, ledger: TreeView | Sequence[Node], now: datetime) -> Decision:
    """May ``req`` join its tree? ``tree`` and ``ledger`` (its view, or every node) are the
    ledger's state for ``req.root_id``."""
    view = ledger if isinstance(ledger, TreeView) else view_of(req, ledger)
    if req.is_root:
        if tree is not None:
            return _deny(req, tree, "ancestry", f"root {req.root_id} already exists")
        assert req.envelope is not None
        env = req.envelope
        fake = TreeEnvelope(req.root_id, req.namespace, req.client, req.tier, env, *(Decimal(0),) * 4)
        return _check_limits(req, fake, EMPTY_VIEW, now) or Decision(
            True, f"admitted root {req.root_id}: {env.describe()}"
        )
    if tree is None:
        return Decision(
            False, f"denied: root {req.root_id} ({req.namespace}) not found: no envelope for this root", "ancestry"
        )
    if tree.client != req.client:
        return _deny(req, tree, "ancestry", f"pod claims client {req.client!r} but root belongs to {tree.client!r}")
    if tree.namespace != req.namespace:
        return _deny(req, tree, "ancestry", f"root lives in namespace {tree.namespace}, pod in {req.namespace}")
    if view.agent_exists:
        return _deny(req, tree, "ancestry", f"agent id {req.agent_id} already in the tree")
    parent = view.parent
    if parent is None:
        return _deny(req, tree, "ancestry", f"parent {req.parent_id} not found in the tree")
    if req.depth != parent.depth + 1:
        return _deny(req, tree, "ancestry", f"depth {req.depth} but parent {parent.agent_id} has depth {parent.depth}")
    return _check_limits(req, tree, view, now) or Decision(
        True,
        f"admitted into root {req.root_id}: reserves {fmt(req.gpu_hours)} GPU-h / ${fmt(req.cost_usd)}, "
        f"left {fmt(tree.envelope.gpu_hours - tree.committed_gpu_hours - req.gpu_hours)} GPU-h",
    )


def _check_limits(req: PodRequest, tree: TreeEnvelope, view: TreeView, now: datetime) -> Decision | None:
    parent = view.parent
    env = tree.envelope
    if tree.state != "open":
        return _deny(req, tree, "state", f"tree is {tree.state}")
    if env.deadline is not None and now >= env.deadline:
        return _deny(req, tree, "deadline", f"deadline {env.deadline.isoformat()} passed")
    if req.depth > env.max_depth:
        return _deny(req, tree, "depth", f"depth {req.depth} > max {env.max_depth}")
    live = view.live_pods
    if live + 1 > env.max_live_pods:
        return _deny(req, tree, "live_pods", f"{live} live pods, max {env.max_live_pods}")
    if parent is not None:
        fan = view.parent_live_children
        if fan + 1 > env.max_fan_out:
            return _deny(
                req, tree, "fan_out", f"parent {parent.agent_id} has {fan} live children, max {env.max_fan_out}"
            )
    left_h = env.gpu_hours - tree.committed_gpu_hours
    if req.gpu_hours > left_h:
        return _deny(req, tree, "gpu_hours", f"needs {fmt(req.gpu_hours)} GPU-h, {fmt(max(left_h, Decimal(0)))} left")
    left_c = env.cost_usd - tree.committed_cost_usd
    if req.cost_usd > left_c:
        return _deny(req, tree, "cost_usd", f"needs ${fmt(req.cost_usd)}, ${fmt(max(left_c, Decimal(0)))} left")
    if parent is not None:
        remainder = view.tightest_cap
        if remainder is not None and req.gpu_hours > remainder[1]:
            return _deny(
                req,
                tree,
                "parent_remainder",
                f"needs {fmt(req.gpu_hours)} GPU-h, ancestor {remainder[0]} has "
                f"{fmt(max(remainder[1], Decimal(0)))} left of its subtree cap",
            )
    return None


def parent_remainder(parent_id: str, nodes: Sequence[Node]) -> tuple[str, Decimal] | None:
    """The tightest (ancestor, GPU-hours left) over ``parent_id`` and its ancestors with a subtree
    cap; None when no ancestor has one (the root's envelope is then the parent's remainder)."""
    by_id = {n.agent_id: n for n in nodes}
    children: dict[str, list[Node]] = {}
    for n in nodes:
        if n.parent_id:
            children.setdefault(n.parent_id, []).append(n)

    def subtree(agent: str) -> Decimal:
        total, stack, seen = Decimal(0), [agent], set()
        while stack:
            a = stack.pop()
            if a in seen:  # a cycle in stored data: count once, never loop
                continue
            seen.add(a)
            for c in children.get(a, []):
                total += c.gpu_hours
                stack.append(c.agent_id)
        return total

    best: tuple[str, Decimal] | None = None
    cur: str | None = parent_id
    seen: set[str] = set()
    while cur is not None and cur not in seen:
        seen.add(cur)
        node = by_id.get(cur)
        if node is None:
            break
        if node.subtree_cap is not None:
            left = node.subtree_cap - subtree(cur)
            if best is None or left < best[1]:
                best = (cur, left)
        cur = node.parent_id
    return best


# --- enforcement -----------------------------------------------------------------------------


class PodPhase(StrEnum):
    GATED = "gated"  # schedulingGates set: not running, cheap to hold
    PENDING = "pending"
    RUNNING = "running"


class Step(StrEnum):
    GATE = "gate"  # add a scheduling gate to a not-yet-running pod
    DEADLINE = "deadline"  # lower activeDeadlineSeconds of a running leaf
    DELETE = "delete"  # delete a running leaf
    ALERT = "alert"  # alert-only mode: record, do nothing


@dataclass(frozen=True)
class LivePod:
    namespace: str
    name: str
    uid: str
    agent_id: str
    parent_id: str | None
    depth: int
    phase: PodPhase
    created: datetime
    gated: bool = False


@dataclass(frozen=True)
class EnforcementAction:
    step: Step
    pod: LivePod
    reason: str


def over_envelope(tree: TreeEnvelope, live_pods: int, now: datetime) -> list[str]:
    """Which limits the tree's *actual* state crosses (empty: within its envelope)."""
    env, out = tree.envelope, []
    if tree.committed_gpu_hours > env.gpu_hours:
        out.append(f"gpu_hours {fmt(tree.committed_gpu_hours)} > {fmt(env.gpu_hours)}")
    if tree.committed_cost_usd > env.cost_usd:
        out.append(f"cost_usd {fmt(tree.committed_cost_usd)} > {fmt(env.cost_usd)}")
    if live_pods > env.max_live_pods:
        out.append(f"live_pods {live_pods} > {env.max_live_pods}")
    if env.deadline is not None and now >= env.deadline:
        out.append(f"deadline {env.deadline.isoformat()} passed")
    return out


def enforcement_plan(
    tree: TreeEnvelope, pods: Sequence[LivePod], now: datetime, *, alert_only: bool, deadline_s: int = 30
) -> list[EnforcementAction]:
    """How to stop a tree over its envelope. Not-yet-running pods are gated first (nothing lost);
    then running leaves, newest first (least work lost), get a short activeDeadlineSeconds; after
    ``deadline_s`` the next pass deletes leaves that are still there. A pod with live children is
    never touched before its children, so the root goes last, and only when it is the only pod."""
    crossed = over_envelope(tree, sum(1 for p in pods), now)
    if not crossed:
        return []
    why = f"root {tree.root_id} over envelope: {'; '.join(crossed)}"
    if alert_only:
        root = next((p for p in pods if p.parent_id is None), None)
        target = root or (
            pods[0] if pods else LivePod(tree.namespace, tree.root_id, "", tree.root_id, None, 0, PodPhase.RUNNING, now)
        )
        return [EnforcementAction(Step.ALERT, target, why)]
    actions: list[EnforcementAction] = []
    for p in sorted(pods, key=lambda p: (-p.depth, p.created, p.name), reverse=False):
        if p.phase is not PodPhase.RUNNING and not p.gated and p.parent_id is not None:
            actions.append(EnforcementAction(Step.GATE, p, why))
    has_children = {p.parent_id for p in pods if p.parent_id}
    leaves = [
        p for p in pods if p.phase is PodPhase.RUNNING and p.agent_id not in has_children and p.parent_id is not None
    ]
    for p in sorted(leaves, key=lambda p: (p.created, p.name), reverse=True):
        age = (now - p.created).total_seconds()
        step = Step.DELETE if age >= deadline_s else Step.DEADLINE
        actions.append(EnforcementAction(step, p, why))
    if not actions:
        # Only the root (or gated pods) is left: stop the root itself, last.
        for p in pods:
            if p.parent_id is None and p.phase is PodPhase.RUNNING:
                actions.append(EnforcementAction(Step.DEADLINE, p, why))
    return actions


def with_state(tree: TreeEnvelope, state: str) -> TreeEnvelope:
    return replace(tree, state=state)


# --- settlement --------------------------------------------------------------------------------
#
# Settle-on-finish: when an agent's pod has finished, its reservation (an estimate made at
# admission) is replaced by what the pod actually held, from the FinOps cost fact
# (``finops.gpu_cost_hourly``, allocation basis: requested GPU units x time, the same quantity a
# reservation estimates). The cost fact is rebuilt by dbt every few minutes, so right after a pod
# ends the fact may not cover it yet; the policy below waits for it, up to a bound.


@dataclass(frozen=True)
class SettlementPolicy:
    """Bounds on waiting. ``cost_wait_s``: how long after a pod finished settlement waits for the
    cost fact to cover its whole life before it falls back to the snapshots' own measure.
    ``unseen_after_s``: a reservation whose pod no snapshot ever showed is released (settled at
    zero) once its tree's cluster has been listed completely this long after the reservation."""

    cost_wait_s: int = 3600
    unseen_after_s: int = 900


class SettleRule(StrEnum):
    NOT_SEEN_YET = "not_seen_yet"  # wait: no snapshot shows the pod (yet)
    RUNNING = "running"  # wait: the pod has not finished
    COST_PENDING = "cost_pending"  # wait: finished, the cost fact does not cover it yet
    MEASURED = "measured"  # settle: the cost fact covers the pod's whole life
    NO_GPU_TIME = "no_gpu_time"  # settle at 0: never started, or holds no GPU (the fact has no line by design)
    NEVER_SEEN = "never_seen"  # settle at 0 (audited): admitted, but the pod was never created
    ESTIMATED = "estimated"  # settle from snapshots (audited): the cost fact stayed behind past the bound


@dataclass(frozen=True)
class Reservation:
    """A ledger row still ``reserved``."""

    root_id: str
    agent_id: str
    namespace: str
    pod: str
    gpu_units: Decimal
    reserved_gpu_hours: Decimal
    reserved_cost_usd: Decimal
    reserved_at: datetime

    @property
    def rate(self) -> Decimal:
        """USD per GPU-hour admission priced this agent at (0 when it reserved no GPU time)."""
        return self.reserved_cost_usd / self.reserved_gpu_hours if self.reserved_gpu_hours > 0 else Decimal(0)


@dataclass(frozen=True)
class PodLife:
    """What the pod snapshots say of an agent's pod (summed over its pods if it had several)."""

    seen: bool
    finished: bool = False
    finished_at: datetime | None = None  # last container's end, the DELETED event, or last seen if it vanished
    held_seconds: Decimal = Decimal(0)  # start to end; 0 when it never started


@dataclass(frozen=True)
class CostLines:
    """The agent's workload lines in the cost fact, allocation basis."""

    lines: int = 0
    seconds: Decimal = Decimal(0)
    gpu_hours: Decimal = Decimal(0)
    cost_usd: Decimal = Decimal(0)  # priced lines only
    unpriced_gpu_hours: Decimal = Decimal(0)  # lines without a rate card (EffectiveCost NULL)


@dataclass(frozen=True)
class Settlement:
    rule: SettleRule
    reason: str
    gpu_hours: Decimal = Decimal(0)
    cost_usd: Decimal = Decimal(0)

    @property
    def settles(self) -> bool:
        return self.rule not in (SettleRule.NOT_SEEN_YET, SettleRule.RUNNING, SettleRule.COST_PENDING)

    @property
    def audited(self) -> bool:
        """Settlements that are not plain measurement leave an audit row saying why."""
        return self.rule in (SettleRule.NEVER_SEEN, SettleRule.ESTIMATED) or (
            self.rule is SettleRule.MEASURED and "unpriced" in self.reason
        )


_SECONDS_TOLERANCE = Decimal("0.001")  # x_Seconds is numeric(38, 6) per line; a few lines' rounding


def settlement(
    res: Reservation,
    pod: PodLife,
    cost: CostLines,
    now: datetime,
    policy: SettlementPolicy,
    *,
    tree_listed_at: datetime | None,
) -> Settlement:
    """Settle ``res`` now, and at what? ``tree_listed_at``: when the latest complete pod list of
    the cluster(s) where this tree's pods were seen started (the oldest, if several); None when no
    pod of the tree was ever seen. A pod absent from a list begun after it was admitted does not
    exist; without any pod of its tree in the snapshots, the tree's cluster may simply not be
    collected (not in ``sources.kubernetes``), so absence proves nothing and the row waits."""
    who = f"agent {res.agent_id} (pod {res.namespace}/{res.pod})"
    if not pod.seen:
        if tree_listed_at is None:
            return Settlement(
                SettleRule.NOT_SEEN_YET,
                f"{who}: no pod of root {res.root_id} in any snapshot yet (is its cluster in sources.kubernetes?)",
            )
        if tree_listed_at.timestamp() >= res.reserved_at.timestamp() + policy.unseen_after_s:
            return Settlement(
                SettleRule.NEVER_SEEN,
                f"{who}: reserved {fmt(res.reserved_gpu_hours)} GPU-h at {res.reserved_at.isoformat()} but no pod "
                f"snapshot ever showed it, though its tree's cluster was listed completely at "
                f"{tree_listed_at.isoformat()}; admitted but never created: reservation released at 0",
            )
        return Settlement(SettleRule.NOT_SEEN_YET, f"{who}: no pod snapshot yet")
    if not pod.finished or pod.finished_at is None:
        return Settlement(SettleRule.RUNNING, f"{who}: still running")
    if pod.held_seconds <= 0 or res.gpu_units <= 0:
        return Settlement(SettleRule.NO_GPU_TIME, f"{who}: finished without holding a GPU")
    if cost.lines and cost.seconds + _SECONDS_TOLERANCE >= pod.held_seconds:
        priced_rest = q(cost.unpriced_gpu_hours * res.rate)
        reason = f"{who}: {cost.lines} cost lines, {fmt(cost.gpu_hours)} GPU-h"
        if cost.unpriced_gpu_hours > 0:
            reason += (
                f"; {fmt(cost.unpriced_gpu_hours)} GPU-h unpriced in the cost fact (no rate card), "
                f"priced at admission's ${fmt(q(res.rate))}/GPU-h"
            )
        return Settlement(SettleRule.MEASURED, reason, q(cost.gpu_hours), q(cost.cost_usd + priced_rest))
    waited = (now - pod.finished_at).total_seconds()
    covered = f"the cost fact covers {fmt(cost.seconds)} of {fmt(pod.held_seconds)} s" if cost.lines else "no cost line"
    if waited < policy.cost_wait_s:
        return Settlement(SettleRule.COST_PENDING, f"{who}: finished {int(waited)} s ago, {covered}")
    hours = q(res.gpu_units * pod.held_seconds / Decimal(3600))
    return Settlement(
        SettleRule.ESTIMATED,
        f"{who}: finished {int(waited)} s ago and {covered} (waited up to {policy.cost_wait_s} s); settled from "
        f"the pod snapshots: {fmt(res.gpu_units)} GPU x {fmt(pod.held_seconds)} s = {fmt(hours)} GPU-h "
        f"at admission's ${fmt(q(res.rate))}/GPU-h",
        hours,
        q(hours * res.rate),
    )
