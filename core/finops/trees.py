"""Agent-tree usage: what the budget controller reads per root id.

Built from the latest known state of every pod of a tree (one record per pod): GPU-hours and cost
so far (finished pods up to their end, live pods up to ``as_of``), live pods, depth, fan-out and
the burn rate if nothing changes (GPU units held now x their rate). Cost uses the rate in force at
``as_of`` for the whole tree (an estimate for control; the hourly fact prices each hour).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from core.finops.labels import UNATTRIBUTED
from core.finops.money import round_line

LIVE_PHASES = frozenset({"Pending", "Running", "Unknown"})


@dataclass(frozen=True)
class TreePod:
    uid: str
    cluster: str
    root_id: str
    parent_id: str
    depth: int | None
    client: str
    task: str
    agent_type: str
    tier: str
    node: str | None
    phase: str | None
    start: datetime | None
    end: datetime | None
    last_seen: datetime
    units: Fraction  # GPUs held (MIG weighted)


@dataclass
class TreeUsage:
    root_id: str
    client: str
    task: str
    agent_type: str
    tier: str
    clusters: list[str]
    pods_total: int
    live_pods: int
    max_depth: int | None
    max_fan_out: int
    gpus_live: Decimal
    gpu_hours: Decimal
    cost_usd: Decimal | None
    burn_rate_usd_per_hour: Decimal | None
    unpriced_pods: int
    first_start: datetime | None
    as_of: datetime
    pod_uids: list[str] = field(default_factory=list, repr=False)


def is_live(pod: TreePod) -> bool:
    return pod.end is None and (pod.phase in LIVE_PHASES or pod.phase is None)


def tree_usage(
    pods: Iterable[TreePod],
    as_of: datetime,
    rate: Callable[[TreePod], Decimal | None],
) -> list[TreeUsage]:
    """One row per root id (pods without a root id are not in any tree). ``rate`` is USD per
    GPU-hour for a pod, None when unpriced."""
    by_root: dict[str, list[TreePod]] = {}
    for p in pods:
        if p.root_id != UNATTRIBUTED:
            by_root.setdefault(p.root_id, []).append(p)
    out: list[TreeUsage] = []
    for root_id, members in sorted(by_root.items()):
        # The root pod names the tree; failing that, the shallowest pod seen.
        head = min(members, key=lambda p: (p.uid != root_id and p.parent_id != UNATTRIBUTED,
                                           p.depth if p.depth is not None else 1 << 30, p.uid))
        hours = Fraction(0)
        cost: Fraction | None = Fraction(0)
        burn: Fraction | None = Fraction(0)
        live_units = Fraction(0)
        unpriced = 0
        children: Counter[str] = Counter()
        for p in members:
            if p.parent_id != UNATTRIBUTED:
                children[p.parent_id] += 1
            live = is_live(p)
            if p.start is not None:
                stop = p.end if p.end is not None else (as_of if live else p.last_seen)
                seconds = max((stop - p.start).total_seconds(), 0.0)
                pod_hours = Fraction(seconds).limit_denominator(10**6) / 3600 * p.units
                hours += pod_hours
                price = rate(p)
                if price is None:
                    unpriced += 1 if p.units else 0
                    if p.units:
                        cost = None
                elif cost is not None:
                    cost += pod_hours * Fraction(price)
                if live:
                    live_units += p.units
                    if price is None:
                        burn = None if p.units else burn
                    elif burn is not None:
                        burn += p.units * Fraction(price)
        depths = [p.depth for p in members if p.depth is not None]
        out.append(
            TreeUsage(
                root_id=root_id,
                client=head.client,
                task=head.task,
                agent_type=head.agent_type,
                tier=head.tier,
                clusters=sorted({p.cluster for p in members}),
                pods_total=len(members),
                live_pods=sum(1 for p in members if is_live(p)),
                max_depth=max(depths) if depths else None,
                max_fan_out=max(children.values(), default=0),
                gpus_live=round_line(live_units),
                gpu_hours=round_line(hours),
                cost_usd=None if cost is None else round_line(cost),
                burn_rate_usd_per_hour=None if burn is None else round_line(burn),
                unpriced_pods=unpriced,
                first_start=min((p.start for p in members if p.start is not None), default=None),
                as_of=as_of,
                pod_uids=sorted(p.uid for p in members),
            )
        )
    return out
