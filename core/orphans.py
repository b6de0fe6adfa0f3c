"""Orphan detection for agent trees: which pods a crashed orchestrator left behind, and why.

Agent orchestrators spawn their children through in-cluster API calls, so ownerReferences cannot
tie a tree together (the parent is often a pod in another controller's hands, and a crashed
orchestrator deletes nothing). Liveness therefore rests on three signals an orchestrator sets
through ``connectors.kube.agents``:

* ancestry labels ``<p>/agent-id`` (the pod's own agent id), ``<p>/root-id``, ``<p>/parent-id``,
  ``<p>/depth`` (``<p>`` is the configurable label prefix, default ``gpufabric.io``);
* one ``coordination.k8s.io/v1`` Lease per orchestrator, named :func:`lease_name` of its agent id,
  in its namespace, renewed as a heartbeat. A pod is an orchestrator, and must hold a Lease, when
  ``<p>/agent-type`` is ``orchestrator``; every other agent type is a worker whose liveness is its
  pod (and its TTL);
* an absolute ``<p>/expires-at`` annotation (RFC 3339) on every agent pod.

Everything here is pure: the caller hands in pods, leases, root states and ``now``, and gets back
one :class:`Finding` per managed pod and an ordered deletion plan. :func:`execute_plan` runs a plan
through injected ``verify``/``delete`` callables so the bottom-up and stop-on-failure rules are
tested here, not in each caller. Anything doubtful is ``invalid`` (skipped, audited with the
reason) and so is everything below it: a pod is deleted only when its whole path to the evidence
is well-formed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

ORCHESTRATOR = "orchestrator"
LEASE_PREFIX = "agent-"
TRUE_VALUES = frozenset({"true", "1", "yes"})
MAX_DEPTH = 256  # deeper ancestry is treated as bad input rather than walked (and never recursed into)


class Rule(StrEnum):
    """Why a pod is orphaned; the rule of the orphaned subtree's root, shared by its descendants."""

    PARENT_MISSING = "parent_missing"  # no pod and no Lease for the parent agent id
    PARENT_FINISHED = "parent_finished"  # the parent (a worker) Succeeded or Failed
    LEASE_EXPIRED = "lease_expired"  # the orchestrator's Lease was not renewed for duration + grace
    LEASE_MISSING = "lease_missing"  # an orchestrator older than the start-up grace holds no Lease
    ROOT_FINISHED = "root_finished"
    ROOT_OVER_BUDGET = "root_over_budget"
    TTL_EXPIRED = "ttl_expired"


class Verdict(StrEnum):
    HEALTHY = "healthy"
    ORPHANED = "orphaned"
    INVALID = "invalid"  # ancestry cannot be trusted: never deleted, audited with the reason


class GpuState(StrEnum):
    """Whether the pod holds a GPU now. Every view splits on this (an orphan holding GPUs is urgent)."""

    RUNNING = "running"  # phase Running: holds what it requested
    GATED = "gated"  # spec.schedulingGates non-empty (e.g. Kueue admission): cannot be scheduled
    SUSPENDED = "suspended"  # <p>/suspended label or annotation "true": parked by its orchestrator
    PENDING = "pending"  # phase Pending (or no phase) and not gated: waiting for a node
    FINISHED = "finished"  # Succeeded / Failed


class RootState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    OVER_BUDGET = "over_budget"


class RootStateSource(Protocol):
    """Where "is the root finished or over budget" comes from (the integrator wires agents.tree_usage)."""

    def __call__(self) -> Mapping[str, RootState]: ...


class Action(StrEnum):
    DELETED = "deleted"
    WOULD_DELETE = "would_delete"  # dry run
    SKIPPED = "skipped"  # invalid ancestry, already terminating, or evidence changed on re-check
    DEFERRED = "deferred"  # over the per-pass cap: next pass
    FAILED = "failed"  # the API refused (5xx, conflict): next pass re-evaluates from scratch
    REFUSED = "refused"  # blast-radius guard


