"""Kueue really admits: with the Topology, ResourceFlavor and queues our publisher generates, a
gang asking ``kueue.x-k8s.io/podset-required-topology`` at our leaf level (the leaf-switch block)
is admitted by Kueue's topology-aware scheduling and its pods are bound by kube-scheduler to nodes
of one block; a gang no block can hold is refused at submission by our topology webhook, which
the API server calls (the configuration we ship, pointed at loopback); and once the fabric shrinks
under an admitted gang, Kueue can still evict it through that webhook.

The cluster is the 4-SU H100 design cut to two scalable units of four nodes (8 GPUs each): two
blocks of 32 GPUs, so "one block" is a real constraint (kube-scheduler alone scores nodes blind to
blocks) and a gang of 4 x 8 GPUs fills a block exactly. Everything on
the way is the real thing: publish's server-side applies, Kueue's webhooks and controller, the
Job controller creating the pods, Kueue removing its scheduling gate with the assigned node,
kube-scheduler binding, the node agent moving each pod to Running.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from connectors.kube import ClusterTarget, api_client, list_nodes
from connectors.kube.publish import execute, plan
from core.publish import KueuePolicy, LabelScheme, TenantSpec, desired_state
from core.topology import derive
from simulator.controlplane.reset import reset
from simulator.generator import generate
from simulator.kube.populate import node_objects
from simulator.spec import ClusterSpec
from tests.integration.test_admission_registration import (
    REQ,
    TOPOLOGY_MANIFEST,
    Registration,
    WebhookProcess,
    job,
    kubectl_apply,
    refused,
    registered_config,
    start_topology_webhook,
    wait_for,
)
from tests.unit.test_topology_support import observe, spec_of

pytestmark = pytest.mark.integration

KUEUE = ("kueue.x-k8s.io", "v1beta2")
SCHEME = LabelScheme()
LEAF = dict(SCHEME.level_keys())["block"]  # fabric.gpufabric.io/block: the hosts under one set of leaves
HOSTNAME = "kubernetes.io/hostname"


def two_blocks_of_four() -> ClusterSpec:
    """h100-4su with 2 scalable units of 4 nodes (the fabric sized to match: 8 rail leaves per SU)."""
    data = spec_of("h100-4su").model_dump()
    data.update(name="h100-2x4", hosts="dgx[001-008]", racks="r[01-02]", nodes_per_rack=4, scalable_units=2,
                nodes_per_su=4, defects={}, gpu_topo_faults={})  # fmt: skip
    data["compute_fabric"]["leaf"]["count"] = 16
    data["compute_fabric"]["spine"]["count"] = 4
    data["management_fabric"]["leaf"]["count"] = 2
    return ClusterSpec.model_validate(data)


@dataclass
class Site:
    plane: Any
    api: client.ApiClient
    queue: str  # the tenant: its namespace, LocalQueue and ClusterQueue share the name
    blocks: dict[str, str]  # node -> its published leaf block
    webhook: WebhookProcess


@pytest.fixture(scope="module")
def site(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """Nodes registered, our labels and Kueue objects published, the topology webhook registered."""
    tmp = tmp_path_factory.mktemp("kueue-admits")
    reset(control_plane)  # what kube_cluster does, once for the module
    truth = generate(two_blocks_of_four())
    control_plane.register_nodes(node_objects(truth))
    api = api_client(ClusterTarget(kubeconfig=control_plane.kubeconfig))
    registration: Registration | None = None
    hook: WebhookProcess | None = None
    try:
        # A tenant of its own name: a namespace left Terminating by an earlier test's reset must
        # not be the one this publish creates its LocalQueue in.
        tenant = TenantSpec(f"gang-{uuid.uuid4().hex[:6]}", "Gangs", ["prod"], gpu_quota={"H100": 64})
        facts = {n.metadata.name: dict(n.metadata.labels or {}) for n in list_nodes(api)}
        state = desired_state(derive(observe(truth, tmp)), SCHEME, facts, [tenant], KueuePolicy())
        published = plan(api, state.labels, state.resources, state.objects, field_manager="gpufabric",
                         max_fraction=0.2)
        execute(api, published, state.labels, state.resources, field_manager="gpufabric")
        blocks = {n.metadata.name: n.metadata.labels[LEAF] for n in list_nodes(api)}
        assert sorted(set(blocks.values())) == ["ib-leaf-su01-r0-7", "ib-leaf-su02-r0-7"]

        hook = start_topology_webhook(control_plane, control_plane.kubeconfig, tmp / "topology-webhook.log")
        registration = Registration(control_plane, registered_config(
            control_plane, TOPOLOGY_MANIFEST, hook.url, [tenant.id])).create()  # fmt: skip
        wait_for("the topology webhook registration",
                 refused(control_plane, gang("probe", tenant.id, 5), "denied the request"))  # fmt: skip
        yield Site(control_plane, api, tenant.id, blocks, hook)
    finally:
        if registration is not None:
            registration.delete()
        if hook is not None:
            hook.kill()
        api.close()


def gang(name: str, queue: str, pods: int) -> dict[str, Any]:
    """A suspended Job in ``queue``'s LocalQueue: ``pods`` pods of 8 GPUs, all in one leaf block."""
    return job(name, queue, pods, 8, queue=queue, annotations={REQ: LEAF})


def workload_of(site: Site, job_name: str) -> dict[str, Any] | None:
    """The Workload Kueue made for a Job (owned by it), or None."""
    items = client.CustomObjectsApi(site.api).list_namespaced_custom_object(*KUEUE, site.queue, "workloads")["items"]
    mine = [w for w in items if any(o.get("name") == job_name for o in w["metadata"].get("ownerReferences", []))]
    return mine[0] if mine else None


