"""Renderers: the Slurm outputs reproduce topograph's golden files for equivalent inputs, and the
JSON carries the documented contract."""

from __future__ import annotations

import json
from pathlib import Path

from core.infiniband import Classifier
from core.topology import (
    DcimNodeObs,
    IbLinkObs,
    IbNodeObs,
    NvlinkObs,
    Observations,
    TopologyConfig,
    block_sizes,
    derive,
    render_block,
    render_json,
    render_tree,
)
from tests.conftest import FIXTURES
from tests.unit.test_topology_support import observe, truth_with

GOLDEN = FIXTURES / "topograph"
RACKS = [f"{r}{h}" for r in range(1, 7) for h in (1, 2)]  # 11, 12, 21, ... 62


def _guid(n: int) -> str:
    return f"0x{0xB83FD20300000000 + n:016x}"


def _node(guid: str, node_type: str, description: str) -> IbNodeObs:
    c = Classifier().classify(node_type, description)
    return IbNodeObs(
        source="fabric", guid=guid, node_type=node_type, description=description, node_class=c.node_class.value,
        class_reason=c.reason, system_guid=guid, hostname=c.hostname, hca=c.hca, switch_name=c.switch_name,
    )  # fmt: skip


def _link(a: str, ap: int, b: str, bp: int) -> IbLinkObs:
    (ag, aport), (bg, bport) = sorted(((a, ap), (b, bp)))
    return IbLinkObs("fabric", ag, aport, bg, bport, "4x", "NDR", 400.0, True)


def oci_sim_fabric() -> Observations:
    """topograph's oci-sim test fabric as an IB discovery: one core, six spines, each over two
    leaves, each leaf with eight hosts (srv<rack>01..08)."""
    nodes, links = [_node(_guid(1), "switch", "MF0;core:MQM9700/U1")], []
    n = 100
    for s in range(1, 7):
        spine = _guid(10 + s)
        nodes.append(_node(spine, "switch", f"MF0;spine-{s}:MQM9700/U1"))
        links.append(_link(_guid(1), s, spine, 64))
        for j, rack in enumerate(RACKS[2 * (s - 1) : 2 * s], start=1):
            leaf = _guid(30 + 2 * s + j)
            nodes.append(_node(leaf, "switch", f"MF0;leaf-{s}-{j}:MQM9700/U1"))
            links.append(_link(spine, j, leaf, 64))
            for h in range(1, 9):
                n += 1
                nodes.append(_node(_guid(n), "ca", f"srv{rack}{h:02d} mlx5_0"))
                links.append(_link(leaf, h, _guid(n), 1))
    return Observations(ib_nodes=nodes, ib_links=links)


def test_tree_reproduces_topograph_golden_file() -> None:
    model = derive(oci_sim_fabric())
    assert model.findings == ()
    assert render_tree(model) == (GOLDEN / "expected.slinky-oci-sim-tree.conf").read_text()


def test_block_reproduces_topograph_golden_file() -> None:
    """NVLink domains nvl-<r>-<h> over racks rack<r><h>, eight nodes each (the DRA test input)."""
    dcim, nvl = [], []
    for rack in RACKS:
        for h in range(1, 9):
            dcim.append(DcimNodeObs("dcim", f"srv{rack}{h:02d}", rack=f"rack{rack}", role="compute"))
            nvl.append(NvlinkObs("nmx", f"srv{rack}{h:02d}", "nmx", f"nvl-{rack[0]}-{rack[1]}"))
    model = derive(Observations(dcim=dcim, nvlink=nvl))
    assert render_block(model) == (GOLDEN / "expected.slinky-dra-block.conf").read_text()


def test_block_sizes_rule_and_configured_sizes() -> None:
    units = [(f"b{i}", f"b{i}", [f"n{i}{j}" for j in range(8)]) for i in range(12)]
    assert block_sizes(units) == [8, 16, 32]
    assert block_sizes(units[:1]) == [8]
    assert block_sizes(units[:4]) == [8, 16]
    assert block_sizes(units, [16, 32]) == [16, 32]
    assert block_sizes([]) == []


def test_rail_optimised_fabrics_render_rail_groups_and_nvl72_racks(tmp_path: Path) -> None:
    h100 = derive(observe(truth_with("h100-4su"), tmp_path))
    tree = render_tree(h100).splitlines()
    assert tree[:4] == [
        "# switch.3.1=ib-spine-[01-16]",
        "SwitchName=switch.3.1 Switches=switch.2.1",
        "# switch.2.1=ib-spine-[01-16]",
        "SwitchName=switch.2.1 Switches=switch.1.[1-4]",
    ]
    assert tree[4:] == [
        line
        for su in range(1, 5)
        for line in (
            f"# switch.1.{su}=ib-leaf-su{su:02d}-r[0-7]",
            f"SwitchName=switch.1.{su} Nodes=dgx[{32 * su - 31:03d}-{32 * su:03d}]",
        )
    ]
    assert render_block(h100).splitlines()[-1] == "BlockSizes=32,64"
    gb = derive(observe(truth_with("gb200-nvl72"), tmp_path))
    block = render_block(gb).splitlines()
    assert block[1] == "BlockName=r01 Nodes=gb200-r01-t[01-18]"
    assert block[0].startswith("# r01=") and len(block) == 2 * 8 + 1
    assert block[-1] == "BlockSizes=18,36,72"


def test_invalid_domains_are_left_out_of_what_is_published(tmp_path: Path) -> None:
    model = derive(observe(truth_with("h100-4su"), tmp_path), TopologyConfig(design_sizes={"block": 31}))
    assert sum(not d.valid for d in model.domains) == 4
    assert render_tree(model) == ""
    assert {f.kind for f in model.findings} == {"invalid_domain"}
    assert all(not h.valid and "over the design size of 31" in (h.invalid_reason or "") for h in model.compute_hosts())


def test_json_contract_shape(tmp_path: Path) -> None:
    model = derive(observe(truth_with("h100-1su", miscabled_ports=1), tmp_path))
    doc = json.loads(render_json(model, version=3))
    assert list(doc) == [
        "schema_version", "version", "created_at", "content_hash", "switches", "hosts", "domains", "links",
        "findings", "inputs",
    ]  # fmt: skip
    assert doc["version"] == 3 and doc["schema_version"] == 1
    sw = doc["switches"][0]
    assert set(sw) == {"id", "name", "fabric", "identity", "tier", "tier_reason", "model", "uplinks", "downlinks",
                       "rail", "sources"}  # fmt: skip
    host = next(h for h in doc["hosts"] if h["name"] == "dgx001")
    assert host["role"] == "compute"
    assert set(host["domains"]) == {"block", "spine_group", "pod"} and all(host["domains"].values())
    assert host["nvlink"] == {"domain": "nvl-dgx001", "sub_domain": "nvl-dgx001", "method": "hgx_single_node"}
    assert len(host["hcas"]) == 8
    link = doc["links"][0]
    assert set(link) == {"a", "b", "kind", "speed_gbps", "width", "evidence"}
    assert set(link["evidence"]) >= {"sources", "both_sides"}
    (f,) = doc["findings"]
    assert (f["kind"], f["severity"], len(f["ports"])) == ("miscabled_port", "error", 4)
    assert len(f["evidence"]["hcas"]) == 2
