"""Part 5 of issue 22, the seed's figure tested: does a 4-node job spread over four leaves lose
40-60% of its step time, and when?

A 4-node job on the h100-4su shape (rail-optimised, 32 nodes per leaf group, a leaf per rail
per group, NDR) placed under 1, 2 or 4 leaf groups; each leaf's uplinks at 1:1, 2:1, 4:1, or
1:1 with uplinks lost (degraded); the rest of the cluster idle or sending a share of its hosts'
NIC rate across the uplinks (other jobs); a data-parallel gradient AllReduce whose exposed time
is a given share of the one-leaf step. The slowdown is the step time against the same job with
all four nodes under one leaf group, under the same load.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from core.placement.collectives import Algorithm, Collective, Placement, collective_time, step_time
from core.placement.fabric import Fabric, synthetic_fabric, with_leaf_uplinks

GIB = 1 << 30


@dataclass(frozen=True)
class SweepCase:
    name: str
    oversubscription: float
    uplinks_removed: int = 0  # from every leaf the job uses


@dataclass(frozen=True)
class SweepRow:
    case: str
    load: float  # share of the other hosts on each leaf sending across its uplinks
    leaves: int  # leaf groups the job spans
    size_bytes: int
    comm_share: float  # exposed communication / step time, with the job under one leaf
    ideal_step_s: float
    step_s: float
    collective_s: float
    bottleneck: str

    @property
    def slowdown(self) -> float:
        return self.step_s / self.ideal_step_s - 1


DEFAULT_CASES: tuple[SweepCase, ...] = (
    SweepCase("1:1", 1.0),
    SweepCase("2:1", 2.0),
    SweepCase("4:1", 4.0),
    SweepCase("degraded (1:1, 2 of 32 uplinks lost)", 1.0, 2),
    SweepCase("degraded (1:1, 16 of 32 uplinks lost)", 1.0, 16),
)
DEFAULT_LOADS: tuple[float, ...] = (0.0, 0.5, 1.0)
DEFAULT_SHARES: tuple[float, ...] = (0.1, 0.3, 0.5)
DEFAULT_SIZES: tuple[int, ...] = (1 * GIB, 4 * GIB)


def _spread(fabric: Fabric, nodes: int, leaf_groups: int) -> list[str]:
    """``nodes`` nodes dealt round-robin over the first ``leaf_groups`` groups."""
    per_group: Counter[int] = Counter()
    names = []
    for i in range(nodes):
        group = i % leaf_groups
        names.append(f"g{group:02d}n{per_group[group]:03d}")
        per_group[group] += 1
    missing = [n for n in names if n not in fabric.nodes]
    if missing:
        raise ValueError(f"fabric has no node {missing[0]}")
    return names


def _background(fabric: Fabric, job: Sequence[str], load: float) -> dict[str, float]:
    on_leaf: Counter[str] = Counter(nic.leaf for name in job for nic in fabric.nodes[name].nics)
    return {leaf.id: round(load * (leaf.host_ports - on_leaf[leaf.id])) for leaf in fabric.leaves.values()}


def seed_claim_sweep(
    *,
    cases: Sequence[SweepCase] = DEFAULT_CASES,
    loads: Sequence[float] = DEFAULT_LOADS,
    leaf_spans: Sequence[int] = (1, 2, 4),
    sizes: Sequence[int] = DEFAULT_SIZES,
    comm_shares: Sequence[float] = DEFAULT_SHARES,
    job_nodes: int = 4,
    nodes_per_group: int = 32,
    gpu_model: str = "H100",
) -> list[SweepRow]:
    """Every combination, one row each (pure; a few hundred collectives, well under a second)."""
    for share in comm_shares:
        if not 0 < share < 1:
            raise ValueError(f"comm share must be strictly between 0 and 1, got {share!r}")
    for load in loads:
        if not 0 <= load <= 1:
            raise ValueError(f"load must be between 0 and 1, got {load!r}")
    groups = max(leaf_spans)
    rows = []
    for case in cases:
        fabric = synthetic_fabric(
            leaf_groups=groups,
            nodes_per_group=nodes_per_group,
            gpu_model=gpu_model,
            oversubscription=case.oversubscription,
        )
        ideal_job = _spread(fabric, job_nodes, 1)
        for span in leaf_spans:
            job = _spread(fabric, job_nodes, span)
            degraded = fabric
            if case.uplinks_removed:
                for leaf in {nic.leaf for name in job for nic in fabric.nodes[name].nics}:
                    remaining = max(0, fabric.leaves[leaf].uplinks - case.uplinks_removed)
                    degraded = with_leaf_uplinks(degraded, leaf, remaining)
            for load in loads:
                for size in sizes:
                    ideal = collective_time(
                        Collective.ALL_REDUCE, Algorithm.AUTO, size, Placement.of(ideal_job, 8), fabric,
                        _background(fabric, ideal_job, load),
                    )  # fmt: skip
                    spread = collective_time(
                        Collective.ALL_REDUCE, Algorithm.AUTO, size, Placement.of(job, 8), degraded,
                        _background(degraded, job, load),
                    )  # fmt: skip
                    for share in comm_shares:
                        compute = ideal.seconds * (1 - share) / share
                        rows.append(
                            SweepRow(
                                case=case.name,
                                load=load,
                                leaves=span,
                                size_bytes=size,
                                comm_share=share,
                                ideal_step_s=step_time(compute, [ideal]).seconds,
                                step_s=step_time(compute, [spread]).seconds,
                                collective_s=spread.seconds,
                                bottleneck=spread.bottleneck,
                            )
                        )
    return rows
