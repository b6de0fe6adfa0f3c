"""Real devices' LLDP output (../shared/fixtures/vendor-lldp: EOS, NX-OS, Junos, IOS-XR, Cumulus, in
JSON and XML) through the production parse path -- ``connectors.ssh.parsers.parse_output`` with the
``CommandSpec`` the SSH collector would use -- compared neighbour by neighbour with each case's
``expected.yaml``. Cases are found by globbing the folder, so a capture dropped there is tested.

The expected values are spelled as the device spelled them (SOURCE.txt, "Conventions"); this test
reads them with its own small tables (subtype words, MAC digits), not with the parser's.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.lldp_capture import MAX_SNMP_CAPTURE_BYTES, CaptureFormatError, read_capture
from connectors.ssh.parsers import MAX_OUTPUT_BYTES, parse_output
from connectors.ssh.platforms import CAPTURE_FORMATS, command_for
from core.lldp import LldpNeighbor
from core.quality import CollectionStatus

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "vendor-lldp"
CASES = sorted(FIXTURES.glob("*/*/expected.yaml"))
FORMAT_OF = {
    ("arista_eos", "json"): "eos-json",
    ("cisco_nxos", "json"): "nxos-json",
    ("juniper_junos", "json"): "junos-json",
    ("juniper_junos", "xml"): "junos-xml",
    ("cisco_xr", "xml"): "iosxr-xml",
    ("cumulus", "json"): "cumulus-json",
}

# LLDP-MIB numbers of the subtype words the devices print (802.1AB LldpChassisIdSubtype / LldpPortIdSubtype).
CHASSIS_WORDS = {"macaddress": 4, "mac address": 4, "mac": 4, "locally assigned": 7, "local": 7,
                 "interface name": 6, "network address": 5, "chassis component": 1}  # fmt: skip
PORT_WORDS = {"macaddress": 3, "mac address": 3, "mac": 3, "locally assigned": 7, "local": 7, "interface name": 5,
              "interfacename": 5, "ifname": 5, "interface alias": 1, "ifalias": 1}  # fmt: skip
MAC_CHASSIS, MAC_PORT = 4, 3


def _number(words: dict[str, int], spelled: Any) -> int | None:
    if spelled is None:
        return None
    text = str(spelled).strip().lower()
    return int(text) if text.isdigit() else words[text]


def _mac_bytes(text: str) -> bytes:
    """A MAC as printed: colon/dash pairs, or Cisco dotted form = three 16-bit groups."""
    if "." in text:
        return bytes.fromhex("".join(g.zfill(4) for g in text.split(".")))
    return bytes.fromhex(text.replace(":", "").replace("-", ""))


def _id(subtype: int | None, text: str | None, mac: int) -> Any:
    if text is None:
        return None
    return _mac_bytes(text) if subtype == mac else text


def expected_set(case: dict[str, Any]) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for n in case["neighbours"]:
        cs, ps = (
            _number(CHASSIS_WORDS, n["remote_chassis_id_subtype"]),
            _number(PORT_WORDS, n["remote_port_id_subtype"]),
        )
        out[
            (
                n["local_interface"],
                n["remote_system_name"],
                cs,
                _id(cs, n["remote_chassis_id"], MAC_CHASSIS),
                ps,
                _id(ps, None if n["remote_port_id"] is None else str(n["remote_port_id"]), MAC_PORT),
                n.get("remote_port_description"),
            )
        ] += 1
    return out


def landed_set(neighbors: list[LldpNeighbor], case: dict[str, Any]) -> Counter[tuple[Any, ...]]:
    """Where the device printed no subtype (Junos brief replies), the parser infers one from the
    id's form; those subtypes are left out of the comparison (None on both sides)."""
    out: Counter[tuple[Any, ...]] = Counter()
    unnamed = {n["local_interface"] for n in case["neighbours"] if n["remote_port_id_subtype"] is None}
    for n in neighbors:
        chassis = n.chassis_id_raw if n.chassis_id_subtype == MAC_CHASSIS else n.chassis_id
        port = n.port_id_raw if n.port_id_subtype == MAC_PORT else n.port_id
        port_subtype = None if n.local_port_vendor in unnamed else n.port_id_subtype
        out[(n.local_port_vendor, n.sys_name, n.chassis_id_subtype, chassis, port_subtype, port, n.port_desc)] += 1
    return out


