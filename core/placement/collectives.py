"""Time of AllReduce, AllGather and ReduceScatter on a placement, with nccl-tests' algbw and busbw.

Alpha-beta per phase: a phase costs its steps' latency plus the bytes each rank moves over the
slowest link it uses. Inside a node that link is the GPU's NVLink; between nodes it is the rate
max-min fair sharing gives the phase's flows (``core.placement.flows``): each rail's NIC, the
leaf uplinks a flow crosses, the spine group's core uplinks, with other jobs' flows as
background. Algorithms (n ranks = N nodes x g GPUs; equations in docs/placement.md):

* ``ring``: NCCL's ring, one channel per rail: a node's inter-node edge on rail r goes through
  NIC r, so the ring's bus bandwidth is min(NVLink, g x the slowest flow).
* ``tree``: AllReduce as NCCL's double binary tree over nodes (a chain inside the node),
  pipelined in chunks; AllGather / ReduceScatter as Bruck's log-step exchange between nodes per
  rail (NCCL's PAT) and a ring inside the node.
* ``hierarchical``: NVLink reduce-scatter inside the node, a ring across nodes per rail on 1/g of
  the data, NVLink all-gather (not pipelined: the phases add).
* ``auto``: the faster of what NCCL itself would run (ring or tree for AllReduce, ring for the
  others, PAT with one GPU per node) - the figure to compare with an nccl-tests run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from core.placement.fabric import Fabric, Node
from core.placement.flows import GBYTES, Flow, background_flows, capacities, max_min_fair, per_nic_shares, route


class Collective(StrEnum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"


class Algorithm(StrEnum):
    RING = "ring"
    TREE = "tree"
    HIERARCHICAL = "hierarchical"
    AUTO = "auto"


@dataclass(frozen=True)
class Placement:
    """The nodes a job runs on, in rank order, and the GPUs it uses on each (the first g)."""

    nodes: tuple[str, ...]
    gpus_per_node: int

    @classmethod
    def of(cls, nodes: Sequence[str], gpus_per_node: int) -> Placement:
        return cls(tuple(nodes), gpus_per_node)


@dataclass(frozen=True)
class CollectiveResult:
    op: Collective
    algorithm: Algorithm  # the one priced (auto resolves to ring or tree)
    size_bytes: float
    ranks: int
    nodes: int
    seconds: float
    algbw: float  # GB/s: size / time (nccl-tests)
    busbw: float  # GB/s: algbw x 2(n-1)/n (AllReduce) or (n-1)/n (AllGather, ReduceScatter)
    network_gbytes_per_flow: float | None  # slowest inter-node flow's fair rate; None on one node
    bottleneck: str  # nvlink | nic | up:<leaf> | down:<leaf> | core_up:<group> ... | latency
    leaves: int  # distinct leaves the job's NICs hang off
    spine_groups: int  # distinct spine groups of those leaves


@dataclass(frozen=True)
class StepTime:
    seconds: float
    compute_seconds: float
    communication_seconds: float
    exposed_seconds: float


def bus_factor(op: Collective, ranks: int) -> float:
    """nccl-tests' busbw / algbw (doc/PERFORMANCE.md)."""
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) / ranks if op is Collective.ALL_REDUCE else (ranks - 1) / ranks


@dataclass(frozen=True)
class _Network:
    rate: float  # bytes/s of the slowest flow
    step_s: float  # latency of one network step on the longest path
    bottleneck: str


def _network(fabric: Fabric, nodes: list[Node], pairs: Iterable[tuple[int, int, int]], extra: list[Flow]) -> _Network:
    """Fair rates of the flows (src node index, dst node index, rail) beside the background."""
    flows = per_nic_shares([route(fabric, nodes[a], r, nodes[b], r) for a, b, r in pairs])
    allocation = max_min_fair([*flows, *extra], capacities(fabric))
    rates = allocation.rates[: len(flows)]
    slowest = min(range(len(flows)), key=lambda i: rates[i])
    if rates[slowest] <= 0:
        raise ValueError(f"placement has no path between its nodes: {allocation.bottlenecks[slowest]} has no capacity")
    hops = max(f.switch_hops for f in flows)
    return _Network(rates[slowest], fabric.latency.network_step(hops), allocation.bottlenecks[slowest])


def _ring_pairs(n_nodes: int, gpus: int) -> list[tuple[int, int, int]]:
    return [(k, (k + 1) % n_nodes, r) for r in range(gpus) for k in range(n_nodes)]


