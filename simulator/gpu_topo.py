"""What ``nvidia-smi topo -m`` prints on each compute node of a spec, and which affinity findings
that must produce (issue 23, part 5).

Each node model's matrix is a template (:data:`TEMPLATES`) read off a real capture in
``../shared/fixtures/gpu-topo/`` and written down as data: where every GPU and NIC sits in the
PCIe tree (NUMA node, root complex, PCIe switch), the NVLinks between GPUs, each NUMA node's CPU
list and the non-compute NICs' device names. The connection class of every pair follows from
the positions the way the Legend of ``nvidia-smi topo -m`` defines the classes (:func:`pcie_class`),
so the template reproduces every cell of the capture (tests/unit/test_gpu_topo_twin.py checks it
cell by cell). Compute NIC ``i`` is named ``mlx5_<i>``: the HCA of rail ``i`` as the generator
names it (its IB node description is ``"<host> mlx5_<i>"``), so the fabric's cabling and the
matrix meet on one name, as on a site whose RDMA devices keep the kernel's names.

Faults are declared in the spec (``gpu_topo_faults``: ``nic_across_socket``,
``swapped_nic_order``); they change only the matrices, never the fabric, and are kept apart
from ``defects`` / ``GroundTruth.defects`` (the fabric's, which tests count).
:func:`expected_findings` is what the pipeline must report: derived from the faults and the
fabric defects directly, never by running our derivation.

Imports only ``core`` (and the spec), like every twin.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from core.affinity import CPU_AFFINITY, GPU_NUMA_ID, NUMA_AFFINITY, Connection, GpuInfo, NicInfo, TopoMatrix


@dataclass(frozen=True)
class Slot:
    """Where a device sits: NUMA node, PCIe root complex (host bridge) and PCIe switch below it."""

    numa: int
    root: int
    switch: int


def pcie_class(a: Slot, b: Slot) -> str:
    """The Legend's class of the PCIe path between two devices: one switch (PIX), several bridges
    under one root (PXB), two roots of one NUMA node (NODE), two NUMA nodes (SYS). ``PHB`` (a
    device straight on the root port) does not occur on the boards modelled here."""
    if a.numa != b.numa:
        return "SYS"
    if a.root != b.root:
        return "NODE"
    return "PIX" if a.switch == b.switch else "PXB"


@dataclass(frozen=True)
class TopoTemplate:
    """One node model's ``nvidia-smi topo -m`` as data."""

    name: str
    capture: str  # the fixture the positions were read from (../shared/fixtures/gpu-topo/)
    gpus: tuple[Slot, ...]  # GPU<i>
    compute_nics: tuple[Slot, ...]  # NIC<i>, i < len: the rail-i HCA, named mlx5_<i>
    other_nics: tuple[tuple[str, Slot], ...]  # the NICs after them: device name, position
    nvlinks: int  # NV<n> between every pair of GPUs (NVSwitch baseboards: all pairs alike)
    cpus: Mapping[int, str]  # NUMA node -> CPU Affinity as printed

    @property
    def nics(self) -> tuple[tuple[str, Slot], ...]:
        return tuple((f"mlx5_{i}", s) for i, s in enumerate(self.compute_nics)) + self.other_nics

    def matrix(self) -> TopoMatrix:
        """The clean matrix of a node of this model."""
        nics = self.nics
        devices = tuple(f"GPU{i}" for i in range(len(self.gpus))) + tuple(f"NIC{i}" for i in range(len(nics)))
        slots = list(self.gpus) + [s for _, s in nics]
        n_gpu = len(self.gpus)
        cells: list[tuple[Connection, ...]] = []
        for i, a in enumerate(slots):
            row = []
            for j, b in enumerate(slots):
                if i == j:
                    token = "X"
                elif i < n_gpu and j < n_gpu:
                    token = f"NV{self.nvlinks}"
                else:
                    token = pcie_class(a, b)
                row.append(Connection.parse(token))
            cells.append(tuple(row))
        gpus = tuple(
            GpuInfo(index=i, label=f"GPU{i}", cpu_affinity=self.cpus[s.numa], numa_affinity=str(s.numa),
                    numa_node=s.numa, numa_nodes=(s.numa,), gpu_numa_id=None)
            for i, s in enumerate(self.gpus)
        )  # fmt: skip
        return TopoMatrix(
            devices=devices,
            cells=tuple(cells),
            gpus=gpus,
            nics=tuple(NicInfo(index=i, label=f"NIC{i}", device=name) for i, (name, _) in enumerate(nics)),
            columns=(CPU_AFFINITY, NUMA_AFFINITY, GPU_NUMA_ID),
            legend=True,
            nic_legend=True,
        )

    def local_gpus(self, rail: int) -> tuple[int, ...]:
        """The GPUs closest to the rail-``rail`` NIC (by position): the ones that use it."""
        nic = self.compute_nics[rail]
        order = ("PIX", "PXB", "NODE", "SYS")
        best = min(order.index(pcie_class(g, nic)) for g in self.gpus)
        return tuple(i for i, g in enumerate(self.gpus) if order.index(pcie_class(g, nic)) == best)