def _load(path: Path) -> tuple[dict[str, Any], str, Any]:
    case = yaml.safe_load(path.read_text())
    raw = (path.parent / case["raw_file"]).read_text()
    spec = command_for(*CAPTURE_FORMATS[FORMAT_OF[(case["vendor"], case["format"])]])
    return case, raw, spec


def test_the_fixture_folder_holds_every_vendor_and_format() -> None:
    assert {tuple(p.relative_to(FIXTURES).parts[:1]) for p in CASES} == {
        ("arista_eos",), ("cisco_nxos",), ("juniper_junos",), ("cisco_xr",), ("cumulus",)
    }  # fmt: skip
    assert len(CASES) >= 16


@pytest.mark.parametrize("path", CASES, ids=lambda p: "/".join(p.parent.parts[-2:]))
def test_capture_yields_exactly_its_expected_neighbours(path: Path) -> None:
    case, raw, spec = _load(path)
    parsed = parse_output(raw, spec, "dut")
    assert [q.reason for q in parsed.quarantined] == []
    assert len(parsed.neighbors) == case["neighbour_count"]
    assert landed_set(parsed.neighbors, case) == expected_set(case)


def test_nxos_null_port_description_is_none_not_the_word() -> None:
    case, raw, spec = _load(FIXTURES / "cisco_nxos/harvest-nxapi-envelope-13-neighbours/expected.yaml")
    parsed = parse_output(raw, spec, "dut")
    assert "null" in raw and not [n for n in parsed.neighbors if n.port_desc == "null"]
    nulls = [n for n in case["neighbours"] if n.get("remote_port_description_raw") == "null"]
    assert nulls and all(n.get("remote_port_description") is None for n in nulls)


def test_junos_detail_json_lands_interface_names_not_ifindexes() -> None:
    _case, raw, spec = _load(FIXTURES / "juniper_junos/suzieq-vqfx-detail-json/expected.yaml")
    locals_ = {n.local_port_vendor for n in parse_output(raw, spec, "dut").neighbors}
    assert locals_ == {"xe-0/0/0", "xe-0/0/1", "xe-0/0/2", "xe-0/0/3"}


def test_qfx_table_without_port_ids_lands_every_neighbour_with_no_port_id() -> None:
    _case, raw, spec = _load(FIXTURES / "juniper_junos/suzieq-qfx-brief-json-no-port-id/expected.yaml")
    parsed = parse_output(raw, spec, "dut")
    assert len(parsed.neighbors) == 18 and parsed.quarantined == []
    assert {n.port_id for n in parsed.neighbors} == {None}
    assert "L2 Core: <ar01.jfk00> [40Gbps]" in {n.port_desc for n in parsed.neighbors}  # entities decoded


def test_short_eos_chassis_id_is_read_as_the_mac_it_abbreviates() -> None:
    _case, raw, spec = _load(FIXTURES / "arista_eos/napalm-issue903-short-chassis-id/expected.yaml")
    (n,) = parse_output(raw, spec, "dut").neighbors
    assert (n.chassis_id, n.port_id) == ("00:0c:29:7b:d2:a8", "00:0c:29:7b:d2:a8")


