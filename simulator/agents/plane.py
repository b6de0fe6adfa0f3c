"""Agent workloads on the real control plane (``simulator.controlplane``): what the orphan and
budget tests and ``bench_orphans`` share.

A session shares one plane, so a test's fake nodes get names of its own (``gpu_nodes``,
``spec_nodes``), its pods live in namespaces of its own (``namespaces``), and a test that reads
the whole cluster (the reaper, the pod-snapshot asset) first waits until the pods earlier tests
left are gone (``wait_for_no_foreign_pods``): their namespaces are being deleted by the reset.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from simulator.controlplane import ControlPlane, nodes_from_spec, wait_for_default_service_account
from simulator.controlplane.reset import unique_namespace


def wait_until(what: str, check: Callable[[], bool], timeout_s: float = 120.0, interval_s: float = 0.1) -> None:
    """Poll ``check`` until it holds; the timeout only guards against a hang (TimeoutError)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


def gpu_nodes(
    prefix: str, count: int, *, gpus: int = 8, labels: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """``count`` fake GPU nodes ``<prefix>-000``... with ``gpus`` ``nvidia.com/gpu`` each."""
    return [
        {"name": f"{prefix}-{i:03d}", "labels": dict(labels or {}), "capacity": {"nvidia.com/gpu": str(gpus)}}
        for i in range(count)
    ]


def spec_nodes(spec: str, prefix: str) -> list[dict[str, Any]]:
    """The Node objects of a shipped spec (``h100-1su``), renamed ``<prefix>-<host>`` so they are
    this caller's own; labels and capacity as the spec's hosts have them."""
    renamed = []
    for node in nodes_from_spec(spec):
        name = f"{prefix}-{node['metadata']['name']}"
        labels = {**(node["metadata"].get("labels") or {}), "kubernetes.io/hostname": name}
        renamed.append({**node, "metadata": {**node["metadata"], "name": name, "labels": labels}})
    return renamed


def namespaces(plane: ControlPlane, count: int, prefix: str = "agents") -> list[str]:
    """``count`` fresh namespaces (deleted at the next reset) whose default ServiceAccount exists."""
    names = [unique_namespace(plane, prefix) for _ in range(count)]
    for name in names:
        wait_for_default_service_account(plane, name)
    return names


def delete_pods_now(plane: ControlPlane, names: Iterable[str]) -> None:
    """Remove every pod of these namespaces at once (one delete-collection each, grace period 0),
    so the next test's reset does not wait for the namespace controller to delete hundreds of
    running pods gracefully, one by one."""
    api = plane.api()
    try:
        for namespace in names:
            api.delete(f"/api/v1/namespaces/{namespace}/pods", gracePeriodSeconds=0)
    finally:
        api.close()


def wait_for_no_foreign_pods(plane: ControlPlane, mine: Iterable[str], timeout_s: float = 300.0) -> None:
    """Wait until every pod of the cluster is in one of the namespaces ``mine`` (the namespaces
    earlier tests used are being deleted: a test that reads the whole cluster must not see them)."""
    keep = set(mine)
    api = plane.api()
    left: list[str] = []

    def quiet() -> bool:
        items, _ = api.list_all("/api/v1/pods")
        left[:] = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in items
                   if p["metadata"]["namespace"] not in keep]  # fmt: skip
        return not left

    try:
        wait_until("the pods of earlier tests to be deleted", quiet, timeout_s, 0.2)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; still there: {', '.join(left[:5])}") from None
    finally:
        api.close()


class ReplaceBefore:
    """Makes the race a UID precondition exists for: wraps an ``ApiClient`` so that right before
    it sends its first ``method`` (DELETE, or PATCH) of pod ``namespace/name``, that pod is deleted
    and a new one created under the same name and labels (through ``other``, a second client). The
    controller decided on the old pod; the API server must refuse the request (a delete's uid
    precondition: 409 Conflict) and keep the new pod.

    ``wrap(api)`` returns ``api`` with its REST client's ``request`` patched (kubernetes 36 and 37
    both send every call through it, with the method and URL first); ``new_uid`` is set once the
    replacement happened."""

    def __init__(self, other: Any, namespace: str, name: str, method: str = "DELETE") -> None:
        self.other, self.namespace, self.name, self.method = other, namespace, name, method
        self.old_uid = ""
        self.new_uid = ""

    def wrap(self, api: Any) -> Any:
        send = api.rest_client.request
        path = f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

        def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if method == self.method and url.split("?")[0].endswith(path) and not self.new_uid:
                self._replace()
            return send(method, url, *args, **kwargs)

        api.rest_client.request = request
        return api

    def _replace(self) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.other)
        raw: Any = core.read_namespaced_pod(self.name, self.namespace, _preload_content=False)
        old = json.loads(raw.data)
        self.old_uid = str(old["metadata"]["uid"])
        core.delete_namespaced_pod(self.name, self.namespace, grace_period_seconds=0)
        wait_until(f"pod {self.namespace}/{self.name} to be gone", lambda: not core.list_namespaced_pod(
            self.namespace, field_selector=f"metadata.name={self.name}").items, 30.0, 0.05)
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.name, "labels": old["metadata"].get("labels") or {},
                             "annotations": old["metadata"].get("annotations") or {}},
                # what the caller wrote, not what admission added (the ServiceAccount token volume)
                "spec": {"containers": [{k: c[k] for k in ("name", "image", "resources") if k in c}
                                        for c in old["spec"]["containers"]],
                         "restartPolicy": "Never"}}  # fmt: skip
        created: Any = core.create_namespaced_pod(self.namespace, body, _preload_content=False)
        self.new_uid = str(json.loads(created.data)["metadata"]["uid"])
