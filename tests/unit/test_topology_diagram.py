"""The topology diagram: layout as data (core/topology/diagram.py), its SVG/PNG (services/diagrams.py)
and ``gpufabric topology show --svg``: every switch drawn once, every finding marked once, hosts
counted not drawn, byte-stable SVG, and readable (aggregated) at 4,736 switches."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.models import Finding, PortRef, Severity, Tier
from core.topology import TopologyModel, derive
from core.topology.diagram import MAX_PER_ROW, Diagram, layout, summary
from core.topology.model import DomainOut, HcaOut, HostOut, LinkOut, SwitchOut
from pipelines import cli_topology
from services.diagrams import MAX_PNG_BYTES, topology_png, topology_svg
from tests.unit.test_topology_support import observe, truth_with

SVG = "{http://www.w3.org/2000/svg}"


@cache
def h100_model() -> TopologyModel:
    truth = truth_with("h100-1su", miscabled_ports=2, degraded_uplinks=1, missing_links=2)
    return derive(observe(truth, Path("/nonexistent"), lldp=True, dcim=False))


def switch_boxes(d: Diagram) -> list[str]:
    return [m for b in d.boxes if b.kind in ("switch", "switches") for m in b.members]


def svg_texts(svg: bytes) -> list[str]:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def test_every_switch_drawn_once_every_finding_marked_once_hosts_counted() -> None:
    model = h100_model()
    d = layout(model)
    assert sorted(switch_boxes(d)) == sorted(s.id for s in model.switches)  # each exactly once
    assert {b.kind for b in d.boxes if b.tier == "leaf"} == {"switch"}  # 12 leaves fit a row: not aggregated
    kinds = Counter(f.kind for f in model.findings)
    assert kinds == {"miscabled_port": 2, "degraded_leaf": 2, "host_missing_from_fabric": 1}
    assert d.marked() == kinds and d.findings_by_kind == kinds and not d.fabric_wide
    # the degraded leaf carries its own finding, outlined in the finding's colour
    degraded = next(f for f in model.findings if f.kind == "degraded_leaf")
    on = next(b for b in d.boxes if degraded.devices[0] in b.members and b.kind == "switch")
    assert on.findings.get("degraded_leaf") and on.stroke != "#333333" and "degraded_leaf" in on.mark
    # hosts: one count box under each leaf, never a box per host
    leaves = [b for b in d.boxes if b.tier == "leaf"]
    hosts = [b for b in d.boxes if b.kind == "hosts"]
    assert len(hosts) == len(leaves) == 12 < len(model.compute_hosts())
    ib_counts = sorted(int(b.label.split()[0]) for b in hosts if b.fabric == "ib")
    assert ib_counts[-1] == 32 and ib_counts[0] < 32  # the rails that lost a cable show fewer hosts
    assert [r.label for r in d.regions] == ["ib-leaf-su01-r[0-7]"]  # the one IB block behind its leaves
    assert summary(model)["switches_leaf"] == 12 and summary(model)["findings"] == 5


def test_findings_anchor_on_the_leaf_of_a_named_hca_or_host_else_fabric_wide() -> None:
    model = h100_model()
    host = model.compute_hosts()[0]
    hca = host.hcas[3]
    extra = (
        Finding(kind="unnamed_hca", severity=Severity.WARNING, message="m", devices=(hca.guid,)),
        Finding(kind="host_not_in_dcim", severity=Severity.INFO, message="m", devices=(host.name,)),
        Finding(kind="no_switches", severity=Severity.ERROR, message="m", devices=("nowhere",)),
    )
    d = layout(TopologyModel(model.switches, model.hosts, model.domains, model.links, model.findings + extra))
    on_hca_leaf = next(b for b in d.boxes if b.kind == "switch" and hca.leaf in b.members)
    assert on_hca_leaf.findings.get("unnamed_hca") == 1
    assert sum(b.findings.get("host_not_in_dcim", 0) for b in d.boxes) == 1
    assert d.fabric_wide == {"no_switches": 1}
    assert d.marked() == Counter(f.kind for f in model.findings + extra)


def test_svg_is_byte_stable_and_names_every_finding_kind() -> None:
    d = layout(h100_model(), title="h100")
    first, second = topology_svg(d), topology_svg(d)
    assert first == second
    texts = svg_texts(first)
    for kind, n in d.findings_by_kind.items():
        assert any(t.strip().startswith(f"{kind}: {n} (") for t in texts), kind
    assert "ib-spine-01" in texts
    png = topology_png(d)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) <= MAX_PNG_BYTES


def test_empty_topology_draws_an_empty_picture_that_says_so() -> None:
    d = layout(TopologyModel(switches=(), hosts=(), domains=(), links=(), findings=()))
    assert (d.boxes, d.edges, d.findings_by_kind) == ((), (), {})
    assert "findings: none" in svg_texts(topology_svg(d))


def synthetic(blocks: int = 512, rails: int = 8, spines: int = 512, cores: int = 128) -> TopologyModel:
    """4,736 switches (4,096 leaves in 512 blocks, 512 spines, 128 cores), 4 hosts a block."""
    leaf = [SwitchOut(id=f"L{b}.{r}", name=f"leaf-b{b:03d}-r{r}", fabric="ib", identity_kind="node_guid",
                      tier=Tier.LEAF, tier_reason="t") for b in range(blocks) for r in range(rails)]  # fmt: skip
    spine = [SwitchOut(id=f"S{s}", name=f"spine-{s:03d}", fabric="ib", identity_kind="node_guid", tier=Tier.SPINE,
                       tier_reason="t") for s in range(spines)]  # fmt: skip
    core = [SwitchOut(id=f"C{c}", name=f"core-{c:03d}", fabric="ib", identity_kind="node_guid", tier=Tier.CORE,
                      tier_reason="t") for c in range(cores)]  # fmt: skip
    domains = [DomainOut(level="block", id=f"blk-{b}", name=f"leaf-b{b:03d}-r[0-{rails - 1}]", hosts=4,
                         members=tuple(f"L{b}.{r}" for r in range(rails)), design_size=None)
               for b in range(blocks)]  # fmt: skip
    hosts = [HostOut(name=f"h{b:03d}-{i}", role="compute", role_reason="", block=f"blk-{b}",
                     hcas=tuple(HcaOut(guid=f"g{b}.{i}.{r}", hca=None, rail=None, leaf=f"L{b}.{r}", leaf_port=str(i),
                                       attribution="node_description") for r in range(rails)))
             for b in range(blocks) for i in range(4)]  # fmt: skip
    links = [LinkOut(a=PortRef(device_id=s.id, port="40"), b=PortRef(device_id=f"S{n % spines}", port=str(n)),
                     kind="ib", speed_gbps=400.0, width="4x", evidence=("ib",), both_sides=True)
             for n, s in enumerate(leaf)]  # fmt: skip
    findings = (
        Finding(kind="degraded_leaf", severity=Severity.WARNING, message="m", devices=("L7.1", "S3")),
        Finding(kind="miscabled_port", severity=Severity.ERROR, message="m", devices=("g300.2.5",)),
    )
    return TopologyModel(switches=(*leaf, *spine, *core), hosts=tuple(hosts), domains=tuple(domains),
                         links=tuple(links), findings=findings)  # fmt: skip


def test_4736_switches_are_aggregated_into_rows_that_fit() -> None:
    model = synthetic()
    assert len(model.switches) == 4736
    d = layout(model)
    assert sorted(switch_boxes(d)) == sorted(s.id for s in model.switches)
    rows = Counter((b.fabric, b.y) for b in d.boxes)
    assert max(rows.values()) <= MAX_PER_ROW
    assert {b.tier for b in d.boxes if b.kind == "switches"} == {"leaf", "spine", "core"}
    leaf_boxes = [b for b in d.boxes if b.tier == "leaf"]
    assert {b.label for b in leaf_boxes} == {"32 blocks"} and {b.detail for b in leaf_boxes} == {"256 leaves"}
    assert {b.label for b in d.boxes if b.kind == "hosts"} == {"128 hosts"}
    assert d.marked() == {"degraded_leaf": 1, "miscabled_port": 1} and not d.fabric_wide
    assert len(d.edges) <= MAX_PER_ROW * MAX_PER_ROW


# --- gpufabric topology show --svg ----------------------------------------------------------


@pytest.fixture
def stored_model(monkeypatch: pytest.MonkeyPatch) -> TopologyModel:
    """The CLI without a warehouse: `_current` and the GPU map return a derived model."""
    model = h100_model()
    doc = model.to_json(version=3)
    monkeypatch.setattr(cli_topology, "_current", lambda version: (model, doc, False))
    monkeypatch.setattr(cli_topology, "_gpu_maps", lambda: {})
    return model


def test_show_svg_writes_the_diagram_and_names_the_findings(tmp_path: Path, stored_model: TopologyModel) -> None:
    out = tmp_path / "fabric.svg"
    shown = CliRunner().invoke(cli_topology.app, ["show", "--svg", str(out)])
    assert shown.exit_code == 0, shown.output
    assert f"diagram written to {out}" in shown.output
    texts = svg_texts(out.read_bytes())
    assert any(t.startswith("topology version 3 (") for t in texts)
    for kind in ("miscabled_port", "degraded_leaf", "host_missing_from_fabric"):
        assert any(kind in t for t in texts), kind
    title = f"topology version 3 ({stored_model.content_hash()[:12]})"
    assert out.read_bytes() == topology_svg(layout(stored_model, title=title))  # the same picture, byte for byte


def test_show_svg_to_an_unwritable_path_is_one_clear_error(tmp_path: Path, stored_model: TopologyModel) -> None:
    shown = CliRunner().invoke(cli_topology.app, ["show", "--svg", str(tmp_path / "missing" / "fabric.svg")])
    assert shown.exit_code == 1
    assert "cannot write" in shown.output and "No such file or directory" in shown.output