def condition(obj: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def assigned_hosts(topology_assignment: dict[str, Any]) -> dict[str, int]:
    """Host -> pod count from a v1beta2 ``topologyAssignment``: slices of domains, each level's
    values either one ``universal`` value or ``individual`` ``prefix`` + root + ``suffix``."""
    levels = topology_assignment["levels"]
    assert levels[-1] == HOSTNAME, levels  # the Topology's finest level: pods are assigned to nodes
    hosts: dict[str, int] = {}
    for piece in topology_assignment["slices"]:
        count = piece["domainCount"]
        values = piece["valuesPerLevel"][-1]
        if "universal" in values:
            names = [values["universal"]] * count
        else:
            ind = values["individual"]
            names = [f"{ind.get('prefix', '')}{root}{ind.get('suffix', '')}" for root in ind["roots"]]
        pods = piece["podCounts"]
        per = [pods["universal"]] * count if "universal" in pods else list(pods["individual"])
        assert len(names) == len(per) == count, piece
        for name, n in zip(names, per, strict=True):
            hosts[name] = hosts.get(name, 0) + n
    return hosts


def running_pods(site: Site, job_name: str) -> dict[str, str]:
    """Pod -> node, for the Job's pods that kube-scheduler bound and the node agent runs."""
    pods = client.CoreV1Api(site.api).list_namespaced_pod(site.queue, label_selector=f"job-name={job_name}").items
    return {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name and p.status.phase == "Running"}


def admitted_and_running(site: Site, job_name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Submit a 4-pod gang; wait for Kueue's admission and for its four pods to run."""
    out = kubectl_apply(site.plane, gang(job_name, site.queue, 4))
    assert (out.returncode, out.stdout.strip(), out.stderr) == (0, f"job.batch/{job_name} created", "")

    def admitted() -> bool:
        w = workload_of(site, job_name)
        return w is not None and condition(w, "Admitted") == "True"

    wait_for(f"Kueue to admit {job_name}", admitted)
    wait_for(f"the 4 pods of {job_name} to be bound and running", lambda: len(running_pods(site, job_name)) == 4)
    workload = workload_of(site, job_name)
    assert workload is not None
    return workload, running_pods(site, job_name)


def test_a_gang_no_leaf_block_can_hold_is_refused_at_submission(site: Site) -> None:
    out = kubectl_apply(site.plane, gang("gang-5", site.queue, 5))
    assert out.returncode == 1
    assert out.stderr.strip() == (
        'Error from server (Forbidden): error when creating "STDIN": admission webhook "topology.gpufabric.io" '
        "denied the request: the workload requires 5 pods x 8 GPUs in one fabric.gpufabric.io/block domain, but "
        "the largest fabric.gpufabric.io/block domain (ib-leaf-su01-r0-7) has 32 GPUs on 4 nodes and holds 4 pods "
        "of 8 GPUs")  # fmt: skip
    # Refused before anything was stored: no Job, so no Workload for Kueue to leave pending for ever.
    assert site.plane.kubectl("get", "job", "gang-5", "-n", site.queue, check=False).returncode == 1
    assert workload_of(site, "gang-5") is None


def test_kueue_admits_each_4_pod_gang_onto_one_leaf_block_and_can_still_evict_it(site: Site) -> None:
    first, first_pods = admitted_and_running(site, "gang-1")
    assert first["spec"]["podSets"][0]["topologyRequest"]["required"] == LEAF
    (assignment,) = first["status"]["admission"]["podSetAssignments"]
    assert assignment["count"] == 4 and assignment["resourceUsage"] == {"nvidia.com/gpu": "32"}
    hosts = assigned_hosts(assignment["topologyAssignment"])
    # Kueue assigned four nodes of one block, one pod each, and kube-scheduler bound the pods there.
    assert sorted(hosts.values()) == [1, 1, 1, 1]
    assert sorted(first_pods.values()) == sorted(hosts)
    (block,) = {site.blocks[node] for node in first_pods.values()}

    # The second gang finds that block full: Kueue puts it, whole, in the other one.
    second, second_pods = admitted_and_running(site, "gang-2")
    assert sorted(second_pods.values()) == sorted(assigned_hosts(
        second["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]))  # fmt: skip
    (other,) = {site.blocks[node] for node in second_pods.values()}
    assert {block, other} == set(site.blocks.values())

    # The fabric shrinks under the running gangs: one node of each block loses its block label
    # (drained, recabled, republished). No block holds a 4-pod gang now, and new ones are refused ...
    for node in ("dgx004", "dgx008"):
        site.plane.kubectl("label", "node", node, f"{LEAF}-")
    wait_for("the webhook to see the smaller blocks",
             refused(site.plane, gang("probe", site.queue, 4), "holds 3 pods of 8 GPUs"))  # fmt: skip
    # ... but what is already admitted stays manageable: Kueue evicts gang-1 (its Workload
    # deactivated, as preemption or an operator would), which means an UPDATE of the Job
    # (suspend) that passes our webhook; the Job controller then removes its pods.
    client.CustomObjectsApi(site.api).patch_namespaced_custom_object(
        *KUEUE, site.queue, "workloads", first["metadata"]["name"], {"spec": {"active": False}})  # fmt: skip
    batch = client.BatchV1Api(site.api)
    wait_for("Kueue to suspend gang-1", lambda: bool(batch.read_namespaced_job("gang-1", site.queue).spec.suspend))
    wait_for("gang-1's pods to go", lambda: not client.CoreV1Api(site.api).list_namespaced_pod(
        site.queue, label_selector="job-name=gang-1").items)  # fmt: skip
