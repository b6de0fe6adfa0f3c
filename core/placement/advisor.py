"""gpufabric's placement advisor (pure): among the placements Kueue TAS would accept, the best one.

Issue 22, part 2(c). Kueue's topology-aware scheduling keeps a gang inside one domain of the
level it asks for, and among the domains that fit it takes the *best fit* (the one with the
fewest free pods that still holds the gang, ties by label value; inside it, hosts by name:
``findBestFitDomainBy`` and ``sortedDomains`` in kueue v0.19.2
``pkg/cache/scheduler/tas_flavor_snapshot.go``). It cannot know what the derived topology knows:
that a leaf lost uplinks, that a host's rail is cabled to another rail's leaf (its traffic on that
rail goes up through the spines), how oversubscribed a block's uplinks are. The advisor
enumerates the placements Kueue would accept for the same request on the same free nodes (one
domain of the requested level, whole pods on nodes with room, hosts carrying every level label),
scores each with the cost model (``cost(hosts) -> step seconds``, part 1's model bound to one
job), takes the best, says why, and renders the hint that steers Kueue to it: a ``nodeSelector``
on the chosen domain's label and a required node affinity on the chosen hosts, both of which
Kueue's TAS honours when it picks nodes (``findTopologyAssignment`` filters on both), beside the
same required-topology annotation. The admission policy of ``core.publish.admission`` judges the
result: the chosen hosts alone must hold the gang in one domain.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.publish.admission import REQUIRED
from core.publish.labels import HOSTNAME_LABEL, LabelScheme, domain_values
from core.topology.model import TopologyModel

HINT_ANNOTATION = "gpufabric.io/placement-hint"
LEVEL_ORDER: tuple[str, ...] = ("block", "spine_group", "pod")
"""Fabric levels the advisor places at, finest first (the block is the set of hosts under one
set of rail leaves: "one leaf" in a rail-optimised fabric)."""

StepCost = Callable[[Sequence[str]], float]
"""Step seconds of one job on these hosts (rank order): the cost model bound to the job."""


class NoPlacement(ValueError):
    """No domain of the requested level holds the gang on the free nodes (Kueue would keep it
    pending); the message names the largest domain's room."""


@dataclass(frozen=True)
class FabricView:
    """What the advisor knows of the fabric: each host's label value per level (as published, so
    they match what Kueue sees) and the findings that change a placement's cost."""

    keys: Mapping[str, str]  # level field -> label key
    hosts: Mapping[str, Mapping[str, str]]  # host -> level field -> label value
    miscabled: Mapping[str, str] = field(default_factory=dict)  # host -> why (the finding)
    degraded: Mapping[str, str] = field(default_factory=dict)  # block value -> why
    oversubscription: Mapping[str, float] = field(default_factory=dict)  # block value -> down/up of its worst leaf

    @staticmethod
    def from_model(model: TopologyModel, scheme: LabelScheme | None = None) -> FabricView:
        """From a derived model: label values exactly as ``core.publish`` renders them; hosts
        missing a level are left out (Kueue drops such nodes from a TAS flavor)."""
        scheme = scheme or LabelScheme()
        values = domain_values(model, scheme)
        keys = {f: k for f, k in scheme.level_keys() if f in LEVEL_ORDER}
        hosts: dict[str, dict[str, str]] = {}
        for h in model.compute_hosts():
            row = {f: values[(f, getattr(h, f))].value for f in keys if (f, getattr(h, f)) in values}
            if h.valid and len(row) == len(keys):
                hosts[h.name] = row
        block_of_leaf = {m: values[("block", d.id)].value for d in model.domains if d.level == "block"
                         and ("block", d.id) in values for m in d.members}  # fmt: skip
        miscabled: dict[str, str] = {}
        degraded: dict[str, str] = {}
        for f in model.findings:
            if f.kind == "miscabled_port":
                for c in f.evidence.get("hcas", []):
                    if isinstance(c, Mapping) and c.get("host"):
                        miscabled[str(c["host"])] = f.message
            elif f.kind == "degraded_leaf" and f.devices and f.devices[0] in block_of_leaf:
                block = block_of_leaf[f.devices[0]]
                degraded[block] = "; ".join(filter(None, (degraded.get(block), f.message)))
        over: dict[str, float] = {}
        for s in model.switches:
            if s.id in block_of_leaf and s.uplinks:
                b = block_of_leaf[s.id]
                over[b] = max(over.get(b, 0.0), s.downlinks / s.uplinks)
        return FabricView(keys, hosts, miscabled, degraded, over)

    def labels(self, host: str) -> dict[str, str]:
        """The node labels Kueue sees for this host: every level key plus the hostname."""
        return {**{self.keys[f]: v for f, v in self.hosts[host].items()}, HOSTNAME_LABEL: host}

    def value(self, host: str, level: str) -> str:
        return self.hosts[host][level]


