"""The burst plan (simulator/agents/burst.py): deterministic, correlated, the tenant and tier mix it
was asked for, ancestry the budget controller and the reaper accept, a background that holds the
busy share without overfilling a node, and queues named as publish names them."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import UTC, datetime
from fractions import Fraction

import pytest

from connectors.kube.agents import Spawn, agent_pod_manifest
from core.orphans import OrphanPolicy, PodInfo, classify
from simulator.agents.burst import (
    DEFAULT_TENANTS,
    MIG_RESOURCE,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    ROLE_LABEL,
    RUN_SECONDS_ANNOTATION,
    BurstPlan,
    apportion,
    plan_burst,
    tree_kinds,
)

P = "gpufabric.io"
WHOLE = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def full() -> BurstPlan:
    """The issue's size: 2,000 trees, 10,000 pods, 120 s, 1,024 nodes, 70% busy."""
    return plan_burst()


def small(**kw: object) -> BurstPlan:
    args: dict[str, object] = {"trees": 12, "pods": 60, "window_s": 3.0, "nodes": 16}
    args.update(kw)
    return plan_burst(**args)  # type: ignore[arg-type]


def test_the_same_seed_gives_the_same_plan_and_another_seed_another() -> None:
    assert small(seed=5) == small(seed=5)
    other = small(seed=6)
    assert [p.offset_s for p in other.pods] != [p.offset_s for p in small(seed=5).pods]
    assert [(p.node, dict(p.requests)) for p in other.background] != [
        (p.node, dict(p.requests)) for p in small(seed=5).background]  # fmt: skip


def test_the_default_plan_is_the_issues_burst(full: BurstPlan) -> None:
    assert len(full.pods) == 10_000
    assert sum(1 for p in full.pods if p.is_root) == 2_000
    assert len({p.tree for p in full.pods}) == 2_000
    assert len(full.nodes) == 1_024 and all(n.gpus == 8 for n in full.nodes)
    assert full.window_s == 120.0
    assert len({p.name for p in full.pods}) == len({p.agent_id for p in full.pods}) == 10_000


def test_every_creation_falls_inside_the_window_and_crowds_into_peaks(full: BurstPlan) -> None:
    offsets = sorted(p.offset_s for p in full.pods)
    assert 0 <= offsets[0] and offsets[-1] < full.window_s
    # Correlated, not spread evenly: the busiest tenth of the window holds at least twice the tenth
    # an even spread would put there.
    width = full.window_s / 10
    busiest, j = 0, 0
    for i, start in enumerate(offsets):
        while offsets[j] < start - width:
            j += 1
        busiest = max(busiest, i - j + 1)
    assert busiest >= 0.2 * len(offsets), busiest
    # Children follow their parent: an orchestrator spawns after its own pod exists.
    by_id = {p.agent_id: p for p in full.pods}
    assert all(p.offset_s > by_id[p.parent_id].offset_s for p in full.pods if p.parent_id)


def test_trees_split_across_tenants_and_tiers_by_their_weights(full: BurstPlan) -> None:
    roots = [p for p in full.pods if p.is_root]
    per_tenant = Counter(p.tenant for p in roots)
    for tenant in DEFAULT_TENANTS:
        assert abs(per_tenant[tenant.id] - tenant.weight * len(roots)) < 1, (tenant.id, per_tenant)
        tiers = Counter(p.tier for p in roots if p.tenant == tenant.id)
        for tier, share in tenant.tiers:
            assert abs(tiers[tier] - share * per_tenant[tenant.id]) < 1, (tenant.id, tier, tiers)
    # Every pod of a tree is its root's tenant, tier and namespace.
    root_of = {p.tree: p for p in roots}
    assert all((p.tenant, p.tier, p.namespace) == (root_of[p.tree].tenant, root_of[p.tree].tier,
                                                   root_of[p.tree].namespace) for p in full.pods)  # fmt: skip


def test_ancestry_is_a_tree_the_reaper_and_the_budget_labels_agree_with(full: BurstPlan) -> None:
    trees: dict[int, list] = defaultdict(list)
    for p in full.pods:
        trees[p.tree].append(p)
    for pods in list(trees.values())[:300]:
        (root,) = [p for p in pods if p.is_root]
        ids = {p.agent_id: p for p in pods}
        assert root.depth == 0 and root.root_id == root.agent_id and root.agent_type == "planner"
        for p in pods:
            assert p.root_id == root.agent_id
            if p.parent_id is not None:
                assert ids[p.parent_id].depth == p.depth - 1
    # The labels are the contract connectors.kube.agents writes for the same agent.
    now = datetime(2026, 12, 1, tzinfo=UTC)
    for p in full.pods[:50]:
        theirs = agent_pod_manifest(Spawn(agent_type=p.agent_type, client_name=p.tenant, task=p.task, tier=p.tier),
                                    namespace=p.namespace, agent_id=p.agent_id, root_id=p.root_id,
                                    parent_id=p.parent_id, depth=p.depth, now=now, prefix=P)  # fmt: skip
        ours = p.manifest(P, expires_at="2026-12-01T01:00:00Z")
        assert {k: v for k, v in ours["metadata"]["labels"].items() if k.startswith(P)} == theirs["metadata"]["labels"]
        assert ours["metadata"]["labels"][ROLE_LABEL] == "burst"
    # The reaper finds every pod's ancestry well-formed (no "invalid" verdict) on a whole tree.
    tree = trees[0]
    pods = [PodInfo(namespace=p.namespace, name=p.name, uid=f"uid-{p.name}", labels=p.labels(P), annotations={
        f"{P}/expires-at": "2026-12-01T01:00:00Z"}, phase="Running", created=now) for p in tree]  # fmt: skip
    findings = classify(pods, [], {}, now, OrphanPolicy(prefix=P))
    assert [f.verdict.value for f in findings] == ["healthy"] * len(tree), [f.reason for f in findings]


