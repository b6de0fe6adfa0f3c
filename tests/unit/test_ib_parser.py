"""ibnetdiscover parser: real fixtures, generated text for shipped specs, and every kind of bad input."""

from __future__ import annotations

import io
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.ibnetdiscover import IbNode, IbPort, iter_records, parse_file, parse_ibnetdiscover, read_lines
from core.infiniband import HcaFilter
from core.models import LinkKind
from core.quality import CollectionStatus, Quarantined
from simulator.generator import GroundTruth, generate
from simulator.ib.ibnetdiscover import render_lines
from simulator.spec import ClusterSpec, load_spec
from simulator.specs import resolve_spec_path
from tests.conftest import FIXTURES

LinkKey = tuple[str, str, str, str, float | None, str | None]


def truth_links(truth: GroundTruth) -> set[LinkKey]:
    return {
        (lk.a.device_id, lk.a.port, lk.b.device_id, lk.b.port, lk.speed_gbps, lk.width)
        for lk in truth.links
        if lk.kind is LinkKind.IB
    }


def parsed_links(lines: list[str]) -> set[LinkKey]:
    fabric = parse_ibnetdiscover(lines)
    out = set()
    for lk in fabric.compute_links():
        link = lk.to_link()
        out.add((link.a.device_id, link.a.port, link.b.device_id, link.b.port, link.speed_gbps, link.width))
    return out


def test_adapters_only_output_is_a_clear_no_switches_result() -> None:
    fabric = parse_file(FIXTURES / "topograph" / "example-bad.out")
    assert [n.guid for n in fabric.nodes] == ["0xb8e92403009ca838"]
    assert fabric.nodes[0].description == "dgx-gb200-n01-c1 HCA-1"
    assert fabric.nodes[0].system_guid == "0xb8e92403009ca838"
    assert fabric.switches == [] and fabric.links == [] and fabric.quarantined == []
    assert fabric.problem is not None and fabric.problem.startswith("no switches in the ibnetdiscover output")
    assert fabric.status is CollectionStatus.NO_DATA
    assert [f.kind for f in fabric.findings] == ["no_switches"]
    assert fabric.classes["0xb8e92403009ca838"].hostname == "dgx-gb200-n01-c1"


def test_generated_text_reproduces_ground_truth_for_ndr_specs() -> None:
    for name in ("h100-1su", "h100-4su"):
        truth = generate(load_spec(resolve_spec_path(name)))
        lines = list(render_lines(truth))
        fabric = parse_ibnetdiscover(lines)
        assert fabric.quarantined == [] and fabric.status is CollectionStatus.OK
        assert parsed_links(lines) == truth_links(truth)
        # 4x NDR = 400 Gb/s on every compute link; one SHARP aggregation node per Quantum-2 switch on port 65
        assert {lk.speed for lk in fabric.compute_links()} == {"NDR"}
        switches = len(truth.switches(fabric="ib"))
        internal = [lk for lk in fabric.links if lk.internal]
        assert len(internal) == switches
        assert {fabric.classes[g].node_class.value for lk in internal for g in (lk.a_guid, lk.b_guid)} == {
            "switch",
            "sharp_aggregation_node",
        }
        hosts = {c.hostname for c in fabric.classes.values() if c.node_class.value == "compute_hca"}
        assert hosts == {h.name for h in truth.hosts()}
        names = {c.switch_name for c in fabric.classes.values() if c.node_class.value == "switch"}
        assert names == {s.name for s in truth.switches(fabric="ib")}