@dataclass(frozen=True)
class OrphanPolicy:
    """The knobs of the rule. Defaults suit production; the replay shrinks the times."""

    prefix: str = "gpufabric.io"
    grace_s: float = 30.0  # after a Lease expires, before its subtree counts as orphaned
    startup_grace_s: float = 120.0  # an orchestrator may run this long before its first Lease
    delete_grace_s: int = 30  # gracePeriodSeconds sent with every delete
    max_deletes_per_pass: int = 200
    max_orphan_share: float = 0.9  # refuse a pass that would delete more than this share of agent pods

    def __post_init__(self) -> None:
        if self.grace_s < 0 or self.startup_grace_s < 0 or self.delete_grace_s < 0:
            raise ValueError("grace periods must be >= 0")
        if self.max_deletes_per_pass < 0:
            raise ValueError("max_deletes_per_pass must be >= 0")
        if not 0 < self.max_orphan_share <= 1:
            raise ValueError("max_orphan_share must be in (0, 1]")

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}"


def lease_name(agent_id: str) -> str:
    """The Lease an orchestrator renews: ``agent-<agent id>`` in the orchestrator's namespace.

    Prefixed so agent Leases never collide with leader-election Leases of other controllers.
    """
    return f"{LEASE_PREFIX}{agent_id}"


@dataclass(frozen=True)
class PodInfo:
    """What the rule needs from a pod (connectors build it from the API's JSON)."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=dict)
    phase: str = "Pending"
    scheduling_gates: int = 0
    deleting: bool = False
    created: datetime | None = None
    gpus: int = 0  # nvidia.com/gpu requested (limits, else requests), summed over containers
    resource_version: str = ""


@dataclass(frozen=True)
class LeaseInfo:
    namespace: str
    name: str
    holder: str | None
    renew_time: datetime | None
    duration_s: int | None

    def expires_at(self) -> datetime | None:
        if self.renew_time is None or self.duration_s is None:
            return None
        return self.renew_time + timedelta(seconds=self.duration_s)


@dataclass(frozen=True)
class Finding:
    """The verdict on one managed pod, with the evidence the audit table records."""

    pod: PodInfo
    verdict: Verdict
    state: GpuState
    agent_id: str | None
    root_id: str | None
    parent_id: str | None
    depth: int | None  # from the tree walk (the label must agree)
    rule: Rule | None = None
    orphan_root: str | None = None  # "<namespace>/<agent id>" of the orphaned subtree's root
    eligible_at: datetime | None = None  # when the evidence made the pod deletable
    reason: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def gpus_held(self) -> int:
        return self.pod.gpus if self.state is GpuState.RUNNING else 0


# -- parsing ------------------------------------------------------------------------------------


def parse_time(value: str) -> datetime:
    """RFC 3339 (``Z`` or an offset); naive times are refused rather than guessed."""
    parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone")
    return parsed.astimezone(UTC)


def format_time(value: datetime) -> str:
    """RFC 3339 with microseconds, as Kubernetes MicroTime (``renewTime``) is written."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def gpu_state(pod: PodInfo, policy: OrphanPolicy) -> GpuState:
    if pod.phase in ("Succeeded", "Failed"):
        return GpuState.FINISHED
    suspended = policy.key("suspended")
    if (pod.labels.get(suspended, "").lower() in TRUE_VALUES
            or pod.annotations.get(suspended, "").lower() in TRUE_VALUES):
        return GpuState.SUSPENDED
    if pod.scheduling_gates:
        return GpuState.GATED
    if pod.phase == "Running":
        return GpuState.RUNNING
    return GpuState.PENDING


def is_managed(pod: PodInfo, policy: OrphanPolicy) -> bool:
    """A pod carrying any ancestry label is ours to judge; pods with none are never looked at."""
    return any(policy.key(k) in pod.labels for k in ("agent-id", "root-id", "parent-id", "depth"))


@dataclass
class _Agent:
    pod: PodInfo
    agent_id: str
    root_id: str
    parent_id: str | None
    depth: int
    orchestrator: bool
    expires_at: datetime | None
    problem: str = ""


