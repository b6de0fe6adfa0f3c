"""Scale-out, proven on the real API server: dagster-k8s's ``K8sRunLauncher``, configured as
``deploy/helm/values.yml`` configures it, creates one Kubernetes Job per partition run, with our
image, the ``gpufabric-pipeline`` ServiceAccount, the run resources and the env from Secrets.

The chart is not installed here; its two templates that matter are reproduced from our values:
the run launcher section of ``dagster.yaml`` (``helm/dagster/templates/helpers/instance/
_run-launcher.tpl``) and the container context the code server hands every run when
``includeConfigInLaunchedRuns`` is on (``dagsterUserDeployments.k8sContainerContext`` in the
user-deployments subchart). The plane's fake nodes never run the pods: the Job spec is the test.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster._core.code_pointer import ModuleCodePointer
from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
from dagster._core.test_utils import create_run_for_test
from kubernetes import client

from connectors.kube import ClusterTarget, api_client
from simulator.controlplane.identity import install_rbac

pytestmark = pytest.mark.integration

VALUES = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "values.yml"
RELEASE = "dagster"  # `helm upgrade --install dagster dagster/dagster` (docs/deploy.md)
NAMESPACE = "gpufabric-system"


def launcher_section(values: dict[str, Any], kubeconfig: Path) -> dict[str, Any]:
    """``run_launcher`` of the chart's dagster.yaml for our values, pointed at a kubeconfig
    instead of the in-cluster config (the daemon's pod would use that)."""
    k8s = values["runLauncher"]["config"]["k8sRunLauncher"]
    run_k8s = k8s.get("runK8sConfig") or {}
    config: dict[str, Any] = {
        "load_incluster_config": False,
        "kubeconfig_file": str(kubeconfig),
        "job_namespace": k8s["jobNamespace"],
        "image_pull_policy": k8s["imagePullPolicy"],
        "service_account_name": RELEASE,  # the chart's own account; our values override it per run
        "dagster_home": "/opt/dagster/dagster_home",
        "instance_config_map": f"{RELEASE}-instance",
        "postgres_password_secret": values["global"]["postgresqlSecretName"],
        "run_k8s_config": {
            "container_config": run_k8s.get("containerConfig") or {},
            "pod_spec_config": run_k8s.get("podSpecConfig") or {},
        },
    }
    for key, name in (("envSecrets", "env_secrets"), ("envConfigMaps", "env_config_maps")):
        if k8s.get(key):
            config[name] = [item["name"] for item in k8s[key]]
    for key, name in (("envVars", "env_vars"), ("volumes", "volumes"), ("volumeMounts", "volume_mounts"),
                      ("labels", "labels"), ("resources", "resources")):  # fmt: skip
        if k8s.get(key):
            config[name] = k8s[key]
    if k8s.get("failPodOnRunFailure"):
        config["fail_pod_on_run_failure"] = True
    return {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": config}


def code_location_context(values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(image, container context) the code server of our one user deployment gives its runs."""
    deployment = values["dagster-user-deployments"]["deployments"][0]
    assert deployment["includeConfigInLaunchedRuns"]["enabled"]
    image = f"{deployment['image']['repository']}:{deployment['image']['tag']}"
    k8s: dict[str, Any] = {
        "image_pull_policy": deployment["image"]["pullPolicy"],
        "env_config_maps": [f"{RELEASE}-{deployment['name']}-user-env"],
        "env_secrets": [s["name"] for s in deployment.get("envSecrets", [])],
        "volume_mounts": deployment.get("volumeMounts", []),
        "volumes": deployment.get("volumes", []),
        "namespace": NAMESPACE,
        # dagsterUserDeployments.serviceAccountName: global, else serviceAccount.name, else the chart's
        "service_account_name": (values["dagster-user-deployments"].get("serviceAccount") or {}).get("name")
        or f"{RELEASE}-dagster-user-deployments-user-deployments",
        "env": deployment.get("env", []),
        "run_k8s_config": {"pod_spec_config": {"automount_service_account_token": True}},
    }
    if deployment.get("resources"):
        k8s["resources"] = deployment["resources"]
    return image, {"k8s": k8s}


@pytest.fixture
def launcher_instance(kube_cluster: Any, tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    install_rbac(kube_cluster)  # namespace gpufabric-system and the gpufabric-pipeline account
    values = yaml.safe_load(VALUES.read_text())
    # K8sRunLauncher loads the kubeconfig into the client's process-wide default configuration.
    saved = client.Configuration.get_default_copy()
    try:
        with dg.instance_for_test(
            overrides={"run_launcher": launcher_section(values, kube_cluster.kubeconfig)}, temp_dir=str(tmp_path)
        ) as instance:
            yield instance
    finally:
        client.Configuration.set_default(saved)


def test_one_job_per_partition_run_with_our_image_account_resources_and_secrets(
    launcher_instance: dg.DagsterInstance, kube_cluster: Any
) -> None:
    values = yaml.safe_load(VALUES.read_text())
    image, context = code_location_context(values)
    origin = RepositoryPythonOrigin(
        executable_path=sys.executable,
        code_pointer=ModuleCodePointer("pipelines.definitions", "defs", working_directory=None),
        container_image=image,
        container_context=context,
    )
    runs = [
        create_run_for_test(
            launcher_instance,
            job_name="lldp_discovery",
            tags={"dagster/partition": key, "dagster/partition_set": "switch_groups"},
            job_code_origin=JobPythonOrigin("lldp_discovery", origin),
        )
        for key in ("group-000", "group-001")
    ]
    batch = client.BatchV1Api(api_client(ClusterTarget(kubeconfig=kube_cluster.kubeconfig)))
    try:
        for run in runs:
            launcher_instance.launch_run(run.run_id, workspace=None)  # type: ignore[arg-type]
        jobs = {
            job.metadata.labels["dagster/run-id"]: job
            for job in batch.list_namespaced_job(NAMESPACE, label_selector="dagster/job=lldp_discovery").items
            if job.metadata.labels.get("dagster/run-id") in {r.run_id for r in runs}
        }
        assert set(jobs) == {r.run_id for r in runs}  # one Job per partition run, no more
        for run in runs:
            pod = jobs[run.run_id].spec.template.spec
            [container] = pod.containers
            assert container.image == image
            assert pod.service_account_name == "gpufabric-pipeline"
            assert container.resources.requests == {"cpu": "1", "memory": "2Gi"}
            assert container.resources.limits == {"memory": "4Gi"}
            assert {"gpufabric-pipeline-env"} <= {e.secret_ref.name for e in container.env_from if e.secret_ref}
            env = {e.name: e.value for e in container.env}
            assert env["GPUFABRIC_CONFIG"] == "/etc/gpufabric/gpufabric.yaml"
            assert {v.name for v in pod.volumes} >= {"site", "credentials"}
            assert jobs[run.run_id].metadata.labels["app.kubernetes.io/part-of"] == "gpufabric"
            assert run.run_id in " ".join(container.args)  # the pod executes this run and no other
    finally:
        for run in runs:
            batch.delete_collection_namespaced_job(
                NAMESPACE, label_selector=f"dagster/run-id={run.run_id}", propagation_policy="Background"
            )