def test_unnamed_hca_defect_is_a_finding_not_a_host() -> None:
    data = yaml.safe_load(resolve_spec_path("h100-1su").read_text())
    data["defects"] = {"unnamed_hcas": ["dgx002:mlx5_3"]}
    truth = generate(ClusterSpec.model_validate(data))
    fabric = parse_ibnetdiscover(list(render_lines(truth)))
    unnamed = truth.defects_of("unnamed_hca")[0].devices[0]
    assert fabric.classes[unnamed].node_class.value == "unnamed_hca"
    assert [f.devices for f in fabric.findings if f.kind == "unnamed_hca"] == [(unnamed,)]
    # the cable is there, but it leads to no known host: it is left out of the compute links
    assert truth_links(truth) - parsed_links(list(render_lines(truth))) == {
        k for k in truth_links(truth) if unnamed in (k[0], k[2])
    }


MESSY = """\
# a hand-made fabric with every kind of non-compute node real clusters have
vendid=0x2c9
devid=0xd2f0
sysimgguid=0xb83fd20300000001
switchguid=0xb83fd20300000001(b83fd20300000001)
Switch\t65 "S-b83fd20300000001"\t\t# "MF0;ib-leaf-01:MQM9700/U1" enhanced port 0 lid 1 lmc 0
[1]\t"H-b83fd20300000011"[1](b83fd20300000011) \t\t# "dgx001 mlx5_0" lid 11 4xNDR
[2]\t"H-b83fd20300000012"[1](b83fd20300000012) \t\t# "" lid 12 4xNDR
[3]\t"H-b83fd20300000013"[1](b83fd20300000013) \t\t# "localhost mlx5_0" lid 13 4xNDR
[4]\t"H-b83fd20300000014"[1](b83fd20300000014) \t\t# "ufm-01 mlx5_0" lid 14 4xNDR
[5]\t"H-b83fd20300000015"[1](b83fd20300000015) \t\t# "ddn-oss01 mlx5_1" lid 15 4xNDR
[6]\t"H-b83fd20300000016"[1](b83fd20300000016) \t\t# "mgmt01 mlx5_0" lid 16 2xHDR
[7]\t"H-b83fd20300000017"[1](b83fd20300000017) \t\t# "MT4129 ConnectX7   Mellanox Technologies" lid 17 4xNDR
[8]\t"H-b83fd20300000018"[1](b83fd20300000018) \t\t# "gpu-knöten-ä01 HCA-1" lid 18 4xNDR
[9]\t"H-b83fd20300000019"[1](b83fd20300000019) \t\t# "dgx009 mlx5_0" lid 19 4xNDR
[65]\t"H-b83fd20300000099"[1](b83fd20300000099) \t\t# "Mellanox Technologies Aggregation Node" lid 99 4xNDR

Ca\t1 "H-b83fd20300000011"\t\t# "dgx001 mlx5_0"
[1](b83fd20300000011) \t"S-b83fd20300000001"[1]\t\t# lid 11 lmc 0 "MF0;ib-leaf-01:MQM9700/U1" lid 1 4xNDR

Ca\t1 "H-b83fd20300000012"\t\t# ""
[1](b83fd20300000012) \t"S-b83fd20300000001"[2]\t\t# lid 12 lmc 0 "MF0;ib-leaf-01:MQM9700/U1" lid 1 4xNDR

Ca\t1 "H-b83fd20300000013"\t\t# "localhost mlx5_0"
[1](b83fd20300000013) \t"S-b83fd20300000001"[3]\t\t# lid 13 lmc 0 "MF0;ib-leaf-01:MQM9700/U1" lid 1 4xNDR

Ca\t1 "H-b83fd20300000014"\t\t# "ufm-01 mlx5_0"
[1](b83fd20300000014) \t"S-b83fd20300000001"[4]\t\t# lid 14 lmc 0 "MF0;ib-leaf-01:MQM9700/U1" lid 1 4xNDR

Ca\t1 "H-b83fd20300000015"\t\t# "ddn-oss01 mlx5_1"
[1](b83fd20300000015) \t"S-b83fd20300000001"[5]\t\t# lid 15 lmc 0 "MF0;ib-leaf-01:MQM9700/U1" lid 1 4xNDR

Ca\t1 "H-b83fd20300000016"\t\t# "mgmt01 mlx5_0"
[1](b83fd20300000016) \t"S-b83fd20300000001"[6]\t\t# lid 16 lmc 0 "MF0;ib-leaf-01:MQM9700/U1" lid 1 2xHDR

Ca\t1 "H-b83fd20300000017"\t\t# "MT4129 ConnectX7   Mellanox Technologies"
[1](b83fd20300000017) \t"S-b83fd20300000001"[7]\t\t# lid 17 lmc 0 "MF0;ib-leaf-01:MQM9700/U1" lid 1 4xNDR

Ca\t1 "H-b83fd20300000018"\t\t# "gpu-knöten-ä01 HCA-1"
[1](b83fd20300000018) \t"S-b83fd20300000001"[8]\t\t# lid 18 lmc 0 "MF0;ib-leaf-01:MQM9700/U1" lid 1 4xNDR

Ca\t1 "H-b83fd20300000019"\t\t# "dgx009 mlx5_0"
[1](b83fd20300000019) \t"S-b83fd20300000001"[9]\t\t# lid 19 lmc 0 "MF0;ib-leaf-01:MQM9700/U1" lid 1 4xNDR

Ca\t1 "H-b83fd20300000099"\t\t# "Mellanox Technologies Aggregation Node"
[1](b83fd20300000099) \t"S-b83fd20300000001"[65]\t\t# lid 99 lmc 0 "MF0;ib-leaf-01:MQM9700/U1" lid 1 4xNDR
"""


