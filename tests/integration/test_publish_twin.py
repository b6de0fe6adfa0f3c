"""The publisher against the Kubernetes API twin (real HTTP, real server-side apply, the Kueue
v1beta2 CRDs with their CEL rules): the 4-SU spec's full publish sets exactly the expected
labels, a second publish changes nothing, a topology change relabels only the affected nodes,
a hand label survives, and the blast-radius guard refuses a fleet-wide relabel without force."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from connectors.kube import ClusterTarget, api_client, list_nodes
from connectors.kube.publish import BlastRadiusExceeded, Plan, execute, plan
from core.publish import DesiredState, KueuePolicy, LabelScheme, TenantSpec, desired_state
from core.topology import TopologyModel, derive
from simulator.kube import start
from tests.unit.test_topology_support import observe, truth_with

pytestmark = pytest.mark.integration

KUEUE = ("kueue.x-k8s.io", "v1beta2")
TENANTS = [
    TenantSpec("research", "Research", ["prod", "preemptible"], cohort="science", gpu_quota={"H100": 512}),
    TenantSpec("vision", "Vision", ["prod"], cohort="science", gpu_quota={"H100": 256}),
    TenantSpec("inference", "Inference", ["prod"]),
]
POOL = "nvidia-h100-80gb-hbm3-x8"


@dataclasses.dataclass
class Env:
    api: client.ApiClient
    model: TopologyModel


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    truth = truth_with("h100-4su")
    model = derive(observe(truth, tmp_path_factory.mktemp("obs")))
    run = start(truth, tmp_path_factory.mktemp("kube-publish"))
    api = api_client(ClusterTarget(kubeconfig=Path(run.extra["kubeconfig"])))
    try:
        yield Env(api, model)
    finally:
        api.close()
        os.kill(run.pids[0], signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if os.waitpid(run.pids[0], os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.05)


def desired(env: Env, model: TopologyModel, scheme: LabelScheme | None = None) -> DesiredState:
    facts = {n.metadata.name: dict(n.metadata.labels or {}) for n in list_nodes(env.api)}
    return desired_state(model, scheme or LabelScheme(), facts, TENANTS, KueuePolicy())


def publish(env: Env, state: DesiredState, *, force: bool = False, dry_run: bool = False) -> Plan:
    p = plan(env.api, state.labels, state.resources, state.objects, field_manager="gpufabric", max_fraction=0.2)
    if dry_run:
        return p
    return execute(env.api, p, state.labels, state.resources, field_manager="gpufabric", force=force)


def labels_of(env: Env) -> dict[str, dict[str, str]]:
    return {n.metadata.name: dict(n.metadata.labels) for n in list_nodes(env.api)}


def ours(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if "gpufabric.io" in k or "topograph.run" in k}


def kueue_objects(env: Env, plural: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.CustomObjectsApi(env.api).list_cluster_custom_object(*KUEUE, plural)["items"]
    return items


def test_publish_lifecycle_on_the_4su_spec(env: Env) -> None:
    state = desired(env, env.model)
    before = labels_of(env)
    # dry run: the full diff, nothing written
    dry = publish(env, state, dry_run=True)
    assert dry.counts() == {
        "nodes_total": 128, "nodes_changed": 128, "nodes_guarded": 0, "nodes_missing": 0, "labels_added": 768,
        "labels_changed": 0, "labels_removed": 0, "resources_changed": 256, "objects_created": 12,
        "objects_changed": 0, "objects_deleted": 0,
    }  # fmt: skip
    assert labels_of(env) == before

    first = publish(env, state)
    assert first.applied and first.counts()["nodes_changed"] == 128
    after = labels_of(env)
    for node, labels in after.items():
        su = (int(node.removeprefix("dgx")) - 1) // 32 + 1
        assert ours(labels) == {
            "fabric.gpufabric.io/pod": "ib-spine-01-16",
            "fabric.gpufabric.io/spine-group": "ib-spine-01-16",
            "fabric.gpufabric.io/block": f"ib-leaf-su0{su}-r0-7",
            "accelerator.gpufabric.io/domain": f"nvl-{node}",
            "accelerator.gpufabric.io/sub-domain": f"nvl-{node}",
            "gpufabric.io/pool": POOL,
        }, node
        # labels we do not manage are exactly as before
        assert {k: v for k, v in labels.items() if k not in ours(labels)} == before[node]
    node = client.CoreV1Api(env.api).read_node("dgx007")
    assert node.status.capacity["gpufabric.io/rails"] == "8" == node.status.allocatable["gpufabric.io/rails"]
    assert node.status.capacity["gpufabric.io/healthy-ib-ports"] == "8"
    assert node.status.capacity["nvidia.com/gpu"] == "8"  # kubelet's resources untouched

    (topo,) = kueue_objects(env, "topologies")
    assert [lv["nodeLabel"] for lv in topo["spec"]["levels"]] == [
        "fabric.gpufabric.io/pod", "fabric.gpufabric.io/spine-group", "fabric.gpufabric.io/block",
        "accelerator.gpufabric.io/domain", "accelerator.gpufabric.io/sub-domain", "kubernetes.io/hostname",
    ]  # fmt: skip
    (flavor,) = kueue_objects(env, "resourceflavors")
    assert flavor["spec"]["nodeLabels"] == {"gpufabric.io/pool": POOL}
    assert flavor["spec"]["topologyName"] == topo["metadata"]["name"]
    cohorts = {c["metadata"]["name"]: c["spec"].get("parentName") for c in kueue_objects(env, "cohorts")}
    assert cohorts == {"gpufabric": None, "science": "gpufabric"}
    cqs = {c["metadata"]["name"]: c["spec"] for c in kueue_objects(env, "clusterqueues")}
    assert {k: v["cohortName"] for k, v in cqs.items()} == {"inference": "gpufabric", "research": "science",
                                                            "vision": "science"}  # fmt: skip
    assert cqs["research"]["resourceGroups"][0]["flavors"] == [{"name": flavor["metadata"]["name"], "resources": [
        {"name": "nvidia.com/gpu", "nominalQuota": 512, "borrowingLimit": 512, "lendingLimit": 256}]}]
    assert cqs["inference"]["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "nvidia.com/gpu", "nominalQuota": 0}]
    lqs = {(q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"]["clusterQueue"]
           for q in kueue_objects(env, "localqueues")}  # fmt: skip
    assert lqs == {("inference", "inference"): "inference", ("research", "research"): "research",
                   ("vision", "vision"): "vision"}  # fmt: skip
    prios = {w["metadata"]["name"]: w["value"] for w in kueue_objects(env, "workloadpriorityclasses")}
    assert prios == {"preemptible": 100, "prod": 1000}

    # someone labels a node by hand, then we publish again: nothing changes, the label stays
    core = client.CoreV1Api(env.api)
    core.patch_node("dgx005", {"metadata": {"labels": {"owner": "alice"}}}, field_manager="kubectl-label")
    rv = {n.metadata.name: n.metadata.resource_version for n in list_nodes(env.api)}
    second = publish(env, desired(env, env.model))
    assert second.counts()["nodes_changed"] == 0
    assert {c.change for c in second.object_changes} == {"unchanged"}
    assert {n.metadata.name: n.metadata.resource_version for n in list_nodes(env.api)} == rv

    # a topology change: three hosts recabled into SU 2's block; only they are relabelled
    su2 = env.model.host("dgx040").block
    moved = {"dgx001", "dgx002", "dgx003"}
    hosts = tuple(dataclasses.replace(h, block=su2) if h.name in moved else h for h in env.model.hosts)
    changed_model = dataclasses.replace(env.model, hosts=hosts)
    third = publish(env, desired(env, changed_model))
    assert [d.node for d in third.changed_nodes] == sorted(moved)
    assert all([(c.key, c.before, c.after) for c in d.labels] == [
        ("fabric.gpufabric.io/block", "ib-leaf-su01-r0-7", "ib-leaf-su02-r0-7")] for d in third.changed_nodes)
    now = labels_of(env)
    assert {n for n in now if now[n] != after[n]} == moved | {"dgx005"}
    assert now["dgx005"]["owner"] == "alice"
    assert ours(now["dgx005"]) == ours(after["dgx005"])

    # switching to the topograph scheme relabels every node: refused by the guard, then forced
    topograph = desired(env, changed_model, LabelScheme("topograph"))
    with pytest.raises(BlastRadiusExceeded, match="refusing to change 128 of 128 nodes"):
        publish(env, topograph)
    assert labels_of(env) == now
    forced = publish(env, topograph, force=True)
    changes = {(c.kind, c.change) for c in forced.object_changes if c.change != "unchanged"}
    assert changes == {("Topology", "created"), ("Topology", "deleted"), ("ResourceFlavor", "created"),
                       ("ResourceFlavor", "deleted"), ("ClusterQueue", "changed")}  # fmt: skip
    relabelled = labels_of(env)["dgx100"]
    assert ours(relabelled) == {
        "fabric.topograph.run/tier-3": "ib-spine-01-16", "fabric.topograph.run/tier-2": "ib-spine-01-16",
        "fabric.topograph.run/tier-1": "ib-leaf-su04-r0-7", "accelerator.topograph.run/domain": "nvl-dgx100",
        "gpufabric.io/pool": POOL,
    }  # fmt: skip
    (topo2,) = kueue_objects(env, "topologies")
    assert topo2["metadata"]["name"] != topo["metadata"]["name"]
    (flavor2,) = kueue_objects(env, "resourceflavors")
    assert flavor2["spec"]["topologyName"] == topo2["metadata"]["name"]
    cq = next(c for c in kueue_objects(env, "clusterqueues") if c["metadata"]["name"] == "research")
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["name"] == flavor2["metadata"]["name"]
