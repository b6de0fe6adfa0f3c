"""The Kubernetes API twin, driven by the official ``kubernetes`` client over a real socket.

One twin (gb200-nvl72: 144 nodes with NVLink cliques) serves the whole module; tests use their
own object names and namespaces so they do not depend on each other's order.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from connectors.kube import FIELD_MANAGER, ClusterTarget, api_client, apply, list_nodes, list_pods
from simulator.generator import GroundTruth, generate
from simulator.kube import KubeTwinAdmin, start
from simulator.kube.populate import clique_label
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from simulator.up import stop_pids

pytestmark = pytest.mark.integration

KUEUE = ("kueue.x-k8s.io", "v1beta2")
APPLY = "application/apply-patch+yaml"


@dataclass
class Twin:
    truth: GroundTruth
    kubeconfig: Path
    url: str
    token: str
    api: client.ApiClient
    admin: KubeTwinAdmin

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @property
    def leases(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api)

    def http(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}", **kw.pop("headers", {})}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=10.0, **kw)


@pytest.fixture(scope="session")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    truth = generate(load_spec(resolve_spec_path("gb200-nvl72")))
    run = start(truth, tmp_path_factory.mktemp("kube-twin"))
    kubeconfig = Path(run.extra["kubeconfig"])
    admin = KubeTwinAdmin.from_kubeconfig(kubeconfig)
    api = api_client(ClusterTarget(kubeconfig=kubeconfig))
    try:
        yield Twin(truth, kubeconfig, run.extra["url"], admin.token, api, admin)
    finally:
        api.close()
        stop_pids(run.pids)


@pytest.fixture
def clean_faults(twin: Twin) -> Iterator[KubeTwinAdmin]:
    twin.admin.clear_faults()
    yield twin.admin
    twin.admin.clear_faults()


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    assert body["kind"] == "Status" and body["code"] == exc.status
    return body


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def pod(pod_name: str, labels: dict[str, str] | None = None, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name, "labels": labels or {}}, "spec": spec}


# --- population -----------------------------------------------------------------------------


def test_nodes_come_from_the_ground_truth_with_gfd_labels_and_gpus(twin: Twin) -> None:
    nodes = list_nodes(twin.api)
    hosts = twin.truth.hosts()
    assert sorted(n.metadata.name for n in nodes) == sorted(h.id for h in hosts)
    by_clique: dict[str, set[str]] = {}
    for node in nodes:
        labels = node.metadata.labels
        assert labels["kubernetes.io/hostname"] == node.metadata.name
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-GB200"
        assert labels["nvidia.com/gpu.count"] == "4" == node.status.allocatable["nvidia.com/gpu"]
        assert node.status.capacity["nvidia.com/gpu"] == "4"
        assert labels["nvidia.com/mig.capable"] == "true"
        assert int(labels["nvidia.com/gpu.memory"]) > 100_000
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
        by_clique.setdefault(labels["nvidia.com/gpu.clique"], set()).add(node.metadata.name)
    # one clique per NVLink sub-domain: 8 racks x 2 halves of 9 trays
    domains = twin.truth.host_domains
    assert len(by_clique) == 16 and all(len(members) == 9 for members in by_clique.values())
    for clique, members in by_clique.items():
        assert {domains[m].nvlink_sub_domain for m in members} == {domains[next(iter(members))].nvlink_sub_domain}
        d = domains[next(iter(members))]
        assert clique == clique_label(twin.truth.spec.seed, d.nvlink_domain or "", d.nvlink_sub_domain)
    owners = {e.manager for e in nodes[0].metadata.managed_fields}
    assert owners == {"kubelet", "nfd-master"}


def test_discovery_version_and_namespaces(twin: Twin) -> None:
    assert client.VersionApi(twin.api).get_code().git_version.startswith("v1.33")
    assert client.CoreApi(twin.api).get_api_versions().versions == ["v1"]
    groups = {g.name for g in client.ApisApi(twin.api).get_api_versions().groups}
    assert groups == {"coordination.k8s.io", "kueue.x-k8s.io"}
    kueue = twin.http("GET", "/apis/kueue.x-k8s.io/v1beta2").json()
    assert {r["name"] for r in kueue["resources"]} >= {"topologies", "resourceflavors", "clusterqueues",
                                                       "cohorts", "localqueues", "workloadpriorityclasses"}
    assert twin.core.read_namespace("default").status.phase == "Active"


# --- nodes: get, selectors, patches, SSA ----------------------------------------------------


def test_get_missing_node_is_404_with_status(twin: Twin) -> None:
    with pytest.raises(ApiException) as err:
        twin.core.read_node("no-such-node")
    assert err.value.status == 404
    body = status_of(err.value)
    assert body["reason"] == "NotFound" and body["details"] == {"name": "no-such-node", "kind": "nodes"}


def test_wrong_token_is_401(twin: Twin) -> None:
    response = httpx.get(f"{twin.url}/api/v1/nodes", headers={"Authorization": "Bearer wrong"})
    assert response.status_code == 401
    assert response.json()["reason"] == "Unauthorized"
    config = client.Configuration(host=twin.url, api_key={"BearerToken": "nope"},
                                  api_key_prefix={"BearerToken": "Bearer"})
    with client.ApiClient(config) as api, pytest.raises(ApiException) as err:
        client.CoreV1Api(api).list_node()
    assert err.value.status == 401


def test_label_selectors(twin: Twin) -> None:
    core = twin.core
    r01 = [h.id for h in twin.truth.hosts() if h.attributes["rack"] == "r01"]
    clique = core.read_node(r01[0]).metadata.labels["nvidia.com/gpu.clique"]
    assert len(core.list_node(label_selector=f"nvidia.com/gpu.clique={clique}").items) == 9
    assert len(core.list_node(label_selector=f"nvidia.com/gpu.clique!={clique}").items) == 135
    names = f"{r01[0]},{r01[1]}"
    assert len(core.list_node(label_selector=f"kubernetes.io/hostname in ({names})").items) == 2
    assert len(core.list_node(label_selector=f"kubernetes.io/hostname notin ({names})").items) == 142
    assert len(core.list_node(label_selector="nvidia.com/gpu.present").items) == 144
    assert core.list_node(label_selector="!nvidia.com/gpu.present").items == []
    both = core.list_node(label_selector=f"nvidia.com/gpu.present,kubernetes.io/hostname in ({names})")
    assert len(both.items) == 2
    assert [n.metadata.name for n in core.list_node(field_selector=f"metadata.name={r01[3]}").items] == [r01[3]]
    with pytest.raises(ApiException) as err:
        core.list_node(label_selector="a in (b")
    assert err.value.status == 400 and status_of(err.value)["reason"] == "BadRequest"


def test_list_pagination_with_continue(twin: Twin) -> None:
    first = twin.core.list_node(limit=100)
    assert len(first.items) == 100 and first.metadata._continue
    second = twin.core.list_node(limit=100, _continue=first.metadata._continue)
    assert len(second.items) == 44 and not second.metadata._continue
    assert len({n.metadata.name for n in first.items + second.items}) == 144


def test_merge_strategic_and_json_patch_on_a_node(twin: Twin) -> None:
    node = twin.truth.hosts()[10].id
    core = twin.core
    core.patch_node(node, {"metadata": {"labels": {"team": "a"}}}, _content_type="application/merge-patch+json")
    assert core.read_node(node).metadata.labels["team"] == "a"
    core.patch_node(node, {"metadata": {"labels": {"team": None}}})  # dict -> strategic merge; null deletes
    assert "team" not in core.read_node(node).metadata.labels
    # a list body -> JSON patch
    core.patch_node(node, [{"op": "add", "path": "/metadata/labels/json-patched", "value": "yes"}])
    assert core.read_node(node).metadata.labels["json-patched"] == "yes"
    core.patch_node(node, [{"op": "remove", "path": "/metadata/labels/json-patched"}])
    with pytest.raises(ApiException) as err:
        core.patch_node(node, [{"op": "test", "path": "/metadata/name", "value": "other"}])
    assert err.value.status == 422


def test_strategic_merge_on_status_capacity_keeps_other_resources(twin: Twin) -> None:
    node = twin.truth.hosts()[11].id
    before = twin.core.read_node(node)
    patched = twin.core.patch_node_status(node, {"status": {"capacity": {"example.com/ib-rail": "4"},
                                                            "allocatable": {"example.com/ib-rail": "4"}}})
    assert patched.status.capacity["example.com/ib-rail"] == "4"
    assert patched.status.capacity["nvidia.com/gpu"] == before.status.capacity["nvidia.com/gpu"]
    assert patched.status.allocatable["cpu"] == before.status.allocatable["cpu"]
    assert len(patched.status.conditions) == len(before.status.conditions)
    # conditions merge by type (their patchMergeKey): one condition changes, the others stay
    cond = {"type": "Ready", "status": "False", "reason": "Test"}
    patched = twin.core.patch_node_status(node, {"status": {"conditions": [cond]}})
    assert {c.type: c.status for c in patched.status.conditions}["Ready"] == "False"
    assert len(patched.status.conditions) == len(before.status.conditions)
    # status changes through the main resource are ignored (status subresource semantics)
    twin.core.patch_node(node, {"status": {"capacity": {"example.com/other": "1"}}})
    assert "example.com/other" not in twin.core.read_node(node).status.capacity
    twin.core.patch_node_status(node, {"status": {"conditions": [{"type": "Ready", "status": "True"}],
                                                  "capacity": {"example.com/ib-rail": None},
                                                  "allocatable": {"example.com/ib-rail": None}}})


def _ssa_node(twin: Twin, node: str, labels: dict[str, str], manager: str, force: bool = False,
              dry_run: bool = False) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}}
    return apply(twin.api, body, field_manager=manager, force=force, dry_run=dry_run)


def _fields_of(obj: dict[str, Any], manager: str) -> dict[str, Any]:
    entry = next(e for e in obj["metadata"]["managedFields"] if e["manager"] == manager)
    assert entry["operation"] == "Apply" and entry["fieldsType"] == "FieldsV1"
    return entry["fieldsV1"]


def test_server_side_apply_ownership_stale_removal_and_hand_labels(twin: Twin) -> None:
    node = twin.truth.hosts()[20].id
    out = _ssa_node(twin, node, {"fabric.gpufabric.io/block": "b1", "fabric.gpufabric.io/pod": "p1"}, FIELD_MANAGER)
    assert _fields_of(out, FIELD_MANAGER) == {"f:metadata": {"f:labels": {
        "f:fabric.gpufabric.io/block": {}, "f:fabric.gpufabric.io/pod": {}}}}
    # someone labels the node by hand (kubectl label = a merge patch by its own manager)
    twin.core.patch_node(node, {"metadata": {"labels": {"owner": "alice"}}}, field_manager="kubectl-label")
    # the publisher stops publishing the pod label: it disappears, the hand label and GFD labels stay
    out = _ssa_node(twin, node, {"fabric.gpufabric.io/block": "b2"}, FIELD_MANAGER)
    labels = out["metadata"]["labels"]
    assert labels["fabric.gpufabric.io/block"] == "b2"
    assert "fabric.gpufabric.io/pod" not in labels
    assert labels["owner"] == "alice" and labels["nvidia.com/gpu.product"] == "NVIDIA-GB200"
    assert _fields_of(out, FIELD_MANAGER) == {"f:metadata": {"f:labels": {"f:fabric.gpufabric.io/block": {}}}}
    # the read path shows the same managedFields through the client's models
    managers = {e.manager for e in twin.core.read_node(node).metadata.managed_fields}
    assert {FIELD_MANAGER, "kubectl-label", "kubelet", "nfd-master"} <= managers
    # re-applying the same configuration is a no-op: resourceVersion does not move
    again = _ssa_node(twin, node, {"fabric.gpufabric.io/block": "b2"}, FIELD_MANAGER)
    assert again["metadata"]["resourceVersion"] == out["metadata"]["resourceVersion"]
    # applying nothing removes everything the manager owned, and nothing else
    out = _ssa_node(twin, node, {}, FIELD_MANAGER)
    assert "fabric.gpufabric.io/block" not in out["metadata"]["labels"]
    assert out["metadata"]["labels"]["owner"] == "alice"


def test_server_side_apply_conflicts_and_force(twin: Twin) -> None:
    node = twin.truth.hosts()[21].id
    _ssa_node(twin, node, {"accelerator.gpufabric.io/domain": "d1"}, "publisher-a")
    # same value from another manager: shared ownership, no conflict
    _ssa_node(twin, node, {"accelerator.gpufabric.io/domain": "d1"}, "publisher-b")
    with pytest.raises(ApiException) as err:
        _ssa_node(twin, node, {"accelerator.gpufabric.io/domain": "d2"}, "publisher-b")
    assert err.value.status == 409
    body = status_of(err.value)
    assert body["reason"] == "Conflict"
    causes = body["details"]["causes"]
    assert causes == [{"reason": "FieldManagerConflict", "message": 'conflict with "publisher-a" using v1',
                       "field": ".metadata.labels.accelerator.gpufabric.io/domain"}]
    # a GFD label belongs to nfd-master: changing it conflicts too
    with pytest.raises(ApiException) as err:
        _ssa_node(twin, node, {"nvidia.com/gpu.product": "other"}, "publisher-b")
    assert "nfd-master" in status_of(err.value)["message"]
    # force takes the field; the previous owner loses it
    out = _ssa_node(twin, node, {"accelerator.gpufabric.io/domain": "d2"}, "publisher-b", force=True)
    assert out["metadata"]["labels"]["accelerator.gpufabric.io/domain"] == "d2"
    owners = [e["manager"] for e in out["metadata"]["managedFields"]
              if "f:accelerator.gpufabric.io/domain" in e.get("fieldsV1", {}).get("f:metadata", {}).get("f:labels", {})]
    assert owners == ["publisher-b"]
    with pytest.raises(ApiException) as err:
        _ssa_node(twin, node, {"accelerator.gpufabric.io/domain": "d1"}, "publisher-a")
    assert err.value.status == 409
    _ssa_node(twin, node, {}, "publisher-a")
    _ssa_node(twin, node, {}, "publisher-b")
    assert "accelerator.gpufabric.io/domain" not in twin.core.read_node(node).metadata.labels


def test_apply_requires_field_manager_and_matching_kind(twin: Twin) -> None:
    node = twin.truth.hosts()[22].id
    body = json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    response = twin.http("PATCH", f"/api/v1/nodes/{node}", content=body, headers={"Content-Type": APPLY})
    assert response.status_code == 400 and response.json()["reason"] == "BadRequest"
    wrong = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": node}})
    response = twin.http("PATCH", f"/api/v1/nodes/{node}?fieldManager=x", content=wrong,
                         headers={"Content-Type": APPLY})
    assert response.status_code == 400


def test_dry_run_changes_nothing(twin: Twin) -> None:
    node = twin.truth.hosts()[23].id
    before = twin.core.read_node(node)
    out = _ssa_node(twin, node, {"dry": "run"}, FIELD_MANAGER, dry_run=True)
    assert out["metadata"]["labels"]["dry"] == "run"
    twin.core.patch_node(node, {"metadata": {"labels": {"dry": "merge"}}}, dry_run="All")
    after = twin.core.read_node(node)
    assert "dry" not in after.metadata.labels
    assert after.metadata.resource_version == before.metadata.resource_version
    ns = name("dry")
    created = twin.core.create_namespaced_pod(ns, pod("p"), dry_run="All")
    assert created.metadata.uid and created.metadata.name == "p"
    with pytest.raises(ApiException) as err:
        twin.core.read_namespaced_pod("p", ns)
    assert err.value.status == 404
    twin.core.create_namespaced_pod("default", pod(pod_name := name("keep")))
    twin.core.delete_namespaced_pod(pod_name, "default", dry_run="All")
    assert twin.core.read_namespaced_pod(pod_name, "default").metadata.name == pod_name
    with pytest.raises(ApiException) as err:
        twin.core.patch_node(node, {"metadata": {"labels": {"x": "y"}}}, dry_run="Some")
    assert err.value.status == 400
    twin.core.delete_namespaced_pod(pod_name, "default")


# --- pods and leases ------------------------------------------------------------------------


def test_pod_lifecycle_conflicts_and_selectors(twin: Twin) -> None:
    ns = name("team")
    nodes = [h.id for h in twin.truth.hosts()[:2]]
    core = twin.core
    created = core.create_namespaced_pod(ns, pod("a", {"gpufabric.io/root-id": "r1"}, nodes[0]))
    assert created.metadata.uid and created.metadata.generation == 1 and created.status.phase == "Pending"
    assert created.metadata.creation_timestamp is not None
    core.create_namespaced_pod(ns, pod("b", {"gpufabric.io/root-id": "r2"}, nodes[1]))
    core.create_namespaced_pod(ns, pod("c", {}, nodes[1]))
    assert core.read_namespace(ns).metadata.name == ns  # namespaces are implicit
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(ns, pod("a"))
    assert err.value.status == 409 and status_of(err.value)["reason"] == "AlreadyExists"
    assert [p.metadata.name for p in core.list_namespaced_pod(ns, label_selector="gpufabric.io/root-id").items] == [
        "a", "b"]
    assert [p.metadata.name for p in core.list_namespaced_pod(ns, field_selector=f"spec.nodeName={nodes[1]}").items
            ] == ["b", "c"]
    everywhere = list_pods(twin.api, label_selector="gpufabric.io/root-id=r2")
    assert [(p.metadata.namespace, p.metadata.name) for p in everywhere] == [(ns, "b")]
    assert [p.metadata.name for p in list_pods(twin.api, ns, field_selector="metadata.name=c")] == ["c"]
    # optimistic concurrency: a replace with a stale resourceVersion is a 409 Conflict
    stale = core.read_namespaced_pod("a", ns)
    stale.metadata.labels["x"] = "1"
    core.replace_namespaced_pod("a", ns, stale)
    stale.metadata.labels["x"] = "2"
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_pod("a", ns, stale)
    assert err.value.status == 409 and status_of(err.value)["reason"] == "Conflict"
    # status is its own subresource
    core.patch_namespaced_pod_status("a", ns, {"status": {"phase": "Running"}})
    assert core.read_namespaced_pod("a", ns).status.phase == "Running"
    # pod specs are immutable apart from a few fields
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("a", ns, {"spec": {"nodeName": nodes[1]}})
    assert err.value.status == 422 and status_of(err.value)["details"]["causes"][0]["field"] == "spec"
    deleted = core.delete_namespaced_pod("a", ns)
    assert deleted.metadata.name == "a"
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_pod("a", ns)
    assert err.value.status == 404
    core.delete_namespace(ns)
    assert core.list_namespaced_pod(ns).items == []


def test_invalid_pod_and_label_values_are_422(twin: Twin) -> None:
    with pytest.raises(ApiException) as err:
        twin.core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                                                    "spec": {"containers": []}})
    assert err.value.status == 422
    assert status_of(err.value)["details"]["causes"][0]["field"] == "spec.containers"
    node = twin.truth.hosts()[24].id
    with pytest.raises(ApiException) as err:
        twin.core.patch_node(node, {"metadata": {"labels": {"gpu": "B200 (GB200 NVL72)"}}})
    assert err.value.status == 422 and status_of(err.value)["reason"] == "Invalid"


def test_leases_create_replace_conflict_and_finalizers(twin: Twin) -> None:
    ns = name("leases")
    leases = twin.leases
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "reaper"},
            "spec": {"holderIdentity": "pod-1", "leaseDurationSeconds": 15,
                     "renewTime": "2026-01-01T00:00:00.000000Z"}}
    created = leases.create_namespaced_lease(ns, body)
    assert created.spec.holder_identity == "pod-1"
    mine = leases.read_namespaced_lease("reaper", ns)
    theirs = leases.read_namespaced_lease("reaper", ns)
    mine.spec.holder_identity = "pod-2"
    leases.replace_namespaced_lease("reaper", ns, mine)
    theirs.spec.holder_identity = "pod-3"
    with pytest.raises(ApiException) as err:
        leases.replace_namespaced_lease("reaper", ns, theirs)
    assert err.value.status == 409
    assert [x.spec.holder_identity for x in leases.list_namespaced_lease(ns).items] == ["pod-2"]
    # finalizers hold deletion until removed
    leases.patch_namespaced_lease("reaper", ns, {"metadata": {"finalizers": ["gpufabric.io/audit"]}})
    leases.delete_namespaced_lease("reaper", ns)
    assert leases.read_namespaced_lease("reaper", ns).metadata.deletion_timestamp is not None
    leases.patch_namespaced_lease("reaper", ns, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        leases.read_namespaced_lease("reaper", ns)
    assert err.value.status == 404


# --- watch ------------------------------------------------------------------------------------


def test_watch_resumes_from_a_resource_version(twin: Twin) -> None:
    ns = name("watch")
    core = twin.core
    start_rv = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_pod(ns, pod("w1", {"app": "x"}))
    core.patch_namespaced_pod("w1", ns, {"metadata": {"labels": {"step": "2"}}})
    core.delete_namespaced_pod("w1", ns)
    events = list(watch.Watch().stream(core.list_namespaced_pod, ns, resource_version=start_rv, timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]
    assert isinstance(events[0]["object"], client.V1Pod)
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(start_rv)
    # resume after the first event: only the later two come back
    resumed = list(watch.Watch().stream(core.list_namespaced_pod, ns, resource_version=str(rvs[0]),
                                        timeout_seconds=1))
    assert [e["type"] for e in resumed] == ["MODIFIED", "DELETED"]


def test_watch_live_events_with_label_selector(twin: Twin) -> None:
    ns = name("live")
    core = twin.core
    core.create_namespaced_pod(ns, pod("before", {"app": "x"}))

    def later() -> None:
        time.sleep(0.3)
        core.create_namespaced_pod(ns, pod("other", {"app": "y"}))
        core.create_namespaced_pod(ns, pod("after", {"app": "x"}))
        core.patch_namespaced_pod("before", ns, {"metadata": {"labels": {"app": "z"}}})  # leaves the selector

    thread = threading.Thread(target=later)
    thread.start()
    seen = []
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_pod, ns, label_selector="app=x", timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 3:
            w.stop()
    thread.join()
    assert seen == [("ADDED", "before"), ("ADDED", "after"), ("DELETED", "before")]


def test_watch_from_a_compacted_resource_version_is_410(twin: Twin) -> None:
    ns = name("gone")
    old_rv = twin.core.list_namespaced_pod(ns).metadata.resource_version
    twin.core.create_namespaced_pod(ns, pod("g"))
    twin.admin.compact()
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(twin.core.list_namespaced_pod, ns, resource_version=old_rv, timeout_seconds=1))
    assert err.value.status == 410
    raw = twin.http("GET", f"/api/v1/namespaces/{ns}/pods?watch=true&resourceVersion={old_rv}&timeoutSeconds=1")
    event = json.loads(raw.text.splitlines()[0])
    assert event["type"] == "ERROR" and event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"


def test_watch_sends_a_bookmark_when_asked(twin: Twin) -> None:
    ns = name("bm")
    raw = twin.http("GET", f"/api/v1/namespaces/{ns}/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=1")
    events = [json.loads(line) for line in raw.text.splitlines()]
    assert events[-1]["type"] == "BOOKMARK" and events[-1]["object"]["metadata"]["resourceVersion"]


# --- Kueue CRDs -------------------------------------------------------------------------------


def kueue(kind: str, obj_name: str, spec: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": {"name": obj_name}}
    if spec is not None:
        body["spec"] = spec
    body.update(top)
    return body


VALID = {
    "topologies": kueue("Topology", "fabric", {"levels": [
        {"nodeLabel": "fabric.gpufabric.io/block"}, {"nodeLabel": "accelerator.gpufabric.io/domain"},
        {"nodeLabel": "kubernetes.io/hostname"}]}),
    "resourceflavors": kueue("ResourceFlavor", "gb200", {
        "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-GB200"}, "topologyName": "fabric"}),
    "cohorts": kueue("Cohort", "research", {}),
    "clusterqueues": kueue("ClusterQueue", "team-a", {
        "cohortName": "research",
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
            {"name": "gb200", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 64, "borrowingLimit": "8"}]}]}],
    }),
    "workloadpriorityclasses": kueue("WorkloadPriorityClass", "high", None, value=1000, description="urgent"),
}


def test_each_kueue_kind_is_accepted_when_valid(twin: Twin) -> None:
    custom = twin.custom
    for plural, body in VALID.items():
        created = custom.create_cluster_custom_object(*KUEUE, plural, body)
        assert created["metadata"]["generation"] == 1 and created["metadata"]["uid"]
        assert custom.get_cluster_custom_object(*KUEUE, plural, body["metadata"]["name"])["kind"] == body["kind"]
    cq = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", "team-a")
    assert cq["spec"]["queueingStrategy"] == "BestEffortFIFO"  # schema default filled in
    lq = kueue("LocalQueue", "default", {"clusterQueue": "team-a"})
    created = custom.create_namespaced_custom_object(*KUEUE, "team-a", "localqueues", lq)
    assert created["metadata"]["namespace"] == "team-a"
    listed = custom.list_cluster_custom_object(*KUEUE, "resourceflavors", label_selector="")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["gb200"]
    # apply (our field manager) and delete through the connector helpers and the client
    applied = apply(twin.api, kueue("Cohort", "applied", {"fairSharing": {"weight": "2"}}))
    assert applied["metadata"]["managedFields"][0]["manager"] == FIELD_MANAGER
    custom.delete_cluster_custom_object(*KUEUE, "cohorts", "applied")
    with pytest.raises(ApiException) as err:
        custom.get_cluster_custom_object(*KUEUE, "cohorts", "applied")
    assert err.value.status == 404
    assert status_of(err.value)["message"] == 'cohorts.kueue.x-k8s.io "applied" not found'


def _invalid(twin: Twin, plural: str, body: dict[str, Any]) -> list[dict[str, str]]:
    with pytest.raises(ApiException) as err:
        twin.custom.create_cluster_custom_object(*KUEUE, plural, body)
    assert err.value.status == 422
    status = status_of(err.value)
    assert status["reason"] == "Invalid"
    causes: list[dict[str, str]] = status["details"]["causes"]
    return causes


def test_invalid_kueue_objects_are_422_with_the_field_path(twin: Twin) -> None:
    causes = _invalid(twin, "topologies", kueue("Topology", "bad", {"levels": [
        {"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "fabric.gpufabric.io/block"}]}))
    assert causes[0]["field"] == "spec.levels" and "lowest level" in causes[0]["message"]
    causes = _invalid(twin, "topologies", kueue("Topology", "bad", {"levels": []}))
    assert causes[0]["field"] == "spec.levels"
    causes = _invalid(twin, "resourceflavors", kueue("ResourceFlavor", "bad", {"topologyName": "fabric"}))
    assert causes[0]["field"] == "spec"
    causes = _invalid(twin, "clusterqueues", kueue("ClusterQueue", "bad", {"resourceGroups": [
        {"coveredResources": ["nvidia.com/gpu"], "flavors": [
            {"name": "f", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1, "borrowingLimit": 1}]}]}]}))
    assert causes == [{"reason": "FieldValueInvalid", "field": "spec",
                       "message": 'Invalid value: "object": borrowingLimit must be nil when cohort is empty'}]
    causes = _invalid(twin, "clusterqueues", kueue("ClusterQueue", "bad", {"queueingStrategy": "Random"}))
    assert causes[0]["field"] == "spec.queueingStrategy" and causes[0]["reason"] == "FieldValueNotSupported"
    causes = _invalid(twin, "clusterqueues", kueue("ClusterQueue", "bad", {"resourceGroups": [
        {"coveredResources": ["nvidia.com/gpu"], "flavors": [
            {"name": "f", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "lots"}]}]}]}))
    assert causes[0]["field"] == "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    causes = _invalid(twin, "workloadpriorityclasses", kueue("WorkloadPriorityClass", "bad"))
    assert causes == [{"reason": "FieldValueRequired", "message": "Required value", "field": "value"}]
    causes = _invalid(twin, "resourceflavors", kueue("ResourceFlavor", "Bad_Name", {}))
    assert causes[0]["field"] == "metadata.name"


def test_immutable_kueue_fields_refuse_changes(twin: Twin) -> None:
    custom = twin.custom
    custom.create_cluster_custom_object(*KUEUE, "topologies", kueue("Topology", "immutable", {"levels": [
        {"nodeLabel": "fabric.gpufabric.io/block"}, {"nodeLabel": "kubernetes.io/hostname"}]}))
    with pytest.raises(ApiException) as err:
        custom.patch_cluster_custom_object(*KUEUE, "topologies", "immutable", {"spec": {"levels": [
            {"nodeLabel": "kubernetes.io/hostname"}]}})
    assert err.value.status == 422
    assert status_of(err.value)["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": "spec.levels",
         "message": 'Invalid value: "array": field is immutable'}]
    # metadata changes are still allowed
    custom.patch_cluster_custom_object(*KUEUE, "topologies", "immutable", {"metadata": {"labels": {"a": "b"}}})
    custom.create_namespaced_custom_object(*KUEUE, "ml", "localqueues", kueue("LocalQueue", "q", {"clusterQueue": "a"}))
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(*KUEUE, "ml", "localqueues", "q", {"spec": {"clusterQueue": "b"}})
    assert err.value.status == 422
    assert status_of(err.value)["details"]["causes"][0]["field"] == "spec.clusterQueue"
    # ResourceFlavor: nodeLabels are immutable once topologyName is set (a transition rule via CEL)
    custom.create_cluster_custom_object(*KUEUE, "resourceflavors", kueue("ResourceFlavor", "tas", {
        "nodeLabels": {"a": "b"}, "topologyName": "immutable"}))
    with pytest.raises(ApiException) as err:
        custom.patch_cluster_custom_object(*KUEUE, "resourceflavors", "tas", {"spec": {"nodeLabels": {"a": "c"}}})
    assert err.value.status == 422 and "immutable" in status_of(err.value)["message"]


def test_kueue_generation_unknown_fields_and_patch_types(twin: Twin) -> None:
    custom = twin.custom
    created = custom.create_cluster_custom_object(*KUEUE, "cohorts", kueue("Cohort", "gen", {}))
    assert created["metadata"]["generation"] == 1
    labelled = custom.patch_cluster_custom_object(*KUEUE, "cohorts", "gen", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1
    changed = custom.patch_cluster_custom_object(*KUEUE, "cohorts", "gen", {"spec": {"fairSharing": {"weight": "3"}}})
    assert changed["metadata"]["generation"] == 2
    # unknown fields: pruned with a warning by default, refused with fieldValidation=Strict
    body = json.dumps(kueue("Cohort", "unknown", {"bogus": 1}))
    response = twin.http("POST", "/apis/kueue.x-k8s.io/v1beta2/cohorts", content=body,
                         headers={"Content-Type": "application/json"})
    assert response.status_code == 201 and "bogus" not in response.json()["spec"]
    assert response.headers["warning"] == '299 - "unknown field \'spec.bogus\'"'
    body = json.dumps(kueue("Cohort", "strict", {"bogus": 1}))
    response = twin.http("POST", "/apis/kueue.x-k8s.io/v1beta2/cohorts?fieldValidation=Strict", content=body,
                         headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    # custom resources have no strategic merge (as upstream): 415
    response = twin.http("PATCH", "/apis/kueue.x-k8s.io/v1beta2/cohorts/gen", content="{}",
                         headers={"Content-Type": "application/strategic-merge-patch+json"})
    assert response.status_code == 415 and response.json()["reason"] == "UnsupportedMediaType"
    # JSON patch works on custom resources
    custom.patch_cluster_custom_object(*KUEUE, "cohorts", "gen", [{"op": "remove", "path": "/metadata/labels"}],
                                       _content_type="application/json-patch+json")
    assert "labels" not in custom.get_cluster_custom_object(*KUEUE, "cohorts", "gen")["metadata"]


def test_kueue_ssa_update_removes_fields_the_manager_dropped(twin: Twin) -> None:
    spec = {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-GB200"}, "nodeTaints": [
        {"key": "gpu", "value": "true", "effect": "NoSchedule"}]}
    apply(twin.api, kueue("ResourceFlavor", "ssa", spec))
    out = apply(twin.api, kueue("ResourceFlavor", "ssa", {"nodeLabels": spec["nodeLabels"]}))
    assert "nodeTaints" not in out["spec"]
    with pytest.raises(ApiException) as err:
        apply(twin.api, kueue("ResourceFlavor", "ssa", {"nodeTaints": [{"key": "k", "effect": "Sometimes"}]}))
    assert err.value.status == 422
    assert status_of(err.value)["details"]["causes"][0]["field"].startswith("spec.nodeTaints")


# --- faults -----------------------------------------------------------------------------------


def test_fault_switch_5xx_by_count(twin: Twin, clean_faults: KubeTwinAdmin) -> None:
    node = twin.truth.hosts()[30].id
    before = clean_faults.faults()["fired"]["5xx"]  # the counter is the twin's, over the whole session
    clean_faults.set_faults({"paths": ["/api/v1/nodes/*"], "status_5xx_next": 2, "retry_after_s": 1})
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            twin.core.read_node(node)
        assert err.value.status == 500 and status_of(err.value)["reason"] == "InternalError"
        assert err.value.headers["Retry-After"] == "1"
    assert twin.core.read_node(node).metadata.name == node
    assert twin.core.list_node(limit=1).items  # the list path never matched the rule
    assert clean_faults.faults()["fired"]["5xx"] == before + 2


def test_fault_switch_delay_and_method_filter(twin: Twin, clean_faults: KubeTwinAdmin) -> None:
    # Which requests were delayed is read from the twin's own counter, not from a clock: the test
    # does not depend on how busy the machine is.
    ns = name("delay")

    def delayed() -> int:
        return int(clean_faults.faults()["fired"]["delayed"])

    clean_faults.set_faults({"paths": ["/api/v1/namespaces/*/pods"], "methods": ["GET"], "delay_ms": 5000})
    before = delayed()
    # A 1 s client timeout against a 5 s delay: urllib3 retries the read 3 times (its default
    # Retry(3)), every attempt is delayed, then it gives up with the read timeout as the reason.
    with pytest.raises(urllib3.exceptions.MaxRetryError) as err:
        twin.core.list_namespaced_pod(ns, _request_timeout=1.0)
    assert isinstance(err.value.reason, urllib3.exceptions.ReadTimeoutError)
    assert err.value.url == f"/api/v1/namespaces/{ns}/pods"
    assert delayed() == before + 4
    # The same path with another method, and another path with the same method, are not delayed.
    created = twin.core.create_namespaced_pod(ns, pod("p"))
    node = twin.truth.hosts()[0].id
    assert twin.core.read_node(node).metadata.name == node
    assert delayed() == before + 4
    clean_faults.clear_faults()
    assert [p.metadata.uid for p in twin.core.list_namespaced_pod(ns).items] == [created.metadata.uid]
    assert delayed() == before + 4


def test_fault_switch_conflicts_on_writes(twin: Twin, clean_faults: KubeTwinAdmin) -> None:
    ns = name("conflict")
    twin.leases.create_namespaced_lease(ns, {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}})
    clean_faults.set_faults({"paths": [f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/*"], "conflict_next": 1})
    assert twin.leases.read_namespaced_lease("l", ns).spec.holder_identity == "a"  # reads are not affected
    with pytest.raises(ApiException) as err:
        twin.leases.patch_namespaced_lease("l", ns, {"spec": {"holderIdentity": "b"}})
    assert err.value.status == 409 and status_of(err.value)["reason"] == "Conflict"
    twin.leases.patch_namespaced_lease("l", ns, {"spec": {"holderIdentity": "b"}})
    assert twin.leases.read_namespaced_lease("l", ns).spec.holder_identity == "b"


def test_fault_rules_are_validated(twin: Twin) -> None:
    response = twin.http("POST", "/_twin/faults", json={"status_5xx_next": -1})
    assert response.status_code == 400 and response.json()["kind"] == "Status"


# --- bad input --------------------------------------------------------------------------------


def test_bad_input_is_answered_with_a_status(twin: Twin) -> None:
    pods = "/api/v1/namespaces/default/pods"
    cases = [
        (twin.http("POST", pods, content=b"{not json", headers={"Content-Type": "application/json"}), 400,
         "BadRequest"),
        (twin.http("POST", pods, content=b"\xff\xfe", headers={"Content-Type": "application/json"}), 400,
         "BadRequest"),
        (twin.http("POST", pods, content=b"[]", headers={"Content-Type": "application/json"}), 400, "BadRequest"),
        (twin.http("POST", pods, content=b"x" * (4 * 1024 * 1024), headers={"Content-Type": "application/json"}),
         413, "RequestEntityTooLarge"),
        (twin.http("POST", pods, content=b"a=b", headers={"Content-Type": "text/plain"}), 415, "UnsupportedMediaType"),
        (twin.http("PATCH", f"{pods}/x", content=b"{}", headers={"Content-Type": "text/plain"}), 415,
         "UnsupportedMediaType"),
        (twin.http("GET", "/api/v1/widgets"), 404, "NotFound"),
        (twin.http("GET", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues"), 404, "NotFound"),
        (twin.http("GET", "/nope"), 404, "NotFound"),
        (twin.http("GET", "/api/v1/pods/x"), 404, "NotFound"),
        (twin.http("PUT", pods, content=b"{}", headers={"Content-Type": "application/json"}), 405,
         "MethodNotAllowed"),
        (twin.http("GET", f"{pods}?limit=ten"), 400, "BadRequest"),
        (twin.http("GET", f"{pods}?watch=true&resourceVersion=abc"), 400, "BadRequest"),
        (twin.http("PATCH", f"/api/v1/nodes/{twin.truth.hosts()[0].id}?fieldManager=x", content=b"a: [",
                   headers={"Content-Type": APPLY}), 400, "BadRequest"),
    ]
    for response, code, reason in cases:
        assert response.status_code == code, response.text
        body = response.json()
        assert body["kind"] == "Status" and body["code"] == code and body["reason"] == reason
        assert "Traceback" not in response.text


def test_connector_accepts_api_url_override(twin: Twin) -> None:
    api = api_client(ClusterTarget(kubeconfig=twin.kubeconfig, api_url=twin.url + "/"))
    try:
        assert api.configuration.host == twin.url
        assert len(list_nodes(api, "nvidia.com/gpu.present=true")) == 144
    finally:
        api.close()


def test_connector_takes_the_settings_model(twin: Twin) -> None:
    from settings import KubernetesSource

    source = KubernetesSource(name="sim", kubeconfig=twin.kubeconfig, context="gpufabric-sim")
    api = api_client(source)
    try:
        assert len(list_nodes(api)) == 144
    finally:
        api.close()


def test_reset_returns_to_the_seeded_population(twin: Twin) -> None:
    # Runs last in this module: it wipes everything the other tests created.
    node = twin.truth.hosts()[40].id
    twin.core.patch_node(node, {"metadata": {"labels": {"temp": "1"}}})
    twin.core.create_namespaced_pod("reset-me", pod("p"))
    rv = int(twin.core.list_node(limit=1).metadata.resource_version)
    for _ in range(2):
        twin.admin.reset()
    assert "temp" not in twin.core.read_node(node).metadata.labels
    assert {e.manager for e in twin.core.read_node(node).metadata.managed_fields} == {"kubelet", "nfd-master"}
    assert twin.core.list_namespaced_pod("reset-me").items == []
    assert int(twin.core.list_node(limit=1).metadata.resource_version) > rv  # never goes backwards
    assert twin.admin.state()["unsupportedCelRules"] == []
