"""Vendor CLI LLDP output (EOS, NX-OS, Junos JSON and XML, IOS-XR XML, Cumulus, TextFSM tables)
under hostile input, through ``connectors.ssh.parsers.parse_output`` as the SSH collector and
``gpufabric ingest lldp`` call it.

Seeds are the real captures in ../shared/fixtures/vendor-lldp (JSON/XML) and ../shared/fixtures/ntc
(TextFSM). The contract (parsers.py docstring): ``parse_output`` never raises; output that cannot be
parsed at all is quarantined whole (one row, location ``output``, with command and platform);
otherwise every neighbour the output held (``rows``) either lands or is quarantined alone. When the
damage is confined to the inside of neighbour records, the number of records cannot change: so
``rows`` must still be the capture's neighbour count, or the output is quarantined whole.
"""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from connectors.ssh.parsers import CliParse, parse_output
from connectors.ssh.platforms import CAPTURE_FORMATS, CommandSpec, command_for
from tests.unit.fuzz_inputs import (
    JSON_VALUES,
    LONG_LINES,
    Mutated,
    MutatedJson,
    assert_quarantine_row,
    assert_storable_neighbor,
    mutated_bytes,
    mutated_json,
    paths,
)
from tests.unit.test_ssh_fixtures import RAWS, spec_for
from tests.unit.test_vendor_lldp_captures import FORMAT_OF  # case folder (vendor, format) -> --format

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "vendor-lldp"


class Case:
    def __init__(self, expected: Path) -> None:
        meta = yaml.safe_load(expected.read_text())
        self.name = "/".join(expected.parent.parts[-2:])
        self.raw = (expected.parent / meta["raw_file"]).read_bytes()
        self.count: int = meta["neighbour_count"]
        self.fmt = FORMAT_OF[(meta["vendor"], meta["format"])]
        self.spec: CommandSpec = command_for(*CAPTURE_FORMATS[self.fmt])

    def __repr__(self) -> str:
        return self.name


CASES = [Case(p) for p in sorted(FIXTURES.glob("*/*/expected.yaml"))]
JSON_CASES = [c for c in CASES if c.spec.format in ("json", "lldpctl")]
XML_CASES = [c for c in CASES if c.spec.format == "xml"]


def check(result: CliParse, spec: CommandSpec) -> None:
    """The outcome is exactly one of: the whole output quarantined, or rows that landed or were
    quarantined one by one, with nothing in between and nothing unstorable."""
    for q in result.quarantined:
        assert_quarantine_row(q, "dut")
    for n in result.neighbors:
        assert_storable_neighbor(n)
        assert n.chassis_id is not None or n.port_id is not None or n.sys_name, n  # something names the peer
    whole = [q for q in result.quarantined if q.location == "output"]
    if whole:
        assert result.neighbors == [] and result.quarantined == whole and len(whole) == 1
        assert (whole[0].context["command"], whole[0].context["platform"]) == (spec.command, spec.platform)
        return
    assert result.rows == len(result.neighbors) + len(result.quarantined)
    for q in result.quarantined:
        assert q.reason.startswith(("bad neighbour on ", "bad neighbour in interface entry ")), q.reason


def parse(data: str | bytes, spec: CommandSpec) -> CliParse:
    result = parse_output(data, spec, "dut")
    check(result, spec)
    return result


# --- where the neighbour records are in each format's JSON --------------------------------------