def _parse(pod: PodInfo, policy: OrphanPolicy) -> _Agent | str:
    """The pod's ancestry, or the reason it cannot be trusted."""
    labels = pod.labels
    agent_id = labels.get(policy.key("agent-id"), "")
    root_id = labels.get(policy.key("root-id"), "")
    parent_id = labels.get(policy.key("parent-id"), "") or None
    depth_text = labels.get(policy.key("depth"), "")
    missing = [k for k, v in (("agent-id", agent_id), ("root-id", root_id), ("depth", depth_text)) if not v]
    if missing:
        return f"partial ancestry labels: missing {', '.join(missing)}"
    if not depth_text.isdigit():
        return f"depth label {depth_text!r} is not a non-negative integer"
    depth = int(depth_text)
    if depth == 0 and (parent_id is not None or root_id != agent_id):
        return "conflicting ancestry: depth 0 needs no parent-id and root-id == agent-id"
    if depth > 0 and parent_id is None:
        return f"partial ancestry labels: depth {depth} without parent-id"
    if depth > 0 and root_id == agent_id:
        return "conflicting ancestry: a non-root agent names itself as root"
    if parent_id == agent_id:
        return "ancestry cycle: the pod is its own parent"
    expires_at = None
    raw_ttl = pod.annotations.get(policy.key("expires-at"))
    if raw_ttl is not None:
        try:
            expires_at = parse_time(raw_ttl)
        except ValueError:
            return f"expires-at annotation {raw_ttl!r} is not an RFC 3339 time"
    orchestrator = labels.get(policy.key("agent-type")) == ORCHESTRATOR
    return _Agent(pod, agent_id, root_id, parent_id, depth, orchestrator, expires_at)


# -- classification -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Status:
    verdict: Verdict
    rule: Rule | None = None
    orphan_root: str | None = None
    eligible_at: datetime | None = None
    reason: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict)
    depth: int | None = None
    root_id: str | None = None


