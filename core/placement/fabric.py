"""The fabric as the collective cost model sees it: nodes, their NVLink and rail NICs, leaves and
their working uplinks, spine groups and their core uplinks, and per-hop latencies.

Built from the derived topology (:class:`core.topology.model.TopologyModel`), so whatever the
derivation found is what the model prices: a NIC cabled to another rail's leaf (a miscabled rail)
is on that leaf; a leaf with missing uplinks (``degraded_leaf``) has only the uplinks it kept.
:func:`synthetic_fabric` builds the same shape from a few numbers (tests, the oversubscription
sweep); :func:`with_leaf_uplinks` degrades one leaf of any fabric.

Vendor figures are data (``NVLINK_BIDIR_GBYTES``, ``IB_LINK_GBITS``) with their sources in
``docs/placement.md``. Bandwidths are in GB/s (1e9 bytes/s, as nccl-tests counts); link rates
in Gb/s as vendors quote them.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from core.models import Tier
from core.topology.model import TopologyModel

NVLINK_BIDIR_GBYTES: Mapping[str, float] = {
    # NVLink per GPU, both directions together, as NVIDIA quotes it: 18 NVLink4 links x 50 GB/s
    # (H100/H200 SXM); 18 NVLink5 links x 100 GB/s (B200). One direction is half.
    "H100": 900.0,
    "H200": 900.0,
    "B200": 1800.0,
}
IB_LINK_GBITS: Mapping[str, float] = {"hdr": 200.0, "ndr": 400.0, "xdr": 800.0}


@dataclass(frozen=True)
class LatencyModel:
    """Per-hop and per-collective latencies (seconds), data rather than code.

    ``launch_s`` is the fixed cost of one collective (kernel launch, proxy hand-off); every
    algorithm step then pays ``nvlink_step_s`` inside a node or ``nic_step_s`` plus
    ``switch_hop_s`` per switch crossed between nodes. NCCL's own tuner prices steps the same way
    (``baseLat`` + steps x ``hwLat`` in ``src/graph/tuning.cc``); the values are fitted globally
    against the calibration figures (docs/placement.md), not per figure.
    """

    launch_s: float = 20e-6
    nvlink_step_s: float = 0.8e-6
    nic_step_s: float = 4.5e-6
    switch_hop_s: float = 0.15e-6

    def network_step(self, switch_hops: int) -> float:
        return self.nic_step_s + switch_hops * self.switch_hop_s


@dataclass(frozen=True)
class Efficiency:
    """Share of a link's line rate NCCL moves as payload (protocol overhead), fitted globally.

    ``nvlink`` 0.82: NCCL's rings reach ~370 of NVLink4's 450 GB/s per direction (nccl-tests#212);
    ``network`` 0.88: ~44 of NDR's 50 GB/s per NIC (NVIDIA quotes 46-48, nccl-tests#290; a 4-node
    cloud cluster measures ~41, docs/placement.md).
    """

    nvlink: float = 0.82
    network: float = 0.88


@dataclass(frozen=True)
class Nic:
    rail: int  # the GPU index it serves (rail-optimised: NIC i next to GPU i)
    leaf: str  # the leaf switch id it is cabled to, whatever rail that leaf serves
    gbits: float


@dataclass(frozen=True)
class Node:
    name: str
    gpu_model: str
    gpus: int
    nvlink_gbytes: float  # one direction, per GPU, line rate
    nics: tuple[Nic, ...]

    def nic_for_gpu(self, gpu: int) -> Nic:
        """The NIC GPU ``gpu`` sends through: its own rail's, else (a NIC missing) the next one
        (NCCL's PXN moves the data over NVLink to a GPU that has a NIC)."""
        if not self.nics:
            raise ValueError(f"node {self.name} has no NIC on the compute fabric")
        by_rail = {n.rail: n for n in self.nics}
        if gpu in by_rail:
            return by_rail[gpu]
        return self.nics[gpu % len(self.nics)]


@dataclass(frozen=True)
class Leaf:
    id: str
    name: str
    spine_group: str | None
    uplinks: int  # working uplinks now
    design_uplinks: int
    uplink_gbits: float
    host_ports: int
    host_gbits: float

    @property
    def oversubscription(self) -> float:
        """Host bandwidth over uplink bandwidth (1.0 = non-blocking; inf = no uplink left)."""
        up = self.uplinks * self.uplink_gbits
        return math.inf if up == 0 else self.host_ports * self.host_gbits / up


@dataclass(frozen=True)
class SpineGroup:
    id: str
    core_uplinks: int  # every spine's uplinks to the cores together; 0 in a two-tier fabric
    uplink_gbits: float


@dataclass(frozen=True)
class Fabric:
    nodes: Mapping[str, Node]
    leaves: Mapping[str, Leaf]
    spine_groups: Mapping[str, SpineGroup] = field(default_factory=dict)
    latency: LatencyModel = LatencyModel()
    efficiency: Efficiency = Efficiency()

    def node(self, name: str) -> Node:
        try:
            return self.nodes[name]
        except KeyError:
            raise ValueError(f"unknown node {name!r}: not a compute host of this fabric") from None

    def leaf(self, leaf_id: str) -> Leaf:
        try:
            return self.leaves[leaf_id]
        except KeyError:
            raise ValueError(f"unknown leaf {leaf_id!r}") from None


def gpu_family(gpu_model: str) -> str:
    """``H100-SXM5-80GB`` -> ``H100``: the key of the NVLink table."""
    for family in NVLINK_BIDIR_GBYTES:
        if family.lower() in gpu_model.lower():
            return family
    raise ValueError(f"no NVLink figure for GPU model {gpu_model!r} (known: {', '.join(NVLINK_BIDIR_GBYTES)})")


def _rail_index(rail: str | None, fallback: int) -> int:
    match = re.search(r"(\d+)$", rail or "")
    return int(match.group(1)) if match else fallback


def fabric_from_topology(
    model: TopologyModel,
    gpu_model: str | Mapping[str, str],
    *,
    gpus_per_node: int = 8,
    default_link_gbits: float = IB_LINK_GBITS["ndr"],
    latency: LatencyModel | None = None,
    efficiency: Efficiency | None = None,
) -> Fabric:
    """The cost model's fabric from a derived topology (compute hosts, IB leaves and spines).

    The topology does not carry GPU models, so the caller names one for every host, or one per
    host. Link speeds come from the derived links (``default_link_gbits`` where one is unknown);
    a leaf's design uplink count from its ``degraded_leaf`` finding, else its present count.
    """
    switches = {s.id: s for s in model.switches if s.fabric == "ib"}
    tier = {sid: s.tier for sid, s in switches.items()}
    spine_group_of_spine = {m: d.id for d in model.domains if d.level == "spine_group" for m in d.members}
    design = {
        f.devices[0]: int(f.evidence.get("design", 0))
        for f in model.findings
        if f.kind == "degraded_leaf" and f.devices
    }
    speed_of_end: dict[str, float] = {}
    leaf_up_speeds: dict[str, list[float]] = {}
    spine_up: Counter[str] = Counter()
    spine_up_speeds: dict[str, list[float]] = {}
    for link in model.links:
        if link.kind != "ib":
            continue
        a, b = link.a.device_id, link.b.device_id
        speed = link.speed_gbps or default_link_gbits
        speed_of_end.setdefault(a, speed)
        speed_of_end.setdefault(b, speed)
        for low, high in ((a, b), (b, a)):
            if tier.get(low) is Tier.LEAF and tier.get(high) is Tier.SPINE:
                leaf_up_speeds.setdefault(low, []).append(speed)
            if tier.get(low) is Tier.SPINE and tier.get(high) is Tier.CORE:
                spine_up[low] += 1
                spine_up_speeds.setdefault(low, []).append(speed)

    leaf_spines: dict[str, Counter[str]] = {}
    for link in model.links:
        a, b = link.a.device_id, link.b.device_id
        for low, high in ((a, b), (b, a)):
            if tier.get(low) is Tier.LEAF and high in spine_group_of_spine:
                leaf_spines.setdefault(low, Counter())[spine_group_of_spine[high]] += 1

    nodes: dict[str, Node] = {}
    host_ports: Counter[str] = Counter()
    host_speeds: dict[str, float] = {}
    for host in model.compute_hosts():
        model_name = gpu_model if isinstance(gpu_model, str) else gpu_model.get(host.name)
        if model_name is None:
            raise ValueError(f"no GPU model given for host {host.name}")
        nics = []
        for i, hca in enumerate(sorted(host.hcas, key=lambda c: (c.rail or "", c.hca or "", c.guid))):
            if hca.leaf is None or hca.leaf not in switches:
                continue  # not cabled (host_missing_from_fabric): that rail's GPU borrows another NIC
            gbits = speed_of_end.get(hca.guid, default_link_gbits)
            nics.append(Nic(rail=_rail_index(hca.rail, i), leaf=hca.leaf, gbits=gbits))
            host_ports[hca.leaf] += 1
            host_speeds[hca.leaf] = gbits
        nodes[host.name] = Node(
            name=host.name,
            gpu_model=model_name,
            gpus=gpus_per_node,
            nvlink_gbytes=NVLINK_BIDIR_GBYTES[gpu_family(model_name)] / 2,
            nics=tuple(sorted(nics, key=lambda n: n.rail)),
        )

    leaves: dict[str, Leaf] = {}
    for sid, sw in switches.items():
        if sw.tier is not Tier.LEAF:
            continue
        groups = leaf_spines.get(sid)
        speeds = leaf_up_speeds.get(sid) or [default_link_gbits]
        leaves[sid] = Leaf(
            id=sid,
            name=sw.name,
            spine_group=groups.most_common(1)[0][0] if groups else None,
            uplinks=sw.uplinks,
            design_uplinks=max(design.get(sid, 0), sw.uplinks),
            uplink_gbits=min(speeds),
            host_ports=host_ports[sid],
            host_gbits=host_speeds.get(sid, default_link_gbits),
        )

    spine_groups: dict[str, SpineGroup] = {}
    for spine, group in spine_group_of_spine.items():
        if spine not in switches:
            continue
        previous = spine_groups.get(group)
        speeds = spine_up_speeds.get(spine) or [default_link_gbits]
        spine_groups[group] = SpineGroup(
            id=group,
            core_uplinks=(previous.core_uplinks if previous else 0) + spine_up[spine],
            uplink_gbits=min([*speeds, previous.uplink_gbits] if previous else speeds),
        )
    return Fabric(
        nodes=nodes,
        leaves=leaves,
        spine_groups=spine_groups,
        latency=latency or LatencyModel(),
        efficiency=efficiency or Efficiency(),
    )


def synthetic_fabric(
    *,
    leaf_groups: int,
    nodes_per_group: int,
    gpu_model: str = "H100",
    gpus_per_node: int = 8,
    rails: int = 8,
    rail_optimised: bool = True,
    link_gbits: float = IB_LINK_GBITS["ndr"],
    oversubscription: float = 1.0,
    groups_per_spine_group: int | None = None,
    core_oversubscription: float = 1.0,
    latency: LatencyModel | None = None,
) -> Fabric:
    """A regular fat tree from a few numbers.

    ``leaf_groups`` groups of ``nodes_per_group`` nodes (``g00n000`` ...). Rail-optimised (the
    DGX SuperPOD design): each group has one leaf per rail (``leaf-g00-r0`` ...) and NIC ``r`` of
    every node goes to the group's rail-``r`` leaf; otherwise one top-of-rack leaf per group
    (``leaf-g00``) takes every NIC. Each leaf gets ``host ports / oversubscription`` uplinks.
    ``groups_per_spine_group`` None is a two-tier fabric; otherwise leaves of that many groups
    share a spine group whose core uplinks are its leaves' uplinks over ``core_oversubscription``.
    """
    if leaf_groups < 1 or nodes_per_group < 1 or rails < 1 or gpus_per_node < 1:
        raise ValueError("leaf_groups, nodes_per_group, rails and gpus_per_node must be at least 1")
    if not oversubscription >= 1.0 or not core_oversubscription >= 1.0:
        raise ValueError(f"oversubscription must be a number >= 1, got {oversubscription}, {core_oversubscription}")
    family = gpu_family(gpu_model)
    nodes: dict[str, Node] = {}
    leaves: dict[str, Leaf] = {}
    host_ports = nodes_per_group if rail_optimised else nodes_per_group * rails
    uplinks = max(1, round(host_ports / oversubscription))

    def group_of(g: int) -> str | None:
        return None if groups_per_spine_group is None else f"sg{g // groups_per_spine_group:02d}"

    for g in range(leaf_groups):
        leaf_ids = [f"leaf-g{g:02d}-r{r}" for r in range(rails)] if rail_optimised else [f"leaf-g{g:02d}"]
        for lid in leaf_ids:
            leaves[lid] = Leaf(lid, lid, group_of(g), uplinks, uplinks, link_gbits, host_ports, link_gbits)
        for i in range(nodes_per_group):
            name = f"g{g:02d}n{i:03d}"
            nics = tuple(Nic(r, leaf_ids[r] if rail_optimised else leaf_ids[0], link_gbits) for r in range(rails))
            nodes[name] = Node(name, gpu_model, gpus_per_node, NVLINK_BIDIR_GBYTES[family] / 2, nics)
    spine_groups: dict[str, SpineGroup] = {}
    if groups_per_spine_group is not None:
        for leaf in leaves.values():
            assert leaf.spine_group is not None
            previous = spine_groups.get(leaf.spine_group)
            spine_groups[leaf.spine_group] = SpineGroup(
                leaf.spine_group, (previous.core_uplinks if previous else 0) + leaf.uplinks, link_gbits
            )
        spine_groups = {
            k: replace(v, core_uplinks=max(1, round(v.core_uplinks / core_oversubscription)))
            for k, v in spine_groups.items()
        }
    return Fabric(nodes=nodes, leaves=leaves, spine_groups=spine_groups, latency=latency or LatencyModel())


def with_leaf_uplinks(fabric: Fabric, leaf_id: str, uplinks: int) -> Fabric:
    """The same fabric with one leaf down to ``uplinks`` working uplinks (a degraded leaf)."""
    leaf = fabric.leaf(leaf_id)
    if uplinks < 0:
        raise ValueError(f"uplinks must be >= 0, got {uplinks}")
    leaves = dict(fabric.leaves)
    leaves[leaf_id] = replace(leaf, uplinks=uplinks)
    return replace(fabric, leaves=leaves)
