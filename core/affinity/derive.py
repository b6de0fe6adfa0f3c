"""GPU-NIC-NUMA affinity of a node, and what is wrong with it (pure: no I/O).

Per node (:func:`derive_node`): each GPU's best compute NIC(s) -- the closest PCIe class, ties all
kept -- the class of that path, its NUMA node, and the rail of those NICs from the fabric. Findings:

- ``nic_across_socket``: a GPU's best compute NIC is ``SYS`` (its RDMA traffic crosses the CPU
  interconnect; no placement in the fabric wins that back);
- ``nic_via_host_bridge``: a GPU's best compute NIC is ``PHB`` (through the CPU's root complex,
  not a PCIe switch: GPUDirect RDMA is slower or off);
- ``shared_nic``: two or more GPUs have one and the same NIC as their *only* best NIC while another
  compute NIC is nobody's best (the node has a NIC to spare, but the GPUs queue on one);
- ``rail_miscabled``: a GPU's best NIC is cabled to a leaf of another rail (joins the fabric's
  ``miscabled_port`` finding with the GPU it hurts);
- ``matrix_differs_from_fleet`` (:func:`fleet_findings`, over many nodes): a node's matrix is not
  the modal matrix of the nodes of its model.

Only compute NICs count (:func:`classify_nics`): a bonded or Ethernet-named device, or a NIC no GPU
reaches without crossing a host bridge's interconnect (PIX/PXB/PHB), is storage, management or
front-end networking -- the DGX H100's ``mlx5_eth*``, the B300's ``mlx5_bond_0``, the DGX A100's
two storage ports that are SYS to every GPU.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.affinity.matrix import LOCAL_CLASSES, GpuInfo, NicInfo, TopoMatrix
from core.models import Finding, Severity
from core.topology.model import TopologyModel

NON_COMPUTE_NIC_NAMES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"bond", re.IGNORECASE), "a bonded device (front-end or host networking), e.g. mlx5_bond_0"),
    (
        re.compile(r"(?:^|_)eth\d*(?:$|_)", re.IGNORECASE),
        "an Ethernet-named port (storage or in-band management), e.g. mlx5_eth0",
    ),
)  # fmt: skip
"""Device-name rules for NICs that carry no GPU traffic (sites rename RDMA devices with udev rules:
``mlx5_ib*`` for the compute InfiniBand ports, ``mlx5_eth*`` for the rest, as on the DGX H100 capture)."""

SEVERITY: Mapping[str, Severity] = {
    "nic_across_socket": Severity.ERROR,
    "nic_via_host_bridge": Severity.WARNING,
    "shared_nic": Severity.WARNING,
    "rail_miscabled": Severity.ERROR,
    "matrix_differs_from_fleet": Severity.WARNING,
}
FINDING_KINDS: tuple[str, ...] = tuple(SEVERITY)


@dataclass(frozen=True)
class NicCabling:
    """Where a NIC (an HCA) is cabled, from the fabric model: its own rail (DCIM / HCA name), the
    leaf switch it reaches and that leaf's rail (the majority rail of the HCAs below it)."""

    rail: str | None
    leaf: str | None = None
    leaf_rail: str | None = None


@dataclass(frozen=True)
class NicRole:
    nic: NicInfo
    compute: bool
    reason: str


@dataclass(frozen=True)
class GpuAffinity:
    gpu: int
    best_nics: tuple[str, ...]  # NicInfo.name of each best compute NIC (device name, else NIC<n>)
    path_class: str | None  # PIX/PXB/PHB/NODE/SYS; None when the node has no compute NIC
    numa_node: int | None
    cpu_affinity: str | None
    rails: tuple[str, ...] = ()  # distinct rails of the best NICs, where the fabric knows them

    @property
    def rail(self) -> str | None:
        """The GPU's rail when its best NICs agree on one."""
        return self.rails[0] if len(self.rails) == 1 else None

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "best_nics": list(self.best_nics),
            "path_class": self.path_class,
            "numa_node": self.numa_node,
            "cpu_affinity": self.cpu_affinity,
            "rail": self.rail,
            "rails": list(self.rails),
        }


@dataclass(frozen=True)
class AffinityFinding:
    kind: str  # one of FINDING_KINDS
    host: str
    detail: str
    gpu: int | None = None
    nic: str | None = None
    gpus: tuple[int, ...] = ()  # every GPU concerned (shared_nic: the GPUs sharing)
    nics: tuple[str, ...] = ()
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def severity(self) -> Severity:
        return SEVERITY[self.kind]

    def to_finding(self) -> Finding:
        """The canonical finding every area reports (``core.models.Finding``)."""
        gpus = self.gpus or ((self.gpu,) if self.gpu is not None else ())
        nics = self.nics or ((self.nic,) if self.nic is not None else ())
        return Finding(
            kind=self.kind,
            severity=self.severity,
            message=self.detail,
            devices=(self.host,),
            evidence={"host": self.host, "gpus": list(gpus), "nics": list(nics), **dict(self.evidence)},
        )