def record_paths(doc: Any, fmt: str) -> list[tuple[str | int, ...]]:
    """Paths of the neighbour records (mutations strictly below them cannot add or remove one)."""
    if fmt == "eos-json":
        return [
            ("lldpNeighbors", ifname, "lldpNeighborInfo", i)
            for ifname, body in doc["lldpNeighbors"].items()
            for i in range(len(body["lldpNeighborInfo"]))
        ]
    if fmt == "nxos-json":
        out: list[tuple[str | int, ...]] = []
        for path in paths(doc):
            if path and path[-1] in ("ROW_nbor_detail", "ROW_nbor"):
                value = doc
                for part in path:
                    value = value[part]
                out += [(*path, i) for i in range(len(value))] if isinstance(value, list) else [path]
        return out
    if fmt == "junos-json":
        records = doc["lldp-neighbors-information"][0]["lldp-neighbor-information"]
        return [("lldp-neighbors-information", 0, "lldp-neighbor-information", i) for i in range(len(records))]
    if fmt == "cumulus-json":
        if isinstance(doc["lldp"], list):
            return [("lldp", 0, "interface", i) for i in range(len(doc["lldp"][0]["interface"]))]
        return [("lldp", "interface", i) for i in range(len(doc["lldp"]["interface"]))]
    raise AssertionError(fmt)


def test_the_seeds_parse_to_their_neighbour_counts() -> None:
    # the baseline the count checks below rest on
    assert {c.fmt for c in CASES} == set(FORMAT_OF.values())
    for case in CASES:
        result = parse(case.raw, case.spec)
        assert (len(result.neighbors), result.quarantined, result.rows) == (case.count, [], case.count), case
        if case.spec.format != "xml":
            assert len(record_paths(json.loads(case.raw), case.fmt)) == case.count, case


@st.composite
def _inside_records(draw: st.DrawFn) -> tuple[Case, MutatedJson]:
    case = draw(st.sampled_from(JSON_CASES))
    doc = json.loads(case.raw)
    return case, draw(mutated_json(doc, within=record_paths(doc, case.fmt)))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_inside_records())
@example((  # Junos: a record without a local port raised ValueError out of parse_output
    next(c for c in JSON_CASES if c.fmt == "junos-json"),
    MutatedJson(json.dumps({"lldp-neighbors-information": [{"lldp-neighbor-information": [
        {"lldp-remote-system-name": [{"data": "leaf2"}]}]}]}), ["delete local port"], []),
))  # fmt: skip
@example((  # Junos: an lldp-index of superscript digits passed isdigit() and failed int()
    next(c for c in JSON_CASES if c.fmt == "junos-json"),
    MutatedJson(json.dumps({"lldp-neighbors-information": [{"lldp-neighbor-information": [
        {"lldp-local-port-id": [{"data": "et-0/0/1"}], "lldp-index": [{"data": "\u00b2"}],
         "lldp-remote-system-name": [{"data": "leaf2"}]}]}]}), ["retype lldp-index"], []),
))  # fmt: skip
@example((  # NX-OS: a NUL inside a JSON string lands in no text column
    next(c for c in JSON_CASES if c.fmt == "nxos-json"),
    MutatedJson(json.dumps({"TABLE_nbor_detail": {"ROW_nbor_detail": [
        {"l_port_id": "Eth1/1", "chassis_id": "a\u0000b", "port_id": "Eth1/2", "sys_name": "s\ud800"}]}}),
        ["retype chassis_id"], []),
))  # fmt: skip
def test_damage_inside_records_never_changes_the_record_count(case_and_mutated: tuple[Case, MutatedJson]) -> None:
    case, mutated = case_and_mutated
    result = parse(mutated.text, case.spec)
    if mutated.touched and not any(q.location == "output" for q in result.quarantined):
        assert result.rows == case.count, (result.rows, case.count)  # no record silently lost
        # a record is quarantined only when it was damaged
        touched = {path[: len(path) - 1] for path in mutated.touched}
        assert len(result.quarantined) <= len(touched)


@st.composite
def _anywhere(draw: st.DrawFn) -> tuple[Case, MutatedJson]:
    case = draw(st.sampled_from(JSON_CASES))
    return case, draw(mutated_json(json.loads(case.raw), max_steps=3))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_anywhere())
def test_damage_anywhere_in_the_json(case_and_mutated: tuple[Case, MutatedJson]) -> None:
    case, mutated = case_and_mutated
    parse(mutated.text, case.spec)


