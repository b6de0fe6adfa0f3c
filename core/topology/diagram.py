"""The topology as a picture, laid out as data: boxes, edges, block regions and finding marks.

Pure (no plotting import): ``layout(model)`` decides what is drawn where, in abstract units; a
renderer (``services/diagrams.py``) only paints it. Keeping the decisions here makes them
testable without pixels, and the same layout feeds the Dagster UI's PNG and ``topology show --svg``.

Readable at any size, because nobody reads 4,736 boxes: a tier with more switches than fit a row
(``MAX_PER_ROW``) is drawn one box per domain (leaves per block, spines per spine group; core
switches in equal runs), still more are drawn in equal runs of those; hosts are never drawn one
by one, only counted under the leaves they hang off. Each finding is anchored on exactly one box
(the first switch it names, else the leaf of the first HCA or host it names), so the marks add up
to the model's findings; a finding that names nothing drawn is counted as fabric-wide.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.hostlist import compress
from core.models import Finding, Severity, Tier
from core.topology.fabric import natural_key
from core.topology.model import SEVERITY_RANK, TopologyModel

MAX_PER_ROW = 32  # boxes in one tier row before the tier is aggregated
MAX_GROUPS = 16  # aggregated boxes in one row: groups of groups past this
BOX_W, BOX_H, GAP = 1.0, 0.7, 0.3
PITCH = BOX_W + GAP
ROOMY = 1.5  # wider boxes when no row has more than MAX_GROUPS
ROW_STEP = 1.6  # vertical distance between tier rows
HOSTS_STEP = 1.15  # from a leaf row down to its hosts (finding marks go in between)
HOSTS_H = 0.4
LABEL_CHARS = 24  # longer compressed names are replaced by first .. last
MARK_KINDS_SHOWN = 2  # finding kinds spelled out under a box; the rest is "+N"

TIER_ORDER: tuple[str, ...] = ("core", "spine", "leaf", "unclassified")
TIER_FILL: Mapping[str, str] = {
    "core": "#8e6bbf", "spine": "#4a90d9", "leaf": "#5cb85c", "unclassified": "#b0b0b0", "hosts": "#eeeeee",
}  # fmt: skip
SEVERITY_COLOUR: Mapping[str, str] = {"info": "#4c72b0", "warning": "#e69500", "error": "#d62728",
                                      "critical": "#7f0000"}  # fmt: skip
STROKE = "#333333"
EDGE_COLOUR = "#9aa5b1"
REGION_FILL = "#f4f7fb"
PLURAL: Mapping[str, str] = {"core": "cores", "spine": "spines", "leaf": "leaves", "unclassified": "switches"}
FABRIC_TITLE: Mapping[str, str] = {"ib": "InfiniBand", "eth": "Ethernet"}


@dataclass(frozen=True)
class Box:
    """One drawn node: a switch, a run of switches, or the hosts under them."""

    id: str
    kind: str  # switch | switches | hosts | note
    tier: str  # core | spine | leaf | unclassified | hosts | note
    fabric: str
    x: float  # centre
    y: float  # centre
    w: float
    h: float
    label: str
    detail: str
    fill: str
    members: tuple[str, ...] = ()  # switch ids it stands for
    findings: Mapping[str, int] = field(default_factory=dict)  # kind -> findings anchored here
    severity: str | None = None  # the worst of those findings

    @property
    def stroke(self) -> str:
        return SEVERITY_COLOUR[self.severity] if self.severity else STROKE

    @property
    def mark(self) -> str:
        """The text under a box with findings: the most frequent kinds, then how many more."""
        ranked = sorted(self.findings.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = [f"{k} x{n}" if n > 1 else k for k, n in ranked[:MARK_KINDS_SHOWN]]
        rest = sum(n for _, n in ranked[MARK_KINDS_SHOWN:])
        return "\n".join(shown + ([f"+{rest} more"] if rest else []))


@dataclass(frozen=True)
class Edge:
    a: str
    b: str
    links: int
    x1: float
    y1: float
    x2: float
    y2: float
    width: float  # points: grows with the log of the links it stands for


@dataclass(frozen=True)
class Region:
    """The background of one block (rail group / scalable unit) behind its leaves and hosts."""

    id: str
    label: str
    x0: float
    y0: float
    x1: float
    y1: float


@dataclass(frozen=True)
class Diagram:
    title: str
    width: float
    height: float  # y grows downwards, 0 at the top
    boxes: tuple[Box, ...]
    edges: tuple[Edge, ...]
    regions: tuple[Region, ...]
    sections: tuple[tuple[str, float], ...]  # (fabric title, y of its top)
    findings_by_kind: Mapping[str, int]  # every finding of the model, by kind
    severity_by_kind: Mapping[str, str]  # the worst severity seen per kind
    fabric_wide: Mapping[str, int]  # findings that name nothing drawn, by kind
    unresolved: int  # observations (e.g. unknown LLDP neighbours) that matched no device
    legend: tuple[tuple[str, str], ...]  # (label, colour)

    def marked(self) -> Counter[str]:
        """Findings by kind as drawn: anchored on boxes plus fabric-wide; equals findings_by_kind."""
        out: Counter[str] = Counter(self.fabric_wide)
        for b in self.boxes:
            out.update(b.findings)
        return out


def _tier(t: Tier | None) -> str:
    return t.value if t is not None else "unclassified"


def _chunks(items: Sequence[Any], parts: int) -> list[Sequence[Any]]:
    size = math.ceil(len(items) / parts)
    return [items[i : i + size] for i in range(0, len(items), size)]


def _groups(ids: list[str], domain_of: Mapping[str, str], domain_name: Mapping[str, str],
            names: Mapping[str, str], noun: str) -> list[tuple[str, tuple[str, ...]]]:  # fmt: skip
    """(label, members) per drawn box of one tier: one switch each when they fit a row, else one
    box per domain (switches in no domain as one more), else equal runs of domains; a tier
    without domains (or with one) in equal runs of switches."""
    ordered = sorted(ids, key=lambda s: natural_key(names[s]))
    if len(ordered) <= MAX_PER_ROW:
        return [(names[s], (s,)) for s in ordered]
    by_domain: dict[str, list[str]] = defaultdict(list)
    for s in ordered:
        by_domain[domain_of.get(s, "")].append(s)
    if len(by_domain) == 1:
        return [(_run_label([names[s] for s in run]), tuple(run)) for run in _chunks(ordered, MAX_GROUPS)]
    keyed = sorted(by_domain.items(), key=lambda kv: natural_key(domain_name.get(kv[0], f"~no {noun}")))
    groups = [(domain_name.get(d, f"no {noun}"), tuple(m)) for d, m in keyed]
    if len(groups) <= MAX_PER_ROW:
        return groups
    return [(f"{len(run)} {noun}s", tuple(s for _, m in run for s in m)) for run in _chunks(groups, MAX_GROUPS)]


def _run_label(run_names: list[str]) -> str:
    """``core-[001-008]`` when the names compress, else the first and last name."""
    short = compress(run_names, sort=True)
    return short if len(short) <= LABEL_CHARS else f"{run_names[0]} .. {run_names[-1]}"


class _Index:
    """Who hangs off which switch, and where each finding is anchored."""

    def __init__(self, model: TopologyModel) -> None:
        self.switches = {s.id: s for s in model.switches}
        self.host_of: dict[str, str] = {}  # HCA guid or host name -> host name
        self.hca_leaf: dict[str, str] = {}  # HCA guid -> the switch it is cabled to
        self.leaves_of: dict[str, set[str]] = defaultdict(set)  # host name -> switches it is cabled to
        for h in model.hosts:
            self.host_of[h.name] = h.name
            for c in h.hcas:
                self.host_of[c.guid] = h.name
                if c.leaf is not None and c.leaf in self.switches:
                    self.leaves_of[h.name].add(c.leaf)
                    self.hca_leaf[c.guid] = c.leaf
        for lk in model.links:
            for sw, other in ((lk.a.device_id, lk.b.device_id), (lk.b.device_id, lk.a.device_id)):
                if sw in self.switches and other in self.host_of:
                    self.leaves_of[self.host_of[other]].add(sw)
        self.role = {h.name: h.role for h in model.hosts}

    def anchor(self, f: Finding) -> str | None:
        """The switch a finding is drawn on: the first switch it names, else the leaf of the first
        HCA it names, else a leaf of the first host; None when it names nothing on a fabric."""
        named = [*f.devices, *(p.device_id for p in f.ports)]
        if isinstance(f.evidence.get("leaf"), str):
            named.append(f.evidence["leaf"])
        for d in named:
            if d in self.switches:
                return d
        for d in named:
            if d in self.hca_leaf:
                return self.hca_leaf[d]
            leaves = self.leaves_of.get(self.host_of.get(d, ""), ())
            if leaves:
                return min(leaves, key=lambda s: natural_key(self.switches[s].name))
        return None


def layout(model: TopologyModel, title: str = "fabric topology") -> Diagram:
    """Place every switch (alone or aggregated), the hosts under the leaves, and the findings."""
    idx = _Index(model)
    names = {s.id: s.name for s in model.switches}
    domain_name = {d.id: d.name for d in model.domains}
    domain_of: dict[str, str] = {}
    for d in model.domains:
        if d.level in ("block", "spine_group"):
            for m in d.members:
                domain_of.setdefault(m, d.id)
    anchored: dict[str, list[Finding]] = defaultdict(list)
    fabric_wide: Counter[str] = Counter()
    for f in model.findings:
        at = idx.anchor(f)
        if at is None:
            fabric_wide[f.kind] += 1
        else:
            anchored[at].append(f)

    # first the rows (what is drawn), then the places (every row centred on the widest)
    rows: list[tuple[str, str, list[tuple[str, tuple[str, ...]]]]] = []  # (fabric, tier, groups)
    for fabric in sorted({s.fabric for s in model.switches}, key=lambda f: (f != "ib", f)):
        by_tier: dict[str, list[str]] = defaultdict(list)
        for s in model.switches:
            if s.fabric == fabric:
                by_tier[_tier(s.tier)].append(s.id)
        for tier in TIER_ORDER:
            if by_tier.get(tier):
                noun = {"leaf": "block", "spine": "spine group"}.get(tier, "group")
                per = domain_of if tier in ("leaf", "spine") else {}
                rows.append((fabric, tier, _groups(by_tier[tier], per, domain_name, names, noun)))
    widest = max([6, *(len(g) for _, _, g in rows)])
    pitch = PITCH if widest > MAX_GROUPS else PITCH * ROOMY  # few boxes a row: room for longer names
    box_w = pitch - GAP
    width = widest * pitch

    boxes: list[Box] = []
    regions: list[Region] = []
    sections: list[tuple[str, float]] = []
    box_of: dict[str, str] = {}  # switch id -> box id
    y = 0.3
    for fabric, tier, groups in rows:
        if not sections or sections[-1][0] != FABRIC_TITLE.get(fabric, fabric):
            sections.append((FABRIC_TITLE.get(fabric, fabric), y))
            y += 0.9
        x0 = (width - len(groups) * pitch) / 2
        for i, (label, members) in enumerate(groups):
            bid = f"{fabric}:{tier}:{i}"
            fs = [f for m in members for f in anchored.get(m, ())]
            worst = max((f.severity for f in fs), key=lambda s: SEVERITY_RANK[s], default=None)
            single = len(members) == 1
            rail = idx.switches[members[0]].rail if single else None
            boxes.append(Box(
                id=bid, kind="switch" if single else "switches", tier=tier, fabric=fabric,
                x=x0 + (i + 0.5) * pitch, y=y, w=box_w, h=BOX_H, label=label,
                detail=(rail or "") if single else f"{len(members)} {PLURAL[tier]}",
                fill=TIER_FILL[tier], members=members, findings=dict(Counter(f.kind for f in fs)),
                severity=worst.value if worst else None,
            ))  # fmt: skip
            for m in members:
                box_of[m] = bid
        if tier == "leaf":
            host_y = y + HOSTS_STEP
            boxes.extend(_host_boxes(fabric, groups, idx, x0, pitch, host_y))
            regions.extend(_regions(fabric, groups, domain_of, domain_name, x0, pitch, y, host_y))
            y = host_y + HOSTS_H / 2 + 0.9 - ROW_STEP  # the next section starts below the block labels
        y += ROW_STEP
    edges = _edges(model, box_of, {b.id: b for b in boxes})
    worst_of: dict[str, Severity] = {}
    for f in model.findings:
        if f.kind not in worst_of or SEVERITY_RANK[f.severity] > SEVERITY_RANK[worst_of[f.kind]]:
            worst_of[f.kind] = f.severity
    unresolved = model.inputs.get("unresolved", 0)
    legend = tuple((t, TIER_FILL[t]) for t in (*TIER_ORDER, "hosts") if any(b.tier == t for b in boxes))
    legend += tuple((s, SEVERITY_COLOUR[s]) for s in SEVERITY_COLOUR if s in {v.value for v in worst_of.values()})
    return Diagram(
        title=title, width=width, height=max(y - ROW_STEP + BOX_H + 0.4, 2.0), boxes=tuple(boxes),
        edges=tuple(edges), regions=tuple(regions),
        sections=tuple(sections), findings_by_kind=dict(Counter(f.kind for f in model.findings)),
        severity_by_kind={k: v.value for k, v in worst_of.items()}, fabric_wide=dict(fabric_wide),
        unresolved=len(unresolved) if isinstance(unresolved, Sequence) else int(unresolved or 0), legend=legend,
    )  # fmt: skip


def _host_boxes(fabric: str, groups: list[tuple[str, tuple[str, ...]]], idx: _Index, x0: float, pitch: float,
                y: float) -> list[Box]:  # fmt: skip
    """One box under each leaf box: the hosts cabled to its switches (compute; others by role)."""
    below: dict[str, set[str]] = defaultdict(set)
    for host, leaves in idx.leaves_of.items():
        for leaf in leaves:
            below[leaf].add(host)
    out = []
    for i, (_, members) in enumerate(groups):
        hosts: set[str] = set().union(*(below.get(m, set()) for m in members))
        compute = sum(1 for h in hosts if idx.role.get(h) == "compute")
        others = len(hosts) - compute  # UFM, SHARP, storage...: counted, their roles are in the model
        out.append(Box(
            id=f"{fabric}:hosts:{i}", kind="hosts", tier="hosts", fabric=fabric, x=x0 + (i + 0.5) * pitch, y=y,
            w=pitch - GAP, h=HOSTS_H, label=f"{compute} hosts", fill=TIER_FILL["hosts"], members=members,
            detail=f"+{others} other" if others else "",
        ))  # fmt: skip
    return out


def _regions(fabric: str, groups: list[tuple[str, tuple[str, ...]]], domain_of: Mapping[str, str],
             domain_name: Mapping[str, str], x0: float, pitch: float, leaf_y: float,
             host_y: float) -> list[Region]:  # fmt: skip
    """Block backgrounds behind runs of single leaves (an aggregated box already is one block)."""
    cols: dict[str, list[int]] = defaultdict(list)
    for i, (_, members) in enumerate(groups):
        if len(members) == 1 and members[0] in domain_of:
            cols[domain_of[members[0]]].append(i)
    return [
        Region(id=f"{fabric}:{block}", label=domain_name.get(block, block),
               x0=x0 + min(c) * pitch + GAP / 4, x1=x0 + (max(c) + 1) * pitch - GAP / 4,
               y0=leaf_y - BOX_H / 2 - 0.15, y1=host_y + HOSTS_H / 2 + 0.45)
        for block, c in sorted(cols.items(), key=lambda kv: kv[1][0])
    ]  # fmt: skip


def _edges(model: TopologyModel, box_of: Mapping[str, str], boxes: Mapping[str, Box]) -> list[Edge]:
    """Switch-to-switch links, one edge per pair of drawn boxes."""
    count: Counter[tuple[str, str]] = Counter()
    for lk in model.links:
        a, b = box_of.get(lk.a.device_id), box_of.get(lk.b.device_id)
        if a is None or b is None or a == b:
            continue
        count[(a, b) if boxes[a].y > boxes[b].y or (boxes[a].y == boxes[b].y and a < b) else (b, a)] += 1
    out = []
    for (lo, hi), n in sorted(count.items()):
        p, q = boxes[lo], boxes[hi]
        out.append(Edge(a=lo, b=hi, links=n, x1=p.x, y1=p.y - p.h / 2, x2=q.x, y2=q.y + q.h / 2,
                        width=round(min(3.0, 0.4 + 0.5 * math.log2(n)), 3)))  # fmt: skip
    return out


def summary(model: TopologyModel) -> dict[str, int]:
    """The counts a person tracks across versions (Dagster plots each across materializations)."""
    tiers = Counter(_tier(s.tier) for s in model.switches)
    return {
        "switches": len(model.switches),
        **{f"switches_{t}": tiers.get(t, 0) for t in TIER_ORDER},
        "hosts": len(model.hosts),
        "compute_hosts": len(model.compute_hosts()),
        "findings": len(model.findings),
    }
