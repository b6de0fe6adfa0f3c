"""GPU-NIC affinity derivation (core/affinity) on the real captures and on edited copies: each
GPU's best compute NIC, path class, NUMA node and rail, and each finding kind firing exactly when
it should."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.gpu_topo import parse_file, parse_gpu_topo
from core.affinity import (
    FINDING_KINDS,
    Connection,
    FleetNode,
    NicCabling,
    NicInfo,
    TopoMatrix,
    cabling_from_topology,
    classify_nics,
    derive_node,
    fleet_findings,
)
from core.models import Severity
from core.topology import HcaOut, HostOut, SwitchOut, TopologyModel
from tests.conftest import FIXTURES

FOLDER = FIXTURES / "gpu-topo"
CAPTURES = sorted(p for p in FOLDER.glob("*.txt") if p.name != "SOURCE.txt")
HGX = parse_file(FOLDER / "hgx-h100-8nic-sglang30401.txt")
PENNY = parse_file(FOLDER / "dgx-h100-13nic-renamed-penny.txt")


def edited(
    m: TopoMatrix, cells: dict[tuple[str, str], str] | None = None, names: dict[str, str] | None = None
) -> TopoMatrix:
    """A copy with some cells (both directions) and NIC device names changed, sent through the
    printed form and the parser so it is a capture the parser accepts."""
    pos = {d: i for i, d in enumerate(m.devices)}
    rows = [list(r) for r in m.cells]
    for (a, b), token in (cells or {}).items():
        rows[pos[a]][pos[b]] = rows[pos[b]][pos[a]] = Connection.parse(token)
    nics = tuple(NicInfo(n.index, n.label, (names or {}).get(n.label, n.device)) for n in m.nics)
    changed = replace(m, cells=tuple(tuple(r) for r in rows), nics=nics)
    return parse_gpu_topo(changed.to_text())


def kinds(findings: Any) -> list[tuple[str, int | None, str | None]]:
    return sorted((f.kind, f.gpu, f.nic) for f in findings)


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_real_captures_derive_their_expected_best_nics(capture: Path) -> None:
    exp = yaml.safe_load(capture.with_suffix(".expected.yaml").read_text())
    node = derive_node("n1", parse_file(capture))
    for label, facts in exp["gpus"].items():
        g = node.gpu(int(label[3:]))
        names = [
            d if d is not None else col for d, col in zip(facts["best_nics"], facts["best_nic_columns"], strict=True)
        ]
        assert list(g.best_nics) == names, label
        assert g.path_class == facts["best_nic_class"] and g.numa_node == facts["numa_node"], label
        assert g.rails == () and g.rail is None


@pytest.mark.parametrize(
    ("capture", "expected"),
    [
        ("hgx-h100-8nic-sglang30401", []),
        ("dgx-h100-13nic-renamed-penny", []),
        ("b300-9nic-ansi-header-sglang26039", []),
        ("a100-sxm4-10nic-legend-oyanghd", []),
        ("dgx1-v100-topo-mp-gengwg", []),  # 4 NICs shared by 8 GPUs, but no NIC idle: the design
        (
            "rtx4090-pcie-2nic-gpuallocator17",
            [("nic_across_socket", g, None) for g in (0, 1, 2, 3, 4, 5, 7)] + [("nic_via_host_bridge", 6, None)],
        ),
    ],
)
def test_findings_on_real_captures(capture: str, expected: list[tuple[str, int, None]]) -> None:
    node = derive_node("n1", parse_file(FOLDER / f"{capture}.txt"))
    assert kinds(node.findings) == sorted(expected)


def test_storage_and_management_nics_are_not_compute() -> None:
    roles = {r.nic.name: r for r in classify_nics(PENNY)}
    assert [n for n, r in roles.items() if not r.compute] == [f"mlx5_eth{i}" for i in range(5)]
    assert "Ethernet-named" in roles["mlx5_eth0"].reason and roles["mlx5_ib0"].reason == "PIX to GPU0"
    b300 = {r.nic.name: r for r in classify_nics(parse_file(FOLDER / "b300-9nic-ansi-header-sglang26039.txt"))}
    assert not b300["mlx5_bond_0"].compute and "bonded" in b300["mlx5_bond_0"].reason
    assert all(r.compute for n, r in b300.items() if n != "mlx5_bond_0")
    a100 = {r.nic.name: r for r in classify_nics(parse_file(FOLDER / "a100-sxm4-10nic-legend-oyanghd.txt"))}
    assert [n for n, r in a100.items() if not r.compute] == ["mlx5_8", "mlx5_9"]
    assert a100["mlx5_8"].reason == "no GPU is local to mlx5_8 (closest: SYS)"


def test_compute_nics_given_by_the_caller_decide() -> None:
    node = derive_node("n1", HGX, compute_nics={"mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"})
    assert node.gpu(0).best_nics == ("mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7") and node.gpu(0).path_class == "SYS"
    assert kinds(node.findings) == sorted([("nic_across_socket", g, None) for g in range(4)])


def test_no_compute_nic_gives_no_path_and_no_finding() -> None:
    node = derive_node("n1", HGX, compute_nics=set())
    assert all(g.best_nics == () and g.path_class is None for g in node.gpus) and node.findings == ()


def test_nic_across_socket_fires_for_the_edited_gpu_only() -> None:
    m = edited(HGX, {("GPU3", f"NIC{i}"): "SYS" for i in range(8)})
    node = derive_node("n1", m)
    assert kinds(node.findings) == [("nic_across_socket", 3, None)]
    f = node.findings[0]
    assert f.severity is Severity.ERROR and f.nics == (
        "mlx5_0",
        "mlx5_1",
        "mlx5_2",
        "mlx5_4",
        "mlx5_5",
        "mlx5_6",
        "mlx5_7",
    )
    assert "GPU3 (NUMA 0)" in f.detail and "(SYS)" in f.detail


def test_nic_via_host_bridge_fires_for_phb_only() -> None:
    node = derive_node("n1", edited(HGX, {("GPU2", "NIC2"): "PHB"}))
    assert kinds(node.findings) == [("nic_via_host_bridge", 2, None)]
    assert node.gpu(2).path_class == "PHB" and node.findings[0].severity is Severity.WARNING
    assert derive_node("n1", edited(HGX, {("GPU2", "NIC2"): "PXB"})).findings == ()  # PXB is fine


def test_shared_nic_fires_when_another_compute_nic_is_idle() -> None:
    # GPU1 moves onto GPU0's PCIe switch: both have mlx5_0 as their only best NIC; mlx5_1 is PXB to
    # GPU1 (still a local, compute NIC) but nobody's best.
    m = edited(HGX, {("GPU1", "NIC0"): "PIX", ("GPU1", "NIC1"): "PXB"})
    node = derive_node("n1", m)
    assert kinds(node.findings) == [("shared_nic", None, "mlx5_0")]
    f = node.findings[0]
    assert f.gpus == (0, 1) and f.evidence["idle_nics"] == ["mlx5_1"]
    assert "GPUs 0, 1 all have mlx5_0" in f.detail and "mlx5_1 serves no GPU" in f.detail


def test_shared_nic_is_silent_when_the_idle_nic_is_not_compute() -> None:
    m = edited(HGX, {("GPU1", "NIC0"): "PIX", ("GPU1", "NIC1"): "PXB"}, names={"NIC1": "mlx5_eth1"})
    assert derive_node("n1", m).findings == ()


def test_shared_nic_is_silent_when_gpus_have_several_best_nics() -> None:
    m = edited(HGX, {("GPU1", "NIC0"): "PIX"})  # GPU1: PIX to NIC0 and NIC1; NIC1 still GPU1's
    assert derive_node("n1", m).findings == ()


def hgx_cabling(**leaf_rails: str) -> dict[str, NicCabling | str]:
    return {f"mlx5_{i}": NicCabling(f"rail{i}", f"leaf-{i}", leaf_rails.get(f"mlx5_{i}", f"rail{i}")) for i in range(8)}


def test_rails_come_from_the_cabling() -> None:
    node = derive_node("n1", HGX, cabling=hgx_cabling())
    assert [g.rail for g in node.gpus] == [f"rail{i}" for i in range(8)] and node.findings == ()
    plain = derive_node("n1", HGX, cabling={"mlx5_0": "rail0", "mlx5_1": "rail1"})
    assert [g.rail for g in plain.gpus[:3]] == ["rail0", "rail1", None] and plain.findings == ()
    a100 = derive_node(
        "n1", parse_file(FOLDER / "a100-sxm4-10nic-legend-oyanghd.txt"), cabling={"mlx5_0": "rail0", "mlx5_1": "rail1"}
    )
    assert a100.gpu(0).rails == ("rail0", "rail1") and a100.gpu(0).rail is None
    assert a100.gpu(0).to_json()["rails"] == ["rail0", "rail1"]


def test_rail_miscabled_fires_for_the_gpu_whose_nic_is_on_another_rails_leaf() -> None:
    node = derive_node("n1", HGX, cabling=hgx_cabling(mlx5_3="rail5"))
    assert kinds(node.findings) == [("rail_miscabled", 3, "mlx5_3")]
    f = node.findings[0]
    assert f.detail == "n1 GPU3's NIC mlx5_3 (rail3) is cabled to a rail5 leaf (leaf-3)"
    assert f.to_finding().evidence["leaf_rail"] == "rail5" and f.to_finding().severity is Severity.ERROR
    # a NIC no GPU has as best NIC hurts no GPU: the fabric's miscabled_port covers it
    assert derive_node("n1", PENNY, cabling={"mlx5_eth0": NicCabling("rail0", "x", "rail9")}).findings == ()


def test_cabling_from_the_fabric_model() -> None:
    hcas = tuple(HcaOut(f"g{i}", f"mlx5_{i}", f"rail{i}", f"leaf{i % 2}", str(i), "node_description") for i in range(3))
    switches = tuple(SwitchOut(f"leaf{i}", f"leaf{i}", "ib", "node_guid", None, "", rail=f"rail{i}") for i in range(2))
    model = TopologyModel(switches, (HostOut("n1", "compute", "", hcas=hcas),), (), (), ())
    cabling = cabling_from_topology(model, "n1")
    assert cabling == {
        "mlx5_0": NicCabling("rail0", "leaf0", "rail0"),
        "mlx5_1": NicCabling("rail1", "leaf1", "rail1"),
        "mlx5_2": NicCabling("rail2", "leaf0", "rail0"),
    }
    node = derive_node("n1", HGX, cabling=cabling)
    assert kinds(node.findings) == [("rail_miscabled", 2, "mlx5_2")]


def fleet(*matrices: TopoMatrix, model: str = "dgx-h100") -> list[FleetNode]:
    return [FleetNode(f"n{i}", model, m) for i, m in enumerate(matrices)]


def test_matrix_differs_from_fleet_names_the_odd_node_and_what_differs() -> None:
    swapped = edited(HGX, names={"NIC0": "mlx5_1", "NIC1": "mlx5_0"})
    found = fleet_findings(fleet(HGX, HGX, swapped, HGX))
    assert [(f.kind, f.host) for f in found] == [("matrix_differs_from_fleet", "n2")]
    assert "NIC0 is mlx5_1 (fleet: mlx5_0)" in found[0].detail and "3 of 4 dgx-h100 nodes" in found[0].detail
    moved = edited(HGX, {("GPU3", "NIC3"): "SYS"})
    found = fleet_findings(fleet(HGX, moved, HGX))
    assert [f.host for f in found] == ["n1"] and found[0].evidence["differences"] == ["GPU3-NIC3 SYS (fleet: PIX)"]


def test_matrix_differs_from_fleet_needs_a_fleet_and_a_mode() -> None:
    odd = edited(HGX, {("GPU3", "NIC3"): "SYS"})
    assert fleet_findings(fleet(HGX, HGX, HGX)) == []
    assert fleet_findings(fleet(HGX, odd)) == []  # two nodes: below min_fleet
    assert fleet_findings(fleet(HGX, HGX, odd, odd)) == []  # a tie: no modal matrix
    mixed = fleet(HGX, HGX, HGX, model="hgx") + fleet(PENNY, PENNY, model="dgx")
    assert fleet_findings(mixed) == []  # models are never compared with each other
    assert [f.host for f in fleet_findings(fleet(HGX, HGX, PENNY))] == ["n2"]


def test_every_finding_kind_is_covered_and_converts() -> None:
    assert set(FINDING_KINDS) == {
        "nic_across_socket", "nic_via_host_bridge", "shared_nic", "rail_miscabled", "matrix_differs_from_fleet",
    }  # fmt: skip
    f = derive_node("n1", edited(HGX, {("GPU2", "NIC2"): "PHB"})).findings[0].to_finding()
    assert f.kind == "nic_via_host_bridge" and f.devices == ("n1",) and f.evidence["gpus"] == [2]


def test_json_is_one_object_per_gpu() -> None:
    doc = derive_node("n1", HGX).to_json()
    assert len(doc) == 8
    assert doc[4] == {
        "gpu": 4, "best_nics": ["mlx5_4"], "path_class": "PIX", "numa_node": 1, "cpu_affinity": "48-95,144-191",
        "rail": None, "rails": [],
    }  # fmt: skip
