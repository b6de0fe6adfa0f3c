"""Warm headroom for the burst admission controller: placeholder pods, sized from a forecast.

``core/burst_headroom.py`` says how much room to hold and why; this keeps that many placeholder
pods in ``gpufabric-system``: one GPU or one MIG slice each, the PriorityClass
:data:`PRIORITY_CLASS` (value -10, ``preemptionPolicy: Never``, shipped in
``deploy/burst/burst-admission.yaml``), no grace period. Any real pod outranks them, so
kube-scheduler preempts one the moment a real pod needs its room; the admission controller counts
their room as free for burst pods and refills them only when no burst pod is waiting. A
placeholder that vanished without our delete was preempted: :attr:`Headroom.preempted`.

:class:`WarehouseForecast` is the production ``desired_of``: the forecast from
``raw.k8s_pod_lag`` (the lag watch's history), recomputed every ``refresh_s``, capped to the
cluster's GPUs of the moment.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from core.burst import BadQuantity, counted, units
from core.burst_headroom import Forecast, HeadroomPolicy, capped, forecast, gpu_share, placeholder_change

log = logging.getLogger("gpufabric.burst.headroom")

PLACEHOLDER_LABEL = "burst.gpufabric.io/headroom"
PRIORITY_CLASS = "gpufabric-burst-headroom"
IMAGE = "registry.k8s.io/pause:3.10"
MANAGER = "gpufabric-burst-admission"
DesiredOf = Callable[[float], Mapping[str, int]]  # the cluster's GPUs -> units to hold per resource


def is_placeholder(pod: Mapping[str, Any]) -> bool:
    return (pod["metadata"].get("labels") or {}).get(PLACEHOLDER_LABEL) == "true"


def placeholder_manifest(resource: str, namespace: str, priority_class: str = PRIORITY_CLASS) -> dict[str, Any]:
    one = {resource: "1"}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "burst-headroom-", "namespace": namespace,
                     "labels": {PLACEHOLDER_LABEL: "true", "app.kubernetes.io/managed-by": MANAGER}},
        "spec": {"priorityClassName": priority_class, "terminationGracePeriodSeconds": 0,
                 "restartPolicy": "Always", "automountServiceAccountToken": False,
                 "containers": [{"name": "hold", "image": IMAGE, "resources": {"requests": one, "limits": one}}]},
    }  # fmt: skip


def cluster_gpus(nodes: Sequence[Mapping[str, Any]]) -> float:
    """GPUs on the Ready, schedulable nodes (MIG slices as their share of a GPU)."""
    total = 0.0
    for node in nodes:
        if not node["ready"] or node["unschedulable"]:
            continue
        for resource, value in node["allocatable"].items():
            if counted(resource):
                try:
                    total += float(gpu_share(resource)) * units(value)
                except BadQuantity:
                    continue  # node_rooms logs it; never counted as GPUs
    return total


@dataclass
class Headroom:
    """The placeholders one leader keeps. :meth:`step` once per pass, after the releases."""

    api: client.ApiClient
    desired_of: DesiredOf
    namespace: str = "gpufabric-system"
    priority_class: str = PRIORITY_CLASS
    created: int = 0
    deleted: int = 0
    preempted: int = 0
    errors: int = 0
    desired: dict[str, int] = field(default_factory=dict)
    live: dict[str, int] = field(default_factory=dict)  # resource -> placeholders seen in the last step
    _known: dict[str, str] = field(default_factory=dict)  # uid -> resource, placeholders we have seen alive
    _ours: set[str] = field(default_factory=set)  # uids we deleted (so not preempted)

    def step(self, pods: Sequence[Mapping[str, Any]], free: Mapping[str, int], gpus: float, *,
             burst_waiting: bool) -> None:  # fmt: skip
        """``pods``: every live pod as the watch holds it; ``free``: units of each resource free
        outside every pod, placeholders included; ``gpus``: the cluster's GPUs now."""
        alive: dict[str, list[tuple[str, str, str]]] = {}  # resource -> (created, key, uid)
        seen: set[str] = set()
        for pod in pods:
            meta = pod["metadata"]
            if not is_placeholder(pod) or meta.get("namespace") != self.namespace or meta.get("deletionTimestamp"):
                continue
            asked = [r for requests in pod["spec"]["requests"] for r in requests if counted(r)]
            if len(asked) != 1:
                continue  # not one of ours (ours ask for exactly one resource)
            uid = str(meta.get("uid") or "")
            seen.add(uid)
            self._known.setdefault(uid, asked[0])
            alive.setdefault(asked[0], []).append((str(meta.get("creationTimestamp") or ""),
                                                   f"{meta['namespace']}/{meta['name']}", uid))  # fmt: skip
        for uid in [u for u in self._known if u not in seen]:
            del self._known[uid]
            if uid in self._ours:
                self._ours.discard(uid)
            else:
                self.preempted += 1  # gone, and not by us: kube-scheduler took its room for a real pod
        self.live = {r: len(v) for r, v in alive.items()}
        self.desired = dict(self.desired_of(gpus))
        by_key = {key: uid for rows in alive.values() for _, key, uid in rows}
        change = placeholder_change(self.desired, {r: [k for _, k, _ in sorted(v)] for r, v in alive.items()}, free,
                                    burst_waiting=burst_waiting)  # fmt: skip
        core = client.CoreV1Api(self.api)
        for key in change.delete:
            namespace, name = key.split("/", 1)
            try:
                core.delete_namespaced_pod(name, namespace, grace_period_seconds=0, _preload_content=False)
                self._ours.add(by_key[key])
                self.deleted += 1
            except ApiException as exc:
                if exc.status != 404:
                    self._failed(f"delete {key}", exc)
            except (OSError, urllib3.exceptions.HTTPError) as exc:
                self._failed(f"delete {key}", exc)
        for resource, count in change.create.items():
            for _ in range(count):
                try:
                    core.create_namespaced_pod(self.namespace, placeholder_manifest(resource, self.namespace,
                                                                                    self.priority_class),
                                               _preload_content=False)  # fmt: skip
                    self.created += 1
                except (ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
                    self._failed(f"create a {resource} placeholder", exc)
                    break  # the same answer for the rest: try again next pass
        if change.create or change.delete:
            log.info("headroom: desired %s, held %s; created %s, deleted %d (preempted so far %d)", self.desired,
                     self.live, dict(change.create), len(change.delete), self.preempted)  # fmt: skip

    def _failed(self, what: str, exc: Exception) -> None:
        self.errors += 1
        detail = f"HTTP {exc.status} {exc.reason}" if isinstance(exc, ApiException) else str(exc)
        log.warning("headroom: could not %s: %s", what, detail[:300])


@dataclass
class WarehouseForecast:
    """``desired_of`` from the lag watch's history in the warehouse: the forecast over the last
    ``days``, recomputed at most every ``refresh_s``; capped per call to the cluster's GPUs. A
    history that cannot be read keeps the last forecast (none at first: no headroom) and logs it."""

    database_url: str
    policy: HeadroomPolicy = field(default_factory=HeadroomPolicy)
    days: int = 14
    refresh_s: float = 600.0
    source: str | None = None  # one cluster's history (raw.k8s_pod_lag.source); None: all
    forecast: Forecast = field(default_factory=lambda: Forecast({}, 0))
    _at: float = -1e18
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, gpus: float) -> Mapping[str, int]:
        with self._lock:
            if time.monotonic() - self._at >= self.refresh_s:
                self._at = time.monotonic()
                self._refresh()
            return capped(self.forecast, gpus, self.policy)

    def _refresh(self) -> None:
        import psycopg

        from connectors.warehouse.burst_history import read_demand

        try:
            with psycopg.connect(self.database_url, autocommit=True) as conn:
                samples = read_demand(conn, since=datetime.now(UTC) - timedelta(days=self.days), source=self.source)
        except psycopg.Error as exc:
            log.warning("headroom: cannot read the pod history (%s); keeping the last forecast %s", exc,
                        self.forecast.units())  # fmt: skip
            return
        self.forecast = forecast(samples, self.policy)
        log.info("headroom: forecast over %d day(s) of %d pods: %s", self.forecast.days, len(samples),
                 self.forecast.units())  # fmt: skip
