"""Warm headroom: the forecast from history, its cap, and bringing placeholders to it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.burst_headroom import (
    DemandSample,
    Forecast,
    HeadroomError,
    HeadroomPolicy,
    capped,
    forecast,
    gpu_share,
    gpus_of,
    placeholder_change,
)

GPU = "nvidia.com/gpu"
MIG1 = "nvidia.com/mig-1g.10gb"
MIG3 = "nvidia.com/mig-3g.40gb"
DAY = datetime(2026, 11, 2, tzinfo=UTC)


def burst(start: datetime, pods: int, agent_type: str = "planner", tier: str = "interactive",
          resource: str = GPU, every_s: float = 1.0) -> list[DemandSample]:  # fmt: skip
    return [DemandSample(start + timedelta(seconds=k * every_s), agent_type, tier, {resource: 1}) for k in range(pods)]


def test_shares_of_a_gpu() -> None:
    assert gpu_share(GPU) == 1
    assert gpu_share(MIG1) == Fraction(1, 7)
    assert gpu_share(MIG3) == Fraction(3, 7)
    assert gpu_share("nvidia.com/mig-7g.80gb") == 1
    assert gpu_share("cpu") == 0 and gpu_share("nvidia.com/mig-") == 0 and gpu_share("nvidia.com/mig-xg.5gb") == 0
    assert gpus_of({GPU: 2, MIG1: 7, "memory": 10}) == 3


def test_the_quantile_of_daily_peaks() -> None:
    # day 1: 30 planners in 30 s (one 60 s window); day 2: 12; day 3: 6 spread 20 s apart over two windows
    history = burst(DAY + timedelta(hours=9), 30) + burst(DAY + timedelta(days=1, hours=9), 12)
    history += burst(DAY + timedelta(days=2, hours=9), 6, every_s=20.0)
    policy = HeadroomPolicy(lead_s=60, quantile=1.0)
    assert forecast(history, policy).by_group == {("planner", "interactive", GPU): 30}
    # the median day: 12 (day 3's busiest window has 3 of its 6)
    assert forecast(history, HeadroomPolicy(lead_s=60, quantile=0.5)).by_group == {("planner", "interactive", GPU): 12}
    assert forecast(history, HeadroomPolicy(lead_s=60, quantile=0.2)).by_group == {("planner", "interactive", GPU): 3}


def test_a_day_without_pods_is_a_peak_of_zero() -> None:
    history = burst(DAY, 10) + burst(DAY + timedelta(days=3), 10)  # days 2 and 3 had nothing
    fc = forecast(history, HeadroomPolicy(quantile=0.5))
    assert fc.days == 4
    assert fc.by_group == {}  # the median day asked for nothing
    assert forecast(history, HeadroomPolicy(quantile=0.75)).by_group == {("planner", "interactive", GPU): 10}


def test_groups_are_kept_apart_and_summed_per_resource() -> None:
    history = burst(DAY, 8) + burst(DAY, 20, agent_type="coder", tier="batch", resource=MIG1)
    history += burst(DAY, 5, agent_type="coder", tier="interactive", resource=MIG1)
    history.append(DemandSample(DAY, "planner", "interactive", {GPU: 0, "cpu": 4}))  # asks for no GPU
    fc = forecast(history, HeadroomPolicy(quantile=1.0))
    assert fc.by_group == {("planner", "interactive", GPU): 8, ("coder", "batch", MIG1): 20,
                           ("coder", "interactive", MIG1): 5}  # fmt: skip
    assert fc.units() == {GPU: 8, MIG1: 25}


def test_no_history_no_headroom() -> None:
    assert forecast([], HeadroomPolicy()) == Forecast({}, 0)
    assert capped(Forecast({}, 0), 8_192, HeadroomPolicy()) == {}


def test_the_cap_keeps_higher_tiers_first() -> None:
    fc = Forecast({("planner", "batch", GPU): 50, ("planner", "interactive", GPU): 30,
                   ("coder", "interactive", MIG1): 70, ("coder", "standard", MIG1): 700}, 7)  # fmt: skip
    # 5% of 1,000 GPUs = 50 GPUs: interactive whole GPUs (30), interactive slices (70 = 10 GPUs),
    # then standard slices for the 10 GPUs left (70 slices); batch gets nothing
    assert capped(fc, 1_000, HeadroomPolicy(max_fraction=0.05)) == {GPU: 30, MIG1: 140}
    assert capped(fc, 1_000, HeadroomPolicy(max_fraction=0.0)) == {}
    assert capped(fc, 1_000_000, HeadroomPolicy(max_fraction=1.0)) == {GPU: 80, MIG1: 770}


@settings(max_examples=200, deadline=None)
@given(
    groups=st.dictionaries(
        st.tuples(st.sampled_from(["planner", "coder"]), st.sampled_from(["interactive", "standard", "batch", "x"]),
                  st.sampled_from([GPU, MIG1, MIG3])),
        st.integers(1, 5_000), max_size=12),
    cluster=st.integers(0, 20_000),
    fraction=st.floats(0, 1),
)  # fmt: skip
def test_the_cap_is_never_exceeded_and_never_inflates(groups: dict, cluster: int, fraction: float) -> None:
    fc = Forecast(groups, 7)
    held = capped(fc, cluster, HeadroomPolicy(max_fraction=fraction))
    assert gpus_of(held) <= Fraction(fraction) * cluster + Fraction(1, 10**6)
    wanted = fc.units()
    assert all(0 < n <= wanted[r] for r, n in held.items())
    if gpus_of(wanted) <= Fraction(int(fraction * cluster * 10**6), 10**6):
        assert held == wanted


def test_placeholders_follow_the_desired_count() -> None:
    live = {GPU: ["ns/p1", "ns/p2", "ns/p3"], MIG1: ["ns/m1"]}
    change = placeholder_change({GPU: 1, MIG1: 4}, live, {GPU: 10, MIG1: 2}, burst_waiting=False)
    assert change.delete == ("ns/p3", "ns/p2")  # newest first
    assert change.create == {MIG1: 2}  # only the free room
    waiting = placeholder_change({GPU: 1, MIG1: 4}, live, {GPU: 10, MIG1: 10}, burst_waiting=True)
    assert waiting.create == {} and waiting.delete == ("ns/p3", "ns/p2")
    gone = placeholder_change({}, live, {}, burst_waiting=False)
    assert sorted(gone.delete) == ["ns/m1", "ns/p1", "ns/p2", "ns/p3"] and gone.create == {}
    assert placeholder_change({GPU: -3}, {}, {GPU: 5}, burst_waiting=False).create == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lead_s": 0}, "lead_s must be between 1 and 86400"),
        ({"lead_s": float("nan")}, "lead_s must be between 1 and 86400"),
        ({"quantile": 0}, "quantile must be in (0, 1]"),
        ({"quantile": 1.5}, "quantile must be in (0, 1]"),
        ({"max_fraction": -0.1}, "max_fraction must be in [0, 1]"),
    ],
)
def test_policy_values_out_of_range_are_refused_by_name(kwargs: dict, message: str) -> None:
    with pytest.raises(HeadroomError, match=message.replace("(", r"\(").replace("[", r"\[").replace("]", r"\]")):
        HeadroomPolicy(**kwargs)


def test_a_large_history_stays_exact() -> None:
    # a year of a day's burst each day: 365 x 2,000 samples; the forecast is the daily burst
    history = [s for d in range(365) for s in burst(DAY + timedelta(days=d), 2_000, every_s=0.01)]
    assert forecast(history, HeadroomPolicy(quantile=0.8)).units() == {GPU: 2_000}
