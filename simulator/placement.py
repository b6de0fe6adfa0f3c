"""Three placers, the same jobs, on the real control plane (issue 22, part 2): the driver.

It does what a platform and its users would: registers the spec's nodes with the labels and
Kueue objects gpufabric publishes (``core.publish.desired_state``, applied with our field
manager), binds the background load to its nodes, then replays a schedule of job starts and
ends (``core.placement.workload.schedule``) through one placer at a time and reads back where
each job's pods landed (``spec.nodeName``; pod ``i`` of a job is rank ``i``):

* ``unaware``: ``nodes`` pods asking ``nvidia.com/gpu: 8``, no queue, no topology request: the
  real kube-scheduler with its default plugins places every pod;
* ``kueue-required``: the same pods as one Kueue pod group in the tenant's LocalQueue with
  ``kueue.x-k8s.io/podset-required-topology`` at the finest level that holds it now (the leaf
  block, else the spine group, else the pod), placed by Kueue's TAS, bound by kube-scheduler;
* ``kueue-preferred``: the same with ``podset-preferred-topology`` at the leaf block;
* ``advisor``: the ``kueue-required`` group plus gpufabric's hint (``core.placement.advisor``):
  a nodeSelector on the advised domain and a required node affinity on the advised hosts.

Time is compressed to nothing: the driver starts a job, waits until all its pods run, and ends
it at its scheduled end (pods Succeeded, then deleted), so each placer meets exactly the same
occupancy at every start and a week replays in as many API round trips as it has jobs. The
simulator imports only ``core`` (and the control plane it drives).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.placement.advisor import (
    Advice,
    FabricView,
    Request,
    StepCost,
    advise,
    finest_fitting_level,
)
from core.placement.workload import GPUS_PER_NODE, Event, Job
from core.publish import KueuePolicy, LabelScheme, TenantSpec, desired_state
from core.publish.admission import PREFERRED, REQUIRED
from core.topology.model import TopologyModel
from simulator.controlplane import ControlPlane, wait_for_default_service_account
from simulator.controlplane.api import APPLY_PATCH, MERGE_PATCH, STRATEGIC_PATCH, Api, ApiError, ensure_namespace
from simulator.controlplane.nodes import now_rfc3339

PLACERS: tuple[str, ...] = ("unaware", "kueue-required", "kueue-preferred", "advisor")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
JOB_LABEL = "gpufabric.io/placement-job"
PLACER_LABEL = "gpufabric.io/placer"
RUN_LABEL = "gpufabric.io/placement-run"
RANK_LABEL = "gpufabric.io/rank"
FIELD_MANAGER = "gpufabric"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
PLURALS = {"Topology": "topologies", "ResourceFlavor": "resourceflavors", "Cohort": "cohorts",
           "WorkloadPriorityClass": "workloadpriorityclasses", "ClusterQueue": "clusterqueues",
           "LocalQueue": "localqueues"}  # fmt: skip

Progress = Callable[[str], None]
CostFor = Callable[[Job, Sequence[tuple[str, ...]]], StepCost]
"""(job, the other running jobs' hosts in rank order) -> the job's step cost on a placement."""


class PlacementError(RuntimeError):
    """A job the plane did not place within the wait (the message says what it saw)."""


@dataclass
class Site:
    """A plane prepared for placement runs: our labels and queues published, background bound."""

    plane: ControlPlane
    view: FabricView
    tenant: str  # its namespace, LocalQueue and ClusterQueue share the name
    gpus: dict[str, int]  # host -> allocatable GPUs
    background: list[str] = field(default_factory=list)

    @property
    def background_namespace(self) -> str:
        return f"{self.tenant}-bg"

    def free(self, busy: Iterable[str]) -> dict[str, int]:
        """GPUs free per host when ``busy`` hosts (and the background) hold whole nodes."""
        taken = set(busy) | set(self.background)
        return {h: 0 if h in taken else g for h, g in self.gpus.items()}


@dataclass(frozen=True)
class Placed:
    """Where one job's pods landed under one placer."""

    job: str
    placer: str
    start_h: float
    hosts: tuple[str, ...]  # rank order (pod i is rank i)
    level: str | None  # the level field it asked for (None: no topology request)
    advice: Advice | None
    wall_s: float  # submit -> every pod bound
    others: tuple[tuple[str, ...], ...] = ()  # the hosts of the jobs running beside it at its start


def _node_facts(nodes: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    return {str(n["metadata"]["name"]): dict(n["metadata"].get("labels") or {}) for n in nodes}


def prepare_site(plane: ControlPlane, nodes: Sequence[Mapping[str, Any]], model: TopologyModel, *,
                 tenant: str | None = None, scheme: LabelScheme | None = None) -> Site:  # fmt: skip
    """Register ``nodes`` (Node objects as ``simulator.kube.populate`` makes them), publish the
    labels and Kueue objects gpufabric would for ``model``, and create the tenant's namespaces
    (names of their own: a namespace an earlier reset left terminating cannot take pods)."""
    scheme = scheme or LabelScheme()
    tenant = tenant or f"placement-{uuid.uuid4().hex[:6]}"
    plane.register_nodes(nodes)
    facts = _node_facts(nodes)
    product = next(iter(facts.values()))["nvidia.com/gpu.product"]
    gpus = {name: int(labels.get("nvidia.com/gpu.count", "0")) for name, labels in facts.items()}
    quota = sum(gpus.values())
    state = desired_state(model, scheme, facts, [TenantSpec(tenant, tenant, ["batch"], gpu_quota={product: quota})],
                          KueuePolicy(borrowing_fraction=None, lending_fraction=None))  # fmt: skip
    api = plane.api()
    try:
        for name, labels in sorted(state.labels.items()):
            if name in facts and labels:
                api.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": labels}}, MERGE_PATCH,
                          fieldManager=FIELD_MANAGER)  # fmt: skip
        for namespace in (tenant, f"{tenant}-bg"):
            ensure_namespace(api, namespace)
        for obj in state.objects:
            meta = obj["metadata"]
            base = f"{KUEUE}/namespaces/{meta['namespace']}" if meta.get("namespace") else KUEUE
            api.patch(f"{base}/{PLURALS[obj['kind']]}/{meta['name']}", obj, APPLY_PATCH,
                      fieldManager=FIELD_MANAGER, force="true")  # fmt: skip
        _wait("the ClusterQueue to be active", lambda: _active(api, tenant), 60.0)
    finally:
        api.close()
    for namespace in (tenant, f"{tenant}-bg"):
        wait_for_default_service_account(plane, namespace)
    view = FabricView.from_model(model, scheme)
    return Site(plane, view, tenant, {h: g for h, g in gpus.items() if h in view.hosts})


def _active(api: Api, queue: str) -> bool:
    cq = api.get(f"{KUEUE}/clusterqueues/{queue}")
    return any(c["type"] == "Active" and c["status"] == "True" for c in cq.get("status", {}).get("conditions", []))


def _wait(what: str, check: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise PlacementError(f"gave up after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


def _pod(name: str, namespace: str, gpus: int, *, node: str | None = None, labels: Mapping[str, str] | None = None,
         annotations: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                            "containers": [{"name": "main", "image": "train:1",
                                            "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                                                          "limits": {"nvidia.com/gpu": str(gpus)}}}]}  # fmt: skip
    if node:
        spec["nodeName"] = node
    meta: dict[str, Any] = {"labels": dict(labels or {}), "annotations": dict(annotations or {})}
    if name:
        meta.update(name=name, namespace=namespace)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def occupy(site: Site, hosts: Sequence[str]) -> None:
    """Bind one whole-node pod per host in the background namespace (other tenants' load,
    placed before any placer runs, never moved); waits until the node agent runs them."""
    api = site.plane.api()
    try:
        for h in hosts:
            body = _pod(f"bg-{h}", site.background_namespace, site.gpus[h], node=h, labels={"app": "background"})
            try:
                api.post(f"/api/v1/namespaces/{site.background_namespace}/pods", body)
            except ApiError as exc:
                if exc.status != 409:
                    raise

        def running() -> bool:
            items, _ = api.list_all(
                f"/api/v1/namespaces/{site.background_namespace}/pods", labelSelector="app=background"
            )
            return sum(1 for p in items if p.get("status", {}).get("phase") == "Running") >= len(hosts)

        _wait(f"{len(hosts)} background pods to run", running, 120.0, 0.2)
    finally:
        api.close()
    site.background = sorted(set(site.background) | set(hosts))


def run_name(job: Job, placer: str) -> str:
    return f"{job.id}-{placer}".lower()


def pod_objects(
    site: Site,
    job: Job,
    placer: str,
    free: Mapping[str, int],
    cost_for: CostFor | None = None,
    others: Sequence[tuple[str, ...]] = (),
) -> tuple[list[dict[str, Any]], str | None, Advice | None]:
    """The pods a user of this placer submits for ``job`` now (pod ``i`` is rank ``i``), the
    level they ask for, and the advice. Kueue placers submit a pod group (Kueue's pod
    integration: one Workload for the group, admitted whole, pods ungated onto the nodes its TAS
    chose); pods rather than a batch Job because the Job controller's batched syncs would add
    a second or more to every start, and a week has hundreds of them."""
    if placer not in PLACERS:
        raise ValueError(f"unknown placer {placer!r}; one of {', '.join(PLACERS)}")
    name = run_name(job, placer)
    labels = {JOB_LABEL: job.id, PLACER_LABEL: placer, RUN_LABEL: name}
    annotations: dict[str, str] = {}
    level: str | None = None
    advice: Advice | None = None
    if placer != "unaware":
        labels |= {QUEUE_LABEL: site.tenant, GROUP_LABEL: name}
        annotations[GROUP_TOTAL] = str(job.nodes)
    if placer == "kueue-preferred":
        level = "block"
        annotations[PREFERRED] = site.view.keys["block"]
    elif placer in ("kueue-required", "advisor"):
        level = finest_fitting_level(site.view, free, job.nodes, GPUS_PER_NODE)
        if level is None:
            raise PlacementError(f"{job.id}: no domain holds {job.nodes} nodes now; the schedule should not start it")
        annotations[REQUIRED] = site.view.keys[level]
    template = _pod("", site.tenant, GPUS_PER_NODE, labels=labels, annotations=annotations)
    if placer == "advisor":
        if cost_for is None or level is None:
            raise ValueError("the advisor placer needs a cost model (cost_for)")
        advice = advise(site.view, free, Request(job.nodes, GPUS_PER_NODE, level), cost_for(job, others))
        template = advice.apply_to(template)
    pods = []
    for i in range(job.nodes):
        meta = {**template["metadata"], "name": f"{name}-{i}", "namespace": site.tenant,
                "labels": {**template["metadata"]["labels"], RANK_LABEL: str(i)}}  # fmt: skip
        pods.append({**template, "metadata": meta})
    return pods, level, advice


def bound_pods(api: Api, namespace: str, name: str) -> list[dict[str, Any]]:
    items, _ = api.list_all(f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"{RUN_LABEL}={name}")
    return [p for p in items if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]


def start(site: Site, api: Api, job: Job, placer: str, others: Sequence[tuple[str, ...]] = (), at_h: float = 0.0,
          cost_for: CostFor | None = None, timeout_s: float = 120.0) -> Placed:  # fmt: skip
    """Submit ``job`` through ``placer`` beside the running ``others`` (their hosts) and wait
    until all its pods are bound and running; where they went, in rank order."""
    free = site.free(h for hosts in others for h in hosts)
    pods, level, advice = pod_objects(site, job, placer, free, cost_for, others)
    name = run_name(job, placer)
    t0 = time.monotonic()
    for pod in pods:
        api.post(f"/api/v1/namespaces/{site.tenant}/pods", pod)
    seen: list[dict[str, Any]] = []

    def placed() -> bool:
        seen[:] = bound_pods(api, site.tenant, name)
        return sum(1 for p in seen if p.get("status", {}).get("phase") == "Running") >= job.nodes

    try:
        _wait(f"the {job.nodes} pods of {name} to be bound and running", placed, timeout_s)
    except PlacementError as exc:
        raise PlacementError(f"{exc} ({len(seen)} bound; {placer}, level {level})") from None
    ranked = sorted(seen, key=lambda p: int(p["metadata"]["labels"][RANK_LABEL]))
    hosts = tuple(p["spec"]["nodeName"] for p in ranked)
    return Placed(job.id, placer, at_h, hosts, level, advice, time.monotonic() - t0, tuple(others))


def _succeed(api: Api, pod: Mapping[str, Any]) -> None:
    """End a running pod as Succeeded, as kubelet reports a container that exited 0 (the node
    agent's form): Kueue keeps its ``kueue.x-k8s.io/managed`` finalizer on a group's pods until
    they are terminal, so a plain delete would leave them Terminating for ever."""
    stamp = now_rfc3339()

    def started(c: Mapping[str, Any]) -> str:
        return str((c.get("state", {}).get("running") or {}).get("startedAt", stamp))

    statuses = [{**c, "ready": False, "started": False,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": stamp,
                                          "startedAt": started(c), "containerID": c.get("containerID", "")}}}
                for c in pod.get("status", {}).get("containerStatuses", [])]  # fmt: skip
    conditions = [{"type": t, "status": "False", "reason": "PodCompleted", "lastProbeTime": None,
                   "lastTransitionTime": stamp} for t in ("ContainersReady", "Ready")]  # fmt: skip
    meta = pod["metadata"]
    body = {"metadata": {"uid": meta["uid"]},
            "status": {"phase": "Succeeded", "conditions": conditions, "containerStatuses": statuses}}  # fmt: skip
    try:
        api.patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", body, STRATEGIC_PATCH)
    except ApiError as exc:
        if exc.status not in (404, 409):
            raise


def end(site: Site, api: Api, job: Job, placer: str) -> None:
    """End the job's pods (Succeeded) and delete them at once (grace 0); for Kueue placers wait
    until its Workload is gone, so Kueue's view of free capacity is current before the next start."""
    name = run_name(job, placer)
    if placer != "unaware":
        for pod in bound_pods(api, site.tenant, name):
            _succeed(api, pod)
    api.delete(f"/api/v1/namespaces/{site.tenant}/pods", labelSelector=f"{RUN_LABEL}={name}", gracePeriodSeconds=0)

    def gone() -> bool:
        items, _ = api.list_all(f"/api/v1/namespaces/{site.tenant}/pods", labelSelector=f"{RUN_LABEL}={name}")
        return not items

    _wait(f"the pods of {name} to go", gone, 60.0)
    if placer != "unaware":
        # Kueue names a pod group's Workload after the group; it releases the quota and the TAS
        # capacity once the Workload is Finished (all pods Succeeded). Its deletion is left to us:
        # the garbage collector only learns of Workloads at its next discovery resync (30 s).
        path = f"{KUEUE}/namespaces/{site.tenant}/workloads/{name}"

        def released() -> bool:
            try:
                w = api.get(path)
            except ApiError as exc:
                if exc.status == 404:
                    return True
                raise
            return any(
                c["type"] == "Finished" and c["status"] == "True" for c in w.get("status", {}).get("conditions", [])
            )

        _wait(f"the Workload of {name} to finish", released, 60.0)
        api.delete(path)


def _remove_pods(api: Api, namespace: str, selector: str | None = None) -> int:
    params = {"labelSelector": selector} if selector else {}
    items, _ = api.list_all(f"/api/v1/namespaces/{namespace}/pods", **params)
    for pod in items:
        path = f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}"
        if pod["metadata"].get("finalizers"):
            try:
                api.patch(path, {"metadata": {"finalizers": None}}, MERGE_PATCH)
            except ApiError as exc:
                if exc.status != 404:
                    raise
        api.delete(path, gracePeriodSeconds=0)
    return len(items)


def clear_runs(site: Site, api: Api) -> int:
    """Remove every placement pod of the site now, Kueue's finalizers included."""
    return _remove_pods(api, site.tenant, RUN_LABEL)


def clear(site: Site) -> int:
    """Remove every pod of the site's namespaces now, background included (what a test or bench
    leaves must not hold nodes a later ``reset`` re-registers under the same names: Kueue's
    finalizer would keep a pod Terminating after its namespace went). How many it removed."""
    api = site.plane.api()
    try:
        removed = _remove_pods(api, site.tenant) + _remove_pods(api, site.background_namespace)
    finally:
        api.close()
    site.background = []
    return removed


def replay(site: Site, events: Sequence[Event], placer: str, *, cost_for: CostFor | None = None,
           progress: Progress | None = None) -> list[Placed]:  # fmt: skip
    """Every start and end of the schedule through one placer; the placements in start order.
    Leaves nothing of its own running."""
    say = progress or (lambda _m: None)
    api = site.plane.api()
    running: dict[str, tuple[str, ...]] = {}
    out: list[Placed] = []
    jobs: dict[str, Job] = {}
    try:
        for k, ev in enumerate(events):
            if ev.kind == "end":
                if ev.job.id in running:
                    end(site, api, ev.job, placer)
                    del running[ev.job.id]
                continue
            placed = start(site, api, ev.job, placer, list(running.values()), ev.at_h, cost_for)
            running[ev.job.id] = placed.hosts
            jobs[ev.job.id] = ev.job
            out.append(placed)
            if k % 50 == 0:
                say(f"{placer}: event {k + 1}/{len(events)}, {len(out)} jobs placed")
        return out
    finally:
        try:
            for job_id in list(running):
                end(site, api, jobs[job_id], placer)
        except (ApiError, PlacementError):
            clear_runs(site, api)  # a failed end: take everything of ours off the nodes
        finally:
            api.close()
