"""Pure publish rendering: label values (<= 63 chars, stable hash fallback), node plans,
extended resources, and every Kueue object checked against the v1beta2 CRDs' OpenAPI schemas in
../shared/fixtures/kueue-crds with jsonschema. The CRDs' CEL rules are judged by the real API
server (``tests/integration/test_publish_kube.py``), not here."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from core.publish import (
    KueuePolicy,
    LabelChange,
    LabelScheme,
    NodeState,
    Pool,
    RenderError,
    TenantSpec,
    diff_nodes,
    is_label_value,
    node_labels,
    pool_name,
    render_kueue,
    safe_value,
)
from core.topology import derive
from tests.unit.test_topology_support import observe, truth_with

CRDS = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "kueue-crds"
TENANTS = [
    TenantSpec("research", "Research", ["prod", "preemptible"], cohort="science", gpu_quota={"H100": 512}),
    TenantSpec("Vision_Team", "Vision", ["prod", "batch"], cohort="science", gpu_quota={"h100": 100, "GB200": 36}),
    TenantSpec("inference", "Inference", ["prod"]),
]
POOLS = [
    Pool("nvidia-h100-80gb-hbm3-x8", "NVIDIA-H100-80GB-HBM3", 8, 128),
    Pool("nvidia-gb200-x4", "NVIDIA-GB200", 4, 144),
]


def test_label_values_are_readable_or_a_stable_hash() -> None:
    assert safe_value("ib-leaf-su01-r0") == "ib-leaf-su01-r0"
    assert safe_value("ib-leaf-su01-r[0-7]") == "ib-leaf-su01-r0-7"
    assert safe_value("dgx[001-004,006]") == "dgx001-004_006"
    long = "ib-leaf-" + "-".join(f"su{i:02d}" for i in range(40))
    value = safe_value(long)
    assert len(value) == 63 and is_label_value(value) and value.startswith("ib-leaf-su00-su01")
    assert value == safe_value(long)  # stable
    assert safe_value(long + "x") != value
    assert safe_value("[]") == "h-" + safe_value("[]", force_hash=True).removeprefix("h-")
    assert is_label_value(safe_value("---"))
    assert not is_label_value("a" * 64) and not is_label_value("-a")


def test_node_plans_every_level_or_nothing(tmp_path: Path) -> None:
    truth = truth_with("h100-1su", miscabled_ports=1)
    model = derive(observe(truth, tmp_path))
    plans = node_labels(model, LabelScheme(prefix="example.com"), {"dgx001": "p", "dgx002": "p"})
    assert plans["dgx001"].labels == {
        "fabric.example.com/pod": "ib-spine-01-04", "fabric.example.com/spine-group": "ib-spine-01-04",
        "fabric.example.com/block": "ib-leaf-su01-r0-7", "accelerator.example.com/domain": "nvl-dgx001",
        "accelerator.example.com/sub-domain": "nvl-dgx001", "example.com/pool": "p",
    }  # fmt: skip
    assert "example.com/pool" not in plans["dgx003"].labels  # no GPU facts: no pool, levels stay
    miscabled = {d for f in model.findings if f.kind == "miscabled_port" for d in f.devices}
    hosts = {h.name for h in model.compute_hosts() if any(c.guid in miscabled for c in h.hcas)}
    assert len(hosts) == 2
    for name, p in plans.items():
        assert p.resources == {"example.com/rails": "8",
                               "example.com/healthy-ib-ports": "7" if name in hosts else "8"}  # fmt: skip
    # a host missing one level gets no labels at all (Kueue drops partial nodes from TAS flavors)
    broken = tuple(dataclasses.replace(h, spine_group=None) if h.name == "dgx002" else h for h in model.hosts)
    plans = node_labels(dataclasses.replace(model, hosts=broken), LabelScheme(), {"dgx002": "p"})
    assert plans["dgx002"].labels == {} and not plans["dgx002"].complete
    topograph = node_labels(model, LabelScheme("topograph"))["dgx001"].labels
    assert sorted(topograph) == ["accelerator.topograph.run/domain", "fabric.topograph.run/tier-1",
                                 "fabric.topograph.run/tier-2", "fabric.topograph.run/tier-3"]  # fmt: skip


def test_label_diff_per_node() -> None:
    current = {"a": NodeState({"k": "1", "old": "x"}), "b": NodeState(), "c": NodeState({"k": "1"})}
    diffs = {d.node: d for d in diff_nodes(current, {"a": {"k": "2"}, "b": {"k": "1"}, "c": {"k": "1"},
                                                      "z": {"k": "1"}}, {})}  # fmt: skip
    assert diffs["a"].labels == (LabelChange("k", "1", "2"), LabelChange("old", "x", None))
    assert [c.change for c in diffs["a"].labels] == ["changed", "removed"] and diffs["a"].had_managed_state
    assert [c.change for c in diffs["b"].labels] == ["added"] and not diffs["b"].had_managed_state
    assert not diffs["c"].changed and diffs["z"].missing and not diffs["z"].changed


def test_pool_names() -> None:
    assert pool_name("NVIDIA-H100-80GB-HBM3", 8) == "nvidia-h100-80gb-hbm3-x8"
    assert pool_name("NVIDIA GB200 (rev 2)", 4) == "nvidia-gb200-rev-2-x4"


# --- Kueue, validated against the shipped CRDs ------------------------------------------------------------


def _schemas() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(CRDS.glob("kueue.x-k8s.io_*.yaml")):
        crd = yaml.safe_load(path.read_text())
        version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")
        out[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    return out


def _jsonschema(schema: Any) -> Any:
    """openAPIV3Schema -> JSON Schema: ``nullable`` becomes a null type, vendor keys dropped."""
    if isinstance(schema, list):
        return [_jsonschema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _jsonschema(v) for k, v in schema.items() if not k.startswith("x-kubernetes") and k != "nullable"}
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if schema.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


def test_every_kueue_object_fits_the_v1beta2_crd_schemas() -> None:
    objects = render_kueue(LabelScheme(), POOLS, TENANTS, KueuePolicy())
    kinds = [o["kind"] for o in objects]
    assert kinds == ["Topology", "ResourceFlavor", "ResourceFlavor", "Cohort", "Cohort", "WorkloadPriorityClass",
                     "WorkloadPriorityClass", "WorkloadPriorityClass", "ClusterQueue", "ClusterQueue", "ClusterQueue",
                     "LocalQueue", "LocalQueue", "LocalQueue"]  # fmt: skip
    schemas = _schemas()
    for obj in objects:
        jsonschema.validate(obj, _jsonschema(schemas[obj["kind"]]))
    vision = next(o for o in objects if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "vision-team")
    quotas = {f["name"].rsplit("-", 1)[0]: f["resources"][0] for f in vision["spec"]["resourceGroups"][0]["flavors"]}
    assert quotas == {
        "nvidia-gb200-x4": {"name": "nvidia.com/gpu", "nominalQuota": 36, "borrowingLimit": 36, "lendingLimit": 18},
        "nvidia-h100-80gb-hbm3-x8": {"name": "nvidia.com/gpu", "nominalQuota": 100, "borrowingLimit": 100,
                                     "lendingLimit": 50},
    }  # fmt: skip


def test_an_object_outside_the_schema_is_caught_by_the_same_check() -> None:
    (topo, *_rest) = render_kueue(LabelScheme(), POOLS, TENANTS)
    no_levels = {**topo, "spec": {"levels": [{"nodeLabel": 7}]}}
    with pytest.raises(jsonschema.ValidationError, match="7 is not of type 'string'"):
        jsonschema.validate(no_levels, _jsonschema(_schemas()["Topology"]))


def test_immutable_fields_change_the_name_and_bad_tenants_are_clear_errors() -> None:
    a = render_kueue(LabelScheme(), POOLS, TENANTS)
    b = render_kueue(LabelScheme(prefix="example.com"), POOLS, TENANTS)
    assert a[0]["metadata"]["name"] != b[0]["metadata"]["name"] and a[0]["metadata"]["name"].startswith("gpufabric-")
    assert a[1]["metadata"]["name"] != b[1]["metadata"]["name"]
    assert render_kueue(LabelScheme(), POOLS, TENANTS) == a  # deterministic
    with pytest.raises(RenderError, match="gpu_quota key 'A100' matches no GPU pool"):
        render_kueue(LabelScheme(), POOLS, [TenantSpec("x", "X", ["prod"], gpu_quota={"A100": 8})])
    with pytest.raises(RenderError, match="root cohort"):
        render_kueue(LabelScheme(), POOLS, [TenantSpec("x", "X", ["prod"], cohort="gpufabric")])


def test_tenant_fractions_override_the_policy_limits() -> None:
    tenant = TenantSpec("lab", "Lab", ["prod"], gpu_quota={"h100": 100}, borrowing_fraction=0.25, lending_fraction=0.0)
    objects = render_kueue(LabelScheme(), POOLS, [tenant], KueuePolicy())
    cq = next(o for o in objects if o["kind"] == "ClusterQueue")
    (h100,) = [f["resources"][0] for f in cq["spec"]["resourceGroups"][0]["flavors"] if "h100" in f["name"]]
    # lending 0 of 100: nothing lent, and Kueue keeps a zero lendingLimit only when nominal is non-zero.
    assert h100 == {"name": "nvidia.com/gpu", "nominalQuota": 100, "borrowingLimit": 25, "lendingLimit": 0}