def test_nxos_summary_reads_device_id_as_the_system_name() -> None:
    _case, raw, spec = _load(FIXTURES / "cisco_nxos/suzieq-nxos93-summary-json-native/expected.yaml")
    parsed = parse_output(raw, spec, "dut")
    assert sorted((n.local_port, n.sys_name, n.chassis_id, n.port_id) for n in parsed.neighbors)[0] == (
        "Ethernet1/1", "leaf01", None, "Ethernet1/1"
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------
# variants of the documented formats that no capture here shows, and hostile input
# ------------------------------------------------------------------------------------------------


def test_nxos_one_row_table_collapsed_to_an_object_and_summary_mac_device_id() -> None:
    row = {"chassis_type": "Mac Address", "chassis_id": "0011.2233.4455", "l_port_id": "Eth1/9"}
    doc = {"TABLE_nbor": {"ROW_nbor": {**row, "port_type": "Interface Name", "port_id": "swp1"}}}
    (n,) = parse_output(json.dumps(doc), command_for("cisco_nxos", "summary"), "dut").neighbors
    assert (n.chassis_id, n.sys_name, n.port_id) == ("00:11:22:33:44:55", None, "swp1")


def test_nxapi_error_envelope_is_quarantined_whole_with_its_message() -> None:
    doc = {"ins_api": {"outputs": {"output": {"code": "400", "msg": "Input CLI command error"}}}}
    parsed = parse_output(json.dumps(doc), command_for("cisco_nxos"), "dut")
    assert parsed.neighbors == []
    assert [q.reason for q in parsed.quarantined] == [
        "unparseable 'show lldp neighbors detail | json' output: NX-API answered 400: 'Input CLI command error'"
    ]


def test_junos_xml_inside_rpc_reply_with_namespace() -> None:
    text = (
        '<rpc-reply xmlns:junos="http://xml.juniper.net/junos/19.4R0/junos">'
        '<lldp-neighbors-information xmlns="http://xml.juniper.net/junos/19.4R0/lldp-mtx" junos:style="brief">'
        "<lldp-neighbor-information><lldp-local-port-id>et-0/0/1</lldp-local-port-id>"
        "<lldp-remote-chassis-id-subtype>Mac address</lldp-remote-chassis-id-subtype>"
        "<lldp-remote-chassis-id>00:11:22:33:44:55</lldp-remote-chassis-id>"
        "<lldp-remote-system-name>spine1</lldp-remote-system-name></lldp-neighbor-information>"
        "</lldp-neighbors-information></rpc-reply>"
    )
    (n,) = parse_output(text, command_for("juniper_junos", "xml"), "dut").neighbors
    assert (n.local_port_vendor, n.chassis_id, n.port_id, n.sys_name) == (
        "et-0/0/1",
        "00:11:22:33:44:55",
        None,
        "spine1",
    )


def test_neighbour_with_no_id_and_no_name_is_quarantined_alone() -> None:
    doc = {"lldp-neighbors-information": [{"lldp-neighbor-information": [
        {"lldp-local-port-id": [{"data": "et-0/0/1"}], "lldp-remote-port-description": [{"data": "x"}]},
        {"lldp-local-port-id": [{"data": "et-0/0/2"}], "lldp-remote-system-name": [{"data": "leaf2"}]},
    ]}]}  # fmt: skip
    parsed = parse_output(json.dumps(doc), command_for("juniper_junos"), "dut")
    assert [n.sys_name for n in parsed.neighbors] == ["leaf2"]
    assert [q.reason for q in parsed.quarantined] == [
        "bad neighbour on et-0/0/1: no chassis id, no port id and no system name: nothing identifies the neighbour"
    ]


XML_BOMB = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>'
    "<lldp-neighbors-information>&lol2;</lldp-neighbors-information>"
)