def classify(
    pods: Iterable[PodInfo],
    leases: Iterable[LeaseInfo],
    roots: Mapping[str, RootState],
    now: datetime,
    policy: OrphanPolicy,
) -> list[Finding]:
    """One finding per managed pod (unmanaged pods are left out), in input order.

    Agents are keyed by (namespace, agent id). A parent is looked up in the child's namespace; a
    parent id that exists only in another namespace makes the child ``invalid`` rather than
    "parent missing": agent ids are meant to be cluster-unique and the helper never spawns across
    namespaces, so such a pod was made by something we do not understand, and deleting it on a
    guess is the one mistake the reaper must not make.
    """
    managed = [p for p in pods if is_managed(p, policy)]
    parsed: dict[str, _Agent | str] = {p.uid: _parse(p, policy) for p in managed}
    by_key: dict[tuple[str, str], list[_Agent]] = {}
    namespaces_of: dict[str, set[str]] = {}
    for item in parsed.values():
        if isinstance(item, _Agent):
            by_key.setdefault((item.pod.namespace, item.agent_id), []).append(item)
            namespaces_of.setdefault(item.agent_id, set()).add(item.pod.namespace)
    for key, agents in by_key.items():
        # An orchestrator restarted under the same identity may briefly have two pods; two
        # workers claiming one id is a conflict nobody can resolve from labels.
        if len(agents) > 1 and not all(a.orchestrator for a in agents):
            for a in agents:
                a.problem = f"conflicting ancestry: agent-id {key[1]!r} is claimed by {len(agents)} pods"
    lease_index = {(lease.namespace, lease.name): lease for lease in leases}
    memo: dict[tuple[str, str], _Status] = {}

    def lease_verdict(namespace: str, agent_id: str, created: datetime | None) -> tuple[bool, _Status | None]:
        """(lease exists, orphaned status if the Lease says the orchestrator is dead)."""
        lease = lease_index.get((namespace, lease_name(agent_id)))
        orphan_root = f"{namespace}/{agent_id}"
        expires = lease.expires_at() if lease is not None else None
        if lease is None or expires is None:
            # A Lease without renewTime/duration was never renewed: judged by age like a missing one.
            if created is not None and now >= created + timedelta(seconds=policy.startup_grace_s):
                eligible = created + timedelta(seconds=policy.startup_grace_s)
                return False, _Status(Verdict.ORPHANED, Rule.LEASE_MISSING, orphan_root, eligible,
                                      evidence={"lease": lease_name(agent_id), "pod_created": format_time(created)})
            return lease is not None, None
        evidence = {"lease": lease.name, "holder": lease.holder,
                    "renew_time": format_time(lease.renew_time) if lease.renew_time else None,
                    "lease_duration_s": lease.duration_s, "grace_s": policy.grace_s}
        eligible = expires + timedelta(seconds=policy.grace_s)
        if now >= eligible:
            return True, _Status(Verdict.ORPHANED, Rule.LEASE_EXPIRED, orphan_root, eligible,
                                 evidence={**evidence, "expired_at": format_time(expires)})
        return True, None

    def own_cause(agent: _Agent) -> _Status | None:
        """Evidence that this agent itself is dead (its subtree goes with it)."""
        me = f"{agent.pod.namespace}/{agent.agent_id}"
        state = roots.get(agent.root_id)
        if state is RootState.FINISHED or state is RootState.OVER_BUDGET:
            rule = Rule.ROOT_FINISHED if state is RootState.FINISHED else Rule.ROOT_OVER_BUDGET
            evidence = {"root_id": agent.root_id, "root_state": str(state)}
            return _Status(Verdict.ORPHANED, rule, me, now, evidence=evidence)
        if agent.orchestrator:
            _, dead = lease_verdict(agent.pod.namespace, agent.agent_id, agent.pod.created)
            if dead is not None:
                return dead
        if agent.expires_at is not None and now >= agent.expires_at:
            return _Status(Verdict.ORPHANED, Rule.TTL_EXPIRED, me, agent.expires_at,
                           evidence={"expires_at": format_time(agent.expires_at)})
        return None

    def status_of_agent(key: tuple[str, str], path: tuple[tuple[str, str], ...]) -> _Status:
        """The combined status of every pod claiming ``key`` (healthy if any one is)."""
        if key in path:
            return _Status(Verdict.INVALID, reason=f"ancestry cycle through agent {key[1]!r}")
        if key in memo:
            return memo[key]
        if len(path) > MAX_DEPTH:
            return _Status(Verdict.INVALID, reason=f"ancestry deeper than {MAX_DEPTH}")
        statuses = [status_of_pod(a, (*path, key)) for a in by_key[key]]
        # Safe to memoise whatever the path: the path holds only descendants of ``key``, so if
        # one of them is also its ancestor, ``key`` sits on a cycle and is invalid from anywhere.
        chosen = next((s for s in statuses if s.verdict is Verdict.HEALTHY), None) \
            or next((s for s in statuses if s.verdict is Verdict.ORPHANED), statuses[0])
        memo[key] = chosen
        return chosen

    def status_of_pod(agent: _Agent, path: tuple[tuple[str, str], ...]) -> _Status:
        if agent.problem:
            return _Status(Verdict.INVALID, reason=agent.problem)
        ns = agent.pod.namespace
        if agent.parent_id is None:
            cause = own_cause(agent)
            return _with(cause, depth=0, root_id=agent.root_id) if cause else \
                _Status(Verdict.HEALTHY, depth=0, root_id=agent.root_id)
        parent_key = (ns, agent.parent_id)
        if parent_key not in by_key:
            has_lease, dead = lease_verdict(ns, agent.parent_id, None)
            me = f"{ns}/{agent.agent_id}"
            if dead is not None:  # the orchestrator's pod is gone and its Lease ran out
                return _with(dead, orphan_root=me, depth=agent.depth, root_id=agent.root_id)
            if has_lease:  # pod gone but Lease alive: restarting, or re-adopting under the same id
                parent = _Status(Verdict.HEALTHY, depth=agent.depth - 1, root_id=agent.root_id)
            elif namespaces_of.get(agent.parent_id, set()) - {ns}:
                others = sorted(namespaces_of[agent.parent_id] - {ns})
                return _Status(Verdict.INVALID, reason=f"parent {agent.parent_id!r} is in another namespace "
                                                       f"({', '.join(others)})")
            else:
                created = agent.pod.created
                eligible = (created or now) + timedelta(seconds=policy.grace_s)
                if now < eligible:  # give list/watch lag the same grace as a Lease
                    parent = _Status(Verdict.HEALTHY, depth=agent.depth - 1, root_id=agent.root_id)
                else:
                    return _Status(Verdict.ORPHANED, Rule.PARENT_MISSING, me, eligible, depth=agent.depth,
                                   root_id=agent.root_id, evidence={"parent_id": agent.parent_id})
        else:
            parent = status_of_agent(parent_key, path)
            if parent.verdict is Verdict.INVALID:
                reason = parent.reason if parent.reason.startswith("ancestry cycle") \
                    else f"ancestor {agent.parent_id!r} is invalid: {parent.reason}"
                return _Status(Verdict.INVALID, reason=reason)
            if parent.root_id is not None and parent.root_id != agent.root_id:
                return _Status(Verdict.INVALID, reason=f"conflicting ancestry: root-id {agent.root_id!r} but parent's "
                                                       f"is {parent.root_id!r}")
            if parent.depth is not None and parent.depth + 1 != agent.depth:
                return _Status(Verdict.INVALID, reason=f"conflicting ancestry: depth {agent.depth} but parent's "
                                                       f"is {parent.depth}")
            if parent.verdict is Verdict.ORPHANED:
                return _with(parent, depth=agent.depth, root_id=agent.root_id)
            parent_pods = by_key[parent_key]
            if all(not p.orchestrator and p.pod.phase in ("Succeeded", "Failed") for p in parent_pods):
                phase = parent_pods[0].pod.phase
                return _Status(Verdict.ORPHANED, Rule.PARENT_FINISHED, f"{ns}/{agent.agent_id}", now,
                               depth=agent.depth, root_id=agent.root_id,
                               evidence={"parent_id": agent.parent_id, "parent_phase": phase})
        cause = own_cause(agent)
        if cause is not None:
            return _with(cause, depth=agent.depth, root_id=agent.root_id)
        return _Status(Verdict.HEALTHY, depth=parent.depth + 1 if parent.depth is not None else agent.depth,
                       root_id=agent.root_id)

    findings: list[Finding] = []
    for pod in managed:
        item = parsed[pod.uid]
        state = gpu_state(pod, policy)
        if isinstance(item, str):
            findings.append(Finding(pod, Verdict.INVALID, state, pod.labels.get(policy.key("agent-id")),
                                    pod.labels.get(policy.key("root-id")), pod.labels.get(policy.key("parent-id")),
                                    None, reason=item))
            continue
        status = status_of_pod(item, ((pod.namespace, item.agent_id),))
        findings.append(Finding(
            pod, status.verdict, state, item.agent_id, item.root_id, item.parent_id,
            item.depth, status.rule, status.orphan_root, status.eligible_at, status.reason, status.evidence,
        ))
    return findings


