"""Render each Ethernet switch of a ground truth as its NOS's LLDP command output.

What a switch's neighbours advertise comes from :class:`simulator.snmp.records.RecordBuilder`
(the same adverts the SNMP twin serves), so SSH and SNMP describe one and the same fabric. Each
platform answers its NOS's own LLDP command (:data:`LLDP_COMMAND`, the twin's own copy of what
the device accepts, not our client's table), in its real format: EOS ``| json`` (``interfaceId``
wrapped in literal quotes), NX-OS ``| json`` (abbreviated local names, one-row tables collapsed
to an object), Junos ``| display json`` (every leaf as ``[{"data": ...}]``), Onyx's detail text,
lldpd's JSON for SONiC and Cumulus.
"""

from __future__ import annotations

import json
from typing import Any

from core.models import Device, LinkKind
from simulator.generator import GroundTruth
from simulator.snmp.records import Advert, RecordBuilder

PORT_SUBTYPE_WORDS = {
    "arista_eos": {3: "macAddress", 5: "interfaceName", 7: "local"},
    "cisco_nxos": {3: "Mac Address", 5: "Interface Name", 7: "Locally assigned"},
    "juniper_junos": {3: "Mac address", 5: "Interface name", 7: "Locally assigned"},
    "mellanox_mlnxos": {3: "MAC Address (3)", 5: "Interface Name (5)", 7: "Local (7)"},
    "lldpctl": {3: "mac", 5: "ifname", 7: "local"},
}


