"""Parse ``lldpctl -f json`` (lldpd 1.0.x) into :class:`core.lldp.LldpNeighbor` records. Pure.

lldpd's JSON has two shapes we must accept (lldpd's json writer collapses single-element
lists): ``"interface"`` is a *list* of one-key objects when several interfaces have neighbours
and a plain object keyed by interface name when one has, and ``"chassis"`` is keyed by the
advertised system name -- or, when the neighbour sent no sysName, holds ``"id"`` directly.

Host-side filters (issue #4): GPU hosts run lldpd on every netdev, so their output also lists the
BMC/management NIC (a USB ``enx<mac>`` on DGX/Spectrum-X hosts) and the SR-IOV VF representors
(``eth_vf*``) that only ever see the host itself. Those are dropped by configurable regexes and
reported (never silently): :attr:`LldpctlResult.dropped`. Data-plane NICs map to rails through a
regex with a ``rail`` group (Spectrum-X hosts name them ``eth_r<rail>_p<port>``).
"""

from __future__ import annotations

import ipaddress
import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from core.lldp import (
    IdError,
    LldpNeighbor,
    detect_platform,
    normalise_interface,
    parse_mac,
    remote_port_name,
    render_chassis_id,
    render_port_id,
)
from core.lldp.models import ChassisIdSubtype, PortIdSubtype
from core.quality import Quarantined

DEFAULT_EXCLUDE: tuple[str, ...] = (
    r"^eth_vf",  # SR-IOV VF representors (BlueField / ConnectX switchdev): see only the host
    r"^enx",  # USB NICs named by MAC: the BMC / management link on DGX and Spectrum-X hosts
    r"^(lo|docker\d*|virbr\d*|veth.*|cni\d*|flannel.*)$",
)
DEFAULT_RAIL_PATTERN = r"^eth_r(?P<rail>\d+)_p\d+$"

MIB = "lldpctl"  # raw.lldp_neighbor_observations.mib: which structure the row came from

CHASSIS_TYPES: dict[str, int] = {
    "mac": ChassisIdSubtype.MAC_ADDRESS,
    "ip": ChassisIdSubtype.NETWORK_ADDRESS,
    "ifname": ChassisIdSubtype.INTERFACE_NAME,
    "ifalias": ChassisIdSubtype.INTERFACE_ALIAS,
    "local": ChassisIdSubtype.LOCAL,
}
PORT_TYPES: dict[str, int] = {
    "mac": PortIdSubtype.MAC_ADDRESS,
    "ip": PortIdSubtype.NETWORK_ADDRESS,
    "ifname": PortIdSubtype.INTERFACE_NAME,
    "ifalias": PortIdSubtype.INTERFACE_ALIAS,
    "local": PortIdSubtype.LOCAL,
}


@dataclass(frozen=True)
class HostFilter:
    """Which local interfaces count as data-plane, and how they map to rails."""

    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    include: tuple[str, ...] = ()  # when set, only interfaces matching one of these are kept
    rail_pattern: str | None = DEFAULT_RAIL_PATTERN

    def reason_to_drop(self, ifname: str) -> str | None:
        for pattern in self.exclude:
            if re.search(pattern, ifname):
                return f"excluded by {pattern}"
        if self.include and not any(re.search(p, ifname) for p in self.include):
            return "not matched by any include pattern"
        return None

    def rail(self, ifname: str) -> int | None:
        if self.rail_pattern is None:
            return None
        match = re.search(self.rail_pattern, ifname)
        return int(match.group("rail")) if match else None


KEEP_ALL = HostFilter(exclude=(), rail_pattern=None)
"""For switches running lldpd (Cumulus, SONiC): every port is a data port."""


@dataclass
class LldpctlResult:
    neighbors: list[LldpNeighbor] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)  # local interface -> why it was dropped
    rails: dict[str, int] = field(default_factory=dict)  # local interface -> rail