@st.composite
def _damaged_bytes(draw: st.DrawFn) -> tuple[Case, Mutated]:
    case = draw(st.sampled_from(CASES))
    return case, draw(mutated_bytes(case.raw))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_damaged_bytes())
def test_damaged_bytes(case_and_mutated: tuple[Case, Mutated]) -> None:
    case, mutated = case_and_mutated
    parse(mutated.data, case.spec)


# --- XML: elements deleted, repeated, emptied, given odd text ------------------------------------

_XML_TEXTS = st.sampled_from(["", " ", "-", "none", "0", "99999999999999999999999", "\u00b2", "aa:bb", "&amp;",
                              "x" * 100_000, "Ethernet1/1", "7", "\u202e"]) | st.text(max_size=10)  # fmt: skip


@st.composite
def _xml_mutated(draw: st.DrawFn) -> tuple[Case, str]:
    case = draw(st.sampled_from(XML_CASES))
    root = ET.fromstring(case.raw.lstrip(b"\xef\xbb\xbf"))
    for _ in range(draw(st.integers(1, 3))):
        elements = list(root.iter())
        target = draw(st.sampled_from(elements))
        parents = {child: parent for parent in root.iter() for child in parent}
        kind = draw(st.sampled_from(["text", "text", "delete", "repeat", "empty", "nest", "tail"]))
        if kind == "text":
            target.text = draw(_XML_TEXTS)
        elif kind == "delete" and target in parents:
            parents[target].remove(target)
        elif kind == "repeat" and target in parents:
            parents[target].append(copy.deepcopy(target))
        elif kind == "empty":
            for child in list(target):
                target.remove(child)
        elif kind == "nest":
            inner = ET.SubElement(target, draw(st.sampled_from(["Entry", "lldp-neighbor-information", "detail", "x"])))
            inner.text = draw(_XML_TEXTS)
        elif kind == "tail":
            target.tail = draw(_XML_TEXTS)
    return case, ET.tostring(root, encoding="unicode")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_xml_mutated())
def test_mutated_xml(case_and_text: tuple[Case, str]) -> None:
    case, text = case_and_text
    parse(text, case.spec)


# --- TextFSM tables (ntc-templates' real captures) -------------------------------------------------


@cache
def _ntc() -> list[tuple[str, bytes, CommandSpec]]:
    return [(raw.stem, raw.read_bytes(), spec_for(raw)) for raw in RAWS]


@st.composite
def _ntc_mutated(draw: st.DrawFn) -> tuple[str, Mutated, CommandSpec]:
    name, raw, spec = draw(st.sampled_from(_ntc()))
    return name, draw(mutated_bytes(raw, max_steps=2)), spec


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ntc_mutated())
def test_damaged_textfsm_tables(case: tuple[str, Mutated, CommandSpec]) -> None:
    _, mutated, spec = case
    parse(mutated.data, spec)


