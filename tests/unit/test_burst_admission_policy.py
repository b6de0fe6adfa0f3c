"""The burst admission policy (core.burst): what is released, what waits, and why."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.budget import Envelope, TreeEnvelope
from core.burst import (
    BadQuantity,
    GatedPod,
    NodeRoom,
    Rooms,
    Toleration,
    envelope_hold,
    gpu_requests,
    plan_release,
    units,
)

GPU, MIG = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
T0 = datetime(2026, 12, 1, tzinfo=UTC)
ENV = Envelope(Decimal(100), Decimal(1000), 3, 4, 10)


def pod(name: str, tier: str = "standard", at: int = 0, asks: dict[str, int] | None = None, root: str | None = None,
        parent: str | None = None, depth: int = 0, **kw: object) -> GatedPod:  # fmt: skip
    return GatedPod("ns", name, f"uid-{name}", name, root or name, parent, tier, T0 + timedelta(seconds=at),
                    asks if asks is not None else {GPU: 1}, depth, **kw)  # type: ignore[arg-type]  # fmt: skip


def tree(root: str, *, state: str = "open", env: Envelope = ENV, committed: Decimal = Decimal(0)) -> TreeEnvelope:
    return TreeEnvelope(root, "ns", "acme", "standard", env, committed, committed * 3, Decimal(0), Decimal(0),
                        state=state)  # fmt: skip


def no_envelope(_root: str) -> None:
    return None


def test_only_what_fits_on_one_node_is_released() -> None:
    # Two nodes with 1 GPU free each: 2 GPUs in total, but no single node has 2.
    nodes = [NodeRoom("a", {GPU: 1}), NodeRoom("b", {GPU: 1})]
    plan = plan_release([pod("big", asks={GPU: 2}), pod("small", at=1)], [], nodes, no_envelope, T0)
    assert [p.name for p in plan.release] == ["small"]
    assert plan.reasons() == {"ns/big": "waiting: no node has 2 nvidia.com/gpu free"}


def test_whole_gpus_and_mig_slices_are_separate_resources() -> None:
    nodes = [NodeRoom("gpu", {GPU: 1}), NodeRoom("mig", {MIG: 2, GPU: 0})]
    gated = [pod("p", asks={GPU: 1}), pod("c1", asks={MIG: 1}, at=1), pod("c2", asks={MIG: 1}, at=2),
             pod("c3", asks={MIG: 1}, at=3), pod("p2", asks={GPU: 1}, at=4)]  # fmt: skip
    plan = plan_release(gated, [], nodes, no_envelope, T0)
    assert [p.name for p in plan.release] == ["p", "c1", "c2"]
    assert plan.placed == {"ns/p": "gpu", "ns/c1": "mig", "ns/c2": "mig"}
    assert set(plan.reasons()) == {"ns/c3", "ns/p2"}


def test_higher_tiers_first_then_oldest() -> None:
    gated = [pod("batch-old", "batch", at=0), pod("std-new", "standard", at=9), pod("int-new", "interactive", at=8),
             pod("std-old", "standard", at=1), pod("odd-tier", "gold", at=0)]  # fmt: skip
    plan = plan_release(gated, [], [NodeRoom("n", {GPU: 3})], no_envelope, T0)
    assert [p.name for p in plan.release] == ["int-new", "std-old", "std-new"]
    assert {h.pod.name for h in plan.held} == {"batch-old", "odd-tier"}  # an unknown tier goes after batch


def test_pods_released_but_not_bound_hold_their_room() -> None:
    in_flight = pod("released", at=0)
    plan = plan_release([pod("next", at=1)], [in_flight], [NodeRoom("n", {GPU: 1})], no_envelope, T0)
    assert plan.release == []
    # A bound pod's room is already out of the node's free figure: it only counts as live.
    bound = replace(in_flight, requests={})
    assert [p.name for p in plan_release([pod("next", at=1)], [bound], [NodeRoom("n", {GPU: 1})], no_envelope,
                                         T0).release] == ["next"]  # fmt: skip


def test_a_tree_goes_parent_first_and_children_wait_for_a_gated_parent() -> None:
    # Same creation second (the API's resolution): depth orders the tree, not the name.
    root = pod("zz-root", at=0, root="r")
    kids = [pod(f"a-kid{i}", at=0, root="r", parent="zz-root", depth=1, asks={MIG: 1}) for i in range(2)]
    plan = plan_release([*kids, root], [], [NodeRoom("n", {GPU: 1, MIG: 7})], no_envelope, T0)
    assert [p.name for p in plan.release] == ["zz-root", "a-kid0", "a-kid1"]
    # No whole GPU for the root: its children wait for it even though slices are free.
    plan = plan_release([*kids, root], [], [NodeRoom("n", {GPU: 0, MIG: 7})], no_envelope, T0)
    assert plan.release == []
    assert plan.reasons()["ns/a-kid0"] == "waiting: parent zz-root is still gated"


def test_envelope_caps_a_runaway_tree_with_a_reason() -> None:
    gated = [pod(f"p{i}", at=i, root="r", asks={MIG: 1}) for i in range(8)]
    plan = plan_release(gated, [], [NodeRoom("n", {MIG: 56})], lambda root: tree(root), T0)
    assert len(plan.release) == ENV.max_live_pods
    assert all(h.annotate and h.reason == "over-envelope: root r has 3 released pods, envelope live_pods=3"
               for h in plan.held) and len(plan.held) == 5  # fmt: skip
    # Pods already released count: one live leaves room for two.
    plan = plan_release(gated, [pod("live", root="r", asks={})], [NodeRoom("n", {MIG: 56})], lambda r: tree(r), T0)
    assert len(plan.release) == 2


@pytest.mark.parametrize(
    ("envelope", "reason"),
    [
        (tree("r", state="over_budget"), "over-envelope: root r is over_budget"),
        (tree("r", committed=Decimal(101)), "over-envelope: root r gpu_hours 101 > 100"),
        (tree("r", env=replace(ENV, deadline=T0)), f"over-envelope: root r deadline {T0.isoformat()} passed"),
        (tree("r", env=replace(ENV, cost_usd=Decimal(1)), committed=Decimal(1)),
         "over-envelope: root r cost_usd 3 > 1"),
    ],
)
def test_a_tree_outside_its_envelope_keeps_every_pod_gated(envelope: TreeEnvelope, reason: str) -> None:
    plan = plan_release([pod("a", root="r"), pod("b", root="r")], [], [NodeRoom("n", {GPU: 8})],
                        lambda _r: envelope, T0)  # fmt: skip
    assert plan.release == []
    assert plan.reasons() == {"ns/a": reason, "ns/b": reason}
    assert envelope_hold(None, 10**6, T0) == ""  # no ledger row: no envelope to enforce here


def test_node_selector_and_taints() -> None:
    tainted = NodeRoom("t", {GPU: 4}, {"pool": "x"}, (("gpu", "true", "NoSchedule"),))
    plain = NodeRoom("p", {GPU: 1}, {"pool": "y"})
    picky = pod("picky", asks={GPU: 2}, node_selector={"pool": "x"})
    assert plan_release([picky], [], [tainted, plain], no_envelope, T0).release == []
    tolerant = replace(picky, tolerations=(Toleration("gpu", "Exists"),))
    assert plan_release([tolerant], [], [tainted, plain], no_envelope, T0).placed == {"ns/picky": "t"}
    wrong_value = replace(picky, tolerations=(Toleration("gpu", "Equal", "false", "NoSchedule"),))
    assert plan_release([wrong_value], [], [tainted], no_envelope, T0).release == []


def test_max_release_caps_a_pass() -> None:
    plan = plan_release([pod(f"p{i}", at=i) for i in range(5)], [], [NodeRoom("n", {GPU: 8})], no_envelope, T0,
                        max_release=2)  # fmt: skip
    assert [p.name for p in plan.release] == ["p0", "p1"]
    assert plan.reasons()["ns/p4"] == "waiting: this pass released its 2"


@pytest.mark.parametrize("bad", ["1.5", "-1", "1Ki", "", "\x00", None, 1.0, True, "9" * 40, ["1"]])
def test_malformed_quantities_are_refused_by_name(bad: object) -> None:
    with pytest.raises(BadQuantity, match="is not a whole number of devices"):
        units(bad)
    with pytest.raises(BadQuantity, match="is not a whole number"):
        gpu_requests({GPU: bad})


def test_quantities_and_what_is_counted() -> None:
    assert units("8") == 8 and units(56) == 56
    assert gpu_requests({GPU: "2", MIG: "0", "cpu": "500m", "nvidia.com/mig-3g.40gb": "1"}) == {
        GPU: 2, "nvidia.com/mig-3g.40gb": 1}  # fmt: skip


# ------------------------------------------------------------------------------------------------ properties

RESOURCES = st.sampled_from([GPU, MIG])
TIERS = st.sampled_from(["interactive", "standard", "batch"])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[NodeRoom], list[GatedPod], list[GatedPod]]:
    nodes = [NodeRoom(f"n{i}", {GPU: draw(st.integers(0, 8)), MIG: draw(st.integers(0, 12))})
             for i in range(draw(st.integers(1, 5)))]  # fmt: skip

    def one(name: str) -> GatedPod:
        return pod(name, draw(TIERS), draw(st.integers(0, 30)), {draw(RESOURCES): draw(st.integers(1, 3))})

    gated = [one(f"g{i}") for i in range(draw(st.integers(0, 25)))]
    in_flight = [one(f"f{i}") for i in range(draw(st.integers(0, 4)))]
    return nodes, gated, in_flight


def _remaining(nodes: list[NodeRoom], pods: list[GatedPod], placed: dict[str, str]) -> dict[str, dict[str, int]]:
    left = {n.name: dict(n.free) for n in nodes}
    for p in pods:
        if p.key in placed:
            for r, n in p.requests.items():
                left[placed[p.key]][r] -= n
    return left


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_releases_never_exceed_room_and_nothing_that_fits_stays_gated(
    case: tuple[list[NodeRoom], list[GatedPod], list[GatedPod]],
) -> None:
    nodes, gated, in_flight = case
    plan = plan_release(gated, in_flight, nodes, no_envelope, T0)
    released = {p.key for p in plan.release}
    # Every gated pod is accounted for exactly once.
    assert sorted(released | {h.pod.key for h in plan.held}) == sorted(p.key for p in gated)
    assert not released & {h.pod.key for h in plan.held}
    # Per resource, what is released plus what is in flight is within the cluster's free room.
    for r in (GPU, MIG):
        asked = sum(p.requests.get(r, 0) for p in plan.release)
        assert asked <= sum(n.free.get(r, 0) for n in nodes)
    # Each release sits on a node that had room for it after everything placed before it.
    left = _remaining(nodes, plan.release, plan.placed)
    assert all(v >= 0 for free in left.values() for v in free.values())
    # Maximal: a pod held for room fits no node once the releases (and in-flight pods) are placed.
    placed = {k: n for k, n in plan.in_flight.items() if n is not None}
    assert set(plan.in_flight) == {p.key for p in in_flight}
    left = _remaining(nodes, [*in_flight, *plan.release], {**placed, **plan.placed})
    assert all(v >= 0 for free in left.values() for v in free.values())
    for h in plan.held:
        assert not any(h.pod.fits(NodeRoom(n, free)) for n, free in left.items()), (h, left)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(TIERS, st.integers(0, 30)), max_size=20), st.integers(0, 20))
def test_with_one_shape_the_release_is_the_highest_tiers_oldest_first(pods: list[tuple[str, int]], room: int) -> None:
    gated = [pod(f"p{i:02d}", tier, at) for i, (tier, at) in enumerate(pods)]
    plan = plan_release(gated, [], [NodeRoom("n", {GPU: room})], no_envelope, T0)
    rank = {"interactive": 0, "standard": 1, "batch": 2}
    expected = sorted(gated, key=lambda p: (rank[p.tier], p.created, p.key))[:room]
    assert [p.key for p in plan.release] == [p.key for p in expected]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.integers(0, 12), st.integers(0, 4))
def test_a_tree_never_has_more_released_than_its_envelope(limit: int, size: int, live: int) -> None:
    env = replace(ENV, max_live_pods=limit)
    gated = [pod(f"p{i}", at=i, root="r", asks={MIG: 1}) for i in range(size)]
    already = [pod(f"l{i}", root="r", asks={}) for i in range(live)]
    plan = plan_release(gated, already, [NodeRoom("n", {MIG: 100})], lambda r: tree(r, env=env), T0)
    assert len(plan.release) == min(size, max(0, limit - live))
    assert all(h.annotate and h.reason.startswith("over-envelope: root r") for h in plan.held)


@st.composite
def placements(draw: st.DrawFn) -> tuple[list[NodeRoom], list[GatedPod]]:
    """Nodes with negative, zero and positive room, labels and taints; pods of one or two resources,
    with and without nodeSelector and tolerations."""
    taint = ("gpu", "dedicated", "NoSchedule")
    nodes = [NodeRoom(f"n{i:02d}", {GPU: draw(st.integers(-1, 8)), MIG: draw(st.integers(-1, 14))},
                      {"pool": draw(st.sampled_from(["a", "b"]))}, (taint,) if draw(st.booleans()) else ())
             for i in range(draw(st.integers(1, 12)))]  # fmt: skip
    pods = []
    for i in range(draw(st.integers(1, 40))):
        asks = {draw(RESOURCES): draw(st.integers(1, 4))}
        if draw(st.integers(0, 5)) == 0:
            asks[GPU if MIG in asks else MIG] = draw(st.integers(1, 2))
        selector = {"pool": draw(st.sampled_from(["a", "b"]))} if draw(st.integers(0, 4)) == 0 else {}
        tolerations = (Toleration("gpu", "Equal", "dedicated", "NoSchedule"),) if draw(st.integers(0, 4)) == 0 else ()
        pods.append(pod(f"p{i}", asks=asks, node_selector=selector, tolerations=tolerations))
    return nodes, pods


@settings(max_examples=400, deadline=None)
@given(placements())
def test_the_index_places_every_pod_where_a_scan_of_every_node_would(
    case: tuple[list[NodeRoom], list[GatedPod]],
) -> None:
    nodes, pods = case
    indexed, scanned = Rooms(nodes), Rooms(nodes)
    for p in pods:
        expected = scanned.scan(p)
        if expected is not None:
            scanned._take(expected, p.requests)
        assert indexed.place(p) == expected, p
    assert indexed.free == scanned.free


def test_a_burst_sized_plan_places_through_the_index() -> None:
    """1,024 nodes, 8,000 gated pods, 2,000 released in flight: every placement the index makes is
    where the scan would put it, and no node ends below zero."""
    nodes = [NodeRoom(f"n{i:04d}", {GPU: i % 9} if i % 4 else {GPU: 0, MIG: (i * 7) % 57}) for i in range(1_024)]
    gated = [pod(f"g{k}", asks={GPU if k % 5 == 0 else MIG: 1}, at=k // 80) for k in range(8_000)]
    in_flight = [pod(f"f{k}", asks={GPU if k % 5 == 0 else MIG: 1}, at=k // 80) for k in range(2_000)]
    plan = plan_release(gated, in_flight, nodes, no_envelope, T0, max_release=500)
    assert len(plan.release) == 500 and all(node is not None for node in plan.in_flight.values())
    left = _remaining(nodes, in_flight + plan.release, {**plan.in_flight, **plan.placed})  # type: ignore[dict-item]
    assert all(v >= 0 for free in left.values() for v in free.values())
