"""Done-when: every ntc-templates .raw capture parses to exactly its .yml expectation, then
normalises into our schema with no field lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.ssh.parsers import CliRow, rows_from_textfsm, textfsm_parse, to_neighbor
from connectors.ssh.platforms import COMMANDS, CommandSpec

NTC = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "ntc"
RAWS = sorted(NTC.glob("*/*/*.raw"))


def spec_for(raw: Path) -> CommandSpec:
    platform, command = raw.parent.parent.name, raw.parent.name.replace("_", " ")
    for spec in COMMANDS.values():
        if spec.device_type == platform and spec.command == command and spec.format == "textfsm":
            return spec
    # summary tables (no chassis id): same field map as the platform's detail row
    detail = next(s for s in COMMANDS.values() if s.device_type == platform and s.format == "textfsm")
    return CommandSpec(detail.platform, platform, command, "textfsm", fields=detail.fields)


def _values(row: CliRow) -> list[str]:
    out: list[str] = []
    for name, value in row.__dict__.items():
        if name == "extra":
            out += [str(v) for v in value.values()]
        elif isinstance(value, tuple):
            out += [str(v) for v in value]
        elif value is not None:
            out.append(str(value))
    return out


def test_fixtures_are_present() -> None:
    assert len(RAWS) == 11


@pytest.mark.parametrize("raw", RAWS, ids=lambda p: p.stem)
def test_capture_parses_to_its_expectation_and_loses_no_field(raw: Path) -> None:
    expected: list[dict[str, Any]] = yaml.safe_load(raw.with_suffix(".yml").read_text())["parsed_sample"]
    spec = spec_for(raw)
    parsed = textfsm_parse(raw.read_text(), spec)
    assert parsed == expected
    rows = rows_from_textfsm(parsed, spec)
    assert len(rows) == len(expected)
    for rec, row in zip(expected, rows, strict=True):
        kept = _values(row)
        for column, value in rec.items():
            if str(value).strip():
                assert str(value).strip() in kept, (column, value)  # every non-empty field survives
        assert row.local_port == rec["local_interface"]


def _neighbors(name: str) -> list[Any]:
    raw = next(p for p in RAWS if p.stem == name)
    spec = spec_for(raw)
    return [to_neighbor(r, "cli-textfsm", 1) for r in rows_from_textfsm(textfsm_parse(raw.read_text(), spec), spec)]


def test_ios_neighbor_interface_is_the_port_description_not_the_port_id() -> None:
    first, second, third = _neighbors("cisco_ios_show_lldp_neighbors_detail1")
    # Juniper peer: port id 502 is its ifIndex, the description ge-0/0/0.0 names the port
    assert (first.port_id, first.port_id_subtype, first.port_desc) == ("502", 7, "ge-0/0/0.0")
    assert (first.remote_platform, first.remote_port) == ("juniper_junos", "ge-0/0/0")
    assert (first.local_port, first.local_port_vendor) == ("GigabitEthernet1/0/2", "Gi1/0/2")
    assert (second.port_id, second.port_id_subtype, second.port_desc) == ("94:f1:28:79:55:55", 3, "13")
    assert second.man_addrs == ("192.168.1.81",)
    assert third.chassis_id == "44:48:c1:c4:dd:dd"


def test_detail_captures_normalise_ids() -> None:
    eos = _neighbors("arista_eos_show_lldp_neighbors_detail")
    assert len(eos) == 20
    assert (eos[0].local_port, eos[0].chassis_id, eos[0].port_id, eos[0].chassis_id_subtype) == (
        "Ethernet1",
        "2c:c2:60:81:ea:f9",
        "Ethernet1",
        4,
    )
    assert eos[0].remote_platform == "arista_eos"
    nine = next(n for n in eos if n.local_port == "Ethernet9")
    assert (nine.port_id, nine.remote_port) == ("Eth1/23", "Ethernet1/23")
    nx = _neighbors("cisco_nxos_show_lldp_neighbors_detail2")
    assert [(n.local_port, n.port_id_subtype, n.port_id) for n in nx] == [
        ("Ethernet1/52", 5, "Ethernet1/52"),
        ("Ethernet101/1/10", 3, "1a:51:48:00:00:01"),
    ]
    xr = _neighbors("cisco_xr_show_lldp_neighbors_detail_01")
    assert xr[0].man_addrs == ("172.1.1.79", "2407:abcd:0:aaaa::0000")
    assert xr[0].port_desc == "uplink:router1:FH0/0/0/0"
    assert xr[0].sys_name == "router-400.router.com"


def test_summary_tables_without_chassis_ids_land_without_one() -> None:
    raw = next(p for p in RAWS if p.stem == "cisco_nxos_show_lldp_neighbors")
    spec = spec_for(raw)
    rows = rows_from_textfsm(textfsm_parse(raw.read_text(), spec), spec)
    n = to_neighbor(rows[0], "cli-textfsm", 1)
    assert (n.chassis_id, n.chassis_id_raw, n.chassis_id_subtype) == (None, None, None)
    assert n.port_id == rows[0].port_id and n.sys_name == rows[0].sys_name
