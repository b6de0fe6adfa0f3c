"""Three placers on the real control plane (issue 22, part 2): kube-scheduler alone spreads a gang
over leaf blocks, Kueue TAS keeps it in one (exactly where its best fit says, which is what the
advisor and the bench assume Kueue would do), and Kueue honours gpufabric's hint: the pods land
on the hosts the advisor chose, not on Kueue's own best fit.

Two scalable units of four H100 nodes (blocks A = dgx001-004, B = dgx005-008) with our labels and
Kueue objects published; other tenants hold dgx001 and dgx002 (whole nodes) and run CPU-only
pods on B's nodes. dgx003 and dgx004 have a rail-0/rail-1 cable swap (a miscabling finding).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from core.placement import collective_time, fabric_from_topology
from core.placement.advisor import Request, kueue_best_fit
from core.placement.collectives import Placement
from core.placement.workload import Job, WorkloadSpec, job_shape
from core.topology import derive
from simulator import placement as P
from simulator.generator import generate
from simulator.kube.populate import node_objects
from simulator.spec import ClusterSpec
from tests.unit.test_topology_support import observe, spec_of

pytestmark = pytest.mark.integration

BLOCK_A, BLOCK_B = "ib-leaf-su01-r0-7", "ib-leaf-su02-r0-7"


def two_blocks_of_four_miscabled() -> ClusterSpec:
    data = spec_of("h100-4su").model_dump()
    swap = {"host": "dgx003", "rail": 0, "to_rail": 1, "with_host": "dgx004"}
    data.update(name="h100-2x4-swap", hosts="dgx[001-008]", racks="r[01-02]", nodes_per_rack=4, scalable_units=2,
                nodes_per_su=4, gpu_topo_faults={}, defects={"miscabled_ports": [swap]})  # fmt: skip
    data["compute_fabric"]["leaf"]["count"] = 16
    data["compute_fabric"]["spine"]["count"] = 4
    data["management_fabric"]["leaf"]["count"] = 2
    return ClusterSpec.model_validate(data)


@pytest.fixture
def site(kube_cluster: Any) -> Iterator[P.Site]:
    truth = generate(two_blocks_of_four_miscabled())
    with tempfile.TemporaryDirectory() as tmp:
        model = derive(observe(truth, Path(tmp)))
    prepared = P.prepare_site(kube_cluster, node_objects(truth), model)
    try:
        P.occupy(prepared, ["dgx001", "dgx002"])
        api = kube_cluster.api()
        try:  # CPU-only pods of other tenants on block B: kube-scheduler's scoring prefers A's free nodes
            for host in ("dgx005", "dgx006", "dgx007", "dgx008"):
                api.post(f"/api/v1/namespaces/{prepared.background_namespace}/pods", {
                    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"cpu-{host}"},
                    "spec": {"nodeName": host, "terminationGracePeriodSeconds": 0, "containers": [
                        {"name": "m", "image": "etl:1",
                         "resources": {"requests": {"cpu": "100", "memory": "400Gi"}}}]}})  # fmt: skip
        finally:
            api.close()
        yield prepared
    finally:
        P.clear(prepared)


def job(name: str, nodes: int) -> Job:
    params, compute_s, collectives = job_shape(nodes, WorkloadSpec(nodes_total=8))
    return Job(name, 0.0, 1.0, nodes, params, compute_s, collectives, 0.5)


def blocks(site: P.Site, hosts: Sequence[str]) -> set[str]:
    return {site.view.value(h, "block") for h in hosts}


def test_unaware_spreads_kueue_keeps_a_block_and_honours_the_advisors_hint(site: P.Site) -> None:
    assert site.view.hosts["dgx001"]["block"] == BLOCK_A and site.view.hosts["dgx005"]["block"] == BLOCK_B
    assert sorted(site.view.miscabled) == ["dgx003", "dgx004"]
    truth = generate(two_blocks_of_four_miscabled())
    with tempfile.TemporaryDirectory() as tmp:
        fabric = fabric_from_topology(derive(observe(truth, Path(tmp))), "H100-SXM5-80GB")

    def cost_for(j: Job, others: object) -> Any:
        return lambda hosts: j.step_seconds(
            hosts, lambda op, size, hs: collective_time(op, "auto", size, Placement.of(hs, 8), fabric).seconds
        )

    api = site.plane.api()
    try:
        # (a) kube-scheduler alone: the two free nodes of A first (least allocated), then two of B.
        import time as _t

        _t0 = _t.monotonic()
        unaware = P.start(site, api, job("spread", 4), "unaware", [])
        print("T", _t.monotonic() - _t0)
        assert unaware.level is None and len(set(unaware.hosts)) == 4
        assert {"dgx003", "dgx004"} <= set(unaware.hosts) and blocks(site, unaware.hosts) == {BLOCK_A, BLOCK_B}
        P.end(site, api, job("spread", 4), "unaware")

        # (b) Kueue TAS, required at the leaf block: only B holds four, and Kueue keeps the gang there.
        free = site.free([])
        four = P.start(site, api, job("gang", 4), "kueue-required", [])
        assert four.level == "block" and set(four.hosts) == {"dgx005", "dgx006", "dgx007", "dgx008"}
        assert set(four.hosts) == set(kueue_best_fit(site.view, free, Request(4, 8, "block")) or [])
        P.end(site, api, job("gang", 4), "kueue-required")
        # Two nodes: both blocks hold them; Kueue's best fit takes the tighter one, A - the miscabled pair.
        two = P.start(site, api, job("pair", 2), "kueue-required", [])
        assert sorted(two.hosts) == ["dgx003", "dgx004"] == kueue_best_fit(site.view, free, Request(2, 8, "block"))
        P.end(site, api, job("pair", 2), "kueue-required")

        # (c) the advisor steers the same request to healthy hosts of B, and Kueue honours the hint.
        advised = P.start(site, api, job("advised", 2), "advisor", [], cost_for=cost_for)
        assert advised.advice is not None and advised.level == "block"
        assert advised.advice.chosen.domain == BLOCK_B and set(advised.hosts) == set(advised.advice.hosts)
        assert advised.advice.kueue is not None and advised.advice.kueue.domain == BLOCK_A
        assert advised.advice.reason.endswith(
            "avoided dgx003, dgx004: dgx003 mlx5_0 (rail0) is cabled to the rail1 leaf; dgx004 mlx5_1 (rail1) is "
            "cabled to the rail0 leaf (two cables swapped)")
        P.end(site, api, job("advised", 2), "advisor")
    finally:
        api.close()
