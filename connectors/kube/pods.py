"""Pods and nodes → snapshot records for cost attribution; list and watch over the API.

Pods are handled as plain JSON dicts (the API's own camelCase shape): the list is read raw
(``_preload_content=False``) and watch events carry ``raw_object``, so one parser serves both, as
well as pods from saved exports and the simulator. A pod the parser cannot identify (no uid, name
or namespace) is quarantined with the reason; everything else lands, with missing or invalid
attribution labels defaulted to ``unattributed`` and recorded as issues.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from core.finops.gpu import effective_requests, parse_gpu_requests
from core.finops.labels import DEFAULT_PREFIX, attribution
from core.finops.records import NodeSnapshot, PodSnapshot
from core.quality import Parsed, Quarantined

SOURCE = "kubernetes"
PAGE_SIZE = 500
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def parse_time(value: object) -> datetime | None:
    """RFC 3339 as the API serves it (``2026-12-02T10:00:00Z``), or a datetime; None if absent."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    text = str(value)
    parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _end_time(pod: Mapping[str, Any], event: str, collected_at: datetime) -> datetime | None:
    status = pod.get("status") or {}
    if status.get("phase") in FINISHED_PHASES:
        finished = [
            parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            for cs in status.get("containerStatuses") or []
        ]
        known = [f for f in finished if f is not None]
        if known:
            return max(known)
    if event == "DELETED":
        # Deleted while running: the GPUs were held until the deletion was seen (the API does not
        # say when the containers actually stopped).
        return collected_at
    return None


def pod_snapshot(
    pod: Mapping[str, Any],
    *,
    cluster: str,
    collected_at: datetime,
    event: str = "list",
    prefix: str = DEFAULT_PREFIX,
) -> PodSnapshot | Quarantined:
    """One pod → a snapshot, or the reason it cannot be one."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    if not isinstance(meta, Mapping):
        return Quarantined(SOURCE, "pod without metadata", _payload(pod), cluster)
    missing = [k for k in ("uid", "name", "namespace") if not meta.get(k)]
    if missing:
        return Quarantined(SOURCE, f"pod without {', '.join(missing)}", _payload(pod), cluster,
                           f"{meta.get('namespace')}/{meta.get('name')}")
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    labels = dict(meta.get("labels") or {})
    try:
        start = parse_time(status.get("startTime"))
        end = _end_time(pod, event, collected_at)
    except ValueError as err:
        return Quarantined(SOURCE, f"unreadable time: {err}", _payload(pod), cluster,
                           f"{meta['namespace']}/{meta['name']}")
    requests = parse_gpu_requests(effective_requests(spec.get("containers") or [], spec.get("initContainers") or []))
    dims, issues = attribution(labels, prefix)
    issues = [*issues, *requests.issues]
    if start is not None and end is not None and end < start:
        issues.append("end_time before start_time")
    return PodSnapshot(
        cluster=cluster,
        collected_at=collected_at,
        event=event,
        uid=str(meta["uid"]),
        namespace=str(meta["namespace"]),
        name=str(meta["name"]),
        node=spec.get("nodeName") or None,
        phase=status.get("phase"),
        start_time=start,
        end_time=end,
        gpus=requests.gpus,
        mig=requests.mig,
        gpu_requests=requests.raw,
        unknown_gpu_resources=requests.unknown,
        attribution=dims,
        labels=labels,
        issues=tuple(issues),
    )


def parse_pods(
    pods: Sequence[Mapping[str, Any]] | Sequence[tuple[str, Mapping[str, Any], datetime]],
    *,
    cluster: str,
    collected_at: datetime | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> Parsed[PodSnapshot]:
    """Pods from a list (all at ``collected_at``) or watch events ``(type, pod, seen_at)``."""
    out: Parsed[PodSnapshot] = Parsed()
    for item in pods:
        if isinstance(item, tuple):
            event, pod, seen = item
        else:
            event, pod, seen = "list", item, collected_at or datetime.now(UTC)
        result = pod_snapshot(pod, cluster=cluster, collected_at=seen, event=event, prefix=prefix)
        (out.quarantined if isinstance(result, Quarantined) else out.records).append(result)  # type: ignore[arg-type]
    return out


def _int(value: object) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def node_snapshot(node: Mapping[str, Any], *, cluster: str, collected_at: datetime) -> NodeSnapshot:
    """A node's GPU capacity: the device plugin's ``nvidia.com/gpu`` or, when MIG hides whole
    GPUs from it (mixed strategy), GPU Feature Discovery's ``nvidia.com/gpu.count``."""
    meta = node.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    status = node.get("status") or {}
    allocatable = {str(k): str(v) for k, v in (status.get("allocatable") or status.get("capacity") or {}).items()}
    count = max(_int(allocatable.get("nvidia.com/gpu")), _int(labels.get("nvidia.com/gpu.count")))
    mig = labels.get("nvidia.com/mig.capable")
    return NodeSnapshot(
        cluster=cluster,
        collected_at=collected_at,
        node=str(meta.get("name")),
        gpu_model=labels.get("nvidia.com/gpu.product"),
        gpu_count=count,
        mig_capable=None if mig is None else mig == "true",
        labels=labels,
        allocatable=allocatable,
    )


