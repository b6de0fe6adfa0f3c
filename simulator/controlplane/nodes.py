"""Fake nodes as ordinary API objects, and the node agent that stands in for their kubelets.

A node here is only what the API server knows: a Node object with capacity, allocatable, labels
and conditions, a Lease in ``kube-node-lease``, and the status of the pods bound to it. That is all
kube-scheduler, the node-lifecycle controller, the Job controller and Kueue ever look at, so they
run unmodified (the approach of kube-scheduler's ``scheduler_perf`` and of kwok).

The agent does what kubelet does towards the API server, and nothing else:

- renews each node's Lease (holder = node name, ``leaseDurationSeconds`` 40, like kubelet) so the
  node-lifecycle controller keeps the node Ready and untainted;
- posts the node's Ready condition at start, every 5 minutes (kubelet's
  ``nodeStatusReportFrequency``), and at once if anything else marks it not Ready;
- moves every pod bound to a node (``spec.nodeName`` set, phase Pending) to Running with the
  PodReady / ContainersReady / Initialized conditions, ``startTime``, pod and host IPs and running
  container statuses;
- finishes graceful deletion of bound pods (kubelet's final ``DELETE`` with grace period 0 once the
  containers are gone; without it a deleted pod stays Terminating forever);
- ends a pod as Succeeded (exit 0) after ``controlplane.gpufabric.io/run-seconds`` if the pod
  carries that annotation, so Jobs can complete and release quota;
- plays the GPU operator's mig-manager (issue 21): when a node's ``nvidia.com/mig.config`` label
  changes it sets ``nvidia.com/mig.config.state=pending``, reads the named config from the mig-parted
  ConfigMap (``core.mig.migparted.load_config``), publishes the ``mixed`` strategy's extended
  resources (``nvidia.com/mig-<profile>``, ``nvidia.com/gpu`` less the MIG GPUs) in capacity and
  allocatable, then sets ``success``; a config that is not there (or a ConfigMap that is missing
  or unreadable) ends ``failed``. The instances applied are written to ``mig_layout_file`` (JSON,
  node -> GPU index -> [profile, GPU instance id]) for the dcgm-exporter twin to expose.

It uses two watches (nodes; pods with ``spec.nodeName!=``) and a pooled client, never a poll per
node, so it keeps up with ~1,000 nodes on one core.
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime as dt
import hashlib
import heapq
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from core.mig.apply import (
    GFD_COUNT,
    GFD_PRODUCT,
    MIG_CONFIG_LABEL,
    MIG_RESOURCE_PREFIX,
    MIG_STATE_LABEL,
    ConfigMapRef,
    instances,
    mig_resources,
)
from core.mig.migparted import MigConfigError, load_config
from core.mig.profiles import UnknownModelError
from simulator.controlplane.api import APPLY_PATCH, MERGE_PATCH, STRATEGIC_PATCH, Api, ApiError

log = logging.getLogger("gpufabric.controlplane.agent")

JSON = dict[str, Any]

RUN_SECONDS_ANNOTATION = "controlplane.gpufabric.io/run-seconds"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40  # kubelet's default nodeLeaseDurationSeconds
STATUS_REPORT_S = 300  # kubelet's default nodeStatusReportFrequency
KUBELET_VERSION = "v1.36.5"
MIG_MANAGER = "nvidia-mig-manager"  # the field manager of the state label, as the real one's client
# How long the twin's mig-manager stays ``pending`` before it applies: the real one takes seconds
# (GPU reset) to minutes (reboot); a pause lets a reader see the transition.
MIG_PENDING_S = 1.0


def now_rfc3339(micro: bool = False) -> str:
    stamp = dt.datetime.now(dt.UTC)
    if micro:
        return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def lease_renew_interval(node_count: int) -> float:
    """Seconds between Lease renewals: kubelet's 10 s (a quarter of the lease) up to 200 nodes,
    stretched for more so ~1,000 nodes stay near 40 renewals a second; the controller-manager's
    ``--node-monitor-grace-period`` (see cluster.py) leaves room for the longest interval."""
    return min(25.0, max(10.0, node_count / 40.0))


# --------------------------------------------------------------------------------------------- nodes


def _ready_conditions(stamp: str) -> list[JSON]:
    rows = (
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    )
    return [
        {"type": t, "status": s, "reason": r, "message": m, "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
        for t, s, r, m in rows
    ]


def _node_ip(name: str) -> str:
    digest = hashlib.sha256(name.encode()).digest()
    return f"10.{digest[0] % 64 + 64}.{digest[1]}.{digest[2] % 250 + 2}"


def normalise_node(spec: Mapping[str, Any]) -> tuple[JSON, JSON, dict[str, list[str]]]:
    """``(object to create, status, labels by field manager)`` for one node description.

    Accepts either a short form ``{"name", "labels", "capacity", "allocatable", "taints",
    "annotations"}`` or a whole Node object (``metadata``/``spec``/``status``); a whole object may
    carry ``metadata.x-twin-managers`` (manager -> label keys, as ``simulator.kube.populate``
    writes it) so labels land under the field manager that owns them in a real cluster.
    """
    if "metadata" in spec:
        metadata = dict(spec["metadata"])
        managers = {k: list(v) for k, v in (metadata.pop("x-twin-managers", None) or {}).items()}
        name = str(metadata["name"])
        node_spec = dict(spec.get("spec") or {})
        status = dict(spec.get("status") or {})
    else:
        name = str(spec["name"])
        metadata = {"name": name, "labels": dict(spec.get("labels") or {})}
        if spec.get("annotations"):
            metadata["annotations"] = dict(spec["annotations"])
        managers = {}
        node_spec = {"taints": list(spec["taints"])} if spec.get("taints") else {}
        capacity = {k: str(v) for k, v in (spec.get("capacity") or {}).items()}
        allocatable = {k: str(v) for k, v in (spec.get("allocatable") or capacity).items()}
        status = {"capacity": capacity, "allocatable": allocatable}
    labels = dict(metadata.get("labels") or {})
    labels.setdefault("kubernetes.io/hostname", name)
    labels.setdefault("kubernetes.io/os", "linux")
    labels.setdefault("kubernetes.io/arch", "amd64")
    metadata["labels"] = labels
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", **dict(status.get("capacity") or {})}
    status["capacity"] = capacity
    status["allocatable"] = {**capacity, **dict(status.get("allocatable") or {})}
    stamp = now_rfc3339()
    status["conditions"] = _ready_conditions(stamp)  # a fresh heartbeat, whatever the input said
    status.setdefault(
        "addresses", [{"type": "InternalIP", "address": _node_ip(name)}, {"type": "Hostname", "address": name}]
    )
    status.setdefault(
        "nodeInfo",
        {
            "architecture": labels["kubernetes.io/arch"],
            "operatingSystem": "linux",
            "kubeletVersion": KUBELET_VERSION,
            "osImage": "gpufabric simulated node",
            "kernelVersion": "6.1.0",
            "containerRuntimeVersion": "containerd://2.0.0",
            "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, name).hex,
            "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_OID, name)),
            "bootID": str(uuid.uuid5(uuid.NAMESPACE_X500, name)),
        },
    )
    status.setdefault("daemonEndpoints", {"kubeletEndpoint": {"Port": 10250}})
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": node_spec}
    return obj, status, managers


def register_nodes(api: Api, nodes: Iterable[Mapping[str, Any]], *, workers: int = 8) -> list[str]:
    """Create (or update) one Node per description with Ready conditions; returns the names.

    Labels land as kubelet's (field manager ``kubelet``) except those a whole object's
    ``x-twin-managers`` gives to another manager (GPU Feature Discovery's ``nfd-master``), which
    are server-side applied by that manager, as in a real cluster.
    """

    def one(spec: Mapping[str, Any]) -> str:
        obj, status, managers = normalise_node(spec)
        name = obj["metadata"]["name"]
        other = {key for keys in managers.values() for key in keys}
        labels = obj["metadata"]["labels"]
        own = {**obj, "metadata": {**obj["metadata"], "labels": {k: v for k, v in labels.items() if k not in other}}}
        try:
            api.post("/api/v1/nodes", own, fieldManager="kubelet")
        except ApiError as exc:
            if exc.status != 409:
                raise
            api.patch(f"/api/v1/nodes/{name}", {"metadata": own["metadata"]}, MERGE_PATCH, fieldManager="kubelet")
        for manager, keys in managers.items():
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {k: labels[k] for k in keys if k in labels}},
            }
            api.patch(f"/api/v1/nodes/{name}", body, APPLY_PATCH, fieldManager=manager, force="true")
        api.patch(f"/api/v1/nodes/{name}/status", {"status": status}, STRATEGIC_PATCH, fieldManager="kubelet")
        return str(name)

    with cf.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, list(nodes)))


def nodes_from_spec(spec: str) -> list[JSON]:
    """The Node objects of a shipped spec's name (``h100-1su``) or a spec file path.

    One per host, with kubelet's and GPU Feature Discovery's labels and ``nvidia.com/gpu``
    capacity: what a GPU node carries before gpufabric publishes anything.
    """
    from simulator.generator import generate
    from simulator.kube.populate import node_objects
    from simulator.spec import load_spec
    from simulator.specs import resolve_spec_path

    return node_objects(generate(load_spec(resolve_spec_path(spec))))


# --------------------------------------------------------------------------------------------- agent


class NodeAgent:
    """Kubelet's API-server side for every Node in the cluster (all nodes here are simulated)."""

    def __init__(
        self,
        api: Api,
        *,
        workers: int = 8,
        mig_config: ConfigMapRef | None = None,
        mig_layout_file: Path | None = None,
        mig_pending_s: float = MIG_PENDING_S,
    ) -> None:
        self.api = api
        self.mig_config = mig_config or ConfigMapRef()
        self.mig_layout_file = mig_layout_file
        self.mig_pending_s = mig_pending_s
        self._mig_seen: dict[str, str] = {}  # node -> the mig.config value last acted on
        self._mig_layouts: dict[str, dict[str, list[list[Any]]]] = {}  # node -> GPU index -> [profile, gi id]
        self.stop = threading.Event()
        self._pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agent")
        self._lock = threading.Lock()
        self._nodes: dict[str, JSON] = {}  # name -> {"uid", "ip", "reported"}
        self._leases: set[str] = set()
        self._inflight: set[str] = set()  # "<pod uid>:<phase or delete>" with work queued
        self._started: set[str] = set()  # pod uids moved to Running (a stale Pending event must not restart one)
        self._timers: list[tuple[float, str, str, str]] = []  # (due, namespace, name, uid)
        self._ip_counter = 0
        self.counters = {"leases": 0, "pods_running": 0, "pods_deleted": 0, "pods_succeeded": 0, "node_status": 0,
                         "mig_applied": 0, "mig_failed": 0}  # fmt: skip

    # -- lifecycle

    def start(self) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._loop, args=(self._watch_nodes,), name="agent-nodes", daemon=True),
            threading.Thread(target=self._loop, args=(self._watch_pods,), name="agent-pods", daemon=True),
            threading.Thread(target=self._loop, args=(self._renew_leases,), name="agent-leases", daemon=True),
            threading.Thread(target=self._loop, args=(self._run_timers,), name="agent-timers", daemon=True),
        ]
        for thread in threads:
            thread.start()
        return threads

    def shutdown(self) -> None:
        self.stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _loop(self, body: Callable[[], None]) -> None:
        while not self.stop.is_set():
            try:
                body()
            except Exception as exc:  # a dropped watch or a restarting API server: log, back off, go on
                log.warning("%s: %r", body.__name__, exc)
                self.stop.wait(1.0)

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        def run() -> None:
            try:
                fn(*args)
            except Exception as exc:
                log.warning("%s: %r", fn.__name__, exc)

        try:
            self._pool.submit(run)
        except RuntimeError:  # pool shut down
            pass

    # -- nodes and leases

    def _watch_nodes(self) -> None:
        items, rv = self.api.list_all("/api/v1/nodes")
        seen = set()
        for node in items:
            seen.add(node["metadata"]["name"])
            self._on_node(node)
        with self._lock:
            for gone in set(self._nodes) - seen:
                self._nodes.pop(gone, None)
        while not self.stop.is_set():
            for event in self.api.watch("/api/v1/nodes", rv):
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    return  # 410 Gone: relist
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    with self._lock:
                        self._nodes.pop(obj["metadata"]["name"], None)
                        self._leases.discard(obj["metadata"]["name"])
                        self._mig_seen.pop(obj["metadata"]["name"], None)
                    self._forget_layout(obj["metadata"]["name"])
                    continue
                self._on_node(obj)

    def _on_node(self, node: JSON) -> None:
        name = node["metadata"]["name"]
        addresses = (node.get("status") or {}).get("addresses") or []
        ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), _node_ip(name))
        ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
        with self._lock:
            known = name in self._nodes
            self._nodes[name] = {"uid": node["metadata"]["uid"], "ip": ip}
        if not known:
            self._submit(self._renew_one, name)
        if ready is None or ready.get("status") != "True":
            self._submit(self._post_ready, name)
        wanted = (node["metadata"].get("labels") or {}).get(MIG_CONFIG_LABEL)
        with self._lock:
            new = wanted is not None and self._mig_seen.get(name) != wanted
            if new:
                self._mig_seen[name] = str(wanted)
        if new:
            self._submit(self._apply_mig, name, str(wanted))

    # -- mig-manager

    def _mig_state(self, name: str, state: str) -> None:
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {MIG_STATE_LABEL: state}}}
        self.api.patch(f"/api/v1/nodes/{name}", body, APPLY_PATCH, fieldManager=MIG_MANAGER, force="true")

    def _still_wanted(self, name: str, wanted: str) -> bool:
        with self._lock:
            return self._mig_seen.get(name) == wanted

    def _apply_mig(self, name: str, wanted: str) -> None:
        """mig-manager's loop for one label change: pending, apply, success (or failed)."""
        self._mig_state(name, "pending")
        if self.stop.wait(self.mig_pending_s) or not self._still_wanted(name, wanted):
            return  # a newer label value has its own run
        node = self.api.get(f"/api/v1/nodes/{name}")
        labels = node["metadata"].get("labels") or {}
        ref = self.mig_config
        try:
            cm = self.api.get(f"/api/v1/namespaces/{ref.namespace}/configmaps/{ref.name}")
            config = load_config(str((cm.get("data") or {}).get(ref.key, "")))
            count = int(labels.get(GFD_COUNT, "0"))
            resources = mig_resources(config, wanted, count)
            layout = instances(config, wanted, count, str(labels.get(GFD_PRODUCT, "")))
        except (ApiError, MigConfigError, KeyError, ValueError, UnknownModelError) as exc:
            log.warning("mig-manager %s: cannot apply %s: %s", name, wanted, exc)
            if self._still_wanted(name, wanted):
                self._mig_state(name, "failed")
                with self._lock:
                    self.counters["mig_failed"] += 1
            return
        capacity = dict((node.get("status") or {}).get("capacity") or {})
        stale: dict[str, Any] = {k: None for k in capacity if k.startswith(MIG_RESOURCE_PREFIX) and k not in resources}
        patch = {"status": {"capacity": {**stale, **resources}, "allocatable": {**stale, **resources}}}
        self.api.patch(f"/api/v1/nodes/{name}/status", patch, STRATEGIC_PATCH)
        self._record_layout(name, {str(i): [list(p) for p in parts] for i, parts in layout.items()})
        if self._still_wanted(name, wanted):
            self._mig_state(name, "success")
            with self._lock:
                self.counters["mig_applied"] += 1

    def _record_layout(self, name: str, layout: dict[str, list[list[Any]]]) -> None:
        with self._lock:
            if layout:
                self._mig_layouts[name] = layout
            else:
                self._mig_layouts.pop(name, None)
            self._write_layouts()

    def _forget_layout(self, name: str) -> None:
        with self._lock:
            if self._mig_layouts.pop(name, None) is not None:
                self._write_layouts()

    def _write_layouts(self) -> None:
        """Atomically (rename), so the twin never reads half a file; called holding the lock."""
        if self.mig_layout_file is None:
            return
        tmp = self.mig_layout_file.with_name(f".{self.mig_layout_file.name}.{os.getpid()}")
        tmp.write_text(json.dumps(self._mig_layouts, sort_keys=True))
        tmp.replace(self.mig_layout_file)

    def _post_ready(self, name: str) -> None:
        stamp = now_rfc3339()
        conditions = _ready_conditions(stamp)
        self.api.patch(f"/api/v1/nodes/{name}/status", {"status": {"conditions": conditions}}, STRATEGIC_PATCH)
        with self._lock:
            self.counters["node_status"] += 1

    def _renew_leases(self) -> None:
        last_report = time.monotonic()
        while not self.stop.is_set():
            with self._lock:
                names = list(self._nodes)
            started = time.monotonic()
            report = started - last_report >= STATUS_REPORT_S
            if report:
                last_report = started
            try:
                futures = [self._pool.submit(self._renew_one, name) for name in names]
                if report:
                    futures += [self._pool.submit(self._post_ready, name) for name in names]
            except RuntimeError:  # the pool is shut down
                return
            for future in futures:
                try:
                    future.result()
                except cf.CancelledError:
                    return  # shutting down
                except Exception as exc:
                    log.warning("lease renewal: %r", exc)
            elapsed = time.monotonic() - started
            self.stop.wait(max(0.5, lease_renew_interval(len(names)) - elapsed))

    def _renew_one(self, name: str) -> None:
        with self._lock:
            node = self._nodes.get(name)
            exists = name in self._leases
        if node is None:
            return
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
        renew = {
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": now_rfc3339(True)}
        }
        if exists:
            try:
                self.api.patch(f"{path}/{name}", renew, MERGE_PATCH)
                with self._lock:
                    self.counters["leases"] += 1
                return
            except ApiError as exc:
                if exc.status != 404:
                    raise
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": LEASE_NAMESPACE,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["uid"]}],
            },
            **renew,
        }
        try:
            self.api.post(path, lease)
        except ApiError as exc:
            if exc.status != 409:
                raise
            self.api.patch(f"{path}/{name}", renew, MERGE_PATCH)
        with self._lock:
            self._leases.add(name)
            self.counters["leases"] += 1

    # -- pods

    def _watch_pods(self) -> None:
        selector = "spec.nodeName!="
        items, rv = self.api.list_all("/api/v1/pods", fieldSelector=selector)
        for pod in items:
            self._on_pod(pod)
        while not self.stop.is_set():
            for event in self.api.watch("/api/v1/pods", rv, fieldSelector=selector):
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    return
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if kind in ("ADDED", "MODIFIED"):
                    self._on_pod(obj)
                elif kind == "DELETED":
                    with self._lock:
                        self._started.discard(obj["metadata"]["uid"])

    def _on_pod(self, pod: JSON) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        phase = (pod.get("status") or {}).get("phase")
        key = f"{uid}:{'delete' if meta.get('deletionTimestamp') else phase}"
        with self._lock:
            if key in self._inflight or (
                phase == "Pending" and uid in self._started and not meta.get("deletionTimestamp")
            ):
                return
            self._inflight.add(key)
        if meta.get("deletionTimestamp"):
            self._submit(self._finish_delete, pod, key)
        elif phase == "Pending":
            self._submit(self._start_pod, pod, key)
        else:
            with self._lock:
                self._inflight.discard(key)

    def _done(self, key: str) -> None:
        with self._lock:
            self._inflight.discard(key)

    def _start_pod(self, pod: JSON, key: str) -> None:
        try:
            meta = pod["metadata"]
            node = pod["spec"]["nodeName"]
            with self._lock:
                host_ip = (self._nodes.get(node) or {}).get("ip") or _node_ip(node)
                self._ip_counter += 1
                n = self._ip_counter
            pod_ip = f"10.{128 + (n >> 16) % 64}.{(n >> 8) % 256}.{n % 256}"
            stamp = now_rfc3339()
            conditions = [
                {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
                for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
            ]
            statuses = [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "containerID": f"containerd://{hashlib.sha256((meta['uid'] + c['name']).encode()).hexdigest()}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": stamp}},
                }
                for c in pod["spec"].get("containers", [])
            ]
            status = {
                "phase": "Running",
                "startTime": stamp,
                "hostIP": host_ip,
                "hostIPs": [{"ip": host_ip}],
                "podIP": pod_ip,
                "podIPs": [{"ip": pod_ip}],
                "conditions": conditions,
                "containerStatuses": statuses,
            }
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
            try:
                self.api.patch(path, {"metadata": {"uid": meta["uid"]}, "status": status}, STRATEGIC_PATCH)
            except ApiError as exc:
                if exc.status in (404, 409):
                    return  # gone, or replaced by a pod of the same name
                raise
            with self._lock:
                self.counters["pods_running"] += 1
                self._started.add(meta["uid"])
            seconds = (meta.get("annotations") or {}).get(RUN_SECONDS_ANNOTATION)
            if seconds is not None:
                try:
                    due = time.monotonic() + float(seconds)
                except ValueError:
                    log.warning(
                        "pod %s/%s: %s=%r is not a number",
                        meta["namespace"],
                        meta["name"],
                        RUN_SECONDS_ANNOTATION,
                        seconds,
                    )
                else:
                    with self._lock:
                        heapq.heappush(self._timers, (due, meta["namespace"], meta["name"], meta["uid"]))
        finally:
            self._done(key)

    def _finish_delete(self, pod: JSON, key: str) -> None:
        try:
            meta = pod["metadata"]
            body = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]},
            }
            try:
                self.api.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body)
            except ApiError as exc:
                if exc.status != 409:  # 409: the UID precondition failed, a new pod took the name
                    raise
            with self._lock:
                self.counters["pods_deleted"] += 1
        finally:
            self._done(key)

    def _run_timers(self) -> None:
        while not self.stop.is_set():
            due_now = []
            with self._lock:
                while self._timers and self._timers[0][0] <= time.monotonic():
                    due_now.append(heapq.heappop(self._timers))
            for _, namespace, name, uid in due_now:
                self._submit(self._succeed_pod, namespace, name, uid)
            self.stop.wait(0.5)

    def _succeed_pod(self, namespace: str, name: str, uid: str) -> None:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        try:
            pod = self.api.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return
            raise
        if pod["metadata"]["uid"] != uid or pod.get("status", {}).get("phase") != "Running":
            return
        stamp = now_rfc3339()
        started = {
            c["name"]: (c.get("state", {}).get("running") or {}).get("startedAt", stamp)
            for c in pod["status"].get("containerStatuses", [])
        }
        statuses = [
            {
                **c,
                "ready": False,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": started.get(c["name"], stamp),
                        "finishedAt": stamp,
                        "containerID": c.get("containerID", ""),
                    }
                },
            }
            for c in pod["status"].get("containerStatuses", [])
        ]
        conditions = [
            {"type": t, "status": "False", "reason": "PodCompleted", "lastProbeTime": None, "lastTransitionTime": stamp}
            for t in ("ContainersReady", "Ready")
        ]
        body = {
            "metadata": {"uid": uid},
            "status": {"phase": "Succeeded", "conditions": conditions, "containerStatuses": statuses},
        }
        try:
            self.api.patch(f"{path}/status", body, STRATEGIC_PATCH)
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
            return
        with self._lock:
            self.counters["pods_succeeded"] += 1
