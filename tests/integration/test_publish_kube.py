"""The publisher against the real control plane: kube-apiserver's server-side apply and
managedFields, the Node status subresource, the Kueue v0.19.2 CRDs and webhooks, and Kueue's
controller judging the queues we publish.

On the 4-SU spec (one module-scoped publish, then read-only checks, then one test that changes
it): the dry run is the server's (``dryRun=All``: a value the server refuses fails it, nothing is
written), the publish sets exactly the expected labels and extended resources under our field
manager (read back from managedFields), creates the tenants' namespaces, every Kueue object is
accepted and every ClusterQueue goes Active, an object Kueue's CRD refuses fails the plan before
any write, a second publish sends no write, a topology change relabels only the affected nodes,
a hand label survives, the blast-radius guard refuses a fleet-wide relabel until forced, and an
object still being deleted is waited for before it is re-created. On the 1-SU spec (a cluster of
its own, through the fault proxy): answers the server asks to retry (429, 5xx with Retry-After)
are retried, another failure names the write that failed, and the next publish finishes the job.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from connectors.kube import ClusterTarget, api_client, list_nodes
from connectors.kube.client import object_path
from connectors.kube.publish import BlastRadiusExceeded, Plan, PublishError, execute, plan
from core.publish import DesiredState, KueuePolicy, LabelScheme, TenantSpec, desired_state, render_kueue
from core.topology import TopologyModel, derive
from simulator.controlplane import nodes_from_spec
from simulator.controlplane.api import APPLY_PATCH
from simulator.controlplane.reset import reset
from tests.unit.test_topology_support import observe, truth_with

pytestmark = pytest.mark.integration

KUEUE = ("kueue.x-k8s.io", "v1beta2")
MANAGER = "gpufabric"
TENANTS = [
    TenantSpec("research", "Research", ["prod", "preemptible"], cohort="science", gpu_quota={"H100": 512}),
    TenantSpec("vision", "Vision", ["prod"], cohort="science", gpu_quota={"H100": 256}),
    TenantSpec("inference", "Inference", ["prod"]),
]
POOL = "nvidia-h100-80gb-hbm3-x8"
OURS = {
    "fabric.gpufabric.io/pod", "fabric.gpufabric.io/spine-group", "fabric.gpufabric.io/block",
    "accelerator.gpufabric.io/domain", "accelerator.gpufabric.io/sub-domain", "gpufabric.io/pool",
}  # fmt: skip
KUEUE_PLURALS = ("topologies", "resourceflavors", "clusterqueues", "cohorts", "workloadpriorityclasses", "localqueues")
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def desired(api: client.ApiClient, model: TopologyModel, scheme: LabelScheme | None = None) -> DesiredState:
    facts = {n.metadata.name: dict(n.metadata.labels or {}) for n in list_nodes(api)}
    return desired_state(model, scheme or LabelScheme(), facts, TENANTS, KueuePolicy())


def publish(api: client.ApiClient, state: DesiredState, *, force: bool = False, dry_run: bool = False,
            deletion_wait_s: float = 60.0) -> Plan:  # fmt: skip
    p = plan(api, state.labels, state.resources, state.objects, field_manager=MANAGER, max_fraction=0.2)
    return execute(api, p, state.labels, state.resources, field_manager=MANAGER, force=force, dry_run=dry_run,
                   deletion_wait_s=deletion_wait_s)  # fmt: skip


def labels_of(api: client.ApiClient) -> dict[str, dict[str, str]]:
    return {n.metadata.name: dict(n.metadata.labels) for n in list_nodes(api)}


def ours(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if "gpufabric.io" in k or "topograph.run" in k}


def kueue_objects(api: client.ApiClient, plural: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.CustomObjectsApi(api).list_cluster_custom_object(*KUEUE, plural)["items"]
    return items


def kueue_state(api: client.ApiClient) -> set[tuple[str, str, str]]:
    """Every Kueue object as (plural, namespace/name, resourceVersion): any write changes it."""
    return {
        (plural, f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}", o["metadata"]["resourceVersion"])
        for plural in KUEUE_PLURALS
        for o in kueue_objects(api, plural)
    }


def eventually(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll until ``check`` returns something truthy (Kueue's controller acts asynchronously);
    the deadline only guards against a hang."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout:.0f} s (last: {result!r})")
        time.sleep(0.2)


def active_queues(api: client.ApiClient) -> dict[str, str]:
    """ClusterQueue name -> its Active condition as ``status/reason`` ('' before Kueue set it)."""
    out = {}
    for cq in kueue_objects(api, "clusterqueues"):
        cond = next((c for c in cq.get("status", {}).get("conditions", []) if c["type"] == "Active"), None)
        out[cq["metadata"]["name"]] = f"{cond['status']}/{cond['reason']}" if cond else ""
    return out


def all_active(api: client.ApiClient, names: set[str]) -> Callable[[], Any]:
    def check() -> Any:
        queues = active_queues(api)
        return set(queues) == names and all(v.startswith("True/") for v in queues.values()) and queues

    return check


def managed_entries(node: dict[str, Any], manager: str) -> dict[str, dict[str, Any]]:
    """managedFields of one manager, keyed by subresource ('' for the main resource)."""
    return {e.get("subresource", ""): e for e in node["metadata"]["managedFields"] if e["manager"] == manager}


def keys_under(fields: dict[str, Any], *path: str) -> set[str]:
    for part in path:
        fields = fields.get(part, {})
    return {k.removeprefix("f:") for k in fields if k.startswith("f:")}


# ------------------------------------------------------------------ 1-SU, a cluster per test (faults)
# These come first: they reset the shared plane, which the module-scoped 4-SU publish below must
# not see happen under it.


@pytest.fixture
def small(kube_cluster: Any, tmp_path: Path) -> tuple[Any, TopologyModel]:
    kube_cluster.register_nodes(nodes_from_spec("h100-1su"))
    return kube_cluster, derive(observe(truth_with("h100-1su"), tmp_path))


def test_retries_what_the_server_asks_and_names_the_write_that_failed(
    small: tuple[Any, TopologyModel], faults: Any
) -> None:
    _, model = small
    api = api_client(ClusterTarget(kubeconfig=faults.kubeconfig))
    try:
        state = desired(api, model)
        # Throttled twice (429 with Retry-After, as API Priority and Fairness answers) and one 503
        # with Retry-After: each retried, the publish applied.
        faults.set_faults([
            {"paths": ["/api/v1/nodes/dgx003/status"], "methods": ["PATCH"], "status_5xx_next": 2,
             "status_code": 429, "retry_after_s": 0},
            {"paths": ["/api/v1/nodes/dgx004"], "methods": ["PATCH"], "status_5xx_next": 1, "status_code": 503,
             "retry_after_s": 0},
        ])  # fmt: skip
        first = publish(api, state)
        assert first.applied and first.counts()["nodes_changed"] == 32
        assert faults.fired["5xx"] == 3
        node = client.CoreV1Api(api).read_node("dgx003")
        assert node.status.capacity["gpufabric.io/rails"] == "8"
        assert ours(labels_of(api)["dgx004"])["gpufabric.io/pool"] == POOL

        # A 500 without Retry-After is final: the publish stops, naming the write the server refused.
        moved = {"dgx010", "dgx011"}
        hosts = tuple(dataclasses.replace(h, block="blk-moved") if h.name in moved else h for h in model.hosts)
        domains = (*model.domains, *(dataclasses.replace(d, id="blk-moved", name="ib-leaf-su09-r[0-7]")
                                     for d in model.domains if d.level == "block"))  # fmt: skip
        changed = desired(api, dataclasses.replace(model, hosts=hosts, domains=domains))
        faults.set_faults({"paths": ["/api/v1/nodes/dgx011"], "methods": ["PATCH"], "status_5xx_next": 1})
        with pytest.raises(PublishError, match=r"the cluster refused Node dgx011 \(labels\): "):
            publish(api, changed)
        blocks = {n: ls.get("fabric.gpufabric.io/block") for n, ls in labels_of(api).items()}
        assert (blocks["dgx010"], blocks["dgx011"]) == ("ib-leaf-su09-r0-7", "ib-leaf-su01-r0-7")
        # The next publish finds only what is left to do.
        again = publish(api, changed)
        assert [d.node for d in again.changed_nodes] == ["dgx011"]
        assert labels_of(api)["dgx011"]["fabric.gpufabric.io/block"] == "ib-leaf-su09-r0-7"
    finally:
        api.close()


def _contains(answer: Any, sent: Any) -> bool:
    """Everything we sent is in the server's answer (which may add defaults), recursively."""
    if isinstance(sent, dict):
        return isinstance(answer, dict) and all(k in answer and _contains(answer[k], v) for k, v in sent.items())
    if isinstance(sent, list):
        return isinstance(answer, list) and len(answer) == len(sent) and all(map(_contains, answer, sent))
    if isinstance(sent, int) and not isinstance(sent, bool) and isinstance(answer, str):
        return answer == str(sent)  # a resource.Quantity comes back in its canonical string form
    return bool(answer == sent)


