"""Real switches' SNMP walks (../shared/fixtures/snmprec, LibreNMS test walks in snmpsim format)
served by the real snmpsim -- the responder our SNMP twin runs (``simulator.snmp.twin.launch``) --
and walked by the real collector (``connectors.snmp.collect``, both the SNMPv2c fast path and
pysnmp), compared row by row with each walk's ``expected.yaml``. The walks' quirks (two
neighbours on one port, lldpRemLocalPortNum that is no ifIndex, no chassis id column, no
lldpRemSysName column, MACs served as text, only lldpLocPortId of lldpLocPortTable) must all be
taken without losing a row. Files are found by globbing, so a walk dropped there is tested.

The LLDP-V2-MIB path is tested with a walk derived from one capture by renaming its OIDs the way
LLDP-V2-MIB (IEEE 802.1AB-2009, lldpV2MIB 1.3.111.2.802.1.1.13) defines them -- no shared walk is
V2-only: lldpV2RemTable adds lldpV2RemLocalDestMACAddress to the index (after the local ifIndex)
and shifts every column up by one; lldpV2RemLocalIfIndex is an ifIndex by definition.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from connectors.lldp_capture import read_capture
from connectors.snmp import CollectorOptions, LldpCollection, SnmpTarget, collect
from core.lldp import LldpNeighbor
from core.quality import CollectionStatus

pytestmark = [pytest.mark.integration, pytest.mark.standalone]  # its own twins (tests/conftest.py)

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "snmprec"
WALKS = sorted(FIXTURES.glob("*.snmprec"))
V2_SOURCE = "dell-os10"  # non-zero time marks and a local port number that is no ifIndex
V2_COMMUNITY = "dell-os10-lldp-v2"

V1_REM = "1.0.8802.1.1.2.1.4.1.1."  # lldpRemEntry: col.timeMark.localPortNum.remIndex
V2_REM = "1.3.111.2.802.1.1.13.1.4.1.1."  # lldpV2RemEntry: col.timeMark.ifIndex.destAddrIndex.remIndex
V1_LOC_PORT = "1.0.8802.1.1.2.1.3.7.1."  # lldpLocPortEntry: col.portNum
V2_DEST_NEAREST_BRIDGE = 1  # lldpV2DestAddressTableEntry 1 = 01-80-C2-00-00-0E (nearest bridge)


def v2_walk(text: str) -> tuple[str, dict[tuple[int, int], int]]:
    """The v1 walk with LLDP-MIB's remote table moved to LLDP-V2-MIB and its local port numbers
    replaced by ifIndexes (resolved through lldpLocPortId -> ifName, as the expected.yaml did);
    returns the text and {(v1 port num, rem index): ifIndex}."""
    if_names = {}
    loc_ids = {}
    for line in text.splitlines():
        oid, _tag, value = line.strip().split("|", 2)
        if oid.startswith("1.3.6.1.2.1.31.1.1.1.1."):
            if_names[value] = int(oid.rsplit(".", 1)[1])
        elif oid.startswith(V1_LOC_PORT + "3."):
            loc_ids[int(oid.rsplit(".", 1)[1])] = value
    moved: dict[tuple[int, int], int] = {}
    out = []
    for line in text.splitlines():
        oid, tag, value = line.strip().split("|", 2)
        if oid.startswith(V1_REM):
            col, mark, port, rem = (int(x) for x in oid[len(V1_REM) :].split("."))
            if_index = if_names[loc_ids[port]]
            moved[(port, rem)] = if_index
            # v1 columns 4..12 (chassis subtype .. sys cap enabled) are v2 columns 5..13
            oid = f"{V2_REM}{col + 1}.{mark}.{if_index}.{V2_DEST_NEAREST_BRIDGE}.{rem}"
        elif oid.startswith("1.0.8802.1.1.2."):
            continue  # a V2-only agent has no LLDP-MIB at all
        out.append(f"{oid}|{tag}|{value}")
    # snmpsim needs the file sorted by OID (it bisects); numeric order per component
    out.sort(key=lambda line: tuple(int(x) for x in line.split("|", 1)[0].split(".")))
    return "\n".join(out) + "\n", moved


@pytest.fixture(scope="module")
def snmpsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """One real snmpsim serving every walk (community = file stem) plus the derived V2 walk."""
    from simulator.snmp.twin import SnmpTwinOptions, launch, stop

    work = tmp_path_factory.mktemp("snmprec")
    data = work / "data"
    data.mkdir()
    for walk in WALKS:
        shutil.copy(walk, data / walk.name)
    (data / f"{V2_COMMUNITY}.snmprec").write_text(v2_walk((FIXTURES / f"{V2_SOURCE}.snmprec").read_text())[0])
    pid, port = launch(data, work, SnmpTwinOptions(faults=False), WALKS[0].stem)
    yield port
    stop(pid)


def _walk(port: int, community: str, fast: bool) -> LldpCollection:
    target = SnmpTarget(name=community, address="127.0.0.1", port=port, community=SecretStr(community))
    (c,) = collect([target], CollectorOptions(v2c_fast_path=fast))
    return c


def expected_rows(case: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Empty and absent port descriptions both mean 'none' (the collector lands None for both);
    a MAC served as text is compared in the form it spells (mac_if_text_is_parsed)."""
    out = []
    for n in case["neighbours"]:
        c, p, local = n["chassis_id"], n["port_id"], n["local_port"]
        out.append(
            (
                n["index"]["local_port_num"], n["index"]["rem_index"], local["name"], local["if_index"],
                c["subtype"], c.get("mac_if_text_is_parsed", c["value"]),
                p["subtype"], p.get("mac_if_text_is_parsed", p["value"]),
                n["port_desc"] or None, n["sys_name"],
            )
        )  # fmt: skip
    return sorted(out, key=repr)


