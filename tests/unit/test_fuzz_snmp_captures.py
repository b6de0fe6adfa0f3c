"""SNMP values from saved walks (``gpufabric ingest lldp --format snmprec|snmpwalk``) under hostile
input: ``connectors.lldp_capture`` reading, then ``connectors.snmp.lldp_mib.interpret`` judging.

Seeds: LibreNMS's real snmprec walks (../shared/fixtures/snmprec), and the same varbinds written
as net-snmp ``snmpwalk -On`` prints them (no real -On capture is in the fixtures). The contract
(lldp_capture.py docstring): a line that cannot be read is quarantined with its line number, a
capture with nothing readable is quarantined whole, and an OID discovery never walks is ignored
as a live walk would. So, exactly: every line naming a walked OID lands in the walk once, or is
quarantined with its line number. Wire-level SNMP (BER) and interpret() on arbitrary walks are
fuzzed in test_snmp_ber.py and test_snmp_lldp_mib.py.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from connectors.lldp_capture import Capture, read_capture, walk_from_snmprec, walk_from_snmpwalk
from connectors.snmp.oids import SYSTEM_OIDS, WALK_BASES
from core.quality import CollectionStatus
from tests.unit.fuzz_inputs import (
    Mutated,
    assert_quarantine_row,
    assert_storable_neighbor,
    mutated_bytes,
    storable,
)

SNMPREC = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "snmprec"
SEEDS = ("arista_eos", "dell-os10", "edgeswitch_es-24-250w", "junos_qfx5100", "nxos_n3k-3064pq")


@cache
def snmprec(name: str) -> bytes:
    """The walk cut to the lines discovery reads plus every 50th other line (so ignoring is
    exercised too): a few hundred lines, so one example parses in milliseconds."""
    lines = (SNMPREC / f"{name}.snmprec").read_bytes().splitlines(keepends=True)
    return b"".join(line for i, line in enumerate(lines) if _relevant(line.split(b"|")[0].decode()) or i % 50 == 0)


_WALK_TYPES = {"2": "INTEGER", "65": "Counter32", "66": "Gauge32", "70": "Counter64", "64": "IpAddress"}


@cache
def snmpwalk(name: str) -> bytes:
    """The snmprec's varbinds as ``snmpwalk -On`` prints them (net-snmp 5.9 layout)."""
    out = []
    for line in snmprec(name).decode().splitlines():
        oid, tag, value = line.strip().split("|", 2)
        if tag == "4":
            text = value.replace("\\", "\\\\").replace('"', '\\"')
            out.append(f'.{oid} = STRING: "{text}"' if text else f'.{oid} = ""')
        elif tag == "4x":
            pairs = " ".join(value[i : i + 2].upper() for i in range(0, len(value), 2))
            out.append(f".{oid} = Hex-STRING: {pairs} " if pairs else f'.{oid} = ""')
        elif tag == "6":
            out.append(f".{oid} = OID: .{value}")
        elif tag == "67":
            out.append(f".{oid} = Timeticks: ({value}) 0:00:00.00")
        elif tag in _WALK_TYPES:
            out.append(f".{oid} = {_WALK_TYPES[tag]}: {value}")
    return ("\n".join(out) + "\n").encode()


def _relevant(oid_text: str) -> bool | None:
    """Whether discovery walks this OID; None when the text is no OID (it must be quarantined)."""
    parts = oid_text.strip().strip(".").split(".")
    if not oid_text.strip() or not all(re.fullmatch(r"[0-9]{1,10}", p) for p in parts):
        return None
    oid = tuple(int(p) for p in parts)
    if max(oid) > 2**32 - 1:
        return None
    return oid in SYSTEM_OIDS or any(oid[: len(b)] == b and len(oid) > len(b) for b in WALK_BASES.values())


def check_snmprec_accounting(text: str) -> None:
    """Every line naming a walked OID is in the walk or quarantined; every line that names no OID
    is quarantined; lines of OIDs discovery does not walk are ignored, and nothing else is."""
    walk, bad = walk_from_snmprec(text, "dut")
    quarantined = {int(q.location.removeprefix("line ")) for q in bad if q.location}
    assert len(quarantined) == len(bad)  # one row per line
    placed = 0
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            assert number not in quarantined
            continue
        relevant = _relevant(line.split("|", 1)[0])
        if relevant is None or line.count("|") < 2:
            assert number in quarantined, line[:80]
        elif relevant and number not in quarantined:
            placed += 1
    assert walk.varbinds() == placed
    for q in bad:
        assert_quarantine_row(q, "dut")


