"""Settle-on-finish policy (``core.budget.settlement``): which reservations settle, and at what."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from core.budget import CostLines, PodLife, Reservation, SettlementPolicy, SettleRule, settlement

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
POLICY = SettlementPolicy(cost_wait_s=3600, unseen_after_s=900)
# 2 GPUs x 1.5 expected hours at $3: reserved 3 GPU-h / $9
RES = Reservation("root", "a1", "agents", "pod-a1", Decimal(2), Decimal(3), Decimal(9), T0)
ENDED = T0 + timedelta(minutes=45)
FINISHED = PodLife(seen=True, finished=True, finished_at=ENDED, held_seconds=Decimal(2700))  # 45 min
NO_COST = CostLines()
FULL = CostLines(lines=1, seconds=Decimal(2700), gpu_hours=Decimal("1.5"), cost_usd=Decimal("4.2"))


def decide(
    pod: PodLife,
    cost: CostLines = NO_COST,
    now: datetime = ENDED + timedelta(minutes=5),
    listed: datetime | None = None,
) -> tuple[SettleRule, Decimal, Decimal, bool]:
    s = settlement(RES, pod, cost, now, POLICY, tree_listed_at=listed)
    return s.rule, s.gpu_hours, s.cost_usd, s.settles


def test_finished_pod_covered_by_the_cost_fact_settles_at_measured_usage() -> None:
    assert decide(FINISHED, FULL) == (SettleRule.MEASURED, Decimal("1.5"), Decimal("4.2"), True)


def test_running_pod_never_settles_whatever_the_cost_fact_says() -> None:
    running = PodLife(seen=True, finished=False, held_seconds=Decimal(2700))
    assert decide(running, FULL, now=T0 + timedelta(days=30))[0] is SettleRule.RUNNING
    assert not settlement(RES, running, FULL, T0 + timedelta(days=30), POLICY, tree_listed_at=None).settles


def test_cost_fact_behind_the_pod_waits_then_settles_from_snapshots() -> None:
    # dbt built the fact while the pod still ran: it covers 30 of its 45 minutes
    partial = CostLines(lines=1, seconds=Decimal(1800), gpu_hours=Decimal(1), cost_usd=Decimal("2.8"))
    for cost in (CostLines(), partial):
        assert decide(FINISHED, cost, now=ENDED + timedelta(seconds=3599))[0] is SettleRule.COST_PENDING
        rule, hours, usd, settles = decide(FINISHED, cost, now=ENDED + timedelta(seconds=3600))
        # 2 GPUs x 2700 s = 1.5 GPU-h at admission's $3/GPU-h
        assert (rule, hours, usd, settles) == (SettleRule.ESTIMATED, Decimal("1.5"), Decimal("4.5"), True)
    s = settlement(RES, FINISHED, CostLines(), ENDED + timedelta(hours=2), POLICY, tree_listed_at=None)
    assert s.audited and "no cost line" in s.reason


def test_pod_that_never_held_a_gpu_settles_at_zero_without_waiting() -> None:
    never_started = PodLife(seen=True, finished=True, finished_at=ENDED, held_seconds=Decimal(0))
    assert decide(never_started) == (SettleRule.NO_GPU_TIME, Decimal(0), Decimal(0), True)
    cpu_only = Reservation("root", "c", "agents", "c", Decimal(0), Decimal(0), Decimal(0), T0)
    s = settlement(cpu_only, FINISHED, CostLines(), ENDED, POLICY, tree_listed_at=None)
    assert s.rule is SettleRule.NO_GPU_TIME and s.settles and not s.audited


@pytest.mark.parametrize(
    ("listed", "rule"),
    [
        (None, SettleRule.NOT_SEEN_YET),  # no pod of the tree seen: its cluster may not be collected
        (T0 + timedelta(seconds=899), SettleRule.NOT_SEEN_YET),  # the pod may simply be new
        (T0 + timedelta(seconds=900), SettleRule.NEVER_SEEN),
    ],
)
def test_reservation_no_snapshot_ever_showed_is_released_after_the_bound(
    listed: datetime | None, rule: SettleRule
) -> None:
    s = settlement(RES, PodLife(seen=False), CostLines(), T0 + timedelta(days=1), POLICY, tree_listed_at=listed)
    assert s.rule is rule
    if rule is SettleRule.NEVER_SEEN:
        assert (s.gpu_hours, s.cost_usd, s.settles, s.audited) == (Decimal(0), Decimal(0), True, True)


def test_unpriced_hours_are_priced_at_the_admission_rate_and_audited() -> None:
    cost = CostLines(
        lines=2,
        seconds=Decimal(2700),
        gpu_hours=Decimal("1.5"),
        cost_usd=Decimal("2.8"),
        unpriced_gpu_hours=Decimal("0.5"),
    )
    s = settlement(RES, FINISHED, cost, ENDED, POLICY, tree_listed_at=None)
    assert (s.rule, s.gpu_hours, s.cost_usd) == (SettleRule.MEASURED, Decimal("1.5"), Decimal("4.3"))
    assert s.audited and "unpriced" in s.reason


def test_settled_amounts_have_the_ledger_precision() -> None:
    third = PodLife(seen=True, finished=True, finished_at=ENDED, held_seconds=Decimal(1000))
    s = settlement(RES, third, CostLines(), ENDED + timedelta(hours=1), POLICY, tree_listed_at=None)
    assert s.gpu_hours == Decimal("0.555555556") and s.cost_usd == Decimal("1.666666668")
