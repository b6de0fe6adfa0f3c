"""Every vendor quirk in core/lldp/quirks.py, each against tables shaped like that vendor's agent."""

from __future__ import annotations

from connectors.snmp.lldp_mib import DeviceWalk, LldpCollection, interpret
from connectors.snmp.oids import SYS_DESCR, SYS_NAME, SYS_OBJECT_ID
from core.lldp import detect_platform, quirks_for, remote_port_name
from core.quality import CollectionStatus

PEER = bytes.fromhex("444ca8000001")


def _walk(
    platform: str | None, descr: str, oid: str, **tables: dict[tuple[int, ...], tuple[str, object]]
) -> DeviceWalk:
    walk = DeviceWalk(device="sw", configured_platform=platform)
    walk.system = {SYS_DESCR: ("octets", descr.encode()), SYS_OBJECT_ID: ("oid", oid), SYS_NAME: ("octets", b"sw")}
    walk.tables = {k: dict(v) for k, v in tables.items()}
    return walk


def _rem(port: int, rem: int, port_id: bytes = b"Ethernet9", subtype: int = 5, mark: int = 1234) -> dict:
    return {
        (4, mark, port, rem): ("int", 4),
        (5, mark, port, rem): ("octets", PEER),
        (6, mark, port, rem): ("int", subtype),
        (7, mark, port, rem): ("octets", port_id),
    }


def _only(c: LldpCollection):  # type: ignore[no-untyped-def]
    assert c.status is CollectionStatus.OK, (c.status, c.detail, c.quarantined)
    (n,) = c.neighbors
    return n


def test_arista_local_port_numbers_are_bridge_base_ports() -> None:
    # EOS on a modular/breakout chassis: base port 5 is Ethernet3/1/1 = ifIndex 3001.
    walk = _walk(
        "arista_eos",
        "Arista Networks EOS version 4.31.2F running on an Arista Networks DCS-7280CR3-32P4",
        "1.3.6.1.4.1.30065.1.3011.7280",
        lldpRemTable=_rem(5, 2),
        ifName={(5,): ("octets", b"Ethernet1/5"), (3001,): ("octets", b"Ethernet3/1/1")},
        dot1dBasePortIfIndex={(5,): ("int", 3001)},
    )
    n = _only(interpret(walk))
    assert (n.local_port_num, n.local_if_index, n.local_port) == (5, 3001, "Ethernet3/1/1")


def test_generic_agents_number_local_ports_by_ifindex() -> None:
    walk = _walk(
        "cumulus",
        "Cumulus Linux 5.9.1",
        "1.3.6.1.4.1.40310",
        lldpRemTable=_rem(5, 2),
        ifName={(5,): ("octets", b"swp3"), (3001,): ("octets", b"swp9")},
        dot1dBasePortIfIndex={(5,): ("int", 3001)},
    )
    n = _only(interpret(walk))
    assert (n.local_if_index, n.local_port) == (5, "swp3")


def test_nxos6_swaps_loc_port_id_and_description() -> None:
    descr = "Cisco NX-OS(tm) n5000, Software (n5000-uk9), Version 6.0(2)N2(7), RELEASE SOFTWARE"
    assert quirks_for("cisco_nxos", "1.3.6.1.4.1.9.12.3.1.3.1084", descr)[0].platform == "cisco_nxos_6"
    loc = {
        (7, 1, 2, 436207616): ("int", 5),
        (7, 1, 3, 436207616): ("octets", b"uplink to core"),
        (7, 1, 4, 436207616): ("octets", b"Ethernet1/1"),
    }
    n = _only(
        interpret(
            _walk(
                "cisco_nxos",
                descr,
                "1.3.6.1.4.1.9.12.3.1.3.1084",
                lldpLocalSystemData=loc,
                lldpRemTable=_rem(436207616, 7),
            )
        )
    )
    assert n.local_port == "Ethernet1/1"
    # NX-OS 7+ is not swapped: the port id column is the name
    descr7 = "Cisco Nexus Operating System (NX-OS) Software, Version 9.3(10)"
    loc7 = {(7, 1, 2, 1): ("int", 5), (7, 1, 3, 1): ("octets", b"Ethernet1/1"), (7, 1, 4, 1): ("octets", b"to core")}
    n7 = _only(
        interpret(
            _walk(
                "cisco_nxos", descr7, "1.3.6.1.4.1.9.12.3.1.3.1812", lldpLocalSystemData=loc7, lldpRemTable=_rem(1, 1)
            )
        )
    )
    assert n7.local_port == "Ethernet1/1"


def test_nxos_abbreviated_advertisement_normalises() -> None:
    assert remote_port_name(5, "Eth1/47", "uplink", "cisco_nxos") == "Ethernet1/47"


def test_junos_advertises_ifindex_with_the_name_in_the_description() -> None:
    assert detect_platform(None, "Juniper Networks, Inc. qfx5120-48y-8c Ethernet Switch, kernel JUNOS 21.4R3")[0] == (
        "juniper_junos"
    )
    assert remote_port_name(7, "556", "et-0/0/46", "juniper_junos") == "et-0/0/46"
    assert remote_port_name(7, "556", "uplink", "juniper_junos") is None  # never guess from free text
    assert remote_port_name(7, "556", "et-0/0/46", "arista_eos") == "556"  # only Junos does this


def test_sonic_ifdescr_is_an_alias_not_a_name() -> None:
    descr = "SONiC Software Version: SONiC.202311.1 - HwSku: Mellanox-SN2700"
    assert detect_platform("1.3.6.1.4.1.8072.3.2.10", descr)[0] == "sonic"  # sysDescr beats net-snmp's OID
    walk = _walk(None, descr, "1.3.6.1.4.1.8072.3.2.10", lldpRemTable=_rem(3, 1), ifDescr={(3,): ("octets", b"etp3")})
    n = _only(interpret(walk))
    assert n.local_port is None  # no ifName: the alias is not taken for a name
    walk.tables["ifName"] = {(3,): ("octets", b"Ethernet8")}
    assert _only(interpret(walk)).local_port == "Ethernet8"


def test_lldpd_mac_port_id_with_the_name_in_the_description() -> None:
    assert remote_port_name(3, "b4:96:91:00:00:01", "eno1", "linux_lldpd") == "eno1"
    assert remote_port_name(3, "b4:96:91:00:00:01", "eno1", "arista_eos") is None


def test_configured_platform_wins_unless_the_device_reports_a_refinement() -> None:
    assert quirks_for("arista_eos", None, "Cumulus Linux 5.9")[0].platform == "arista_eos"
    assert quirks_for(None, "1.3.6.1.4.1.2636.1.1.1.4.137", None)[0].platform == "juniper_junos"
    assert quirks_for(None, None, None)[0].platform == "generic"