def check_capture(capture: Capture, fmt: str) -> None:
    for q in capture.quarantined:
        assert_quarantine_row(q, "dut")
    for n in capture.neighbors:
        assert_storable_neighbor(n)
        assert -(2**63) <= n.local_port_num < 2**63 and -(2**63) <= n.rem_index < 2**63
    if capture.snmp is not None:
        for i in capture.snmp.interfaces:
            assert all(storable(t) for t in (i.name, i.if_name, i.if_descr, i.if_alias, i.mac)), i
            assert 0 <= i.if_index < 2**32 and (i.if_high_speed_mbps is None or 0 <= i.if_high_speed_mbps < 2**32)
    whole = [q for q in capture.quarantined if q.location == "file"]
    if whole:  # quarantined whole: nothing lands, and the status says why
        assert capture.neighbors == [] and capture.quarantined == whole and len(whole) == 1
        assert capture.status is CollectionStatus.INVALID and capture.detail == whole[0].reason
    elif capture.neighbors:
        assert capture.status in (CollectionStatus.OK, CollectionStatus.PARTIAL)
        assert (capture.status is CollectionStatus.PARTIAL) == bool(capture.quarantined)
    else:
        assert capture.status in (CollectionStatus.NO_DATA, CollectionStatus.INVALID)


def test_the_seeds_are_whole_and_their_snmpwalk_form_reads_the_same() -> None:
    for name in SEEDS:
        full = read_capture((SNMPREC / f"{name}.snmprec").read_bytes(), "snmprec", "dut")
        rec = read_capture(snmprec(name), "snmprec", "dut")
        walk = read_capture(snmpwalk(name), "snmpwalk", "dut")
        # (the full nxos walk has four anonymised IpAddress values '<private>' in OIDs discovery never reads)
        assert rec.neighbors == full.neighbors and rec.quarantined == [] and rec.status is CollectionStatus.OK, name
        assert [n.key for n in walk.neighbors] == [n.key for n in rec.neighbors], name
        assert [q.reason for q in walk.quarantined] == [q.reason for q in rec.quarantined], name
        check_snmprec_accounting(snmprec(name).decode())


@st.composite
def _damaged(draw: st.DrawFn, form: str) -> tuple[str, Mutated]:
    name = draw(st.sampled_from(SEEDS))
    seed = snmprec(name) if form == "snmprec" else snmpwalk(name)
    return name, draw(mutated_bytes(seed))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_damaged("snmprec"))
@example(
    (
        "edgeswitch_es-24-250w",
        Mutated(  # a line repeated with another value: the last one won silently
            b"1.3.6.1.2.1.1.5.0|4|leaf1\n1.3.6.1.2.1.1.5.0|4|leaf2\n", ["regression"]
        ),
    )
)
@example(
    (
        "edgeswitch_es-24-250w",
        Mutated(  # sub-identifiers and values beyond SNMP's ranges: no agent sends
            # them, and were landed (a 20-digit local port number overflows the warehouse's bigint)
            b"1.0.8802.1.1.2.1.4.1.1.5.0.99999999999999999999.1|4x|3c6104000001\n1.3.6.1.2.1.31.1.1.1.15.1|66|99999999999999\n"
            b"1.0.8802.1.1.2.1.4.1.1.7.0.99999999999999999999.1|4|Ethernet1\n1.3.6.1.2.1.1.5.0|4|leaf1\n",
            ["regression"],
        ),
    )
)
def test_damaged_snmprec(case: tuple[str, Mutated]) -> None:
    _, mutated = case
    capture = read_capture(mutated.data, "snmprec", "dut")
    check_capture(capture, "snmprec")
    try:
        text = mutated.data.decode("utf-8")
    except UnicodeDecodeError:
        assert capture.detail is not None and capture.detail.startswith("binary file: not UTF-8 at byte ")
        return
    check_snmprec_accounting(text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_damaged("snmpwalk"))
def test_damaged_snmpwalk(case: tuple[str, Mutated]) -> None:
    _, mutated = case
    capture = read_capture(mutated.data, "snmpwalk", "dut")
    check_capture(capture, "snmpwalk")
    try:
        text = mutated.data.decode("utf-8")
    except UnicodeDecodeError:
        return
    _, bad = walk_from_snmpwalk(text, "dut")
    for q in bad:
        assert q.location is not None and re.fullmatch(r"line \d+", q.location), q.location


# --- generated lines ------------------------------------------------------------------------------

_OIDS = st.sampled_from(["1.3.6.1.2.1.1.5.0", "1.0.8802.1.1.2.1.4.1.1.5.0.1.1", "1.0.8802.1.1.2.1.4.1.1.7.0.1.1",
                         "1.3.6.1.2.1.31.1.1.1.1.1", "1.3.6.1.2.1.31.1.1.1.15.1", "1.0.8802.1.1.2.1.3.7.1.3.1",
                         "1.3.111.2.802.1.1.13.1.4.1.1.6.0.1.1.1", "1.2.3", "", ".", "1..2", "1.\u00b2",
                         "1.3.6.1.2.1.1.5.0.4294967296", "9" * 5000])  # fmt: skip