@pytest.mark.parametrize(
    ("fmt", "text", "reason"),
    [
        ("junos-xml", XML_BOMB, "XML with a DOCTYPE/ENTITY declaration (devices never send one)"),
        ("junos-xml", "<lldp-neighbors-information><lldp-neighbor-inf", "not XML (unclosed token: line 1, column 28)"),
        ("iosxr-xml", "<Response><Get/></Response>", "no IOS-XR LLDP element in the XML"),
        ("junos-xml", "<foo/>", "no <lldp-neighbors-information> in the XML"),
        ("eos-json", '{"lldpNeighbors": {"Ethernet1": {"lldpNeighborInfo": [{"chassisId"', "not JSON ("),
        ("nxos-json", '{"TABLE_nbor_detail": {"ROW_nbor_detail": [{"chassis_id": "x"}]}}', "missing 'l_port_id'"),
        ("junos-json", "[" * 100_000 + "]" * 100_000, "not JSON ("),
        ("junos-json", '{"lldp-neighbors-information": 3}', "JSON is not"),
    ],
    ids=[
        "xml-entity-bomb",
        "xml-truncated",
        "xml-other-reply",
        "xml-wrong-root",
        "json-truncated",
        "json-missing-local-port",
        "json-deep-nesting",
        "json-wrong-shape",
    ],
)
def test_hostile_or_broken_output_is_quarantined_whole_with_its_reason(fmt: str, text: str, reason: str) -> None:
    spec = command_for(*CAPTURE_FORMATS[fmt])
    parsed = parse_output(text, spec, "dut")
    assert parsed.neighbors == []
    assert len(parsed.quarantined) == 1
    assert reason in parsed.quarantined[0].reason


def test_oversized_output_is_refused_before_parsing() -> None:
    text = '{"lldpNeighbors": {' + " " * (MAX_OUTPUT_BYTES + 1) + "}}"
    parsed = parse_output(text, command_for("arista_eos"), "dut")
    assert [q.reason for q in parsed.quarantined] == [
        f"output of {len(text.encode())} bytes exceeds the {MAX_OUTPUT_BYTES}-byte limit"
    ]


# ------------------------------------------------------------------------------------------------
# offline SNMP captures (connectors.lldp_capture): malformed, truncated and huge files
# ------------------------------------------------------------------------------------------------

SNMPREC_ROW = (
    "1.3.6.1.2.1.1.5.0|4|leaf1\n"
    "1.3.6.1.2.1.31.1.1.1.1.7|4|swp7\n"
    "1.0.8802.1.1.2.1.4.1.1.4.0.7.1|2|4\n"
    "1.0.8802.1.1.2.1.4.1.1.5.0.7.1|4x|3c6104000001\n"
    "1.0.8802.1.1.2.1.4.1.1.6.0.7.1|2|5\n"
    "1.0.8802.1.1.2.1.4.1.1.7.0.7.1|4|Ethernet1\n"
)


def test_snmprec_row_lands_and_unreadable_lines_are_quarantined_with_their_line_numbers() -> None:
    text = SNMPREC_ROW + "1.0.8802.1.1.2.1.4.1.1.9.0.7.1|4:numeric|x\nnot a line\n1.3.6.1.2.1.2.2.1.2.7|4x|zz\n"
    c = read_capture(text.encode(), "snmprec", "leaf1")
    assert [(n.local_port, n.chassis_id, n.port_id) for n in c.neighbors] == [
        ("swp7", "3c:61:04:00:00:01", "Ethernet1")
    ]
    assert [(q.location, q.reason) for q in c.quarantined] == [
        ("line 7", "unknown snmprec type '4:numeric' (variation modules are not captures)"),
        ("line 8", "not an OID|TYPE|VALUE line"),
        ("line 9", "type 4x: value is not hex"),
    ]
    assert c.status is CollectionStatus.PARTIAL


def test_truncated_snmprec_keeps_the_rows_it_holds_and_a_row_cut_in_half_lands_without_its_port_id() -> None:
    cut = SNMPREC_ROW[: SNMPREC_ROW.index("1.0.8802.1.1.2.1.4.1.1.7")]  # the file ends before lldpRemPortId
    (n,) = read_capture(cut.encode(), "snmprec", "leaf1").neighbors
    assert (n.chassis_id, n.port_id_subtype, n.port_id) == ("3c:61:04:00:00:01", 5, None)


