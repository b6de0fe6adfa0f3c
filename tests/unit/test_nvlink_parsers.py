"""NVLink domains from GFD clique labels, nvidia-smi csv and NetQ NMX compute nodes."""

from __future__ import annotations

import json

import pytest

from connectors.nvlink import (
    CLIQUE_LABEL,
    from_node_labels,
    parse_clique_label,
    parse_kubectl_nodes,
    parse_nmx_compute_nodes,
    parse_nvidia_smi,
)
from core.quality import CollectionStatus
from tests.conftest import FIXTURES

CU = "6f2a1d3e-9c4b-4b7e-8a51-2f0d9e3c7b11"


def test_gfd_clique_label() -> None:
    d = parse_clique_label("gb200-r01-t01", f"{CU}.32766")
    assert (d.method, d.domain, d.cluster_uuid, d.clique_id) == ("gfd_label", f"{CU}.32766", CU, "32766")
    hgx = parse_clique_label("dgx001", None)
    assert (hgx.method, hgx.domain) == ("hgx_single_node", "nvl-dgx001")
    zero = parse_clique_label("dgx002", "00000000-0000-0000-0000-000000000000.0")
    assert zero.domain == "nvl-dgx002"
    for bad in ("not-a-uuid.1", f"{CU}", f"{CU}.x1"):
        with pytest.raises(ValueError):
            parse_clique_label("n", bad)


def test_node_labels_quarantine_bad_values() -> None:
    p = from_node_labels({"a": {CLIQUE_LABEL: f"{CU}.1"}, "b": {}, "c": {CLIQUE_LABEL: "garbage"}}, "k8s")
    assert [(r.node, r.domain) for r in p.records] == [("a", f"{CU}.1"), ("b", "nvl-b")]
    assert [(q.location, q.payload) for q in p.quarantined] == [("c", "garbage")]
    assert p.status is CollectionStatus.PARTIAL
    kubectl = json.dumps(
        {"kind": "NodeList", "items": [{"metadata": {"name": "t1", "labels": {CLIQUE_LABEL: f"{CU}.7"}}}]}
    )
    assert [r.domain for r in parse_kubectl_nodes(kubectl).records] == [f"{CU}.7"]
    assert parse_kubectl_nodes("{").status is CollectionStatus.INVALID


def test_nvidia_smi_csv() -> None:
    text = "".join(f"{CU}, 32766\n" for _ in range(4))
    p = parse_nvidia_smi("tray1", text)
    assert [(r.method, r.domain, r.gpus) for r in p.records] == [("nvidia_smi", f"{CU}.32766", 4)]
    hgx = parse_nvidia_smi("dgx001", "[N/A], [N/A]\n" * 8)
    assert [(r.method, r.domain, r.gpus) for r in hgx.records] == [("hgx_single_node", "nvl-dgx001", 8)]
    header = parse_nvidia_smi("t", f"fabric.clusterUuid, fabric.cliqueId\n{CU}, 1\n")
    assert [r.domain for r in header.records] == [f"{CU}.1"]
    split = parse_nvidia_smi("t", f"{CU}, 1\n{CU}, 2\n")
    assert split.records == [] and "disagree" in split.quarantined[0].reason
    bad = parse_nvidia_smi("t", f"{CU}, 1\nonly-one-column\n")
    assert [r.domain for r in bad.records] == [f"{CU}.1"]
    assert [q.reason for q in bad.quarantined] == ["expected 2 columns, got 1"]
    assert parse_nvidia_smi("t", "").quarantined[0].reason == "no GPU lines in nvidia-smi output"


def test_nmx_compute_nodes_fixture() -> None:
    p = parse_nmx_compute_nodes((FIXTURES / "topograph" / "computeNodes.json").read_text())
    assert p.quarantined == []
    assert [(r.node, r.domain, r.gpus) for r in p.records] == [
        ("node1", "3fbfc98b-7f95-4749-ab11-bd351a2aab3e", 4),
        ("node2", "3fbfc98b-7f95-4749-ab11-bd351a2aab3e", 4),
    ]
    assert p.records[0].detail["LocationInfo"]["TrayIndex"] == 4


def test_nmx_bad_rows() -> None:
    rows = [{"Name": "a", "DomainUUID": CU}, {"DomainUUID": CU}, {"Name": "b", "DomainUUID": "zzz"}, {"Name": "a"}, 3]
    p = parse_nmx_compute_nodes(json.dumps(rows))
    assert [r.node for r in p.records] == ["a"]
    assert [q.reason for q in p.quarantined] == [
        "compute node without a Name",
        "DomainUUID 'zzz' is not a UUID",
        "compute node 'a' listed twice",
        "compute node is not an object",
    ]
    assert parse_nmx_compute_nodes('{"x": 1}').quarantined[0].reason == "expected a JSON list of compute nodes"
    assert parse_nmx_compute_nodes("[{").status is CollectionStatus.INVALID