def _g(n: int) -> str:
    return f"0xb83fd203000000{n:02d}"


def test_messy_fabric_is_classified_explicitly() -> None:
    fabric = parse_ibnetdiscover(MESSY.splitlines())
    assert fabric.quarantined == []
    classes = {g: c.node_class.value for g, c in fabric.classes.items()}
    assert classes == {
        _g(1): "switch",
        _g(11): "compute_hca",
        _g(12): "unnamed_hca",
        _g(13): "default_hostname",
        _g(14): "ufm_server",
        _g(15): "storage",
        _g(16): "management",
        _g(17): "unnamed_hca",
        _g(18): "compute_hca",
        _g(19): "compute_hca",
        _g(99): "sharp_aggregation_node",
    }
    assert fabric.classes[_g(18)].hostname == "gpu-knöten-ä01" and fabric.classes[_g(18)].hca == "HCA-1"
    assert fabric.classes[_g(1)].switch_name == "ib-leaf-01"
    assert fabric.classes[_g(1)].switch_model == "MQM9700"
    assert sorted((lk.a_port, lk.b_guid) for lk in fabric.compute_links()) == [
        (1, _g(11)),
        (8, _g(18)),
        (9, _g(19)),
    ]
    internal = [lk for lk in fabric.links if lk.internal]
    assert [(lk.a_guid, lk.a_port, lk.b_guid) for lk in internal] == [(_g(1), 65, _g(99))]
    assert all(lk.both_sides for lk in fabric.links) and len(fabric.links) == 10
    mgmt = next(p for p in fabric.ports if p.node_guid == _g(16))
    assert (mgmt.width, mgmt.speed, mgmt.speed_gbps, mgmt.lid, mgmt.peer_lid) == ("2x", "HDR", 100.0, 16, 1)
    kinds = sorted(f.kind for f in fabric.findings)
    assert kinds == sorted(
        [
            "unnamed_hca",
            "default_hostname",
            "ufm_server",
            "storage",
            "management",
            "unnamed_hca",
            "sharp_aggregation_node",
        ]
    )
    # a site filter excludes a host the built-in rules took for compute
    site = parse_ibnetdiscover(MESSY.splitlines(), hca_filter=HcaFilter.from_mapping({"exclude": [r"^dgx009$"]}))
    assert site.classes[_g(19)].node_class.value == "excluded"
    assert len(site.compute_links()) == 2


