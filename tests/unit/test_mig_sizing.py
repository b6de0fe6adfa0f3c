"""Slice demand from history (core/mig/sizing.py): counts from hourly pods, sizes from framebuffer."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.mig.demand import Gpu, Isolation, SliceRequest, TenantDemand, prepare
from core.mig.planner import plan
from core.mig.profiles import model_named
from core.mig.sizing import (
    SizingError,
    SizingPolicy,
    WorkloadHistory,
    demands_from_history,
    merge_demands,
    quantile,
    size,
)

H100 = "NVIDIA-H100-80GB-HBM3"  # the GFD label value the cost fact carries


def inventory(n: int) -> list[Gpu]:
    return [Gpu(f"GPU-{i}", f"node-{i // 8}", i % 8, "H100-80GB") for i in range(n)]


def hist(tenant: str = "initech", agent: str = "coder", *, hourly: tuple[float, ...] = (1.0,), hours: int = 1,
         fb: tuple[float, ...] = (), gpus: int = 0, profile: str | None = None, model: str | None = H100,
         pods: int = 1) -> WorkloadHistory:
    return WorkloadHistory(tenant, agent, model, hours, pods, hourly, fb, gpus, profile)


def test_quantile_is_nearest_rank() -> None:
    assert quantile([], 0.95) == 0.0
    assert quantile([5.0, 1.0, 3.0], 0.5) == 3.0
    assert quantile(list(map(float, range(1, 101))), 0.95) == 95.0
    assert quantile([2.0, 9.0], 1.0) == 9.0


def test_whole_gpu_inference_agent_is_sized_down_to_the_slice_its_memory_needs() -> None:
    # 20 pods on whole H100s, never above 9 GiB of framebuffer: 9 x 1.2 = 10.8 GiB -> 1g.20gb, not 1g.10gb;
    # with 1.0 headroom it would be 1g.10gb (9.75 GiB usable)
    s = size(hist(hourly=(18.2, 20.0, 19.5), hours=3, fb=(9216.0,) * 20, gpus=1, pods=60))
    assert s.basis == "memory" and s.memory_gib == 10.8 and s.concurrency == 20.0 and s.arrival_rate == 20.0
    assert s.request == SliceRequest("H100-80GB", 20, memory_gib=10.8, compute_slices=1)
    prepared = prepare([TenantDemand("initech", "mig", (s.request,))], inventory(4))
    assert prepared.unmet == [] and {n.profile for n in prepared.groups["H100-80GB"][-1].needs} == {"1g.20gb"}


def test_idle_hours_count_so_a_rare_burst_does_not_set_the_layout() -> None:
    # 10 pods in 1 hour of 100: p95 of the window is 0 pods -> nothing wanted, said so
    s = size(hist(hourly=(10.0,), hours=100, fb=(1000.0,) * 5))
    assert (s.request, s.basis, s.concurrency) == (None, "no use", 0.0)
    # float sums just above a whole pod are that pod, not one more
    assert size(hist(hourly=(2.0000000000004,))).request == SliceRequest("H100-80GB", 2, whole_gpu=True)


def test_unmeasured_pods_keep_what_they_asked_for_and_multi_gpu_pods_stay_whole() -> None:
    mig = size(hist(hourly=(2.5,), profile="3g.40gb", fb=(5000.0, 6000.0)))  # 2 samples < 3: unmeasured
    assert (mig.basis, mig.request) == ("requested profile", SliceRequest("H100-80GB", 3, profile="3g.40gb"))
    train = size(hist(hourly=(2.0,), gpus=8, fb=(70_000.0,) * 10))
    assert (train.basis, train.request) == ("whole GPUs", SliceRequest("H100-80GB", 16, whole_gpu=True))
    big = size(hist(hourly=(1.0,), gpus=1, fb=(75_000.0,) * 4))  # 88 GiB with headroom: no profile serves
    assert (big.basis, big.request) == ("whole GPUs", SliceRequest("H100-80GB", 1, whole_gpu=True))


def test_bad_rows_are_skipped_with_their_reason_never_dropped() -> None:
    out = demands_from_history([
        hist("initech", hourly=(1.0,), fb=(4096.0,) * 3),
        hist("", "coder"),
        hist("unattributed"),
        hist("globex", model="NVIDIA-RTX-9000"),
        hist("globex", "planner", model=None),
        hist("umbrella", hourly=(float("nan"),)),
        hist("umbrella", "eval", fb=(-1.0, 5.0, 5.0)),
        hist("hooli", hourly=(1.0, 1.0), hours=1),
        hist("hooli", "x", hours=0),
    ], {"initech": "dedicated"})
    assert [d.tenant for d in out.demands] == ["initech"] and out.demands[0].isolation == "dedicated"
    reasons = "\n".join(out.skipped)
    assert len(out.skipped) == 8
    for fragment in ("/coder on NVIDIA-H100-80GB-HBM3: no tenant",
                     "unattributed/coder on NVIDIA-H100-80GB-HBM3: pods without a tenant label",
                     "globex/coder on NVIDIA-RTX-9000: unknown GPU model 'NVIDIA-RTX-9000'",
                     "globex/planner on None: no GPU model",
                     "umbrella/coder on NVIDIA-H100-80GB-HBM3: 1 hourly pod count(s) not a finite",
                     "umbrella/eval on NVIDIA-H100-80GB-HBM3: 1 framebuffer reading(s)",
                     "hooli/coder on NVIDIA-H100-80GB-HBM3: 2 hours of use in a window of 1",
                     "hooli/x on NVIDIA-H100-80GB-HBM3: a window of 0 hours"):
        assert fragment in reasons


def test_default_isolation_and_merge_with_the_site_file() -> None:
    history = demands_from_history([hist("initech", hourly=(1.0,), fb=(4096.0,) * 3),
                                    hist("newco", hourly=(2.0,), profile="1g.10gb")]).demands
    assert {d.tenant: d.isolation for d in history} == {"initech": Isolation.MIG, "newco": Isolation.MIG}
    site = (TenantDemand("initech", "shared", ()),
            TenantDemand("acme", "dedicated", (SliceRequest(H100, 1, "7g.80gb"),)),
            TenantDemand("newco", "dedicated", (SliceRequest(H100, 1, "2g.20gb"),)))
    merged = {d.tenant: d for d in merge_demands(site, history)}
    assert merged["initech"] == TenantDemand("initech", "shared", history[0].requests)  # site class, history slices
    assert merged["newco"] == site[2] and merged["acme"] == site[1]  # explicit slices win
    assert list(merged) == ["initech", "acme", "newco"]


@pytest.mark.parametrize(("field", "value", "match"), [
    ("concurrency_quantile", 0.0, "concurrency_quantile must be in"),
    ("memory_quantile", 1.5, "memory_quantile must be in"),
    ("memory_headroom", 0.9, "memory_headroom must be in"),
    ("compute_slices", 8, "compute_slices must be 1..7"),
    ("min_memory_samples", 0, "min_memory_samples must be a positive integer"),
])
def test_bad_policy_is_refused(field: str, value: float, match: str) -> None:
    with pytest.raises(SizingError, match=match):
        SizingPolicy(**{field: value})  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(hourly=st.lists(st.floats(0, 40, allow_nan=False), min_size=1, max_size=24),
       fb=st.lists(st.floats(0, 79_000, allow_nan=False), max_size=12), gpus=st.integers(0, 8))
def test_every_sized_request_is_one_the_planner_serves_in_full(hourly: list[float], fb: list[float], gpus: int) -> None:
    s = size(hist(hourly=tuple(hourly), hours=24, fb=tuple(fb), gpus=gpus, profile=None if gpus else "1g.10gb"))
    if s.request is None:
        assert round(s.concurrency, 9) == 0  # below a billionth of a pod is no pod
        return
    assert s.request.count >= math.ceil(quantile([*hourly, *[0.0] * (24 - len(hourly))], 0.95) - 1e-6)
    fits = True
    if s.basis == "memory":  # the slice holds the measured peak (with its headroom where a profile allows)
        assert s.memory_gib is not None and s.memory_gib >= quantile(fb, 0.99) / 1024
        fits = any(p.memory_gib >= s.memory_gib for p in model_named(H100).profiles)
    # 40 pods of 8 whole GPUs at most (the strategies above): an inventory that can hold them all
    result = plan(inventory(320), [TenantDemand("t", "mig", (s.request,))], max_per_window=320)
    if fits:
        assert result.complete, result.unmet
    else:  # a MIG pod that used more than any instance holds: refused with the reason, never dropped
        assert len(result.unmet) == 1 and result.unmet[0].reason.startswith("no profile of H100-80GB serves")
