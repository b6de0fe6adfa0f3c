"""``gpufabric publish`` carries the GPU-NIC affinity label and map annotation (issue 23, part 4):
the desired state's annotations, their diff, what we own of them on a Node (managedFields), the
counts and the human diff, and the GitOps files. On the real API server:
tests/integration/test_publish_affinity.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.kube.publish import DIFF_VALUE_CHARS, Plan, read_state, render_diff
from core.affinity.fleet import derive_fleet
from core.affinity.render import node_patch
from core.publish import DesiredState, NodeState, diff_nodes
from services.publish.service import write_gitops
from simulator.generator import generate
from tests.unit.test_topology_support import spec_of

LABEL = "topology.gpufabric.io/gpu-nic-affinity"
NOTE = "topology.gpufabric.io/gpu-nic-map"


@pytest.fixture(scope="module")
def patches() -> dict[str, dict[str, Any]]:
    """node_patch of three h100-4su nodes: dgx001 aligned, dgx007 (a GPU's NIC is SYS) and dgx042
    (swapped NIC order, a fleet finding) degraded."""
    truth = generate(spec_of("h100-4su"))
    fleet = derive_fleet(dict(truth.gpu_topo.matrices))  # the whole fleet: its modal matrix is the norm
    return {h: node_patch(fleet.node(h), "gpufabric.io", fleet.findings_of(h)) for h in ("dgx001", "dgx007", "dgx042")}


def _state(labels: dict[str, dict[str, str]]) -> DesiredState:
    return DesiredState(labels, {n: {"gpufabric.io/rails": "8"} for n in labels}, [], [], [])


def test_affinity_joins_the_managed_labels_and_annotations(patches: dict[str, dict[str, Any]]) -> None:
    base = _state({"dgx001": {"gpufabric.io/pool": "p"}, "dgx002": {"gpufabric.io/pool": "p"}})
    merged = base.with_node_metadata(patches)
    assert merged.labels["dgx001"] == {"gpufabric.io/pool": "p", LABEL: "aligned"}
    assert merged.labels["dgx007"] == {LABEL: "degraded"}  # not in the fabric plan: the affinity alone
    assert merged.labels["dgx042"] == {LABEL: "degraded"}
    assert merged.labels["dgx002"] == {"gpufabric.io/pool": "p"}  # no affinity: no label, no annotation
    assert set(merged.annotations) == {"dgx001", "dgx007", "dgx042"}
    gpus = json.loads(merged.annotations["dgx007"][NOTE])["gpus"]
    assert [g["c"] for g in gpus].count("SYS") == 1 and gpus[3]["c"] == "SYS"
    assert merged.resources == base.resources
    assert base.annotations == {} and LABEL not in base.labels["dgx001"]  # the original is left alone


def test_old_run_documents_without_annotations_still_load(patches: dict[str, dict[str, Any]]) -> None:
    old = {"labels": {"a": {"k": "v"}}, "resources": {"a": {}}, "objects": []}  # before annotations existed
    state = DesiredState.from_json(old)
    assert state.annotations == {} and state.labels == {"a": {"k": "v"}}
    merged = _state({"dgx001": {}}).with_node_metadata(patches)
    again = DesiredState.from_json(json.loads(json.dumps(merged.to_json())))
    assert again.annotations == merged.annotations and again.labels == merged.labels


def test_annotation_diff_adds_changes_and_removes_only_ours() -> None:
    current = {
        "a": NodeState(labels={LABEL: "aligned"}, annotations={NOTE: "old"}),
        "b": NodeState(annotations={NOTE: "x"}),  # only an annotation of ours: still guarded
        "c": NodeState(),
    }
    diffs = {d.node: d for d in diff_nodes(current, {"a": {LABEL: "aligned"}, "c": {LABEL: "aligned"}}, {},
                                           {"a": {NOTE: "new"}, "c": {NOTE: "n"}, "m": {NOTE: "n"}})}  # fmt: skip
    a, b, c, m = diffs["a"], diffs["b"], diffs["c"], diffs["m"]
    assert a.labels == () and [(x.key, x.change, x.after) for x in a.annotations] == [(NOTE, "changed", "new")]
    assert a.changed and a.metadata_changed and a.had_managed_state
    assert [(x.key, x.change, x.before) for x in b.annotations] == [(NOTE, "removed", "x")] and b.had_managed_state
    assert [x.change for x in c.annotations] == ["added"] and not c.had_managed_state
    assert m.missing and not m.changed  # planned but not in the cluster
    # without desired annotations (an older caller) the diff is what it was, ours removed
    assert [x.change for x in diff_nodes(current, {"a": {LABEL: "aligned"}}, {})[0].annotations] == ["removed"]


def _node(name: str, labels: dict[str, str], annotations: dict[str, str], entries: list[dict[str, Any]]
          ) -> dict[str, Any]:  # fmt: skip
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations, "managedFields": entries}}


def test_read_state_owns_the_annotations_our_manager_applied() -> None:
    ours = {"manager": "gpufabric", "operation": "Apply",
            "fieldsV1": {"f:metadata": {"f:labels": {f"f:{LABEL}": {}}, "f:annotations": {f"f:{NOTE}": {}}}}}
    theirs = {"manager": "kubectl", "operation": "Apply",
              "fieldsV1": {"f:metadata": {"f:annotations": {"f:team": {}}}}}
    status = {"manager": "gpufabric", "operation": "Apply", "subresource": "status",
              "fieldsV1": {"f:metadata": {"f:annotations": {"f:team": {}}}}}  # fmt: skip
    node = _node("n1", {LABEL: "degraded", "other": "1"}, {NOTE: "{}", "team": "t", "gone": "g"},
                 [ours, theirs, status])  # fmt: skip
    state = read_state([node], "gpufabric")["n1"]
    assert dict(state.annotations) == {NOTE: "{}"} and dict(state.labels) == {LABEL: "degraded"}
    assert dict(read_state([node], "kubectl")["n1"].annotations) == {"team": "t"}
    bare = read_state([{"metadata": {"name": "n2"}}], "gpufabric")["n2"]  # no annotations at all
    assert dict(bare.annotations) == {}


def test_counts_and_the_human_diff_report_annotations() -> None:
    long = "x" * 300
    diffs = diff_nodes({"a": NodeState(annotations={NOTE: "short"}), "b": NodeState()}, {}, {},
                       {"a": {NOTE: long}, "b": {NOTE: "y"}})  # fmt: skip
    p = Plan(2, diffs, [], [], 1, 0.5)
    counts = p.counts()
    assert counts["annotations_changed"] == 2 and counts["labels_added"] == 0 and counts["nodes_changed"] == 2
    lines = render_diff(p)
    assert f"node a: ~ annotation {NOTE}: short -> {'x' * (DIFF_VALUE_CHARS - 1)}…" in lines
    assert f"node b: + annotation {NOTE}=y" in lines
    assert lines[-1].startswith("2 of 2 nodes change (+0 ~0 -0 labels, 0 resources, 2 annotations)")


def test_gitops_node_files_carry_the_annotations(tmp_path: Path, patches: dict[str, dict[str, Any]]) -> None:
    state = _state({"dgx001": {"gpufabric.io/pool": "p"}, "dgx002": {"gpufabric.io/pool": "p"}})
    write_gitops(tmp_path, state.with_node_metadata(patches))
    node = yaml.safe_load((tmp_path / "gpufabric" / "nodes" / "dgx001.yaml").read_text())
    assert node["metadata"]["labels"][LABEL] == "aligned"
    assert node["metadata"]["annotations"] == patches["dgx001"]["metadata"]["annotations"]
    plain = yaml.safe_load((tmp_path / "gpufabric" / "nodes" / "dgx002.yaml").read_text())
    assert "annotations" not in plain["metadata"]
    assert (tmp_path / "gpufabric" / "nodes" / "dgx007.yaml").exists()
    # republished without dgx007's affinity: its file (ours, nothing else in it) goes
    write_gitops(tmp_path, state.with_node_metadata({k: v for k, v in patches.items() if k != "dgx007"}))
    assert not (tmp_path / "gpufabric" / "nodes" / "dgx007.yaml").exists()