@dataclass(frozen=True)
class NodeAffinity:
    host: str
    gpus: tuple[GpuAffinity, ...]
    nics: tuple[NicRole, ...]
    findings: tuple[AffinityFinding, ...]

    def to_json(self) -> list[dict[str, Any]]:
        """One object per GPU (what ``gpufabric ingest gpu-topo --json`` prints)."""
        return [g.to_json() for g in self.gpus]

    def gpu(self, index: int) -> GpuAffinity:
        for g in self.gpus:
            if g.gpu == index:
                return g
        raise KeyError(index)


def classify_nics(matrix: TopoMatrix, compute_nics: Collection[str] | None = None) -> tuple[NicRole, ...]:
    """Which NICs carry GPU traffic. ``compute_nics`` (NicInfo names) decides when given, e.g. the
    HCAs the fabric model puts on a rail; otherwise the name rules, then locality."""
    roles = []
    for nic in matrix.nics:
        if compute_nics is not None:
            inside = nic.name in compute_nics or nic.label in compute_nics
            roles.append(
                NicRole(nic, inside, "listed as a compute NIC" if inside else "not among the compute NICs given")
            )
            continue
        rule = next((why for pattern, why in NON_COMPUTE_NIC_NAMES if nic.device and pattern.search(nic.device)), None)
        if rule is not None:
            roles.append(NicRole(nic, False, f"{nic.name} is {rule}"))
            continue
        near, gpus = matrix.nearest_gpus(nic)
        if near is None or near not in LOCAL_CLASSES:
            roles.append(NicRole(nic, False, f"no GPU is local to {nic.name} (closest: {near or 'none'})"))
            continue
        roles.append(NicRole(nic, True, f"{near} to {', '.join(g.label for g in gpus)}"))
    return tuple(roles)


def _cabling(value: NicCabling | str | None) -> NicCabling | None:
    if value is None or isinstance(value, NicCabling):
        return value
    return NicCabling(rail=value)


def derive_node(
    host: str,
    matrix: TopoMatrix,
    *,
    cabling: Mapping[str, NicCabling | str] | None = None,
    compute_nics: Collection[str] | None = None,
) -> NodeAffinity:
    """A node's affinity and per-node findings.

    ``cabling`` maps a NIC's name (its RDMA device, ``mlx5_3``; ``NIC<n>`` when the capture names
    none) to a :class:`NicCabling` or to a plain rail name (``"rail3"``); build it from the fabric
    model with :func:`cabling_from_topology`. NICs it does not name have no rail, and
    ``rail_miscabled`` needs both the NIC's rail and its leaf's rail.
    """
    cabled = {name: c for name, value in (cabling or {}).items() if (c := _cabling(value)) is not None}
    roles = classify_nics(matrix, compute_nics)
    compute = [r.nic for r in roles if r.compute]
    gpus: list[GpuAffinity] = []
    findings: list[AffinityFinding] = []
    best_of: dict[int, tuple[NicInfo, ...]] = {}
    for g in matrix.gpus:
        path, best = matrix.nearest_nics(g, compute) if compute else (None, ())
        best_of[g.index] = best
        rails = tuple(sorted({c.rail for n in best if (c := cabled.get(n.name)) and c.rail is not None}))
        gpus.append(GpuAffinity(g.index, tuple(n.name for n in best), path, g.numa_node, g.cpu_affinity, rails))
        findings += _path_findings(host, g, path, best)
        for n in best:
            c = cabled.get(n.name)
            if c is not None and c.rail is not None and c.leaf_rail is not None and c.rail != c.leaf_rail:
                findings.append(
                    AffinityFinding(
                        "rail_miscabled", host,
                        f"{host} {g.label}'s NIC {n.name} ({c.rail}) is cabled to a {c.leaf_rail} leaf"
                        f"{f' ({c.leaf})' if c.leaf else ''}",
                        gpu=g.index, nic=n.name,
                        evidence={"rail": c.rail, "leaf": c.leaf, "leaf_rail": c.leaf_rail},
                    )
                )  # fmt: skip
    findings += _shared_findings(host, best_of, compute)
    return NodeAffinity(host, tuple(gpus), roles, tuple(findings))


def _path_findings(host: str, g: GpuInfo, path: str | None, best: tuple[NicInfo, ...]) -> list[AffinityFinding]:
    names = ", ".join(n.name for n in best)
    if path == "SYS":
        return [
            AffinityFinding(
                "nic_across_socket", host,
                f"{host} {g.label} (NUMA {g.numa_node if g.numa_node is not None else 'n/a'}) reaches its closest "
                f"compute NIC ({names}) only across the CPU interconnect (SYS)",
                gpu=g.index, nics=tuple(n.name for n in best), evidence={"path_class": path},
            )
        ]  # fmt: skip
    if path == "PHB":
        return [
            AffinityFinding(
                "nic_via_host_bridge", host,
                f"{host} {g.label} reaches its closest compute NIC ({names}) only through the PCIe host bridge (PHB)",
                gpu=g.index, nics=tuple(n.name for n in best), evidence={"path_class": path},
            )
        ]  # fmt: skip
    return []


