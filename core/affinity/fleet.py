"""Every node's affinity at once: what the ``topology/gpu_affinity`` asset derives (pure).

Per node :func:`core.affinity.derive_node` with the fabric's cabling of that host (its HCAs'
rails and leaves from the topology model, and those HCAs as the compute NICs), then
:func:`core.affinity.fleet_findings` over the nodes of each pool. A pool is the nodes whose
matrices have the same shape (GPU and NIC counts, :func:`pool_of`): the grouping needs nothing
but the captures, and a node whose cells or NIC names differ stays in its pool, where it is
the odd one out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from core.affinity.derive import (
    AffinityFinding,
    FleetNode,
    NicCabling,
    NodeAffinity,
    cabling_from_topology,
    derive_node,
    fleet_findings,
)
from core.affinity.matrix import TopoMatrix
from core.topology.model import TopologyModel


def pool_of(matrix: TopoMatrix) -> str:
    """The pool a node's matrix puts it in (a label-safe name): ``8gpu-13nic``."""
    return f"{len(matrix.gpus)}gpu-{len(matrix.nics)}nic"


@dataclass(frozen=True)
class FleetAffinity:
    nodes: tuple[NodeAffinity, ...]  # by host name
    fleet: tuple[AffinityFinding, ...]  # matrix_differs_from_fleet
    pools: Mapping[str, tuple[str, ...]]  # pool -> its hosts
    cabled: frozenset[str]  # hosts whose NICs got rails from the fabric model

    @property
    def findings(self) -> tuple[AffinityFinding, ...]:
        return tuple(f for n in self.nodes for f in n.findings) + self.fleet

    def findings_of(self, host: str) -> tuple[AffinityFinding, ...]:
        return tuple(f for f in self.findings if f.host == host)

    def node(self, host: str) -> NodeAffinity:
        for n in self.nodes:
            if n.host == host:
                return n
        raise KeyError(host)


def host_cabling(model: TopologyModel | None, host: str) -> tuple[dict[str, NicCabling] | None, set[str] | None]:
    """(cabling, compute NICs) of a host from the fabric model: both None when the model does
    not have it as a compute host, and no compute list when an HCA has no name (the matrix's
    own rules then pick the compute NICs, so a nameless HCA is not taken for a storage port)."""
    if model is None:
        return None, None
    try:
        out = model.host(host)
    except KeyError:
        return None, None
    if out.role != "compute":
        return None, None
    cabling = cabling_from_topology(model, host)
    complete = bool(cabling) and len(cabling) == len(out.hcas)
    return cabling, (set(cabling) if complete else None)


def derive_fleet(
    matrices: Mapping[str, TopoMatrix], model: TopologyModel | None = None, *, min_fleet: int = 3
) -> FleetAffinity:
    nodes = []
    cabled = set()
    pools: dict[str, list[str]] = defaultdict(list)
    for host in sorted(matrices):
        matrix = matrices[host]
        cabling, compute = host_cabling(model, host)
        if cabling:
            cabled.add(host)
        nodes.append(derive_node(host, matrix, cabling=cabling, compute_nics=compute))
        pools[pool_of(matrix)].append(host)
    fleet = fleet_findings([FleetNode(h, pool_of(m), m) for h, m in sorted(matrices.items())], min_fleet=min_fleet)
    return FleetAffinity(tuple(nodes), tuple(fleet), {p: tuple(h) for p, h in sorted(pools.items())}, frozenset(cabled))