def _pairs(numa: int, root: int) -> tuple[Slot, Slot]:
    return Slot(numa, root, 2 * root), Slot(numa, root, 2 * root + 1)


# DGX H100 (dgx-h100-13nic-renamed-penny.txt): GPU i and compute NIC i share a PCIe switch (PIX);
# GPUs 0/1, 2/3, 4/5, 6/7 pair under one root complex each (PXB to the neighbour's NIC), two roots
# per socket (NODE), sockets SYS. Five Ethernet ports (mlx5_eth0-4) share one switch under their own
# root on socket 1: PIX to each other, NODE to GPUs 4-7, SYS to GPUs 0-3. The capture's IB ports are
# renamed mlx5_ib<i> by the site; here they keep the kernel names the fabric's node descriptions carry.
_H100_GPUS = tuple(Slot(r // 2, r, 10 + i) for i, r in enumerate((0, 0, 1, 1, 2, 2, 3, 3)))
_H100_NICS = _H100_GPUS  # compute NIC i on GPU i's switch: PIX

# HGX B300 (b300-9nic-ansi-header-sglang26039.txt): each GPU and its NIC under a root complex of
# their own, on two switches (PXB); four roots per socket (NODE), sockets SYS; the bonded
# front-end NIC (mlx5_bond_0) on a root of its own on socket 1.
_B300_GPUS = tuple(Slot(i // 4, i, 2 * i) for i in range(8))
_B300_NICS = tuple(Slot(i // 4, i, 2 * i + 1) for i in range(8))

TEMPLATES: dict[str, TopoTemplate] = {
    "dgx-h100": TopoTemplate(
        name="dgx-h100",
        capture="dgx-h100-13nic-renamed-penny.txt",
        gpus=_H100_GPUS,
        compute_nics=_H100_NICS,
        other_nics=tuple((f"mlx5_eth{k}", Slot(1, 4, 99)) for k in range(5)),
        nvlinks=18,
        cpus={0: "0-55,112-167", 1: "56-111,168-223"},
    ),
    "hgx-b300": TopoTemplate(
        name="hgx-b300",
        capture="b300-9nic-ansi-header-sglang26039.txt",
        gpus=_B300_GPUS,
        compute_nics=_B300_NICS,
        other_nics=(("mlx5_bond_0", Slot(1, 8, 99)),),
        nvlinks=18,
        cpus={0: "0-63,128-191", 1: "64-127,192-255"},
    ),
}
"""Node topology templates by name (``node.topology`` in a spec)."""

TEMPLATE_BY_MODEL: dict[str, str] = {"DGX H100": "dgx-h100"}
"""The template a node model gets when its spec names none. Only models with a real capture of
their own: others (DGX B200, GB200 trays) name one explicitly or have no matrix."""


def template_name(model: str, explicit: str | None) -> str | None:
    return explicit if explicit is not None else TEMPLATE_BY_MODEL.get(model)


# --- faults and the findings they must produce -------------------------------------------------------


@dataclass(frozen=True)
class GpuTopoFault:
    """One planted matrix fault."""

    kind: str  # nic_across_socket | swapped_nic_order
    host: str
    gpu: int | None = None  # nic_across_socket
    nics: tuple[int, ...] = ()  # swapped_nic_order: the two NIC columns whose device names swap
    description: str = ""


@dataclass(frozen=True)
class ExpectedFinding:
    """An affinity finding the pipeline must report (kind and host; the GPU where it names one)."""

    kind: str
    host: str
    gpu: int | None = None


def apply_fault(matrix: TopoMatrix, template: TopoTemplate, fault: GpuTopoFault) -> TopoMatrix:
    """The matrix of a node with ``fault``."""
    if fault.kind == "nic_across_socket":
        assert fault.gpu is not None
        g = matrix.devices.index(f"GPU{fault.gpu}")
        compute = {matrix.devices.index(f"NIC{i}") for i in range(len(template.compute_nics))}
        sys = Connection.parse("SYS")
        cells = [list(row) for row in matrix.cells]
        for n in compute:
            cells[g][n] = cells[n][g] = sys
        return replace(matrix, cells=tuple(tuple(row) for row in cells))
    if fault.kind == "swapped_nic_order":
        a, b = fault.nics
        names = [n.device for n in matrix.nics]
        names[a], names[b] = names[b], names[a]
        return replace(matrix, nics=tuple(replace(n, device=names[i]) for i, n in enumerate(matrix.nics)))
    raise ValueError(f"unknown gpu topo fault {fault.kind!r}")


@dataclass(frozen=True)
class GpuTopoTruth:
    """Every compute node's matrix (clean nodes of one model share one object) and the faults."""

    template: TopoTemplate | None
    matrices: Mapping[str, TopoMatrix]
    faults: tuple[GpuTopoFault, ...]

    def text(self, host: str) -> str:
        """What ``nvidia-smi topo -m`` prints on ``host``."""
        return self.matrices[host].to_text()


def build_gpu_topo(hosts: Sequence[str], template: TopoTemplate | None, faults: Iterable[GpuTopoFault]) -> GpuTopoTruth:
    faults = tuple(faults)
    if template is None:
        return GpuTopoTruth(None, {}, faults)
    clean = template.matrix()
    matrices: dict[str, TopoMatrix] = dict.fromkeys(hosts, clean)
    for fault in faults:
        matrices[fault.host] = apply_fault(matrices[fault.host], template, fault)
    return GpuTopoTruth(template, matrices, faults)


def expected_findings(
    topo: GpuTopoTruth, miscablings: Iterable[Mapping[str, Any]] = (), *, fleet: int
) -> set[ExpectedFinding]:
    """The affinity findings a correct pipeline reports on this truth.

    - ``nic_across_socket`` for each GPU a fault cut off from every compute NIC;
    - ``matrix_differs_from_fleet`` for each faulted host (the fleet of one model has one modal
      matrix when at least 3 nodes share it and the faulted ones are fewer);
    - ``rail_miscabled`` for the GPUs local to each HCA the fabric's ``miscabled_ports`` put on
      another rail's leaf (``miscablings``: those defects' ``detail``), both ends of each swap.
    """
    out: set[ExpectedFinding] = set()
    if topo.template is None:
        return out
    faulted = {f.host for f in topo.faults}
    for fault in topo.faults:
        if fault.kind == "nic_across_socket":
            out.add(ExpectedFinding("nic_across_socket", fault.host, fault.gpu))
    if fleet >= 3 and fleet - len(faulted) > 1:
        out |= {ExpectedFinding("matrix_differs_from_fleet", h) for h in faulted}
    swapped = {f.host: f.nics for f in topo.faults if f.kind == "swapped_nic_order"}
    across = {(f.host, f.gpu) for f in topo.faults if f.kind == "nic_across_socket" and f.gpu is not None}
    for detail in miscablings:
        for host, hca in ((detail["host"], detail["hca"]), (detail["displaced_host"], detail["displaced_hca"])):
            rail = int(str(hca).removeprefix("mlx5_"))
            column = rail
            if host in swapped and rail in swapped[host]:  # the device sits in the other column
                a, b = swapped[host]
                column = b if rail == a else a
            # the GPUs that use that NIC: the ones local to its column, and any GPU a fault left
            # with no closer NIC than SYS (every compute NIC ties as its best)
            users = set(topo.template.local_gpus(column)) | {g for h, g in across if h == host}
            out |= {ExpectedFinding("rail_miscabled", host, gpu) for gpu in users}
    return out
