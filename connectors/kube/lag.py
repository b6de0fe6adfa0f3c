"""Scheduling lag where users feel it: each agent pod's creation, PodScheduled and Running times,
and its Kueue Workload's admission, read from a list + watch (issue 20, part 2).

Every time here is the API server's own stamp on the object, not the moment the watch saw it:
``metadata.creationTimestamp``; the ``PodScheduled`` condition's ``lastTransitionTime`` once its
status is True (a gated or unschedulable pod carries a False one first); the earliest container
``startedAt`` (running, or terminated for a pod that already finished), else ``status.startTime``
once the phase is past Pending; and the Workload's ``QuotaReserved`` and ``Admitted`` conditions'
``lastTransitionTime`` once True. So a watch that was interrupted, or started after the burst,
still measures each pod exactly, and a pod deleted during the window is kept with what it showed
last. The API serialises these times to the second: lags are whole seconds.

Several observations of one pod are merged keeping the earliest of each time (a Succeeded pod's
Ready condition moves; its container's startedAt does not; an evicted and re-admitted Workload
keeps its first admission). Kueue's pod integration creates one Workload per pod (or per pod
group) and names the pods in its ``ownerReferences``; that is how admissions find their pods.

The watch is :class:`connectors.kube.watch.ListWatch` (list, watch, resume, re-list on 410), with
a ``transform`` that records each object as it passes: the reflector's copy drops a pod on its
DELETED event, and this record must not. A pod whose identity or times cannot be read is
quarantined with the reason; a pod whose times are out of order is kept with an issue.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from connectors.kube.pods import parse_time
from connectors.kube.watch import ListWatch, WatchStats
from core.finops.gpu import effective_requests, parse_gpu_requests
from core.finops.labels import DEFAULT_PREFIX, Attribution, attribution
from core.quality import Parsed, Quarantined

log = logging.getLogger("gpufabric.kube.lag")

SOURCE = "kubernetes-lag"  # ops.collection_status / ops.quarantine source: apart from the snapshot asset's
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_WORKLOADS = ("kueue.x-k8s.io", "v1beta2", "workloads")
LAG_COLUMNS = (
    "run_id", "source", "window_start", "window_end", "uid", "namespace", "name", "node", "phase", "deleted",
    "queue_name", "workload", "agent_id", "root_id", "parent_id", "depth", "client", "task", "agent_type", "tier",
    "gpus", "mig", "labels", "created_at", "scheduled_at", "running_at", "quota_reserved_at", "admitted_at", "issues",
)  # fmt: skip
Progress = Callable[[str], None]


@dataclass(frozen=True)
class PodTimes:
    created_at: datetime
    scheduled_at: datetime | None
    running_at: datetime | None


@dataclass(frozen=True)
class PodLag:
    """One pod's lag record: who it is (labels, attribution), what it asked for, and its times."""

    uid: str
    namespace: str
    name: str
    node: str | None
    phase: str | None
    deleted: bool
    queue_name: str | None
    workload: str | None
    agent_id: str | None
    attribution: Attribution
    gpus: int
    mig: Mapping[str, int]
    labels: Mapping[str, str]
    created_at: datetime
    scheduled_at: datetime | None
    running_at: datetime | None
    quota_reserved_at: datetime | None = None
    admitted_at: datetime | None = None
    issues: tuple[str, ...] = ()

    def order_issues(self) -> list[str]:
        """What is out of order among the times (clock skew between components, or bad input)."""
        out = []
        if self.scheduled_at is not None and self.scheduled_at < self.created_at:
            out.append("scheduled before created")
        if self.running_at is not None and self.running_at < self.created_at:
            out.append("running before created")
        if self.running_at is not None and self.scheduled_at is not None and self.running_at < self.scheduled_at:
            out.append("running before scheduled")
        if self.admitted_at is not None and self.admitted_at < self.created_at:
            out.append("admitted before created")
        return out


