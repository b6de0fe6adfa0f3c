"""Our own TextFSM templates (no ntc-templates equivalent): Onyx ``show lldp remote``, SONiC
``show lldp table``, Cumulus ``net show lldp``; exact parses, and the field map loses nothing."""

from __future__ import annotations

from connectors.ssh.parsers import parse_output, rows_from_textfsm, textfsm_parse
from connectors.ssh.platforms import COMMANDS
from simulator.generator import generate
from simulator.snmp.records import RecordBuilder
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from simulator.ssh.render import neighbors_of, render_sonic_table

ONYX_REMOTE = """\
--------------------------------------------------------------------------------
Local Interface   Device ID           Port ID            System Name
--------------------------------------------------------------------------------
Eth1/1            44:4c:a8:96:b5:12   Ethernet47         eth-leaf-01
Eth1/2            58:97:bd:72:b1:6f   Eth1/47            eth-leaf-02
mgmt0             0c:42:a1:00:00:01   swp10              oob-switch
"""

CUMULUS_NET = """\
LocalPort  Speed  Mode     RemoteHost   RemotePort  Summary
---------  -----  -------  -----------  ----------  -------
swp1       400G   Default  eth-leaf-01  Ethernet48
swp2       400G   Default  eth-leaf-02  Eth1/48     IP: 10.0.0.1/31
"""


def test_onyx_show_lldp_remote() -> None:
    spec = COMMANDS[("mellanox_mlnxos", "summary")]
    parsed = textfsm_parse(ONYX_REMOTE, spec)
    assert parsed == [
        {
            "local_interface": "Eth1/1",
            "chassis_id": "44:4c:a8:96:b5:12",
            "port_id": "Ethernet47",
            "system_name": "eth-leaf-01",
        },
        {
            "local_interface": "Eth1/2",
            "chassis_id": "58:97:bd:72:b1:6f",
            "port_id": "Eth1/47",
            "system_name": "eth-leaf-02",
        },
        {
            "local_interface": "mgmt0",
            "chassis_id": "0c:42:a1:00:00:01",
            "port_id": "swp10",
            "system_name": "oob-switch",
        },
    ]
    result = parse_output(ONYX_REMOTE, spec, "spine")
    assert [(n.local_port, n.chassis_id, n.remote_port) for n in result.neighbors] == [
        ("Ethernet1/1", "44:4c:a8:96:b5:12", "Ethernet47"),
        ("Ethernet1/2", "58:97:bd:72:b1:6f", "Ethernet1/47"),
        ("Management0", "0c:42:a1:00:00:01", "swp10"),
    ]


def test_sonic_show_lldp_table() -> None:
    truth = generate(load_spec(resolve_spec_path("h100-1su")))
    sonic = next(d for d in truth.switches() if d.platform == "sonic")
    text = render_sonic_table(neighbors_of(truth, RecordBuilder(truth), sonic))
    spec = COMMANDS[("sonic", "table")]
    parsed = textfsm_parse(text, spec)
    assert len(parsed) == 10
    assert parsed[0]["local_port"] == "Ethernet0"
    rows = rows_from_textfsm(parsed, spec)
    assert all(r.sys_name and r.port_id and r.capabilities == "BR" for r in rows)
    # no chassis id in this table: every row lands with chassis id None, named by system and port
    result = parse_output(text, spec, "eth-leaf-04")
    assert result.quarantined == [] and len(result.neighbors) == 10
    assert {n.chassis_id for n in result.neighbors} == {None}
    assert all(n.sys_name and n.port_id for n in result.neighbors)


def test_cumulus_net_show_lldp() -> None:
    spec = COMMANDS[("cumulus", "net")]
    rows = rows_from_textfsm(textfsm_parse(CUMULUS_NET, spec), spec)
    assert [(r.local_port, r.sys_name, r.port_id, r.extra) for r in rows] == [
        ("swp1", "eth-leaf-01", "Ethernet48", {"speed": "400G", "mode": "Default", "summary": ""}),
        ("swp2", "eth-leaf-02", "Eth1/48", {"speed": "400G", "mode": "Default", "summary": "IP: 10.0.0.1/31"}),
    ]
