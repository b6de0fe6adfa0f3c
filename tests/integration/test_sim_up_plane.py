"""What ``gpufabric sim up`` does to a running plane when the spec changes
(``simulator.controlplane.twin``), on the session's plane. The rest of ``sim up`` on the real
plane (kubectl on ``sim kubeconfig``, publish reaching real Nodes, Kueue taking our objects up,
``sim down``) is in the demo test, tests/e2e/test_cli.py, which runs it as a user does.
"""

from __future__ import annotations

from typing import Any

import pytest

from simulator.controlplane.twin import PROVIDER_PREFIX, replace_foreign_nodes
from simulator.generator import generate
from simulator.kube.populate import node_objects
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path

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