def _shared_findings(
    host: str, best_of: Mapping[int, tuple[NicInfo, ...]], compute: Iterable[NicInfo]
) -> list[AffinityFinding]:
    used = {n.label for best in best_of.values() for n in best}
    idle = [n for n in compute if n.label not in used]
    if not idle:
        return []  # every compute NIC serves someone: sharing is the design (DGX-1: 4 NICs, 8 GPUs)
    sole: dict[str, list[int]] = defaultdict(list)
    nic_of: dict[str, NicInfo] = {}
    for gpu, best in best_of.items():
        if len(best) == 1:
            sole[best[0].label].append(gpu)
            nic_of[best[0].label] = best[0]
    out = []
    for label, sharing in sole.items():
        if len(sharing) < 2:
            continue
        nic = nic_of[label]
        out.append(
            AffinityFinding(
                "shared_nic", host,
                f"{host} GPUs {', '.join(map(str, sorted(sharing)))} all have {nic.name} as their only closest NIC "
                f"while {', '.join(n.name for n in idle)} serve{'s' if len(idle) == 1 else ''} no GPU",
                nic=nic.name, gpus=tuple(sorted(sharing)), nics=(nic.name,),
                evidence={"idle_nics": [n.name for n in idle]},
            )
        )  # fmt: skip
    return out


@dataclass(frozen=True)
class FleetNode:
    host: str
    model: str  # what "the same kind of node" means to the caller: GPU model, DCIM model, node pool
    matrix: TopoMatrix


def fleet_findings(nodes: Iterable[FleetNode], *, min_fleet: int = 3) -> list[AffinityFinding]:
    """``matrix_differs_from_fleet`` for each node whose :meth:`TopoMatrix.signature` is not its
    model's modal one. A model needs ``min_fleet`` nodes and a modal matrix that is strictly more
    common than any other; otherwise there is no fleet to differ from and nothing is reported."""
    by_model: dict[str, list[FleetNode]] = defaultdict(list)
    for node in nodes:
        by_model[node.model].append(node)
    out: list[AffinityFinding] = []
    for model, group in sorted(by_model.items()):
        if len(group) < min_fleet:
            continue
        counts = Counter(n.matrix.signature() for n in group)
        (modal, top), *rest = counts.most_common()
        if rest and rest[0][1] == top:
            continue  # no single modal matrix
        reference = next(n.matrix for n in group if n.matrix.signature() == modal)
        for node in sorted(group, key=lambda n: n.host):
            if node.matrix.signature() == modal:
                continue
            diffs = matrix_differences(reference, node.matrix)
            out.append(
                AffinityFinding(
                    "matrix_differs_from_fleet", node.host,
                    f"{node.host}'s topology matrix differs from the one {top} of {len(group)} {model} nodes share: "
                    + "; ".join(diffs[:5]) + (f" (+{len(diffs) - 5} more)" if len(diffs) > 5 else ""),
                    evidence={"model": model, "fleet": len(group), "modal_count": top, "differences": diffs[:50]},
                )
            )  # fmt: skip
    return out


def matrix_differences(reference: TopoMatrix, other: TopoMatrix) -> list[str]:
    """What differs between two matrices, in words (devices, cells, NIC names, NUMA nodes)."""
    if reference.devices != other.devices:
        return [f"devices {' '.join(other.devices)} instead of {' '.join(reference.devices)}"]
    out = []
    for i, a in enumerate(reference.devices):
        for j in range(i + 1, len(reference.devices)):
            was, now = reference.cells[i][j].label, other.cells[i][j].label
            if was != now:
                out.append(f"{a}-{reference.devices[j]} {now} (fleet: {was})")
    for was_nic, now_nic in zip(reference.nics, other.nics, strict=True):
        if was_nic.device != now_nic.device:
            out.append(f"{now_nic.label} is {now_nic.device} (fleet: {was_nic.device})")
    for was_gpu, now_gpu in zip(reference.gpus, other.gpus, strict=True):
        if was_gpu.numa_node != now_gpu.numa_node:
            out.append(f"{now_gpu.label} on NUMA {now_gpu.numa_node} (fleet: {was_gpu.numa_node})")
    return out


def cabling_from_topology(model: TopologyModel, host: str) -> dict[str, NicCabling]:
    """NIC name -> cabling for one host of the fabric model: each HCA's rail, its leaf and the
    leaf's rail. Keys are the HCA names the fabric learned from node descriptions (``mlx5_3``),
    which are the RDMA device names ``nvidia-smi`` prints in its NIC Legend."""
    leaf_rail = {s.id: s.rail for s in model.switches}
    out: dict[str, NicCabling] = {}
    for hca in model.host(host).hcas:
        if hca.hca:
            out[hca.hca] = NicCabling(
                rail=hca.rail, leaf=hca.leaf, leaf_rail=leaf_rail.get(hca.leaf) if hca.leaf else None
            )
    return out