def _h100_1su_lines() -> list[str]:
    return list(render_lines(generate(load_spec(resolve_spec_path("h100-1su")))))


def test_truncated_output_quarantines_dangling_ports_and_keeps_the_rest() -> None:
    lines = _h100_1su_lines()
    first_ca = next(i for i, line in enumerate(lines) if line.startswith("Ca\t"))
    cut = first_ca + 4 * 7  # 4 whole CA blocks (caguid/vendid/devid/sysimgguid lines + header + port + blank)
    text = "\n".join(lines)[: len("\n".join(lines[:cut])) + 40]  # and 40 characters of the next block
    fabric = parse_ibnetdiscover(text.splitlines())
    cas = [n for n in fabric.nodes if n.node_type == "ca"]
    assert len(cas) == 5  # the fifth CA's header made it, its port line did not
    dangling = [q for q in fabric.quarantined if "a GUID with no node block" in q.reason]
    # every switch port facing an adapter that never appeared (256 - 5 HCAs, 12 aggregation nodes)
    assert len(dangling) == 256 - 5 + 12
    cut_short = [q for q in fabric.quarantined if q not in dangling]
    assert [q.reason.split(" (")[0] for q in cut_short] == ["node description cut short"]
    assert fabric.classes[cas[-1].guid].node_class.value == "unnamed_hca"
    assert fabric.status is CollectionStatus.PARTIAL
    # 512 compute links (256 host + 256 leaf-spine) minus the 251 dangling and the cut adapter's
    assert len(fabric.compute_links()) == 512 - (256 - 5) - 1


def test_cut_mid_line_and_garbage_are_quarantined_with_line_numbers() -> None:
    lines = MESSY.splitlines()
    lines[6] = lines[6][:30]  # [1] "H-b83fd2030000... cut in the middle
    lines.insert(3, "this is not ibnetdiscover output")
    fabric = parse_ibnetdiscover(lines)
    reasons = {(q.location, q.reason.split(" (")[0]) for q in fabric.quarantined}
    assert ("line 4", "unrecognised line") in reasons
    assert ("line 8", "unrecognised line") in reasons  # the cut line is no longer a port line
    # the switch lost its port-1 line, but the CA still reports the link: kept, one-sided
    one_sided = [lk for lk in fabric.links if not lk.both_sides]
    assert [(lk.a_guid, lk.a_port, lk.b_guid, lk.b_port) for lk in one_sided] == [(_g(1), 1, _g(11), 1)]


def test_duplicated_guid_block_is_quarantined_whole() -> None:
    lines = MESSY.splitlines()
    dup = ["", 'Ca\t1 "H-b83fd20300000011"\t\t# "imposter mlx5_0"', lines[-1].replace("[65]", "[10]")]
    fabric = parse_ibnetdiscover(lines + dup)
    assert [q.reason.split(":")[0] for q in fabric.quarantined] == ["duplicate node GUID 0xb83fd20300000011"]
    assert fabric.quarantined[0].context == {"lines": 2}
    assert "imposter" in str(fabric.quarantined[0].payload)
    assert fabric.classes[_g(11)].hostname == "dgx001"  # the first block wins
    assert len(fabric.links) == 10


def test_port_to_unknown_guid_and_bad_ports() -> None:
    lines = MESSY.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("[9]")))
    lines.insert(at + 1, '[10]\t"H-b83fd203000000aa"[1](b83fd203000000aa) \t\t# "ghost mlx5_0" lid 50 4xNDR')
    lines.insert(at + 1, '[70]\t"H-b83fd203000000ab"[1](b83fd203000000ab) \t\t# "x mlx5_0" lid 51 4xNDR')
    lines.insert(at + 1, '[9]\t"H-b83fd203000000ac"[1](b83fd203000000ac) \t\t# "y mlx5_0" lid 52 4xNDR')
    lines.insert(at + 1, '[11]\t"H-b83fd203000000ad"[1](b83fd203000000ad) \t\t# "z mlx5_0" lid 53 4xQQR')
    fabric = parse_ibnetdiscover(lines)
    reasons = sorted(q.reason for q in fabric.quarantined)
    assert reasons == [
        "port 0xb83fd20300000001[10] points at 0xb83fd203000000aa[1], a GUID with no node block "
        "(truncated output, or a node that vanished mid-discovery)",
        "port 70 is outside 0xb83fd20300000001's 65 ports",
        "port 9 of 0xb83fd20300000001 listed twice",
        "unknown link rate 4xQQR",
    ]
    assert len(fabric.links) == 10


