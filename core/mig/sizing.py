"""Slice demand from the warehouse's history (issue 21, part 1: demand from history).

The site file says what a tenant asks for (``core.mig.demand``); the warehouse says what its agent
types actually did: how many of their pods held GPUs at once, hour by hour (from the cost fact's
seconds), and how much framebuffer each pod used at its peak (DCGM ``DCGM_FI_DEV_FB_USED``, MiB).
This module turns one window of that history into :class:`~core.mig.demand.SliceRequest` s, per
tenant, agent type and GPU model:

* **how many**: the ``concurrency_quantile`` (default p95) of the hourly mean number of pods
  holding GPUs, over every hour of the window (idle hours count as 0), rounded up: the steady
  demand a static layout should serve; bursts above it queue or go to whole GPUs (burst admission).
* **how big**: the ``memory_quantile`` (default p99, nearest rank) of the pods' peak framebuffer,
  times ``memory_headroom`` (default 1.2), as ``memory_gib`` with ``compute_slices`` -- the planner
  resolves it to the smallest profile that serves it. Whole-GPU pods whose memory fits a profile
  are sized down to it (what issue 21 is for: an inference agent on a whole H100 that uses 9 GiB).
* **as asked** when fewer than ``min_memory_samples`` pods were measured: the MIG profile the pods
  requested, or whole GPUs; pods of several GPUs always stay whole GPUs (they are not slices), and
  so does a one-GPU pod whose memory no profile serves.

Everything is pure: the service (``services.mig.history``) reads the warehouse. Bad rows (no
tenant, unknown GPU model, non-finite or negative numbers) are not dropped silently: they come
back in :attr:`HistoryDemand.skipped` with the reason.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from core.mig.demand import Isolation, SliceRequest, TenantDemand, resolve_profile
from core.mig.profiles import UnknownModelError, model_named
from core.quantiles import nearest_rank

MIB_PER_GIB = 1024


class SizingError(ValueError):
    """A sizing policy that cannot be applied (a quantile outside (0, 1], headroom below 1, ...)."""


@dataclass(frozen=True)
class WorkloadHistory:
    """What one window of the warehouse holds for one tenant's agent type on one GPU model."""

    tenant: str
    agent_type: str
    model: str | None
    hours: int  # hours in the window
    pods: int  # pods seen holding GPUs
    hourly_pods: tuple[float, ...]  # per hour with any use: mean pods holding GPUs (pod-seconds / 3600)
    fb_used_mib: tuple[float, ...] = ()  # per measured pod: its peak framebuffer used, MiB
    gpus_per_pod: int = 0  # whole GPUs a pod asked for (the largest seen); 0 for MIG pods
    profile: str | None = None  # the MIG profile its pods asked for most, if any


@dataclass(frozen=True)
class SizingPolicy:
    concurrency_quantile: float = 0.95
    memory_quantile: float = 0.99
    memory_headroom: float = 1.2
    compute_slices: int = 1
    min_memory_samples: int = 3

    def __post_init__(self) -> None:
        for name in ("concurrency_quantile", "memory_quantile"):
            q = getattr(self, name)
            if not isinstance(q, (int, float)) or not 0 < q <= 1:
                raise SizingError(f"{name} must be in (0, 1], not {q!r}")
        if not isinstance(self.memory_headroom, (int, float)) or not 1 <= self.memory_headroom <= 10:
            raise SizingError(f"memory_headroom must be in [1, 10], not {self.memory_headroom!r}")
        if not isinstance(self.compute_slices, int) or not 1 <= self.compute_slices <= 7:
            raise SizingError(f"compute_slices must be 1..7, not {self.compute_slices!r}")
        if not isinstance(self.min_memory_samples, int) or self.min_memory_samples < 1:
            raise SizingError(f"min_memory_samples must be a positive integer, not {self.min_memory_samples!r}")


DEFAULT_POLICY = SizingPolicy()


@dataclass(frozen=True)
class Sized:
    """One history row's outcome: the request (None when nothing is wanted) and why."""

    history: WorkloadHistory
    request: SliceRequest | None
    basis: str  # "memory", "requested profile", "whole GPUs", "no use"
    concurrency: float  # the quantile of hourly pods the count came from
    memory_gib: float | None  # the sized memory (headroom included), when measured
    arrival_rate: float  # pods per hour over the window