_TAGS = st.sampled_from(["2", "4", "4x", "5", "6", "64", "65", "66", "67", "70", "4:numeric", "99", "", "x"])
_VALUES = st.sampled_from(["1", "-1", "5", "2147483648", "-2147483649", "18446744073709551616", "3c6104000001",
                           "zz", "Ethernet1", "", "1.3.6", "10.0.0.1", "1.2.3.4.5", "\u00b2", "9" * 5000,
                           "a|b", "  7  "]) | st.text(max_size=12)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_OIDS, _TAGS, _VALUES), max_size=12), st.sampled_from(["snmprec", "snmpwalk"]))
@example([("1.3.6.1.2.1.31.1.1.1.15.1", "2", "-1")], "snmprec")  # was: an interface of speed -1 Mb/s
@example([("1.3.6.1.2.1.31.1.1.1.15.1", "70", "18446744073709551615")], "snmprec")  # was: past bigint
def test_generated_varbinds(lines: list[tuple[str, str, str]], fmt: str) -> None:
    if fmt == "snmprec":
        text = "\n".join(f"{o}|{t}|{v}" for o, t, v in lines)
    else:
        kinds = {"2": "INTEGER", "4": "STRING", "4x": "Hex-STRING", "6": "OID", "64": "IpAddress",
                 "65": "Counter32", "66": "Gauge32", "67": "Timeticks", "70": "Counter64"}  # fmt: skip
        text = "\n".join(f".{o} = {kinds.get(t, t)}: {v}" for o, t, v in lines)
    capture = read_capture(text.encode(), fmt, "dut")
    check_capture(capture, fmt)
    if fmt == "snmprec":
        check_snmprec_accounting(text)


@pytest.mark.parametrize("fmt", ["snmprec", "snmpwalk"])
def test_an_unclosed_string_followed_by_megabytes_is_read_in_linear_time(fmt: str) -> None:
    # was: minutes (every continuation line re-scanned and re-joined the whole record so far)
    head = b'.1.3.6.1.2.1.1.5.0 = STRING: "leaf1\n' if fmt == "snmpwalk" else b"1.3.6.1.2.1.1.5.0|4|leaf1\n"
    capture = read_capture(head + b"ab cd ef\n" * 100_000, fmt, "dut")
    check_capture(capture, fmt)
    if fmt == "snmpwalk":  # one record: the string never closes, so every line is its text
        assert capture.quarantined == [] and capture.snmp is not None and capture.snmp.system is not None
        assert capture.snmp.system.sys_name is not None and len(capture.snmp.system.sys_name) > 800_000
    else:  # 100,000 lines that are no OID|TYPE|VALUE: each quarantined with its line number
        assert len(capture.quarantined) == 100_000
        assert capture.quarantined[-1].location == "line 100001"


def test_repeated_oid_keeps_the_first_value_and_quarantines_the_repeat() -> None:
    walk, bad = walk_from_snmprec("1.3.6.1.2.1.1.5.0|4|leaf1\n1.3.6.1.2.1.1.5.0|4|leaf2\n", "dut")
    assert walk.system == {(1, 3, 6, 1, 2, 1, 1, 5, 0): ("octets", b"leaf1")}
    assert [(q.location, q.reason) for q in bad] == [
        ("line 2", "OID given twice (first at line 1); the first value is kept")
    ]


def test_values_and_sub_identifiers_beyond_snmp_ranges_are_quarantined() -> None:
    text = (
        "1.3.6.1.2.1.31.1.1.1.15.1|66|4294967296\n"
        "1.3.6.1.2.1.31.1.1.1.15.2|2|-2147483649\n"
        "1.3.6.1.2.1.31.1.1.1.1.4294967296|4|swp1\n"
        "1.3.6.1.2.1.31.1.1.1.15.3|66|4294967295\n"
    )
    walk, bad = walk_from_snmprec(text, "dut")
    assert walk.tables == {"ifHighSpeed": {(3,): ("gauge", 4294967295)}}
    assert [(q.location, q.reason) for q in bad] == [
        ("line 1", "type 66: 4294967296 is outside the type's range 0..4294967295"),
        ("line 2", "type 2: -2147483649 is outside the type's range -2147483648..2147483647"),
        ("line 3", "OID sub-identifier 4294967296 exceeds 4294967295: '1.3.6.1.2.1.31.1.1.1.1.4294967296'"),
    ]
