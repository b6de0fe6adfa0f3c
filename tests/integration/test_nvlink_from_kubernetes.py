"""NVLink domains read from the GFD labels of a cluster's nodes, on the real API server (the
session's control plane, with the spec's nodes registered as GPU Feature Discovery labels them)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import dagster as dg
import pytest
import yaml

from assets.infiniband.assets import nvlink_domains
from pipelines.resources import SiteConfigResource, WarehouseResource
from simulator.controlplane import nodes_from_spec


def _partition(assignment: dict[str, str | None]) -> set[frozenset[str]]:
    groups: dict[str | None, set[str]] = defaultdict(set)
    for node, group in assignment.items():
        groups[group].add(node)
    return {frozenset(g) for g in groups.values()}


@pytest.mark.parametrize("spec", ["gb200-nvl72", "h100-1su"])
def test_domains_from_clique_labels_match_the_ground_truth(  # type: ignore[no-untyped-def]
    spec: str, simulated, warehouse, kube_cluster, tmp_path: Path
) -> None:
    sim = simulated(spec)
    kube_cluster.register_nodes(nodes_from_spec(spec))
    site = yaml.safe_load(sim.config_path.read_text())
    sources = site.setdefault("sources", {})
    sources["kubernetes"] = [{"name": "sim", "kubeconfig": str(kube_cluster.kubeconfig)}]
    sources["nvlink"] = [*(sources.get("nvlink") or []), {"name": "sim-gfd", "kind": "kubernetes", "cluster": "sim"}]
    config = tmp_path / "gpufabric.yaml"
    config.write_text(yaml.safe_dump(site))
    result = dg.materialize(
        [nvlink_domains],
        resources={"warehouse": WarehouseResource(), "site": SiteConfigResource(path=str(config))},
    )
    assert result.success
    truth = sim.truth.host_domains
    with warehouse.connect() as conn:
        rows = conn.execute(
            "SELECT node, method, domain, cluster_uuid FROM raw.nvlink_domains "
            "WHERE run_id = %s AND source = 'sim-gfd'",
            (result.run_id,),
        ).fetchall()
        status = conn.execute(
            "SELECT status, rows_landed FROM ops.collection_status WHERE run_id = %s AND device = 'sim-gfd'",
            (result.run_id,),
        ).fetchone()
    assert status == ("ok", len(truth))
    assert {r[0] for r in rows} == set(truth)
    if spec.startswith("gb200"):
        # Multi-node NVLink: the clique's cluster UUID is the rack's NVL72 domain, and the clique
        # (cluster.clique) is its sub-domain.
        assert {r[1] for r in rows} == {"gfd_label"}
        assert _partition({r[0]: r[3] for r in rows}) == _partition({h: d.nvlink_domain for h, d in truth.items()})
        assert _partition({r[0]: r[2] for r in rows}) == _partition({h: d.nvlink_sub_domain for h, d in truth.items()})
    else:
        # HGX without MNNVL: every node is its own domain.
        assert {r[2] for r in rows} == {f"nvl-{h}" for h in truth}
