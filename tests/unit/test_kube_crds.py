"""Kueue CRD loading, schema + CEL validation, defaulting and pruning (simulator/kube/crds.py)."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.kube.crds import CRD_DIR, load_crds
from tests.conftest import FIXTURES

CRDS = {c.kind: c for c in load_crds()}


def test_vendored_crds_are_the_shared_fixtures() -> None:
    shared = FIXTURES / "kueue-crds"
    names = sorted(p.name for p in shared.iterdir())
    assert sorted(p.name for p in CRD_DIR.iterdir()) == names
    for name in names:
        assert (CRD_DIR / name).read_bytes() == (shared / name).read_bytes(), name


def test_all_kinds_served_and_every_cel_rule_compiles() -> None:
    assert set(CRDS) == {"Topology", "ResourceFlavor", "ClusterQueue", "Cohort", "LocalQueue",
                         "WorkloadPriorityClass"}
    assert [r for c in CRDS.values() for r in c.unsupported_rules] == []
    assert CRDS["LocalQueue"].namespaced and not CRDS["ClusterQueue"].namespaced
    assert CRDS["ClusterQueue"].status_subresource and not CRDS["Topology"].status_subresource


def check(kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    crd = CRDS[kind]
    prepared, _ = crd.prepare(obj)
    old_prepared = crd.prepare(old)[0] if old is not None else None
    causes, warnings = crd.validate(prepared, old_prepared)
    assert warnings == []
    return [(c.field, c.message) for c in causes]


def obj(kind: str, spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": {"name": "x"}, "spec": spec}


def test_topology_rules() -> None:
    good = obj("Topology", {"levels": [{"nodeLabel": "a"}, {"nodeLabel": "kubernetes.io/hostname"}]})
    assert check("Topology", good) == []
    dup = obj("Topology", {"levels": [{"nodeLabel": "a"}, {"nodeLabel": "a"}]})
    assert check("Topology", dup)[0][0] == "spec.levels"
    changed = obj("Topology", {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]})
    assert check("Topology", changed, good) == [("spec.levels", 'Invalid value: "array": field is immutable')]
    assert check("Topology", good, good) == []


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"topologyName": "t"}, "spec"),  # needs nodeLabels: CEL errors on the missing key, rejected
        ({"nodeTaints": [{"key": "k", "effect": "Never"}]}, "spec.nodeTaints"),
        ({"tolerations": [{"operator": "Exists", "value": "v"}]}, "spec.tolerations"),
    ],
)
def test_resource_flavor_rules(spec: dict[str, Any], field: str) -> None:
    assert check("ResourceFlavor", obj("ResourceFlavor", spec))[0][0] == field


def test_resource_flavor_transition_rules_need_old_self() -> None:
    old = obj("ResourceFlavor", {"nodeLabels": {"a": "b"}, "topologyName": "t"})
    new = obj("ResourceFlavor", {"nodeLabels": {"a": "c"}, "topologyName": "t"})
    assert check("ResourceFlavor", new) == []
    assert "immutable" in check("ResourceFlavor", new, old)[0][1]


def test_cluster_queue_defaults_quantities_and_limits() -> None:
    crd = CRDS["ClusterQueue"]
    prepared, unknown = crd.prepare(obj("ClusterQueue", {"bogus": 1, "cohortName": None}))
    assert unknown == ["spec.bogus"] and "cohortName" not in prepared["spec"]
    assert prepared["spec"]["queueingStrategy"] == "BestEffortFIFO"
    group = {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu",
                                                                                  "nominalQuota": "500m"}]}]}
    assert check("ClusterQueue", obj("ClusterQueue", {"resourceGroups": [group]})) == []
    too_many = obj("ClusterQueue", {"resourceGroups": [group] * 17})
    assert check("ClusterQueue", too_many)[0][0] == "spec.resourceGroups"
    mismatch = {"coveredResources": ["cpu", "memory"], "flavors": group["flavors"]}
    assert check("ClusterQueue", obj("ClusterQueue", {"resourceGroups": [mismatch]}))[0][0] == "spec.resourceGroups[0]"


def test_local_queue_cluster_queue_is_immutable() -> None:
    old = {**obj("LocalQueue", {"clusterQueue": "a"}), "metadata": {"name": "q", "namespace": "ns"}}
    new = {**obj("LocalQueue", {"clusterQueue": "b"}), "metadata": {"name": "q", "namespace": "ns"}}
    assert check("LocalQueue", new, old)[0][0] == "spec.clusterQueue"