def _with(status: _Status, **changes: Any) -> _Status:
    return _Status(**{**status.__dict__, **changes})


def root_states_from_pods(pods: Iterable[PodInfo], policy: OrphanPolicy) -> dict[str, RootState]:
    """Root states an orchestrator published on its root pod (``<p>/root-state`` annotation).

    The fallback source when the FinOps tables are not wired: a root that finishes says so on its
    own pod. Unknown values are ignored (a typo must not delete a tree).
    """
    out: dict[str, RootState] = {}
    for pod in pods:
        value = pod.annotations.get(policy.key("root-state"), "").strip().lower().replace("-", "_")
        root = pod.labels.get(policy.key("root-id"))
        if root and pod.labels.get(policy.key("depth")) == "0" and value in ("finished", "over_budget"):
            out[root] = RootState(value)
    return out


# -- planning and execution ---------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """One audited decision: a finding and what was done about it."""

    finding: Finding
    action: Action
    reason: str
    decided_at: datetime


@dataclass(frozen=True)
class Plan:
    deletions: list[Finding]  # bottom-up: deepest first, each orphaned subtree's root after its descendants
    deferred: list[Finding]
    skipped: list[tuple[Finding, str]]
    refused: bool = False
    refusal: str = ""


def plan(findings: Sequence[Finding], policy: OrphanPolicy, *, force: bool = False) -> Plan:
    """Order orphaned pods bottom-up and cut at the per-pass cap.

    Deepest first over all subtrees: a child is always deeper than its parent, so however the cap
    cuts, no pod is deleted before its descendants, and the remainder is a smaller set of whole
    subtrees for the next pass. Ties sort by namespace and name so a plan is reproducible.
    """
    skipped = [(f, f.reason) for f in findings if f.verdict is Verdict.INVALID]
    orphans = [f for f in findings if f.verdict is Verdict.ORPHANED]
    skipped += [(f, "already terminating") for f in orphans if f.pod.deleting]
    live = sorted((f for f in orphans if not f.pod.deleting),
                  key=lambda f: (-(f.depth or 0), f.pod.namespace, f.pod.name))
    total = len(findings)
    if live and total and len(live) > policy.max_orphan_share * total and not force:
        why = (f"blast-radius guard: {len(live)} of {total} agent pods orphaned "
               f"(> {policy.max_orphan_share:.0%}); re-run with force after checking the Lease source")
        return Plan([], live, skipped, refused=True, refusal=why)
    cap = policy.max_deletes_per_pass
    return Plan(live[:cap], live[cap:], skipped)