def test_every_rendered_kueue_kind_passes_the_servers_validation(kube_cluster: Any, kube_namespace: str) -> None:
    """The unit tests' pools and tenants (two GPU models, a tenant name that is no DNS label),
    applied with ``dryRun=All``: the real Kueue CRDs' OpenAPI schemas and CEL rules judge every
    object, and nothing is written."""
    from tests.unit.test_publish_render import POOLS, TENANTS

    objects = render_kueue(LabelScheme(), POOLS, TENANTS, KueuePolicy())
    assert {o["kind"] for o in objects} == {"Topology", "ResourceFlavor", "Cohort", "WorkloadPriorityClass",
                                            "ClusterQueue", "LocalQueue"}  # fmt: skip
    api = kube_cluster.api()
    try:
        for obj in objects:
            if "namespace" in obj["metadata"]:  # the test's own: a tenant's may still be going from an earlier test
                obj = {**obj, "metadata": {**obj["metadata"], "namespace": kube_namespace}}
            answer = api.patch(object_path(obj), obj, APPLY_PATCH, fieldManager=MANAGER, dryRun="All")
            assert _contains(answer, {k: v for k, v in obj.items() if k != "metadata"}), (obj, answer)
        assert kueue_objects(kube_cluster.kube_client(), "clusterqueues") == []  # a dry run writes nothing
    finally:
        api.close()