def _payload(obj: object) -> str:
    try:
        return json.dumps(obj, default=str)[:65536]
    except (TypeError, ValueError):
        return repr(obj)[:65536]


@dataclass
class PodList:
    pods: list[dict[str, Any]]
    resource_version: str


def _list_raw(list_call: Any) -> tuple[list[dict[str, Any]], str]:
    """Every item of a list call as JSON dicts, following ``continue`` pages, with the list's
    resourceVersion (where a watch picks up). Raw (``_preload_content=False``): the client's model
    objects cost more than the whole poll."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": PAGE_SIZE, "_preload_content": False}
        if token:
            kwargs["_continue"] = token
        response: Any = list_call(**kwargs)  # raw: urllib3 response
        body = json.loads(response.data)
        items.extend(body.get("items") or [])
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return items, str((body.get("metadata") or {}).get("resourceVersion") or "")


def list_pods_raw(api: client.ApiClient, field_selector: str | None = None) -> PodList:
    """Every pod in every namespace (or those ``field_selector`` keeps), with the list's resourceVersion."""
    call = client.CoreV1Api(api).list_pod_for_all_namespaces
    if field_selector:
        return PodList(*_list_raw(functools.partial(call, field_selector=field_selector)))
    return PodList(*_list_raw(call))


def list_nodes_raw(api: client.ApiClient) -> list[dict[str, Any]]:
    return _list_raw(client.CoreV1Api(api).list_node)[0]


@dataclass
class WatchOutcome:
    events: list[tuple[str, dict[str, Any], datetime]]
    expired: bool = False  # the resourceVersion was compacted away: the next run relists


def watch_pods(api: client.ApiClient, resource_version: str, seconds: float) -> WatchOutcome:
    """Pod events after ``resource_version`` for about ``seconds``, each stamped when seen."""
    out = WatchOutcome([])
    if seconds <= 0:
        return out
    core = client.CoreV1Api(api)
    w = watch.Watch()
    deadline = time.monotonic() + seconds
    rv = resource_version
    try:
        while time.monotonic() < deadline:
            remaining = max(1, int(deadline - time.monotonic()))
            for ev in w.stream(core.list_pod_for_all_namespaces, resource_version=rv, timeout_seconds=remaining,
                               _request_timeout=remaining + 5):
                kind = ev.get("type")
                raw = ev.get("raw_object") or {}
                if kind == "ERROR":
                    out.expired = (raw.get("code") == 410)
                    return out
                if kind in ("ADDED", "MODIFIED", "DELETED") and isinstance(raw, dict):
                    out.events.append((kind, raw, datetime.now(UTC)))
                    rv = str((raw.get("metadata") or {}).get("resourceVersion") or rv)
                if time.monotonic() >= deadline:
                    w.stop()
                    break
    except ApiException as err:
        if err.status == 410:
            out.expired = True
            return out
        raise
    return out
