"""CLI output → LLDP records. Pure: no I/O, no netmiko connection.

Every platform's output goes through the parser its :class:`~connectors.ssh.platforms.CommandSpec`
names, into :class:`CliRow` (our field names, every other parsed field kept in ``extra``), then
into :class:`core.lldp.LldpNeighbor` with the same id rules as SNMP. Output that cannot be parsed
at all -- truncated JSON, another command's output, an interleaved prompt, binary junk, an
oversized response -- is quarantined *whole* with the command, the platform and the reason; a
single neighbour whose ids do not hold together is quarantined alone and the rest land.
"""

from __future__ import annotations

import html
import ipaddress
import json
import re
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from connectors.lldpctl.parser import KEEP_ALL, parse_lldpctl
from connectors.ssh.platforms import CLI_QUIRKS, NO_QUIRKS, CliQuirks, CommandSpec
from core.lldp import (
    IdError,
    LldpNeighbor,
    detect_platform,
    escaped,
    looks_like_interface,
    normalise_interface,
    parse_mac,
    remote_port_name,
    render_chassis_id,
    render_port_id,
)
from core.lldp.models import ChassisIdSubtype, PortIdSubtype
from core.quality import Quarantined

SOURCE = "cli"
MAX_OUTPUT_BYTES = 8 * 1024 * 1024
"""A 48-port switch's detail output is ~30 KB; anything this large is not an LLDP table."""
MAX_TABLE_LINE = 1024
MAX_TABLE_CHARS = 2 * 1024 * 1024
"""Text tables (TextFSM) are capped tighter: see :func:`check_table`."""

_PROMPT_RE = re.compile(r"^\S+(?:\s\[[^\]]*\])?\s?[#>$%]\s*(?:show|display|lldpctl|docker|net)\b", re.MULTILINE)
_CLI_ERROR_RE = re.compile(
    r"^\s*(?:% ?Invalid|% ?Incomplete|% ?Ambiguous|% ?Unrecognized|syntax error|error:|Invalid command|"
    r"unknown command|-bash: )",
    re.IGNORECASE | re.MULTILINE,
)

CHASSIS_TYPE_WORDS: dict[str, int] = {
    "mac": ChassisIdSubtype.MAC_ADDRESS,
    "macaddress": ChassisIdSubtype.MAC_ADDRESS,
    "mac address": ChassisIdSubtype.MAC_ADDRESS,
    "mac address (4)": ChassisIdSubtype.MAC_ADDRESS,
    "network address": ChassisIdSubtype.NETWORK_ADDRESS,
    "networkaddress": ChassisIdSubtype.NETWORK_ADDRESS,
    "interface name": ChassisIdSubtype.INTERFACE_NAME,
    "interfacename": ChassisIdSubtype.INTERFACE_NAME,
    "locally assigned": ChassisIdSubtype.LOCAL,
    "local": ChassisIdSubtype.LOCAL,
    "chassis component": ChassisIdSubtype.CHASSIS_COMPONENT,
}
PORT_TYPE_WORDS: dict[str, int] = {
    "mac": PortIdSubtype.MAC_ADDRESS,
    "macaddress": PortIdSubtype.MAC_ADDRESS,
    "mac address": PortIdSubtype.MAC_ADDRESS,
    "interface name": PortIdSubtype.INTERFACE_NAME,
    "interfacename": PortIdSubtype.INTERFACE_NAME,
    "interface alias": PortIdSubtype.INTERFACE_ALIAS,
    "interfacealias": PortIdSubtype.INTERFACE_ALIAS,
    "locally assigned": PortIdSubtype.LOCAL,
    "local": PortIdSubtype.LOCAL,
    "network address": PortIdSubtype.NETWORK_ADDRESS,
}


class OutputError(ValueError):
    """The whole output is unusable (quarantined whole)."""


@dataclass
class CliRow:
    """One neighbour in our field names; ``extra`` keeps every parsed field we have no column for."""

    local_port: str
    chassis_id: str | None = None
    chassis_id_type: str | None = None
    port_id: str | None = None
    port_id_type: str | None = None
    port_desc: str | None = None
    sys_name: str | None = None
    sys_desc: str | None = None
    man_addrs: tuple[str, ...] = ()
    rem_index: int | None = None
    parent_interface: str | None = None
    capabilities: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CliParse:
    neighbors: list[LldpNeighbor] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)
    rows: int = 0  # neighbours the output held (landed + quarantined)