@pytest.mark.parametrize(
    ("fmt", "data", "reason"),
    [
        ("snmprec", b"\xff\xfe\x00binary", "binary file: not UTF-8 at byte 0"),
        ("snmprec", b"", "no varbind of the system group, LLDP-MIB, LLDP-V2-MIB or IF-MIB in this snmprec file"),
        ("snmpwalk", b"garbage\n" * 3, "(3 unreadable lines, first: line 1: not an 'OID = TYPE: value' line"),
        ("snmpwalk", b"x" * (MAX_SNMP_CAPTURE_BYTES + 1), f"exceeds the {MAX_SNMP_CAPTURE_BYTES}-byte limit"),
    ],
    ids=["binary", "empty", "not-snmpwalk", "huge"],
)
def test_unusable_snmp_capture_is_quarantined_whole(fmt: str, data: bytes, reason: str) -> None:
    c = read_capture(data, fmt, "dut")
    assert c.neighbors == [] and c.status is CollectionStatus.INVALID
    (q,) = c.quarantined
    assert reason in q.reason and q.location == "file"


def test_snmpwalk_text_with_multiline_strings_and_hex() -> None:
    text = (
        '.1.3.6.1.2.1.1.5.0 = STRING: "leaf1"\n'
        '.1.3.6.1.2.1.31.1.1.1.1.7 = STRING: "swp7"\n'
        ".1.0.8802.1.1.2.1.4.1.1.4.0.7.1 = INTEGER: macAddress(4)\n"
        ".1.0.8802.1.1.2.1.4.1.1.5.0.7.1 = Hex-STRING: 3C 61 04 00 \n00 01 \n"
        ".1.0.8802.1.1.2.1.4.1.1.6.0.7.1 = INTEGER: 5\n"
        '.1.0.8802.1.1.2.1.4.1.1.7.0.7.1 = STRING: "Ethernet1"\n'
        '.1.0.8802.1.1.2.1.4.1.1.10.0.7.1 = STRING: "Arista Networks EOS\nversion 4.30"\n'
        ".1.0.8802.1.1.2.1.4.1.1.11.0.7.1 = No Such Instance currently exists at this OID\n"
    )
    c = read_capture(text.encode(), "snmpwalk", "leaf1")
    (n,) = c.neighbors
    assert (n.chassis_id, n.port_id, n.sys_desc) == (
        "3c:61:04:00:00:01",
        "Ethernet1",
        "Arista Networks EOS\nversion 4.30",
    )
    assert c.quarantined == []


def test_unknown_capture_format_lists_every_known_one() -> None:
    with pytest.raises(
        CaptureFormatError, match=r"unknown capture format 'xml'; known formats: eos-json, .*, snmpwalk$"
    ):
        read_capture(b"<x/>", "xml", "dut")


def test_cumulus_json0_and_json_layouts_give_the_same_neighbour() -> None:
    json0 = {"lldp": [{"interface": [{"name": "swp1", "rid": "1", "chassis": [{"id": [{"type": "mac",
             "value": "00:11:22:33:44:55"}], "name": [{"value": "spine1"}]}], "port": [{"id": [{"type": "ifname",
             "value": "swp9"}]}]}]}]}  # fmt: skip
    plain = {"lldp": {"interface": {"swp1": {"rid": "1", "chassis": {"spine1": {"id": {"type": "mac",
             "value": "00:11:22:33:44:55"}}}, "port": {"id": {"type": "ifname", "value": "swp9"}}}}}}  # fmt: skip
    a = read_capture(json.dumps(json0).encode(), "cumulus-json", "leaf").neighbors
    b = read_capture(json.dumps(plain).encode(), "cumulus-json", "leaf").neighbors
    assert a == b and [(n.local_port, n.sys_name, n.port_id) for n in a] == [("swp1", "spine1", "swp9")]