# ------------------------------------------------------------------ 4-SU, published once per module


@dataclasses.dataclass
class Published:
    plane: Any
    api: client.ApiClient
    model: TopologyModel
    before: dict[str, dict[str, str]]  # labels before anything was published
    dry: Plan
    after_dry: dict[str, dict[str, str]]
    kueue_before: set[tuple[str, str, str]]  # (plural, namespace/name, resourceVersion)
    kueue_after_dry: set[tuple[str, str, str]]
    first: Plan
    after: dict[str, dict[str, str]]


@pytest.fixture(scope="module")
def published(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    # what kube_cluster does, once for the module; and the namespaces of earlier tests gone too,
    # so their LocalQueues do not vanish between the snapshots compared below
    reset(control_plane, wait_namespaces=True)
    control_plane.register_nodes(nodes_from_spec("h100-4su"))
    model = derive(observe(truth_with("h100-4su"), tmp_path_factory.mktemp("obs")))
    api = api_client(ClusterTarget(kubeconfig=control_plane.kubeconfig))
    try:
        before = labels_of(api)
        kueue_before = kueue_state(api)
        state = desired(api, model)
        dry = publish(api, state, dry_run=True)
        after_dry = labels_of(api)
        kueue_after_dry = kueue_state(api)
        first = publish(api, state)
        yield Published(control_plane, api, model, before, dry, after_dry, kueue_before, kueue_after_dry, first,
                        labels_of(api))
    finally:
        api.close()


def test_dry_run_is_the_servers_and_writes_nothing(published: Published) -> None:
    assert published.dry.counts() == {
        "nodes_total": 128, "nodes_changed": 128, "nodes_guarded": 0, "nodes_missing": 0, "labels_added": 768,
        "labels_changed": 0, "labels_removed": 0, "resources_changed": 256, "annotations_changed": 0,
        "objects_created": 12,
        "objects_changed": 0, "objects_deleted": 0, "namespaces_created": 3,
    }  # fmt: skip
    assert not published.dry.applied
    assert published.after_dry == published.before and published.kueue_after_dry == published.kueue_before
    assert not any(plural != "localqueues" for plural, _, _ in published.kueue_before)  # reset emptied the rest
    # The LocalQueues' namespaces do not exist before the publish creates them: the server cannot
    # dry-run an object into them, and the plan says so.
    assert sorted(w for w in published.dry.warnings if "its namespace is created" in w) == [
        f"LocalQueue {t}/{t}: its namespace is created by this publish, so the server checks the object only when"
        " it is applied" for t in ("inference", "research", "vision")]  # fmt: skip


def test_dry_run_sends_node_writes_to_the_server(published: Published) -> None:
    """A value the API server refuses (not a label value) fails the dry run, naming the node and
    quoting the server; nothing is written."""
    api = published.api
    state = desired(api, published.model)
    bad = {**state.labels, "dgx002": {**state.labels["dgx002"], "fabric.gpufabric.io/block": "not a label value!"}}
    p = plan(api, bad, state.resources, state.objects, field_manager=MANAGER, max_fraction=0.2)
    assert [d.node for d in p.changed_nodes] == ["dgx002"]
    with pytest.raises(PublishError, match=r'the cluster refused Node dgx002 \(labels\): .*Invalid value: '
                                           r'"not a label value!"'):  # fmt: skip
        execute(api, p, bad, state.resources, field_manager=MANAGER, dry_run=True)
    assert labels_of(api) == published.after


def test_kueue_objects_the_server_refuses_fail_the_plan_before_any_write(published: Published) -> None:
    api = published.api
    state = desired(api, published.model)
    topology = dict(state.objects[0])
    assert topology["kind"] == "Topology"
    levels = topology["spec"]["levels"]
    # A new Topology with one level twice: Kueue's CRD forbids it (a CEL rule the fake never checked).
    broken = {**topology, "metadata": {**topology["metadata"], "name": "gpufabric-broken"},
              "spec": {"levels": [levels[0], *levels]}}  # fmt: skip
    with pytest.raises(PublishError, match=r"Topology gpufabric-broken: the server refused it: .*must be unique"):
        publish(api, dataclasses.replace(state, objects=[broken, *state.objects[1:]]))
    assert [t["metadata"]["name"] for t in kueue_objects(api, "topologies")] == [topology["metadata"]["name"]]
    assert labels_of(api) == published.after


def test_labels_and_extended_resources_are_ours_by_server_side_apply(published: Published) -> None:
    assert published.first.applied and published.first.counts()["nodes_changed"] == 128
    for node, labels in published.after.items():
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
        assert {k: v for k, v in labels.items() if k not in ours(labels)} == published.before[node]
    node = client.CoreV1Api(published.api).read_node("dgx007")
    assert node.status.capacity["gpufabric.io/rails"] == "8" == node.status.allocatable["gpufabric.io/rails"]
    assert node.status.capacity["gpufabric.io/healthy-ib-ports"] == "8"
    assert node.status.capacity["nvidia.com/gpu"] == "8"  # kubelet's resources untouched

    # What the API server itself recorded: our labels under our manager as an Apply on the
    # object, our resources as an Apply on the status subresource; kubelet and GPU Feature
    # Discovery still own theirs.
    raw = published.plane.api().get("/api/v1/nodes/dgx007")
    entries = managed_entries(raw, MANAGER)
    assert set(entries) == {"", "status"} and {e["operation"] for e in entries.values()} == {"Apply"}
    assert keys_under(entries[""]["fieldsV1"], "f:metadata", "f:labels") == OURS
    resources = {"gpufabric.io/rails", "gpufabric.io/healthy-ib-ports"}
    assert keys_under(entries["status"]["fieldsV1"], "f:status", "f:capacity") == resources
    assert keys_under(entries["status"]["fieldsV1"], "f:status", "f:allocatable") == resources
    kubelet = managed_entries(raw, "kubelet")
    assert "nvidia.com/gpu" in keys_under(kubelet["status"]["fieldsV1"], "f:status", "f:capacity")
    assert "nvidia.com/gpu.product" in keys_under(managed_entries(raw, "nfd-master")[""]["fieldsV1"],
                                                  "f:metadata", "f:labels")  # fmt: skip


def test_kueue_accepts_the_objects_and_activates_every_queue(published: Published) -> None:
    api = published.api
    (topo,) = kueue_objects(api, "topologies")
    assert [lv["nodeLabel"] for lv in topo["spec"]["levels"]] == [
        "fabric.gpufabric.io/pod", "fabric.gpufabric.io/spine-group", "fabric.gpufabric.io/block",
        "accelerator.gpufabric.io/domain", "accelerator.gpufabric.io/sub-domain", "kubernetes.io/hostname",
    ]  # fmt: skip
    (flavor,) = kueue_objects(api, "resourceflavors")
    assert flavor["spec"]["nodeLabels"] == {"gpufabric.io/pool": POOL}
    assert flavor["spec"]["topologyName"] == topo["metadata"]["name"]
    cohorts = {c["metadata"]["name"]: c["spec"].get("parentName") for c in kueue_objects(api, "cohorts")}
    assert cohorts == {"gpufabric": None, "science": "gpufabric"}
    cqs = {c["metadata"]["name"]: c["spec"] for c in kueue_objects(api, "clusterqueues")}
    assert {k: v["cohortName"] for k, v in cqs.items()} == {"inference": "gpufabric", "research": "science",
                                                            "vision": "science"}  # fmt: skip
    # quotas are resource quantities: the server keeps them in their canonical string form
    assert cqs["research"]["resourceGroups"][0]["flavors"] == [{"name": flavor["metadata"]["name"], "resources": [
        {"name": "nvidia.com/gpu", "nominalQuota": "512", "borrowingLimit": "512", "lendingLimit": "256"}]}]
    assert cqs["inference"]["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "nvidia.com/gpu", "nominalQuota": "0"}]
    lqs = {(q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"]["clusterQueue"]
           for q in kueue_objects(api, "localqueues")}  # fmt: skip
    assert lqs == {("inference", "inference"): "inference", ("research", "research"): "research",
                   ("vision", "vision"): "vision"}  # fmt: skip
    prios = {w["metadata"]["name"]: w["value"] for w in kueue_objects(api, "workloadpriorityclasses")}
    assert prios == {"preemptible": 100, "prod": 1000}
    # Kueue's controller judges the references: a queue is Active only when its flavors and
    # their Topology exist and agree.
    eventually("every ClusterQueue Active", all_active(api, {"inference", "research", "vision"}))
    namespaces = {ns: client.CoreV1Api(api).read_namespace(ns).metadata.labels for ns in ("research", "vision")}
    assert all(labels["app.kubernetes.io/managed-by"] == MANAGER for labels in namespaces.values())


def test_republish_relabel_guard_and_scheme_switch(published: Published, faults: Any) -> None:
    """Runs last in the module: it changes the published cluster."""
    api, model, after = published.api, published.model, published.after
    core = client.CoreV1Api(api)
    # someone labels a node by hand, then we publish again (through the counting proxy): the
    # server's dry runs of the Kueue objects, and not one write
    core.patch_node("dgx005", {"metadata": {"labels": {"owner": "alice"}}}, field_manager="kubectl-label")
    counted = api_client(ClusterTarget(kubeconfig=faults.kubeconfig))
    try:
        sent_before = len(faults.requests)
        second = publish(counted, desired(counted, model))
        sent = faults.requests[sent_before:]
    finally:
        counted.close()
    assert second.counts()["nodes_changed"] == 0
    assert {c.change for c in second.object_changes} == {"unchanged"}
    dry_runs = [r for r in sent if r.method in WRITES and "dryRun=All" in r.query]
    assert len(dry_runs) == len(second.objects) == 12
    assert [r for r in sent if r.method in WRITES and "dryRun=All" not in r.query] == []

    # a topology change: three hosts recabled into SU 2's block; only they are relabelled
    su2 = model.host("dgx040").block
    moved = {"dgx001", "dgx002", "dgx003"}
    hosts = tuple(dataclasses.replace(h, block=su2) if h.name in moved else h for h in model.hosts)
    changed_model = dataclasses.replace(model, hosts=hosts)
    third = publish(api, desired(api, changed_model))
    assert [d.node for d in third.changed_nodes] == sorted(moved)
    assert all([(c.key, c.before, c.after) for c in d.labels] == [
        ("fabric.gpufabric.io/block", "ib-leaf-su01-r0-7", "ib-leaf-su02-r0-7")] for d in third.changed_nodes)
    now = labels_of(api)
    assert {n for n in now if now[n] != after[n]} == moved | {"dgx005"}
    assert now["dgx005"]["owner"] == "alice"
    assert ours(now["dgx005"]) == ours(after["dgx005"])

    # switching to the topograph scheme relabels every node: refused by the guard, then forced
    topograph = desired(api, changed_model, LabelScheme("topograph"))
    with pytest.raises(BlastRadiusExceeded, match="refusing to change 128 of 128 nodes"):
        publish(api, topograph)
    assert labels_of(api) == now
    (old_flavor,) = kueue_objects(api, "resourceflavors")
    old_name = old_flavor["metadata"]["name"]
    (old_topology,) = kueue_objects(api, "topologies")
    # Hold the old flavor in Terminating after the switch deletes it (as Kueue's own in-use
    # finalizer does while a queue still points at it).
    custom = client.CustomObjectsApi(api)
    hold = "test.gpufabric.io/hold"
    held = [*old_flavor["metadata"].get("finalizers", []), hold]
    custom.patch_cluster_custom_object(*KUEUE, "resourceflavors", old_name, {"metadata": {"finalizers": held}})
    forced = publish(api, topograph, force=True)
    changes = {(c.kind, c.change) for c in forced.object_changes if c.change != "unchanged"}
    assert changes == {("Topology", "created"), ("Topology", "deleted"), ("ResourceFlavor", "created"),
                       ("ResourceFlavor", "deleted"), ("ClusterQueue", "changed")}  # fmt: skip
    relabelled = labels_of(api)["dgx100"]
    assert ours(relabelled) == {
        "fabric.topograph.run/tier-3": "ib-spine-01-16", "fabric.topograph.run/tier-2": "ib-spine-01-16",
        "fabric.topograph.run/tier-1": "ib-leaf-su04-r0-7", "accelerator.topograph.run/domain": "nvl-dgx100",
        "gpufabric.io/pool": POOL,
    }  # fmt: skip
    new_flavor = next(f for f in kueue_objects(api, "resourceflavors") if f["metadata"]["name"] != old_name)
    cq = next(c for c in kueue_objects(api, "clusterqueues") if c["metadata"]["name"] == "research")
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["name"] == new_flavor["metadata"]["name"]
    eventually("queues Active on the new flavor", all_active(api, {"inference", "research", "vision"}))

    # Back to our scheme while the old flavor is still being deleted, and with it the old
    # Topology (Kueue keeps its in-use finalizer while a flavor names it): re-applying either now
    # would only touch a Terminating object that vanishes later under the queues. The publish
    # waits, and says why it gave up.
    back = desired(api, changed_model)
    p = plan(api, back.labels, back.resources, back.objects, field_manager=MANAGER, max_fraction=0.2)
    assert any(w.startswith(f"ResourceFlavor {old_name} is being deleted (finalizers ") and hold in w
               for w in p.warnings), p.warnings  # fmt: skip
    with pytest.raises(PublishError, match=rf"Topology {old_topology['metadata']['name']} is still being deleted "
                                           r"after 1 s \(finalizers \['kueue.x-k8s.io/resource-in-use'\]\)"):
        execute(api, p, back.labels, back.resources, field_manager=MANAGER, force=True, deletion_wait_s=1.0)
    custom.patch_cluster_custom_object(*KUEUE, "resourceflavors", old_name, {"metadata": {"finalizers": [
        f for f in custom.get_cluster_custom_object(*KUEUE, "resourceflavors", old_name)["metadata"]["finalizers"]
        if f != hold]}})  # fmt: skip
    restored = publish(api, back, force=True)
    assert restored.applied
    flavor = custom.get_cluster_custom_object(*KUEUE, "resourceflavors", old_name)
    assert "deletionTimestamp" not in flavor["metadata"]
    eventually("queues Active on the restored flavor", all_active(api, {"inference", "research", "vision"}))
    assert ours(labels_of(api)["dgx100"]) == ours(after["dgx100"])
