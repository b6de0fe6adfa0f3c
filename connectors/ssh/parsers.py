"""CLI output → LLDP records. Pure: no I/O, no netmiko connection.

Every platform's output goes through the parser its :class:`~connectors.ssh.platforms.CommandSpec`
names, into :class:`CliRow` (our field names, every other parsed field kept in ``extra``), then
into :class:`core.lldp.LldpNeighbor` with the same id rules as SNMP. Output that cannot be parsed
at all -- truncated JSON, another command's output, an interleaved prompt, binary junk, an
oversized response -- is quarantined *whole* with the command, the platform and the reason; a
single neighbour whose ids do not hold together is quarantined alone and the rest land.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from connectors.lldpctl.parser import KEEP_ALL, parse_lldpctl
from connectors.ssh.platforms import CommandSpec
from core.lldp import (
    IdError,
    LldpNeighbor,
    detect_platform,
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


def _subtype(words: dict[str, int], text: str | None) -> int | None:
    if not text:
        return None
    key = re.sub(r"\s*\(\d+\)\s*$", "", text.strip().lower())
    return words.get(key) or words.get(text.strip().lower())


def _guess_chassis(value: str) -> int:
    try:
        parse_mac(value)
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
    return parse_mac(value) if subtype == mac else value.encode()


def local_port_num(name: str) -> int:
    """CLI output has no ifIndex; crc32 of the local name is stable across runs (position is not)."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def to_neighbor(row: CliRow, mib: str, rem_index: int) -> LldpNeighbor:
    """A :class:`CliRow` as an LLDP record; IdError/ValueError when its ids do not hold together."""
    if not row.chassis_id:
        raise ValueError("no chassis id in this output")
    if not row.port_id:
        raise ValueError("no port id in this output")
    c_type = _subtype(CHASSIS_TYPE_WORDS, row.chassis_id_type) or _guess_chassis(row.chassis_id)
    p_type = _subtype(PORT_TYPE_WORDS, row.port_id_type) or _guess_port(row.port_id)
    if c_type == ChassisIdSubtype.NETWORK_ADDRESS or p_type == PortIdSubtype.NETWORK_ADDRESS:
        raise ValueError("network-address ids are not rendered by CLI parsers yet")
    c_raw = _raw(c_type, row.chassis_id, ChassisIdSubtype.MAC_ADDRESS)
    p_raw = _raw(p_type, row.port_id, PortIdSubtype.MAC_ADDRESS)
    port_id = render_port_id(p_type, p_raw)
    remote_platform, _ = detect_platform(None, row.sys_desc)
    remote = remote_port_name(p_type, port_id, row.port_desc, remote_platform)
    if (
        remote_platform is None
        and p_type == PortIdSubtype.LOCAL
        and port_id.isdigit()
        and row.port_desc
        and looks_like_interface(row.port_desc)
    ):
        # Junos advertises its ifIndex as a 'local' port id and the name in the description; outputs
        # without the system description (Junos summary JSON) cannot tell us the peer is Junos.
        remote = normalise_interface(row.port_desc)
    return LldpNeighbor(
        mib=mib,
        time_mark=0,
        local_port_num=local_port_num(row.local_port),
        rem_index=row.rem_index if row.rem_index is not None else rem_index,
        local_if_index=None,
        local_port=normalise_interface(row.local_port),
        local_port_vendor=row.local_port,
        chassis_id_subtype=c_type,
        chassis_id_raw=c_raw,
        chassis_id=render_chassis_id(c_type, c_raw),
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


# ------------------------------------------------------------------------------------------------
# structured (JSON) outputs: one _clean_<platform> per NOS, found by name
# ------------------------------------------------------------------------------------------------


def _clean_arista_eos(doc: Any) -> list[CliRow]:
    """``show lldp neighbors detail | json``: {"lldpNeighbors": {ifname: {"lldpNeighborInfo": [...]}}}.

    EOS wraps ``interfaceId`` of interface-name port ids in literal double quotes
    (``"\\"Ethernet1\\""``); they are stripped.
    """
    table = doc["lldpNeighbors"]
    rows: list[CliRow] = []
    for ifname, body in table.items():
        for info in body.get("lldpNeighborInfo", []):
            port = info.get("neighborInterfaceInfo", {})
            rows.append(
                CliRow(
                    local_port=ifname,
                    chassis_id=_blank(info.get("chassisId")),
                    chassis_id_type=_blank(info.get("chassisIdType")),
                    port_id=(_blank(port.get("interfaceId")) or "").strip('"') or None,
                    port_id_type=_blank(port.get("interfaceIdType")),
                    port_desc=_blank(port.get("interfaceDescription")),
                    sys_name=_blank(info.get("systemName")),
                    sys_desc=_blank(info.get("systemDescription")),
                    man_addrs=tuple(str(a["address"]) for a in info.get("managementAddresses", [])),
                    extra={k: v for k, v in info.items() if k in ("ttl", "lastChangeTime", "neighborDiscoveryTime")},
                )
            )
    return rows


def _clean_cisco_nxos(doc: Any) -> list[CliRow]:
    """``show lldp neighbors detail | json``: TABLE_nbor_detail.ROW_nbor_detail.

    NX-OS JSON collapses a one-row table to an object instead of a one-element list.
    """
    rows_in = doc["TABLE_nbor_detail"]["ROW_nbor_detail"]
    if isinstance(rows_in, dict):
        rows_in = [rows_in]
    rows: list[CliRow] = []
    for r in rows_in:
        rows.append(
            CliRow(
                local_port=str(r["l_port_id"]),
                chassis_id=_blank(r.get("chassis_id")),
                chassis_id_type=_blank(r.get("chassis_type")),
                port_id=_blank(r.get("port_id")),
                port_id_type=_blank(r.get("port_type")),
                port_desc=_blank(r.get("port_desc")),
                sys_name=_blank(r.get("sys_name")),
                sys_desc=_blank(r.get("sys_desc")),
                man_addrs=tuple(a for a in (_blank(r.get("mgmt_addr")),) if a and a != "not advertised"),
                capabilities=_blank(r.get("enabled_capability")),
                extra={k: r[k] for k in ("ttl", "vlan_id", "system_capability") if k in r},
            )
        )
    return rows


def _junos(cell: Any) -> str | None:
    # Junos JSON wraps every leaf as [{"data": value}].
    if isinstance(cell, list) and cell and isinstance(cell[0], dict):
        return _blank(cell[0].get("data"))
    return None


def _clean_juniper_junos(doc: Any) -> list[CliRow]:
    """``show lldp neighbors | display json``: lldp-neighbors-information[0].lldp-neighbor-information."""
    info = doc["lldp-neighbors-information"][0]
    rows: list[CliRow] = []
    for r in info.get("lldp-neighbor-information", []):
        local = _junos(r.get("lldp-local-port-id")) or _junos(r.get("lldp-local-interface"))
        if local is None:
            raise ValueError("Junos neighbour without lldp-local-port-id")
        parent = _junos(r.get("lldp-local-parent-interface-name"))
        rows.append(
            CliRow(
                local_port=local,
                chassis_id=_junos(r.get("lldp-remote-chassis-id")),
                chassis_id_type=_junos(r.get("lldp-remote-chassis-id-subtype")),
                port_id=_junos(r.get("lldp-remote-port-id")),
                port_id_type=_junos(r.get("lldp-remote-port-id-subtype")),
                port_desc=_junos(r.get("lldp-remote-port-description")),
                sys_name=_junos(r.get("lldp-remote-system-name")),
                parent_interface=None if parent == "-" else parent,
            )
        )
    return rows


JSON_CLEANERS: dict[str, Callable[[Any], list[CliRow]]] = {
    name.removeprefix("_clean_"): fn for name, fn in dict(globals()).items() if name.startswith("_clean_")
}


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


def rows_for(text: str, spec: CommandSpec) -> list[CliRow]:
    """The output as rows; OutputError when the output as a whole is not this command's."""
    if spec.format == "json":
        if not text.strip():
            return []  # NX-OS and EOS print nothing at all for an empty LLDP table
        try:
            doc = json.loads(text)
        except ValueError as err:
            raise OutputError(f"not JSON ({err})") from None
        cleaner = JSON_CLEANERS.get(spec.platform)
        if cleaner is None:
            raise OutputError(f"no _clean_{spec.platform} for JSON output")
        try:
            return cleaner(doc)
        except (KeyError, IndexError, TypeError, AttributeError) as err:
            raise OutputError(f"JSON is not {spec.command!r} output: missing {err}") from None
    if spec.format == "textfsm":
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
            result.quarantined.append(
                Quarantined(
                    source=SOURCE,
                    device=device,
                    reason=f"bad neighbour on {row.local_port}: {err}",
                    payload=json.dumps(row.__dict__, default=str),
                    location=f"port {row.local_port}",
                    context=dict(context),
                )
            )
    result.rows = len(rows)
    return result
