"""The real Kubernetes control plane the simulator runs tests, benchmarks and the demo against.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the Kueue manager, built from
the Go module proxy at the versions in ``versions.env`` (``build.py``), started on loopback with
TLS, RBAC and admission webhooks (``cluster.py``), with fake nodes that are ordinary API objects
kept alive by a small node agent (``nodes.py``). See ``docs/controlplane.md``.

The public surface:

- :func:`build` -> :class:`Binaries` (cached; ``Binaries.cache_hit`` says whether it built)
- :func:`up` -> :class:`ControlPlane`, :func:`down`, :func:`status`, :func:`kubeconfig_path`
- :meth:`ControlPlane.register_nodes`, :func:`nodes_from_spec`, :meth:`ControlPlane.kubectl`,
  :meth:`ControlPlane.api`, :meth:`ControlPlane.kube_client`, :meth:`ControlPlane.client_config`
- :func:`wait_for_default_service_account`
"""

from simulator.controlplane.build import Binaries, BuildError, Versions, build, cache_root, cached
from simulator.controlplane.cluster import (
    ControlPlane,
    ControlPlaneError,
    down,
    kubeconfig_path,
    kueue_webhook_configurations,
    status,
    up,
    wait_for_default_service_account,
)
from simulator.controlplane.nodes import RUN_SECONDS_ANNOTATION, NodeAgent, nodes_from_spec, register_nodes

__all__ = [
    "RUN_SECONDS_ANNOTATION",
    "Binaries",
    "BuildError",
    "ControlPlane",
    "ControlPlaneError",
    "NodeAgent",
    "Versions",
    "build",
    "cache_root",
    "cached",
    "down",
    "kubeconfig_path",
    "kueue_webhook_configurations",
    "nodes_from_spec",
    "register_nodes",
    "status",
    "up",
    "wait_for_default_service_account",
]
