"""The burst admission controller (issue 20, part 4): releases gated agent pods in batches that fit.

Agent pods are created with the scheduling gate :data:`core.burst.GATE` (the burst driver's
``--gate``; an orchestrator adds one line to its pod template). kube-scheduler ignores a gated pod,
so a burst of thousands costs it nothing until this controller removes the gate, which it does
only for the pods :func:`core.burst.plan_release` says fit now: higher tiers first, oldest first,
a tree's pods together, never past a node's free GPUs or MIG slices and never past the root's
budget envelope (held pods carry the reason in :data:`core.burst.HELD`).

**Why not through Kueue** (docs/burst.md): the queues publish renders cover ``nvidia.com/gpu``
only, so Kueue never admits a MIG pod (observation 1); Kueue's topology-aware placement and
kube-scheduler race for the same nodes (observation 2); and Kueue's quota does not see the 70%
held by bound training pods (observation 3). Gated burst pods carry no queue label, so Kueue's pod
integration never manages them; this controller does the one thing a queue was for, admitting
what fits, from the nodes' real free capacity, and kube-scheduler alone places what it admits.

**Crash safety.** All state is in the API server: a pod is gated or not, held or not. A new leader
lists the pods and continues. Between a release and its watch event the leader remembers what it
released (so a stale cache does not hand the same room out twice); a successor starts with a fresh
list, which already shows it. Leader election is a ``coordination.k8s.io`` Lease, as client-go's
leaderelection does it: a candidate takes the Lease when the record it last observed has not
changed for ``leaseDurationSeconds`` of its *own* clock (no trust in another machine's clock),
or at once when the holder released it (empty ``holderIdentity``, written on SIGTERM); the leader
renews every ``renew_s`` and stops acting when it could not renew within ``renew_deadline_s``.
Writes use the Lease's resourceVersion, so two candidates never both win.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import logging
import math
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from connectors.kube.watch import ListWatch
from controllers.burst_headroom import Headroom, WarehouseForecast, cluster_gpus, is_placeholder
from controllers.health import Heartbeat, serve
from core.budget import TreeEnvelope
from core.burst import (
    GATE,
    HELD,
    BadQuantity,
    GatedPod,
    NodeRoom,
    Toleration,
    counted,
    gpu_requests,
    plan_release,
    units,
)
from core.burst_headroom import HeadroomError, HeadroomPolicy

log = logging.getLogger("gpufabric.burst")

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
LEASE_NAME = "gpufabric-burst-admission"
TERMINAL = ("Succeeded", "Failed")


def _micro(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _time(text: object) -> datetime:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return datetime.fromtimestamp(0, UTC)  # unreadable: treated as oldest (it has waited longest)


# ------------------------------------------------------------------------------------------------ Lease


@dataclass
class LeaderElector:
    """One candidate for the Lease ``namespace/name``. :meth:`tick` tries to take or renew it and
    says whether this candidate may act now."""

    api: client.ApiClient
    namespace: str
    name: str = LEASE_NAME
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}")
    lease_duration_s: int = 15
    renew_deadline_s: float = 10.0
    monotonic: Callable[[], float] = time.monotonic
    transitions: int = 0  # times this candidate took the Lease from another holder (or none)
    tries: int = 0  # ticks so far
    _observed: tuple[Any, ...] | None = None
    _observed_at: float = 0.0
    _renewed_at: float | None = None  # last successful take or renew (our clock)

    @property
    def leading(self) -> bool:
        return self._renewed_at is not None and self.monotonic() - self._renewed_at < self.renew_deadline_s

    def tick(self) -> bool:
        self.tries += 1
        try:
            self._try()
        except (ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
            log.warning("lease %s/%s: %s", self.namespace, self.name,
                        f"{type(exc).__name__}: {getattr(exc, 'status', '') or exc}"[:300])  # fmt: skip
        return self.leading

    def _try(self) -> None:
        coordination = client.CoordinationV1Api(self.api)
        now = datetime.now(UTC)
        try:
            raw: Any = coordination.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
            lease: dict[str, Any] = json.loads(raw.data)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(now, now, 0)}  # fmt: skip
            try:
                coordination.create_namespaced_lease(self.namespace, body, _preload_content=False)  # type: ignore[arg-type,unused-ignore]
            except ApiException as lost:
                if lost.status == 409:  # another candidate created it first
                    return
                raise
            self._won(now)
            return
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, self.monotonic()
        duration = int(spec.get("leaseDurationSeconds") or self.lease_duration_s)
        if holder and holder != self.identity and self.monotonic() - self._observed_at < duration:
            self._renewed_at = None  # someone else leads
            return
        taking = holder != self.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (1 if taking else 0)
        acquired = now if taking or not spec.get("acquireTime") else _time(spec["acquireTime"])
        lease["spec"] = self._spec(acquired, now, transitions)
        try:
            coordination.replace_namespaced_lease(self.name, self.namespace, lease, _preload_content=False)  # type: ignore[arg-type,unused-ignore]
        except ApiException as exc:
            if exc.status == 409:  # the record changed since our read: someone renewed or took it
                self._renewed_at = None
                return
            raise
        if taking:
            self.transitions += 1
            log.info("lease %s/%s taken by %s (previous holder %r)", self.namespace, self.name, self.identity,
                     holder)  # fmt: skip
        self._won(now)

    def _spec(self, acquired: datetime, renewed: datetime, transitions: int) -> dict[str, Any]:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_duration_s,
                "acquireTime": _micro(acquired), "renewTime": _micro(renewed),
                "leaseTransitions": transitions}  # fmt: skip

    def _won(self, now: datetime) -> None:
        self._renewed_at = self.monotonic()
        self._observed = None  # our own write: the next read re-observes it

    def release(self) -> bool:
        """Give the Lease up at once (SIGTERM): empty holder, duration 1 s, so a successor need not
        wait for it to expire. Only when we still hold it; True when released."""
        if self._renewed_at is None:
            return False
        self._renewed_at = None
        coordination = client.CoordinationV1Api(self.api)
        try:
            raw: Any = coordination.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
            lease = json.loads(raw.data)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return False
            now = _micro(datetime.now(UTC))
            lease["spec"] = {"leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now,
                             "leaseTransitions": int(spec.get("leaseTransitions") or 0)}  # fmt: skip
            coordination.replace_namespaced_lease(self.name, self.namespace, lease, _preload_content=False)
        except (ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        log.info("lease %s/%s released by %s", self.namespace, self.name, self.identity)
        return True


# ------------------------------------------------------------------------------------------------ pods, nodes


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What a pass reads of a pod (a ``ListWatch`` transform: pods are kilobytes, this is bytes)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}

    def requests(containers: Any) -> list[dict[str, Any]]:
        return [((c or {}).get("resources") or {}).get("requests") or {} for c in containers or []]

    return {
        "metadata": {k: meta.get(k) for k in ("namespace", "name", "uid", "labels", "creationTimestamp",
                                               "deletionTimestamp", "resourceVersion")}
        | {"annotations": {HELD: (meta.get("annotations") or {}).get(HELD)}},
        "spec": {"nodeName": spec.get("nodeName"), "schedulingGates": spec.get("schedulingGates") or [],
                 "nodeSelector": spec.get("nodeSelector") or {}, "tolerations": spec.get("tolerations") or [],
                 "requests": requests(spec.get("containers")), "initRequests": requests(spec.get("initContainers"))},
        "status": {"phase": status.get("phase")},
    }  # fmt: skip


def slim_node(node: dict[str, Any]) -> dict[str, Any]:
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    # metadata.name stays where it was: the ListWatch keys its copy by it.
    return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")},
            "name": meta.get("name"), "labels": meta.get("labels") or {}, "ready": ready,
            "unschedulable": bool(spec.get("unschedulable")), "taints": spec.get("taints") or [],
            "allocatable": status.get("allocatable") or {}}  # fmt: skip


def pod_requests(slim: Mapping[str, Any]) -> dict[str, int]:
    """The pod's effective GPU requests as kube-scheduler counts them: the sum over its containers,
    or the largest init container's if larger. :class:`BadQuantity` when one is malformed."""
    total: dict[str, int] = {}
    for requests in slim["spec"]["requests"]:
        for r, n in gpu_requests(requests).items():
            total[r] = total.get(r, 0) + n
    for requests in slim["spec"]["initRequests"]:
        for r, n in gpu_requests(requests).items():
            total[r] = max(total.get(r, 0), n)
    return total