@dataclass
class HistoryDemand:
    demands: tuple[TenantDemand, ...]
    sized: list[Sized] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "<tenant>/<agent type> on <model>: <why>"


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (the smallest value with at least ``q`` of the values at or below it)."""
    return nearest_rank(values, q) if values else 0.0


def _finite(values: Iterable[object]) -> tuple[list[float], int]:
    """The finite non-negative numbers of ``values``, and how many others there were."""
    items = list(values)
    good = [float(v) for v in items
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0]
    return good, len(items) - len(good)


def size(history: WorkloadHistory, policy: SizingPolicy = DEFAULT_POLICY) -> Sized:
    """One tenant/agent-type/model history -> a slice request (see the module docstring).

    Raises UnknownModelError for a GPU model core.mig does not know, ValueError for bad numbers
    (:func:`demands_from_history` turns both into ``skipped`` lines)."""
    if not isinstance(history.model, str) or not history.model:
        raise UnknownModelError("no GPU model (the pods' nodes were never observed)")
    model = model_named(history.model)
    if isinstance(history.hours, bool) or not isinstance(history.hours, int) or history.hours < 1:
        raise ValueError(f"a window of {history.hours!r} hours")
    hourly, bad_hours = _finite(history.hourly_pods)
    if bad_hours:
        raise ValueError(f"{bad_hours} hourly pod count(s) not a finite non-negative number")
    if len(hourly) > history.hours:
        raise ValueError(f"{len(hourly)} hours of use in a window of {history.hours}")
    fb, bad_fb = _finite(history.fb_used_mib)
    if bad_fb:
        raise ValueError(f"{bad_fb} framebuffer reading(s) not a finite non-negative number")
    concurrency = quantile([*hourly, *[0.0] * (history.hours - len(hourly))], policy.concurrency_quantile)
    count = math.ceil(round(concurrency, 9))  # 2.0000000001 of float sums is 2 pods, not 3
    rate = history.pods / history.hours
    memory = peak = None
    if len(fb) >= policy.min_memory_samples:
        peak = quantile(fb, policy.memory_quantile) / MIB_PER_GIB
        memory = math.ceil(max(peak * policy.memory_headroom, 0.001) * 1000) / 1000  # never rounded below the peak
    if count == 0:
        return Sized(history, None, "no use", concurrency, memory, rate)
    gpus = history.gpus_per_pod if isinstance(history.gpus_per_pod, int) and history.gpus_per_pod > 0 else 0
    if gpus > 1:  # a multi-GPU pod is not a slice candidate
        return Sized(history, SliceRequest(model.name, count * gpus, whole_gpu=True), "whole GPUs", concurrency,
                     memory, rate)
    if memory is not None and peak is not None:
        if resolve_profile(model, memory, policy.compute_slices) is None and not gpus:
            # a MIG pod ran in some instance: its peak fits one even when peak + headroom fits none
            memory = math.ceil(max(peak, 0.001) * 1000) / 1000
        if resolve_profile(model, memory, policy.compute_slices) is not None or not gpus:
            # (a MIG pod whose peak fits no profile is left for the planner to refuse, with the reason)
            request = SliceRequest(model.name, count, memory_gib=memory, compute_slices=policy.compute_slices)
            return Sized(history, request, "memory", concurrency, memory, rate)
        return Sized(history, SliceRequest(model.name, count, whole_gpu=True), "whole GPUs", concurrency, memory, rate)
    if history.profile is not None and not gpus:
        return Sized(history, SliceRequest(model.name, count, profile=history.profile), "requested profile",
                     concurrency, None, rate)
    return Sized(history, SliceRequest(model.name, count, whole_gpu=True), "whole GPUs", concurrency, None, rate)


def demands_from_history(
    histories: Iterable[WorkloadHistory],
    isolation: dict[str, str] | None = None,
    policy: SizingPolicy = DEFAULT_POLICY,
    *,
    default_isolation: Isolation = Isolation.MIG,
    skip_tenants: frozenset[str] = frozenset({"unattributed"}),
) -> HistoryDemand:
    """Size every history row and gather the requests per tenant; ``isolation`` (tenant -> class,
    e.g. from the site file) says how each tenant may share a GPU, ``default_isolation`` the rest.
    Pods without a tenant (``unattributed``) cannot be isolated by tenant: skipped, with the reason."""
    classes = isolation or {}
    per_tenant: dict[str, list[SliceRequest]] = defaultdict(list)
    out = HistoryDemand(())
    for h in histories:
        where = f"{h.tenant}/{h.agent_type} on {h.model}"
        if not isinstance(h.tenant, str) or not h.tenant.strip():
            out.skipped.append(f"{where}: no tenant")
            continue
        if h.tenant in skip_tenants:
            out.skipped.append(f"{where}: pods without a tenant label cannot be isolated by tenant")
            continue
        try:
            sized = size(h, policy)
        except (UnknownModelError, ValueError) as err:
            out.skipped.append(f"{where}: {err}")
            continue
        out.sized.append(sized)
        if sized.request is not None:
            per_tenant[h.tenant].append(sized.request)
    out.demands = tuple(TenantDemand(t, classes.get(t, default_isolation), tuple(reqs))
                        for t, reqs in sorted(per_tenant.items()))
    return out


def merge_demands(site: Sequence[TenantDemand], history: Sequence[TenantDemand]) -> tuple[TenantDemand, ...]:
    """The site file's demand, completed by history: a tenant whose site entry lists slices keeps
    them (explicit policy wins); one listed without slices takes its history's requests under the
    site's isolation class; tenants only history knows are added (with their history's class)."""
    from_history = {d.tenant: d for d in history}
    merged = []
    for d in site:
        if d.requests or d.tenant not in from_history:
            merged.append(d)
        else:
            merged.append(TenantDemand(d.tenant, d.isolation, from_history[d.tenant].requests))
    listed = {d.tenant for d in site}
    merged += [d for d in history if d.tenant not in listed]
    return tuple(merged)
