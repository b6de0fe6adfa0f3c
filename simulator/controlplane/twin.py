"""The Kubernetes twin of ``gpufabric sim up``: the real control plane, with one Node per host.

``start(truth, workdir)`` starts the control plane in ``workdir`` (``<data dir>/sim/controlplane``)
or reuses the one running there, makes its Nodes exactly the spec's hosts, creates the namespaces
of the simulated site's teams (their LocalQueues are published there), and returns the
:class:`~simulator.twin.TwinRun` whose sources name the admin kubeconfig: ``sources.kubernetes``
(cluster ``sim``) and the ``nvlink`` source that reads GPU Feature Discovery's clique labels.

One plane serves every spec a data directory simulates, because starting one costs seconds and
building one costs half an hour. It is not tied to a spec: when ``sim up`` switches specs on a
running plane, every simulated Node that does not belong to the new spec is deleted, including
nodes of the same name (``dgx001`` of ``h100-4su`` is not ``dgx001`` of ``h100-1su``: its
``spec.providerID``, ``gpufabric-sim://<spec>/<host>``, says which cluster it belongs to and
cannot be changed). Otherwise the labels we published for the old spec would still sit on those
nodes under our field manager, and the first publish of the new spec would count each of them as
a relabel and trip the blast-radius guard. Nodes that are not simulated ones (no
``gpufabric-sim://`` providerID: registered by hand) are left alone.

The plane's processes are not the run's ``pids``: ``simulator.up.sim_down`` stops them through
:func:`simulator.controlplane.down` (API server before etcd, with a grace period), not with the
two-second stop the Python twins get.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simulator.controlplane.api import Api, ApiError
from simulator.controlplane.build import Binaries
from simulator.controlplane.cluster import ControlPlane, up
from simulator.generator import GroundTruth
from simulator.kube.populate import node_objects
from simulator.twin import TwinRun

PROVIDER_PREFIX = "gpufabric-sim://"
CLUSTER_NAME = "sim"  # the sources.kubernetes name the site file gives the plane


def start(
    truth: GroundTruth,
    workdir: Path,
    *,
    progress: Callable[[str], None] | None = None,
    binaries: Binaries | None = None,
    namespaces: Sequence[str] = (),
) -> TwinRun:
    """Start (or reuse) the control plane in ``workdir``, make its Nodes the truth's hosts and
    create ``namespaces`` (the simulated teams')."""
    plane = up(workdir, progress=progress, binaries=binaries)
    nodes = node_objects(truth)
    removed = replace_foreign_nodes(plane, nodes)
    plane.register_nodes(nodes)
    ensure_namespaces(plane, namespaces)
    note = "reused" if plane.reused else "started"
    if removed:
        note += f", {removed} nodes of another spec removed"
    return TwinRun(
        name="kubernetes",
        sources={
            "kubernetes": [{"name": CLUSTER_NAME, "kubeconfig": str(plane.kubeconfig)}],
            # NVLink domains come from the GFD clique labels of the registered nodes.
            "nvlink": [{"name": "sim-gfd", "kind": "kubernetes", "cluster": CLUSTER_NAME}],
        },
        summary=f"Kubernetes {plane.kubernetes_version} at {plane.server} ({len(nodes)} nodes; {note})",
        extra={
            "server": plane.server,
            "kubeconfig": str(plane.kubeconfig),
            "kubectl": str(plane.kubectl_path),
            "workdir": str(plane.workdir),
            "kubernetes_version": plane.kubernetes_version,
            "kueue_version": plane.kueue_version,
            "reused": plane.reused,
            "nodes_removed": removed,
        },
    )


def replace_foreign_nodes(plane: ControlPlane, nodes: list[dict[str, Any]], timeout: float = 60.0) -> int:
    """Delete every simulated Node whose providerID is not one of ``nodes``'; returns how many.

    Waits until they are gone, so registering a node of the same name afterwards creates a new
    object (no managed fields, no labels of the old spec) rather than meeting the old one.
    """
    wanted = {str(n["metadata"]["name"]): str((n.get("spec") or {}).get("providerID", "")) for n in nodes}
    api = plane.api()
    try:
        existing, _ = api.list_all("/api/v1/nodes")
        doomed: dict[str, str] = {}
        for node in existing:
            name = str(node["metadata"]["name"])
            provider = str((node.get("spec") or {}).get("providerID", ""))
            if provider.startswith(PROVIDER_PREFIX) and wanted.get(name) != provider:
                doomed[name] = str(node["metadata"]["uid"])
        for name, uid in doomed.items():
            # The UID precondition: delete the node we looked at, never a successor of that name.
            api.delete(f"/api/v1/nodes/{name}", {"preconditions": {"uid": uid}})
        _wait_gone(api, doomed, timeout)
    finally:
        api.close()
    return len(doomed)


def ensure_namespaces(plane: ControlPlane, names: Sequence[str]) -> None:
    """Create each namespace unless it exists."""
    api = plane.api()
    try:
        for name in names:
            try:
                api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
            except ApiError as exc:
                if exc.status != 409:
                    raise
    finally:
        api.close()


def _wait_gone(api: Api, doomed: dict[str, str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = dict(doomed)
    while pending:
        for name, uid in list(pending.items()):
            current = api.request("GET", f"/api/v1/nodes/{name}", ok=(404,))
            if not current or current["metadata"]["uid"] != uid:
                del pending[name]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes still present {timeout:.0f}s after deletion: {', '.join(sorted(pending))}")
        time.sleep(0.1)
