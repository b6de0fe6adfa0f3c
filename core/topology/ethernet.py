"""Ethernet half of resolution: LLDP neighbours -> devices, ports and undirected links.

A neighbour row says what the *remote* end advertised. It is matched to a device by the most
trustworthy identity available -- chassis MAC, then a management address, then the normalised
sysName -- and to a port by the port-id subtype (ifName, ifAlias, MAC, local/ifIndex), falling
back to the collector's advertised port name and then ifDescr. Each match records its method and
a confidence, so a link resolved by sysName alone is visibly weaker than one resolved by MAC.

The input is :class:`LldpObs` (the columns of ``raw.lldp_neighbor_observations``), so any LLDP
collector plugs in through a row adapter. A sysName shared by two chassis is never used to
resolve anything: it is a ``duplicate_name`` finding instead.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.models import Finding, PortRef, Severity
from core.topology.inputs import EthInterfaceObs, EthSystemObs, HostnameRules, LldpObs

CHASSIS_MAC = 4  # LldpChassisIdSubtype macAddress
CHASSIS_NETWORK_ADDRESS = 5
PORT_ALIAS = 1  # LldpPortIdSubtype interfaceAlias
PORT_MAC = 3
PORT_NAME = 5
PORT_LOCAL = 7

CONFIDENCE: dict[str, float] = {
    # How far each identity method is trusted; recorded on every resolved end.
    "chassis_mac": 1.0,
    "interface_mac": 0.95,
    "management_ip": 0.9,
    "sys_name": 0.7,
    "host_name": 0.7,
    "if_name": 1.0,
    "if_alias": 0.9,
    "port_mac": 0.95,
    "if_index": 0.9,
    "advertised_name": 0.8,
    "if_descr": 0.6,
    "port_description": 0.6,
    "port_id_text": 0.5,
}

_MAC_HEX = re.compile(r"^[0-9a-f]{12}$")


def normalise_mac(text: str | None) -> str | None:
    """Any MAC spelling -> ``aa:bb:cc:dd:ee:ff``; None when it is not a MAC."""
    if not text:
        return None
    digits = "".join(ch for ch in text.lower() if ch not in ":-. ")
    if not _MAC_HEX.match(digits):
        return None
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


def _port_key(name: str) -> str:
    return "".join(name.split()).lower()


@dataclass
class _EthDevice:
    id: str
    name: str
    source: str
    address: str | None
    by_name: dict[str, str] = field(default_factory=dict)  # normalised port key -> port name
    by_alias: dict[str, str] = field(default_factory=dict)
    by_descr: dict[str, str] = field(default_factory=dict)
    by_mac: dict[str, str] = field(default_factory=dict)
    by_index: dict[int, str] = field(default_factory=dict)
    speed: dict[str, float] = field(default_factory=dict)  # port -> Gb/s


@dataclass(frozen=True)
class EthEnd:
    device: str
    port: str
    device_method: str
    port_method: str


@dataclass
class EthResult:
    switches: dict[str, _EthDevice] = field(default_factory=dict)  # id -> polled switch
    hosts: set[str] = field(default_factory=set)  # normalised host names seen as neighbours
    links: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    unresolved: list[dict[str, Any]] = field(default_factory=list)  # rows that matched nothing, with why


def _ref_sorted(x: PortRef, y: PortRef) -> tuple[PortRef, PortRef]:
    return (x, y) if x.sort_key() < y.sort_key() else (y, x)


def resolve_ethernet(
    lldp: Sequence[LldpObs],
    systems: Sequence[EthSystemObs],
    interfaces: Sequence[EthInterfaceObs],
    known_hosts: Iterable[str],
    rules: HostnameRules,
) -> EthResult:
    """Resolve every neighbour row; merge both directions of a cable into one link."""
    out = EthResult()
    by_source: dict[str, _EthDevice] = {}
    for s in sorted(systems, key=lambda s: s.source):
        mac = normalise_mac(s.chassis_id)
        dev_id = mac or f"switch:{s.source}"
        if dev_id in out.switches:  # same chassis polled under two names: keep the first
            by_source[s.source] = out.switches[dev_id]
            continue
        dev = _EthDevice(id=dev_id, name=s.sys_name or s.source, source=s.source, address=s.address)
        out.switches[dev_id] = dev
        by_source[s.source] = dev
    for obs in lldp:  # a switch whose system row is missing still has its own chassis id on every row
        if obs.source not in by_source:
            mac = normalise_mac(obs.local_chassis_id)
            dev_id = mac or f"switch:{obs.source}"
            dev = out.switches.setdefault(
                dev_id, _EthDevice(id=dev_id, name=obs.local_sys_name or obs.source, source=obs.source, address=None)
            )
            by_source[obs.source] = dev
    for i in interfaces:
        owner = by_source.get(i.source)
        if owner is None or not i.name:
            continue
        dev = owner
        dev.by_name[_port_key(i.name)] = i.name
        if i.if_name:
            dev.by_name.setdefault(_port_key(i.if_name), i.name)
        if i.if_alias:
            dev.by_alias.setdefault(_port_key(i.if_alias), i.name)
        if i.if_descr:
            dev.by_descr.setdefault(_port_key(i.if_descr), i.name)
        mac = normalise_mac(i.mac)
        if mac:
            dev.by_mac.setdefault(mac, i.name)
        dev.by_index[i.if_index] = i.name
        if i.speed_mbps:
            dev.speed[i.name] = i.speed_mbps / 1000.0

    by_mac: dict[str, str] = {}
    by_ip: dict[str, str] = {}
    by_name: dict[str, set[str]] = defaultdict(set)
    for dev in out.switches.values():
        if normalise_mac(dev.id):
            by_mac[dev.id] = dev.id
        for mac in dev.by_mac:
            by_mac.setdefault(mac, dev.id)
        if dev.address:
            by_ip[dev.address] = dev.id
        by_name[rules.normalise(dev.name)].add(dev.id)
    for obs in lldp:  # sysNames advertised by switches we could not poll count too
        mac = normalise_mac(obs.chassis_id) if obs.chassis_id_subtype == CHASSIS_MAC else None
        if mac in by_mac and obs.sys_name:
            by_name[rules.normalise(obs.sys_name)].add(by_mac[mac])
    duplicated = {name: ids for name, ids in by_name.items() if len(ids) > 1}
    for name, ids in sorted(duplicated.items()):
        members = sorted(ids)
        out.findings.append(
            Finding(
                kind="duplicate_name",
                severity=Severity.WARNING,
                message=f"{len(members)} Ethernet switches call themselves {name!r}: names cannot identify them, "
                "chassis MACs do",
                devices=tuple(members),
                evidence={
                    "name": name,
                    "fabric": "eth",
                    "switches": [
                        {"id": m, "source": out.switches[m].source, "address": out.switches[m].address} for m in members
                    ],
                },
            )
        )
    hosts = {rules.normalise(h) for h in known_hosts}

    seen_from: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
    for obs in lldp:
        local = by_source[obs.source]
        if not obs.local_port:
            out.unresolved.append({"source": obs.source, "reason": "no local port name", "port_id": obs.port_id})
            continue
        remote_id, method = _identify(obs, by_mac, by_ip, by_name, duplicated, hosts, rules)
        if remote_id is None:
            out.unresolved.append(
                {"source": obs.source, "local_port": obs.local_port, "chassis_id": obs.chassis_id, "reason": method}
            )
            continue
        if remote_id in out.switches:
            port, port_method = _match_port(out.switches[remote_id], obs)
        else:
            out.hosts.add(remote_id)
            port, port_method = _host_port(obs)
        if port is None:
            out.unresolved.append(
                {"source": obs.source, "local_port": obs.local_port, "remote": remote_id, "reason": port_method}
            )
            continue
        here = PortRef(device_id=local.id, port=obs.local_port)
        there = PortRef(device_id=remote_id, port=port)
        a, b = _ref_sorted(here, there)
        key = (a.device_id, a.port, b.device_id, b.port)
        entry = out.links.setdefault(key, {"a": a, "b": b, "sources": set(), "resolution": {}})
        entry["sources"].add(f"lldp:{obs.source}")
        entry["resolution"][str(there)] = {
            "device_method": method,
            "device_confidence": CONFIDENCE[method],
            "port_method": port_method,
            "port_confidence": CONFIDENCE[port_method],
            "seen_by": local.id,
        }
        seen_from[key].add(local.id)
        speed = local.speed.get(obs.local_port)
        if speed is not None:
            entry["speed_gbps"] = speed
    for key, entry in out.links.items():
        polled_ends = [e for e in (key[0], key[2]) if e in out.switches]
        entry["both_sides"] = len(polled_ends) < 2 or len(seen_from[key]) == 2
    return out


def _identify(
    obs: LldpObs,
    by_mac: dict[str, str],
    by_ip: dict[str, str],
    by_name: dict[str, set[str]],
    duplicated: dict[str, set[str]],
    hosts: set[str],
    rules: HostnameRules,
) -> tuple[str | None, str]:
    """(device id, method) or (None, why not)."""
    if obs.chassis_id_subtype == CHASSIS_MAC:
        mac = normalise_mac(obs.chassis_id)
        if mac is not None and mac in by_mac:
            return by_mac[mac], "chassis_mac" if by_mac[mac] == mac else "interface_mac"
    addrs = list(obs.man_addrs)
    if obs.chassis_id_subtype == CHASSIS_NETWORK_ADDRESS and obs.chassis_id is not None:
        addrs.append(obs.chassis_id)
    for addr in addrs:
        if addr in by_ip:
            return by_ip[addr], "management_ip"
    if obs.sys_name:
        name = rules.normalise(obs.sys_name)
        if name in duplicated:
            return None, f"sysName {name!r} is shared by {len(duplicated[name])} switches"
        ids = by_name.get(name)
        if ids:
            return next(iter(ids)), "sys_name"
        if name:
            # Not a polled switch: a host (lldpd on the host advertises its hostname).
            return name, "host_name"
    return None, "no chassis MAC, management address or sysName that names a known device"


def _match_port(dev: _EthDevice, obs: LldpObs) -> tuple[str | None, str]:
    pid = obs.port_id
    if pid is None:  # no port id advertised (Junos brief, partial agents): name and description only
        if obs.remote_port and _port_key(obs.remote_port) in dev.by_name:
            return dev.by_name[_port_key(obs.remote_port)], "advertised_name"
        if obs.port_desc and _port_key(obs.port_desc) in dev.by_descr:
            return dev.by_descr[_port_key(obs.port_desc)], "if_descr"
        if not dev.by_name and obs.remote_port:
            return obs.remote_port, "advertised_name"
        return None, f"no port id advertised and no description naming a port of {dev.name}"
    if obs.port_id_subtype == PORT_NAME and _port_key(pid) in dev.by_name:
        return dev.by_name[_port_key(pid)], "if_name"
    if obs.port_id_subtype == PORT_ALIAS and _port_key(pid) in dev.by_alias:
        return dev.by_alias[_port_key(pid)], "if_alias"
    if obs.port_id_subtype == PORT_MAC:
        mac = normalise_mac(pid)
        if mac is not None and mac in dev.by_mac:
            return dev.by_mac[mac], "port_mac"
    if obs.port_id_subtype == PORT_LOCAL and pid.strip().isdigit() and int(pid) in dev.by_index:
        return dev.by_index[int(pid)], "if_index"
    if obs.remote_port and _port_key(obs.remote_port) in dev.by_name:
        return dev.by_name[_port_key(obs.remote_port)], "advertised_name"
    if obs.port_desc and _port_key(obs.port_desc) in dev.by_descr:
        return dev.by_descr[_port_key(obs.port_desc)], "if_descr"
    if not dev.by_name:  # interfaces were not collected for it: trust the advertisement
        if obs.remote_port:
            return obs.remote_port, "advertised_name"
        if obs.port_id_subtype in (PORT_NAME, PORT_ALIAS, PORT_LOCAL):
            return pid, "port_id_text"
    return None, f"port id {pid!r} (subtype {obs.port_id_subtype}) matches no interface of {dev.name}"


def _host_port(obs: LldpObs) -> tuple[str | None, str]:
    # lldpd on a host sends the NIC MAC as port id and the interface name as port description.
    if obs.remote_port:
        return obs.remote_port, "advertised_name"
    if obs.port_desc and " " not in obs.port_desc.strip():
        return obs.port_desc.strip(), "port_description"
    if obs.port_id is not None and obs.port_id_subtype in (PORT_NAME, PORT_ALIAS, PORT_LOCAL, PORT_MAC):
        return obs.port_id, "port_id_text"
    return None, "host port cannot be named"
