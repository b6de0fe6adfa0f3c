"""Flows over the fabric and their max-min fair rates.

A flow goes from one node's NIC to another's: through the source NIC's send side, the leaf's
uplinks if the two NICs hang off different leaves, the spine group's core uplinks if the leaves
sit in different spine groups, and down the same way. The fabric is a fluid fat tree: traffic
spreads evenly over a leaf's working uplinks (adaptive routing, no ECMP hash collisions), so a
leaf's uplinks are one resource per direction. Concurrent flows share every resource max-min
fairly (progressive filling: raise every unfrozen flow's rate together until a resource fills or
a flow reaches its NIC rate, freeze those, repeat), the textbook model of TCP-like and IB
credit-based sharing (Bertsekas & Gallager, *Data Networks*, ch. 6.5).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from core.placement.fabric import Fabric, Node

Resource = tuple[str, str]  # (kind, id): nic_tx / nic_rx "node/rail", up / down leaf, core_up / core_down group
GBYTES = 1e9


@dataclass(frozen=True)
class Flow:
    resources: tuple[Resource, ...]
    cap: float  # bytes/s: the slower NIC's payload rate
    switch_hops: int
    count: int = 1  # identical flows counted as one (background load)
    share: float = 1.0  # weight in the fair share: a NIC's flows together count as one NIC


@dataclass(frozen=True)
class Allocation:
    rates: tuple[float, ...]  # bytes/s per flow, same order as the flows
    bottlenecks: tuple[str, ...]  # per flow: the resource that froze it, or "nic" when its cap did


def _bytes_per_s(gbits: float, links: int, efficiency: float) -> float:
    return links * gbits / 8 * GBYTES * efficiency


def capacities(fabric: Fabric) -> dict[Resource, float]:
    eff = fabric.efficiency.network
    out: dict[Resource, float] = {}
    for node in fabric.nodes.values():
        for nic in node.nics:
            rate = _bytes_per_s(nic.gbits, 1, eff)
            out[("nic_tx", f"{node.name}/{nic.rail}")] = rate
            out[("nic_rx", f"{node.name}/{nic.rail}")] = rate
    for leaf in fabric.leaves.values():
        rate = _bytes_per_s(leaf.uplink_gbits, leaf.uplinks, eff)
        out[("up", leaf.id)] = rate
        out[("down", leaf.id)] = rate
    for group in fabric.spine_groups.values():
        if group.core_uplinks:
            rate = _bytes_per_s(group.uplink_gbits, group.core_uplinks, eff)
            out[("core_up", group.id)] = rate
            out[("core_down", group.id)] = rate
    return out


def route(fabric: Fabric, src: Node, src_gpu: int, dst: Node, dst_gpu: int) -> Flow:
    """The flow GPU ``src_gpu`` of ``src`` sends to GPU ``dst_gpu`` of ``dst`` through their NICs."""
    a, b = src.nic_for_gpu(src_gpu), dst.nic_for_gpu(dst_gpu)
    eff = fabric.efficiency.network
    resources: list[Resource] = [("nic_tx", f"{src.name}/{a.rail}"), ("nic_rx", f"{dst.name}/{b.rail}")]
    hops = 1
    if a.leaf != b.leaf:
        la, lb = fabric.leaf(a.leaf), fabric.leaf(b.leaf)
        resources += [("up", la.id), ("down", lb.id)]
        hops = 3
        ga, gb = la.spine_group, lb.spine_group
        if ga is not None and gb is not None and ga != gb and ga in fabric.spine_groups and gb in fabric.spine_groups:
            if fabric.spine_groups[ga].core_uplinks and fabric.spine_groups[gb].core_uplinks:
                resources += [("core_up", ga), ("core_down", gb)]
                hops = 5
    cap = min(_bytes_per_s(a.gbits, 1, eff), _bytes_per_s(b.gbits, 1, eff))
    return Flow(resources=tuple(resources), cap=cap, switch_hops=hops)


def background_flows(fabric: Fabric, background: Mapping[str, float] | None) -> list[Flow]:
    """Other jobs' traffic: ``background[leaf]`` NIC-rate flows leaving and entering that leaf."""
    flows: list[Flow] = []
    for leaf_id, count in sorted((background or {}).items()):
        leaf = fabric.leaf(leaf_id)
        if isinstance(count, bool) or not isinstance(count, int | float) or not math.isfinite(count) or count < 0:
            raise ValueError(f"background flows on leaf {leaf_id!r} must be a finite number >= 0, got {count!r}")
        whole = round(count)
        if whole == 0:
            continue
        cap = _bytes_per_s(leaf.host_gbits, 1, fabric.efficiency.network)
        flows.append(Flow((("up", leaf.id),), cap, 3, count=whole))
        flows.append(Flow((("down", leaf.id),), cap, 3, count=whole))
    return flows


def per_nic_shares(flows: Sequence[Flow]) -> list[Flow]:
    """The same flows, each weighted 1/k where k flows leave its NIC: fairness is between NICs
    (one per GPU rail, as background load is counted), not between an algorithm's connections,
    so a tree that opens four connections per NIC does not outbid a ring that opens one."""
    per_nic = Counter(f.resources[0] for f in flows)
    return [replace(f, share=1.0 / per_nic[f.resources[0]]) for f in flows]


def max_min_fair(flows: Sequence[Flow], capacity: Mapping[Resource, float]) -> Allocation:
    """Weighted max-min fair rates by progressive filling: every unfrozen flow's rate grows in
    proportion to its ``share``. A resource with no capacity (a leaf with no working uplink)
    gives its flows rate 0; the caller decides what that means."""
    rate = [0.0] * len(flows)
    why = ["nic"] * len(flows)
    remaining = {r: capacity[r] for f in flows for r in f.resources}
    active = set()
    for i, f in enumerate(flows):
        dead = [r for r in f.resources if remaining[r] <= 0]
        if dead:
            why[i] = f"{dead[0][0]}:{dead[0][1]}"
        else:
            active.add(i)
    while active:
        load: dict[Resource, float] = {}
        for i in active:
            for r in flows[i].resources:
                load[r] = load.get(r, 0.0) + flows[i].count * flows[i].share
        resource_level = {r: max(remaining[r], 0.0) / w for r, w in load.items()}
        flow_level = {i: max(flows[i].cap - rate[i], 0.0) / flows[i].share for i in active}
        level = min([*resource_level.values(), *flow_level.values()])
        for i in active:
            rate[i] += level * flows[i].share
        for r, w in load.items():
            remaining[r] -= level * w
        # Whatever reached the level is done; at least one resource or flow does every round,
        # so the loop ends after at most flows + resources rounds, whatever the magnitudes.
        near = level * (1 + 1e-9)
        full = {r for r, x in resource_level.items() if x <= near}
        frozen = set()
        for i in active:
            hit = [r for r in flows[i].resources if r in full]
            if hit:
                why[i] = f"{hit[0][0]}:{hit[0][1]}"
                frozen.add(i)
            elif flow_level[i] <= near:
                frozen.add(i)
        active -= frozen
    return Allocation(rates=tuple(rate), bottlenecks=tuple(why))
