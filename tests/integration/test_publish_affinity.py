"""The GPU-NIC affinity label and map annotation through ``gpufabric publish`` on the real API
server (issue 23, part 4): stored as the affinity asset stores it, read back from the warehouse
as the publish service reads it, applied with the fabric labels in one server-side apply under
our field manager, and removed by the server when a node's affinity is no longer published,
while an annotation another manager set stays."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from connectors.kube import ClusterTarget, api_client
from connectors.kube.client import apply
from connectors.kube.pods import list_nodes_raw
from connectors.kube.publish import execute, node_facts, plan
from core.affinity.fleet import derive_fleet
from core.affinity.render import node_patch
from core.publish import DesiredState, KueuePolicy, LabelScheme, desired_state
from core.topology import derive
from services.gpu_topo import latest_node_patches, write_affinity
from simulator.controlplane import nodes_from_spec
from simulator.generator import generate
from tests.unit.test_topology_support import observe, spec_of, truth_with

pytestmark = pytest.mark.integration

MANAGER = "gpufabric"
LABEL = "topology.gpufabric.io/gpu-nic-affinity"
NOTE = "topology.gpufabric.io/gpu-nic-map"
FOREIGN = "example.com/owner"
HOSTS = ("dgx001", "dgx002", "dgx007")  # in both specs; dgx007's GPU3 reaches its NIC across the socket
# later than any derivation another test stores, so it is the latest this connection sees
FUTURE = datetime(2999, 1, 1, tzinfo=UTC)


def _publish(api: client.ApiClient, state: DesiredState, *, dry_run: bool = False) -> Any:
    p = plan(api, state.labels, state.resources, state.objects, field_manager=MANAGER, max_fraction=0.2,
             annotations=state.annotations)  # fmt: skip
    return execute(api, p, state.labels, state.resources, field_manager=MANAGER, dry_run=dry_run,
                   annotations=state.annotations)  # fmt: skip


def _meta(api: client.ApiClient, name: str) -> tuple[dict[str, str], dict[str, str], set[str]]:
    """(labels, annotations, annotation keys our manager owns) of one Node, from the server."""
    meta: Any = client.CoreV1Api(api).read_node(name).metadata
    owned: set[str] = set()
    for e in meta.managed_fields or ():
        if e.manager == MANAGER and e.operation == "Apply" and not e.subresource:
            notes = (e.fields_v1 or {}).get("f:metadata", {}).get("f:annotations", {})
            owned |= {k.removeprefix("f:") for k in notes if k.startswith("f:")}
    return dict(meta.labels or {}), dict(meta.annotations or {}), owned


def test_affinity_label_and_annotation_are_published_and_removed(
    kube_cluster: Any, warehouse: Any, tmp_path: Path
) -> None:
    kube_cluster.register_nodes(nodes_from_spec("h100-1su"))
    model = derive(observe(truth_with("h100-1su"), tmp_path))
    fleet = derive_fleet(dict(generate(spec_of("h100-4su")).gpu_topo.matrices))
    subset = dataclasses.replace(fleet, nodes=tuple(n for n in fleet.nodes if n.host in HOSTS),
                                 fleet=tuple(f for f in fleet.fleet if f.host in HOSTS))  # fmt: skip
    expected = {h: node_patch(fleet.node(h), "gpufabric.io", fleet.findings_of(h)) for h in HOSTS}
    with warehouse.connect() as conn:
        try:
            write_affinity(conn, "test-publish-affinity", subset, None, FUTURE)
            patches = latest_node_patches(conn, "gpufabric.io")
        finally:
            conn.rollback()  # never committed: no other test sees this derivation
    # what the service rebuilds from the warehouse is what the asset renders from the derivation
    assert patches == expected

    api = api_client(ClusterTarget(kubeconfig=kube_cluster.kubeconfig))
    try:
        foreign = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "dgx007", "annotations": {FOREIGN: "ops"}}}
        apply(api, foreign, field_manager="someone-else")
        fabric = desired_state(model, LabelScheme(), node_facts(list_nodes_raw(api)), [], KueuePolicy())
        state = fabric.with_node_metadata(patches)

        dry = _publish(api, state, dry_run=True)
        assert dry.counts()["annotations_changed"] == 3 and not dry.applied
        assert NOTE not in _meta(api, "dgx001")[1]  # the server's dry run stored nothing
        first = _publish(api, state)
        assert first.applied and first.counts()["annotations_changed"] == 3
        for host in HOSTS:
            labels, notes, owned = _meta(api, host)
            assert labels[LABEL] == expected[host]["metadata"]["labels"][LABEL]
            assert labels["gpufabric.io/pool"] == fabric.labels[host]["gpufabric.io/pool"]  # same apply, both kept
            assert notes[NOTE] == expected[host]["metadata"]["annotations"][NOTE] and owned == {NOTE}
        assert _meta(api, "dgx007")[0][LABEL] == "degraded" and _meta(api, "dgx001")[0][LABEL] == "aligned"
        assert json.loads(_meta(api, "dgx007")[1][NOTE])["gpus"][3]["c"] == "SYS"
        assert LABEL not in _meta(api, "dgx003")[0] and NOTE not in _meta(api, "dgx003")[1]  # no affinity stored

        # dgx007's affinity no longer published: the server drops our label and annotation, not theirs
        without = fabric.with_node_metadata({h: p for h, p in patches.items() if h != "dgx007"})
        second = _publish(api, without)
        assert [d.node for d in second.changed_nodes] == ["dgx007"] and second.guarded_nodes == 1
        assert second.counts()["annotations_changed"] == 1 and second.counts()["labels_removed"] == 1
        labels, notes, owned = _meta(api, "dgx007")
        assert LABEL not in labels and NOTE not in notes and owned == set()
        assert notes[FOREIGN] == "ops" and "gpufabric.io/pool" in labels
        assert NOTE in _meta(api, "dgx001")[1]
        assert _publish(api, without).changed_nodes == []  # settled: nothing left to write
    finally:
        api.close()