def _true_since(conditions: object, kind: str) -> datetime | None:
    """lastTransitionTime of condition ``kind`` when its status is True, else None."""
    for cond in conditions if isinstance(conditions, list) else []:
        if isinstance(cond, Mapping) and cond.get("type") == kind and cond.get("status") == "True":
            return parse_time(cond.get("lastTransitionTime"))
    return None


def pod_times(pod: Mapping[str, Any]) -> PodTimes:
    """The pod's creation, scheduling and running times; ValueError when one cannot be read."""
    meta = pod.get("metadata") or {}
    created = parse_time(meta.get("creationTimestamp"))
    if created is None:
        raise ValueError("no creationTimestamp")
    status = pod.get("status") or {}
    scheduled = _true_since(status.get("conditions"), "PodScheduled")
    started: list[datetime] = []
    for cs in (status.get("containerStatuses") or []) if isinstance(status.get("containerStatuses"), list) else []:
        state = (cs or {}).get("state") or {}
        for phase in ("running", "terminated"):
            at = parse_time((state.get(phase) or {}).get("startedAt"))
            if at is not None:
                started.append(at)
    running = min(started) if started else None
    if running is None and status.get("phase") in ("Running", "Succeeded", "Failed"):
        running = parse_time(status.get("startTime"))
    return PodTimes(created, scheduled, running)


def workload_admission(workload: Mapping[str, Any]) -> tuple[list[str], datetime | None, datetime | None]:
    """(uids of the pods it owns, QuotaReserved time, Admitted time) of a Kueue Workload."""
    meta = workload.get("metadata") or {}
    owners = [str(o["uid"]) for o in meta.get("ownerReferences") or []
              if isinstance(o, Mapping) and o.get("kind") == "Pod" and o.get("uid")]  # fmt: skip
    conditions = (workload.get("status") or {}).get("conditions")
    return owners, _true_since(conditions, "QuotaReserved"), _true_since(conditions, "Admitted")


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else min(a, b)


def _payload(obj: object) -> str:
    try:
        return json.dumps(obj, default=str)[:65536]
    except (TypeError, ValueError):
        return repr(obj)[:65536]


