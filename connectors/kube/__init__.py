"""Kubernetes connector: the official client, configured from a ``KubernetesSource``, kept thin."""

from connectors.kube.client import (
    FIELD_MANAGER,
    ClusterTarget,
    KubernetesSourceLike,
    api_client,
    apply,
    list_nodes,
    list_pods,
    object_path,
)

__all__ = [
    "FIELD_MANAGER", "ClusterTarget", "KubernetesSourceLike", "api_client", "apply", "list_nodes", "list_pods",
    "object_path",
]  # fmt: skip
