"""The orphan rule (core/orphans.py) on hand-built pods and Leases with an exact ``now``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.orphans import (
    Action,
    Finding,
    GpuState,
    LeaseInfo,
    OrphanPolicy,
    PodInfo,
    RootState,
    Rule,
    Verdict,
    classify,
    execute_plan,
    lease_name,
    plan,
    root_states_from_pods,
    summarize,
)

T0 = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
P = "gpufabric.io"
POLICY = OrphanPolicy(grace_s=30, startup_grace_s=60, max_deletes_per_pass=100, max_orphan_share=1.0)


def pod(agent: str | None, *, root: str | None = None, parent: str | None = None, depth: int | str | None = None,
        kind: str = "worker", ns: str = "team", phase: str = "Running", gates: int = 0, ttl: str | None = None,
        created: datetime = T0 - timedelta(hours=1), extra_labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None, gpus: int = 1) -> PodInfo:
    labels: dict[str, str] = {f"{P}/agent-type": kind}
    if agent is not None:
        labels[f"{P}/agent-id"] = agent
    if root is not None:
        labels[f"{P}/root-id"] = root
    if parent is not None:
        labels[f"{P}/parent-id"] = parent
    if depth is not None:
        labels[f"{P}/depth"] = str(depth)
    labels.update(extra_labels or {})
    notes = dict(annotations or {})
    if ttl is not None:
        notes[f"{P}/expires-at"] = ttl
    return PodInfo(ns, f"pod-{agent}", f"uid-{ns}-{agent}", labels, notes, phase, gates, False, created, gpus, "7")


def lease(agent: str, renewed: datetime | None, duration: int | None = 10, ns: str = "team") -> LeaseInfo:
    return LeaseInfo(ns, lease_name(agent), f"pod-{agent}", renewed, duration)


def tree(ns: str = "team") -> list[PodInfo]:
    """root (orchestrator) -> sub (orchestrator) -> w1, w2; root -> w0."""
    return [
        pod("root", root="root", depth=0, kind="orchestrator", ns=ns),
        pod("sub", root="root", parent="root", depth=1, kind="orchestrator", ns=ns),
        pod("w0", root="root", parent="root", depth=1, ns=ns),
        pod("w1", root="root", parent="sub", depth=2, ns=ns),
        pod("w2", root="root", parent="sub", depth=2, ns=ns),
    ]


def by_agent(findings: list[Finding]) -> dict[str, Finding]:
    return {f.pod.name.removeprefix("pod-"): f for f in findings}


def verdicts(findings: list[Finding]) -> dict[str, str]:
    return {k: str(v.verdict) for k, v in by_agent(findings).items()}


def test_healthy_tree_with_live_leases_is_all_healthy() -> None:
    found = classify(tree(), [lease("root", T0), lease("sub", T0)], {}, T0, POLICY)
    assert verdicts(found) == {a: "healthy" for a in ("root", "sub", "w0", "w1", "w2")}
    assert [f.depth for f in found] == [0, 1, 1, 2, 2]


def test_lease_expired_within_grace_is_healthy_then_subtree_orphaned_together() -> None:
    leases = [lease("root", T0), lease("sub", T0 - timedelta(seconds=35))]  # expired at T0-25s
    assert verdicts(classify(tree(), leases, {}, T0, POLICY))["w1"] == "healthy"  # 25 s < 30 s grace
    later = T0 + timedelta(seconds=5)
    found = by_agent(classify(tree(), leases, {}, later, POLICY))
    assert {k: str(f.verdict) for k, f in found.items()} == {
        "root": "healthy", "w0": "healthy", "sub": "orphaned", "w1": "orphaned", "w2": "orphaned"}
    for name in ("sub", "w1", "w2"):
        assert found[name].rule is Rule.LEASE_EXPIRED
        assert found[name].orphan_root == "team/sub"
        assert found[name].eligible_at == T0 + timedelta(seconds=5)  # renew - 35 + 10 + 30
    assert found["w1"].evidence["expired_at"] == "2026-12-03T11:59:35.000000Z"
    assert found["w1"].evidence["holder"] == "pod-sub"


def test_dead_root_orphans_every_descendant_even_with_live_sub_leases() -> None:
    found = by_agent(classify(tree(), [lease("root", T0 - timedelta(minutes=5)), lease("sub", T0)], {}, T0, POLICY))
    assert {f.verdict for f in found.values()} == {Verdict.ORPHANED}
    assert {f.orphan_root for f in found.values()} == {"team/root"}


def test_parent_pod_gone_but_lease_live_is_healthy_and_expired_lease_orphans() -> None:
    pods = [p for p in tree() if p.name != "pod-sub"]
    assert verdicts(classify(pods, [lease("root", T0), lease("sub", T0)], {}, T0, POLICY))["w1"] == "healthy"
    found = by_agent(classify(pods, [lease("root", T0), lease("sub", T0 - timedelta(seconds=41))], {}, T0, POLICY))
    assert (found["w1"].verdict, found["w1"].rule, found["w1"].orphan_root) == (
        Verdict.ORPHANED, Rule.LEASE_EXPIRED, "team/w1")
    assert found["w0"].verdict is Verdict.HEALTHY


def test_parent_missing_without_lease_after_grace_from_creation() -> None:
    young = pod("x", root="root", parent="ghost", depth=1, created=T0 - timedelta(seconds=10))
    old = pod("y", root="root", parent="ghost", depth=1, created=T0 - timedelta(seconds=31))
    found = by_agent(classify([young, old], [], {}, T0, POLICY))
    assert found["x"].verdict is Verdict.HEALTHY
    assert (found["y"].verdict, found["y"].rule, found["y"].evidence) == (
        Verdict.ORPHANED, Rule.PARENT_MISSING, {"parent_id": "ghost"})
    assert found["y"].eligible_at == T0 - timedelta(seconds=1)


def test_orchestrator_without_lease_is_dead_after_startup_grace() -> None:
    starting = pod("o1", root="o1", depth=0, kind="orchestrator", created=T0 - timedelta(seconds=59))
    stale = pod("o2", root="o2", depth=0, kind="orchestrator", created=T0 - timedelta(seconds=61))
    found = by_agent(classify([starting, stale], [], {}, T0, POLICY))
    assert found["o1"].verdict is Verdict.HEALTHY
    assert (found["o2"].verdict, found["o2"].rule) == (Verdict.ORPHANED, Rule.LEASE_MISSING)


def test_ttl_passed_orphans_the_pod_and_its_subtree() -> None:
    pods = tree()
    pods[1] = pod("sub", root="root", parent="root", depth=1, kind="orchestrator", ttl="2026-12-03T11:59:59Z")
    found = by_agent(classify(pods, [lease("root", T0), lease("sub", T0)], {}, T0, POLICY))
    assert {k: f.rule for k, f in found.items() if f.verdict is Verdict.ORPHANED} == {
        "sub": Rule.TTL_EXPIRED, "w1": Rule.TTL_EXPIRED, "w2": Rule.TTL_EXPIRED}
    assert found["w2"].eligible_at == datetime(2026, 12, 3, 11, 59, 59, tzinfo=UTC)
    later_ttl = "2026-12-03T12:00:01+00:00"
    pods[1] = pod("sub", root="root", parent="root", depth=1, kind="orchestrator", ttl=later_ttl)
    assert set(verdicts(classify(pods, [lease("root", T0), lease("sub", T0)], {}, T0, POLICY)).values()) == {"healthy"}


@pytest.mark.parametrize(("state", "rule"), [(RootState.FINISHED, Rule.ROOT_FINISHED),
                                             (RootState.OVER_BUDGET, Rule.ROOT_OVER_BUDGET)])
def test_finished_or_over_budget_root_orphans_the_whole_tree(state: RootState, rule: Rule) -> None:
    other = pod("solo", root="solo", depth=0, kind="worker")
    roots = {"root": state, "solo": RootState.RUNNING}
    found = classify([*tree(), other], [lease("root", T0), lease("sub", T0)], roots, T0, POLICY)
    assert {f.pod.name: f.rule for f in found if f.verdict is Verdict.ORPHANED} == {
        f"pod-{a}": rule for a in ("root", "sub", "w0", "w1", "w2")}
    assert by_agent(found)["solo"].verdict is Verdict.HEALTHY


def test_root_state_from_root_pod_annotation_ignores_unknown_values() -> None:
    pods = [pod("r1", root="r1", depth=0, annotations={f"{P}/root-state": "over-budget"}),
            pod("r2", root="r2", depth=0, annotations={f"{P}/root-state": "finnished"}),
            pod("c", root="r1", parent="r1", depth=1, annotations={f"{P}/root-state": "finished"})]
    assert root_states_from_pods(pods, POLICY) == {"r1": RootState.OVER_BUDGET}


BAD: list[tuple[str, list[PodInfo], str]] = [
    ("missing root-id", [pod("a", parent="p", depth=1)], "partial ancestry labels: missing root-id"),
    ("missing agent-id", [pod(None, root="r", parent="p", depth=1)], "partial ancestry labels: missing agent-id"),
    ("depth without parent", [pod("a", root="r", depth=2)], "partial ancestry labels: depth 2 without parent-id"),
    ("bad depth", [pod("a", root="r", parent="p", depth="two")], "depth label 'two' is not a non-negative integer"),
    ("root with parent", [pod("a", root="a", parent="p", depth=0)],
     "conflicting ancestry: depth 0 needs no parent-id and root-id == agent-id"),
    ("self parent", [pod("a", root="r", parent="a", depth=1)], "ancestry cycle: the pod is its own parent"),
    ("bad ttl", [pod("a", root="a", depth=0, ttl="tomorrow")],
     "expires-at annotation 'tomorrow' is not an RFC 3339 time"),
    ("naive ttl", [pod("a", root="a", depth=0, ttl="2020-01-01T00:00:00")],
     "expires-at annotation '2020-01-01T00:00:00' is not an RFC 3339 time"),
]


@pytest.mark.parametrize(("case", "pods", "reason"), BAD, ids=[b[0] for b in BAD])
def test_partial_or_conflicting_labels_are_invalid_with_reason(case: str, pods: list[PodInfo], reason: str) -> None:
    (found,) = classify(pods, [], {}, T0 + timedelta(days=365), POLICY)
    assert (found.verdict, found.reason, found.rule) == (Verdict.INVALID, reason, None)
    assert plan([found], POLICY).deletions == []


def test_cycle_makes_every_member_and_descendant_invalid() -> None:
    pods = [pod("a", root="r", parent="b", depth=1), pod("b", root="r", parent="a", depth=1),
            pod("c", root="r", parent="a", depth=2)]
    found = by_agent(classify(pods, [], {}, T0, POLICY))
    assert {k: f.verdict for k, f in found.items()} == {k: Verdict.INVALID for k in "abc"}
    assert all(f.reason.startswith("ancestry cycle through agent") for f in found.values())


def test_depth_and_root_conflicts_with_parent_are_invalid_down_the_subtree() -> None:
    pods = [*tree(), pod("w3", root="other", parent="sub", depth=2), pod("w4", root="root", parent="sub", depth=5),
            pod("w5", root="root", parent="w4", depth=6)]
    found = by_agent(classify(pods, [lease("root", T0 - timedelta(hours=1)), lease("sub", T0)], {}, T0, POLICY))
    assert found["w3"].reason == "conflicting ancestry: root-id 'other' but parent's is 'root'"
    assert found["w4"].reason == "conflicting ancestry: depth 5 but parent's is 1"
    assert found["w5"].reason.startswith("ancestor 'w4' is invalid: conflicting ancestry")
    assert found["w1"].verdict is Verdict.ORPHANED  # the dead root still orphans the well-formed rest


def test_parent_in_other_namespace_is_invalid_not_missing() -> None:
    pods = [pod("p", root="p", depth=0, ns="ns-a"), pod("c", root="p", parent="p", depth=1, ns="ns-b")]
    found = {f.pod.namespace: f for f in classify(pods, [], {}, T0 + timedelta(days=1), POLICY)}
    assert found["ns-b"].verdict is Verdict.INVALID
    assert found["ns-b"].reason == "parent 'p' is in another namespace (ns-a)"


def test_duplicate_worker_ids_are_invalid_but_a_restarted_orchestrator_may_have_two_pods() -> None:
    twins = [pod("w", root="r", parent="r", depth=1), pod("w", root="r", parent="r", depth=1, ns="team")]
    twins[1] = PodInfo(**{**twins[1].__dict__, "name": "pod-w-2", "uid": "uid-2"})
    found = classify([pod("r", root="r", depth=0), *twins], [], {}, T0, POLICY)
    assert [f.reason for f in found[1:]] == ["conflicting ancestry: agent-id 'w' is claimed by 2 pods"] * 2
    old = pod("o", root="o", depth=0, kind="orchestrator", phase="Failed")
    new = PodInfo(**{**old.__dict__, "name": "pod-o-restarted", "uid": "uid-o2", "phase": "Running"})
    child = pod("k", root="o", parent="o", depth=1)
    assert {str(f.verdict) for f in classify([old, new, child], [lease("o", T0)], {}, T0, POLICY)} == {"healthy"}


def test_worker_parent_finished_orphans_children() -> None:
    pods = [pod("r", root="r", depth=0), pod("m", root="r", parent="r", depth=1, phase="Succeeded"),
            pod("k", root="r", parent="m", depth=2)]
    found = by_agent(classify(pods, [], {}, T0, POLICY))
    assert (found["k"].verdict, found["k"].rule, found["k"].evidence["parent_phase"]) == (
        Verdict.ORPHANED, Rule.PARENT_FINISHED, "Succeeded")
    assert found["m"].verdict is Verdict.HEALTHY and found["m"].state is GpuState.FINISHED


def test_unmanaged_pods_are_not_judged_at_all() -> None:
    plain = PodInfo("kube-system", "coredns", "u1", {"app": "dns"})
    assert classify([plain], [], {}, T0, POLICY) == []


def test_gpu_states_and_summary() -> None:
    pods = [pod("r", root="r", depth=0, gpus=0),
            pod("run", root="r", parent="r", depth=1, gpus=4),
            pod("gated", root="r", parent="r", depth=1, phase="Pending", gates=1),
            pod("susp", root="r", parent="r", depth=1, annotations={f"{P}/suspended": "true"}),
            pod("susp2", root="r", parent="r", depth=1, extra_labels={f"{P}/suspended": "True"}, phase="Pending"),
            pod("pend", root="r", parent="r", depth=1, phase="Pending"),
            pod("done", root="r", parent="r", depth=1, phase="Failed")]
    found = by_agent(classify(pods, [], {}, T0, POLICY))
    assert {k: str(f.state) for k, f in found.items()} == {
        "r": "running", "run": "running", "gated": "gated", "susp": "suspended", "susp2": "suspended",
        "pend": "pending", "done": "finished"}
    assert found["run"].gpus_held == 4 and found["gated"].gpus_held == 0
    assert summarize(found.values())["healthy"] == {
        "running": 2, "gated": 1, "suspended": 2, "pending": 1, "finished": 1, "gpus_held": 4}


# -- plan and execution -------------------------------------------------------------------------------


def orphaned_tree() -> list[Finding]:
    return classify(tree(), [lease("root", T0 - timedelta(hours=1)), lease("sub", T0)], {}, T0, POLICY)


def test_plan_is_bottom_up_and_capped() -> None:
    found = orphaned_tree()
    p = plan(found, OrphanPolicy(max_deletes_per_pass=3, max_orphan_share=1.0))
    assert [f.pod.name for f in p.deletions] == ["pod-w1", "pod-w2", "pod-sub"]
    assert [f.pod.name for f in p.deferred] == ["pod-w0", "pod-root"]


def test_blast_radius_guard_refuses_unless_forced() -> None:
    found = orphaned_tree()
    guarded = OrphanPolicy(max_orphan_share=0.5)
    refused = plan(found, guarded)
    assert refused.refused and refused.deletions == [] and len(refused.deferred) == 5
    assert refused.refusal.startswith("blast-radius guard: 5 of 5 agent pods orphaned (> 50%)")
    decisions = execute_plan(refused, dry_run=False, verify=lambda f: None, delete=lambda f: pytest.fail("deleted"),
                             clock=lambda: T0)
    assert {d.action for d in decisions} == {Action.REFUSED}
    assert len(plan(found, guarded, force=True).deletions) == 5


def test_failed_delete_holds_back_every_ancestor_this_pass() -> None:
    deleted: list[str] = []

    def delete(f: Finding) -> str | None:
        if f.pod.name == "pod-w1":
            return "HTTP 500 InternalError"
        deleted.append(f.pod.name)
        return None

    decisions = execute_plan(plan(orphaned_tree(), POLICY), dry_run=False, verify=lambda f: None, delete=delete,
                             clock=lambda: T0)
    assert deleted == ["pod-w2", "pod-w0"]
    assert {d.finding.pod.name: str(d.action) for d in decisions} == {
        "pod-w1": "failed", "pod-w2": "deleted", "pod-sub": "deferred", "pod-w0": "deleted", "pod-root": "deferred"}


def test_changed_evidence_skips_the_subtree_and_dry_run_deletes_nothing() -> None:
    checked: list[str | None] = []

    def verify(f: Finding) -> str | None:
        checked.append(f.orphan_root)
        return "lease agent-root renewed"

    decisions = execute_plan(plan(orphaned_tree(), POLICY), dry_run=False, verify=verify,
                             delete=lambda f: pytest.fail("deleted"), clock=lambda: T0)
    assert checked == ["team/root"]  # once per subtree, not once per pod
    assert {(str(d.action), d.reason) for d in decisions} == {("skipped", "evidence changed: lease agent-root renewed")}
    dry = execute_plan(plan(orphaned_tree(), POLICY), dry_run=True, verify=lambda f: None,
                       delete=lambda f: pytest.fail("deleted"), clock=lambda: T0)
    assert [str(d.action) for d in dry] == ["would_delete"] * 5


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="max_orphan_share"):
        OrphanPolicy(max_orphan_share=0)
    with pytest.raises(ValueError, match="grace"):
        OrphanPolicy(grace_s=-1)


# -- property: a pod is orphaned exactly when something on its path to the root is dead -------------


@st.composite
def forests(draw: Any) -> tuple[list[PodInfo], list[LeaseInfo], set[str]]:
    n = draw(st.integers(1, 40))
    parents: list[int | None] = []
    for i in range(n):
        new_root = i == 0 or (draw(st.booleans()) and draw(st.booleans()))
        parents.append(None if new_root else draw(st.integers(0, i - 1)))
    dead = draw(st.sets(st.integers(0, n - 1)))
    roots: list[int] = []
    depth: list[int] = []
    for i, p in enumerate(parents):
        roots.append(i if p is None else roots[p])
        depth.append(0 if p is None else depth[p] + 1)
    pods = [pod(f"a{i}", root=f"a{roots[i]}", parent=None if p is None else f"a{p}", depth=depth[i],
                kind="orchestrator") for i, p in enumerate(parents)]
    leases = [lease(f"a{i}", T0 - timedelta(seconds=100) if i in dead else T0) for i in range(n)]
    orphaned = set()
    for i in range(n):
        j: int | None = i
        while j is not None:
            if j in dead:
                orphaned.add(f"a{i}")
                break
            j = parents[j]
    return pods, leases, orphaned


@settings(max_examples=150, deadline=None)
@given(forests())
def test_property_orphaned_iff_a_dead_orchestrator_is_on_the_path(case: tuple[list[PodInfo], list[LeaseInfo],
                                                                              set[str]]) -> None:
    pods, leases, expected = case
    found = classify(pods, leases, {}, T0, POLICY)
    assert {f.agent_id for f in found if f.verdict is Verdict.ORPHANED} == expected
    assert all(f.verdict is not Verdict.INVALID for f in found)
    order = [f.agent_id for f in plan(found, POLICY).deletions]
    position = {a: i for i, a in enumerate(order)}
    for f in found:  # every child is deleted before its parent
        if f.agent_id in position and f.parent_id in position:
            assert position[f.agent_id] < position[f.parent_id]