# Re-read the evidence just before deleting: a reason to abort, or None to go ahead.
VerifyFn = Callable[[Finding], str | None]
# Delete the pod (guarded by uid + resourceVersion): an error text, or None on success.
DeleteFn = Callable[[Finding], str | None]


def execute_plan(
    p: Plan,
    *,
    dry_run: bool,
    verify: VerifyFn,
    delete: DeleteFn,
    clock: Callable[[], datetime],
) -> list[Decision]:
    """Run a plan and return every decision, including skips, deferrals and failures.

    Each orphaned subtree's evidence is re-verified once, before its first deletion (a Lease
    renewed since the list means a re-adopted tree: nothing of it is touched). When a deletion
    fails, every ancestor of that pod is held back for this pass so the order stays bottom-up.
    """
    decisions: list[Decision] = [Decision(f, Action.SKIPPED, why, clock()) for f, why in p.skipped]
    if p.refused:
        decisions += [Decision(f, Action.REFUSED, p.refusal, clock()) for f in p.deferred]
        return decisions
    verdicts: dict[str, str | None] = {}
    blocked: set[tuple[str, str]] = set()  # (namespace, agent id) whose subtree had a failure
    by_agent = {(f.pod.namespace, f.agent_id): f for f in p.deletions}
    for f in p.deletions:
        key = (f.pod.namespace, f.agent_id or "")
        root = f.orphan_root or ""
        if root not in verdicts:
            verdicts[root] = verify(f)
        if verdicts[root] is not None:
            decisions.append(Decision(f, Action.SKIPPED, f"evidence changed: {verdicts[root]}", clock()))
            continue
        if key in blocked:
            decisions.append(Decision(f, Action.DEFERRED, "a descendant could not be deleted this pass", clock()))
            continue
        if dry_run:
            decisions.append(Decision(f, Action.WOULD_DELETE, "dry run", clock()))
            continue
        error = delete(f)
        if error is None:
            decisions.append(Decision(f, Action.DELETED, f"gracePeriodSeconds applied; {f.rule}", clock()))
            continue
        decisions.append(Decision(f, Action.FAILED, error, clock()))
        parent, seen = f.parent_id, set()
        while parent is not None and (f.pod.namespace, parent) not in seen:
            seen.add((f.pod.namespace, parent))
            blocked.add((f.pod.namespace, parent))
            above = by_agent.get((f.pod.namespace, parent))
            parent = above.parent_id if above is not None else None
    decisions += [Decision(f, Action.DEFERRED, f"over the per-pass cap of {len(p.deletions)}", clock())
                  for f in p.deferred]
    return decisions


AUDIT_TABLE = "agents.reaper_audit"
AUDIT_COLUMNS = (
    "pass_id", "controller", "decided_at", "namespace", "pod", "pod_uid", "agent_id", "root_id",
    "parent_id", "depth", "state", "gpus", "rule", "orphan_root", "eligible_at", "evidence",
    "action", "reason", "dry_run",
)


def audit_rows(decisions: Iterable[Decision], *, pass_id: str, controller: str,
               dry_run: bool) -> list[tuple[Any, ...]]:
    """Rows for ``agents.reaper_audit`` (COPY order of :data:`AUDIT_COLUMNS`)."""
    rows: list[tuple[Any, ...]] = []
    for d in decisions:
        f = d.finding
        rows.append((
            pass_id, controller, d.decided_at, f.pod.namespace, f.pod.name, f.pod.uid, f.agent_id, f.root_id,
            f.parent_id, f.depth, str(f.state), f.pod.gpus, str(f.rule) if f.rule else None, f.orphan_root,
            f.eligible_at, dict(f.evidence), str(d.action), d.reason or f.reason, dry_run,
        ))
    return rows


def summarize(findings: Iterable[Finding]) -> dict[str, dict[str, int]]:
    """Counts by verdict and GPU state, plus GPUs held: what every view prints."""
    out: dict[str, dict[str, int]] = {}
    for f in findings:
        row = out.setdefault(str(f.verdict), {s.value: 0 for s in GpuState} | {"gpus_held": 0})
        row[f.state.value] += 1
        row["gpus_held"] += f.gpus_held
    return out
