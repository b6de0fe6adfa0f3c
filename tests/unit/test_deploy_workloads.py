"""The workloads in deploy/ as an operator's cluster will run them: every manifest valid against
the Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown fields fail), every pod
hardened, every serving container probed, every replicated or admission-path Deployment covered
by a PodDisruptionBudget, and all of them on the one image deploy/Dockerfile builds.
(The server-side dry run on the real API server is tests/integration/test_least_privilege.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# Kubernetes 1.36 (the target) and 1.37, the newest schemas kubernetes-validate 1.37.0 ships.
K8S_VERSIONS = ("1.36.0", "1.37.0")
# CRD kinds have no built-in schema: cert-manager's are checked by the server-side dry run with
# cert-manager's CRDs installed.
CRD_KINDS = {("cert-manager.io/v1", "Certificate"), ("cert-manager.io/v1", "Issuer")}


def _docs() -> list[dict[str, Any]]:
    return [d for f in sorted(DEPLOY.rglob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def _deployments() -> list[dict[str, Any]]:
    return [d for d in _docs() if d["kind"] == "Deployment"]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_manifest_passes_kubernetes_validate(version: str) -> None:
    checked = 0
    for doc in _docs():
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            continue
        kubernetes_validate.validate(doc, version, strict=True)  # raises ValidationError
        checked += 1
    assert checked >= 20


def test_kubernetes_validate_rejects_a_broken_and_an_unknown_field() -> None:
    deployment = _deployments()[0]
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError, match="'two' is not of type 'integer'"):
        kubernetes_validate.validate(broken, K8S_VERSIONS[0], strict=True)
    unknown = yaml.safe_load(yaml.safe_dump(deployment))
    unknown["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="livenesProbe"):
        kubernetes_validate.validate(unknown, K8S_VERSIONS[0], strict=True)


def test_only_crd_kinds_lack_a_builtin_schema() -> None:
    kinds = {(d["apiVersion"], d["kind"]) for d in _docs()}
    for api_version, kind in kinds & CRD_KINDS:
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate({"apiVersion": api_version, "kind": kind}, K8S_VERSIONS[0], strict=True)
    assert kinds & CRD_KINDS  # the webhooks' TLS really is cert-manager's


def test_every_pod_runs_hardened_on_the_one_image() -> None:
    images = set()
    for d in _deployments():
        pod = d["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, d["metadata"]["name"]
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
            images.add(c["image"])
    assert len(images) == 1, images


def _quantity(value: str) -> float:
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, factor in units.items():
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


def test_every_container_requests_cpu_and_memory_and_caps_memory() -> None:
    for d in _deployments():
        for c in d["spec"]["template"]["spec"]["containers"]:
            requests, limits = c["resources"]["requests"], c["resources"]["limits"]
            assert {"cpu", "memory"} <= set(requests), d["metadata"]["name"]
            # memory is capped (an OOM kill beats starving the node); CPU is not, on purpose: a CPU
            # limit throttles the admission path into the API server's webhook timeout
            assert _quantity(limits["memory"]) >= _quantity(requests["memory"]), d["metadata"]["name"]


def test_every_serving_container_is_probed_on_its_port() -> None:
    served = 0
    for d in _deployments():
        for c in d["spec"]["template"]["spec"]["containers"]:
            ports = {p["containerPort"] for p in c.get("ports", [])}
            if not ports:
                continue
            served += 1
            for probe in ("readinessProbe", "livenessProbe"):
                handler = c[probe].get("httpGet") or c[probe].get("tcpSocket")
                assert handler and handler["port"] in ports, (d["metadata"]["name"], probe)
    assert served >= 2


def test_replicated_and_admission_deployments_have_a_disruption_budget() -> None:
    docs = _docs()
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    webhook_services = {
        w["clientConfig"]["service"]["name"]
        for d in docs if d["kind"] == "ValidatingWebhookConfiguration" for w in d["webhooks"]
    }  # fmt: skip
    services = {d["metadata"]["name"]: d["spec"]["selector"] for d in docs if d["kind"] == "Service"}
    webhook_selectors = [services[name] for name in webhook_services]
    needing = 0
    for d in _deployments():
        labels = d["spec"]["template"]["metadata"]["labels"]
        replicas = d["spec"].get("replicas", 1)
        serves_a_webhook = any(sel.items() <= labels.items() for sel in webhook_selectors)
        if replicas <= 1 and not serves_a_webhook:
            continue
        needing += 1
        covering = [
            b for b in budgets
            if b["metadata"]["namespace"] == d["metadata"]["namespace"]
            and b["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ]  # fmt: skip
        assert len(covering) == 1, d["metadata"]["name"]
        # a budget that allows no eviction at all would block every node drain
        assert covering[0]["spec"]["minAvailable"] < replicas, d["metadata"]["name"]
    assert needing >= 3
