"""The shipped manifests (deploy/): every container runs an entry that exists with flags it
accepts, and each admission webhook has the failure policy its docs argue for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _docs() -> list[dict[str, Any]]:
    docs = [d for f in sorted(DEPLOY.rglob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    assert len(docs) > 10
    return docs


def _help(module_args: list[str]) -> str:
    result = subprocess.run([sys.executable, *module_args, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_container_runs_an_entry_with_flags_it_accepts() -> None:
    checked = 0
    for doc in _docs():
        if doc["kind"] != "Deployment":
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            args = container["args"]
            assert args[:2] == ["python", "-m"], args
            entry = args[1:4] if args[2] == "controllers" else args[1:3]
            text = _help(entry)
            for flag in (a for a in args if a.startswith("--")):
                assert flag in text, f"{doc['metadata']['name']}: {flag} not accepted by {' '.join(entry)}"
            checked += 1
    assert checked >= 3


def test_webhook_failure_policies_match_their_purpose() -> None:
    hooks = {w["name"]: w for d in _docs() if d["kind"] == "ValidatingWebhookConfiguration" for w in d["webhooks"]}
    budget, topology = hooks["budget.gpufabric.io"], hooks["topology.gpufabric.io"]
    # budget: fail closed (a runaway tree must not be admitted while the ledger is down); it
    # writes reservations, but not for dry runs; system namespaces never depend on it
    assert budget["failurePolicy"] == "Fail" and budget["sideEffects"] == "NoneOnDryRun"
    excluded = [e for e in budget["namespaceSelector"]["matchExpressions"] if e["operator"] == "NotIn"]
    assert "kube-system" in excluded[0]["values"]
    assert budget["rules"][0]["resources"] == ["pods"] and budget["rules"][0]["operations"] == ["CREATE"]
    # topology: advisory, never blocks a submission
    assert topology["failurePolicy"] == "Ignore" and topology["sideEffects"] == "None"


def test_every_workload_runs_as_a_shipped_service_account_with_a_binding() -> None:
    docs = _docs()
    accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "ServiceAccount"}
    bound = {(s["namespace"], s["name"]) for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
             for s in d["subjects"] if s["kind"] == "ServiceAccount"}  # fmt: skip
    roles = {d["metadata"]["name"] for d in docs if d["kind"] in ("ClusterRole", "Role")}
    assert all(d["roleRef"]["name"] in roles for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding"))
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    for d in deployments:
        who = (d["metadata"]["namespace"], d["spec"]["template"]["spec"]["serviceAccountName"])
        assert who in accounts, f"{d['metadata']['name']} runs as {who}, which deploy/ does not create"
    # every account has a role bound (an account with none would run with no permission at all)
    assert accounts <= bound, accounts - bound
    # least privilege in the manifests themselves: no wildcard and no Secret access anywhere
    rules = [r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]
    assert rules and all("*" not in r["verbs"] and "*" not in r["resources"] for r in rules)
    assert not any("secrets" in r["resources"] for r in rules)