def _tree_pairs(n_nodes: int, gpus: int) -> list[tuple[int, int, int]]:
    """Both trees' edges, both directions (reduce up and broadcast down overlap), every rail.
    Tree one is a heap over the rank order; tree two the same over the reversed order, so most
    inner nodes of one are leaves of the other (NCCL's double binary tree has this property)."""
    edges = []
    for order in (list(range(n_nodes)), list(reversed(range(n_nodes)))):
        for i in range(1, n_nodes):
            child, parent = order[i], order[(i - 1) // 2]
            edges += [(child, parent), (parent, child)]
    return [(a, b, r) for r in range(gpus) for a, b in edges]


def _check(op: str, algorithm: str, size_bytes: float, placement: Placement, fabric: Fabric) -> list[Node]:
    try:
        Collective(op)
    except ValueError:
        raise ValueError(f"unknown collective {op!r} (known: {', '.join(c.value for c in Collective)})") from None
    try:
        Algorithm(algorithm)
    except ValueError:
        raise ValueError(f"unknown algorithm {algorithm!r} (known: {', '.join(a.value for a in Algorithm)})") from None
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int | float) or not math.isfinite(size_bytes):
        raise ValueError(f"size_bytes must be a positive finite number of bytes, got {size_bytes!r}")
    if size_bytes <= 0:
        raise ValueError(f"size_bytes must be a positive finite number of bytes, got {size_bytes!r}")
    if not isinstance(placement, Placement):
        raise ValueError(f"placement must be a Placement, got {type(placement).__name__}")
    if not placement.nodes:
        raise ValueError("empty placement: a collective needs at least one node")
    if len(set(placement.nodes)) != len(placement.nodes):
        raise ValueError(f"placement lists a node twice: {sorted(placement.nodes)}")
    nodes = [fabric.node(name) for name in placement.nodes]
    g = placement.gpus_per_node
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise ValueError(f"gpus_per_node must be a positive integer, got {g!r}")
    for node in nodes:
        if g > node.gpus:
            raise ValueError(f"node {node.name} has {node.gpus} GPUs, placement asks for {g}")
        if len(nodes) > 1 and not node.nics:
            raise ValueError(f"node {node.name} has no NIC on the compute fabric")
    return nodes


def collective_time(
    op: Collective | str,
    algorithm: Algorithm | str,
    size_bytes: float,
    placement: Placement,
    fabric: Fabric,
    background: Mapping[str, float] | None = None,
) -> CollectiveResult:
    """Seconds, algbw and busbw of one collective of ``size_bytes`` (nccl-tests' size: the whole
    buffer for AllReduce, the gathered output for AllGather, the input for ReduceScatter).

    ``background`` maps leaf id -> number of other jobs' NIC-rate flows through its uplinks (each
    direction). Raises ValueError on anything it cannot price, saying what.
    """
    nodes = _check(op, algorithm, size_bytes, placement, fabric)
    op, algorithm = Collective(op), Algorithm(algorithm)
    extra = background_flows(fabric, background)
    n_nodes, g = len(nodes), placement.gpus_per_node
    if algorithm is Algorithm.AUTO:
        candidates = [Algorithm.RING]
        if op is Collective.ALL_REDUCE or g == 1:
            candidates.append(Algorithm.TREE)
        timed = [(_time(op, a, float(size_bytes), nodes, g, fabric, extra), a) for a in candidates]
        (seconds, net, bottleneck), algorithm = min(timed, key=lambda t: t[0][0])
    else:
        seconds, net, bottleneck = _time(op, algorithm, float(size_bytes), nodes, g, fabric, extra)
    ranks = n_nodes * g
    algbw = size_bytes / seconds / GBYTES
    leaves = {node.nic_for_gpu(r).leaf for node in nodes for r in range(g)} if n_nodes > 1 else set()
    groups = {fabric.leaf(leaf).spine_group for leaf in leaves}
    return CollectiveResult(
        op=op,
        algorithm=algorithm,
        size_bytes=float(size_bytes),
        ranks=ranks,
        nodes=n_nodes,
        seconds=seconds,
        algbw=algbw,
        busbw=algbw * bus_factor(op, ranks),
        network_gbytes_per_flow=net.rate / GBYTES if net else None,
        bottleneck=bottleneck,
        leaves=len(leaves),
        spine_groups=len(groups),
    )