def test_tree_shape_is_the_weeks() -> None:
    assert tree_kinds(1) == [("planner", -1)]
    assert tree_kinds(6) == [("planner", -1), ("coder", 0), ("tool-runner", 1), ("browser", 0), ("coder", 0),
                             ("browser", 0)]  # fmt: skip


def test_the_background_holds_the_busy_share_without_overfilling_a_node(full: BurstPlan) -> None:
    (whole, mig), (cap_whole, cap_mig) = full.busy(), full.capacity()
    assert whole == round(0.7 * cap_whole) and mig == round(0.7 * cap_mig)
    assert abs(full.busy_fraction() - Fraction(7, 10)) < Fraction(1, 1000)
    nodes = {n.name: n for n in full.nodes}
    used: Counter[tuple[str, str]] = Counter()
    for p in full.background:
        assert p.node in nodes
        for resource, count in p.requests.items():
            used[(p.node, resource)] += int(count)
    for (node, resource), count in used.items():
        assert count <= int(nodes[node].capacity.get(resource, "0")), (node, resource, count)
    assert all(MIG_RESOURCE not in p.requests for p in full.background if not nodes[p.node].mig)
    # Bound (not queued): the background never goes through Kueue.
    manifest = full.background[0].manifest(P)
    assert manifest["spec"]["nodeName"] == full.background[0].node
    assert QUEUE_LABEL not in manifest["metadata"]["labels"]


def test_the_default_burst_fits_the_free_capacity_if_scheduled_at_once(full: BurstPlan) -> None:
    """So the lag measured is the scheduler's and Kueue's, not a cluster too small for the work."""
    (free_whole, free_mig), (peak_whole, peak_mig) = full.free(), full.peak_demand()
    assert 0 < peak_whole <= free_whole and 0 < peak_mig <= free_mig
    whole, mig = full.demand()
    assert whole == 2_000 and mig == 8_000  # a whole GPU per planner, a 1g slice for every other agent


def test_pods_are_in_their_tenants_published_queue() -> None:
    plan = small(tenant_suffix="-t1")
    objects = plan.kueue_objects()
    local = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "LocalQueue"}
    classes = {o["metadata"]["name"] for o in objects if o["kind"] == "WorkloadPriorityClass"}
    for p in plan.pods:
        labels = p.labels(P)
        assert (p.namespace, labels[QUEUE_LABEL]) in local
        assert labels[PRIORITY_LABEL] in classes
        assert QUEUE_LABEL not in p.labels(P, queues=False) and PRIORITY_LABEL not in p.labels(P, queues=False)
    assert {t.id for t in plan.tenants} == {"globex-t1", "initech-t1", "umbrella-t1", "acme-t1"}
    quotas = [o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
              for o in objects if o["kind"] == "ClusterQueue"]  # fmt: skip
    assert sum(quotas) == plan.capacity()[0]
    # Every node carries every level the published Topology names (Kueue drops a node missing one).
    (topology,) = [o for o in objects if o["kind"] == "Topology"]
    levels = [level["nodeLabel"] for level in topology["spec"]["levels"]]
    assert all(all(key in n.labels for key in levels) for n in plan.nodes)


def test_a_pod_manifest_says_how_long_it_runs_and_when_it_expires() -> None:
    pod = small().pods[0]
    manifest = pod.manifest(P, expires_at="2026-12-01T01:00:00Z", queues=False)
    assert manifest["metadata"]["annotations"] == {f"{P}/expires-at": "2026-12-01T01:00:00Z",
                                                   RUN_SECONDS_ANNOTATION: f"{pod.run_s:.1f}"}  # fmt: skip
    (container,) = manifest["spec"]["containers"]
    assert container["resources"]["requests"] == container["resources"]["limits"] == dict(pod.requests)
    assert "nodeName" not in manifest["spec"]


def test_a_planner_outlives_its_children() -> None:
    plan = small()
    roots = {p.tree: p for p in plan.pods if p.is_root}
    for p in plan.pods:
        root = roots[p.tree]
        assert root.offset_s + root.run_s >= p.offset_s + p.run_s


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trees": 10, "pods": 9}, "a burst of 10 trees needs at least one pod per tree, not 9 pods"),
        ({"busy_fraction": 1.0}, "busy_fraction must be in [0, 1), not 1.0"),
        ({"window_s": 0.0}, "window_s, nodes, waves and duration_scale must be positive"),
    ],
)
def test_impossible_bursts_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        small(**kwargs)


def test_apportion_is_exact() -> None:
    assert apportion(10, [1, 1, 1]) == [4, 3, 3]
    assert apportion(2_000, [0.4, 0.25, 0.2, 0.15]) == [800, 500, 400, 300]
    assert sum(apportion(7_168, [0.4, 0.25, 0.2, 0.15])) == 7_168
    with pytest.raises(ValueError, match=r"cannot apportion 5 over weights \[0\]"):
        apportion(5, [0])