def test_non_utf8_description_is_kept_escaped_and_recorded(tmp_path: Path) -> None:
    raw = MESSY.encode("utf-8").replace("gpu-knöten-ä01 HCA-1".encode(), b"gpu-kn\xf6ten01 HCA-1")
    path = tmp_path / "latin1.out"
    path.write_bytes(raw)
    fabric = parse_file(path)
    node = next(n for n in fabric.nodes if n.guid == _g(18))
    assert node.description == "gpu-kn\\xf6ten01 HCA-1"
    assert [q.reason for q in fabric.quarantined] == [
        "node description is not valid UTF-8: node kept with the bytes escaped"
    ]
    assert fabric.classes[_g(18)].hostname == "gpu-kn\\xf6ten01"
    assert len(fabric.links) == 10


def test_overlong_line_is_clipped_not_held() -> None:
    raw = MESSY.encode() + b"x" * 300_000 + b"\n" + b"more garbage\n"
    items = list(read_lines(io.BytesIO(raw), max_line=1024))
    assert [len(t) for t, clipped, _ in items if clipped] == [1024]
    fabric = parse_ibnetdiscover(items)
    assert [q.reason.split(" (")[0] for q in fabric.quarantined] == [
        "line longer than 65536 bytes",
        "unrecognised line",
    ]


def _synthetic(switches: int) -> Iterator[str]:
    """A big fabric, produced lazily: switches with 64 ports each to CAs that do not appear."""
    for s in range(switches):
        guid = f"b83fd2031{s:07x}"
        yield f"switchguid=0x{guid}({guid})"
        yield f'Switch\t64 "S-{guid}"\t\t# "MF0;ib-leaf-{s}:MQM9700/U1" enhanced port 0 lid {s + 1} lmc 0'
        for p in range(1, 65):
            peer = f"b83fd2032{s:05x}{p:02x}"
            yield f'[{p}]\t"H-{peer}"[1]({peer}) \t\t# "node{s:06d}-{p:02d} mlx5_0" lid {p} 4xNDR'
        yield ""


def test_streaming_keeps_memory_far_below_input_size() -> None:
    # ~2 MB of output fed lazily: the record stream keeps only the node GUIDs it has seen, so the
    # peak stays a small fraction of the input (a 500 MB file behaves the same, only slower).
    switches = 360
    size = 0
    nodes = ports = 0
    tracemalloc.start()
    try:

        def counted() -> Iterator[str]:
            nonlocal size
            for line in _synthetic(switches):
                size += len(line) + 1
                yield line

        for rec in iter_records(counted()):
            if isinstance(rec, IbNode):
                nodes += 1
            elif isinstance(rec, IbPort):
                ports += 1
            else:
                assert isinstance(rec, Quarantined)
                raise AssertionError(rec.reason)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (nodes, ports) == (switches, switches * 64)
    assert size > 2_000_000
    assert peak < size / 20, (peak, size)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=120), max_size=30), st.integers(min_value=0, max_value=60))
def test_arbitrary_input_never_crashes(garbage: list[str], cut: int) -> None:
    lines = MESSY.splitlines()
    mixed = lines[:cut] + garbage + lines[cut:]
    fabric = parse_ibnetdiscover(mixed)
    assert len(fabric.nodes) <= 11
    for q in fabric.quarantined:
        assert q.reason