@pytest.mark.parametrize("line", LONG_LINES[:4], ids=["letters", "quotes", "brackets", "braces"])
def test_one_endless_line_in_every_format(line: bytes) -> None:
    # a backtracking regex or a quadratic loop would show here as a hang, not as a failure
    for case in CASES:
        parse(case.raw[: len(case.raw) // 2] + b"\n" + line + b"\n" + case.raw[len(case.raw) // 2 :], case.spec)
    for _, raw, spec in _ntc():
        parse(raw + b"\n" + line + b"\n", spec)


# --- generated outputs ------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([c.spec for c in JSON_CASES]), JSON_VALUES)
def test_any_json_value_for_any_json_format(spec: CommandSpec, value: Any) -> None:
    parse(json.dumps(value), spec)


# --- the bugs these tests found, kept as plain regressions ----------------------------------------


def test_a_list_where_an_id_belongs_is_not_landed_as_its_text() -> None:
    # was: chassis id "['a', 'b']" (str() of the list), landed as a locally assigned id
    doc = {"lldpNeighbors": {"Ethernet1": {"lldpNeighborInfo": [
        {"chassisId": ["a", "b"], "chassisIdType": "local", "systemName": "x",
         "neighborInterfaceInfo": {"interfaceId": "Ethernet2", "interfaceIdType": "interfaceName"}}]}}}  # fmt: skip
    result = parse(json.dumps(doc), command_for("arista_eos"))
    assert [q.reason for q in result.quarantined] == [
        "unparseable 'show lldp neighbors detail | json' output: JSON is not 'show lldp neighbors detail | json' "
        "output: chassisId is not a value"
    ]


def test_junos_record_without_a_local_port_is_quarantined_not_raised() -> None:
    # was: ValueError out of parse_output, which promises never to raise
    doc = {"lldp-neighbors-information": [{"lldp-neighbor-information": [
        {"lldp-remote-system-name": [{"data": "leaf2"}]}]}]}  # fmt: skip
    result = parse(json.dumps(doc), command_for("juniper_junos"))
    assert [q.reason for q in result.quarantined] == [
        "unparseable 'show lldp neighbors | display json' output: JSON is not 'show lldp neighbors | display json' "
        "output: Junos neighbour with neither lldp-local-interface nor lldp-local-port-id"
    ]


def test_junos_index_that_is_a_digit_but_no_number_falls_back_to_the_position() -> None:
    # was: ValueError ("²".isdigit() is true, int("²") is an error) out of parse_output
    doc = {"lldp-neighbors-information": [{"lldp-neighbor-information": [
        {"lldp-local-port-id": [{"data": "et-0/0/1"}], "lldp-index": [{"data": "\u00b2"}],
         "lldp-remote-system-name": [{"data": "leaf2"}]}]}]}  # fmt: skip
    (n,) = parse(json.dumps(doc), command_for("juniper_junos")).neighbors
    assert (n.local_port, n.rem_index, n.sys_name) == ("et-0/0/1", 1, "leaf2")


def test_nul_and_lone_surrogate_from_json_escapes_quarantine_the_neighbour_alone() -> None:
    # was: landed with sys_name "s\ud800", which fails the device's whole COPY into Postgres
    doc = {"TABLE_nbor_detail": {"ROW_nbor_detail": [
        {"l_port_id": "Eth1/1", "chassis_id": "leaf1", "port_id": "Eth1/2", "sys_name": "s\ud800"},
        {"l_port_id": "Eth1/\u0000", "chassis_id": "leaf1", "port_id": "Eth1/3", "sys_name": "a\u0000"},
        {"l_port_id": "Eth1/3", "chassis_id": "leaf1", "port_id": "Eth1/4", "sys_name": "leaf1"}]}}  # fmt: skip
    result = parse(json.dumps(doc), command_for("cisco_nxos"))
    assert [n.local_port_vendor for n in result.neighbors] == ["Eth1/3"]
    assert [(q.location, q.reason) for q in result.quarantined] == [
        ("port Eth1/1", "bad neighbour on Eth1/1: sys_name holds an unpaired surrogate (U+D800), which cannot be "
                        "stored as text"),
        ("port Eth1/\\x00", "bad neighbour on Eth1/\\x00: local_port_vendor holds a NUL character, which "
                             "cannot be stored as text"),
    ]  # fmt: skip


def test_an_endless_line_in_a_text_table_is_refused_before_textfsm() -> None:
    # was: minutes in ntc-templates' regexes (quadratic backtracking on a 200 KB line)
    _, raw, spec = next(t for t in _ntc() if t[0] == "juniper_junos_show_lldp_neighbors")
    result = parse(raw.rstrip(b"\n") + b"\n" + b"A" * 200_000 + b"\n", spec)
    (q,) = result.quarantined
    assert q.reason == (
        "unparseable 'show lldp neighbors' output: line 4 is 200000 characters long; no LLDP table line exceeds 1024"
    )
