"""deploy/helm/values.yml against the official Dagster chart: merged over the chart's default values
as Helm merges them, then validated with the chart's own JSON schemas (the parent chart's and the
dagster-user-deployments subchart's). The chart files are reference copies in
../shared/fixtures/dagster-helm/ (SOURCE.txt: the nearest release to our pin that could be had)."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

ROOT = Path(__file__).resolve().parents[2]
VALUES = ROOT / "deploy" / "helm" / "values.yml"
CHART = ROOT.parent / "shared" / "fixtures" / "dagster-helm"
SUBCHART = CHART / "charts" / "dagster-user-deployments"
# The parent schema $refs Kubernetes v1.19.0 definitions at this URL; the subchart schema embeds
# the same definitions under $defs.kubernetes (SOURCE.txt), so they are served from there, offline.
K8S_DEFINITIONS_URL = "https://raw.githubusercontent.com/yannh/kubernetes-json-schema/master/v1.19.0/_definitions.json"


def helm_merge(defaults: Any, overrides: Any) -> Any:
    """Helm's coalescing of a user values file over chart defaults: maps merge key by key, lists
    and scalars replace, and a null in the user file deletes the default key."""
    if not (isinstance(defaults, dict) and isinstance(overrides, dict)):
        return copy.deepcopy(overrides)
    merged = copy.deepcopy(defaults)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif key in merged:
            merged[key] = helm_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _ours() -> dict[str, Any]:
    values = _yaml(VALUES)
    assert isinstance(values, dict)
    return values


def _subchart_values(parent: dict[str, Any]) -> dict[str, Any]:
    """What the subchart sees: its defaults, the parent's block for it, and the parent's globals."""
    defaults = _yaml(SUBCHART / "values.yaml")
    # The stored subchart values.yaml predates the schema beside it, which requires includeInstance
    # (SOURCE.txt "Checks run"); the chart's later default is false.
    defaults.setdefault("includeInstance", False)
    merged = helm_merge(defaults, parent["dagster-user-deployments"])
    merged["global"] = helm_merge(merged.get("global", {}), parent["global"])
    return dict(merged)


def _validator(schema_path: Path) -> jsonschema.protocols.Validator:
    schema = json.loads(schema_path.read_text())
    embedded = json.loads((SUBCHART / "values.schema.json").read_text())["$defs"]["kubernetes"]
    k8s = Resource.from_contents({"definitions": embedded, "$defs": {"kubernetes": embedded}}, DRAFT202012)
    registry: Registry = Registry().with_resource(K8S_DEFINITIONS_URL, k8s)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema, registry=registry)


def _flatten(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """An anyOf/oneOf failure carries the per-branch reasons in its context: the useful message
    ("5 is not of type 'object'") is there, not in the summary."""
    return [error, *(e for sub in error.context or [] for e in _flatten(sub))]


def _errors(schema_path: Path, values: dict[str, Any]) -> list[str]:
    return sorted(
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for top in _validator(schema_path).iter_errors(values)
        for e in _flatten(top)
    )


def _merged(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    return dict(helm_merge(helm_merge(_yaml(CHART / "values.yaml"), _ours()), overrides or {}))


def test_helm_merge_follows_helm_rules() -> None:
    defaults = {"a": {"x": 1, "y": 2}, "l": [1, 2, 3], "s": "keep", "gone": {"deep": 1}}
    merged = helm_merge(defaults, {"a": {"y": 20, "z": 30}, "l": [9], "gone": None, "new": [1]})
    assert merged == {"a": {"x": 1, "y": 20, "z": 30}, "l": [9], "s": "keep", "new": [1]}
    assert defaults["a"] == {"x": 1, "y": 2}  # the chart defaults are not mutated


def test_chart_defaults_alone_are_valid() -> None:
    # the oracle itself: without this, a schema that rejected everything would pass the next test
    assert _errors(CHART / "values.schema.json", _yaml(CHART / "values.yaml")) == []


def test_our_values_merged_over_the_chart_defaults_pass_the_chart_schema() -> None:
    merged = _merged()
    assert _errors(CHART / "values.schema.json", merged) == []
    assert _errors(SUBCHART / "values.schema.json", _subchart_values(merged)) == []


def test_the_release_runs_our_code_location_with_k8s_runs_and_external_postgres() -> None:
    merged = _merged()
    deployments = merged["dagster-user-deployments"]["deployments"]
    # the list replaces the chart's example deployment; it is not appended to
    assert [d["name"] for d in deployments] == ["gpufabric"]
    ours = deployments[0]
    args = ours["dagsterApiGrpcArgs"]
    module = args[args.index("--module-name") + 1]
    assert importlib.util.find_spec(module) is not None, module
    assert module == "pipelines.definitions"
    assert merged["runLauncher"]["type"] == "K8sRunLauncher"
    assert merged["postgresql"]["enabled"] is False
    assert merged["generatePostgresqlPasswordSecret"] is False
    assert merged["global"]["postgresqlSecretName"] == "gpufabric-dagster-postgresql"


def test_run_pods_use_the_one_image_and_a_service_account_deploy_creates() -> None:
    merged = _merged()
    image = merged["dagster-user-deployments"]["deployments"][0]["image"]
    docs = [d for f in sorted((ROOT / "deploy").rglob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    images = {
        c["image"] for d in docs if d["kind"] == "Deployment" for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"{image['repository']}:{image['tag']}"}
    launcher = merged["runLauncher"]["config"]["k8sRunLauncher"]
    account = launcher["runK8sConfig"]["podSpecConfig"]["serviceAccountName"]
    accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "ServiceAccount"}
    assert (launcher["jobNamespace"], account) in accounts


@pytest.mark.parametrize(
    ("overrides", "where", "message"),
    [
        ({"runLauncher": {"type": "Bogus"}}, "runLauncher.type", "'Bogus' is not one of"),
        ({"postgresql": {"enabled": "no"}}, "postgresql.enabled", "'no' is not of type 'boolean'"),
        # a Kubernetes definition reached through the remote $ref, resolved offline
        ({"dagster-user-deployments": {"deployments": [{"name": "x", "port": 3030, "resources": {"limits": 5},
                                                        "image": {"repository": "r", "pullPolicy": "Always"}}]}},
         "dagster-user-deployments.deployments.0.resources.limits", "5 is not of type 'object'"),
        ({"runLauncher": {"config": {"k8sRunLauncher": {"imagePullPolicy": "Sometimes"}}}},
         "runLauncher.config.k8sRunLauncher.imagePullPolicy", "'Sometimes' is not one of"),
    ],
)  # fmt: skip
def test_a_broken_value_fails_with_the_schema_message(overrides: dict[str, Any], where: str, message: str) -> None:
    errors = _errors(CHART / "values.schema.json", _merged(overrides))
    assert any(e.startswith(f"{where}: {message}") for e in errors), errors


def test_a_missing_required_subchart_key_fails_the_subchart_schema() -> None:
    values = _subchart_values(_merged())
    del values["deployments"][0]["port"]
    assert _errors(SUBCHART / "values.schema.json", values) == ["deployments.0: 'port' is a required property"]
