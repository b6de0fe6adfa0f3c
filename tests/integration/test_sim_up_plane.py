"""What ``gpufabric sim up`` does to a running plane when the spec changes
(``simulator.controlplane.twin``), on the session's plane, and every spec's Node objects judged
by the real API server. The rest of ``sim up`` on the real
plane (kubectl on ``sim kubeconfig``, publish reaching real Nodes, Kueue taking our objects up,
``sim down``) is in the demo test, tests/e2e/test_cli.py, which runs it as a user does.
"""

from __future__ import annotations

from typing import Any

import pytest

from simulator.controlplane.nodes import normalise_node
from simulator.controlplane.twin import PROVIDER_PREFIX, replace_foreign_nodes
from simulator.generator import generate
from simulator.kube.populate import gpu_facts, node_objects
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path, shipped_specs

pytestmark = pytest.mark.integration


def _nodes(api: Any) -> dict[str, tuple[str, str]]:
    items, _ = api.list_all("/api/v1/nodes")
    return {n["metadata"]["name"]: (n["metadata"]["uid"], n["spec"].get("providerID", "")) for n in items}


def test_a_spec_switch_replaces_exactly_the_old_specs_nodes(kube_cluster: Any) -> None:
    one_su = load_spec(resolve_spec_path("h100-1su"))
    half = one_su.model_copy(update={"name": "h100-half"})
    old_nodes = node_objects(generate(one_su))
    kube_cluster.register_nodes(old_nodes)
    # A node registered by hand (no simulator providerID) is not ours to delete.
    kube_cluster.register_nodes([{"name": "hand-made", "capacity": {"nvidia.com/gpu": "8"}}])
    api = kube_cluster.api()
    try:
        before = _nodes(api)
        assert before["dgx001"][1] == f"{PROVIDER_PREFIX}h100-1su/dgx001"

        # The same spec again: nothing is foreign, nothing goes.
        assert replace_foreign_nodes(kube_cluster, old_nodes) == 0
        assert _nodes(api) == before

        # Another spec whose hosts have the same names: they are other machines (providerID), so
        # all 32 go, and the nodes registered next are new objects without the old labels.
        new_nodes = node_objects(generate(half))[:16]
        assert {n["metadata"]["name"] for n in new_nodes} <= set(before)
        assert replace_foreign_nodes(kube_cluster, new_nodes) == 32
        assert set(_nodes(api)) == {"hand-made"}
        kube_cluster.register_nodes(new_nodes)
        after = _nodes(api)
        assert set(after) == {"hand-made"} | {n["metadata"]["name"] for n in new_nodes}
        assert after["hand-made"] == before["hand-made"]
        assert after["dgx001"][0] != before["dgx001"][0]
        assert after["dgx001"][1] == f"{PROVIDER_PREFIX}h100-half/dgx001"
    finally:
        api.close()


@pytest.mark.parametrize("spec_name", shipped_specs())
def test_every_specs_nodes_are_valid_node_objects(kube_cluster: Any, spec_name: str) -> None:
    """The first and last node of each spec (every node of a spec has the same label keys) and a
    node of a GPU model we have no facts for, created with ``dryRun=All``: the API server's own
    validation of names, label keys and values, and quantities."""
    nodes = node_objects(generate(load_spec(resolve_spec_path(spec_name))))
    odd = {**nodes[0], "metadata": {**nodes[0]["metadata"], "name": "odd-gpu", "labels": {
        **nodes[0]["metadata"]["labels"], "nvidia.com/gpu.product": gpu_facts("Some GPU (weird) 96GB").product}}}
    api = kube_cluster.api()
    try:
        for node in (nodes[0], nodes[-1], odd):
            obj, status, _managers = normalise_node(node)
            created = api.post("/api/v1/nodes", {**obj, "status": status}, dryRun="All", fieldValidation="Strict")
            assert created["metadata"]["labels"] == node["metadata"]["labels"]
            assert created["status"]["capacity"]["nvidia.com/gpu"] == node["status"]["capacity"]["nvidia.com/gpu"]
        assert _nodes(api) == {}  # a dry run writes nothing
    finally:
        api.close()