@dataclass(frozen=True)
class Request:
    """A gang: ``pods`` pods of ``gpus_per_pod`` GPUs, required in one domain of ``level``."""

    pods: int
    gpus_per_pod: int = 8
    level: str = "block"

    def check(self, view: FabricView) -> None:
        if self.level not in view.keys:
            raise ValueError(f"level {self.level!r} is not one of {', '.join(view.keys)}")
        if self.pods <= 0 or self.gpus_per_pod <= 0:
            raise ValueError(f"a request needs positive pods and GPUs per pod, got {self.pods} x {self.gpus_per_pod}")


@dataclass(frozen=True)
class Candidate:
    hosts: tuple[str, ...]
    domain: str  # the value of the requested level
    step_s: float
    blocks: tuple[str, ...]
    degraded: tuple[str, ...]  # degraded blocks it touches
    miscabled: tuple[str, ...]  # miscabled hosts it uses
    room: int  # free pods of its domain before placing (best fit: smaller is tighter)

    def rank(self) -> tuple[Any, ...]:
        # Cost first (rounded: floats from different host orders); then what the cost model may
        # not price under today's load: a miscabled rail sends that rail's traffic up through the
        # spines whatever the job, a degraded leaf only hurts traffic that leaves it (so it comes
        # second); fewer blocks; Kueue's own best fit (tightest domain); then names.
        return (round(self.step_s, 9), len(self.miscabled), len(self.degraded), len(self.blocks), self.room,
                self.domain, self.hosts)  # fmt: skip


