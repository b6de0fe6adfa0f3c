"""Published nccl-tests figures for H100/H200 over NDR 400G InfiniBand, and the model against them.

Each figure is data: where it comes from, the hardware, the collective, the size and the bus
bandwidth reported. ``algorithm`` says what the run used: ``ring`` when it forced
``NCCL_ALGO=Ring``, ``auto`` for NCCL's default choice (compared with the model's ``auto``).
Figures the model cannot meet honestly stay in the table, not checked, with the reason: NVLink
SHARP (an in-switch reduction) is not a modelled algorithm, and below ``REGIME_BYTES_PER_RANK``
NCCL's protocol and channel choices dominate. The model's
constants are global (``LatencyModel``, ``Efficiency``); none is tuned per figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from core.placement.collectives import Algorithm, Collective, Placement, collective_time
from core.placement.fabric import Efficiency, LatencyModel, synthetic_fabric

MIB = 1 << 20
NODES_PER_GROUP = 32  # a DGX SuperPOD scalable unit
REGIME_BYTES_PER_RANK = 32 * MIB
"""Below this much data per rank NCCL runs fewer channels and its LL/LL128 protocols, which the
alpha-beta model does not price: the published busbw there is up to 1.8x lower than the model's
(docs/placement.md, calibration table). The model claims the bandwidth regime only."""
GIB = 1 << 30
VOLTAGE_PARK = (
    "Voltage Park / AI@GT 4-node H100 benchmark, nccl-tests 2.17.9, NCCL 2.24.3, 8x400G IB per node",
    "https://github.com/ZiyanIshani/vpbenchmarking/tree/main/results/nccl/nccl_multinode",
)


@dataclass(frozen=True)
class PublishedFigure:
    source: str
    url: str
    gpu: str
    nodes: int
    gpus_per_node: int
    op: Collective
    algorithm: Algorithm
    size_bytes: int
    busbw: float  # GB/s, as reported
    note: str = ""
    nvls: bool = False  # NCCL ran NVLink SHARP (an in-switch reduction): not a modelled algorithm

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def checked(self) -> bool:
        """Whether the model claims this figure: no NVLS, and in the bandwidth regime."""
        return not self.nvls and self.size_bytes / self.ranks >= REGIME_BYTES_PER_RANK


@dataclass(frozen=True)
class CalibrationRow:
    figure: PublishedFigure
    model_busbw: float
    model_algorithm: Algorithm
    error: float  # model / published - 1


FIGURES: tuple[PublishedFigure, ...] = (
    PublishedFigure(
        "nccl-tests#212, S. Jeaugey (NVIDIA): ring over NVLink4 reaches ~370 GB/s busbw",
        "https://github.com/NVIDIA/nccl-tests/issues/212",
        "H100", 1, 8, Collective.ALL_REDUCE, Algorithm.RING, 4 * GIB, 370.0,
        "NCCL_ALGO=RING or any non-allreduce collective; 450 GB/s line rate minus ~20% protocol overhead",
    ),
    PublishedFigure(
        "nccl-tests#290, D. Addison (NVIDIA): NDR 400G gives 46-48 GB/s per NIC with NCCL_ALGO=RING",
        "https://github.com/NVIDIA/nccl-tests/issues/290",
        "H100", 2, 8, Collective.ALL_REDUCE, Algorithm.RING, 4 * GIB, 376.0,
        "8 NICs x 47 GB/s (the middle of the quoted range); ring busbw is what crosses the NICs",
    ),
    *(
        PublishedFigure(*VOLTAGE_PARK, "H100", 4, 8, Collective.ALL_REDUCE, Algorithm.AUTO, size, busbw,
                        "all_reduce_perf, default algorithm, out-of-place")
        for size, busbw in ((16 * MIB, 119.48), (128 * MIB, 275.26), (1 * GIB, 324.48), (4 * GIB, 329.36))
    ),
    *(
        PublishedFigure(*VOLTAGE_PARK, "H100", 4, 8, Collective.ALL_GATHER, Algorithm.AUTO, size, busbw,
                        "all_gather_perf, default algorithm, out-of-place")
        for size, busbw in ((128 * MIB, 173.43), (1 * GIB, 320.55), (4 * GIB, 323.76))
    ),
    PublishedFigure(
        "nccl-tests#283: 248 nodes x 8 H200, 8 NDR HCAs each, all_reduce_perf at 512 MB 'typically around 350G'",
        "https://github.com/NVIDIA/nccl-tests/issues/283",
        "H200", 248, 8, Collective.ALL_REDUCE, Algorithm.AUTO, 512 * MIB, 350.0,
        "default algorithm: NVLS tree on H200 at this scale; a user's report of a production fabric",
        nvls=True,
    ),
    PublishedFigure(
        *VOLTAGE_PARK[:1], "https://github.com/ZiyanIshani/vpbenchmarking/blob/main/results/nccl/nccl_singlenode/nccl_summary.md",
        "H100", 1, 8, Collective.ALL_REDUCE, Algorithm.AUTO, 8 * GIB, 479.72,
        "NVLink SHARP (NVLS): the NVSwitch reduces, so busbw exceeds what a ring moves over the wire; "
        "not modelled (nccl-tests#212 expects ~480 for the same reason)",
        nvls=True,
    ),
    PublishedFigure(
        *VOLTAGE_PARK, "H100", 4, 8, Collective.ALL_REDUCE, Algorithm.AUTO, 1 * MIB, 21.97,
        "small message: NCCL's LL/LL128 protocols, which the model does not price separately",
    ),
)  # fmt: skip


def calibration_table(
    figures: tuple[PublishedFigure, ...] = FIGURES,
    *,
    latency: LatencyModel | None = None,
    efficiency: Efficiency | None = None,
) -> list[CalibrationRow]:
    """The model's busbw beside every figure, with the relative error."""
    rows = []
    for figure in figures:
        # A non-blocking rail-optimised fabric big enough for the figure, the job packed group by
        # group: what a benchmark on an idle cluster sees.
        fabric = synthetic_fabric(
            leaf_groups=max(1, math.ceil(figure.nodes / NODES_PER_GROUP)),
            nodes_per_group=NODES_PER_GROUP,
            gpu_model=figure.gpu,
            gpus_per_node=figure.gpus_per_node,
            latency=latency,
        )
        if efficiency is not None:
            fabric = replace(fabric, efficiency=efficiency)
        nodes = sorted(fabric.nodes)[: figure.nodes]
        result = collective_time(
            figure.op, figure.algorithm, figure.size_bytes, Placement.of(nodes, figure.gpus_per_node), fabric
        )
        rows.append(CalibrationRow(figure, result.busbw, result.algorithm, result.busbw / figure.busbw - 1))
    return rows
