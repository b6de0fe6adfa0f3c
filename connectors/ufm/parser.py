"""UFM rows -> the same node, port and link records as ibnetdiscover, so both land in one shape.

UFM's field names differ between versions; they are data here (first key present wins). Links in
UFM carry the width but not the speed, so a link's speed is read from its ports' ``active_speed``.

Every row is accounted for; none is dropped silently:

* a row that is not an object, or whose identity is unusable (GUID, port number, system type,
  link ends, width or speed), or that repeats one already read, is quarantined with its JSON and
  the reason, and does not land;
* a row whose optional field is unusable (``lid``, ``ports_count``, a port GUID, ``peer``) lands
  without that field, and a quarantine entry at the same location says which field and why; a
  description with NUL or unpaired surrogates lands escaped (Postgres text cannot hold them), also
  with an entry.

Field values must be strings or numbers (``true``, lists and objects are wrong types); GUIDs must
be hex strings, as UFM writes them (a JSON number is ambiguous: hex digits or a value?). Numbers
must fit the warehouse's ``integer`` columns, LIDs 16 bits (IBTA), so what lands always loads.
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
INT_MAX = 2**31 - 1  # the warehouse's integer columns (port, port_count, lid)
LID_MAX = 0xFFFF  # LIDs are 16-bit
MAX_NUMBER_TEXT = 24  # a longer "number" is garbage (and int() of a huge digit string is slow)
MAX_REASON = 400  # a reason quotes values; a hostile value must not make it huge

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


def _kind(value: Any) -> str:
    return {bool: "a boolean", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _label(fields: Mapping[str, Sequence[str]], name: str) -> str:
    """How a field is named in messages: by UFM's key(s), not ours."""
    return "/".join(fields[name])


