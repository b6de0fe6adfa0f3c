"""Turn one switch's walked LLDP-MIB / IF-MIB / BRIDGE-MIB tables into LLDP records. Pure: no I/O.

The walker hands over every varbind as ``(tag, value)`` keyed by the OID suffix under the walked
base, so this module can be tested with hand-written tables and never sees pysnmp objects.
Nothing an agent sends is trusted: a wrong-typed or truncated varbind, an index of the wrong
shape, an id whose bytes do not fit its subtype, a row missing its chassis or port id -- each
becomes a :class:`~core.quality.Quarantined` with the OID and the reason, and the rest of the
device's rows still land. Remote rows are keyed by (local port number, remote index); the time
mark is ignored (it changes whenever the agent refreshes the row).
"""

from __future__ import annotations

import ipaddress
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from connectors.snmp.oids import (
    OID,
    SYS_DESCR,
    SYS_NAME,
    SYS_OBJECT_ID,
    WALK_BASES,
    dotted,
)
from core.lldp import (
    IdError,
    Interface,
    LldpNeighbor,
    LldpSystem,
    PlatformQuirks,
    detect_platform,
    normalise_interface,
    quirks_for,
    remote_port_name,
    render_chassis_id,
    render_port_id,
    text_of,
)
from core.lldp.models import ChassisIdSubtype, PortIdSubtype
from core.quality import CollectionStatus, Quarantined

SOURCE = "snmp"

Value = tuple[str, Any]
"""(tag, python value): tags are int, gauge, counter, counter64, timeticks, octets, oid, ipaddr,
opaque, null, nosuch, end. Octets are bytes, oids dotted text, numbers int."""

TAG_NAMES = {
    "int": "INTEGER",
    "gauge": "Gauge32",
    "counter": "Counter32",
    "counter64": "Counter64",
    "timeticks": "TimeTicks",
    "octets": "OCTET STRING",
    "oid": "OBJECT IDENTIFIER",
    "ipaddr": "IpAddress",
    "opaque": "Opaque",
    "null": "NULL",
    "nosuch": "noSuchObject",
    "end": "endOfMibView",
}
_NUMERIC = frozenset({"int", "gauge", "counter", "counter64", "timeticks"})


@dataclass
class DeviceWalk:
    """Everything one poll of one switch returned, before interpretation."""

    device: str
    configured_platform: str | None = None
    system: dict[OID, Value] = field(default_factory=dict)  # GET of SYSTEM_OIDS
    tables: dict[str, dict[OID, Value]] = field(default_factory=dict)  # walk name -> OID suffix -> value
    failure: CollectionStatus | None = None  # set when the device could not be polled at all
    failure_detail: str | None = None
    incomplete: dict[str, str] = field(default_factory=dict)  # walk name -> why it stopped early
    requests: int = 0

    def varbinds(self) -> int:
        return len(self.system) + sum(len(t) for t in self.tables.values())


@dataclass
class LldpCollection:
    """One device's interpreted poll: what lands in raw.* and ops.*."""

    device: str
    system: LldpSystem | None
    interfaces: list[Interface]
    neighbors: list[LldpNeighbor]
    quarantined: list[Quarantined]
    status: CollectionStatus
    detail: str | None = None
    requests: int = 0
    varbinds: int = 0


