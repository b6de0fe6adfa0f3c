"""The 847-pod incident, replayed: one compliance task over a 500-property portfolio.

The root orchestrator splits the portfolio into 10 regional orchestrators; each spawns one
analyser per property; a property's *discovered complexity* (seeded) decides how many
sub-agents it spawns; at the end of the quarter (the last stretch of the run) every open
property spawns reconciliation agents at once — the peak that took the incident to 847 pods.
Uncontrolled, that is 1 + 10 + 500 + 336 = 847 pods.

Time is simulated minutes (``now`` = ``start + minute``), so a 90-minute replay runs in seconds.
The replay is I/O-free: the caller passes ``admit`` (the webhook, or always-yes), ``create`` and
``delete`` (the API server) and ``settle`` (the ledger); an agent whose spawn is denied gives its
sub-task up, so its planned children never appear.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

PREFIX = "gpufabric.io"
TOTAL_PODS = 847
PROPERTIES = 500
REGIONS = 10
SUB_AGENTS = TOTAL_PODS - 1 - REGIONS - PROPERTIES  # 336


@dataclass(frozen=True)
class PlannedPod:
    agent_id: str
    parent_id: str | None
    depth: int
    agent_type: str
    start_minute: int
    run_minutes: int
    gpus: int  # whole GPUs; 0 means one MIG 3g.40gb slice (3/7 of a GPU)

    @property
    def units(self) -> Decimal:
        return Decimal(self.gpus) if self.gpus else Decimal(3) / Decimal(7)


def plan(root_id: str, seed: int = 847) -> list[PlannedPod]:
    """Every pod the uncontrolled task would spawn, in spawn order."""
    rng = random.Random(seed)
    pods = [PlannedPod(root_id, None, 0, "orchestrator", 0, 120, 1)]
    regions = [f"{root_id}-reg{r}" for r in range(REGIONS)]
    pods += [PlannedPod(a, root_id, 1, "orchestrator", 1, 110, 0) for a in regions]
    complexity = [rng.random() for _ in range(PROPERTIES)]
    # Sub-agents by complexity: the most complex properties get the most, 336 in all.
    order = sorted(range(PROPERTIES), key=lambda i: -complexity[i])
    subs = [0] * PROPERTIES
    left = SUB_AGENTS
    for rank, i in enumerate(order):
        want = 3 if rank < 40 else 2 if rank < 120 else 1 if rank < 300 else 0
        subs[i] = min(want, left)
        left -= subs[i]
    for i in range(PROPERTIES):
        minute = 2 + i * 55 // PROPERTIES  # ~9 properties a minute over 55 minutes
        prop = f"{root_id}-p{i}"
        # An analyser stays up until the quarter closes (minute 80): it waits for its reconcilers.
        pods.append(PlannedPod(prop, regions[i % REGIONS], 2, "analyser", minute, 80 - minute, 1))
        for s in range(subs[i]):
            # Complex properties explore early; the rest wait for the quarter-end reconciliation
            # that all fires in minutes 60-70 (the peak).
            start = minute + 2 if s == 0 and complexity[i] > 0.8 else 60 + (i + s) % 10
            pods.append(PlannedPod(f"{prop}-s{s}", prop, 3, "reconciler", start, 25, 0 if s % 2 else 1))
    assert len(pods) == TOTAL_PODS
    return sorted(pods, key=lambda p: (p.start_minute, p.depth))


def manifest(p: PlannedPod, root_id: str, client: str, tier: str, prefix: str = PREFIX) -> dict[str, Any]:
    labels = {
        f"{prefix}/agent-id": p.agent_id,
        f"{prefix}/root-id": root_id,
        f"{prefix}/depth": str(p.depth),
        f"{prefix}/client": client,
        f"{prefix}/task": "q4-compliance",
        f"{prefix}/agent-type": p.agent_type,
        f"{prefix}/tier": tier,
    }
    if p.parent_id:
        labels[f"{prefix}/parent-id"] = p.parent_id
    resource = {"nvidia.com/gpu": str(p.gpus)} if p.gpus else {"nvidia.com/mig-3g.40gb": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": p.agent_id,
            "labels": labels,
            "annotations": {f"{prefix}/expected-hours": str(Decimal(p.run_minutes) / 60)},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "agent", "image": "agent:latest", "resources": {"limits": resource}}],
        },
    }


@dataclass
class Minute:
    minute: int
    live_pods: int
    gpu_hours: Decimal  # accrued so far, finished and running
    cost_usd: Decimal
    spawned: int
    denied: int
    observed_live: int | None = None  # live pods as the cluster (twin) lists them, if observed


@dataclass
class ReplayResult:
    minutes: list[Minute] = field(default_factory=list)
    created: int = 0
    denials: list[str] = field(default_factory=list)

    @property
    def peak_live(self) -> int:
        return max(m.live_pods for m in self.minutes)

    @property
    def final_gpu_hours(self) -> Decimal:
        return self.minutes[-1].gpu_hours


def replay(
    root_id: str,
    start: datetime,
    *,
    admit: Callable[[dict[str, Any], datetime], tuple[bool, str]],
    create: Callable[[dict[str, Any]], None],
    delete: Callable[[str], None],
    settle: Callable[[str, Decimal, Decimal, datetime], None],
    rate_usd: Decimal,
    client: str = "acme",
    tier: str = "standard",
    minutes: int = 130,
    observe: Callable[[], int] | None = None,
) -> ReplayResult:
    """Run the task minute by minute. Finished pods are settled with what they actually used
    (their run time x GPU units: the estimate was right) and deleted."""
    result = ReplayResult()
    pending = plan(root_id)
    running: dict[str, tuple[PlannedPod, int]] = {}  # agent → (pod, started minute)
    gone: set[str] = set()  # denied, and everything planned under it
    done_hours = Decimal(0)
    for m in range(minutes + 1):
        now = start + timedelta(minutes=m)
        for agent, (p, began) in list(running.items()):
            if m - began >= p.run_minutes:
                used = p.units * Decimal(p.run_minutes) / 60
                done_hours += used
                settle(agent, used, used * rate_usd, now)
                delete(agent)
                del running[agent]
        spawned = denied = 0
        while pending and pending[0].start_minute <= m:
            p = pending.pop(0)
            if p.parent_id in gone or (p.parent_id is not None and p.parent_id not in running):
                gone.add(p.agent_id)  # its parent never ran or has finished: the sub-task is not started
                continue
            body = manifest(p, root_id, client, tier)
            ok, reason = admit(body, now)
            if not ok:
                denied += 1
                result.denials.append(reason)
                gone.add(p.agent_id)
                continue
            create(body)
            result.created += 1
            spawned += 1
            running[p.agent_id] = (p, m)
        accrued = done_hours + sum((pp.units * Decimal(m - b) / 60 for pp, b in running.values()), Decimal(0))
        result.minutes.append(
            Minute(m, len(running), accrued, accrued * rate_usd, spawned, denied, observe() if observe else None)
        )
    return result