def _scalar(row: Mapping[str, Any], fields: Mapping[str, Sequence[str]], name: str) -> str | int | float | None:
    """The field's value if it is a string or a number; None if absent; ValueError otherwise."""
    value = _get(row, fields, name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{_label(fields, name)} is {_kind(value)}, not a string or number")
    return value


def _guid(row: Mapping[str, Any], fields: Mapping[str, Sequence[str]], name: str) -> str:
    value = _scalar(row, fields, name)
    if value is None:
        raise ValueError(f"no {_label(fields, name)}")
    if not isinstance(value, str):
        raise ValueError(f"{_label(fields, name)} is a number; UFM writes GUIDs as hex strings")
    return normalise_guid(value)


def _int(value: str | int | float | None, name: str, low: int, high: int) -> int:
    """A whole number in [low, high] from an int or a decimal/0x-hex string; ValueError otherwise."""
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and len(value) <= MAX_NUMBER_TEXT:
        text = value.strip().lower()
        try:
            n = int(text, 16) if text.startswith("0x") else int(text, 10)
        except ValueError:
            raise ValueError(f"{name} {value!r} is not a whole number") from None
    elif value is None:
        raise ValueError(f"no {name}")
    else:
        raise ValueError(f"{name} {_clip(repr(value), 40)} is not a whole number")
    if not low <= n <= high:
        raise ValueError(f"{name} {n} is outside {low}..{high}")
    return n


def _text(value: str | int | float | None) -> tuple[str, bool]:
    r"""(text fit for Postgres, whether it had to be escaped): NUL and unpaired surrogates cannot
    be stored, so they are written as backslash escapes (``\x00``, ``\ud800``)."""
    text = "" if value is None else str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    else:
        if "\x00" not in text:
            return text, False
    return text.replace("\x00", "\\x00"), True


def _clip(text: str, limit: int = MAX_REASON) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _payload(row: Any) -> str:
    try:
        return json.dumps(row, sort_keys=True, default=str)
    except (RecursionError, ValueError, TypeError) as exc:
        return f"<{_kind(row)} that cannot be written as JSON: {type(exc).__name__}>"


def _q(reason: str, row: Any, device: str, where: str) -> Quarantined:
    return Quarantined(source=SOURCE, device=device, reason=_clip(reason), payload=_payload(row), location=where)


def _landed_with(what: str, problems: list[str], row: Any, device: str, where: str) -> Quarantined:
    """The entry for a row that landed but lost or escaped some optional fields."""
    return _q(f"{what} landed; {'; '.join(problems)}", row, device, where)


def _optional_int(
    row: Mapping[str, Any], fields: Mapping[str, Sequence[str]], name: str, high: int, problems: list[str]
) -> int | None:
    try:
        value = _scalar(row, fields, name)
        return None if value is None else _int(value, _label(fields, name), 0, high)
    except ValueError as exc:
        problems.append(f"{exc} (left empty)")
        return None


def _peer(row: Mapping[str, Any], problems: list[str]) -> tuple[str, int]:
    """``<guid>_<port>`` as UFM writes a port's peer -> (GUID, port); ("", 0) when there is none."""
    try:
        value = _scalar(row, PORT_FIELDS, "peer")
        if value is None:
            return "", 0
        guid, sep, port = str(value).rpartition("_")
        if not sep:
            raise ValueError(f"peer {_clip(repr(value), 60)} is not <guid>_<port>")
        return normalise_guid(guid), _int(port, "peer port", 0, INT_MAX)
    except ValueError as exc:
        problems.append(f"{exc} (left empty)")
        return "", 0


def to_fabric(ufm: UfmFabric, source: str, hca_filter: HcaFilter | None = None) -> IbFabric:
    fabric = IbFabric(source=source)
    quarantine = fabric.quarantined.append
    nodes: dict[str, IbNode] = {}
    for i, row in enumerate(ufm.systems):
        where = f"systems[{i}]"
        if not isinstance(row, Mapping):
            quarantine(_q(f"system row is {_kind(row)}, not an object", row, source, where))
            continue
        try:
            guid = _guid(row, SYSTEM_FIELDS, "guid")
        except ValueError as exc:
            quarantine(_q(f"system without a usable GUID: {exc}", row, source, where))
            continue
        try:
            raw_type = _scalar(row, SYSTEM_FIELDS, "type")
        except ValueError as exc:
            quarantine(_q(f"unusable system type: {exc}", row, source, where))
            continue
        kind = TYPE_MAP.get(str(raw_type or "").lower())
        if kind is None:
            quarantine(_q(f"unknown system type {_clip(repr(raw_type), 60)}", row, source, where))
            continue
        if guid in nodes:
            quarantine(_q(f"duplicate system GUID {guid}", row, source, where))
            continue
        problems: list[str] = []
        try:
            desc, escaped = _text(_scalar(row, SYSTEM_FIELDS, "description"))
            if escaped:
                problems.append("description has NUL or unpaired surrogate characters (kept escaped)")
        except ValueError as exc:
            desc = ""
            problems.append(f"{exc} (left empty)")
        port_count = _optional_int(row, SYSTEM_FIELDS, "ports", INT_MAX, problems) or 0
        lid = _optional_int(row, SYSTEM_FIELDS, "lid", LID_MAX, problems)
        node = IbNode(
            guid=guid,
            node_type=kind,
            port_count=port_count,
            description=desc,
            system_guid=guid,
            vendor_id=None,
            device_id=None,
            lid=lid,
            lmc=None,
            enhanced_port0=None,
            line=i,
        )
        nodes[guid] = node
        fabric.nodes.append(node)
        if problems:
            quarantine(_landed_with("system", problems, row, source, where))
    rate: dict[tuple[str, int], tuple[str | None, str | None]] = {}
    for i, row in enumerate(ufm.ports):
        where = f"ports[{i}]"
        if not isinstance(row, Mapping):
            quarantine(_q(f"port row is {_kind(row)}, not an object", row, source, where))
            continue
        try:
            node_guid = _guid(row, PORT_FIELDS, "node_guid")
            number = _int(_scalar(row, PORT_FIELDS, "number"), _label(PORT_FIELDS, "number"), 0, INT_MAX)
        except ValueError as exc:
            quarantine(_q(f"port without a usable system GUID or number: {exc}", row, source, where))
            continue
        width = speed = None
        try:
            if (raw_width := _scalar(row, PORT_FIELDS, "width")) is not None:
                width = normalise_width(str(raw_width))
            if (raw_speed := _scalar(row, PORT_FIELDS, "speed")) is not None:
                speed = normalise_speed(str(raw_speed))
        except ValueError as exc:
            quarantine(_q(str(exc), row, source, where))
            continue
        if (node_guid, number) in rate:
            quarantine(_q(f"duplicate port {node_guid} {number}", row, source, where))
            continue
        rate[(node_guid, number)] = (width, speed)
        problems = []
        peer_guid, peer_port = _peer(row, problems)
        lid = _optional_int(row, PORT_FIELDS, "lid", LID_MAX, problems)
        try:
            port_guid = _guid(row, PORT_FIELDS, "port_guid") if _get(row, PORT_FIELDS, "port_guid") else None
        except ValueError as exc:
            port_guid = None
            problems.append(f"port GUID: {exc} (left empty)")
        fabric.ports.append(
            IbPort(
                node_guid=node_guid,
                port=number,
                port_guid=port_guid,
                ext_port=None,
                peer_guid=peer_guid,
                peer_port=peer_port,
                peer_port_guid=None,
                peer_description=None,
                lid=lid,
                lmc=None,
                peer_lid=None,
                width=width,
                speed=speed,
                speed_gbps=link_gbps(width, speed) if width and speed else None,
                line=i,
            )
        )
        if problems:
            quarantine(_landed_with("port", problems, row, source, where))
    classifier = Classifier(hca_filter)
    for n in fabric.nodes:
        fabric.classes[n.guid] = classifier.classify(n.node_type, n.description)
    models = {g: c.switch_model for g, c in fabric.classes.items() if c.node_class is NodeClass.SWITCH}
    seen: set[tuple[str, int, str, int]] = set()
    for i, row in enumerate(ufm.links):
        where = f"links[{i}]"
        if not isinstance(row, Mapping):
            quarantine(_q(f"link row is {_kind(row)}, not an object", row, source, where))
            continue
        try:
            a = (
                _guid(row, LINK_FIELDS, "a_guid"),
                _int(_scalar(row, LINK_FIELDS, "a_port"), "source_port", 0, INT_MAX),
            )
            b = (
                _guid(row, LINK_FIELDS, "b_guid"),
                _int(_scalar(row, LINK_FIELDS, "b_port"), "destination_port", 0, INT_MAX),
            )
        except ValueError as exc:
            quarantine(_q(f"link without usable ends: {exc}", row, source, where))
            continue
        if a == b:
            quarantine(_q(f"link from port {a[0]} {a[1]} to itself", row, source, where))
            continue
        missing = [g for g, _ in (a, b) if g not in nodes]
        if missing:
            quarantine(_q(f"link end(s) {', '.join(missing)} are not UFM systems", row, source, where))
            continue
        (ag, ap), (bg, bp) = sorted((a, b))
        if (ag, ap, bg, bp) in seen:
            quarantine(_q("duplicate link", row, source, where))
            continue
        pw, ps = rate.get(a) or rate.get(b) or (None, None)
        try:
            raw_width = _scalar(row, LINK_FIELDS, "width")
            raw_speed = _scalar(row, LINK_FIELDS, "speed")
            width = normalise_width(str(raw_width)) if raw_width is not None else pw
            speed = normalise_speed(str(raw_speed)) if raw_speed is not None else ps
        except ValueError as exc:
            quarantine(_q(str(exc), row, source, where))
            continue
        seen.add((ag, ap, bg, bp))
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