def landed_rows(neighbors: list[LldpNeighbor]) -> list[tuple[Any, ...]]:
    return sorted(
        (
            (n.local_port_num, n.rem_index, n.local_port_vendor, n.local_if_index, n.chassis_id_subtype, n.chassis_id,
             n.port_id_subtype, n.port_id, n.port_desc, n.sys_name)
            for n in neighbors
        ),
        key=repr,
    )  # fmt: skip


@pytest.mark.parametrize("fast", [True, False], ids=["v2c-fast-path", "pysnmp"])
@pytest.mark.parametrize("walk", WALKS, ids=lambda p: p.stem)
def test_snmpsim_walk_gives_every_expected_neighbour(snmpsim: int, walk: Path, fast: bool) -> None:
    case = yaml.safe_load(walk.with_suffix(".expected.yaml").read_text())
    c = _walk(snmpsim, walk.stem, fast)
    assert c.status in (CollectionStatus.OK, CollectionStatus.PARTIAL), c.detail
    assert [q.reason for q in c.quarantined if "lldpRem" in str(q.location) or "row" in str(q.location)] == []
    assert len(c.neighbors) == case["neighbour_count"]
    assert landed_rows(c.neighbors) == expected_rows(case)


@pytest.mark.parametrize("walk", WALKS, ids=lambda p: p.stem)
def test_offline_snmprec_reads_the_same_neighbours_as_the_live_walk(snmpsim: int, walk: Path) -> None:
    live = _walk(snmpsim, walk.stem, True)
    offline = read_capture(walk.read_bytes(), "snmprec", walk.stem)
    assert landed_rows(offline.neighbors) == landed_rows(live.neighbors)


def test_the_quirks_of_the_walks_are_all_present() -> None:
    """Guards the point of this file: if a walk is replaced, the quirks must still be covered."""
    text = {w.stem: w.read_text() for w in WALKS}
    cases = {w.stem: yaml.safe_load(w.with_suffix(".expected.yaml").read_text()) for w in WALKS}
    ports = {s: {n["index"]["local_port_num"] for n in c["neighbours"]} for s, c in cases.items()}
    assert [s for s, c in cases.items() if len(ports[s]) < c["neighbour_count"]]  # two neighbours on one port
    assert [s for s, c in cases.items() if any(n["chassis_id"]["value"] is None for n in c["neighbours"])]
    assert [s for s, t in text.items() if f"{V1_REM}9." not in t and f"{V1_REM}4." in t]  # no lldpRemSysName
    assert [s for s, c in cases.items()
            if any(n["local_port"]["resolved_via"] != "ifIndex" for n in c["neighbours"])]  # fmt: skip
    assert [s for s, c in cases.items() if any("mac_if_text_is_parsed" in n["chassis_id"] for n in c["neighbours"])]
    assert all(f"{V1_LOC_PORT}2." not in t and f"{V1_LOC_PORT}4." not in t for t in text.values())


@pytest.mark.parametrize("fast", [True, False], ids=["v2c-fast-path", "pysnmp"])
def test_lldp_v2_only_agent_resolves_local_ports_by_ifindex(snmpsim: int, fast: bool) -> None:
    source = yaml.safe_load((FIXTURES / f"{V2_SOURCE}.expected.yaml").read_text())
    _text, moved = v2_walk((FIXTURES / f"{V2_SOURCE}.snmprec").read_text())
    c = _walk(snmpsim, V2_COMMUNITY, fast)
    assert c.system is not None and c.system.mib == "lldp-v2"
    assert c.quarantined == []
    want = [(moved[(row[0], row[1])], *row[1:]) for row in expected_rows(source)]
    assert landed_rows(c.neighbors) == sorted(want, key=repr)
    assert {n.mib for n in c.neighbors} == {"lldp-v2"}