def local_port_num(ifname: str) -> int:
    """A stable number for a local interface: CLI output has no ifIndex, and position in the
    output changes when a neighbour comes or goes; crc32 of the name does not."""
    return zlib.crc32(ifname.encode()) & 0x7FFFFFFF


def _id_bytes(kind: int, value: str, mac_kind: int, ip_kind: int) -> bytes:
    if kind == mac_kind:
        return parse_mac(value)
    if kind == ip_kind:
        addr = ipaddress.ip_address(value)
        return bytes([1 if addr.version == 4 else 2]) + addr.packed
    return value.encode()


def _single_key(obj: Any, what: str) -> tuple[str, dict[str, Any]]:
    if not isinstance(obj, dict) or len(obj) != 1:
        raise ValueError(f"{what}: expected an object with one key")
    key, value = next(iter(obj.items()))
    if not isinstance(value, dict):
        raise ValueError(f"{what} {key!r}: expected an object")
    return str(key), value


def _json0_value(items: Any) -> Any:
    """One json0 leaf list (``[{"value": x}]`` or ``[{"type": t, "value": x}]``) in json's form."""
    if not isinstance(items, list):
        return items
    values = [i["value"] if isinstance(i, dict) and set(i) == {"value"} else i for i in items]
    return values[0] if len(values) == 1 else values


def _from_json0(doc: dict[str, Any]) -> dict[str, Any]:
    """lldpd's ``-f json0`` layout (every value a list, interfaces as ``{"name": ...}`` objects; what
    Cumulus ``net show lldp json`` prints) rewritten into ``-f json``'s, so one reader serves both."""
    lldp = doc["lldp"]
    if len(lldp) != 1 or not isinstance(lldp[0], dict):
        raise ValueError("lldpctl json0: 'lldp' must be a list of one object")
    interfaces = []
    for iface in lldp[0].get("interface", []):
        if not isinstance(iface, dict) or not isinstance(iface.get("name"), str):
            raise ValueError("lldpctl json0: interface without a name")
        entry: dict[str, Any] = {k: _json0_value(v) for k, v in iface.items() if k not in ("name", "chassis", "port")}
        for part in ("chassis", "port"):
            blocks = iface.get(part)
            if not isinstance(blocks, list) or len(blocks) != 1 or not isinstance(blocks[0], dict):
                continue  # neighbor_from says which is missing
            entry[part] = {k: _json0_value(v) for k, v in blocks[0].items()}
        chassis = entry.get("chassis")
        if isinstance(chassis, dict) and isinstance(chassis.get("name"), str):
            entry["chassis"] = {chassis.pop("name"): chassis}
        interfaces.append({iface["name"]: entry})
    return {"lldp": {"interface": interfaces}}


def _interfaces(doc: Any) -> list[tuple[str, dict[str, Any]]]:
    if isinstance(doc, dict) and isinstance(doc.get("lldp"), list):
        doc = _from_json0(doc)
    if not isinstance(doc, dict) or not isinstance(doc.get("lldp"), dict):
        raise ValueError("not lldpctl JSON: no top-level 'lldp' object")
    raw = doc["lldp"].get("interface")
    if raw is None:
        return []  # lldpd with no neighbours prints {"lldp": {}} or {"lldp": {"interface": []}}
    if isinstance(raw, list):
        return [_single_key(item, "interface") for item in raw]
    if isinstance(raw, dict):
        return [(str(k), v) for k, v in raw.items() if isinstance(v, dict)]
    raise ValueError("'lldp.interface' is neither a list nor an object")


