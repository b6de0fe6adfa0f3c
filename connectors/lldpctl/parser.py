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
    escaped,
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


# An interface entry is (local interface, its body), or (None, the entry) when the entry names no
# interface: it is then quarantined on its own, as a neighbour that does not hold together is.
Entry = tuple[str | None, Any]


def _from_json0(doc: dict[str, Any]) -> list[Entry]:
    """lldpd's ``-f json0`` layout (every value a list, interfaces as ``{"name": ...}`` objects; what
    Cumulus ``net show lldp json`` prints) rewritten into ``-f json``'s entries, so one reader serves both."""
    lldp = doc["lldp"]
    if len(lldp) != 1 or not isinstance(lldp[0], dict):
        raise ValueError("lldpctl json0: 'lldp' must be a list of one object")
    listed = lldp[0].get("interface", [])
    if not isinstance(listed, list):
        raise ValueError("lldpctl json0: 'interface' is not a list")
    interfaces: list[Entry] = []
    for iface in listed:
        if not isinstance(iface, dict) or not isinstance(iface.get("name"), str):
            interfaces.append((None, iface))
            continue
        entry: dict[str, Any] = {k: _json0_value(v) for k, v in iface.items() if k not in ("name", "chassis", "port")}
        for part in ("chassis", "port"):
            blocks = iface.get(part)
            if not isinstance(blocks, list) or len(blocks) != 1 or not isinstance(blocks[0], dict):
                continue  # neighbor_from says which is missing
            entry[part] = {k: _json0_value(v) for k, v in blocks[0].items()}
        chassis = entry.get("chassis")
        if isinstance(chassis, dict) and isinstance(chassis.get("name"), str):
            entry["chassis"] = {chassis.pop("name"): chassis}
        interfaces.append((iface["name"], entry))
    return interfaces


def _list_entry(item: Any) -> Entry:
    if isinstance(item, dict) and len(item) == 1:
        key, value = next(iter(item.items()))
        return str(key), value
    return None, item


def _interfaces(doc: Any) -> list[Entry]:
    if isinstance(doc, dict) and isinstance(doc.get("lldp"), list):
        return _from_json0(doc)
    if not isinstance(doc, dict) or not isinstance(doc.get("lldp"), dict):
        raise ValueError("not lldpctl JSON: no top-level 'lldp' object")
    raw = doc["lldp"].get("interface")
    if raw is None:
        return []  # lldpd with no neighbours prints {"lldp": {}} or {"lldp": {"interface": []}}
    if isinstance(raw, list):
        return [_list_entry(item) for item in raw]
    if isinstance(raw, dict):
        # Every entry, objects or not: one that is not is a bad neighbour, never a silent skip.
        return [(str(k), v) for k, v in raw.items()]
    raise ValueError("'lldp.interface' is neither a list nor an object")


def _chassis(entry: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    chassis = entry.get("chassis")
    if not isinstance(chassis, dict) or not chassis:
        raise ValueError("neighbour has no chassis")
    if "id" in chassis and isinstance(chassis["id"], dict):
        return None, chassis  # no sysName advertised: lldpd does not key the chassis
    name, body = _single_key(chassis, "chassis")
    return name, body


def _scalar(value: Any, what: str) -> str | None:
    """A leaf's text; a container where lldpd writes a string means the entry is not lldpd's."""
    if value is None:
        return None
    if isinstance(value, dict | list):
        raise ValueError(f"{what} is not a string")
    return str(value)


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    return tuple(text for v in items if (text := _scalar(v, what)) is not None)


def neighbor_from(ifname: str, entry: Any) -> LldpNeighbor:
    """One lldpctl interface entry → record; ValueError/IdError when it does not hold together."""
    if not isinstance(entry, dict):
        raise ValueError(f"interface entry is {type(entry).__name__}, not an object")
    sys_name, chassis = _chassis(entry)
    cid = chassis.get("id") or {}
    if not isinstance(cid, dict):
        raise ValueError("chassis id is not an object with a type and a value")
    port = entry.get("port")
    if not isinstance(port, dict) or not isinstance(port.get("id"), dict):
        raise ValueError("neighbour has no port id")
    pid = port["id"]
    c_type, p_type = CHASSIS_TYPES.get(str(cid.get("type"))), PORT_TYPES.get(str(pid.get("type")))
    if c_type is None:
        raise ValueError(f"unknown chassis id type {cid.get('type')!r}")
    if p_type is None:
        raise ValueError(f"unknown port id type {pid.get('type')!r}")
    c_value, p_value = _scalar(cid.get("value", ""), "chassis id") or "", _scalar(pid.get("value", ""), "port id") or ""
    c_raw = _id_bytes(c_type, c_value, ChassisIdSubtype.MAC_ADDRESS, ChassisIdSubtype.NETWORK_ADDRESS)
    p_raw = _id_bytes(p_type, p_value, PortIdSubtype.MAC_ADDRESS, PortIdSubtype.NETWORK_ADDRESS)
    sys_desc = _scalar(chassis.get("descr"), "chassis descr")
    port_desc = _scalar(port.get("descr"), "port descr")
    remote_platform, _ = detect_platform(None, sys_desc or None)
    port_id = render_port_id(p_type, p_raw)
    remote = remote_port_name(p_type, port_id, port_desc or None, remote_platform)
    if remote is None and p_type == PortIdSubtype.MAC_ADDRESS and port_desc:
        # lldpd on hosts sends the NIC MAC as port id and the ifname as description
        remote = normalise_interface(port_desc)
    rid_text = _scalar(entry.get("rid", "0"), "rid") or ""
    try:
        rid = int(rid_text)
    except ValueError:
        raise ValueError(f"rid {rid_text[:40]!r} is not a number") from None
    neighbor = LldpNeighbor(
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
        man_addrs=_strings(chassis.get("mgmt-ip"), "mgmt-ip"),
    )
    problem = neighbor.unstorable_field()  # JSON can spell a NUL ("\u0000"); Postgres text cannot hold one
    if problem is not None:
        raise ValueError(problem)
    return neighbor


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
    for position, (ifname, entry) in enumerate(interfaces):
        if ifname is None:
            reject(
                f"bad neighbour in interface entry {position}: it names no interface",
                json.dumps(entry),
                f"interface entry {position}",
            )
            continue
        why = flt.reason_to_drop(ifname)
        if why is not None:
            result.dropped[ifname] = why
            continue
        try:
            result.neighbors.append(neighbor_from(ifname, entry))
        except (ValueError, IdError, TypeError) as err:
            # escaped: the interface name is JSON text and may hold what a reason cannot
            name = escaped(ifname)
            reject(f"bad neighbour on {name}: {err}", json.dumps({ifname: entry}), f"interface {name}")
            continue
        rail = flt.rail(ifname)
        if rail is not None:
            result.rails[ifname] = rail
    return result