def _time(
    op: Collective, algorithm: Algorithm, size: float, nodes: list[Node], g: int, fabric: Fabric, extra: list[Flow]
) -> tuple[float, _Network | None, str]:
    lat = fabric.latency
    n_nodes = len(nodes)
    n = n_nodes * g
    nvl = min(node.nvlink_gbytes for node in nodes) * fabric.efficiency.nvlink * GBYTES
    all_reduce = op is Collective.ALL_REDUCE
    if n == 1:
        return lat.launch_s, None, "latency"

    if algorithm is Algorithm.RING:
        steps = 2 * (n - 1) if all_reduce else n - 1
        inter_steps = 2 * (n_nodes - 1) if all_reduce else n_nodes - 1
        net = _network(fabric, nodes, _ring_pairs(n_nodes, g), extra) if n_nodes > 1 else None
        links = [(nvl, "nvlink")] if g > 1 else []
        if net:
            links.append((g * net.rate, net.bottleneck))
        bus_rate, why = min(links)
        latency = lat.launch_s + (steps - inter_steps) * lat.nvlink_step_s + (inter_steps * net.step_s if net else 0)
        return latency + bus_factor(op, n) * size / bus_rate, net, why

    if algorithm is Algorithm.TREE and all_reduce:
        # Per rail channel: 1/g of the data, half on each tree; the chain inside the node moves
        # the whole buffer up and down once. Pipelining in chunks adds the fill/drain term
        # 2*sqrt(latency * bandwidth time) of the optimal chunk count (a pipelined broadcast).
        intra = 2 * size / nvl if g > 1 else 0.0
        net = _network(fabric, nodes, _tree_pairs(n_nodes, g), extra) if n_nodes > 1 else None
        inter = (size / g / 2) / net.rate if net else 0.0
        depth = math.ceil(math.log2(n_nodes)) if n_nodes > 1 else 0
        latency = 2 * ((g - 1) * lat.nvlink_step_s + (depth * net.step_s if net else 0.0))
        bandwidth = max(intra, inter)
        why = (net.bottleneck if net and inter >= intra else "nvlink") if bandwidth > 0 else "latency"
        return lat.launch_s + latency + bandwidth + 2 * math.sqrt(latency * bandwidth), net, why

    intra_s = ((g - 1) * lat.nvlink_step_s + (g - 1) / g * size / nvl) if g > 1 else 0.0
    if algorithm is Algorithm.TREE:  # AllGather / ReduceScatter: Bruck between nodes per rail, ring inside
        total, net, why = lat.launch_s + intra_s, None, "nvlink"
        chunk = size / n
        k = 0
        while (1 << k) < n_nodes:
            dist = 1 << k
            net = _network(
                fabric, nodes, [(i, (i - dist) % n_nodes, r) for r in range(g) for i in range(n_nodes)], extra
            )
            total += net.step_s + min(dist, n_nodes - dist) * chunk / net.rate
            why = net.bottleneck
            k += 1
        return total, net, why

    # hierarchical: NVLink inside, a ring over nodes per rail on 1/g of the data
    net = _network(fabric, nodes, _ring_pairs(n_nodes, g), extra) if n_nodes > 1 else None
    inter_steps = 2 * (n_nodes - 1) if all_reduce else n_nodes - 1
    inter_factor = bus_factor(op, n_nodes)
    inter_s = inter_steps * net.step_s + inter_factor * (size / g) / net.rate if net else 0.0
    phases = 2 if all_reduce else 1
    why = net.bottleneck if net and inter_s >= phases * intra_s else "nvlink"
    return lat.launch_s + phases * intra_s + inter_s, net, why


def step_time(
    compute_seconds: float,
    collectives: Iterable[CollectiveResult | float],
    *,
    overlap: float = 0.0,
) -> StepTime:
    """Step = compute + the communication not hidden behind it.

    ``overlap`` is the share of communication that runs under compute (0: none, as in a
    synchronous gradient all-reduce after backward; ~0.5-0.9 with bucketed DDP / FSDP prefetch);
    never more than the compute time can hide.
    """
    if isinstance(compute_seconds, bool) or not isinstance(compute_seconds, int | float):
        raise ValueError(f"compute_seconds must be a finite number >= 0, got {compute_seconds!r}")
    if not math.isfinite(compute_seconds) or compute_seconds < 0:
        raise ValueError(f"compute_seconds must be a finite number >= 0, got {compute_seconds!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int | float) or not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap must be between 0 and 1, got {overlap!r}")
    comm = 0.0
    for c in collectives:
        seconds = c.seconds if isinstance(c, CollectiveResult) else c
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise ValueError(f"collective time must be a finite number >= 0, got {seconds!r}")
        comm += seconds
    exposed = comm - min(overlap * comm, compute_seconds)
    return StepTime(compute_seconds + exposed, float(compute_seconds), comm, exposed)