def _mac(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def _dotted(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[0:4]}.{h[4:8]}.{h[8:12]}"


def _port_id(ad: Advert) -> str:
    return _mac(ad.port_id) if ad.port_subtype == 3 else ad.port_id.decode()


def _mgmt(ad: Advert) -> str:
    return ".".join(str(b) for b in ad.mgmt)


Neighbor = tuple[str, Advert, int]  # (local port as the NOS names it, advert, remote index)


def _nxos_local(name: str) -> str:
    return name.replace("Ethernet", "Eth", 1)


def render_arista_eos(neighbors: list[Neighbor]) -> str:
    table: dict[str, Any] = {}
    for local, ad, _ in neighbors:
        iface: dict[str, Any] = {
            "interfaceIdType": PORT_SUBTYPE_WORDS["arista_eos"][ad.port_subtype],
            # EOS quotes interface-name port ids inside the string
            "interfaceId": f'"{_port_id(ad)}"' if ad.port_subtype == 5 else _port_id(ad),
            "interfaceDescription": ad.port_desc,
        }
        table.setdefault(local, {"lldpNeighborInfo": []})["lldpNeighborInfo"].append(
            {
                "chassisIdType": "macAddress",
                "chassisId": _dotted(ad.chassis_mac),
                "systemName": ad.sys_name,
                "systemDescription": ad.sys_desc,
                "neighborInterfaceInfo": iface,
                "managementAddresses": [{"addressType": "ipv4", "address": _mgmt(ad), "interfaceNum": 0}],
                "ttl": 120,
            }
        )
    return json.dumps({"lldpNeighbors": table}, indent=2)


def render_cisco_nxos(neighbors: list[Neighbor]) -> str:
    rows = [
        {
            "chassis_type": "Mac Address",
            "chassis_id": _dotted(ad.chassis_mac),
            "l_port_id": _nxos_local(local),
            "port_type": PORT_SUBTYPE_WORDS["cisco_nxos"][ad.port_subtype],
            "port_id": _port_id(ad),
            "port_desc": ad.port_desc,
            "sys_name": ad.sys_name,
            "sys_desc": ad.sys_desc,
            "ttl": 120,
            "system_capability": "B, R",
            "enabled_capability": "B, R",
            "mgmt_addr_type": "IPV4",
            "mgmt_addr": _mgmt(ad),
            "vlan_id": "not advertised",
        }
        for local, ad, _ in neighbors
    ]
    if not rows:
        return ""  # NX-OS prints nothing for an empty table
    body: Any = rows[0] if len(rows) == 1 else rows  # NX-OS collapses one-row tables
    return json.dumps({"TABLE_nbor_detail": {"ROW_nbor_detail": body}}, indent=2)


def render_juniper_junos(neighbors: list[Neighbor]) -> str:
    def d(value: str) -> list[dict[str, str]]:
        return [{"data": value}]

    rows = [
        {
            "lldp-local-port-id": d(local),
            "lldp-local-parent-interface-name": d("-"),
            "lldp-remote-chassis-id-subtype": d("Mac address"),
            "lldp-remote-chassis-id": d(_mac(ad.chassis_mac)),
            "lldp-remote-port-id-subtype": d(PORT_SUBTYPE_WORDS["juniper_junos"][ad.port_subtype]),
            "lldp-remote-port-id": d(_port_id(ad)),
            "lldp-remote-port-description": d(ad.port_desc),
            "lldp-remote-system-name": d(ad.sys_name),
        }
        for local, ad, _ in neighbors
    ]
    return json.dumps(
        {"lldp-neighbors-information": [{"attributes": {"junos:style": "brief"}, "lldp-neighbor-information": rows}]},
        indent=4,
    )


def render_mellanox_mlnxos(neighbors: list[Neighbor]) -> str:
    out: list[str] = []
    words = PORT_SUBTYPE_WORDS["mellanox_mlnxos"]
    for local, ad, idx in neighbors:
        out += [
            local,
            f"Remote Index: {idx}",
            f"Remote chassis id: {_mac(ad.chassis_mac)} ; chassis id subtype: Mac Address (4)",
            f"Remote port-id: {_port_id(ad)} ; port id subtype: {words[ad.port_subtype]}",
            f"Remote port description: {ad.port_desc}",
            f"Remote system name: {ad.sys_name}",
            f"Remote system description: {ad.sys_desc}",
            "Remote system capabilities supported: B,R ; enabled B,R",
            f"Remote Management Address: {_mgmt(ad)}",
            "",
        ]
    return "\n".join(out)


def render_lldpctl(neighbors: list[Neighbor]) -> str:
    interfaces = [
        {
            local: {
                "via": "LLDP",
                "rid": str(idx),
                "age": "0 day, 01:02:03",
                "chassis": {
                    ad.sys_name: {
                        "id": {"type": "mac", "value": _mac(ad.chassis_mac)},
                        "descr": ad.sys_desc,
                        "mgmt-ip": _mgmt(ad),
                        "capability": [{"type": "Bridge", "enabled": True}, {"type": "Router", "enabled": True}],
                    }
                },
                "port": {
                    "id": {"type": PORT_SUBTYPE_WORDS["lldpctl"][ad.port_subtype], "value": _port_id(ad)},
                    "descr": ad.port_desc,
                    "ttl": "120",
                },
            }
        }
        for local, ad, idx in neighbors
    ]
    return json.dumps({"lldp": {"interface": interfaces}}, indent=2)


def render_sonic_table(neighbors: list[Neighbor]) -> str:
    """``show lldp table`` (the SONiC template's fixture; not what the twin is collected with)."""
    lines = [
        "Capability codes: (R) Router, (B) Bridge, (O) Other",
        f"{'LocalPort':<12} {'RemoteDevice':<16} {'RemotePortID':<18} {'Capability':<12} RemotePortDescr",
        f"{'-' * 11:<12} {'-' * 15:<16} {'-' * 17:<18} {'-' * 11:<12} {'-' * 16}",
    ]
    for local, ad, _ in neighbors:
        lines.append(f"{local:<12} {ad.sys_name:<16} {_port_id(ad):<18} {'BR':<12} {ad.port_desc}")
    lines += ["-" * 50, f"Total entries displayed:  {len(neighbors)}"]
    return "\n".join(lines)


# The command each NOS answers with the output rendered below: device facts, kept here so the twin
# says what a switch would say whatever our collector chooses to ask (connectors/ssh/platforms.py).
LLDP_COMMAND = {
    "arista_eos": "show lldp neighbors detail | json",
    "cisco_nxos": "show lldp neighbors detail | json",
    "juniper_junos": "show lldp neighbors | display json",
    "mellanox_mlnxos": "show lldp interfaces ethernet remote",
    "sonic": "docker exec lldp lldpctl -f json",
    "cumulus": "lldpctl -f json",
}

RENDERERS = {
    "arista_eos": render_arista_eos,
    "cisco_nxos": render_cisco_nxos,
    "juniper_junos": render_juniper_junos,
    "mellanox_mlnxos": render_mellanox_mlnxos,
    "sonic": render_lldpctl,  # docker exec lldp lldpctl -f json
    "cumulus": render_lldpctl,
}


def neighbors_of(truth: GroundTruth, builder: RecordBuilder, device: Device) -> list[Neighbor]:
    out: list[Neighbor] = []
    for k, p in enumerate(truth.ports_of(device.id), start=1):
        peer = truth.peer(device.id, p.port)
        if peer is None:
            continue
        out.append((p.port, builder.advert(peer.device_id, peer.port), k))
    return out


def outputs_for(truth: GroundTruth) -> dict[str, tuple[str, str]]:
    """Switch inventory name -> (platform, rendered LLDP output) for every Ethernet switch."""
    builder = RecordBuilder(truth)
    out: dict[str, tuple[str, str]] = {}
    for device in truth.switches(fabric=LinkKind.ETH):
        name = str(device.attributes.get("inventory_name", device.name))
        platform = device.platform or ""
        out[name] = (platform, RENDERERS[platform](neighbors_of(truth, builder, device)))
    return out
