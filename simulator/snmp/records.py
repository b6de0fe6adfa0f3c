"""Render each Ethernet switch of a ground truth as an snmpsim ``.snmprec`` data file.

Each file holds what that switch's agent would answer: SNMPv2-MIB system group, IF-MIB
(ifDescr, ifPhysAddress, ifName, ifHighSpeed, ifAlias), BRIDGE-MIB dot1dBasePortIfIndex and
LLDP-MIB (lldpLocalSystemData, lldpLocPortTable, lldpRemTable, lldpRemManAddrTable) built from
the truth's cables, in each platform's own style (:data:`AGENT_STYLES`): NX-OS ifIndexes of
0x1a000000 + ..., Junos advertising its ifIndex as port id, SONiC's lane-derived ifIndex and
alias ifDescr, NX-OS 6's swapped lldpLocPortId/Desc. Like real agents, time marks are nonzero,
local port numbers are not 1..N, and remote indexes are not all 1: a collector that assumes
the naive layout fails against this twin.

Hosts do not answer SNMP here: a host appears as the neighbour a leaf sees on the host's port,
advertised the way lldpd does by default (chassis = a NIC MAC, port id = the NIC's MAC, port
description = its interface name).

snmprec format: ``OID|TAG|VALUE`` sorted by OID; tag 2 INTEGER, 4 OCTET STRING (``4x``: hex),
6 OBJECT IDENTIFIER, 66 Gauge32, 67 TimeTicks.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from core.models import Device, DeviceKind, LinkKind, Port
from simulator.generator import GroundTruth

LLDP_LOC = "1.0.8802.1.1.2.1.3"
LLDP_REM = "1.0.8802.1.1.2.1.4.1.1"
LLDP_REM_MAN = "1.0.8802.1.1.2.1.4.2.1"
IF_TABLE = "1.3.6.1.2.1.2.2.1"
IFX_TABLE = "1.3.6.1.2.1.31.1.1.1"
DOT1D_BASE_PORT_IF_INDEX = "1.3.6.1.2.1.17.1.4.1.2"


@dataclass(frozen=True)
class AgentStyle:
    """How one platform's agent fills the MIBs (the twin's side of the quirk registry)."""

    sys_object_id: str
    sys_descr: str
    if_index_base: int  # ifIndex of front-panel port k = base + (k - 1) * step, unless lane-derived
    if_index_step: int = 1
    lane_if_index: bool = False  # SONiC: ifIndex = lane number / 4 + 1 (Ethernet8 -> 3)
    lldp_port_num: str = "ifindex"  # or "base_port" (Arista)
    swap_loc_port_id_desc: bool = False  # NX-OS 6
    advertise: str = "name"  # port id TLV: "name" (subtype 5), "abbrev" (5, Eth1/1), "ifindex" (7), "local" (7)
    if_descr_alias: bool = False  # SONiC: ifDescr is the alias
    mgmt_name: str = "mgmt0"
    mgmt_if_index: int = 1_000_000


AGENT_STYLES: dict[str, AgentStyle] = {
    # EOS: EthernetN = ifIndex N, LLDP numbers ports by bridge base port, advertises the ifName.
    "arista_eos": AgentStyle(
        "1.3.6.1.4.1.30065.1.3011.7050.3282.52",
        "Arista Networks EOS version 4.31.2F running on an Arista Networks DCS-7050CX3-32S",
        if_index_base=1,
        lldp_port_num="base_port",
        mgmt_name="Management1",
        mgmt_if_index=999001,
    ),
    # NX-OS 6 (Nexus 5548): ifIndex 0x1a000000 + (port-1) << 12, swapped lldpLocPortId/Desc,
    # advertises the abbreviated name (Eth1/1).
    "cisco_nxos": AgentStyle(
        "1.3.6.1.4.1.9.12.3.1.3.1084",
        "Cisco NX-OS(tm) n5000, Software (n5000-uk9), Version 6.0(2)N2(7), RELEASE SOFTWARE",
        if_index_base=436207616,
        if_index_step=4096,
        swap_loc_port_id_desc=True,
        advertise="abbrev",
        mgmt_if_index=83886080,
    ),
    # Junos (QFX5120): physical ports from ifIndex ~500, advertises the ifIndex as port id.
    "juniper_junos": AgentStyle(
        "1.3.6.1.4.1.2636.1.1.1.4.137",
        "Juniper Networks, Inc. qfx5120-48y-8c Ethernet Switch, kernel JUNOS 21.4R3-S5.4",
        if_index_base=510,
        advertise="ifindex",
        mgmt_name="em0",
        mgmt_if_index=33,
    ),
    # Onyx (SN2700): Eth1/N.
    "mellanox_mlnxos": AgentStyle(
        "1.3.6.1.4.1.33049.2.1.1.1.5",
        "NVIDIA Onyx, MSN2700, Onyx 3.10.4006",
        if_index_base=101,
        mgmt_if_index=1,
    ),
    # SONiC: net-snmp's Linux sysObjectID, ifIndex from the first lane, ifDescr = alias (etpN).
    "sonic": AgentStyle(
        "1.3.6.1.4.1.8072.3.2.10",
        "SONiC Software Version: SONiC.202311.1 - HwSku: Mellanox-SN2700 - Distribution: Debian 12.5 - "
        "Kernel: 6.1.0-11-2-amd64",
        if_index_base=1,
        lane_if_index=True,
        if_descr_alias=True,
        advertise="local",
        mgmt_name="eth0",
        mgmt_if_index=10000,
    ),
    # Cumulus: kernel ifIndex (lo 1, eth0 2, swp1 3, ...), lldpd advertises the ifname.
    "cumulus": AgentStyle(
        "1.3.6.1.4.1.40310",
        "Cumulus Linux 5.9.1 running on Mellanox SN2410",
        if_index_base=3,
        mgmt_name="eth0",
        mgmt_if_index=2,
    ),
}

HOST_SYS_DESCR = "Ubuntu 22.04.4 LTS Linux 5.15.0-105-generic #115-Ubuntu SMP x86_64"


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big")


def port_number(device: Device, port: str, ports: list[Port]) -> int:
    """1-based front-panel position of ``port`` on ``device``."""
    for k, p in enumerate(ports, start=1):
        if p.port == port:
            return k
    raise KeyError(f"{device.name} has no port {port}")


def if_index(style: AgentStyle, k: int, name: str) -> int:
    if style.lane_if_index:
        lane = int(re.sub(r"\D", "", name) or 0)
        return lane // 4 + 1
    return style.if_index_base + (k - 1) * style.if_index_step


def lldp_port_num(style: AgentStyle, k: int, name: str) -> int:
    return k if style.lldp_port_num == "base_port" else if_index(style, k, name)


def _abbrev(name: str) -> str:
    return re.sub(r"^Ethernet", "Eth", name)


def _hex(data: bytes) -> str:
    return data.hex()


def _octets(value: str | bytes) -> tuple[str, str]:
    """(tag, value) for an OCTET STRING: plain when it is safe ASCII, hex (4x) otherwise."""
    raw = value.encode() if isinstance(value, str) else value
    if raw and all(32 <= b < 127 and b != ord("|") for b in raw):
        return "4", raw.decode()
    return "4x", _hex(raw)


def mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def mgmt_ip(index: int, host: bool) -> tuple[int, int, int, int]:
    return (10, 0 if host else 255, index // 250, index % 250 + 1)


@dataclass(frozen=True)
class Advert:
    """What one end of a cable advertises to the other (the rows of the other's lldpRemTable)."""

    chassis_mac: bytes
    port_subtype: int
    port_id: bytes
    port_desc: str
    sys_name: str
    sys_desc: str
    mgmt: tuple[int, int, int, int]


class RecordBuilder:
    """Builds one snmprec per Ethernet switch of a ground truth."""

    def __init__(self, truth: GroundTruth) -> None:
        self.truth = truth
        self.switches = [d for d in truth.switches(fabric=LinkKind.ETH)]
        self.index = {d.id: i for i, d in enumerate(self.switches)}
        self.hosts = {d.id: i for i, d in enumerate(truth.hosts())}
        self._ports = {d.id: truth.ports_of(d.id) for d in self.switches}

    def style(self, device: Device) -> AgentStyle:
        return AGENT_STYLES[device.platform or ""]

    def advert(self, device_id: str, port: str) -> Advert:
        dev = self.truth.device(device_id)
        if dev.kind is DeviceKind.HOST:
            nic = next(p for p in self.truth.ports_of(device_id) if p.port == port)
            assert nic.mac is not None
            mac = mac_bytes(nic.mac)
            # lldpd default: chassis id = a MAC of the host, port id = the NIC's MAC, descr = ifname.
            return Advert(mac, 3, mac, port, dev.name, HOST_SYS_DESCR, mgmt_ip(self.hosts[device_id], True))
        style = self.style(dev)
        ports = self._ports[device_id]
        k = port_number(dev, port, ports)
        if style.advertise == "abbrev":
            subtype, pid = 5, _abbrev(port).encode()
        elif style.advertise == "ifindex":
            subtype, pid = 7, str(if_index(style, k, port)).encode()
        elif style.advertise == "local":
            subtype, pid = 7, port.encode()
        else:
            subtype, pid = 5, port.encode()
        return Advert(
            mac_bytes(dev.id), subtype, pid, port, dev.name, style.sys_descr, mgmt_ip(self.index[device_id], False)
        )

    def description(self, device_id: str, port: str) -> str:
        peer = self.truth.peer(device_id, port)
        if peer is None:
            return ""
        dev = self.truth.device(peer.device_id)
        return f"{dev.attributes.get('inventory_name', dev.name)}:{peer.port}"

    def records(self, device: Device) -> list[tuple[str, str, str]]:
        style = self.style(device)
        ports = self._ports[device.id]
        seed = _seed(device.id)
        rows: list[tuple[str, str, str]] = [
            ("1.3.6.1.2.1.1.1.0", *_octets(style.sys_descr)),
            ("1.3.6.1.2.1.1.2.0", "6", style.sys_object_id),
            ("1.3.6.1.2.1.1.3.0", "67", str(8_640_000 + seed % 100_000)),
            ("1.3.6.1.2.1.1.5.0", *_octets(device.name)),
        ]
        chassis = mac_bytes(device.id)
        rows += [
            (f"{LLDP_LOC}.1.0", "2", "4"),
            (f"{LLDP_LOC}.2.0", "4x", _hex(chassis)),
            (f"{LLDP_LOC}.3.0", *_octets(device.name)),
            (f"{LLDP_LOC}.4.0", *_octets(style.sys_descr)),
        ]
        mac_base = int.from_bytes(chassis, "big")
        interfaces = [(style.mgmt_if_index, style.mgmt_name, style.mgmt_name, 1000, chassis, "")]
        rem_index = 1 + seed % 50  # like lldpd: a per-agent counter, not 1 for every row
        for k, p in enumerate(ports, start=1):
            idx = if_index(style, k, p.port)
            desc = self.description(device.id, p.port)
            speed = int((p.speed_gbps or 0) * 1000)
            port_mac = (mac_base + k).to_bytes(6, "big")
            interfaces.append((idx, p.port, f"etp{k}" if style.if_descr_alias else p.port, speed, port_mac, desc))
            pn = lldp_port_num(style, k, p.port)
            rows.append((f"{DOT1D_BASE_PORT_IF_INDEX}.{k}", "2", str(idx)))
            loc_id, loc_desc = (desc or " ", p.port) if style.swap_loc_port_id_desc else (p.port, desc)
            rows += [
                (f"{LLDP_LOC}.7.1.2.{pn}", "2", "5"),
                (f"{LLDP_LOC}.7.1.3.{pn}", *_octets(loc_id)),
                (f"{LLDP_LOC}.7.1.4.{pn}", *_octets(loc_desc)),
            ]
            peer = self.truth.peer(device.id, p.port)
            if peer is None:
                continue
            ad = self.advert(peer.device_id, peer.port)
            tm = 1000 + (seed + 37 * k) % 90_000  # nonzero lldpRemTimeMark, differs per row
            rem_index += 1 + (k % 3)
            key = f"{tm}.{pn}.{rem_index}"
            rows += [
                (f"{LLDP_REM}.4.{key}", "2", "4"),
                (f"{LLDP_REM}.5.{key}", "4x", _hex(ad.chassis_mac)),
                (f"{LLDP_REM}.6.{key}", "2", str(ad.port_subtype)),
                (f"{LLDP_REM}.7.{key}", *_octets(ad.port_id)),
                (f"{LLDP_REM}.8.{key}", *_octets(ad.port_desc)),
                (f"{LLDP_REM}.9.{key}", *_octets(ad.sys_name)),
                (f"{LLDP_REM}.10.{key}", *_octets(ad.sys_desc)),
                (f"{LLDP_REM}.11.{key}", "4x", "2800"),  # bridge, router
                (f"{LLDP_REM}.12.{key}", "4x", "2800"),
            ]
            addr = ".".join(str(b) for b in ad.mgmt)
            rows += [
                (f"{LLDP_REM_MAN}.3.{key}.1.4.{addr}", "2", "2"),
                (f"{LLDP_REM_MAN}.4.{key}.1.4.{addr}", "2", "0"),
                (f"{LLDP_REM_MAN}.5.{key}.1.4.{addr}", "6", "1.3.6.1.2.1.2.2.1.1"),
            ]
        for idx, name, descr, speed, mac, alias in interfaces:
            rows += [
                (f"{IF_TABLE}.2.{idx}", *_octets(descr)),
                (f"{IF_TABLE}.6.{idx}", "4x", _hex(mac)),
                (f"{IFX_TABLE}.1.{idx}", *_octets(name)),
                (f"{IFX_TABLE}.15.{idx}", "66", str(speed)),
                (f"{IFX_TABLE}.18.{idx}", *_octets(alias)) if alias else (f"{IFX_TABLE}.18.{idx}", "4", ""),
            ]
        return rows


def render(rows: Iterable[tuple[str, str, str]]) -> str:
    """snmprec text, sorted numerically by OID as snmpsim's index needs."""
    ordered = sorted(rows, key=lambda r: tuple(int(x) for x in r[0].split(".")))
    return "".join(f"{o}|{t}|{v}\n" for o, t, v in ordered)


# ------------------------------------------------------------------------------------------------
# fault agents: extra switches that are not in the ground truth, one per failure mode
# ------------------------------------------------------------------------------------------------


def no_lldp_records(name: str) -> list[tuple[str, str, str]]:
    """A switch whose agent has IF-MIB but no LLDP-MIB at all (LLDP disabled)."""
    style = AGENT_STYLES["arista_eos"]
    rows = [
        ("1.3.6.1.2.1.1.1.0", *_octets(style.sys_descr)),
        ("1.3.6.1.2.1.1.2.0", "6", style.sys_object_id),
        ("1.3.6.1.2.1.1.5.0", *_octets(name)),
    ]
    for k in range(1, 5):
        rows += [
            (f"{IF_TABLE}.2.{k}", "4", f"Ethernet{k}"),
            (f"{IFX_TABLE}.1.{k}", "4", f"Ethernet{k}"),
            (f"{IFX_TABLE}.15.{k}", "66", "100000"),
        ]
    return rows


GARBAGE_PEER_MAC = "02:00:00:00:0b:ad"


def garbage_records(name: str) -> list[tuple[str, str, str]]:
    """A switch that answers with broken values. Rows, by local port (all lldpRemTable):

    1. valid row, remote sysName not UTF-8        -> landed, raw sysName bytes kept
    2. chassis id MAC subtype with 5 bytes         -> row quarantined
    3. chassis id subtype sent as OCTET STRING     -> row quarantined
    4. port id column missing (truncated row)      -> landed with no port id (real agents omit it too)
    5. port id subtype 9 (undefined)               -> row quarantined
    6. valid row, sysDesc sent as INTEGER          -> landed without sysDesc, the varbind quarantined
    plus ifHighSpeed.6 as OCTET STRING             -> varbind quarantined
    """
    style = AGENT_STYLES["cumulus"]
    peer = mac_bytes(GARBAGE_PEER_MAC)
    rows = [
        ("1.3.6.1.2.1.1.1.0", *_octets(style.sys_descr)),
        ("1.3.6.1.2.1.1.2.0", "6", style.sys_object_id),
        ("1.3.6.1.2.1.1.5.0", *_octets(name)),
        (f"{LLDP_LOC}.1.0", "2", "4"),
        (f"{LLDP_LOC}.2.0", "4x", "020000000bee"),
        (f"{LLDP_LOC}.3.0", *_octets(name)),
    ]
    for k in range(1, 7):
        idx = k + 2
        rows += [
            (f"{IF_TABLE}.2.{idx}", "4", f"swp{k}"),
            (f"{IFX_TABLE}.1.{idx}", "4", f"swp{k}"),
            (f"{IFX_TABLE}.15.{idx}", *(("4", "fast") if k == 6 else ("66", "100000"))),
            (f"{LLDP_LOC}.7.1.2.{idx}", "2", "5"),
            (f"{LLDP_LOC}.7.1.3.{idx}", "4", f"swp{k}"),
        ]

    def row(k: int, cols: dict[int, tuple[str, str]]) -> None:
        key = f"{500 + k}.{k + 2}.{k}"
        rows.extend((f"{LLDP_REM}.{c}.{key}", t, v) for c, (t, v) in cols.items())

    good = {4: ("2", "4"), 5: ("4x", _hex(peer)), 6: ("2", "5"), 7: ("4", "swp1"), 9: ("4", "peer")}
    row(1, {**good, 9: ("4x", "70656572ff fe".replace(" ", ""))})
    row(2, {**good, 5: ("4x", _hex(peer[:5]))})
    row(3, {**good, 4: ("4", "4")})
    row(4, {c: v for c, v in good.items() if c != 7})
    row(5, {**good, 6: ("2", "9")})
    row(6, {**good, 7: ("4", "swp6"), 10: ("2", "42")})
    return rows
