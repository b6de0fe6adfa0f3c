"""Pure budget policy: pod parsing, envelopes, admission decisions, enforcement order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.budget import (
    BudgetConfig,
    Denial,
    Envelope,
    LivePod,
    Node,
    PodPhase,
    PodRequest,
    Step,
    TreeEnvelope,
    decide,
    enforcement_plan,
    parse_envelope,
    parse_pod,
)

P = "gpufabric.io"
NOW = datetime(2026, 12, 31, tzinfo=UTC)
BASE = Envelope(Decimal(10), Decimal(30), 5, 3, 3)
CONFIG = BudgetConfig(
    defaults={"acme/gold": BASE},
    rates_usd_per_gpu_hour={"gold": Decimal("3")},
    expected_hours={"worker": Decimal("0.5")},
)


def pod(
    agent: str, parent: str | None, depth: int, resources: dict[str, str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    labels = {
        f"{P}/agent-id": agent,
        f"{P}/root-id": "root",
        f"{P}/depth": str(depth),
        f"{P}/client": "acme",
        f"{P}/tier": "gold",
        f"{P}/agent-type": "worker",
    }
    if parent:
        labels[f"{P}/parent-id"] = parent
    return {
        "metadata": {"name": agent, "labels": labels, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": resources}}]},
    }


def req(
    agent: str, parent: str | None, depth: int, resources: dict[str, str], annotations: dict[str, str] | None = None
) -> PodRequest:
    r = parse_pod(pod(agent, parent, depth, resources, annotations), "ns", CONFIG)
    assert isinstance(r, PodRequest), r
    return r


def test_reservation_is_mig_weighted_units_times_expected_hours_times_rate() -> None:
    r = req("a", "root", 1, {"nvidia.com/gpu": "2", "nvidia.com/mig-3g.40gb": "7"})  # 2 + 7*3/7 = 5 units
    assert (r.gpu_units, r.expected_hours, r.gpu_hours, r.cost_usd) == (
        Decimal(5),
        Decimal("0.5"),
        Decimal("2.500000000"),
        Decimal("7.500000000"),
    )
    r = req("b", "root", 1, {"nvidia.com/gpu": "1"}, {f"{P}/expected-hours": "4"})
    assert r.gpu_hours == Decimal(4) and r.cost_usd == Decimal(12)


def test_root_envelope_from_annotation_overrides_config_defaults() -> None:
    r = req("root", None, 0, {}, {f"{P}/envelope": '{"gpu_hours": "2", "deadline": "2027-01-01T00:00:00Z"}'})
    assert r.envelope == Envelope(Decimal(2), Decimal(30), 5, 3, 3, datetime(2027, 1, 1, tzinfo=UTC))
    assert r.envelope_source == "annotation"
    assert req("root", None, 0, {}).envelope == BASE
    assert isinstance(parse_pod(pod("root", None, 0, {}, {f"{P}/envelope": '{"bogus": 1}'}), "ns", CONFIG), Denial)


def test_parse_envelope_without_base_needs_every_key() -> None:
    try:
        parse_envelope('{"gpu_hours": 1}', None)
    except ValueError as err:
        assert "lacks ['cost_usd', 'max_depth', 'max_fan_out', 'max_live_pods']" in str(err)
    else:
        raise AssertionError("admitted an incomplete envelope")


def tree(committed: Decimal = Decimal(0), env: Envelope = BASE) -> TreeEnvelope:
    return TreeEnvelope("root", "ns", "acme", "gold", env, committed, committed * 3, Decimal(0), Decimal(0))


def test_child_never_reserves_more_than_its_parents_remainder() -> None:
    nodes = [
        Node("root", None, 0, True, Decimal(1)),
        Node("o", "root", 1, True, Decimal(0), subtree_cap=Decimal(2)),
        Node("w1", "o", 2, True, Decimal("1.5")),
    ]
    d = decide(
        req("w2", "o", 2, {"nvidia.com/gpu": "2"}), tree(Decimal("2.5")), nodes, NOW
    )  # needs 1 GPU-h, o has 0.5 left
    assert (d.allowed, d.limit) == (False, "parent_remainder")
    assert "needs 1 GPU-h, ancestor o has 0.5 left of its subtree cap" in d.reason
    assert decide(req("w2", "o", 2, {"nvidia.com/gpu": "1"}), tree(Decimal("2.5")), nodes, NOW).allowed


def test_denial_names_root_limit_and_what_is_left() -> None:
    d = decide(
        req("w", "root", 1, {"nvidia.com/gpu": "4"}),
        tree(Decimal("8.5")),
        [Node("root", None, 0, True, Decimal(1))],
        NOW,
    )
    assert d.reason == (
        "denied: root root (ns), limit gpu_hours: needs 2 GPU-h, 1.5 left; envelope gpu_hours=10 cost_usd=30 "
        "live_pods=5 depth=3 fan_out=3 deadline=none"
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=40))
def test_sequential_admissions_never_overspend(gpus: list[int]) -> None:
    env = Envelope(Decimal(6), Decimal(1000), 1000, 3, 1000)
    t = tree(Decimal(0), env)
    nodes = [Node("root", None, 0, True, Decimal(0))]
    for i, g in enumerate(gpus):
        r = req(f"w{i}", "root", 1, {"nvidia.com/gpu": str(g)})
        d = decide(r, t, nodes, NOW)
        fits = t.committed_gpu_hours + r.gpu_hours <= env.gpu_hours
        assert d.allowed == fits
        if d.allowed:
            nodes.append(Node(r.agent_id, "root", 1, True, r.gpu_hours))
            t = TreeEnvelope(
                "root",
                "ns",
                "acme",
                "gold",
                env,
                t.reserved_gpu_hours + r.gpu_hours,
                t.reserved_cost_usd + r.cost_usd,
                Decimal(0),
                Decimal(0),
            )
    assert t.committed_gpu_hours <= env.gpu_hours


def test_enforcement_gates_pending_first_then_newest_leaves_and_root_last() -> None:
    def lp(name: str, parent: str | None, depth: int, phase: PodPhase, minute: int) -> LivePod:
        return LivePod("ns", name, name, name, parent, depth, phase, NOW + timedelta(minutes=minute))

    pods = [
        lp("root", None, 0, PodPhase.RUNNING, 0),
        lp("o", "root", 1, PodPhase.RUNNING, 1),
        lp("w-old", "o", 2, PodPhase.RUNNING, 2),
        lp("w-new", "o", 2, PodPhase.RUNNING, 9),
        lp("w-pend", "o", 2, PodPhase.PENDING, 9),
    ]
    over = tree(Decimal(11))
    plan = enforcement_plan(over, pods, NOW + timedelta(minutes=10), alert_only=False, deadline_s=120)
    assert [(a.step, a.pod.name) for a in plan] == [
        (Step.GATE, "w-pend"),
        (Step.DEADLINE, "w-new"),
        (Step.DELETE, "w-old"),
    ]
    assert enforcement_plan(tree(Decimal(9)), pods, NOW, alert_only=False) == []
    only_root = enforcement_plan(over, pods[:1], NOW, alert_only=False)
    assert [(a.step, a.pod.name) for a in only_root] == [(Step.DEADLINE, "root")]
    assert [a.step for a in enforcement_plan(over, pods, NOW, alert_only=True)] == [Step.ALERT]
