"""A year (or any number of days) of a big cluster's cost inputs, as raw warehouse rows.

The agent week (``week.py``) plans a few dozen pods with exact manifests and telemetry; a year of
a 1,024-GPU cluster running 10,000 pods a day is 3.65 million pods, so this generator keeps the
week's model (clients, tasks, agent types and tiers; agent trees with root/parent/depth; whole-GPU
and MIG requests) but skips manifests and the parser: it yields rows in the column order of
``raw.k8s_pod_snapshots`` and ``raw.k8s_node_snapshots`` (``core.finops.records.POD_COLUMNS`` /
``NODE_COLUMNS``), for COPY straight into the warehouse (``connectors.warehouse.copy_rows``).

Per pod the observations the collector would land: ``ADDED`` when it starts (Running),
``DELETED`` when it ends (Succeeded, ``end_time`` set), and a scheduled ``list`` at every hour
boundary in between; every node once an hour, so capacity grows with time as it does live. No
DCGM telemetry: every pod-hour falls back to allocation on the usage basis
(``x_ActivityMeasured`` false), which costs dbt the same work.

Scheduling never overcommits a node: nodes are split by the GPU count of the pods they run (the
week's pools: single-GPU and MIG agents, 2- and 4-GPU jobs, whole-node training), each GPU
group is a lane that runs one pod at a time, and a pod starts when its lane is free (later than
asked if the cluster is busy; a pod that could not start before the end is counted, not emitted).
Deterministic for a seed; hours are UTC.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from simulator.agents.week import B200, DENOMINATOR, H100

YEAR_START = datetime(2025, 12, 1, tzinfo=UTC)
SOURCE = "kubernetes"

# (client, task, agent_type, tier, gpus per pod, mig profile, mean minutes, weight). Agent types and
# tiers as in the week; sizes give the pool a pod runs in.
WORKLOADS: tuple[tuple[str, str, str, str, int, str | None, int, int], ...] = (
    ("globex", "code-review", "coder", "interactive", 1, None, 30, 34),
    ("globex", "code-review", "planner", "interactive", 1, None, 45, 6),
    ("initech", "support-bot", "reviewer", "standard", 1, "3g.40gb", 25, 14),
    ("initech", "support-bot", "tool-runner", "spot", 1, "1g.10gb", 10, 14),
    ("umbrella", "eval", "evaluator", "batch", 2, None, 45, 12),
    ("umbrella", "rl-rollouts", "coder", "batch", 4, None, 60, 6),
    ("acme", "finetune", "unattributed", "batch", 8, None, 120, 2),
    ("acme", "pretrain-llm", "unattributed", "batch", 8, None, 240, 1),
    ("hooli", "inference", "server", "standard", 2, None, 90, 4),
)  # about 95 GPU-minutes a pod: 10,000 pods a day keep 1,024 GPUs about two thirds busy
MIG_SLICES = {"1g.10gb": 1, "3g.40gb": 3}


@dataclass(frozen=True)
class YearSpec:
    cluster: str = "year"
    start: datetime = YEAR_START
    days: int = 365
    nodes: int = 128
    gpus_per_node: int = 8
    pods_per_day: int = 10_000
    seed: int = 25
    prefix: str = "gpufabric.io"
    run_id: str = "sim-year"

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def end(self) -> datetime:
        return self.start + timedelta(days=self.days)


@dataclass
class YearCounts:
    pods: int = 0
    pod_rows: int = 0
    node_rows: int = 0
    not_started: int = 0  # asked for but never got a lane before the end
    slice_seconds: int = 0  # seconds held x GPU units in 1/7 (MIG policy units): GPU-hours x 7 x 3600
    per_client: dict[str, int] = field(default_factory=dict)


def _uid(seed: int, n: int) -> str:
    h = hashlib.blake2b(f"{seed}/{n}".encode(), digest_size=16).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class _Pools:
    """Lanes per pod size; each lane a (free_at, node, first gpu) in a heap."""

    def __init__(self, spec: YearSpec) -> None:
        weights: dict[int, float] = {}
        for *_, gpus, _mig, minutes, weight in WORKLOADS:  # a MIG pod holds a 1-GPU lane
            weights[gpus] = weights.get(gpus, 0) + gpus * minutes * weight
        total = sum(weights.values())
        names = [f"gpu-{i:04d}" for i in range(spec.nodes)]
        self.models = {n: (B200 if i % 4 == 3 else H100) for i, n in enumerate(names)}  # a quarter B200
        self.lanes: dict[int, list[tuple[datetime, str, int]]] = {}
        taken = 0
        sizes = sorted(weights)
        if spec.nodes < len(sizes):
            raise ValueError(f"{spec.nodes} nodes: at least {len(sizes)} needed, one per pod size {sizes}")
        for k, size in enumerate(sizes):
            count = spec.nodes - taken if k == len(sizes) - 1 else max(1, round(spec.nodes * weights[size] / total))
            pool = names[taken:taken + count]
            taken += count
            self.lanes[size] = [(spec.start, n, g) for n in pool for g in range(0, spec.gpus_per_node, size)]
            heapq.heapify(self.lanes[size])

    def place(self, size: int, want: datetime, minutes: float, end: datetime) -> tuple[str, int, datetime,
                                                                                       datetime] | None:
        heap = self.lanes[size]
        free_at, node, gpu = heap[0]
        t0 = max(want, free_at)
        if t0 >= end:
            return None
        t1 = min(t0 + timedelta(seconds=round(minutes * 60)), end)
        heapq.heapreplace(heap, (t1, node, gpu))
        return node, gpu, t0, t1


def node_rows(spec: YearSpec, *, since: datetime | None = None, until: datetime | None = None
              ) -> Iterator[tuple[Any, ...]]:
    """Every node once an hour (the collector's node list, thinned), in ``NODE_COLUMNS`` order;
    each observation its own run, as the table keys one row per node per run."""
    pools = _Pools(spec)
    lo, hi = since or spec.start, until or spec.end
    at = spec.start
    while at < spec.end:
        if lo <= at < hi:
            run = f"{spec.run_id}-nodes-{at:%Y%m%dT%H}"
            for node, model in pools.models.items():
                labels = {"nvidia.com/gpu.product": model, "nvidia.com/gpu.count": str(spec.gpus_per_node)}
                yield (run, spec.cluster, at, node, model, spec.gpus_per_node, False, labels,
                       {"nvidia.com/gpu": str(spec.gpus_per_node)})
        at += timedelta(hours=1)


def pod_rows(spec: YearSpec, counts: YearCounts | None = None, *, since: datetime | None = None,
             until: datetime | None = None) -> Iterator[tuple[Any, ...]]:
    """The pods' observations, in ``POD_COLUMNS`` order, day by day: ``ADDED`` at the start, a
    scheduled ``list`` at every hour boundary while running (what the minute-by-minute collector
    would show, thinned to one an hour), ``DELETED`` at the end. ``since``/``until`` keep only the
    observations collected in [since, until): landing [start, T) then [T, T + 1 h) is what a
    collector running up to T and then for one more hour would have landed. ``counts`` covers the
    pods whose observations were all kept."""
    counts = counts if counts is not None else YearCounts()
    lo = since or spec.start
    hi = until or spec.end
    rng = random.Random(spec.seed)
    pools = _Pools(spec)
    weights = [w[-1] for w in WORKLOADS]
    hour = timedelta(hours=1)
    n = 0
    root: str | None = None
    for day in range(spec.days):
        base = spec.start + timedelta(days=day)
        if base >= hi:
            return
        # whole seconds, so that an independent accounting is exact
        arrivals = sorted(rng.randrange(86400) for _ in range(spec.pods_per_day))
        picks = rng.choices(WORKLOADS, weights=weights, k=spec.pods_per_day)
        jitter = [rng.expovariate(1.0) for _ in range(spec.pods_per_day)]
        for offset, (client, task, agent_type, tier, gpus, mig, minutes, _), j in zip(arrivals, picks, jitter,
                                                                                       strict=True):
            n += 1
            uid = _uid(spec.seed, n)
            placed = pools.place(gpus, base + timedelta(seconds=offset), round(minutes * j) + 1, spec.end)
            # Agent trees as in the week: agents hang under the latest root, about ten to a tree.
            is_agent = agent_type != "unattributed"
            depth, parent = 0, uid
            if is_agent and (root is None or n % 10 == 0):
                root = uid
            elif is_agent:
                depth, parent = 1, root or uid
            if placed is None:
                counts.not_started += 1
                continue
            node, _, t0, t1 = placed
            if t1 <= lo:
                continue
            units = MIG_SLICES[mig] if mig else gpus * DENOMINATOR
            labels = {f"{spec.prefix}/client": client, f"{spec.prefix}/task": task, f"{spec.prefix}/tier": tier}
            if is_agent:
                labels |= {f"{spec.prefix}/agent-type": agent_type, f"{spec.prefix}/root-id": root or uid,
                           f"{spec.prefix}/parent-id": parent, f"{spec.prefix}/depth": str(depth)}
            migs = {mig: 1} if mig else {}
            requests = {f"nvidia.com/mig-{mig}": "1"} if mig else {"nvidia.com/gpu": str(gpus)}
            common = (uid, "agents" if is_agent else "training", f"{task}-{n}", node)
            tree = ((root or uid), parent, depth) if is_agent else ("unattributed", "unattributed", None)
            dims: tuple[Any, ...] = (*tree, client, task, agent_type, tier, labels, [])
            whole = 0 if mig else gpus
            observations: list[tuple[datetime, str, str, datetime | None]] = [(t0, "ADDED", "Running", None)]
            tick = t0.replace(minute=0, second=0, microsecond=0) + hour
            while tick < t1:
                observations.append((tick, "list", "Running", None))
                tick += hour
            observations.append((t1, "DELETED", "Succeeded", t1))
            kept = 0
            for at, event, phase, ended in observations:
                if lo <= at < hi:
                    kept += 1
                    yield (spec.run_id, spec.cluster, at, event, *common, phase, t0, ended, whole, migs, requests,
                           {}, *dims)
            counts.pod_rows += kept
            if kept == len(observations):
                held = int((t1 - t0).total_seconds())
                counts.pods += 1
                counts.slice_seconds += held * units
                counts.per_client[client] = counts.per_client.get(client, 0) + held * units


__all__ = ["SOURCE", "WORKLOADS", "YEAR_START", "YearCounts", "YearSpec", "node_rows", "pod_rows"]
