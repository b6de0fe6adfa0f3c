"""Vendor LLDP quirks as data: one row per platform, found by configured platform, sysObjectID or
sysDescr. Whatever cannot be said as data is a ``_clean_<platform>`` function, found by name.

Collectors (SNMP now, SSH later) call :func:`quirks_for` once per device and
:func:`remote_port_name` per row; nothing else in the code branches on a vendor. Every row names
the vendor behaviour it encodes, and every behaviour has a test in ``tests/unit/test_lldp_quirks.py``.
No platform needs a ``_clean_<platform>`` function yet; the SSH collector adds them here when a
TextFSM table needs more than a field map.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from core.lldp.models import PortIdSubtype
from core.lldp.names import looks_like_interface, normalise_interface

LocalPortNumbering = Literal["ifindex", "base_port"]


@dataclass(frozen=True)
class PlatformQuirks:
    """How one platform fills LLDP-MIB and IF-MIB."""

    platform: str
    sys_object_id_prefixes: tuple[str, ...] = ()
    sys_descr_pattern: str | None = None  # regex; also recognises the platform from a remote sysDesc
    local_port_num: LocalPortNumbering = "ifindex"
    """What lldpLocPortNum / lldpRemLocalPortNum count: ifIndex, or BRIDGE-MIB dot1dBasePort."""
    local_port_name_from: Literal["port_id", "port_desc"] = "port_id"
    """Which lldpLocPortTable column holds the interface name."""
    if_descr_is_name: bool = True
    """Whether ifDescr may stand in for a missing ifName (False where ifDescr is an alias)."""
    remote_port_id_is_ifindex: bool = False
    """The platform advertises its SNMP ifIndex as a 'local' port id and the name in the port description."""
    remote_port_desc_is_name: bool = False
    """With a MAC port id, the platform puts the interface name in the port description."""
    split_pattern: str | None = None
    """Regex (groups ``parent``, ``lane``) for breakout lanes in the normalised name."""
    note: str = ""


QUIRKS: tuple[PlatformQuirks, ...] = (
    PlatformQuirks(
        # NX-OS 6.x (Nexus 5000/7000) swaps lldpLocPortId and lldpLocPortDesc: the port id column
        # holds the configured description and the description column the interface name
        # (fixed in NX-OS 7). Listed before cisco_nxos so the version-specific row wins.
        platform="cisco_nxos_6",
        sys_object_id_prefixes=(),
        sys_descr_pattern=r"NX-OS.*Version 6\.",
        local_port_name_from="port_desc",
        split_pattern=r"(?P<parent>Ethernet\d+/\d+)/(?P<lane>\d+)",
        note="NX-OS 6 swaps lldpLocPortId and lldpLocPortDesc",
    ),
    PlatformQuirks(
        # NX-OS numbers LLDP local ports by ifIndex (Ethernet1/1 = 0x1a000000) and advertises its
        # ports abbreviated (``Eth1/1``); breakout lanes are Ethernet1/49/1.
        platform="cisco_nxos",
        sys_object_id_prefixes=("1.3.6.1.4.1.9.12.3.1.3",),
        sys_descr_pattern=r"Cisco NX-OS|Cisco Nexus Operating System",
        split_pattern=r"(?P<parent>Ethernet\d+/\d+)/(?P<lane>\d+)",
    ),
    PlatformQuirks(
        # Arista EOS numbers lldpLocPortNum / lldpRemLocalPortNum by BRIDGE-MIB base port, not
        # ifIndex (LibreNMS maps it through dot1dBasePortIfIndex for the same reason); on
        # fixed-config switches the two coincide for front-panel ports, on modular and
        # breakout-capable ones (Ethernet3/1/1 = ifIndex 3001) they do not. Lanes: Ethernet49/1.
        platform="arista_eos",
        sys_object_id_prefixes=("1.3.6.1.4.1.30065",),
        sys_descr_pattern=r"Arista Networks EOS",
        local_port_num="base_port",
        split_pattern=r"(?P<parent>Ethernet\d+)/(?P<lane>\d+)",
    ),
    PlatformQuirks(
        # Junos advertises its SNMP ifIndex as a locally assigned port id ("514") and the
        # interface name in the port description, unless `interface-name` port-id-subtype is set.
        platform="juniper_junos",
        sys_object_id_prefixes=("1.3.6.1.4.1.2636",),
        sys_descr_pattern=r"Juniper Networks|JUNOS",
        remote_port_id_is_ifindex=True,
        split_pattern=r"(?P<parent>(?:et|xe|ge)-\d+/\d+/\d+):(?P<lane>\d+)",
    ),
    PlatformQuirks(
        # SONiC (sonic-snmpagent): lldpLocPortNum is the ifIndex, which SONiC derives from the
        # port's first lane (Ethernet8 -> 3), and IF-MIB ifDescr is the port *alias* (etp3,
        # fortyGigE0/8), not its name: only ifName is the name.
        platform="sonic",
        sys_object_id_prefixes=(),  # SONiC reports net-snmp's Linux OID; recognised by sysDescr
        sys_descr_pattern=r"SONiC",
        if_descr_is_name=False,
    ),
    PlatformQuirks(
        # Cumulus Linux runs lldpd as net-snmp AgentX subagent: kernel ifIndex, split ports swp1s0.
        platform="cumulus",
        sys_object_id_prefixes=("1.3.6.1.4.1.40310",),
        sys_descr_pattern=r"Cumulus Linux",
        split_pattern=r"(?P<parent>swp\d+)s(?P<lane>\d+)",
    ),
    PlatformQuirks(
        # NVIDIA/Mellanox Onyx: ifIndex numbering, ports named Eth1/1 (normalised to Ethernet1/1).
        # After SONiC and Cumulus: both run on Mellanox hardware and name it in their sysDescr.
        platform="mellanox_mlnxos",
        sys_object_id_prefixes=("1.3.6.1.4.1.33049",),
        sys_descr_pattern=r"Onyx|MLNX-OS",
        split_pattern=r"(?P<parent>Ethernet\d+/\d+)/(?P<lane>\d+)",
    ),
    PlatformQuirks(
        # Plain lldpd + net-snmp (the LLDP lab, white boxes, hosts): kernel ifIndex.
        # lldpd's default advertisement is the MAC as port id and the ifname as port description
        # (lldpcli `configure lldp portidsubtype`): hosts look like this.
        platform="linux_lldpd",
        sys_object_id_prefixes=("1.3.6.1.4.1.8072.3.2.10",),
        sys_descr_pattern=r"Linux",
        remote_port_desc_is_name=True,
    ),
    PlatformQuirks(
        platform="cisco_ios", sys_object_id_prefixes=("1.3.6.1.4.1.9.1",), sys_descr_pattern=r"Cisco IOS Software"
    ),
    PlatformQuirks(platform="cisco_xr", sys_object_id_prefixes=(), sys_descr_pattern=r"Cisco IOS XR"),
)
"""Ordered: the first row whose sysDescr pattern / sysObjectID prefix matches wins."""

QUIRKS_BY_PLATFORM: Mapping[str, PlatformQuirks] = {q.platform: q for q in QUIRKS}
DEFAULT_QUIRKS = PlatformQuirks(platform="generic", note="standard LLDP-MIB: local port numbers are ifIndexes")


def detect_platform(sys_object_id: str | None, sys_descr: str | None) -> tuple[str | None, str]:
    """(platform key, how it was found) from what the device says about itself.

    sysDescr patterns are tried first because they carry the version (NX-OS 6 vs 7); sysObjectID
    prefixes second (SONiC reports a generic net-snmp OID, so it needs its sysDescr).
    """
    if sys_descr:
        for q in QUIRKS:
            if q.sys_descr_pattern and re.search(q.sys_descr_pattern, sys_descr):
                return q.platform, "sysDescr"
    if sys_object_id:
        oid = sys_object_id.lstrip(".")
        for q in QUIRKS:
            if any(oid == p or oid.startswith(p + ".") for p in q.sys_object_id_prefixes):
                return q.platform, "sysObjectID"
    return None, "none"


def quirks_for(
    configured: str | None, sys_object_id: str | None = None, sys_descr: str | None = None
) -> tuple[PlatformQuirks, str]:
    """The quirks to apply to a device and where the platform came from.

    What the device reports wins over the configured platform when both are known and the
    reported one is a version-specific refinement of the configured one (``cisco_nxos_6`` for a
    configured ``cisco_nxos``); otherwise the configuration wins (an operator who wrote the
    platform knows better than a sysDescr banner).
    """
    detected, how = detect_platform(sys_object_id, sys_descr)
    if configured and configured in QUIRKS_BY_PLATFORM:
        if detected and detected != configured and detected.startswith(configured + "_"):
            return QUIRKS_BY_PLATFORM[detected], how
        return QUIRKS_BY_PLATFORM[configured], "config"
    if detected:
        return QUIRKS_BY_PLATFORM[detected], how
    return DEFAULT_QUIRKS, "none"


def remote_port_name(
    port_id_subtype: int, port_id: str, port_desc: str | None, remote_platform: str | None
) -> str | None:
    """The normalised name of the remote port, when the advertisement names one.

    Interface-name and alias ids are names; a MAC or network-address id is not (the port is found
    by its MAC instead), except that lldpd puts the name in the description beside a MAC id. A
    'local' id is a name unless the remote platform is known to put its ifIndex there (Junos), in
    which case the description carries the name.
    """
    quirks = QUIRKS_BY_PLATFORM.get(remote_platform or "", DEFAULT_QUIRKS)
    if port_id_subtype in (PortIdSubtype.INTERFACE_NAME, PortIdSubtype.INTERFACE_ALIAS):
        return normalise_interface(port_id)
    if port_id_subtype == PortIdSubtype.LOCAL:
        if quirks.remote_port_id_is_ifindex and port_id.isdigit():
            return normalise_interface(port_desc) if port_desc and looks_like_interface(port_desc) else None
        return normalise_interface(port_id)
    if port_id_subtype == PortIdSubtype.MAC_ADDRESS and quirks.remote_port_desc_is_name and port_desc:
        return normalise_interface(port_desc) if looks_like_interface(port_desc) else None
    return None
