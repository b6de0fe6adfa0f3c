"""The real control plane: pinned, cached binaries; etcd + kube-apiserver + controller-manager +
scheduler + Kueue on loopback; fake nodes kept alive by the node agent.

Everything here talks to the real binaries built from the Go module proxy (``simulator.controlplane``);
nothing is mocked. The session's one control plane is ``control_plane`` in ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.controlplane import (
    RUN_SECONDS_ANNOTATION,
    Binaries,
    ControlPlane,
    ControlPlaneError,
    Versions,
    build,
    cached,
    down,
    status,
    up,
    wait_for_default_service_account,
)

ROOT = Path(__file__).resolve().parents[2]

# Two 8-GPU nodes and one CPU-only node: enough to see the scheduler choose, and refuse.
NODES: list[dict[str, Any]] = [
    {
        "name": f"gpu-node-{i}",
        "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "capacity": {"cpu": "224", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"},
        "allocatable": {"cpu": "223500m", "memory": "2046Gi", "pods": "110", "nvidia.com/gpu": "8"},
    }
    for i in (1, 2)
] + [{"name": "cpu-node-1", "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"}}]


def wait_for(check: Callable[[], Any], what: str, timeout: float = 180.0, every: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` (a hang guard, not a timing test)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    pytest.fail(f"gave up waiting for {what}; last value: {last!r}")


@pytest.fixture(scope="session")
def binaries(kube_binaries: Binaries) -> Binaries:
    return kube_binaries


@pytest.fixture(scope="module")
def plane(control_plane: ControlPlane) -> ControlPlane:
    """The session's control plane, emptied of earlier tests' nodes and queues, with this file's
    nodes registered (its tests share them)."""
    from simulator.controlplane.reset import reset

    reset(control_plane)
    control_plane.register_nodes(NODES)
    return control_plane


def kubectl_json(plane: ControlPlane, *args: str) -> Any:
    return json.loads(plane.kubectl(*args, "-o", "json").stdout)


def apply(plane: ControlPlane, *objects: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
    return plane.kubectl(
        "apply",
        "--server-side",
        "--field-manager=controlplane-test",
        "-f",
        "-",
        input=yaml.safe_dump_all(objects),
        check=check,
    )


@pytest.fixture()
def namespace(plane: ControlPlane) -> Iterator[str]:
    name = f"cp-{uuid.uuid4().hex[:8]}"
    plane.kubectl("create", "namespace", name)
    wait_for_default_service_account(plane, name)
    yield name
    plane.kubectl("delete", "namespace", name, "--wait=false")


def gpu_pod(name: str, gpus: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.example/trainer:1",
                    "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ]
        },
    }


# --------------------------------------------------------------------------------------------- build


def test_build_is_cached_and_pins_every_binary(binaries: Binaries) -> None:
    versions = Versions.load()
    assert binaries.versions == versions
    again = build(versions)
    assert again.cache_hit, "a second build with the cache present must not build"
    assert again.root == binaries.root
    assert cached(versions) == again
    for path in (
        binaries.etcd,
        binaries.kube_apiserver,
        binaries.kube_controller_manager,
        binaries.kube_scheduler,
        binaries.kubectl,
        binaries.kueue,
    ):
        assert path.is_file() and os.access(path, os.X_OK), path
    manifest = json.loads((binaries.root / "manifest.json").read_text())
    assert manifest["versions"]["kubernetes"] == versions.kubernetes
    assert (binaries.kueue_crd_dir / "kueue.x-k8s.io_clusterqueues.yaml").is_file()
    assert "ValidatingWebhookConfiguration" in binaries.kueue_webhook_manifest.read_text()
    # The CLI finds the same entry without building.
    out = subprocess.run(
        [sys.executable, "-m", "simulator.controlplane", "build", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(binaries.bin_dir)


def test_binaries_report_pinned_versions(binaries: Binaries) -> None:
    versions = binaries.versions
    etcd = subprocess.run([str(binaries.etcd), "--version"], capture_output=True, text=True, check=True)
    assert versions.etcd.lstrip("v") in etcd.stdout
    kueue = subprocess.run([str(binaries.kueue), "--help"], capture_output=True, text=True)
    assert "-config" in kueue.stdout + kueue.stderr


# --------------------------------------------------------------------------------------------- cluster


def test_kubectl_version_names_the_pinned_server(plane: ControlPlane, binaries: Binaries) -> None:
    version = kubectl_json(plane, "version")
    assert version["serverVersion"]["gitVersion"] == binaries.versions.kubernetes
    assert version["clientVersion"]["gitVersion"] == binaries.versions.kubernetes
    # The same through the kubeconfig path the CLI prints.
    out = subprocess.run(
        [sys.executable, "-m", "simulator.controlplane", "kubeconfig", "--workdir", str(plane.workdir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(out.stdout.strip()) == plane.kubeconfig


def test_api_server_enforces_rbac_and_webhook_plugins(plane: ControlPlane) -> None:
    # A user with no bindings is authenticated (our CA) but forbidden by RBAC.
    nobody = plane.client_config("nobody@example.com")
    proc = subprocess.run(
        [str(plane.kubectl_path), "--kubeconfig", str(nobody), "get", "nodes"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert 'User "nobody@example.com" cannot list resource "nodes"' in proc.stderr
    # Kueue's webhooks are registered by URL on loopback with our CA bundle, and the API server calls them.
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        configs = [c for c in kubectl_json(plane, "get", kind)["items"] if c["metadata"]["name"].startswith("kueue-")]
        assert configs, kind
        hooks = [h for c in configs for h in c["webhooks"]]
        assert {h["clientConfig"]["url"].split("/", 3)[2] for h in hooks} == {plane.kueue_webhook_url.split("/")[2]}
        assert all("service" not in h["clientConfig"] and h["clientConfig"]["caBundle"] for h in hooks)
        groups = {g for h in hooks for rule in h["rules"] for g in rule["apiGroups"]}
        assert groups <= {"kueue.x-k8s.io", "batch", ""}, groups


def test_registered_nodes_are_listed_ready_with_fresh_leases(plane: ControlPlane) -> None:
    nodes = {n["metadata"]["name"]: n for n in kubectl_json(plane, "get", "nodes")["items"]}
    assert {n["name"] for n in NODES} <= set(nodes)  # the session's plane may hold other tests' nodes
    gpu = nodes["gpu-node-1"]
    assert gpu["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert gpu["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-node-1"
    ready = {c["type"]: c["status"] for c in gpu["status"]["conditions"]}
    assert ready["Ready"] == "True"

    def leases() -> dict[str, Any] | None:
        items = kubectl_json(plane, "get", "leases", "-n", "kube-node-lease")["items"]
        found = {lease["metadata"]["name"]: lease for lease in items}
        return found if set(found) >= set(nodes) else None

    by_name = wait_for(leases, "a Lease per node")
    assert by_name["gpu-node-1"]["spec"]["holderIdentity"] == "gpu-node-1"
    first = by_name["gpu-node-1"]["spec"]["renewTime"]
    # The agent keeps renewing: the lease's renewTime moves on.
    wait_for(
        lambda: (
            kubectl_json(plane, "get", "lease", "-n", "kube-node-lease", "gpu-node-1")["spec"]["renewTime"] != first
        ),
        "the node agent to renew gpu-node-1's Lease",
    )
    # The node-lifecycle controller sees a healthy node: no not-ready / unreachable taint (it may
    # put one on for the moment between the Node's creation and its first status).
    wait_for(
        lambda: (
            not [
                t
                for t in kubectl_json(plane, "get", "node", "gpu-node-1").get("spec", {}).get("taints") or []
                if t["key"].startswith("node.kubernetes.io/")
            ]
        ),
        "gpu-node-1 to carry no node.kubernetes.io/ taint",
    )


def test_gpu_pod_is_bound_by_the_scheduler_and_runs(plane: ControlPlane, namespace: str) -> None:
    apply(plane, {**gpu_pod("fits", 4), "metadata": {"name": "fits", "namespace": namespace}})
    pod = wait_for(
        lambda: (
            (p := kubectl_json(plane, "get", "pod", "-n", namespace, "fits"))["status"].get("phase") == "Running" and p
        ),
        "pod fits to run",
    )
    assert pod["spec"]["nodeName"] in {"gpu-node-1", "gpu-node-2"}
    conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conditions["PodScheduled"] == "True" and conditions["Ready"] == "True"
    assert pod["status"]["startTime"]
    assert pod["status"]["containerStatuses"][0]["state"]["running"]
    # Deleting it completes (the agent plays kubelet's final delete), it does not hang in Terminating.
    plane.kubectl("delete", "pod", "-n", namespace, "fits", "--wait=true", "--timeout=120s")


def test_pod_wanting_more_gpus_than_any_node_stays_pending(plane: ControlPlane, namespace: str) -> None:
    apply(plane, {**gpu_pod("too-big", 16), "metadata": {"name": "too-big", "namespace": namespace}})

    def failed_scheduling() -> list[dict[str, Any]]:
        events = kubectl_json(
            plane,
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            "involvedObject.name=too-big,reason=FailedScheduling",
        )
        return list(events["items"])

    events = wait_for(failed_scheduling, "a FailedScheduling event for too-big")
    assert "Insufficient nvidia.com/gpu" in events[0]["message"]
    pod = kubectl_json(plane, "get", "pod", "-n", namespace, "too-big")
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "False" and scheduled["reason"] == "Unschedulable"


def _kueue_objects(namespace: str, suffix: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": f"h100-{suffix}"},
            "spec": {"nodeLabels": {"nvidia.com/gpu.present": "true"}},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": f"cq-{suffix}"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": f"h100-{suffix}",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "400"},
                                    {"name": "memory", "nominalQuota": "4Ti"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "16"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": namespace},
            "spec": {"clusterQueue": f"cq-{suffix}"},
        },
    ]


def test_kueue_objects_accepted_and_invalid_clusterqueue_rejected(plane: ControlPlane, namespace: str) -> None:
    suffix = namespace
    apply(plane, *_kueue_objects(namespace, suffix))
    cq = wait_for(
        lambda: next(
            (
                c
                for c in kubectl_json(plane, "get", "clusterqueue", f"cq-{suffix}")
                .get("status", {})
                .get("conditions", [])
                if c["type"] == "Active" and c["status"] == "True"
            ),
            None,
        ),
        "the ClusterQueue to become Active (Kueue's controller saw it)",
    )
    assert cq["reason"] == "Ready"
    bad = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": f"bad-{suffix}"},
        "spec": {"queueingStrategy": "Whenever", "resourceGroups": []},
    }
    proc = apply(plane, bad, check=False)
    assert proc.returncode != 0
    # The CRD's openAPIV3Schema enum, enforced by the API server itself.
    assert 'spec.queueingStrategy: Unsupported value: "Whenever"' in proc.stderr
    assert '"BestEffortFIFO"' in proc.stderr and '"StrictFIFO"' in proc.stderr
    assert plane.kubectl("get", "clusterqueue", f"bad-{suffix}", check=False).returncode != 0
    # A rule of the CRD (x-kubernetes-validations, CEL): a flavor must list the covered resources.
    mismatched = _kueue_objects(namespace, suffix)[1]
    mismatched["metadata"]["name"] = f"mismatch-{suffix}"
    mismatched["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()
    proc = apply(plane, mismatched, check=False)
    assert proc.returncode != 0
    assert "flavors must have the same number of resources as the coveredResources" in proc.stderr


def test_suspended_job_in_local_queue_is_admitted_and_its_pods_run(plane: ControlPlane, namespace: str) -> None:
    suffix = namespace
    apply(plane, *_kueue_objects(namespace, suffix))
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {
            "suspend": True,
            "parallelism": 2,
            "completions": 2,
            "template": {
                "metadata": {"annotations": {RUN_SECONDS_ANNOTATION: "3"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "registry.example/trainer:1",
                            "resources": {
                                "requests": {"cpu": "1", "nvidia.com/gpu": "4"},
                                "limits": {"nvidia.com/gpu": "4"},
                            },
                        }
                    ],
                },
            },
        },
    }
    apply(plane, job)

    def admitted() -> dict[str, Any] | None:
        for wl in kubectl_json(plane, "get", "workloads", "-n", namespace)["items"]:
            conditions = {c["type"]: c["status"] for c in wl.get("status", {}).get("conditions", [])}
            if conditions.get("Admitted") == "True":
                return dict(wl)
        return None

    workload = wait_for(admitted, "Kueue to admit the Job's Workload")
    assert workload["status"]["admission"]["clusterQueue"] == f"cq-{suffix}"
    # Kueue's job controller lifts the Job's suspend after the Workload is admitted (a second
    # reconcile: under load the two are seconds apart).
    wait_for(lambda: kubectl_json(plane, "get", "job", "-n", namespace, "train")["spec"]["suspend"] is False,
             "Kueue to unsuspend the admitted Job")  # fmt: skip

    def running_pods() -> list[dict[str, Any]]:
        pods = kubectl_json(plane, "get", "pods", "-n", namespace, "-l", "batch.kubernetes.io/job-name=train")["items"]
        return [p for p in pods if p["status"].get("phase") in ("Running", "Succeeded")] if len(pods) >= 2 else []

    pods = wait_for(running_pods, "the Job's 2 pods to run")
    assert {p["spec"]["nodeName"] for p in pods} <= {"gpu-node-1", "gpu-node-2"}
    # Each pod ends after its run-seconds annotation; the Job completes and Kueue finishes the Workload.
    wait_for(
        lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in kubectl_json(plane, "get", "job", "-n", namespace, "train").get("status", {}).get("conditions", [])
        ),
        "the Job to complete",
    )


# --------------------------------------------------------------------------------------------- lifecycle


def test_up_reuses_and_down_stops_everything_even_unrecorded(binaries: Binaries, tmp_path: Path) -> None:
    workdir = tmp_path / "plane"
    first = up(workdir, binaries=binaries)
    assert not first.reused
    again = up(workdir, binaries=binaries)
    assert again.reused and again.server == first.server
    assert status(workdir) is not None
    pids = dict(first.pids)
    assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue", "node-agent"}
    # A run killed between starting a process and recording it: state.json forgets two of them.
    state_path = workdir / "state.json"
    state = json.loads(state_path.read_text())
    for name in ("kueue", "node-agent"):
        del state["processes"][name]
    state_path.write_text(json.dumps(state))
    out = subprocess.run(
        [sys.executable, "-m", "simulator.controlplane", "down", "--workdir", str(workdir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "stopped" in out.stderr
    alive = {
        name: pid
        for name, pid in pids.items()
        if Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    }
    assert not alive, f"still running after down: {alive}"
    assert status(workdir) is None
    assert down(workdir) == []


def test_up_failure_quotes_the_component_log(binaries: Binaries, tmp_path: Path) -> None:
    # The real etcd refuses a data directory that is a file: up fails quoting etcd's own log,
    # and leaves nothing running.
    workdir = tmp_path / "broken"
    workdir.mkdir()
    (workdir / "etcd").write_text("not a directory\n")
    with pytest.raises(ControlPlaneError) as err:
        up(workdir, binaries=binaries)
    message = str(err.value)
    assert "etcd exited" in message
    assert str(workdir / "logs" / "etcd.log") in message
    assert "etcd" in message.split("etcd.log", 1)[1]  # the quoted tail of the log follows
    assert down(workdir) == []