class _Rejects:
    """Collects quarantined varbinds/rows for one device."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.items: list[Quarantined] = []

    def add(self, reason: str, location: str, payload: str | bytes, **context: Any) -> None:
        self.items.append(
            Quarantined(
                source=SOURCE, device=self.device, reason=reason, payload=payload, location=location, context=context
            )
        )

    def varbind(self, base: OID, suffix: OID, value: Value, reason: str) -> None:
        name = dotted(base + suffix)
        self.add(reason, name, describe(value), tag=value[0])


def describe(value: Value) -> str:
    """A varbind value for humans (quarantine payloads): type and value, bytes as hex when binary."""
    tag, v = value
    if isinstance(v, bytes):
        text, ok = text_of(v)
        shown = text if ok and text.isprintable() else "0x" + v.hex()
        return f"{TAG_NAMES.get(tag, tag)}: {shown}"
    return f"{TAG_NAMES.get(tag, tag)}: {v}"


def _wrong_type(column: str, expected: str, value: Value) -> str:
    return f"{column}: expected {expected}, got {TAG_NAMES.get(value[0], value[0])}"


def _octets(value: Value | None) -> bytes | None:
    return value[1] if value is not None and value[0] == "octets" else None


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    text, _ = text_of(raw)
    return text or None


def _text_and_raw(raw: bytes | None) -> tuple[str | None, bytes | None]:
    """Text form, plus the bytes when they were not UTF-8 (non-UTF-8 sysNames are kept, not lost)."""
    if raw is None:
        return None, None
    text, ok = text_of(raw)
    return (text or None), (None if ok else raw)


# ------------------------------------------------------------------------------------------------
# system + local data
# ------------------------------------------------------------------------------------------------


def _system(walk: DeviceWalk, mib: str | None, rejects: _Rejects) -> tuple[LldpSystem, PlatformQuirks]:
    sys_descr_v = walk.system.get(SYS_DESCR)
    sys_name_v = walk.system.get(SYS_NAME)
    sys_oid_v = walk.system.get(SYS_OBJECT_ID)
    sys_descr = sys_name = sys_oid = None
    sys_name_raw = None
    for label, v in (("sysDescr", sys_descr_v), ("sysName", sys_name_v)):
        if v is not None and v[0] not in ("octets", "nosuch", "null"):
            rejects.add(_wrong_type(label, "OCTET STRING", v), label, describe(v))
    if _octets(sys_descr_v) is not None:
        sys_descr = _text(_octets(sys_descr_v))
    if _octets(sys_name_v) is not None:
        sys_name, sys_name_raw = _text_and_raw(_octets(sys_name_v))
    if sys_oid_v is not None:
        if sys_oid_v[0] == "oid":
            sys_oid = str(sys_oid_v[1])
        elif sys_oid_v[0] not in ("nosuch", "null"):
            rejects.add(_wrong_type("sysObjectID", "OBJECT IDENTIFIER", sys_oid_v), "sysObjectID", describe(sys_oid_v))
    quirks, how = quirks_for(walk.configured_platform, sys_oid, sys_descr)

    chassis_subtype = chassis_raw = chassis_text = lldp_name = None
    local = walk.tables.get("lldpLocalSystemData" if mib != "lldp-v2" else "lldpV2LocalSystemData", {})
    base = WALK_BASES["lldpLocalSystemData" if mib != "lldp-v2" else "lldpV2LocalSystemData"]
    sub_v, id_v, name_v = local.get((1, 0)), local.get((2, 0)), local.get((3, 0))
    if sub_v is not None and sub_v[0] != "int":
        rejects.varbind(base, (1, 0), sub_v, _wrong_type("lldpLocChassisIdSubtype", "INTEGER", sub_v))
    elif sub_v is not None:
        chassis_subtype = int(sub_v[1])
    if id_v is not None and id_v[0] != "octets":
        rejects.varbind(base, (2, 0), id_v, _wrong_type("lldpLocChassisId", "OCTET STRING", id_v))
    elif id_v is not None:
        chassis_raw = id_v[1]
    if chassis_subtype is not None and chassis_raw is not None:
        try:
            chassis_text = render_chassis_id(chassis_subtype, chassis_raw)
        except IdError as err:
            rejects.varbind(base, (2, 0), id_v, f"lldpLocChassisId: {err}")  # type: ignore[arg-type]
    if name_v is not None:
        lldp_name = _text(_octets(name_v))
    system = LldpSystem(
        sys_name=sys_name,
        sys_name_raw=sys_name_raw,
        sys_descr=sys_descr,
        sys_object_id=sys_oid,
        platform=quirks.platform,
        platform_source=how,
        mib=mib,
        chassis_id_subtype=chassis_subtype,
        chassis_id_raw=chassis_raw,
        chassis_id=chassis_text,
        lldp_sys_name=lldp_name,
    )
    return system, quirks


def _local_ports(walk: DeviceWalk, mib: str, quirks: PlatformQuirks, rejects: _Rejects) -> dict[int, str]:
    """lldpLocPortNum -> interface name as the LLDP agent states it (quirk-corrected column)."""
    name = "lldpLocalSystemData" if mib == "lldp" else "lldpV2LocalSystemData"
    base = WALK_BASES[name]
    columns: dict[int, dict[int, Value]] = defaultdict(dict)
    for suffix, value in walk.tables.get(name, {}).items():
        if suffix[:2] != (7, 1) or len(suffix) < 3:
            continue
        if len(suffix) != 4:
            rejects.varbind(base, suffix, value, "lldpLocPortTable: index must be one port number")
            continue
        columns[suffix[3]][suffix[2]] = value
    out: dict[int, str] = {}
    want = 4 if quirks.local_port_name_from == "port_desc" else 3
    for port, cols in columns.items():
        v = cols.get(want)
        raw = _octets(v)
        if v is not None and raw is None:
            rejects.varbind(base, (7, 1, want, port), v, _wrong_type("lldpLocPort column", "OCTET STRING", v))
            continue
        if want == 3:
            subtype_v = cols.get(2)
            subtype = int(subtype_v[1]) if subtype_v is not None and subtype_v[0] == "int" else None
            if subtype in (PortIdSubtype.MAC_ADDRESS, PortIdSubtype.NETWORK_ADDRESS):
                raw = _octets(cols.get(4))  # a MAC/address id is not a name; the description may be
        text = _text(raw)
        if text:
            out[port] = text
    return out


def _interfaces(walk: DeviceWalk, quirks: PlatformQuirks, rejects: _Rejects) -> tuple[list[Interface], dict[int, int]]:
    per_if: dict[int, dict[str, Any]] = defaultdict(dict)
    expect = {"ifName": "octets", "ifDescr": "octets", "ifAlias": "octets", "ifPhysAddress": "octets"}
    for column in ("ifName", "ifDescr", "ifAlias", "ifHighSpeed", "ifPhysAddress"):
        base = WALK_BASES[column]
        for suffix, value in walk.tables.get(column, {}).items():
            if len(suffix) != 1:
                rejects.varbind(base, suffix, value, f"{column}: index must be one ifIndex")
                continue
            if column == "ifHighSpeed":
                if value[0] not in _NUMERIC:
                    rejects.varbind(base, suffix, value, _wrong_type(column, "Gauge32", value))
                    continue
                if not 0 <= int(value[1]) <= 2**32 - 1:
                    # Gauge32: a negative INTEGER or a Counter64 past 2^63 is no speed (and the
                    # latter would overflow the warehouse's bigint column)
                    rejects.varbind(base, suffix, value, f"{column}: {value[1]} is outside Gauge32 (0..4294967295)")
                    continue
                per_if[suffix[0]][column] = int(value[1])
            elif value[0] != expect[column]:
                rejects.varbind(base, suffix, value, _wrong_type(column, "OCTET STRING", value))
                per_if.setdefault(suffix[0], {})
            else:
                per_if[suffix[0]][column] = value[1]
    base_ports: dict[int, int] = {}
    bp_base = WALK_BASES["dot1dBasePortIfIndex"]
    for suffix, value in walk.tables.get("dot1dBasePortIfIndex", {}).items():
        if len(suffix) != 1 or value[0] not in _NUMERIC:
            rejects.varbind(bp_base, suffix, value, "dot1dBasePortIfIndex: expected INTEGER indexed by base port")
            continue
        base_ports[suffix[0]] = int(value[1])
    by_if_base = {if_index: bp for bp, if_index in base_ports.items()}
    interfaces: list[Interface] = []
    for if_index in sorted(per_if):
        cols = per_if[if_index]
        if_name = _text(cols.get("ifName"))
        if_descr = _text(cols.get("ifDescr"))
        vendor = if_name or (if_descr if quirks.if_descr_is_name else None)
        phys: bytes | None = cols.get("ifPhysAddress")
        mac = ":".join(f"{b:02x}" for b in phys) if phys else None
        interfaces.append(
            Interface(
                if_index=if_index,
                name=normalise_interface(vendor) if vendor else None,
                if_name=if_name,
                if_descr=if_descr,
                if_alias=_text(cols.get("ifAlias")),
                if_high_speed_mbps=cols.get("ifHighSpeed"),
                mac=mac,
                base_port=by_if_base.get(if_index),
            )
        )
    return interfaces, base_ports


# ------------------------------------------------------------------------------------------------
# remote table
# ------------------------------------------------------------------------------------------------

# column numbers of (chassis subtype, chassis id, port subtype, port id, port desc, sys name, sys desc)
_V1_COLUMNS = (4, 5, 6, 7, 8, 9, 10)
_V2_COLUMNS = (5, 6, 7, 8, 9, 10, 11)
_COLUMN_NAMES = ("ChassisIdSubtype", "ChassisId", "PortIdSubtype", "PortId", "PortDesc", "SysName", "SysDesc")


def _man_addrs(walk: DeviceWalk, mib: str, rejects: _Rejects) -> dict[tuple[int, int, int], list[str]]:
    name = "lldpRemManAddrTable" if mib == "lldp" else "lldpV2RemManAddrTable"
    base = WALK_BASES[name]
    key_len = 3 if mib == "lldp" else 4  # timeMark, port, [destAddrIndex,] remIndex
    out: dict[tuple[int, int, int], list[str]] = defaultdict(list)
    for suffix, value in walk.tables.get(name, {}).items():
        idx = suffix[1:]
        if len(idx) < key_len + 2:
            rejects.varbind(base, suffix, value, f"{name}: index too short for (row, address subtype, address)")
            continue
        family, length, addr = idx[key_len], idx[key_len + 1], idx[key_len + 2 :]
        if length != len(addr) or any(b > 255 for b in addr):
            rejects.varbind(base, suffix, value, f"{name}: address length {length} does not match the index")
            continue
        if mib == "lldp":
            key = (idx[1], idx[2], 0)
        else:
            key = (idx[1], idx[3], idx[2])
        raw = bytes(addr)
        if family == 1 and len(raw) == 4:
            text = str(ipaddress.IPv4Address(raw))
        elif family == 2 and len(raw) == 16:
            text = str(ipaddress.IPv6Address(raw))
        else:
            text = f"{family}:{raw.hex()}"
        if text not in out[key]:
            out[key].append(text)
    return out


def _neighbors(
    walk: DeviceWalk,
    mib: str,
    quirks: PlatformQuirks,
    interfaces: list[Interface],
    base_ports: dict[int, int],
    local_ports: dict[int, str],
    rejects: _Rejects,
) -> list[LldpNeighbor]:
    name = "lldpRemTable" if mib == "lldp" else "lldpV2RemTable"
    base = WALK_BASES[name]
    cols_wanted = _V1_COLUMNS if mib == "lldp" else _V2_COLUMNS
    index_len = 3 if mib == "lldp" else 4
    rows: dict[tuple[int, int, int], dict[int, tuple[OID, Value]]] = {}
    marks: dict[tuple[int, int, int], int] = {}
    for suffix, value in walk.tables.get(name, {}).items():
        if len(suffix) != 1 + index_len:
            rejects.varbind(base, suffix, value, f"{name}: index must be {index_len} numbers, got {len(suffix) - 1}")
            continue
        col = suffix[0]
        if col not in cols_wanted:
            continue
        if mib == "lldp":
            mark, port, rem = suffix[1:]
            key = (port, rem, 0)
        else:
            mark, port, dest, rem = suffix[1:]
            key = (port, rem, dest)
        rows.setdefault(key, {})[col] = (suffix, value)
        marks[key] = max(marks.get(key, 0), mark)
    addrs = _man_addrs(walk, mib, rejects)
    by_index = {i.if_index: i for i in interfaces}
    out: list[LldpNeighbor] = []
    for key in sorted(rows):
        port, rem, _dest = key
        cols = rows[key]
        values = [cols.get(c) for c in cols_wanted]
        label = f"{name} row (local port {port}, remote index {rem})"
        # A row whose chassis or port id column the agent left out still says a neighbour is
        # there (LibreNMS-style partial walks, agents that skip empty TLVs): it lands with that id
        # None. Only a present id that cannot be read quarantines the row.
        cs_v, ci_v, ps_v, pi_v = (entry[1] if entry is not None else None for entry in values[:4])
        problems: list[str] = []
        for column, v, tag in (("ChassisIdSubtype", cs_v, "int"), ("ChassisId", ci_v, "octets"),
                               ("PortIdSubtype", ps_v, "int"), ("PortId", pi_v, "octets")):  # fmt: skip
            if v is not None and v[0] != tag:
                problems.append(_wrong_type(f"lldpRem{column}", "INTEGER" if tag == "int" else "OCTET STRING", v))
        chassis = port_id = None
        c_sub = int(cs_v[1]) if cs_v is not None and cs_v[0] == "int" else None
        p_sub = int(ps_v[1]) if ps_v is not None and ps_v[0] == "int" else None
        if not problems and ci_v is not None:
            if c_sub is None:
                problems.append("lldpRemChassisId without lldpRemChassisIdSubtype: its bytes cannot be read")
            else:
                try:
                    chassis = render_chassis_id(c_sub, _mac_text(c_sub, ChassisIdSubtype.MAC_ADDRESS, ci_v[1]))
                except IdError as err:
                    problems.append(f"lldpRemChassisId: {err}")
        if not problems and pi_v is not None:
            if p_sub is None:
                problems.append("lldpRemPortId without lldpRemPortIdSubtype: its bytes cannot be read")
            else:
                try:
                    port_id = render_port_id(p_sub, _mac_text(p_sub, PortIdSubtype.MAC_ADDRESS, pi_v[1]))
                except IdError as err:
                    problems.append(f"lldpRemPortId: {err}")
        if problems:
            payload = "; ".join(f"{dotted(base + s)} = {describe(v)}" for s, v in cols.values())
            rejects.add("; ".join(problems), label, payload, local_port_num=port, rem_index=rem)
            continue
        optional: list[str | None] = []
        sys_name_raw: bytes | None = None
        for n, entry in zip(_COLUMN_NAMES[4:], values[4:], strict=True):
            if entry is None:
                optional.append(None)
                continue
            suffix, value = entry
            if value[0] != "octets":
                # The row's identity is fine; keep it, quarantine only the bad column.
                rejects.varbind(base, suffix, value, _wrong_type(f"lldpRem{n}", "OCTET STRING", value))
                optional.append(None)
                continue
            if n == "SysName":
                text, sys_name_raw = _text_and_raw(value[1])
                optional.append(text)
            else:
                optional.append(_text(value[1]))
        port_desc, sys_name, sys_desc = optional
        if_index, vendor = _local_port(port, mib, quirks, by_index, base_ports, local_ports)
        remote_platform, _ = detect_platform(None, sys_desc)
        out.append(
            LldpNeighbor(
                mib=mib,
                time_mark=marks[key],
                local_port_num=port,
                rem_index=rem,
                local_if_index=if_index,
                local_port=normalise_interface(vendor) if vendor else None,
                local_port_vendor=vendor,
                chassis_id_subtype=c_sub,
                chassis_id_raw=bytes(ci_v[1]) if ci_v is not None else None,
                chassis_id=chassis,
                port_id_subtype=p_sub,
                port_id_raw=bytes(pi_v[1]) if pi_v is not None else None,
                port_id=port_id,
                port_desc=port_desc,
                sys_name=sys_name,
                sys_name_raw=sys_name_raw,
                sys_desc=sys_desc,
                remote_port=remote_port_name(p_sub, port_id, port_desc, remote_platform)
                if p_sub is not None and port_id is not None
                else None,
                remote_platform=remote_platform,
                man_addrs=tuple(addrs.get(key, ())),
            )
        )
    return out


_MAC_TEXT = re.compile(r"^[0-9A-Fa-f]{2}([:\- ]?)(?:[0-9A-Fa-f]{2}\1){4}[0-9A-Fa-f]{2}$")


def _mac_text(subtype: int, mac_subtype: int, raw: bytes) -> bytes:
    """The 6 bytes of a MAC id some agents serve as text (``e4 f0 04 fb 1f fb``, ``00:00:..``: 17
    octets); any other value unchanged. The raw column keeps the bytes as served."""
    if subtype != mac_subtype or len(raw) == 6:
        return raw
    text, ok = text_of(raw)
    if ok and _MAC_TEXT.match(text):
        return bytes.fromhex(re.sub(r"[:\- ]", "", text))
    return raw


def _local_port(
    port: int,
    mib: str,
    quirks: PlatformQuirks,
    by_index: dict[int, Interface],
    base_ports: dict[int, int],
    local_ports: dict[int, str],
) -> tuple[int | None, str | None]:
    """(ifIndex, name as the switch spells it) of the local port a remote row hangs off.

    lldpRemLocalPortNum is an lldpLocPortNum, which 802.1AB does not tie to ifIndex: where the
    lldpLocPortId of that number names an interface of IF-MIB (OS10: port 612 is ifIndex 37), that
    interface it is. Otherwise the number is taken as an ifIndex (or a bridge port, per platform),
    and with no IF-MIB match at all the lldpLocPortId text itself is the name. LLDP-V2-MIB indexes
    remote rows by ifIndex by definition (lldpV2RemLocalIfIndex).
    """
    stated = local_ports.get(port)
    if mib == "lldp" and stated:
        named = [i for i in by_index.values() if stated in (i.if_name, i.if_descr)]
        if len(named) == 1:
            iface = named[0]
            return iface.if_index, iface.if_name or iface.if_descr
    if_index = _local_if_index(port, mib, quirks, by_index, base_ports)
    if if_index is not None and if_index in by_index:
        iface = by_index[if_index]
        name = iface.if_name or (iface.if_descr if quirks.if_descr_is_name else None)
        if name:
            return if_index, name
    return if_index, stated


def _local_if_index(
    port: int, mib: str, quirks: PlatformQuirks, by_index: dict[int, Interface], base_ports: dict[int, int]
) -> int | None:
    if mib == "lldp-v2":
        return port  # lldpV2RemLocalIfIndex is an ifIndex by definition
    if quirks.local_port_num == "base_port" and port in base_ports:
        return base_ports[port]
    if port in by_index:
        return port
    return base_ports.get(port)


# ------------------------------------------------------------------------------------------------
# entry point
# ------------------------------------------------------------------------------------------------


def _has_rows(walk: DeviceWalk, name: str) -> bool:
    return bool(walk.tables.get(name))


def interpret(walk: DeviceWalk) -> LldpCollection:
    """The device's records, quarantine and status from one poll."""
    rejects = _Rejects(walk.device)
    if walk.failure is not None and not walk.system and not any(walk.tables.values()):
        return LldpCollection(
            walk.device, None, [], [], [], walk.failure, walk.failure_detail, walk.requests, walk.varbinds()
        )
    if _has_rows(walk, "lldpRemTable") or _has_rows(walk, "lldpLocalSystemData"):
        mib: str | None = "lldp"
    elif _has_rows(walk, "lldpV2RemTable") or _has_rows(walk, "lldpV2LocalSystemData"):
        mib = "lldp-v2"
    else:
        mib = None
    system, quirks = _system(walk, mib, rejects)
    interfaces, base_ports = _interfaces(walk, quirks, rejects)
    neighbors: list[LldpNeighbor] = []
    rem_name = "lldpRemTable" if mib != "lldp-v2" else "lldpV2RemTable"
    detail: str | None = None
    status: CollectionStatus
    if walk.failure is not None:
        # Stopped answering part-way: land what completed, never a half-walked remote table.
        status, detail = walk.failure, walk.failure_detail
    elif rem_name in walk.incomplete:
        reason = walk.incomplete[rem_name]
        rejects.add(f"{rem_name} not landed: {reason}", rem_name, f"{len(walk.tables.get(rem_name, {}))} varbinds")
        status, detail = CollectionStatus.PARTIAL, f"{rem_name}: {reason}"
    elif mib is not None:
        local_ports = _local_ports(walk, mib, quirks, rejects)
        neighbors = _neighbors(walk, mib, quirks, interfaces, base_ports, local_ports, rejects)
        status = CollectionStatus.OK
    else:
        status = CollectionStatus.NO_DATA
    for table, reason in walk.incomplete.items():
        if table != rem_name and walk.failure is None:
            rejects.add(f"{table} incomplete: {reason}", table, f"{len(walk.tables.get(table, {}))} varbinds")
    if status is CollectionStatus.OK:
        if not neighbors:
            status = CollectionStatus.INVALID if rejects.items else CollectionStatus.NO_DATA
            detail = "LLDP neighbour table is empty" if not rejects.items else "every LLDP row was quarantined"
        elif rejects.items:
            status = CollectionStatus.PARTIAL
            detail = f"{len(rejects.items)} value(s) quarantined"
    elif status is CollectionStatus.NO_DATA:
        detail = "no LLDP: LLDP-MIB and LLDP-V2-MIB are empty"
    return LldpCollection(
        walk.device, system, interfaces, neighbors, rejects.items, status, detail, walk.requests, walk.varbinds()
    )
