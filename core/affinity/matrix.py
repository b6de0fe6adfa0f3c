"""One node's ``nvidia-smi topo -m`` matrix as data: devices, the connection class of every pair,
each GPU's CPU and NUMA affinity, and the NICs' RDMA device names.

The model lives in ``core`` (not beside the parser in ``connectors/gpu_topo``) because both the
derivation here and the simulator's twins (which may import only ``core``) need it; the parser
builds it, :meth:`TopoMatrix.from_json` reads it back from ``raw.gpu_topo_captures``, and
:meth:`TopoMatrix.to_text` renders it the way ``nvidia-smi`` prints it.

Connection classes, as the Legend of ``nvidia-smi topo -m`` defines them, best to worst for a
PCIe path: ``PIX`` (at most one PCIe bridge) < ``PXB`` (several bridges, no host bridge) < ``PHB``
(through a PCIe host bridge, typically the CPU) < ``NODE`` (between host bridges within a NUMA
node) < ``SYS`` (across the SMP interconnect between NUMA nodes, QPI/UPI/xGMI). ``X`` is the
device itself and ``NV<n>`` a bonded set of n NVLinks (GPU to GPU only). Older drivers printed
``SOC`` for what is now ``SYS`` and had no ``NODE``; some printed ``PSB`` (one on-board PCIe
switch, dual-GPU boards such as the K80), which we rank just before ``PIX``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SELF = "X"
NVLINK = "NV"
PCIE_CLASSES: tuple[str, ...] = ("PSB", "PIX", "PXB", "PHB", "NODE", "SYS")
"""PCIe path classes, best first (the order the brief and NVML's ``nvmlGpuTopologyLevel_t`` use)."""
LEGACY_CLASSES: Mapping[str, str] = {"SOC": "SYS"}
"""Tokens of older drivers and the class they mean today (``SOC``: "the SMP link between CPU sockets")."""
LOCAL_CLASSES = frozenset({"PSB", "PIX", "PXB", "PHB"})
"""Classes under one PCIe host bridge: a NIC reached this way is local to the GPU (GPUDirect RDMA
works without crossing the CPU's interconnect)."""
MAX_NVLINKS = 64  # NV18 is the most any shipped part bonds (H100/B200 via NVSwitch); 64 leaves room
_NV_RE = re.compile(r"NV(\d{1,3})")


@dataclass(frozen=True)
class Connection:
    """One cell of the matrix: the class of the path between two devices."""

    kind: str  # X | NV | PSB | PIX | PXB | PHB | NODE | SYS
    nvlinks: int = 0  # the n of NV<n>; 0 for every other kind
    raw: str = ""  # the token as printed (``SOC`` stays visible after it is read as SYS)

    @classmethod
    def parse(cls, token: str) -> Connection:
        """The class a token names; ValueError for anything the Legend does not define."""
        if token == SELF:
            return cls(SELF, 0, token)
        nv = _NV_RE.fullmatch(token)
        if nv:
            count = int(nv.group(1))
            if not 1 <= count <= MAX_NVLINKS:
                raise ValueError(f"{token!r} is not a bonded set of NVLinks (1-{MAX_NVLINKS})")
            return cls(NVLINK, count, token)
        kind = LEGACY_CLASSES.get(token, token)
        if kind not in PCIE_CLASSES:
            raise ValueError(f"{token[:40]!r} is not a connection class (X, NV#, {', '.join(PCIE_CLASSES)}, SOC)")
        return cls(kind, 0, token)

    @property
    def label(self) -> str:
        """The class as printed today: ``NV18``, ``PIX``, ``SYS`` (``SOC`` reads ``SYS``)."""
        return f"{NVLINK}{self.nvlinks}" if self.kind == NVLINK else self.kind

    @property
    def pcie_rank(self) -> int | None:
        """Position in :data:`PCIE_CLASSES` (lower is closer); None for X and NVLink."""
        return PCIE_CLASSES.index(self.kind) if self.kind in PCIE_CLASSES else None


@dataclass(frozen=True)
class GpuInfo:
    index: int  # the n of GPU<n>
    label: str  # GPU<n>
    cpu_affinity: str | None  # as printed, e.g. "0-55,112-167"; None for N/A or no column
    numa_affinity: str | None  # as printed: "1", "0,3-9,11-17" (Grace), None for N/A or no column
    numa_node: int | None  # the first NUMA node of numa_affinity (the CPU's node on Grace systems)
    numa_nodes: tuple[int, ...] = ()  # every node numa_affinity lists
    gpu_numa_id: int | None = None  # "GPU NUMA ID": the GPU memory's own NUMA node (coherent systems)
    extra: Mapping[str, str] = field(default_factory=dict)  # values of trailing columns we do not model


@dataclass(frozen=True)
class NicInfo:
    index: int  # the n of NIC<n>, or the NIC's position among NIC columns when columns are device names
    label: str  # the matrix column: NIC<n> (NIC Legend era) or the device name itself (older drivers)
    device: str | None  # RDMA device name (mlx5_0, mlx5_ib3, mlx5_bond_0); None when the capture does not say

    @property
    def name(self) -> str:
        """What callers and the JSON call this NIC: its device name where the capture gives one, else NIC<n>."""
        return self.device or f"NIC{self.index}"


@dataclass(frozen=True)
class TopoMatrix:
    """A parsed capture. ``cells[i][j]`` is the connection between ``devices[i]`` and ``devices[j]``
    (symmetric, ``X`` on the diagonal; the parser refuses anything else)."""

    devices: tuple[str, ...]
    cells: tuple[tuple[Connection, ...], ...]
    gpus: tuple[GpuInfo, ...]
    nics: tuple[NicInfo, ...]
    columns: tuple[str, ...] = ()  # trailing columns as the header names them (CPU Affinity, ...)
    legend: bool = False  # the "Legend:" block was present
    nic_legend: bool = False  # the "NIC Legend:" block was present
    notes: tuple[str, ...] = ()  # format quirks met while reading (ANSI remnants stripped, SOC read as SYS)
    _pos: Mapping[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pos", {label: i for i, label in enumerate(self.devices)})

    # -- lookups --

    def between(self, a: str, b: str) -> Connection:
        """The connection between two devices by matrix label (GPU0, NIC3, mlx5_0)."""
        return self.cells[self._pos[a]][self._pos[b]]

    def gpu(self, index: int) -> GpuInfo:
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(f"GPU{index}")

    def nic(self, index: int) -> NicInfo:
        for n in self.nics:
            if n.index == index:
                return n
        raise KeyError(f"NIC{index}")

    def nic_named(self, name: str) -> NicInfo:
        """A NIC by :attr:`NicInfo.name` (device name, else NIC<n>) or by its matrix label."""
        for n in self.nics:
            if name in (n.name, n.label):
                return n
        raise KeyError(name)

    def gpu_nic(self, gpu: GpuInfo, nic: NicInfo) -> Connection:
        return self.between(gpu.label, nic.label)

    def gpu_pair(self, a: int, b: int) -> Connection:
        return self.between(f"GPU{a}", f"GPU{b}")

    def nvlinks(self, a: int, b: int) -> int:
        """NVLinks bonded between two GPUs (0 when their path is PCIe only, or for the same GPU)."""
        return self.gpu_pair(a, b).nvlinks

    def nvlink_counts(self) -> dict[tuple[int, int], int]:
        """NVLink count of every unordered GPU pair (a < b), 0 where the pair has none."""
        return {(a.index, b.index): self.nvlinks(a.index, b.index) for a, b in self.gpu_pairs()}

    def gpu_pairs(self) -> Iterator[tuple[GpuInfo, GpuInfo]]:
        for i, a in enumerate(self.gpus):
            for b in self.gpus[i + 1 :]:
                yield a, b

    def nearest_nics(
        self, gpu: GpuInfo, among: Sequence[NicInfo] | None = None
    ) -> tuple[str | None, tuple[NicInfo, ...]]:
        """The closest class from ``gpu`` to any NIC of ``among`` (default: every NIC) and every NIC at
        that class, in column order (ties are all kept). ``(None, ())`` when there is no NIC."""
        nics = self.nics if among is None else tuple(among)
        ranked = [(self.gpu_nic(gpu, n), n) for n in nics]
        ranked = [(c, n) for c, n in ranked if c.pcie_rank is not None]
        if not ranked:
            return None, ()
        best = min(c.pcie_rank for c, _ in ranked if c.pcie_rank is not None)
        return PCIE_CLASSES[best], tuple(n for c, n in ranked if c.pcie_rank == best)

    def nearest_gpus(self, nic: NicInfo) -> tuple[str | None, tuple[GpuInfo, ...]]:
        """The closest class from ``nic`` to any GPU, and every GPU at that class."""
        ranked = [(self.gpu_nic(g, nic), g) for g in self.gpus]
        ranked = [(c, g) for c, g in ranked if c.pcie_rank is not None]
        if not ranked:
            return None, ()
        best = min(c.pcie_rank for c, _ in ranked if c.pcie_rank is not None)
        return PCIE_CLASSES[best], tuple(g for c, g in ranked if c.pcie_rank == best)

    def signature(self) -> tuple[Any, ...]:
        """What two nodes of one model must share to have "the same matrix": the devices, every
        cell's class, the NICs' device names and each GPU's NUMA node. CPU lists are left out
        (an SMT setting changes them without changing a path)."""
        return (
            self.devices,
            tuple(tuple(c.label for c in row) for row in self.cells),
            tuple(n.device for n in self.nics),
            tuple(g.numa_node for g in self.gpus),
        )

    # -- the landed form and the printed form --

    def to_json(self) -> dict[str, Any]:
        """The form landed in ``raw.gpu_topo_captures.matrix`` (read back by :meth:`from_json`)."""
        return {
            "devices": list(self.devices),
            "cells": [[c.raw or c.label for c in row] for row in self.cells],
            "gpus": [
                {
                    "index": g.index,
                    "label": g.label,
                    "cpu_affinity": g.cpu_affinity,
                    "numa_affinity": g.numa_affinity,
                    "numa_node": g.numa_node,
                    "numa_nodes": list(g.numa_nodes),
                    "gpu_numa_id": g.gpu_numa_id,
                    "extra": dict(g.extra),
                }
                for g in self.gpus
            ],
            "nics": [{"index": n.index, "label": n.label, "device": n.device} for n in self.nics],
            "columns": list(self.columns),
            "legend": self.legend,
            "nic_legend": self.nic_legend,
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TopoMatrix:
        return cls(
            devices=tuple(doc["devices"]),
            cells=tuple(tuple(Connection.parse(t) for t in row) for row in doc["cells"]),
            gpus=tuple(
                GpuInfo(
                    index=g["index"],
                    label=g["label"],
                    cpu_affinity=g["cpu_affinity"],
                    numa_affinity=g["numa_affinity"],
                    numa_node=g["numa_node"],
                    numa_nodes=tuple(g["numa_nodes"]),
                    gpu_numa_id=g["gpu_numa_id"],
                    extra=dict(g.get("extra", {})),
                )
                for g in doc["gpus"]
            ),
            nics=tuple(NicInfo(index=n["index"], label=n["label"], device=n["device"]) for n in doc["nics"]),
            columns=tuple(doc.get("columns", ())),
            legend=bool(doc.get("legend", False)),
            nic_legend=bool(doc.get("nic_legend", False)),
            notes=tuple(doc.get("notes", ())),
        )

    def to_text(self) -> str:
        """The matrix as current drivers print it (tab-separated), for twins and round-trip tests.
        Columns and the Legend / NIC Legend blocks absent from the capture stay absent."""
        head = "\t" + "\t".join([*self.devices, *self.columns])
        lines = [head]
        by_label = {g.label: g for g in self.gpus}
        for label, row in zip(self.devices, self.cells, strict=True):
            cells = [" X " if c.kind == SELF else c.raw or c.label for c in row]
            tail: list[str] = []
            gpu = by_label.get(label)
            if gpu is not None:
                for col in self.columns:
                    tail.append(_column_value(gpu, col))
            lines.append("\t".join([label, *cells, *tail]))
        if self.legend:
            lines += ["", "Legend:", "", "  X    = Self"]
            lines += [f"  {cls:<4} = {desc}" for cls, desc in LEGEND_TEXT.items()]
        if self.nic_legend:
            lines += ["", "NIC Legend:", ""] + [f"  {n.label}: {n.device}" for n in self.nics if n.device]
        return "\n".join(lines) + "\n"


LEGEND_TEXT: Mapping[str, str] = {
    "SYS": "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "NODE": "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "PHB": "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "PXB": "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "PIX": "Connection traversing at most a single PCIe bridge",
    "NV#": "Connection traversing a bonded set of # NVLinks",
}
"""The Legend as drivers of the R535-R590 era print it (the fixtures' captures)."""

CPU_AFFINITY = "CPU Affinity"
NUMA_AFFINITY = "NUMA Affinity"
GPU_NUMA_ID = "GPU NUMA ID"


def _column_value(gpu: GpuInfo, column: str) -> str:
    if column == CPU_AFFINITY:
        return gpu.cpu_affinity or "N/A"
    if column == NUMA_AFFINITY:
        return gpu.numa_affinity or "N/A"
    if column == GPU_NUMA_ID:
        return "N/A" if gpu.gpu_numa_id is None else str(gpu.gpu_numa_id)
    return gpu.extra.get(column, "N/A")