def _blank(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


_DOTTED_MAC = re.compile(r"^([0-9a-fA-F]{1,4})\.([0-9a-fA-F]{1,4})\.([0-9a-fA-F]{1,4})$")


def cli_mac(value: str) -> bytes:
    """A MAC as a CLI prints it. Cisco-style dotted MACs are three 16-bit numbers, so a group
    printed without its leading zeros (EOS: ``00c.297b.d2a8``) is still one MAC (``000c.297b.d2a8``)."""
    try:
        return parse_mac(value)
    except IdError:
        dotted = _DOTTED_MAC.match(value.strip())
        if dotted is None:
            raise
        return bytes.fromhex("".join(g.zfill(4) for g in dotted.groups()))


def _guess_chassis(value: str) -> int:
    try:
        cli_mac(value)
        return ChassisIdSubtype.MAC_ADDRESS
    except IdError:
        return ChassisIdSubtype.LOCAL


def _guess_port(value: str) -> int:
    try:
        parse_mac(value)
        return PortIdSubtype.MAC_ADDRESS
    except IdError:
        pass
    return PortIdSubtype.INTERFACE_NAME if looks_like_interface(value) else PortIdSubtype.LOCAL


def _raw(subtype: int, value: str, mac: int) -> bytes:
    return cli_mac(value) if subtype == mac else value.encode()


def local_port_num(name: str) -> int:
    """CLI output has no ifIndex; crc32 of the local name is stable across runs (position is not)."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def _subtype(words: dict[str, int], text: str | None, valid: type[IntEnum]) -> int | None:
    if not text:
        return None
    if text.strip().isascii() and text.strip().isdigit():  # IOS-XR XML gives the LLDP-MIB number itself
        number = int(text) if len(text.strip()) < 10 else 0
        if number not in valid._value2member_map_:
            raise IdError(f"subtype {number} is not defined (1..{max(valid)})")
        return number
    key = re.sub(r"\s*\(\d+\)\s*$", "", text.strip().lower())
    return words.get(key) or words.get(text.strip().lower())


def _ids(row: CliRow) -> tuple[int | None, bytes | None, str | None, int | None, bytes | None, str | None]:
    """(chassis subtype, raw, text, port subtype, raw, text); a side the device did not send is None."""
    c_type = _subtype(CHASSIS_TYPE_WORDS, row.chassis_id_type, ChassisIdSubtype)
    p_type = _subtype(PORT_TYPE_WORDS, row.port_id_type, PortIdSubtype)
    c_raw = c_text = p_raw = p_text = None
    if row.chassis_id:
        c_type = c_type or _guess_chassis(row.chassis_id)
        if c_type == ChassisIdSubtype.NETWORK_ADDRESS:
            raise ValueError("network-address ids are not rendered by CLI parsers yet")
        c_raw = _raw(c_type, row.chassis_id, ChassisIdSubtype.MAC_ADDRESS)
        c_text = render_chassis_id(c_type, c_raw)
    if row.port_id:
        p_type = p_type or _guess_port(row.port_id)
        if p_type == PortIdSubtype.NETWORK_ADDRESS:
            raise ValueError("network-address ids are not rendered by CLI parsers yet")
        p_raw = _raw(p_type, row.port_id, PortIdSubtype.MAC_ADDRESS)
        p_text = render_port_id(p_type, p_raw)
    return c_type, c_raw, c_text, p_type, p_raw, p_text


def to_neighbor(row: CliRow, mib: str, rem_index: int) -> LldpNeighbor:
    """A :class:`CliRow` as an LLDP record; IdError/ValueError when its ids do not hold together.

    A neighbour whose output lacks the chassis id (NX-OS summary) or the port id (Junos brief,
    devices that send only a description) still lands, with that id None: the local port and what
    the peer did send still place the link. One with no id and no name at all is not usable.
    """
    if not row.local_port.strip():
        raise ValueError("no local port: the neighbour cannot be placed on the switch")
    c_type, c_raw, c_text, p_type, p_raw, port_id = _ids(row)
    if c_text is None and port_id is None and not row.sys_name:
        raise ValueError("no chassis id, no port id and no system name: nothing identifies the neighbour")
    remote_platform, _ = detect_platform(None, row.sys_desc)
    remote = remote_port_name(p_type, port_id, row.port_desc, remote_platform) if p_type and port_id else None
    if (
        remote_platform is None
        and p_type == PortIdSubtype.LOCAL
        and port_id is not None
        and port_id.isdigit()
        and row.port_desc
        and looks_like_interface(row.port_desc)
    ):
        # Junos advertises its ifIndex as a 'local' port id and the name in the description; outputs
        # without the system description (Junos summary JSON) cannot tell us the peer is Junos.
        remote = normalise_interface(row.port_desc)
    if port_id is None and row.port_desc and looks_like_interface(row.port_desc):
        remote = normalise_interface(row.port_desc)  # no port id sent: a description that is a name
    neighbor = LldpNeighbor(
        mib=mib,
        time_mark=0,
        local_port_num=local_port_num(row.local_port),
        rem_index=row.rem_index if row.rem_index is not None else rem_index,
        local_if_index=None,
        local_port=normalise_interface(row.local_port),
        local_port_vendor=row.local_port,
        chassis_id_subtype=c_type,
        chassis_id_raw=c_raw,
        chassis_id=c_text,
        port_id_subtype=p_type,
        port_id_raw=p_raw,
        port_id=port_id,
        port_desc=row.port_desc,
        sys_name=row.sys_name,
        sys_name_raw=None,
        sys_desc=row.sys_desc,
        remote_port=remote,
        remote_platform=remote_platform,
        man_addrs=row.man_addrs,
    )
    # JSON can spell a NUL or a lone surrogate ("\u0000", "\ud800") that check_output never sees;
    # Postgres text holds neither, and one such value would fail the device's whole load.
    problem = neighbor.unstorable_field()
    if problem is not None:
        raise ValueError(problem)
    return neighbor


# ------------------------------------------------------------------------------------------------
# vendor spellings (CLI_QUIRKS) applied to every row of a structured output
# ------------------------------------------------------------------------------------------------

_TEXT_FIELDS = ("chassis_id", "chassis_id_type", "port_id", "port_id_type", "port_desc", "sys_name", "sys_desc")


def apply_quirks(rows: list[CliRow], quirks: CliQuirks) -> list[CliRow]:
    """Undo the NOS's spellings in place; every value changed is kept verbatim in ``extra``."""
    absent = {a.lower() for a in quirks.absent}
    for row in rows:
        for name in _TEXT_FIELDS:
            value = getattr(row, name)
            if value is None:
                continue
            new = value
            if quirks.xml_entities:
                new = html.unescape(new)
            if absent and new.strip().lower() in absent:
                new = None
            elif quirks.strip_quotes and name == "port_id" and len(new) >= 2 and new[0] == new[-1] == '"':
                new = new[1:-1] or None
            if new != value:
                row.extra[f"{name}_raw"] = value
                setattr(row, name, new)
        if row.parent_interface is not None and row.parent_interface.strip().lower() in absent | {"-"}:
            row.parent_interface = None
        if quirks.strip_quotes and len(row.local_port) >= 2 and row.local_port[0] == row.local_port[-1] == '"':
            row.extra["local_port_raw"] = row.local_port
            row.local_port = row.local_port[1:-1]
    return rows


# ------------------------------------------------------------------------------------------------
# structured (JSON) outputs: one _clean_<platform> per NOS, found by name
# ------------------------------------------------------------------------------------------------


def _items(value: Any) -> list[Any]:
    """A table that JSON renderers collapse to a bare object when it has one row (NX-OS, Junos)."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _clean_arista_eos(doc: Any) -> list[CliRow]:
    """``show lldp neighbors detail | json``: {"lldpNeighbors": {ifname: {"lldpNeighborInfo": [...]}}}.

    Newer EOS adds ``interfaceId_v2`` (the id without EOS's literal quotes) beside ``interfaceId``;
    it is preferred where present, and ``interfaceId``'s quotes are stripped (CLI_QUIRKS) otherwise.
    """
    table = doc["lldpNeighbors"]
    rows: list[CliRow] = []
    for ifname, body in table.items():
        for info in body.get("lldpNeighborInfo", []):
            port = info.get("neighborInterfaceInfo", {})
            quoted = _leaf(port, "interfaceId")
            rows.append(
                CliRow(
                    local_port=ifname,
                    chassis_id=_leaf(info, "chassisId"),
                    chassis_id_type=_leaf(info, "chassisIdType"),
                    port_id=_leaf(port, "interfaceId_v2") or quoted,
                    port_id_type=_leaf(port, "interfaceIdType"),
                    port_desc=_leaf(port, "interfaceDescription"),
                    sys_name=_leaf(info, "systemName"),
                    sys_desc=_leaf(info, "systemDescription"),
                    man_addrs=tuple(
                        address
                        for a in info.get("managementAddresses", [])
                        if str(a.get("addressType", "")).lower() in ("ipv4", "ipv6", "")
                        and (address := _leaf(a, "address")) is not None
                    ),
                    extra={
                        **{k: v for k, v in info.items() if k in ("ttl", "lastChangeTime", "neighborDiscoveryTime")},
                        **({"interfaceId": quoted} if port.get("interfaceId_v2") else {}),
                    },
                )
            )
    return rows


def _nxos_body(doc: Any) -> Any:
    """The ``show`` body, bare or inside an NX-API envelope (``ins_api.outputs.output[.body]``)."""
    if "ins_api" not in doc:
        return doc
    outputs = _items(doc["ins_api"]["outputs"]["output"])
    bodies = []
    for output in outputs:
        code = str(output.get("code", "200"))
        if code != "200":
            raise OutputError(f"NX-API answered {code}: {output.get('msg')!r}")
        body = output.get("body")
        if isinstance(body, dict) and ("TABLE_nbor_detail" in body or "TABLE_nbor" in body):
            bodies.append(body)
    if len(bodies) != 1:
        raise OutputError(f"NX-API envelope with {len(bodies)} LLDP neighbour bodies (expected one)")
    return bodies[0]


def _clean_cisco_nxos(doc: Any) -> list[CliRow]:
    """``show lldp neighbors [detail] | json``: TABLE_nbor_detail.ROW_nbor_detail (detail) or
    TABLE_nbor.ROW_nbor (summary), bare or in an NX-API envelope.

    NX-OS JSON collapses a one-row table to an object instead of a one-element list. The summary's
    ``chassis_id`` is the Device ID column (the system name; the chassis id only when the neighbour
    sent no name), so it is read as the name unless it is a MAC.
    """
    body = _nxos_body(doc)
    summary = "TABLE_nbor_detail" not in body and "TABLE_nbor" in body
    table = body["TABLE_nbor"] if summary else body["TABLE_nbor_detail"]
    if not table:  # an empty table renders as "" on some releases
        return []
    rows_in = _items(table["ROW_nbor"] if summary else table["ROW_nbor_detail"])
    rows: list[CliRow] = []
    quirks = CLI_QUIRKS["cisco_nxos"]
    for r in rows_in:
        row = CliRow(
            local_port=_required_leaf(r, "l_port_id"),
            chassis_id=_leaf(r, "chassis_id"),
            chassis_id_type=_leaf(r, "chassis_type"),
            port_id=_leaf(r, "port_id"),
            port_id_type=_leaf(r, "port_type"),
            port_desc=_leaf(r, "port_desc"),
            sys_name=_leaf(r, "sys_name"),
            sys_desc=_leaf(r, "sys_desc"),
            man_addrs=tuple(
                a
                for a in (_leaf(r, "mgmt_addr"), _leaf(r, "mgmt_addr_ipv6"))
                if a and a.lower() not in quirks.absent and _is_ip(a)
            ),
            capabilities=_leaf(r, "enabled_capability"),
            extra={k: r[k] for k in ("ttl", "hold_time", "vlan_id", "system_capability") if k in r},
        )
        if summary and quirks.summary_device_id_is_name and row.sys_name is None and row.chassis_id:
            try:
                cli_mac(row.chassis_id)
            except IdError:
                row.extra["chassis_id_field_raw"] = row.chassis_id
                row.extra["chassis_type_field_raw"] = row.chassis_id_type
                row.sys_name, row.chassis_id, row.chassis_id_type = row.chassis_id, None, None
        rows.append(row)
    return rows


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _junos(cell: Any) -> Any:
    # Junos JSON wraps every leaf as [{"data": value}] and every container as [{...}].
    if isinstance(cell, list) and cell and isinstance(cell[0], dict):
        if "data" in cell[0]:
            data = cell[0]["data"]
            # a container where the leaf's text should be stays one, so _leaf refuses it (never str() it)
            return data if isinstance(data, dict | list) else _blank(data)
        return {k: _junos(v) for k, v in cell[0].items()}
    return None


def _leaf(record: dict[str, Any], key: str) -> str | None:
    """A leaf's text; TypeError (the output is not the command's) where a container stands: a
    list or an object is never turned into text (``str(["a"])`` would land as an id)."""
    value = record.get(key)
    if isinstance(value, dict | list):
        raise TypeError(f"{key} is not a value")
    return _blank(value)


def _required_leaf(record: dict[str, Any], key: str) -> str:
    """A leaf the command always prints: KeyError when it is missing."""
    if key not in record:
        raise KeyError(key)
    return _leaf(record, key) or ""


def _index(text: str | None) -> int | None:
    """A remote index as the device printed it; None (the position is used) when it is not a
    plain number that fits the warehouse's bigint ("²".isdigit() is true, int("²") fails)."""
    if text and text.isascii() and text.isdigit() and len(text) <= 18:
        return int(text)
    return None


def _junos_rows(records: Iterable[dict[str, Any]]) -> list[CliRow]:
    """Junos neighbour records (JSON or XML, same names) as rows.

    The local port's name is ``lldp-local-interface`` where the reply has it; ``lldp-local-port-id``
    is then the local ifIndex (detail replies: ``519``), kept in ``extra``. Brief replies put the
    name in either of the two. ``lldp-remote-port-id`` is missing from brief replies of some
    releases (the description is all there is).
    """
    rows: list[CliRow] = []
    for r in records:
        interface, port_id = _leaf(r, "lldp-local-interface"), _leaf(r, "lldp-local-port-id")
        local = interface or port_id
        if not local:
            raise ValueError("Junos neighbour with neither lldp-local-interface nor lldp-local-port-id")
        described = r.get("lldp-system-description")
        sys_desc = _leaf(described, "lldp-remote-system-description") if isinstance(described, dict) else None
        extra = {"local_port_id_raw": port_id} if interface and port_id and port_id != interface else {}
        index = _leaf(r, "lldp-index")
        rows.append(
            CliRow(
                local_port=local,
                chassis_id=_leaf(r, "lldp-remote-chassis-id"),
                chassis_id_type=_leaf(r, "lldp-remote-chassis-id-subtype"),
                port_id=_leaf(r, "lldp-remote-port-id"),
                port_id_type=_leaf(r, "lldp-remote-port-id-subtype"),
                port_desc=_leaf(r, "lldp-remote-port-description"),
                sys_name=_leaf(r, "lldp-remote-system-name"),
                sys_desc=sys_desc or _leaf(r, "lldp-remote-system-description"),
                rem_index=_index(index),
                parent_interface=_leaf(r, "lldp-local-parent-interface-name"),
                extra=extra,
            )
        )
    return rows


def _clean_juniper_junos(doc: Any) -> list[CliRow]:
    """``show lldp neighbors [detail] | display json``: lldp-neighbors-information[0].lldp-neighbor-information."""
    info = doc["lldp-neighbors-information"][0]
    records = []
    for r in info.get("lldp-neighbor-information", []):
        if not isinstance(r, dict):
            raise TypeError("lldp-neighbor-information entry is not an object")
        records.append({k: _junos(v) for k, v in r.items() if k != "attributes"})
    return _junos_rows(records)


JSON_CLEANERS: dict[str, Callable[[Any], list[CliRow]]] = {
    name.removeprefix("_clean_"): fn
    for name, fn in dict(globals()).items()
    if name.startswith("_clean_") and not name.endswith("_xml")
}


# ------------------------------------------------------------------------------------------------
# XML outputs: the tree with namespaces dropped, walked by _clean_<platform>_xml
# ------------------------------------------------------------------------------------------------


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _leaves(element: ET.Element) -> dict[str, Any]:
    """Children as {name: text}, a child with children of its own as a nested dict."""
    out: dict[str, Any] = {}
    for child in element:
        name = _local(child.tag)
        if name in out:
            continue  # a repeated element (addresses, TLV lists): the first is enough for us
        out[name] = _leaves(child) if len(child) else _blank(child.text)
    return out


def _find(root: ET.Element, name: str) -> list[ET.Element]:
    return [e for e in root.iter() if _local(e.tag) == name]


def _clean_juniper_junos_xml(root: ET.Element) -> list[CliRow]:
    """``<lldp-neighbors-information>`` (brief or detail), bare or inside ``<rpc-reply>``."""
    if not _find(root, "lldp-neighbors-information"):
        raise OutputError("no <lldp-neighbors-information> in the XML")
    return _junos_rows(_leaves(e) for e in _find(root, "lldp-neighbor-information"))


def _xr_key(name: str) -> str:
    return name.replace("-", "").lower()  # XML agent CamelCase and NETCONF kebab-case meet here


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    return {_xr_key(k): (_flat(v) if isinstance(v, dict) else v) for k, v in record.items()}


def _clean_cisco_xr_xml(root: ET.Element) -> list[CliRow]:
    """IOS-XR LLDP oper data: the XML agent's ``DetailTable/Detail/Entry`` or NETCONF's
    ``details/detail/lldp-neighbor``. Only the detail table is read (the summary repeats it).

    Every element of one neighbour has a ``ReceivingInterfaceName``; the ``MIB`` block carries the
    LLDP-MIB subtype numbers and the agent's own (local port number, remote index).
    """
    tables = [e for e in root.iter() if _xr_key(_local(e.tag)) in ("detailtable", "details")]
    if not tables and not [e for e in root.iter() if _xr_key(_local(e.tag)) == "lldp"]:
        raise OutputError("no IOS-XR LLDP element in the XML")
    rows: list[CliRow] = []
    for table in tables:
        for element in table.iter():
            record = _flat(_leaves(element))
            if "receivinginterfacename" not in record or "chassisid" not in record:
                continue
            detail: dict[str, Any] = record["detail"] if isinstance(record.get("detail"), dict) else {}
            mib: dict[str, Any] = record["mib"] if isinstance(record.get("mib"), dict) else {}
            rem_index = _leaf(mib, "remindex")
            rows.append(
                CliRow(
                    local_port=_leaf(record, "receivinginterfacename") or "",
                    chassis_id=_leaf(record, "chassisid"),
                    chassis_id_type=_leaf(mib, "chassisidsubtype"),
                    port_id=_leaf(record, "portiddetail"),
                    port_id_type=_leaf(mib, "portidsubtype"),
                    port_desc=_leaf(detail, "portdescription"),
                    sys_name=_leaf(detail, "systemname") or _leaf(record, "deviceid"),
                    sys_desc=_leaf(detail, "systemdescription"),
                    rem_index=_index(rem_index),
                    parent_interface=_leaf(record, "receivingparentinterfacename"),
                    capabilities=_leaf(record, "enabledcapabilities"),
                    extra={k: mib[k] for k in ("remlocalportnum", "remtimemark") if k in mib},
                )
            )
    return rows


XML_CLEANERS: dict[str, Callable[[ET.Element], list[CliRow]]] = {
    name.removeprefix("_clean_").removesuffix("_xml"): fn
    for name, fn in dict(globals()).items()
    if name.startswith("_clean_") and name.endswith("_xml")
}


def parse_xml(text: str) -> ET.Element:
    """The XML tree; OutputError for anything else. A reply from a device never carries a DTD, so
    one with a DOCTYPE or ENTITY declaration (entity expansion bombs, external entities) is refused
    before the parser sees it."""
    if re.search(r"<!(DOCTYPE|ENTITY)", text, re.IGNORECASE):
        raise OutputError("XML with a DOCTYPE/ENTITY declaration (devices never send one)")
    try:
        return ET.fromstring(text.lstrip("\ufeff"))
    except ET.ParseError as err:
        raise OutputError(f"not XML ({err})") from None


# ------------------------------------------------------------------------------------------------
# TextFSM rows -> CliRow by the spec's field map
# ------------------------------------------------------------------------------------------------


def rows_from_textfsm(parsed: Iterable[dict[str, Any]], spec: CommandSpec) -> list[CliRow]:
    """Map TextFSM rows to :class:`CliRow`; a column without a field of ours lands in ``extra``."""
    out: list[CliRow] = []
    for rec in parsed:
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for column, value in rec.items():
            target = spec.fields.get(column)
            if target is None or (target not in CliRow.__dataclass_fields__ and target != "man_addr"):
                extra[column] = value
                continue
            text = _blank(value) if not isinstance(value, list) else ", ".join(value)
            if target == "man_addr":
                values.setdefault("man_addrs", ())
                if text:
                    values["man_addrs"] = (*values["man_addrs"], text)
            elif target == "rem_index":
                values["rem_index"] = int(text) if text else None
            elif target in values and values[target] is not None:
                extra[column] = value  # two columns mapped to one field: keep the second verbatim
            else:
                values[target] = text
        local = values.pop("local_port", None)
        if not local:
            raise ValueError(f"TextFSM row without a local port: {rec}")
        out.append(CliRow(local_port=local, extra=extra, **values))
    return out


def textfsm_parse(text: str, spec: CommandSpec) -> list[dict[str, Any]]:
    """TextFSM via netmiko's own helper with ``raise_parsing_error=True`` (netmiko returns the raw
    string on a template mismatch otherwise)."""
    from netmiko.utilities import get_structured_data_textfsm

    parsed = get_structured_data_textfsm(
        text,
        platform=spec.device_type,
        command=spec.command,
        template=spec.template_path,
        raise_parsing_error=True,
    )
    if isinstance(parsed, str):  # belt and braces: netmiko's fall-back shape
        raise OutputError("TextFSM returned the raw output (no template matched)")
    return list(parsed)


# ------------------------------------------------------------------------------------------------
# the entry point
# ------------------------------------------------------------------------------------------------


def check_output(text: str | bytes) -> str:
    """Reject outputs that are not a command's answer at all, before any parser sees them."""
    size = len(text.encode() if isinstance(text, str) else text)
    if size > MAX_OUTPUT_BYTES:
        raise OutputError(f"output of {size} bytes exceeds the {MAX_OUTPUT_BYTES}-byte limit")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise OutputError(f"binary output: not UTF-8 at byte {err.start}") from None
    bad = sum(1 for ch in text if ch == "\ufffd" or (ord(ch) < 32 and ch not in "\r\n\t"))
    if bad:
        raise OutputError(f"binary output: {bad} control or undecodable characters")
    error = _CLI_ERROR_RE.search(text)
    if error:
        line = text[error.start() :].lstrip().splitlines()[0]
        raise OutputError(f"the CLI answered with an error: {line[:200]!r}")
    prompt = _PROMPT_RE.search(text)
    if prompt:
        raise OutputError(f"a CLI prompt in the middle of the output: {prompt.group(0).strip()!r}")
    return text


def check_table(text: str) -> None:
    """Refuse a table TextFSM would take minutes over. ntc-templates' rules (``^\\s*...\\s*$``)
    backtrack quadratically on a long line: a 200 KB line of spaces or letters costs minutes
    (juniper_junos ``show lldp neighbors``: 8 KB, 0.4 s), so lines and the table are capped far
    above anything an LLDP table prints (TLV strings are at most 255 octets; a 48-port switch's
    detail table is ~30 KB)."""
    if len(text) > MAX_TABLE_CHARS:
        raise OutputError(
            f"a {len(text)}-character table exceeds the {MAX_TABLE_CHARS}-character limit for text tables"
        )
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_TABLE_LINE:
            raise OutputError(
                f"line {number} is {len(line)} characters long; no LLDP table line exceeds {MAX_TABLE_LINE}"
            )


def rows_for(text: str, spec: CommandSpec) -> list[CliRow]:
    """The output as rows; OutputError when the output as a whole is not this command's."""
    if spec.format in ("json", "xml"):
        if not text.strip():
            return []  # NX-OS and EOS print nothing at all for an empty LLDP table
        quirks = CLI_QUIRKS.get(spec.platform, NO_QUIRKS)
        if spec.format == "json":
            try:
                doc: Any = json.loads(text)
            except (ValueError, RecursionError) as err:
                raise OutputError(f"not JSON ({str(err)[:200]})") from None
            cleaner: Callable[[Any], list[CliRow]] | None = JSON_CLEANERS.get(spec.platform)
        else:
            doc = parse_xml(text)
            cleaner = XML_CLEANERS.get(spec.platform)
        if cleaner is None:
            raise OutputError(f"no {spec.format.upper()} reader for platform {spec.platform!r}")
        try:
            return apply_quirks(cleaner(doc), quirks)
        except OutputError:
            raise  # the cleaner's own verdict (an NX-API error answer), already worded
        except KeyError as err:
            raise OutputError(f"{spec.format.upper()} is not {spec.command!r} output: missing {err}") from None
        except (IndexError, TypeError, AttributeError, ValueError) as err:
            # ValueError: a record the cleaner cannot read at all (a Junos neighbour without a local
            # port); it escaped parse_output before, which promises never to raise
            raise OutputError(f"{spec.format.upper()} is not {spec.command!r} output: {err}") from None
        except RecursionError:
            raise OutputError(f"{spec.format.upper()} nested too deeply") from None
    if spec.format == "textfsm":
        check_table(text)
        try:
            return rows_from_textfsm(textfsm_parse(text, spec), spec)
        except OutputError:
            raise
        except Exception as err:  # textfsm raises its own TextFSMError / netmiko a generic one
            raise OutputError(f"TextFSM: {type(err).__name__}: {err}") from None
    raise OutputError(f"format {spec.format!r} has no row parser")


def parse_output(text: str | bytes, spec: CommandSpec, device: str) -> CliParse:
    """Parse one command's output for one device; never raises on bad input."""
    result = CliParse()
    context: dict[str, Any] = {"command": spec.command, "platform": spec.platform, "device_type": spec.device_type}

    def whole(reason: str) -> CliParse:
        payload: str | bytes = text
        if len(payload) > 1024 * 1024:
            payload = payload[: 1024 * 1024]  # the reason says how big it was; keep the first MiB
            context["truncated_payload"] = True
        result.quarantined.append(
            Quarantined(
                source=SOURCE, device=device, reason=reason, payload=payload, location="output", context=dict(context)
            )
        )
        return result

    try:
        clean = check_output(text)
    except OutputError as err:
        return whole(str(err))
    if spec.format == "lldpctl":
        parsed = parse_lldpctl(
            clean, device, source=SOURCE, command=spec.command, platform=spec.platform, host_filter=KEEP_ALL
        )
        result.neighbors = parsed.neighbors
        result.quarantined = parsed.quarantined
        result.rows = len(parsed.neighbors) + len(parsed.quarantined)
        return result
    try:
        rows = rows_for(clean, spec)
    except OutputError as err:
        return whole(f"unparseable {spec.command!r} output: {err}")
    mib = f"cli-{spec.format}"
    per_port: dict[str, int] = {}
    for row in rows:
        per_port[row.local_port] = per_port.get(row.local_port, 0) + 1
        try:
            result.neighbors.append(to_neighbor(row, mib, per_port[row.local_port]))
        except (ValueError, IdError) as err:
            local = escaped(row.local_port)  # it came out of JSON or XML: it may hold a NUL
            result.quarantined.append(
                Quarantined(
                    source=SOURCE,
                    device=device,
                    reason=f"bad neighbour on {local}: {err}",
                    payload=json.dumps(row.__dict__, default=str),
                    location=f"port {local}",
                    context=dict(context),
                )
            )
    result.rows = len(rows)
    return result
