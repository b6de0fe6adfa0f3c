"""Least privilege, proven on the real API server: ``deploy/``'s identities and RBAC.

Each controller's whole job already runs in its own test as the ServiceAccount ``deploy/`` gives
it, bound only by ``deploy/``'s RBAC (``simulator.controlplane.identity``): the topology webhook
and the reaper in ``test_controllers_processes.py``, the budget reconciler in
``test_budget_reconciler_entry.py``, publishing in ``test_publish_cli.py``, burst admission in
``test_burst_admission.py``, pod snapshots in
``test_pod_snapshots_kube.py``. Here: the other half, one action outside each role is refused
with 403 while the role's own reads pass; and every manifest in ``deploy/`` passes a server-side
dry run with strict field validation (cert-manager's CRDs installed for the Certificates and
Issuer, as an operator's cluster has them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from connectors.kube import ClusterTarget, api_client
from simulator.controlplane.build import cert_manager_crds
from simulator.controlplane.identity import (
    DEPLOY_DIR,
    install_rbac,
    manifest_documents,
    service_account_kubeconfig,
    service_account_user,
)

pytestmark = pytest.mark.integration

KUEUE = ("kueue.x-k8s.io", "v1beta2")
Call = Callable[[client.ApiClient], Any]


def _core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


# (ServiceAccount, what its role lets it read, one thing its role does not allow)
ROLES: list[tuple[str, tuple[str, Call], tuple[str, Call]]] = [
    ("gpufabric-topology-webhook",
     ("list nodes", lambda a: _core(a).list_node(limit=1)),
     ("list pods", lambda a: _core(a).list_pod_for_all_namespaces(limit=1))),
    ("gpufabric-reaper",
     ("list Leases", lambda a: client.CoordinationV1Api(a).list_lease_for_all_namespaces(limit=1)),
     ("patch a node", lambda a: _core(a).patch_node("any-node", {"metadata": {"labels": {"x": "y"}}}))),
    ("gpufabric-budget",
     ("list pods", lambda a: _core(a).list_pod_for_all_namespaces(limit=1)),
     ("create a pod", lambda a: _core(a).create_namespaced_pod("default", {
         "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sneaky"},
         "spec": {"containers": [{"name": "c", "image": "x"}]}}))),
    ("gpufabric-pipeline",
     ("list ClusterQueues", lambda a: client.CustomObjectsApi(a).list_cluster_custom_object(*KUEUE, "clusterqueues")),
     ("read Secrets", lambda a: _core(a).list_namespaced_secret("gpufabric-system"))),
    ("gpufabric-burst-admission",
     ("list nodes", lambda a: _core(a).list_node(limit=1)),
     ("delete a pod", lambda a: _core(a).delete_namespaced_pod("any-pod", "default"))),
]  # fmt: skip


@pytest.fixture(scope="module")
def deployed(control_plane: Any) -> Any:
    install_rbac(control_plane)
    return control_plane


@pytest.fixture
def as_account(deployed: Any) -> Iterator[Callable[[str], client.ApiClient]]:
    opened: list[client.ApiClient] = []

    def open_as(name: str) -> client.ApiClient:
        api = api_client(ClusterTarget(kubeconfig=service_account_kubeconfig(deployed, name)))
        opened.append(api)
        return api

    yield open_as
    for api in opened:
        api.close()


@pytest.mark.parametrize(("account", "allowed", "refused"), ROLES, ids=[r[0] for r in ROLES])
def test_each_role_reads_what_it_needs_and_is_refused_the_rest(
    as_account: Callable[[str], client.ApiClient], account: str, allowed: tuple[str, Call], refused: tuple[str, Call]
) -> None:
    api = as_account(account)
    allowed[1](api)  # raises ApiException(403) if the role lacked it
    with pytest.raises(ApiException) as caught:
        refused[1](api)
    assert caught.value.status == 403, (refused[0], caught.value.body)
    user = service_account_user("gpufabric-system", account)
    status = json.loads(caught.value.body)
    assert status["reason"] == "Forbidden" and f'User "{user}" cannot' in status["message"], status


def test_every_role_in_deploy_is_exercised_here() -> None:
    accounts = {d["metadata"]["name"] for d in manifest_documents() if d["kind"] == "ServiceAccount"}
    assert accounts == {r[0] for r in ROLES}


def test_every_manifest_passes_server_side_dry_run(deployed: Any, tmp_path: Path) -> None:
    crds = cert_manager_crds()
    deployed.kubectl("apply", "--server-side", "--field-manager", "gpufabric-test", "-f", str(crds))
    deployed.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "-f", str(crds))
    files = sorted(DEPLOY_DIR.rglob("*.yaml"))
    args = [a for f in files for a in ("-f", str(f))]
    proc = deployed.kubectl("apply", "--server-side", "--dry-run=server", "--validate=strict",
                            "--field-manager", "gpufabric-test", "-o", "yaml", *args, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    answered = yaml.safe_load(proc.stdout)
    items = answered["items"] if answered.get("kind") == "List" else [answered]
    sent = manifest_documents()
    assert sorted((i["kind"], i["metadata"]["name"]) for i in items) == sorted(
        (d["kind"], d["metadata"]["name"]) for d in sent
    )
    # The server defaulted what it would store (a dry run shows it): a Deployment got a strategy.
    deployments = [i for i in items if i["kind"] == "Deployment"]
    assert deployments and all(i["spec"].get("strategy", {}).get("type") for i in deployments)


def test_a_manifest_the_server_refuses_fails_the_dry_run(deployed: Any, tmp_path: Path) -> None:
    roles = [d for d in manifest_documents() if d["kind"] == "ClusterRole"]
    (role,) = [d for d in roles if d["metadata"]["name"] == "gpufabric-reaper"]
    broken = {**role, "metadata": {"name": "gpufabric-broken"}, "rules": [{"apiGroups": [""], "resources": ["pods"],
                                                                           "verb": ["get"]}]}  # fmt: skip
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken))
    proc = deployed.kubectl("apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", str(path),
                            check=False)  # fmt: skip
    assert proc.returncode != 0 and ".rules[0].verb: field not declared in schema" in proc.stderr, proc.stderr