def node_rooms(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[NodeRoom]:
    """Each Ready, schedulable node's allocatable GPUs and MIG slices minus the requests of the
    unfinished pods bound to it. A malformed quantity counts as none (never as room)."""
    used: dict[str, dict[str, int]] = {}
    for pod in pods:
        node = pod["spec"]["nodeName"]
        if not node or pod["status"]["phase"] in TERMINAL:
            continue
        try:
            requests = pod_requests(pod)
        except BadQuantity:
            continue  # the API server refuses such a pod; nothing it could hold
        bucket = used.setdefault(node, {})
        for r, n in requests.items():
            bucket[r] = bucket.get(r, 0) + n
    rooms = []
    for node in nodes:
        if not node["ready"] or node["unschedulable"]:
            continue
        free: dict[str, int] = {}
        for r, v in node["allocatable"].items():
            if not counted(r):
                continue
            try:
                free[r] = units(v) - used.get(node["name"], {}).get(r, 0)
            except BadQuantity:
                log.warning("node %s: allocatable %s=%r is not a whole number; counted as 0", node["name"], r, v)
        taints = tuple((str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
                       for t in node["taints"] if t.get("effect") in ("NoSchedule", "NoExecute"))  # fmt: skip
        rooms.append(NodeRoom(node["name"], free, node["labels"], taints))
    return rooms


def as_gated(pod: Mapping[str, Any], prefix: str) -> GatedPod:
    meta, spec = pod["metadata"], pod["spec"]
    labels = meta.get("labels") or {}
    agent = labels.get(f"{prefix}/agent-id") or meta["name"]
    try:
        depth = int(labels.get(f"{prefix}/depth", "0"))
    except ValueError:
        depth = 0
    return GatedPod(
        namespace=meta["namespace"], name=meta["name"], uid=meta.get("uid") or "", agent_id=agent,
        root_id=labels.get(f"{prefix}/root-id") or agent, parent_id=labels.get(f"{prefix}/parent-id") or None,
        tier=labels.get(f"{prefix}/tier", ""), created=_time(meta.get("creationTimestamp")),
        requests=pod_requests(pod), depth=depth, node_selector=dict(spec["nodeSelector"]),
        tolerations=tuple(Toleration(str(t.get("key") or ""), str(t.get("operator") or "Equal"),
                                     str(t.get("value") or ""), str(t.get("effect") or ""))
                          for t in spec["tolerations"]),
        held=(meta.get("annotations") or {}).get(HELD) or "",
    )  # fmt: skip


def _has_gate(pod: Mapping[str, Any]) -> bool:
    return any((g or {}).get("name") == GATE for g in pod["spec"]["schedulingGates"])


# ------------------------------------------------------------------------------------------------ the loop


@dataclass
class PassReport:
    released: int = 0
    held: int = 0  # over-envelope holds
    waiting: int = 0  # gated for capacity, a gated parent or the batch cap
    failed: int = 0
    malformed: int = 0


EnvelopeSource = Callable[[str], TreeEnvelope | None]


@dataclass
class BurstAdmission:
    """The controller. ``envelope_of(root_id)`` is the root's ledger row (None: no envelope);
    ``namespace`` None watches every namespace. Runs passes while :attr:`elector` leads."""

    api: client.ApiClient
    elector: LeaderElector
    envelope_of: EnvelopeSource = lambda _root: None
    prefix: str = "gpufabric.io"
    namespace: str | None = None
    period_s: float = 2.0
    max_release: int = 500
    workers: int = 64  # gate removals in flight: each is one PATCH, bound by the API server's latency
    passes: int = 0
    errors: int = 0
    released_total: int = 0
    heartbeat: Heartbeat | None = None  # ticked every loop turn, leading or following (controllers/health.py)
    headroom: Headroom | None = None  # warm headroom: placeholder pods (controllers/burst_headroom.py); None: none
    _recent: dict[str, float] = field(default_factory=dict)  # uid -> when we released it (monotonic)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _pods: ListWatch | None = None
    _nodes: ListWatch | None = None

    def start_watches(self) -> None:
        core = client.CoreV1Api(self.api)
        alive = "status.phase!=Succeeded,status.phase!=Failed"
        # Bound pods of every namespace hold node room; gated ones only in ours.
        self._pods = ListWatch(partial(core.list_pod_for_all_namespaces, field_selector=alive), name="burst-pods",
                               on_change=self._wake.set, transform=slim_pod).start()  # fmt: skip
        self._nodes = ListWatch(core.list_node, name="burst-nodes", on_change=self._wake.set,
                                transform=slim_node).start()  # fmt: skip

    def run_pass(self) -> PassReport | None:
        """One pass over the watches' copies; None when they have not listed yet."""
        if self._pods is None or self._nodes is None:
            return None
        if not (self._pods.synced.is_set() and self._nodes.synced.is_set()) or not self.elector.leading:
            return None
        pods, nodes = self._pods.snapshot(), self._nodes.snapshot()
        report = PassReport()
        gated, released = [], []
        root_label = f"{self.prefix}/root-id"
        now_mono = time.monotonic()
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or root_label not in (meta.get("labels") or {}):
                continue
            if self.namespace is not None and meta.get("namespace") != self.namespace:
                continue
            try:
                view = as_gated(pod, self.prefix)
            except BadQuantity as exc:
                report.malformed += 1
                if _has_gate(pod) and (meta.get("annotations") or {}).get(HELD) != f"malformed: {exc}":
                    self._annotate(pod, f"malformed: {exc}")
                continue
            spec = pod["spec"]
            if _has_gate(pod) and view.uid not in self._recent:
                gated.append(view)
            elif spec["nodeName"]:
                released.append(replace_requests(view))  # bound: its room is in node_rooms already
            elif view.uid in self._recent or not spec["schedulingGates"]:
                released.append(view)  # released, not yet bound: about to take room
            else:
                # Gated by someone else (Kueue's admission gate): not heading for the scheduler, so
                # it holds no room yet; it is live for its tree's envelope all the same.
                released.append(replace_requests(view))
            if not _has_gate(pod):
                self._recent.pop(view.uid, None)  # the watch has caught up with our release
        for uid, at in list(self._recent.items()):
            if now_mono - at > 60:  # a release whose event never came (pod gone): forget it
                del self._recent[uid]
        cache: dict[str, TreeEnvelope | None] = {}

        def envelope(root: str) -> TreeEnvelope | None:
            if root not in cache:
                cache[root] = self.envelope_of(root)
            return cache[root]

        # A placeholder's room is free for a burst pod: kube-scheduler preempts it for any real pod.
        rooms = node_rooms(nodes, [p for p in pods if not is_placeholder(p)] if self.headroom else pods)
        plan = plan_release(gated, released, rooms, envelope, datetime.now(UTC), max_release=self.max_release)
        if log.isEnabledFor(logging.DEBUG):  # the room of every node: only when asked for
            log.debug("pass %d: rooms %s; %d gated, %d released (%d unbound); holds %s", self.passes + 1,
                      [(r.name, dict(r.free)) for r in rooms], len(gated), len(released),
                      sum(1 for p in released if p.requests), plan.reasons())  # fmt: skip
        raw = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}
        if not self.elector.leading:  # lost the Lease while planning: act on nothing
            return None
        with cf.ThreadPoolExecutor(max_workers=self.workers) as pool:
            outcomes = list(pool.map(lambda p: self._release(raw[p.key], p), plan.release))
        report.released = sum(outcomes)
        report.failed = len(outcomes) - report.released
        for hold in plan.held:
            if hold.annotate:
                report.held += 1
                if hold.pod.held != hold.reason:
                    self._annotate(raw[hold.pod.key], hold.reason)
            else:
                report.waiting += 1
                if hold.pod.held.startswith("over-envelope"):  # back within its envelope: the reason is stale
                    self._annotate(raw[hold.pod.key], None)
        if self.headroom is not None:
            # Refilled only when no burst pod waits for room, is on its way to the scheduler or was
            # just released: the burst uses room first, headroom is for the next one.
            waiting = bool(plan.release or plan.in_flight) or any(not h.annotate for h in plan.held)
            free: dict[str, int] = {}
            for room in node_rooms(nodes, pods):
                for r, n in room.free.items():
                    free[r] = free.get(r, 0) + max(0, n)
            self.headroom.step(pods, free, cluster_gpus(nodes), burst_waiting=waiting)
        self.passes += 1
        self.released_total += report.released
        if report.released or report.held or report.failed:
            log.info("pass %d: released %d, %d held over their envelope, %d waiting, %d failed", self.passes,
                     report.released, report.held, report.waiting, report.failed)  # fmt: skip
        return report

    def _release(self, pod: Mapping[str, Any], view: GatedPod) -> bool:
        """Remove our gate, guarded by the pod's uid and its gates as we saw them (a pod re-created
        under the same name, or changed since, answers 422 and is looked at again next pass)."""
        gates = pod["spec"]["schedulingGates"]
        rest = [g for g in gates if (g or {}).get("name") != GATE]
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": view.uid},
                                     {"op": "test", "path": "/spec/schedulingGates", "value": gates}]  # fmt: skip
        ops.append({"op": "replace", "path": "/spec/schedulingGates", "value": rest} if rest
                   else {"op": "remove", "path": "/spec/schedulingGates"})  # fmt: skip
        if view.held:
            ops.append({"op": "remove", "path": "/metadata/annotations/" + HELD.replace("~", "~0").replace("/", "~1")})
        try:
            client.CoreV1Api(self.api).patch_namespaced_pod(view.name, view.namespace, ops, _content_type=JSON_PATCH,
                                                            _preload_content=False)  # fmt: skip
        except ApiException as exc:
            if exc.status not in (404, 409, 422):
                self.errors += 1
                log.warning("release of %s failed: HTTP %s %s", view.key, exc.status, exc.reason)
            return False
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            self.errors += 1
            log.warning("release of %s failed: %s", view.key, exc)
            return False
        self._recent[view.uid] = time.monotonic()
        return True

    def _annotate(self, pod: Mapping[str, Any], reason: str | None) -> None:
        meta = pod["metadata"]
        body = {"metadata": {"uid": meta.get("uid"), "annotations": {HELD: reason}}}
        try:
            client.CoreV1Api(self.api).patch_namespaced_pod(
                meta["name"], meta["namespace"], body, _content_type=MERGE_PATCH, _preload_content=False)
        except (ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
            log.warning("could not annotate %s/%s: %s", meta["namespace"], meta["name"],
                        getattr(exc, "status", None) or exc)  # fmt: skip

    def run(self, *, until: Callable[[], bool] | None = None) -> None:
        """Campaign for the Lease; while leading, a pass on every change (and every ``period_s``);
        on :meth:`stop`, release the Lease so a successor takes over at once."""
        renew_s = max(0.2, min(self.period_s, self.elector.lease_duration_s / 3))
        last_tick = -math.inf
        try:
            while not self._stop.is_set() and not (until is not None and until()):
                # Passes follow watch events (many a second in a burst); the Lease is written only
                # every renew_s, not once per pass.
                if time.monotonic() - last_tick >= renew_s or not self.elector.leading:
                    last_tick = time.monotonic()
                    self.elector.tick()
                if not self.elector.leading:
                    if self._pods is not None:
                        self._stop_watches()  # a follower holds no copy of the cluster
                    if self.heartbeat is not None:
                        self.heartbeat.tick()  # following is this replica's job: alive and ready
                    self._stop.wait(renew_s)
                    continue
                if self._pods is None:
                    self.start_watches()
                    assert self._pods is not None and self._nodes is not None
                    self._pods.synced.wait(30)
                    self._nodes.synced.wait(30)
                ok = True
                try:
                    self.run_pass()
                except Exception:  # a bug in one pass must not end leadership silently: log, count, go on
                    self.errors += 1
                    ok = False
                    log.exception("burst admission pass failed")
                if self.heartbeat is not None:
                    self.heartbeat.tick(ok=ok)
                self._wake.wait(renew_s)
                time.sleep(0.05)  # coalesce a flurry of watch events into one pass
                self._wake.clear()
        finally:
            self._stop_watches()
            self.elector.release()

    def _stop_watches(self) -> None:
        for watcher in (self._pods, self._nodes):
            if watcher is not None:
                watcher.stop(timeout_s=3)
        self._pods = self._nodes = None
        self._recent.clear()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()


def replace_requests(view: GatedPod) -> GatedPod:
    """A bound pod counts against its tree's live pods but holds no room beyond its node's."""
    return replace(view, requests={})


# ------------------------------------------------------------------------------------------------ entry point


class LedgerEnvelopes:
    """``envelope_of`` from the budget ledger (``agents.envelopes``), one connection kept open and
    reopened when it breaks. A ledger that cannot be read fails the pass (psycopg.Error): nothing
    is released on a budget nobody could check, and the next pass tries again."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._conn: Any = None

    def __call__(self, root: str) -> TreeEnvelope | None:
        import psycopg

        from connectors.warehouse.ledger import read_tree

        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self.database_url, autocommit=True)
        tree, _ = read_tree(self._conn, root)
        return tree

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m controllers burst-admission``: campaign for the Lease and release gated burst
    pods while leading, until SIGTERM or SIGINT (then release the Lease and exit 0)."""
    import argparse
    import signal
    import sys
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m controllers burst-admission", description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", type=Path)
    parser.add_argument("--in-cluster", action="store_true")
    parser.add_argument("--namespace", help="release only this namespace's pods (default: every namespace)")
    parser.add_argument("--lease-namespace", default="gpufabric-system")
    parser.add_argument("--lease-name", default=LEASE_NAME)
    parser.add_argument("--identity", help="this candidate's name in the Lease (default: host name + random)")
    parser.add_argument("--lease-duration", type=int, default=15, help="seconds")
    parser.add_argument("--period", type=float, default=2.0, help="seconds between passes when nothing changes")
    parser.add_argument("--max-release", type=int, default=500, help="gates removed per pass at most")
    parser.add_argument("--release-workers", type=int, default=64,
                        help="gate removals in flight at once (one PATCH each; 16 released only ~33 pods/s at a "
                             "5,000-pod burst)")
    parser.add_argument("--prefix", default="gpufabric.io")
    parser.add_argument("--health-port", type=int, default=0,
                        help="serve /healthz and /readyz on this port (0: off)")
    parser.add_argument("--envelopes", action=argparse.BooleanOptionalAction, default=True,
                        help="hold trees over their budget envelope (reads the ledger in the warehouse)")
    parser.add_argument("--headroom", action=argparse.BooleanOptionalAction, default=False,
                        help="keep placeholder pods holding room for the next burst, sized from the pod "
                             "history in the warehouse (raw.k8s_pod_lag; docs/burst.md)")
    parser.add_argument("--headroom-namespace", default="gpufabric-system", help="where the placeholders live")
    parser.add_argument("--headroom-max-fraction", type=float, default=0.05, help="of the cluster's GPUs, at most")
    parser.add_argument("--headroom-quantile", type=float, default=0.8, help="of the daily burst peaks")
    parser.add_argument("--headroom-lead", type=float, default=60.0, help="seconds: the window a peak is taken over")
    parser.add_argument("--headroom-days", type=int, default=14, help="days of history the forecast reads")
    args = parser.parse_args(argv)
    if args.headroom_days < 1:
        print("burst-admission: --headroom-days >= 1", file=sys.stderr)
        return 2
    try:
        policy = HeadroomPolicy(lead_s=args.headroom_lead, quantile=args.headroom_quantile,
                                max_fraction=args.headroom_max_fraction)  # fmt: skip
    except HeadroomError as err:
        print(f"burst-admission: --headroom: {err}", file=sys.stderr)
        return 2
    if args.lease_duration < 2 or args.period <= 0 or args.max_release < 1 or not 0 <= args.health_port <= 65535:
        print("burst-admission: --lease-duration >= 2, --period > 0, --max-release >= 1 and --health-port in "
              "0..65535", file=sys.stderr)  # fmt: skip
        return 2
    if not 1 <= args.release_workers <= 1024:
        print("burst-admission: --release-workers between 1 and 1024", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stopping: list[BurstAdmission] = []
    requested: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        requested.append(signum)
        for loop in stopping:
            loop.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    from kubernetes.config import ConfigException

    from connectors.kube import ClusterTarget, api_client

    try:
        api = api_client(ClusterTarget(kubeconfig=args.kubeconfig, in_cluster=args.in_cluster),
                         pool=args.release_workers + 8)  # the releases, the Lease, the watches, the placeholders
    except (ConfigException, OSError) as err:
        print(f"burst-admission: cannot reach Kubernetes: {err}", file=sys.stderr)
        return 2
    envelopes: LedgerEnvelopes | None = None
    database_url = ""
    if args.envelopes or args.headroom:
        from connectors.warehouse import WarehouseError, open_warehouse

        try:
            database_url = open_warehouse().libpq_url
        except WarehouseError as err:
            print(f"burst-admission: cannot open the warehouse: {err}", file=sys.stderr)
            return 1
    if args.envelopes:
        envelopes = LedgerEnvelopes(database_url)
    elector = LeaderElector(api, args.lease_namespace, args.lease_name, lease_duration_s=args.lease_duration,
                            renew_deadline_s=args.lease_duration * 2 / 3)  # fmt: skip
    if args.identity:
        elector.identity = args.identity
    loop = BurstAdmission(api, elector, envelope_of=envelopes or (lambda _root: None), prefix=args.prefix,
                          namespace=args.namespace, period_s=args.period, max_release=args.max_release,
                          workers=args.release_workers)  # fmt: skip
    if args.headroom:
        loop.headroom = Headroom(api, WarehouseForecast(database_url, policy, days=args.headroom_days),
                                 namespace=args.headroom_namespace)  # fmt: skip
    # The loop ticks every renew period (at most the period, at most a third of the Lease).
    loop.heartbeat = Heartbeat(period_s=max(0.2, min(args.period, args.lease_duration / 3)))
    probes = serve(loop.heartbeat, args.health_port) if args.health_port else None
    stopping.append(loop)
    if requested:
        loop.stop()
    log.info("burst admission %s campaigning for lease %s/%s (%ss)%s%s", elector.identity, args.lease_namespace,
             args.lease_name, args.lease_duration, "" if envelopes else ", envelopes not checked",
             f", headroom up to {policy.max_fraction:.0%} of GPUs" if args.headroom else "")  # fmt: skip
    try:
        loop.run()
    finally:
        if probes is not None:
            probes.shutdown()
        if envelopes is not None:
            envelopes.close()
        api.close()
    log.info("burst admission %s stopped after %d passes, %d pods released", elector.identity, loop.passes,
             loop.released_total)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