class LagRecorder:
    """Every agent pod and Kueue Workload the watches pass by, merged per uid.

    ``pod`` and ``workload`` are ListWatch transforms: they record the object and hand the
    reflector back a trimmed copy (it needs only the name, namespace and resourceVersion).
    """

    def __init__(self, *, cluster: str, prefix: str = DEFAULT_PREFIX) -> None:
        self.cluster = cluster
        self.prefix = prefix
        self._lock = threading.Lock()
        self._pods: dict[str, PodLag] = {}
        self._bad: dict[str, Quarantined] = {}  # key -> the latest reason a pod could not be read
        self._admissions: dict[str, tuple[str, datetime | None, datetime | None]] = {}  # pod uid -> workload

    @staticmethod
    def _trim(obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        return {"metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")}}

    def pod(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        if not isinstance(meta, Mapping):
            self._quarantine("?", "pod without metadata", obj)
            return {"metadata": {}}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        missing = [k for k in ("uid", "name", "namespace") if not meta.get(k)]
        if missing:
            self._quarantine(key, f"pod without {', '.join(missing)}", obj)
            return self._trim(obj)
        try:
            times = pod_times(obj)
        except ValueError as err:
            self._quarantine(key, f"unreadable time: {err}", obj)
            return self._trim(obj)
        uid = str(meta["uid"])
        with self._lock:
            self._bad.pop(key, None)  # a later, readable observation of the pod supersedes
            before = self._pods.get(uid)
            if before is None:
                self._pods[uid] = self._first(obj, times)
            else:
                status = obj.get("status") or {}
                self._pods[uid] = replace(
                    before,
                    node=(obj.get("spec") or {}).get("nodeName") or before.node,
                    phase=status.get("phase") or before.phase,
                    deleted=before.deleted or bool(meta.get("deletionTimestamp")),
                    scheduled_at=_earliest(before.scheduled_at, times.scheduled_at),
                    running_at=_earliest(before.running_at, times.running_at),
                )
        return self._trim(obj)

    def _first(self, obj: Mapping[str, Any], times: PodTimes) -> PodLag:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        dims, issues = attribution(labels, self.prefix)
        containers, init = spec.get("containers") or [], spec.get("initContainers") or []
        requests = parse_gpu_requests(effective_requests(containers, init))
        return PodLag(
            uid=str(meta["uid"]), namespace=str(meta["namespace"]), name=str(meta["name"]),
            node=spec.get("nodeName") or None, phase=status.get("phase"), deleted=bool(meta.get("deletionTimestamp")),
            queue_name=labels.get(QUEUE_LABEL), workload=None, agent_id=labels.get(f"{self.prefix}/agent-id"),
            attribution=dims, gpus=requests.gpus, mig=dict(requests.mig), labels=labels,
            created_at=times.created_at, scheduled_at=times.scheduled_at, running_at=times.running_at,
            issues=tuple([*issues, *requests.issues]),
        )  # fmt: skip

    def workload(self, obj: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(obj, Mapping):
            return {"metadata": {}}
        name = str((obj.get("metadata") or {}).get("name") or "")
        try:
            owners, reserved, admitted = workload_admission(obj)
        except ValueError as err:  # an unreadable condition time: the pods keep no admission time
            log.warning("workload %s: unreadable time (%s)", name, err)
            return self._trim(obj)
        with self._lock:
            for uid in owners:
                _, r0, a0 = self._admissions.get(uid, (name, None, None))
                self._admissions[uid] = (name, _earliest(r0, reserved), _earliest(a0, admitted))
        return self._trim(obj)

    def _quarantine(self, key: str, reason: str, obj: object) -> None:
        with self._lock:
            self._bad[key] = Quarantined(SOURCE, reason, _payload(obj), self.cluster, key)

    def seen(self) -> int:
        with self._lock:
            return len(self._pods)

    def records(
        self, *, since: datetime | None = None, live: Iterable[str] | None = None
    ) -> tuple[Parsed[PodLag], int]:
        """Pods created at or after ``since`` with their Workload's admission, and how many older
        pods were left out. ``live``: the uids the reflector still holds; a pod not among them
        was deleted during the window."""
        still = None if live is None else set(live)
        out: Parsed[PodLag] = Parsed()
        older = 0
        with self._lock:
            pods, bad, admissions = list(self._pods.values()), list(self._bad.values()), dict(self._admissions)
        for pod in sorted(pods, key=lambda p: (p.created_at, p.namespace, p.name)):
            if since is not None and pod.created_at < since:
                older += 1
                continue
            workload, reserved, admitted = admissions.get(pod.uid, (None, None, None))
            merged = replace(pod, workload=workload, quota_reserved_at=reserved, admitted_at=admitted,
                             deleted=pod.deleted or (still is not None and pod.uid not in still))  # fmt: skip
            out.records.append(replace(merged, issues=tuple([*merged.issues, *merged.order_issues()])))
        out.quarantined.extend(bad)
        return out, older


@dataclass
class LagCollection:
    pods: Parsed[PodLag]
    window_start: datetime
    window_end: datetime
    older: int = 0  # pods created before the window's lookback, left out
    kueue_note: str = ""  # why no admission times were read ("": Kueue's Workloads were watched)
    pod_watch: WatchStats = field(default_factory=WatchStats)
    workload_watch: WatchStats = field(default_factory=WatchStats)

    @property
    def kueue(self) -> bool:
        return not self.kueue_note


def _kueue_workloads(api: client.ApiClient) -> str:
    """Why Workloads cannot be read ("" when they can): Kueue is not installed (404), or this
    identity may not list them (403). Either way pods are still measured, without admission."""
    try:
        response: Any = client.CustomObjectsApi(api).list_cluster_custom_object(
            *KUEUE_WORKLOADS, limit=1, _preload_content=False)  # fmt: skip
        response.release_conn()
        return ""
    except ApiException as exc:
        if exc.status == 404:
            return "no Kueue Workload API"
        if exc.status == 403:
            return "not allowed to list Kueue Workloads"
        raise


def watch_lag(
    api: client.ApiClient,
    *,
    cluster: str,
    seconds: float,
    since: datetime | None = None,
    prefix: str = DEFAULT_PREFIX,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    progress_every_s: float = 30.0,
    watch_timeout_s: int = 300,
) -> LagCollection:
    """List and watch every agent pod (those carrying ``<prefix>/root-id``) and every Kueue
    Workload for ``seconds`` (or until ``stop`` is set); return one record per pod created at or
    after ``since``. Raises the API's error when the first pod list fails (the cluster is
    unreachable); later interruptions are the reflector's to recover from."""
    started = datetime.now(UTC)
    recorder = LagRecorder(cluster=cluster, prefix=prefix)
    pods_call = functools.partial(client.CoreV1Api(api).list_pod_for_all_namespaces, label_selector=f"{prefix}/root-id")
    pods = ListWatch(pods_call, name="lag-pods", transform=recorder.pod, watch_timeout_s=watch_timeout_s)
    kueue_note = _kueue_workloads(api)
    workloads = None
    if not kueue_note:
        wl_call = functools.partial(client.CustomObjectsApi(api).list_cluster_custom_object, *KUEUE_WORKLOADS)
        workloads = ListWatch(wl_call, name="lag-workloads", transform=recorder.workload,
                              watch_timeout_s=watch_timeout_s)  # fmt: skip
    try:
        for watcher in (pods, workloads):
            if watcher is not None:
                _start_synced(watcher)
    except WatchUnavailable:
        for watcher in (pods, workloads):
            if watcher is not None:
                watcher.stop()
        raise
    stop = stop or threading.Event()
    deadline = time.monotonic() + seconds
    last = time.monotonic()
    try:
        while not stop.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                break
            if progress is not None and time.monotonic() - last >= progress_every_s:
                last = time.monotonic()
                progress(f"lag watch: {recorder.seen():,} agent pods seen")
    finally:
        for watcher in (pods, workloads):
            if watcher is not None:
                watcher.stop()
    ended = datetime.now(UTC)
    live = [str((o.get("metadata") or {}).get("uid")) for o in pods.snapshot()]
    parsed, older = recorder.records(since=since, live=live)
    return LagCollection(parsed, started, ended, older, kueue_note, pods.stats,
                         workloads.stats if workloads is not None else WatchStats())  # fmt: skip


class WatchUnavailable(Exception):
    """The first list failed: the cluster is unreachable or refuses us (the message says which)."""


def _start_synced(watcher: ListWatch) -> None:
    """Start the reflector and wait for its first list. A failure before that is the caller's to
    report (an unreachable cluster must not look like a quiet one), so the reflector's own
    retrying is not waited out."""
    watcher.start()
    while not watcher.synced.wait(0.05):
        if watcher.stats.failures or watcher.stats.expired:
            raise WatchUnavailable(f"{watcher.name}: {watcher.stats.last_error or 'list failed'}")


def lag_row(run_id: str, cluster: str, window_start: datetime, window_end: datetime, p: PodLag) -> tuple[Any, ...]:
    """One row of ``raw.k8s_pod_lag`` (columns :data:`LAG_COLUMNS`)."""
    a = p.attribution
    return (run_id, cluster, window_start, window_end, p.uid, p.namespace, p.name, p.node, p.phase, p.deleted,
            p.queue_name, p.workload, p.agent_id, a.root_id, a.parent_id, a.depth, a.client, a.task, a.agent_type,
            a.tier, p.gpus, dict(p.mig), dict(p.labels), p.created_at, p.scheduled_at, p.running_at,
            p.quota_reserved_at, p.admitted_at, list(p.issues))  # fmt: skip
