"""gpufabric's placement advisor (core/placement/advisor.py): it only ever picks a placement Kueue
TAS would accept (judged by core.publish.admission on the chosen hosts alone), never a worse one
than Kueue's own best fit under the same cost, avoids degraded leaves and miscabled hosts when an
equal healthy choice is free, and says why."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.placement import collective_time, fabric_from_topology
from core.placement.advisor import (
    HINT_ANNOTATION,
    FabricView,
    NoPlacement,
    Request,
    StepCost,
    advise,
    finest_fitting_level,
    gang_accepted,
    kueue_best_fit,
)
from core.placement.collectives import Placement
from core.placement.workload import WorkloadSpec, generate_jobs
from core.publish.admission import GPU, REQUIRED, TopologyIndex, evaluate
from core.publish.labels import HOSTNAME_LABEL
from core.topology import TopologyModel, derive
from simulator.generator import generate
from simulator.spec import ClusterSpec
from tests.unit.test_topology_support import observe, spec_of

KEYS = {"pod": "fabric.gpufabric.io/pod", "spine_group": "fabric.gpufabric.io/spine-group",
        "block": "fabric.gpufabric.io/block"}  # fmt: skip
BLOCKS = ("b1", "b2", "b3", "b4")
HOSTS = [f"{b}n{i}" for b in BLOCKS for i in range(4)]


def view(degraded: Sequence[str] = (), miscabled: Sequence[str] = ()) -> FabricView:
    """Four blocks of four hosts; b1, b2 in spine group s1, b3, b4 in s2; one pod."""
    hosts = {h: {"pod": "p1", "spine_group": "s1" if h[:2] in ("b1", "b2") else "s2", "block": h[:2]} for h in HOSTS}
    return FabricView(KEYS, hosts, {h: f"{h} rail0 is cabled to the rail1 leaf" for h in miscabled},
                      {b: f"leaf-{b}-r0 has 2 uplinks, design 4" for b in degraded})  # fmt: skip


def crossing_cost(v: FabricView) -> StepCost:
    """Step seconds that grow with blocks and spine groups crossed, more over a degraded leaf,
    and with every miscabled host in a multi-host job (its rail detours through a spine)."""

    def cost(hosts: Sequence[str]) -> float:
        blocks = {v.value(h, "block") for h in hosts}
        groups = {v.value(h, "spine_group") for h in hosts}
        crossing = len(blocks) > 1
        return (1.0 + 0.2 * (len(blocks) - 1) + 0.5 * (len(groups) - 1)
                + (0.3 * sum(b in v.degraded for b in blocks) if crossing else 0.0)
                + 0.05 * sum(h in v.miscabled for h in hosts))  # fmt: skip

    return cost


def flat(_: Sequence[str]) -> float:
    return 1.0


def gang(pods: int, key: str) -> dict[str, Any]:
    return {"kind": "Job", "spec": {"parallelism": pods, "template": {
        "metadata": {"annotations": {REQUIRED: key}},
        "spec": {"containers": [{"name": "m", "resources": {"limits": {GPU: "8"}}}]}}}}  # fmt: skip


def admitted_on(v: FabricView, free: Mapping[str, int], hosts: Sequence[str], request: Request) -> bool:
    """core.publish.admission's verdict on the gang given only the chosen hosts' nodes."""
    index = TopologyIndex.from_nodes([*KEYS.values(), HOSTNAME_LABEL], [(v.labels(h), free[h]) for h in hosts])
    return evaluate(gang(request.pods, v.keys[request.level]), index).allowed


@settings(max_examples=60, deadline=None)
@given(
    st.sets(st.sampled_from(HOSTS)),
    st.integers(1, 9),
    st.sampled_from(["block", "spine_group", "pod"]),
    st.sets(st.sampled_from(BLOCKS), max_size=2),
    st.sets(st.sampled_from(HOSTS), max_size=3),
)
def test_the_advice_is_always_a_placement_kueue_accepts_and_never_worse_than_its_own(
    busy: set[str], pods: int, level: str, degraded: set[str], miscabled: set[str]
) -> None:
    v = view(sorted(degraded), sorted(miscabled))
    free = {h: 0 if h in busy else 8 for h in HOSTS}
    request = Request(pods, 8, level)
    room = max(sum(1 for h in HOSTS if free[h] and v.value(h, level) == d) for d in {v.value(h, level) for h in HOSTS})
    if room < pods:
        with pytest.raises(NoPlacement, match=f"no {level} domain has {pods} free nodes"):
            advise(v, free, request, crossing_cost(v))
        assert kueue_best_fit(v, free, request) is None
        return
    advice = advise(v, free, request, crossing_cost(v))
    assert gang_accepted(v, free, request, advice.hosts) is None
    assert admitted_on(v, free, advice.hosts, request)
    own = kueue_best_fit(v, free, request)
    assert own is not None and gang_accepted(v, free, request, own) is None
    assert advice.kueue is not None and advice.chosen.step_s <= advice.kueue.step_s
    # The hint carries the required level, the chosen domain and exactly the chosen hosts.
    assert advice.annotations[REQUIRED] == KEYS[level] and advice.node_selector == {KEYS[level]: advice.chosen.domain}
    terms = advice.affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": sorted(advice.hosts)}]}]


def test_kueue_alone_takes_the_tightest_domain_then_hosts_by_name() -> None:
    v = view()
    free = {h: 0 if h in ("b2n0", "b2n1", "b3n0") else 8 for h in HOSTS}
    assert kueue_best_fit(v, free, Request(2, 8, "block")) == ["b2n2", "b2n3"]  # b2 has 2 free: the best fit
    assert kueue_best_fit(v, free, Request(3, 8, "block")) == ["b3n1", "b3n2", "b3n3"]  # b3 (3) before b1, b4 (4)
    # A spine group: the tightest that fits (s1 has 6, s2 has 7), inside it the fullest block first.
    assert kueue_best_fit(v, free, Request(5, 8, "spine_group")) == ["b1n0", "b1n1", "b1n2", "b1n3", "b2n2"]
    assert finest_fitting_level(v, free, 4) == "block"
    assert finest_fitting_level(v, free, 6) == "spine_group"
    assert finest_fitting_level(v, free, 12) == "pod"
    assert finest_fitting_level(v, free, 14) is None


def test_it_avoids_a_degraded_leaf_when_an_equal_healthy_one_is_free_and_says_so() -> None:
    v = view(degraded=["b1"])
    free = {h: 8 for h in HOSTS}
    advice = advise(v, free, Request(4, 8, "block"), flat)
    # Every block holds it and every placement costs the same: Kueue's best fit takes b1 (the
    # first by value), the advisor a healthy block.
    assert advice.kueue is not None and advice.kueue.domain == "b1"
    assert advice.chosen.domain == "b2" and advice.hosts == ("b2n0", "b2n1", "b2n2", "b2n3")
    assert advice.reason == (
        "4 nodes in block b2; predicted step 1.000 s, best of 4 placement(s) Kueue would accept; Kueue's best fit "
        "alone would take block b1 (b1n0, b1n1, b1n2, b1n3), predicted 1.000 s (+0.0% step time); avoided "
        "degraded leaf block b1: leaf-b1-r0 has 2 uplinks, design 4"
    )
    assert advice.annotations[HINT_ANNOTATION] == "4 nodes in block b2 over 1 leaf block(s), predicted step 1.000 s"
    # With only the degraded block free it still places (and says it had to).
    only = advise(v, {h: 8 if h.startswith("b1") else 0 for h in HOSTS}, Request(4, 8, "block"), flat)
    assert only.chosen.domain == "b1" and "uses degraded leaf block(s) b1" in only.reason
    assert "the same hosts Kueue's best fit would take" in only.reason


def test_across_blocks_it_keeps_traffic_off_the_degraded_leaf_and_miscabled_hosts() -> None:
    v = view(degraded=["b1"], miscabled=["b2n0"])
    free = {h: 0 if h in ("b1n0", "b2n1") else 8 for h in HOSTS}  # b1 and b2 have 3 free, b3 and b4 four
    advice = advise(v, free, Request(6, 8, "spine_group"), crossing_cost(v))
    # Kueue's best fit: s1 (6 free) - both of its blocks, the degraded one and the miscabled host.
    assert advice.kueue is not None and set(advice.kueue.blocks) == {"b1", "b2"}
    assert advice.kueue.step_s == pytest.approx(1.0 + 0.2 + 0.3 + 0.05)
    assert advice.chosen.domain == "s2" and advice.chosen.blocks == ("b3", "b4")
    assert advice.chosen.step_s == pytest.approx(1.2)
    assert "avoided degraded leaf block b1" in advice.reason and "b2n0: b2n0 rail0 is cabled" in advice.reason
    template = advice.apply_to({"metadata": {"annotations": {"team": "x"}}, "spec": {"nodeSelector": {"a": "b"}}})
    assert template["metadata"]["annotations"]["team"] == "x" and template["metadata"]["annotations"][REQUIRED]
    assert template["spec"]["nodeSelector"] == {"a": "b", KEYS["spine_group"]: "s2"}


def test_a_request_it_cannot_serve_is_refused_with_the_reason() -> None:
    v = view()
    with pytest.raises(ValueError, match="level 'rack' is not one of pod, spine_group, block"):
        advise(v, {}, Request(1, 8, "rack"), flat)
    with pytest.raises(ValueError, match="positive pods and GPUs per pod, got 0 x 8"):
        advise(v, {}, Request(0, 8, "block"), flat)
    with pytest.raises(NoPlacement, match=r"no block domain has 2 free nodes .*; the largest \(b4\) has 1"):
        advise(v, {"b4n0": 8, "b3n0": 4, "unlabelled": 8}, Request(2, 8, "block"), flat)
    assert gang_accepted(v, {h: 8 for h in HOSTS}, Request(2, 8, "block"), ["b1n0", "b2n0"]) == (
        "spans 2 block domains: b1, b2"
    )
    assert (
        gang_accepted(v, {"b1n0": 8}, Request(2, 8, "block"), ["b1n0", "b1n1"])
        == "no room (or no level labels) on b1n1"
    )


@cache
def three_blocks_of_four() -> TopologyModel:
    """Three 4-node SUs of the H100 design; su01's rail-0 leaf lost half its uplinks, two su02
    hosts have a rail swapped."""
    data = spec_of("h100-4su").model_dump()
    swap = {"host": "dgx006", "rail": 2, "to_rail": 3, "with_host": "dgx005"}
    degraded = {"leaf": "ib-leaf-su01-r0", "remove": 2}
    data.update(name="h100-3x4", hosts="dgx[001-012]", racks="r[01-03]", nodes_per_rack=4, scalable_units=3,
                nodes_per_su=4, gpu_topo_faults={})  # fmt: skip
    data["defects"] = {"degraded_uplinks": [degraded], "miscabled_ports": [swap]}
    data["compute_fabric"]["leaf"]["count"] = 24
    data["compute_fabric"]["spine"]["count"] = 4
    data["management_fabric"]["leaf"]["count"] = 2
    with tempfile.TemporaryDirectory() as tmp:
        return derive(observe(generate(ClusterSpec.model_validate(data)), Path(tmp)))


def test_from_a_derived_fabric_with_the_cost_model() -> None:
    """Three 4-node scalable units of the H100 design; su01's rail-0 leaf lost half its uplinks,
    two su02 hosts have a rail swapped. The cost model prices a 2-block job over the degraded
    leaf higher, and the advisor keeps single-block jobs off both findings."""
    model = three_blocks_of_four()
    v = FabricView.from_model(model)
    assert v.degraded == {"ib-leaf-su01-r0-7": "ib-leaf-su01-r0 has 2 uplinks, design 4"}
    assert sorted(v.miscabled) == ["dgx005", "dgx006"] and v.oversubscription["ib-leaf-su01-r0-7"] == 2.0
    assert v.labels("dgx001")[KEYS["block"]] == "ib-leaf-su01-r0-7" and v.labels("dgx001")[HOSTNAME_LABEL] == "dgx001"
    fabric = fabric_from_topology(model, "H100-SXM5-80GB")

    def cost_of(nodes: int) -> StepCost:
        (job,) = [j for j in generate_jobs(WorkloadSpec(nodes_total=12, overlap=0.0)) if j.nodes == nodes][:1]
        return lambda hosts: job.step_seconds(
            hosts, lambda op, size, hs: collective_time(op, "auto", size, Placement.of(hs, 8), fabric).seconds
        )

    free = {h: 8 for h in v.hosts}
    advice = advise(v, free, Request(4, 8, "block"), cost_of(4))
    assert advice.chosen.domain == "ib-leaf-su03-r0-7" and not advice.chosen.miscabled
    assert advice.kueue is not None and advice.kueue.domain == "ib-leaf-su01-r0-7"
    # Eight nodes need two blocks. Ranks alternating between them put every ring edge across:
    # four flows per rail leave su01's rail-0 leaf on its 2 uplinks; in block order only two do.
    eight = cost_of(8)
    su = {k: [f"dgx{i:03d}" for i in range(4 * k - 3, 4 * k + 1)] for k in (1, 2, 3)}
    alternating = [h for pair in zip(su[1], su[3], strict=True) for h in pair]
    assert eight(alternating) > eight([h for pair in zip(su[2], su[3], strict=True) for h in pair])
    assert eight(alternating) > eight(su[1] + su[3])
    spread = advise(v, free, Request(8, 8, "spine_group"), eight)
    assert spread.kueue is not None and set(spread.kueue.blocks) == {"ib-leaf-su01-r0-7", "ib-leaf-su02-r0-7"}
    assert set(spread.chosen.blocks) == {"ib-leaf-su02-r0-7", "ib-leaf-su03-r0-7"}
    assert spread.chosen.step_s <= spread.kueue.step_s
    assert "avoided degraded leaf block ib-leaf-su01-r0-7: ib-leaf-su01-r0 has 2 uplinks, design 4" in spread.reason