@dataclass(frozen=True)
class Advice:
    request: Request
    chosen: Candidate
    kueue: Candidate | None  # what Kueue's best fit would take on its own, scored the same way
    considered: int
    reason: str
    node_selector: Mapping[str, str]
    affinity: Mapping[str, Any]
    annotations: Mapping[str, str]

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.chosen.hosts

    def apply_to(self, pod_template: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of a pod template (``metadata``/``spec``) carrying the hint."""
        meta = dict(pod_template.get("metadata") or {})
        meta["annotations"] = {**dict(meta.get("annotations") or {}), **self.annotations}
        spec = dict(pod_template.get("spec") or {})
        spec["nodeSelector"] = {**dict(spec.get("nodeSelector") or {}), **self.node_selector}
        spec["affinity"] = dict(self.affinity)
        return {**dict(pod_template), "metadata": meta, "spec": spec}


def usable(view: FabricView, free: Mapping[str, int], gpus_per_pod: int) -> list[str]:
    """Hosts Kueue could put a pod on: labelled at every level, with room for one pod."""
    return sorted(h for h, g in free.items() if h in view.hosts and g >= gpus_per_pod)


def room_by_domain(view: FabricView, hosts: Iterable[str], level: str) -> dict[str, list[str]]:
    """Domain value -> its usable hosts (sorted), for one level."""
    out: dict[str, list[str]] = defaultdict(list)
    for h in sorted(hosts):
        out[view.value(h, level)].append(h)
    return dict(out)


def finest_fitting_level(view: FabricView, free: Mapping[str, int], pods: int, gpus_per_pod: int = 8) -> str | None:
    """The finest level with a domain that holds the gang now (what a submitter who looked at
    the cluster would ask for); None when no domain of any level does."""
    hosts = usable(view, free, gpus_per_pod)
    for level in LEVEL_ORDER:
        if level in view.keys and any(len(v) >= pods for v in room_by_domain(view, hosts, level).values()):
            return level
    return None


def _healthy_first(view: FabricView, hosts: Sequence[str]) -> list[str]:
    return sorted(hosts, key=lambda h: (h in view.miscabled, h))


OrderKey = Callable[[FabricView, str, str], tuple[Any, ...]]
"""(view, level, domain value) -> penalties of a child domain: children with fewer penalties are
filled first; among equals, the fullest first (Kueue's order)."""


def _kueue(view: FabricView, level: str, value: str) -> tuple[Any, ...]:
    return ()


def _healthy(view: FabricView, level: str, value: str) -> tuple[Any, ...]:
    return (level == "block" and value in view.degraded,)


def _least_oversubscribed(view: FabricView, level: str, value: str) -> tuple[Any, ...]:
    block = level == "block"
    return (block and value in view.degraded, view.oversubscription.get(value, 1.0) if block else 0.0)


ORDERS: tuple[OrderKey, ...] = (_kueue, _healthy, _least_oversubscribed)


def _fill(view: FabricView, hosts: Sequence[str], below: Sequence[str], pods: int, key: OrderKey,
          healthy_hosts: bool = True) -> list[str]:  # fmt: skip
    """``pods`` of ``hosts``, going down the levels ``below`` (coarsest first) the way Kueue's
    TAS does (``tas_flavor_snapshot.go``): children sorted fullest first; whenever one child holds
    what is left, the tightest such child (best fit), else the next in order, whole. ``key``
    puts penalised children last. At the bottom, hosts by name (healthy ones first unless
    ``healthy_hosts`` is off, as for Kueue itself, which knows no findings)."""
    if not below:
        ordered_hosts = _healthy_first(view, hosts) if healthy_hosts else sorted(hosts)
        return ordered_hosts[:pods]
    level, rest = below[0], below[1:]
    left = sorted(
        room_by_domain(view, hosts, level).items(), key=lambda kv: (key(view, level, kv[0]), -len(kv[1]), kv[0])
    )
    out: list[str] = []
    while len(out) < pods and left:
        need = pods - len(out)
        fits = [kv for kv in left if len(kv[1]) >= need]
        pick = min(fits, key=lambda kv: (key(view, level, kv[0]), len(kv[1]), left.index(kv))) if fits else left[0]
        left.remove(pick)
        out.extend(_fill(view, pick[1], rest, min(need, len(pick[1])), key, healthy_hosts))
    return out


def _below(view: FabricView, level: str) -> list[str]:
    """The levels finer than ``level`` that the view has, coarsest first."""
    return [lv for lv in reversed(LEVEL_ORDER[: LEVEL_ORDER.index(level)]) if lv in view.keys]


def kueue_best_fit(view: FabricView, free: Mapping[str, int], request: Request) -> list[str] | None:
    """The hosts Kueue TAS itself takes for a required level (no hint): the best-fit domain
    (fewest free pods that still fit, ties by value), then inside it, level by level, children
    fullest first with the best fit for what is left, hosts by name."""
    request.check(view)
    hosts = usable(view, free, request.gpus_per_pod)
    domains = room_by_domain(view, hosts, request.level)
    fitting = sorted((len(v), k) for k, v in domains.items() if len(v) >= request.pods)
    if not fitting:
        return None
    return _fill(view, domains[fitting[0][1]], _below(view, request.level), request.pods, _kueue, healthy_hosts=False)


def _candidates(view: FabricView, free: Mapping[str, int], request: Request) -> list[list[str]]:
    hosts = usable(view, free, request.gpus_per_pod)
    below = _below(view, request.level)
    out: list[list[str]] = []
    for _, members in sorted(room_by_domain(view, hosts, request.level).items()):
        if len(members) >= request.pods:
            out.extend(_fill(view, members, below, request.pods, key) for key in ORDERS)
    own = kueue_best_fit(view, free, request)
    if own:
        out.append(own)  # Kueue's own choice is always a candidate: the advice is never worse than it
    unique: dict[tuple[str, ...], list[str]] = {}
    for c in out:
        unique.setdefault(tuple(c), c)
    return list(unique.values())


def _score(view: FabricView, free: Mapping[str, int], request: Request, hosts: Sequence[str],
           cost: StepCost) -> Candidate:  # fmt: skip
    domain = view.value(hosts[0], request.level)
    room = sum(1 for h in usable(view, free, request.gpus_per_pod) if view.value(h, request.level) == domain)
    blocks = tuple(sorted({view.value(h, "block") for h in hosts}))
    return Candidate(tuple(hosts), domain, float(cost(hosts)), blocks,
                     tuple(b for b in blocks if b in view.degraded),
                     tuple(sorted(h for h in hosts if h in view.miscabled)), room)  # fmt: skip


def advise(view: FabricView, free: Mapping[str, int], request: Request, cost: StepCost) -> Advice:
    """The best placement Kueue would accept for ``request`` on the ``free`` GPUs per host."""
    request.check(view)
    raw = _candidates(view, free, request)
    if not raw:
        hosts = usable(view, free, request.gpus_per_pod)
        rooms = room_by_domain(view, hosts, request.level)
        best = max(rooms.items(), key=lambda kv: (len(kv[1]), kv[0]), default=None)
        where = f"the largest ({best[0]}) has {len(best[1])}" if best else "none has any"
        raise NoPlacement(f"no {request.level} domain has {request.pods} free nodes for {request.pods} pods x "
                          f"{request.gpus_per_pod} GPUs; {where}")  # fmt: skip
    scored = sorted((_score(view, free, request, c, cost) for c in raw), key=Candidate.rank)
    chosen = scored[0]
    own = kueue_best_fit(view, free, request)
    kueue = _score(view, free, request, own, cost) if own else None
    key = view.keys[request.level]
    annotations = {REQUIRED: key, HINT_ANNOTATION: _short(chosen, request)}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": sorted(chosen.hosts)}]}
                ]
            }
        }
    }
    return Advice(request, chosen, kueue, len(scored), explain(view, request, chosen, kueue, len(scored)),
                  {key: chosen.domain}, affinity, annotations)  # fmt: skip