def _chassis(entry: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    chassis = entry.get("chassis")
    if not isinstance(chassis, dict) or not chassis:
        raise ValueError("neighbour has no chassis")
    if "id" in chassis and isinstance(chassis["id"], dict):
        return None, chassis  # no sysName advertised: lldpd does not key the chassis
    name, body = _single_key(chassis, "chassis")
    return name, body


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    return (str(value),)


def neighbor_from(ifname: str, entry: dict[str, Any]) -> LldpNeighbor:
    """One lldpctl interface entry → record; ValueError/IdError when it does not hold together."""
    sys_name, chassis = _chassis(entry)
    cid = chassis.get("id") or {}
    port = entry.get("port")
    if not isinstance(port, dict) or not isinstance(port.get("id"), dict):
        raise ValueError("neighbour has no port id")
    pid = port["id"]
    c_type, p_type = CHASSIS_TYPES.get(str(cid.get("type"))), PORT_TYPES.get(str(pid.get("type")))
    if c_type is None:
        raise ValueError(f"unknown chassis id type {cid.get('type')!r}")
    if p_type is None:
        raise ValueError(f"unknown port id type {pid.get('type')!r}")
    c_value, p_value = str(cid.get("value", "")), str(pid.get("value", ""))
    c_raw = _id_bytes(c_type, c_value, ChassisIdSubtype.MAC_ADDRESS, ChassisIdSubtype.NETWORK_ADDRESS)
    p_raw = _id_bytes(p_type, p_value, PortIdSubtype.MAC_ADDRESS, PortIdSubtype.NETWORK_ADDRESS)
    sys_desc = chassis.get("descr")
    port_desc = port.get("descr")
    remote_platform, _ = detect_platform(None, str(sys_desc) if sys_desc else None)
    port_id = render_port_id(p_type, p_raw)
    remote = remote_port_name(p_type, port_id, str(port_desc) if port_desc else None, remote_platform)
    if remote is None and p_type == PortIdSubtype.MAC_ADDRESS and port_desc:
        # lldpd on hosts sends the NIC MAC as port id and the ifname as description
        remote = normalise_interface(str(port_desc))
    try:
        rid = int(str(entry.get("rid", "0")))
    except ValueError:
        raise ValueError(f"rid {entry.get('rid')!r} is not a number") from None
    return LldpNeighbor(
        mib=MIB,
        time_mark=0,  # lldpctl shows an age, not a time mark
        local_port_num=local_port_num(ifname),
        rem_index=rid,
        local_if_index=None,
        local_port=normalise_interface(ifname),
        local_port_vendor=ifname,
        chassis_id_subtype=c_type,
        chassis_id_raw=c_raw,
        chassis_id=render_chassis_id(c_type, c_raw),
        port_id_subtype=p_type,
        port_id_raw=p_raw,
        port_id=port_id,
        port_desc=str(port_desc) if port_desc is not None else None,
        sys_name=sys_name,
        sys_name_raw=None,
        sys_desc=str(sys_desc) if sys_desc is not None else None,
        remote_port=remote,
        remote_platform=remote_platform,
        man_addrs=_strings(chassis.get("mgmt-ip")),
    )


def parse_lldpctl(
    text: str,
    device: str,
    *,
    source: str = "lldpctl",
    command: str = "lldpctl -f json",
    platform: str = "linux",
    host_filter: HostFilter | None = None,
) -> LldpctlResult:
    """Parse one ``lldpctl -f json`` document. Output that is not lldpctl JSON at all is
    quarantined whole (command, platform, reason); a single bad neighbour is quarantined alone."""
    flt = host_filter or HostFilter()
    result = LldpctlResult()

    def reject(reason: str, payload: str, location: str) -> None:
        result.quarantined.append(
            Quarantined(
                source=source,
                device=device,
                reason=reason,
                payload=payload,
                location=location,
                context={"command": command, "platform": platform},
            )
        )

    try:
        interfaces = _interfaces(json.loads(text))
    except (ValueError, RecursionError) as err:
        reject(f"unparseable {command} output: {err}", text, "output")
        return result
    for ifname, entry in interfaces:
        why = flt.reason_to_drop(ifname)
        if why is not None:
            result.dropped[ifname] = why
            continue
        try:
            result.neighbors.append(neighbor_from(ifname, entry))
        except (ValueError, IdError, TypeError) as err:
            reject(f"bad neighbour on {ifname}: {err}", json.dumps({ifname: entry}), f"interface {ifname}")
            continue
        rail = flt.rail(ifname)
        if rail is not None:
            result.rails[ifname] = rail
    return result
