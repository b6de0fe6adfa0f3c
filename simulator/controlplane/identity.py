"""Run a controller on the plane as the ServiceAccount ``deploy/`` gives it, bound only by ``deploy/``'s RBAC.

A test that wants to prove least privilege installs the RBAC objects the shipped manifests
declare (Namespaces, ServiceAccounts, ClusterRoles, Roles and their bindings, nothing else) and
then runs the controller with :func:`service_account_kubeconfig`: a kubeconfig holding a token
the API server itself issued for that ServiceAccount (the TokenRequest API, as kubelet does for a
pod's projected token). The controller authenticates exactly as it would in its pod; whatever it
does that ``deploy/`` does not allow is refused with 403.

(A client certificate cannot stand in: a ServiceAccount's user name,
``system:serviceaccount:<namespace>:<name>``, is longer than the 64 characters X.509 allows a
common name for ``gpufabric-topology-webhook``.)
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from simulator.controlplane.api import APPLY_PATCH, Api
from simulator.controlplane.cluster import ControlPlane, write_kubeconfig

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "deploy"
# kind -> (API path prefix, plural, namespaced)
RBAC_KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
}
FIELD_MANAGER = "gpufabric-deploy"
TOKEN_SECONDS = 6 * 3600  # long enough for a test session or a demo; the server may shorten it


def manifest_documents(deploy_dir: Path = DEPLOY_DIR) -> list[dict[str, Any]]:
    """Every document of every ``*.yaml`` under ``deploy_dir``, in file order."""
    docs: list[dict[str, Any]] = []
    for path in sorted(deploy_dir.rglob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def rbac_documents(docs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The identity and authorization objects among ``docs`` (Namespaces first)."""
    chosen = [d for d in docs if d.get("kind") in RBAC_KINDS]
    return sorted(chosen, key=lambda d: d["kind"] != "Namespace")


def object_path(doc: dict[str, Any]) -> str:
    prefix, plural, namespaced = RBAC_KINDS[doc["kind"]]
    meta = doc["metadata"]
    where = f"/namespaces/{meta['namespace']}" if namespaced else ""
    return f"{prefix}{where}/{plural}/{meta['name']}"


def install_rbac(plane: ControlPlane, deploy_dir: Path = DEPLOY_DIR) -> list[str]:
    """Server-side apply ``deploy/``'s Namespaces, ServiceAccounts, roles and bindings (as the
    admin; idempotent). Returns ``kind/name`` of each."""
    api: Api = plane.api()
    try:
        applied = []
        for doc in rbac_documents(manifest_documents(deploy_dir)):
            api.patch(object_path(doc), doc, APPLY_PATCH, fieldManager=FIELD_MANAGER, force="true")
            applied.append(f"{doc['kind']}/{doc['metadata']['name']}")
        return applied
    finally:
        api.close()


def service_account_user(namespace: str, name: str) -> str:
    """The user name the API server gives a ServiceAccount's token (what RBAC and 403s name)."""
    return f"system:serviceaccount:{namespace}:{name}"


def service_account_token(
    plane: ControlPlane, name: str, namespace: str = "gpufabric-system", seconds: int = TOKEN_SECONDS
) -> str:
    """A token for ServiceAccount ``namespace/name``, issued by the API server (TokenRequest)."""
    api: Api = plane.api()
    try:
        answer = api.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        })  # fmt: skip
    finally:
        api.close()
    return str(answer["status"]["token"])


def service_account_kubeconfig(plane: ControlPlane, name: str, namespace: str = "gpufabric-system") -> Path:
    """A kubeconfig that authenticates as ServiceAccount ``namespace/name`` with a token the API
    server issued (see the module doc); written beside the plane's other kubeconfigs, mode 600."""
    token = service_account_token(plane, name, namespace)
    user = f"{namespace}.{name}"
    path = plane.workdir / "kubeconfigs" / f"sa-{user}.kubeconfig"
    return write_kubeconfig(path, plane.server, user=user, credentials={"token": token}, ca=plane.ca_file)
