"""Empty a shared control plane between tests.

A test session shares one control plane (starting one takes 8-20 s), but Nodes, Kueue's
cluster-scoped objects and webhook configurations are cluster-wide: a test that publishes the
labels of ``h100-1su`` must not see the nodes another test registered. :func:`reset` deletes what
tests create at cluster scope and waits until it is gone, so each test starts from "a cluster with
no nodes and no queues". Namespaced objects need no reset: each test uses namespaces of its own
(:func:`unique_namespace`); old test namespaces are deleted without waiting.

Kueue puts finalizers on ClusterQueues, ResourceFlavors and Topologies while workloads use them;
a reset removes those finalizers (the workloads' namespaces go too), as an operator tearing down a
test cluster would.
"""

from __future__ import annotations

import time
import uuid

from simulator.controlplane.api import MERGE_PATCH, Api, ApiError
from simulator.controlplane.cluster import ControlPlane, ControlPlaneError

# Cluster-scoped collections tests create, in deletion order (queues before the flavors they use).
KUEUE_GROUP = "/apis/kueue.x-k8s.io/v1beta2"
CLUSTER_COLLECTIONS = (
    f"{KUEUE_GROUP}/clusterqueues",
    f"{KUEUE_GROUP}/cohorts",
    f"{KUEUE_GROUP}/resourceflavors",
    f"{KUEUE_GROUP}/topologies",
    f"{KUEUE_GROUP}/workloadpriorityclasses",
    f"{KUEUE_GROUP}/admissionchecks",
    "/api/v1/nodes",
)
WEBHOOK_COLLECTIONS = (
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
)
# What the plane itself installs and a reset must keep.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease", "kueue-system",
                               "gpufabric-system"})  # deploy/'s identities (identity.py) stay
TEST_NAMESPACE_LABEL = "gpufabric.io/test-namespace"


def unique_namespace(plane: ControlPlane, prefix: str = "t") -> str:
    """Create a namespace no other test uses, labelled so a later :func:`reset` deletes it."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    api = plane.api()
    try:
        api.post("/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {TEST_NAMESPACE_LABEL: "true"}},
        })
    finally:
        api.close()
    return name


def reset(plane: ControlPlane, *, timeout: float = 60.0, wait_namespaces: bool = False) -> list[str]:
    """Delete every Node, Kueue cluster object and non-Kueue webhook configuration, and start
    deleting every non-system namespace; wait for the cluster-scoped objects to be gone, and with
    ``wait_namespaces`` for the namespaces too (a test that counts namespaced objects cluster-wide,
    or re-creates a namespace of the same name, needs that; the namespace controller takes seconds).

    Returns what was deleted (``collection/name``), for a test's diagnostics.
    """
    api = plane.api()
    try:
        deleted = _delete_namespaces(api)
        for collection in WEBHOOK_COLLECTIONS:
            items, _ = api.list_all(collection)
            for item in items:
                name = item["metadata"]["name"]
                if not name.startswith("kueue-"):
                    api.delete(f"{collection}/{name}")
                    deleted.append(f"{collection.rsplit('/', 1)[1]}/{name}")
        for collection in CLUSTER_COLLECTIONS:
            items, _ = api.list_all(collection)
            for item in items:
                name = item["metadata"]["name"]
                api.delete(f"{collection}/{name}")
                deleted.append(f"{collection.rsplit('/', 1)[1]}/{name}")
        for collection in CLUSTER_COLLECTIONS:
            _wait_until_empty(api, collection, timeout)
        if wait_namespaces:
            _wait_for_namespaces(api, timeout)
        return deleted
    finally:
        api.close()


def _delete_namespaces(api: Api) -> list[str]:
    items, _ = api.list_all("/api/v1/namespaces")
    deleted = []
    for ns in items:
        name = ns["metadata"]["name"]
        if name in SYSTEM_NAMESPACES or ns.get("status", {}).get("phase") == "Terminating":
            continue
        api.delete(f"/api/v1/namespaces/{name}")
        deleted.append(f"namespaces/{name}")
    return deleted


def _wait_for_namespaces(api: Api, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        items, _ = api.list_all("/api/v1/namespaces")
        left = [ns["metadata"]["name"] for ns in items if ns["metadata"]["name"] not in SYSTEM_NAMESPACES]
        if not left:
            return
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"reset: namespaces still terminating after {timeout:.0f} s: {', '.join(left[:5])}")
        time.sleep(0.2)


def _wait_until_empty(api: Api, collection: str, timeout: float) -> None:
    """Wait for a collection to empty, removing finalizers from what lingers (Kueue's in-use
    finalizers outlive a reset otherwise: the workloads that hold them are being deleted too)."""
    deadline = time.monotonic() + timeout
    while True:
        items, _ = api.list_all(collection)
        if not items:
            return
        for item in items:
            if item["metadata"].get("finalizers"):
                _clear_finalizers(api, f"{collection}/{item['metadata']['name']}")
        if time.monotonic() > deadline:
            left = ", ".join(i["metadata"]["name"] for i in items[:5])
            raise ControlPlaneError(
                f"reset: {collection} still holds {len(items)} object(s) after {timeout:.0f} s: {left}")
        time.sleep(0.2)


def _clear_finalizers(api: Api, path: str) -> None:
    try:
        api.patch(path, {"metadata": {"finalizers": None}}, MERGE_PATCH)
    except ApiError as exc:
        if exc.status not in (404, 409):  # gone meanwhile, or changed meanwhile: the next round retries
            raise

