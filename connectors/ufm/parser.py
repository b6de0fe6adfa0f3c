"""UFM rows -> the same node, port and link records as ibnetdiscover, so both land in one shape.

UFM's field names differ between versions; they are data here (first key present wins). Links in
UFM carry the width but not the speed, so a link's speed is read from its ports' ``active_speed``.
A row without a usable GUID or port number is quarantined with its JSON and the reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from connectors.ibnetdiscover.parser import IbFabric, IbLink, IbNode, IbPort
from connectors.ufm.client import UfmFabric
from core.infiniband import (
    Classifier,
    HcaFilter,
    NodeClass,
    NodeView,
    fabric_findings,
    internal_port,
    link_gbps,
    normalise_guid,
    normalise_speed,
    normalise_width,
)
from core.quality import Quarantined

SOURCE = "ufm"

SYSTEM_FIELDS: Mapping[str, Sequence[str]] = {
    "guid": ("guid", "system_guid", "node_guid"),
    "type": ("type", "system_type"),
    "name": ("system_name", "name"),
    "description": ("description", "node_description"),
    "model": ("model",),
    "ports": ("ports_count", "port_count"),
    "lid": ("lid",),
}
PORT_FIELDS: Mapping[str, Sequence[str]] = {
    "node_guid": ("systemID", "system_guid", "node_guid"),
    "port_guid": ("guid", "port_guid"),
    "number": ("number", "port_number", "dname"),
    "speed": ("active_speed", "speed"),
    "width": ("active_width", "width"),
    "lid": ("lid",),
    "peer": ("peer",),
    "description": ("node_description",),
}
LINK_FIELDS: Mapping[str, Sequence[str]] = {
    "a_guid": ("source_guid",),
    "a_port": ("source_port",),
    "b_guid": ("destination_guid",),
    "b_port": ("destination_port",),
    "width": ("width",),
    "speed": ("speed", "active_speed"),
}
TYPE_MAP: Mapping[str, str] = {
    "switch": "switch",
    "host": "ca",
    "ca": "ca",
    "hca": "ca",
    "gateway": "router",
    "router": "router",
}


def _get(row: Mapping[str, Any], fields: Mapping[str, Sequence[str]], name: str) -> Any:
    for key in fields[name]:
        if key in row and row[key] not in (None, ""):
            return row[key]
    return None


def _q(reason: str, row: Any, device: str, where: str) -> Quarantined:
    return Quarantined(
        source=SOURCE,
        device=device,
        reason=reason,
        payload=json.dumps(row, sort_keys=True, default=str),
        location=where,
    )


def to_fabric(ufm: UfmFabric, source: str, hca_filter: HcaFilter | None = None) -> IbFabric:
    fabric = IbFabric(source=source)
    nodes: dict[str, IbNode] = {}
    for i, row in enumerate(ufm.systems):
        where = f"systems[{i}]"
        if not isinstance(row, Mapping):
            fabric.quarantined.append(_q("system row is not an object", row, source, where))
            continue
        try:
            guid = normalise_guid(str(_get(row, SYSTEM_FIELDS, "guid") or ""))
        except ValueError as exc:
            fabric.quarantined.append(_q(f"system without a usable GUID: {exc}", row, source, where))
            continue
        kind = TYPE_MAP.get(str(_get(row, SYSTEM_FIELDS, "type") or "").lower())
        if kind is None:
            fabric.quarantined.append(
                _q(f"unknown system type {_get(row, SYSTEM_FIELDS, 'type')!r}", row, source, where)
            )
            continue
        if guid in nodes:
            fabric.quarantined.append(_q(f"duplicate system GUID {guid}", row, source, where))
            continue
        desc = str(_get(row, SYSTEM_FIELDS, "description") or "")
        lid = _get(row, SYSTEM_FIELDS, "lid")
        node = IbNode(
            guid=guid,
            node_type=kind,
            port_count=int(_get(row, SYSTEM_FIELDS, "ports") or 0),
            description=desc,
            system_guid=guid,
            vendor_id=None,
            device_id=None,
            lid=int(lid) if isinstance(lid, int) else None,
            lmc=None,
            enhanced_port0=None,
            line=i,
        )
        nodes[guid] = node
        fabric.nodes.append(node)
    rate: dict[tuple[str, int], tuple[str | None, str | None]] = {}
    for i, row in enumerate(ufm.ports):
        where = f"ports[{i}]"
        try:
            node_guid = normalise_guid(str(_get(row, PORT_FIELDS, "node_guid") or ""))
            number = int(str(_get(row, PORT_FIELDS, "number")))
        except (ValueError, TypeError) as exc:
            fabric.quarantined.append(_q(f"port without a usable system GUID or number: {exc}", row, source, where))
            continue
        width = speed = None
        try:
            if _get(row, PORT_FIELDS, "width"):
                width = normalise_width(str(_get(row, PORT_FIELDS, "width")))
            if _get(row, PORT_FIELDS, "speed"):
                speed = normalise_speed(str(_get(row, PORT_FIELDS, "speed")))
        except ValueError as exc:
            fabric.quarantined.append(_q(str(exc), row, source, where))
            continue
        rate[(node_guid, number)] = (width, speed)
        peer = str(_get(row, PORT_FIELDS, "peer") or "")
        peer_guid, _, peer_port = peer.rpartition("_")
        try:
            pg = normalise_guid(peer_guid) if peer_guid else ""
            pp = int(peer_port) if peer_port else 0
        except ValueError:
            pg, pp = "", 0
        lid = _get(row, PORT_FIELDS, "lid")
        pguid = _get(row, PORT_FIELDS, "port_guid")
        fabric.ports.append(
            IbPort(
                node_guid=node_guid,
                port=number,
                port_guid=normalise_guid(str(pguid)) if pguid else None,
                ext_port=None,
                peer_guid=pg,
                peer_port=pp,
                peer_port_guid=None,
                peer_description=None,
                lid=int(lid) if isinstance(lid, int) else None,
                lmc=None,
                peer_lid=None,
                width=width,
                speed=speed,
                speed_gbps=link_gbps(width, speed) if width and speed else None,
                line=i,
            )
        )
    classifier = Classifier(hca_filter)
    for n in fabric.nodes:
        fabric.classes[n.guid] = classifier.classify(n.node_type, n.description)
    models = {g: c.switch_model for g, c in fabric.classes.items() if c.node_class is NodeClass.SWITCH}
    seen: set[tuple[str, int, str, int]] = set()
    for i, row in enumerate(ufm.links):
        where = f"links[{i}]"
        try:
            a = (
                normalise_guid(str(_get(row, LINK_FIELDS, "a_guid") or "")),
                int(str(_get(row, LINK_FIELDS, "a_port"))),
            )
            b = (
                normalise_guid(str(_get(row, LINK_FIELDS, "b_guid") or "")),
                int(str(_get(row, LINK_FIELDS, "b_port"))),
            )
        except (ValueError, TypeError) as exc:
            fabric.quarantined.append(_q(f"link without usable ends: {exc}", row, source, where))
            continue
        missing = [g for g, _ in (a, b) if g not in nodes]
        if missing:
            fabric.quarantined.append(_q(f"link end(s) {', '.join(missing)} are not UFM systems", row, source, where))
            continue
        (ag, ap), (bg, bp) = sorted((a, b))
        if (ag, ap, bg, bp) in seen:
            fabric.quarantined.append(_q("duplicate link", row, source, where))
            continue
        seen.add((ag, ap, bg, bp))
        try:
            width = normalise_width(str(_get(row, LINK_FIELDS, "width"))) if _get(row, LINK_FIELDS, "width") else None
        except ValueError as exc:
            fabric.quarantined.append(_q(str(exc), row, source, where))
            continue
        pw, ps = rate.get(a) or rate.get(b) or (None, None)
        width = width or pw
        speed_raw = _get(row, LINK_FIELDS, "speed")
        speed = normalise_speed(str(speed_raw)) if speed_raw else ps
        fabric.links.append(
            IbLink(
                a_guid=ag,
                a_port=ap,
                b_guid=bg,
                b_port=bp,
                width=width,
                speed=speed,
                speed_gbps=link_gbps(width, speed) if width and speed else None,
                both_sides=True,  # UFM's subnet manager saw the link up, from both ends by definition
                internal=internal_port(models.get(ag), ap) or internal_port(models.get(bg), bp),
            )
        )
    fabric.links.sort(key=lambda lk: (lk.a_guid, lk.a_port, lk.b_guid, lk.b_port))
    fabric.findings = fabric_findings(
        (NodeView(n.guid, n.node_type, n.description, fabric.classes[n.guid]) for n in fabric.nodes),
        switches=len(fabric.switches),
    ).findings
    return fabric