def _short(c: Candidate, request: Request) -> str:
    where = f"{len(c.hosts)} nodes in {request.level} {c.domain} over {len(c.blocks)} leaf block(s)"
    return f"{where}, predicted step {c.step_s:.3f} s"


def explain(view: FabricView, request: Request, chosen: Candidate, kueue: Candidate | None, considered: int) -> str:
    """One paragraph a user reads: where, why, and what Kueue alone would have done."""
    parts = [f"{len(chosen.hosts)} nodes in {request.level} {chosen.domain}"
             + (f" (leaf block {chosen.blocks[0]})" if len(chosen.blocks) == 1 and request.level != "block"
                else f" over {len(chosen.blocks)} leaf blocks ({', '.join(chosen.blocks)})" if len(chosen.blocks) > 1
                else ""),
             f"predicted step {chosen.step_s:.3f} s, best of {considered} placement(s) Kueue would accept"]  # fmt: skip
    if chosen.degraded:
        parts.append(f"uses degraded leaf block(s) {', '.join(chosen.degraded)} (no healthy alternative scored better)")
    if chosen.miscabled:
        parts.append(f"uses miscabled host(s) {', '.join(chosen.miscabled)} (not enough healthy hosts)")
    if kueue is not None and set(kueue.hosts) != set(chosen.hosts):
        avoided = [f"degraded leaf block {b}: {view.degraded[b]}" for b in kueue.degraded if b not in chosen.degraded]
        hosts_by_finding: dict[str, list[str]] = defaultdict(list)  # a cable swap is one finding for two hosts
        for h in kueue.miscabled:
            if h not in chosen.miscabled:
                hosts_by_finding[view.miscabled[h]].append(h)
        avoided += [f"{', '.join(hs)}: {why}" for why, hs in hosts_by_finding.items()]
        gain = (kueue.step_s / chosen.step_s - 1) * 100 if chosen.step_s > 0 else 0.0
        line = (f"Kueue's best fit alone would take {request.level} {kueue.domain} "
                f"({', '.join(kueue.hosts[:4])}{', ...' if len(kueue.hosts) > 4 else ''}), predicted "
                f"{kueue.step_s:.3f} s ({gain:+.1f}% step time)")  # fmt: skip
        parts.append(line + (f"; avoided {'; '.join(avoided)}" if avoided else ""))
    elif kueue is not None:
        parts.append("the same hosts Kueue's best fit would take")
    return "; ".join(parts)


def gang_accepted(view: FabricView, free: Mapping[str, int], request: Request, hosts: Sequence[str]) -> str | None:
    """Why Kueue TAS would refuse this placement, or None when it would accept it: one pod per
    distinct usable host, all in one domain of the requested level. The capacity side is
    ``core.publish.admission``'s (the chosen hosts alone must hold the gang), checked by the
    tests through ``evaluate``."""
    if len(hosts) != request.pods or len(set(hosts)) != len(hosts):
        return f"{len(hosts)} hosts ({len(set(hosts))} distinct) for {request.pods} pods"
    room = set(usable(view, free, request.gpus_per_pod))
    missing = [h for h in hosts if h not in room]
    if missing:
        return f"no room (or no level labels) on {', '.join(missing)}"
    domains = {view.value(h, request.level) for h in hosts}
    if len(domains) != 1:
        return f"spans {len(domains)} {request.level} domains: {', '.join(sorted(domains))}"
    return None
