"""The webhook's shipped manifests: parseable, least privilege, pointing at the server's route."""

from __future__ import annotations

from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "webhook"


def _docs() -> list[dict]:  # type: ignore[type-arg]
    return [d for p in sorted(DEPLOY.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]


def test_webhook_manifests_are_least_privilege_and_consistent() -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in _docs()}
    role = docs[("ClusterRole", "gpufabric-topology-webhook")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    assert not any(k == "Role" or k == "RoleBinding" for k, _ in docs)
    (hook,) = docs[("ValidatingWebhookConfiguration", "gpufabric-topology")]["webhooks"]
    assert hook["admissionReviewVersions"] == ["v1"] and hook["sideEffects"] == "None"
    assert hook["failurePolicy"] == "Ignore" and hook["clientConfig"]["service"]["path"] == "/validate"
    service = docs[("Service", "gpufabric-topology-webhook")]
    assert service["spec"]["ports"][0]["targetPort"] == 8443
    deployment = docs[("Deployment", "gpufabric-topology-webhook")]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
