"""Warm headroom for bursts (issue 20, part 4): how much room to hold for the next burst, pure.

A burst pod released by the admission controller runs at once only if some node has its GPU or
MIG slice free. Free room on a busy cluster does not stay free: batch work backfills it between
bursts. Headroom is room held for the burst by **placeholder pods**: one GPU or one MIG slice
each, at a priority below every real pod and with no grace period, so kube-scheduler preempts one
the moment a real pod needs its room (the cluster-autoscaler's over-provisioning pattern). The
controller counts a placeholder's room as free for burst pods and refills placeholders only when
no burst pod is waiting (``controllers/burst_admission.py``).

**How much.** A forecast from the history of agent pods (``raw.k8s_pod_lag``): per agent type and
tier, for each day of the history, the busiest ``lead_s`` window (the units of each resource asked
for by pods created in it); the forecast is the ``quantile`` of those daily peaks (a day with no
pod counts as a peak of 0), "the burst most days bring within the time it takes room to free up
by itself". Summed per resource and capped at ``max_fraction`` of the cluster's GPUs, higher tiers
kept first (a MIG slice counts as its share of a GPU: a ``k``g profile is k/7 of one; held room
costs what the GPU costs, whoever runs on it).

Nothing here talks to a cluster or a database.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from fractions import Fraction

from core.burst import MIG_PREFIX, WHOLE_GPU, tier_rank
from core.quantiles import nearest_rank

COMPUTE_SLICES_PER_GPU = 7  # A100, H100, H200, B200: a MIG "kg" profile holds k of 7 compute slices
_PROFILE = re.compile(r"^nvidia\.com/mig-(\d+)g\.")


class HeadroomError(ValueError):
    """A policy value out of range (the message names it)."""


@dataclass(frozen=True)
class HeadroomPolicy:
    lead_s: float = 60.0  # the window whose arrivals the headroom must absorb
    quantile: float = 0.8  # of the daily peaks: 0.5 the median day's burst, 1.0 the worst day's
    max_fraction: float = 0.05  # of the cluster's GPUs, at most

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lead_s) and 1 <= self.lead_s <= 86_400):
            raise HeadroomError(f"lead_s must be between 1 and 86400 seconds, not {self.lead_s}")
        if not 0 < self.quantile <= 1:
            raise HeadroomError(f"quantile must be in (0, 1], not {self.quantile}")
        if not 0 <= self.max_fraction <= 1:
            raise HeadroomError(f"max_fraction must be in [0, 1], not {self.max_fraction}")


@dataclass(frozen=True)
class DemandSample:
    """One agent pod from history: when it was created, what it was and what it asked for."""

    created_at: datetime
    agent_type: str
    tier: str
    requests: Mapping[str, int]  # counted resources only (whole GPUs, MIG profiles)


Group = tuple[str, str, str]  # (agent type, tier, resource)


@dataclass(frozen=True)
class Forecast:
    by_group: Mapping[Group, int]  # units to hold per (agent type, tier, resource)
    days: int  # days of history the quantile was taken over

    def units(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for (_, _, resource), n in self.by_group.items():
            out[resource] = out.get(resource, 0) + n
        return out


def gpu_share(resource: str) -> Fraction:
    """What one unit of ``resource`` is of a GPU: 1 for ``nvidia.com/gpu``, k/7 for a MIG ``kg``
    profile, 0 for anything else (not a GPU, never held)."""
    if resource == WHOLE_GPU:
        return Fraction(1)
    match = _PROFILE.match(resource)
    if match and resource.startswith(MIG_PREFIX):
        return Fraction(min(int(match.group(1)), COMPUTE_SLICES_PER_GPU), COMPUTE_SLICES_PER_GPU)
    return Fraction(0)


def gpus_of(units: Mapping[str, int]) -> Fraction:
    """GPUs that many units of each resource amount to."""
    return sum((gpu_share(r) * n for r, n in units.items()), Fraction(0))


def forecast(samples: Iterable[DemandSample], policy: HeadroomPolicy) -> Forecast:
    """Per (agent type, tier, resource): the ``quantile`` over the history's days of each day's
    busiest ``lead_s`` window (units asked for by pods created in it). Windows are aligned to the
    day (UTC), so a burst astride two windows is split: the forecast errs low, never high."""
    window = timedelta(seconds=policy.lead_s)
    demand: dict[Group, dict[tuple[date, int], int]] = {}
    days: set[date] = set()
    for s in samples:
        when = s.created_at.astimezone(UTC)
        day = when.date()
        days.add(day)
        slot = int((when - datetime(day.year, day.month, day.day, tzinfo=UTC)) / window)
        for resource, n in s.requests.items():
            if n > 0 and gpu_share(resource) > 0:
                windows = demand.setdefault((s.agent_type, s.tier, resource), {})
                windows[(day, slot)] = windows.get((day, slot), 0) + n
    if not days:
        return Forecast({}, 0)
    span = [min(days) + timedelta(days=k) for k in range((max(days) - min(days)).days + 1)]
    by_group: dict[Group, int] = {}
    for group, windows in demand.items():
        peaks = {day: 0 for day in span}
        for (day, _), n in windows.items():
            peaks[day] = max(peaks[day], n)
        value = nearest_rank(sorted(peaks.values()), policy.quantile)
        if value > 0:
            by_group[group] = int(value)
    return Forecast(by_group, len(span))


def capped(fc: Forecast, cluster_gpus: float, policy: HeadroomPolicy) -> dict[str, int]:
    """Units to hold per resource: the forecast, groups taken highest tier first (then the larger
    share of a GPU, then by name) while their GPUs fit ``max_fraction`` of ``cluster_gpus``; a
    group that does not fit whole gets what is left."""
    budget = Fraction(math.floor(policy.max_fraction * cluster_gpus * 1_000_000), 1_000_000)
    held: dict[str, int] = {}
    for (_, _, resource), n in sorted(
        fc.by_group.items(), key=lambda kv: (tier_rank(kv[0][1]), -gpu_share(kv[0][2]), kv[0])
    ):
        share = gpu_share(resource)
        take = min(n, math.floor(budget / share))
        if take <= 0:
            continue
        held[resource] = held.get(resource, 0) + take
        budget -= share * take
    return held


@dataclass(frozen=True)
class PlaceholderChange:
    create: Mapping[str, int]  # resource -> placeholders to add
    delete: tuple[str, ...]  # placeholder pod keys (namespace/name) to remove


def placeholder_change(desired: Mapping[str, int], live: Mapping[str, list[str]], free: Mapping[str, int],
                       *, burst_waiting: bool) -> PlaceholderChange:  # fmt: skip
    """Bring the placeholders (``live``: resource -> pod keys, oldest first) to ``desired``. Extra
    ones are deleted (newest first) at any time; missing ones are created only when no burst pod
    is waiting (the burst uses room first; headroom refills between bursts) and only into room that
    is free now (``free``: units of each resource outside every placeholder), so a placeholder
    never waits in kube-scheduler's queue."""
    create: dict[str, int] = {}
    delete: list[str] = []
    for resource in sorted(set(desired) | set(live)):
        have, want = live.get(resource, []), max(0, desired.get(resource, 0))
        if len(have) > want:
            delete += list(reversed(have))[: len(have) - want]
        elif len(have) < want and not burst_waiting:
            add = min(want - len(have), max(0, free.get(resource, 0)))
            if add:
                create[resource] = add
    return PlaceholderChange(create, tuple(delete))
