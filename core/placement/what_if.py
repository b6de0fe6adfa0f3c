"""What placement costs, summarised the same way wherever it is measured (pure).

The bench replays the week through the real schedulers (``simulator.placement``) and reads back
where pods landed; ``gpufabric placement report`` and the ``placement/what_if`` figures replay it
here, with each placer's choice computed instead: Kueue TAS by its best-fit rule
(``advisor.kueue_best_fit``), the advisor by ``advisor.advise``, and the topology-unaware
kube-scheduler as what it amounts to on identical free GPU nodes, a seeded random pick among
them (its default scores tie; it breaks ties at random). Both paths end in :class:`JobResult`
rows and :func:`summarise`, so their tables read alike.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from core.placement.advisor import FabricView, Request, StepCost, advise, finest_fitting_level, kueue_best_fit
from core.placement.collectives import Placement, collective_time
from core.placement.fabric import fabric_from_topology
from core.placement.workload import (
    GPUS_PER_NODE,
    SIZE_MIX,
    Event,
    Job,
    WorkloadSpec,
    background_hosts,
    crossing_flows,
    generate_jobs,
    schedule,
)
from core.quantiles import nearest_rank
from core.topology.model import TopologyModel

SIMULATED_PLACERS: tuple[str, ...] = ("unaware", "kueue-required", "advisor")
CostFor = Callable[[Job, Sequence[tuple[str, ...]]], StepCost]
"""(job, the other running jobs' hosts) -> the job's step time on a placement (rank order)."""


@dataclass(frozen=True)
class JobResult:
    job: str
    placer: str
    nodes: int
    ratio: float  # step time on its hosts / on the ideal hosts
    blocks: int  # leaf blocks it spans
    spine_groups: int
    gpu_hours: float  # at the ideal step time (the schedule's duration)

    @property
    def lost_gpu_hours(self) -> float:
        return self.gpu_hours * (self.ratio - 1.0)


@dataclass(frozen=True)
class SizeRow:
    """One placer's figures for one job size (``nodes`` 0: all sizes)."""

    placer: str
    nodes: int
    jobs: int
    median_ratio: float
    p90_ratio: float
    crossed_leaves: float  # share of jobs
    crossed_spine_groups: float
    lost_gpu_hours: float


def ideal_hosts(view: FabricView) -> list[str]:
    """Every host, the least affected leaf block first (not degraded, fewest miscabled hosts),
    healthy hosts first inside each: the first ``n`` are the ideal place for an ``n``-node job,
    one leaf block when a block holds it (no traffic then leaves the rail leaves)."""
    by_block: dict[str, list[str]] = {}
    for h in sorted(view.hosts):
        by_block.setdefault(view.value(h, "block"), []).append(h)
    if not by_block:
        raise ValueError("the fabric has no host with every level label")
    order = sorted(by_block, key=lambda b: (b in view.degraded,
                                            sum(h in view.miscabled for h in by_block[b]), b))  # fmt: skip
    return [h for b in order for h in sorted(by_block[b], key=lambda h: (h in view.miscabled, h))]


def job_result(view: FabricView, job: Job, placer: str, hosts: Sequence[str], step_s: float,
               ideal_step_s: float) -> JobResult:  # fmt: skip
    if ideal_step_s <= 0 or not math.isfinite(step_s):
        raise ValueError(f"{job.id}: step times must be finite and the ideal positive, got {step_s}, {ideal_step_s}")
    return JobResult(job.id, placer, job.nodes, step_s / ideal_step_s, len({view.value(h, "block") for h in hosts}),
                     len({view.value(h, "spine_group") for h in hosts}), job.gpu_hours)  # fmt: skip


def summarise(results: Sequence[JobResult], *, per_week: float = 1.0) -> list[SizeRow]:
    """Per placer, one row per job size and one for all (``nodes`` 0); GPU-hours lost scaled by
    ``per_week`` (7 / simulated days)."""
    rows: list[SizeRow] = []
    for placer in dict.fromkeys(r.placer for r in results):
        mine = [r for r in results if r.placer == placer]
        for n in [*sorted({r.nodes for r in mine}), 0]:
            rs = [r for r in mine if n in (0, r.nodes)]
            ratios = [r.ratio for r in rs]
            rows.append(SizeRow(placer, n, len(rs), statistics.median(ratios), nearest_rank(ratios, 0.9),
                                sum(r.blocks > 1 for r in rs) / len(rs), sum(r.spine_groups > 1 for r in rs) / len(rs),
                                per_week * sum(r.lost_gpu_hours for r in rs)))  # fmt: skip
    return rows


def simulate(view: FabricView, events: Sequence[Event], placer: str, cost_for: CostFor, background: Sequence[str],
             *, seed: int = 22) -> list[tuple[Job, tuple[str, ...], tuple[tuple[str, ...], ...]]]:  # fmt: skip
    """Replay the schedule with ``placer``'s choices computed: (job, hosts, others running) per start."""
    if placer not in SIMULATED_PLACERS:
        raise ValueError(f"unknown placer {placer!r}; one of {', '.join(SIMULATED_PLACERS)}")
    rng = random.Random(f"gpufabric-unaware-{seed}")
    held = set(background)
    running: dict[str, tuple[str, ...]] = {}
    out: list[tuple[Job, tuple[str, ...], tuple[tuple[str, ...], ...]]] = []
    for ev in events:
        if ev.kind == "end":
            running.pop(ev.job.id, None)
            continue
        taken = held | {h for hs in running.values() for h in hs}
        free = {h: 0 if h in taken else GPUS_PER_NODE for h in view.hosts}
        others = tuple(running.values())
        level = finest_fitting_level(view, free, ev.job.nodes)
        if level is None:
            raise ValueError(f"{ev.job.id}: {ev.job.nodes} nodes do not fit the free hosts: not this fabric's schedule")
        chosen: Sequence[str] | None
        if placer == "unaware":
            chosen = rng.sample(sorted(h for h, g in free.items() if g), ev.job.nodes)
        elif placer == "kueue-required":
            chosen = kueue_best_fit(view, free, Request(ev.job.nodes, GPUS_PER_NODE, level))
        else:
            chosen = advise(view, free, Request(ev.job.nodes, GPUS_PER_NODE, level), cost_for(ev.job, others)).hosts
        assert chosen is not None  # a level fits, so Kueue's best fit finds a domain
        running[ev.job.id] = tuple(chosen)
        out.append((ev.job, tuple(chosen), others))
    return out


def results_of(view: FabricView, placer: str, placed: Sequence[tuple[Job, Sequence[str], Sequence[tuple[str, ...]]]],
               cost_for: CostFor) -> list[JobResult]:  # fmt: skip
    """Each placement's step time beside the jobs running with it, against the ideal."""
    ideal = ideal_hosts(view)
    memo: dict[int, float] = {}
    out = []
    for job, hosts, others in placed:
        if job.nodes not in memo:  # every job of a size has one shape: one ideal per size
            memo[job.nodes] = cost_for(job, ())(ideal[: job.nodes])
        out.append(job_result(view, job, placer, hosts, cost_for(job, tuple(others))(hosts), memo[job.nodes]))
    return out


def per_size(rows: Sequence[SizeRow]) -> Mapping[tuple[str, int], SizeRow]:
    return {(r.placer, r.nodes): r for r in rows}


@dataclass(frozen=True)
class WhatIf:
    """A simulated week's outcome on one derived fabric."""

    results: tuple[JobResult, ...]
    rows: tuple[SizeRow, ...]
    days: float
    hosts: int
    background: int
    jobs: int
    degraded_blocks: int
    miscabled_hosts: int


def what_if(model: TopologyModel, gpu_model: str, *, days: float = 7.0, seed: int = 22,
            placers: Sequence[str] = SIMULATED_PLACERS, median_hours: float = 12.0) -> WhatIf:  # fmt: skip
    """The simulated week on ``model`` (a derived topology, findings included) through each
    placer, priced with the cost model beside the other running jobs' leaf-crossing flows.
    ``gpu_model`` names the hosts' GPU (the topology does not carry it)."""
    view = FabricView.from_model(model)
    hosts = sorted(view.hosts)
    if not hosts:
        raise ValueError("no compute host carries every level label: nothing to place on")
    family = next((f for f in ("GB200", "B200", "H200", "H100") if f in gpu_model.upper()), None)
    if family is None:
        raise ValueError(f"no peak FLOP/s for GPU model {gpu_model!r} (H100, H200, B200, GB200)")
    fabric = fabric_from_topology(model, gpu_model)
    spec = WorkloadSpec(nodes_total=len(hosts), gpu=family, days=days, seed=seed, median_hours=median_hours,
                        mix={n: w for n, w in SIZE_MIX.items() if n <= len(hosts)})  # fmt: skip
    background = background_hosts(hosts, spec)
    jobs = generate_jobs(spec)
    events = schedule(jobs, len(hosts) - len(background))
    memo: dict[tuple[str, int, tuple[str, ...], frozenset[tuple[str, float]]], float] = {}

    def cost_for(job: Job, others: Sequence[tuple[str, ...]]) -> StepCost:
        flows = frozenset(crossing_flows(fabric, others).items())

        def seconds(op: str, size: int, ranked: Sequence[str]) -> float:
            key = (op, size, tuple(ranked), flows)
            if key not in memo:
                placement = Placement.of(ranked, GPUS_PER_NODE)
                memo[key] = collective_time(op, "auto", size, placement, fabric, dict(flows)).seconds
            return memo[key]

        return lambda ranked: job.step_seconds(ranked, seconds)

    results: list[JobResult] = []
    for placer in placers:
        placed = simulate(view, events, placer, cost_for, background, seed=seed)
        results += results_of(view, placer, placed, cost_for)
    return WhatIf(tuple(results), tuple(summarise(results, per_week=7.0 / days)), days, len(hosts), len(background),
                  len(jobs), len(view.degraded), len(view.miscabled))  # fmt: skip
