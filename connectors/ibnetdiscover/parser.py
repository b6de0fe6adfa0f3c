"""Parse ``ibnetdiscover`` output (infiniband-diags) into nodes, ports and resolved links.

The format (one block per node, blocks separated by blank lines)::

    vendid=0x2c9
    devid=0xd2f0
    sysimgguid=0xb83fd20300aabb00
    switchguid=0xb83fd20300aabb00(b83fd20300aabb00)
    Switch  65 "S-b83fd20300aabb00"   # "MF0;ib-leaf-01:MQM9700/U1" enhanced port 0 lid 1 lmc 0
    [1]     "H-b83fd20300ccdd00"[1](b83fd20300ccdd00)   # "dgx001 mlx5_0" lid 2 4xNDR

    caguid=0xb83fd20300ccdd00
    Ca      1 "H-b83fd20300ccdd00"    # "dgx001 mlx5_0"
    [1](b83fd20300ccdd00)   "S-b83fd20300aabb00"[1]   # lid 2 lmc 0 "MF0;ib-leaf-01:MQM9700/U1" lid 1 4xNDR

Everything is kept: node and system image GUIDs, vendor/device ids, port numbers, port GUIDs,
lids, lmc, width and speed. Every link appears twice (once from each end); :class:`LinkResolver`
pairs the two sightings into one undirected link and says when only one end was seen.

Bad input never stops the parse: an unrecognised or truncated line, a second block for a GUID
already seen, a port beyond the node's port count or a port pointing at a GUID that never
appears are quarantined with the line number and reason. Input is read line by line with a cap
on line length (:func:`read_lines`), and :func:`iter_records` yields records as it goes, so a
500 MB file is never held in memory whole: what stays is one entry per port for link pairing.
"""

from __future__ import annotations

import functools
import gc
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from core.infiniband import (
    Classification,
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
from core.models import Finding, Link, LinkKind, PortRef
from core.quality import CollectionStatus, Quarantined

SOURCE = "ibnetdiscover"
MAX_LINE = 64 * 1024  # no legitimate line comes close; a longer one is garbage and is clipped
MAX_BLOCK_PAYLOAD = 16 * 1024  # how much of a rejected block is kept in quarantine

NODE_TYPES = {"Switch": "switch", "Ca": "ca", "Rt": "router"}

# IBA field widths: NodeInfo.NumPorts and port numbers are 8 bits, LIDs 16 bits, LMC 3 bits. A
# larger number is no ibnetdiscover output (and would overflow the warehouse's integer columns).
MAX_PORT = 255
MAX_LID = 0xFFFF
MAX_LMC = 7

_GUID = r"(?:0x)?[0-9a-fA-F]{1,16}"
_NODE_RE = re.compile(
    rf'^(?P<type>Switch|Ca|Rt)\s+(?P<ports>\d+)\s+"(?P<prefix>[SHR])-(?P<guid>{_GUID})"\s*(?:#\s*(?P<rest>.*))?$'
)
_NODE_REST_RE = re.compile(
    r'^"(?P<desc>.*)"(?P<port0>\s+(?:enhanced|base) port 0)?(?:\s+lid\s+(?P<lid>\d+))?(?:\s+lmc\s+(?P<lmc>\d+))?\s*$'
)
# Switch port: [1][ext 1]? "H-<guid>"[1](<port guid>)  # "<peer desc>" lid 2 4xNDR
# Ca port:     [1](<port guid>)  "S-<guid>"[1]  # lid 2 lmc 0 "<peer desc>" lid 1 4xNDR
_PORT_RE = re.compile(
    rf"^\[(?P<port>\d+)\](?:\((?P<pguid>{_GUID})\))?(?:\[ext (?P<ext>\d+)\])?\s+"
    rf'"(?P<prefix>[SHR])-(?P<peer>{_GUID})"\[(?P<peer_port>\d+)\](?:\((?P<peer_pguid>{_GUID})\))?'
    rf"\s*(?:#\s*(?P<rest>.*))?$"
)
_PORT_REST_RE = re.compile(
    r'^(?:lid\s+(?P<lid>\d+)\s+lmc\s+(?P<lmc>\d+)\s+)?"(?P<desc>.*)"\s+lid\s+(?P<peer_lid>\d+)\s+'
    r"(?P<width>\d+x)(?P<speed>[A-Za-z0-9]+)(?P<extra>.*)$"
)
_KV_RE = re.compile(
    r"^(?P<key>vendid|devid|sysimgguid|switchguid|caguid|rtguid)=(?P<value>\S+?)(?:\((?P<pg>[^)]*)\))?$"
)


class IbnetdiscoverError(Exception):
    """The output could not be read at all (file missing, command failed)."""


@dataclass(frozen=True)
class IbNode:
    guid: str
    node_type: str  # switch | ca | router
    port_count: int
    description: str
    system_guid: str | None
    vendor_id: str | None
    device_id: str | None
    lid: int | None  # switch: port 0's lid
    lmc: int | None
    enhanced_port0: bool | None
    line: int


@dataclass(frozen=True)
class IbPort:
    node_guid: str
    port: int
    port_guid: str | None
    ext_port: int | None
    peer_guid: str
    peer_port: int
    peer_port_guid: str | None
    peer_description: str | None
    lid: int | None  # this port's lid (a switch's ports share the switch lid: None here)
    lmc: int | None
    peer_lid: int | None
    width: str | None
    speed: str | None
    speed_gbps: float | None
    line: int


@dataclass(frozen=True)
class IbLink:
    """An undirected link, ends ordered by (GUID, port)."""

    a_guid: str
    a_port: int
    b_guid: str
    b_port: int
    width: str | None
    speed: str | None
    speed_gbps: float | None
    both_sides: bool
    internal: bool = False  # on a switch's internal port (Quantum-2 port 65)

    def to_link(self, evidence: str = SOURCE) -> Link:
        return Link.between(
            PortRef(device_id=self.a_guid, port=str(self.a_port)),
            PortRef(device_id=self.b_guid, port=str(self.b_port)),
            kind=LinkKind.IB,
            speed_gbps=self.speed_gbps,
            width=self.width,
            evidence=frozenset({evidence}),
            both_sides=self.both_sides,
        )


Record = IbNode | IbPort | Quarantined


# --- reading ---------------------------------------------------------------------------------


def read_lines(stream: IO[bytes], max_line: int = MAX_LINE) -> Iterator[tuple[str, bool, bool]]:
    """Lines of a byte stream as (text, was_clipped, was_not_utf8), never more than ``max_line``
    bytes in memory per line: the rest of an over-long line is read and thrown away in chunks."""
    while True:
        raw = stream.readline(max_line + 1)
        if not raw:
            return
        clipped = False
        if len(raw) > max_line and not raw.endswith(b"\n"):
            clipped = True
            raw = raw[:max_line]
            while True:  # drain the rest of this line without keeping it
                rest = stream.readline(max_line)
                if not rest or rest.endswith(b"\n"):
                    break
        raw = raw.rstrip(b"\r\n")
        try:
            text = raw.decode("utf-8")
            bad = False
        except UnicodeDecodeError:
            # Keep going with escapes (a node description in Latin-1 is still a node); the flag
            # lets the caller record it.
            text = raw.decode("utf-8", errors="backslashreplace")
            bad = True
        yield text, clipped, bad


def _bounded(text: str | None, limit: int, what: str) -> int | None:
    """A number of the line, ValueError when it is beyond the field's width."""
    if text is None:
        return None
    value = int(text) if len(text) <= 10 else limit + 1
    if value > limit:
        raise ValueError(f"{what} {text[:20]} exceeds {limit}")
    return value


def _guid(text: str) -> str:
    # The line regexes already admit only 1-16 hex digits: pad and lower-case without re-checking
    # (this runs twice per port line; the general normalise_guid is 4x slower).
    t = text.lower()
    if t.startswith("0x"):
        t = t[2:]
    if len(t) == 16:
        return "0x" + t
    if not t or len(t) > 16:
        return normalise_guid(text)  # raises the clear error
    return "0x" + t.zfill(16)


@functools.lru_cache(maxsize=64)
def _rate(width: str, speed: str) -> tuple[str | None, str | None, float | None]:
    try:
        w, s = normalise_width(width), normalise_speed(speed)
    except ValueError:
        return None, None, None
    return w, s, link_gbps(w, s)


# --- the record stream -------------------------------------------------------------------------


@dataclass
class _Block:
    node: IbNode | None  # None while skipping a rejected block
    ports_seen: set[int] = field(default_factory=set)
    rejected_reason: str | None = None
    rejected_lines: list[str] = field(default_factory=list)
    rejected_size: int = 0
    rejected_count: int = 0
    rejected_line: int = 0


def iter_records(lines: Iterable[str | tuple[str, bool, bool]], source: str = SOURCE) -> Iterator[Record]:
    """Yield :class:`IbNode`, :class:`IbPort` and :class:`Quarantined` in input order.

    State is one pending header (``vendid=`` ... lines) and the current block, plus the set of
    node GUIDs seen (to reject a duplicated GUID), so memory does not grow with the input.
    """
    header: dict[str, str] = {}
    seen: dict[str, int] = {}  # node GUID -> line of its block
    block: _Block | None = None
    lineno = 0

    def quarantine(reason: str, payload: str, where: int, **context: object) -> Quarantined:
        return Quarantined(
            source=SOURCE, device=source, reason=reason, payload=payload, location=f"line {where}", context=context
        )

    def close_block() -> Iterator[Quarantined]:
        nonlocal block
        if block is not None and block.rejected_reason is not None and block.rejected_count:
            yield quarantine(
                block.rejected_reason,
                "\n".join(block.rejected_lines),
                block.rejected_line,
                lines=block.rejected_count,
            )
        block = None

    for item in lines:
        text, clipped, not_utf8 = item if isinstance(item, tuple) else (item, False, False)
        lineno += 1
        has_nul = "\x00" in text
        if has_nul:
            # Postgres text cannot hold NUL: escaped, as undecodable bytes are (said so on a node line)
            text = text.replace("\x00", "\\x00")
        line = text.strip()
        if clipped:
            yield from close_block()
            yield quarantine(f"line longer than {MAX_LINE} bytes (clipped)", text, lineno)
            continue
        if not line:
            yield from close_block()
            continue
        if line.startswith("#"):
            continue  # the banner: "# Topology file: generated on ...", "# Initiated from node ..."
        if block is not None and block.rejected_reason is not None and line.startswith("["):
            block.rejected_count += 1
            if block.rejected_size < MAX_BLOCK_PAYLOAD:
                block.rejected_lines.append(text)
                block.rejected_size += len(text) + 1
            continue
        kv = _KV_RE.match(line)
        if kv:
            yield from close_block()
            header[kv.group("key")] = kv.group("value")
            continue
        m = _NODE_RE.match(line)
        if m:
            yield from close_block()
            node_type = NODE_TYPES[m.group("type")]
            rest = (m.group("rest") or "").strip()
            rm = _NODE_REST_RE.match(rest) if rest else None
            try:
                guid = _guid(m.group("guid"))
                sysguid = _guid(header["sysimgguid"]) if "sysimgguid" in header else None
                port_count = _bounded(m.group("ports"), MAX_PORT, "port count")
                lid = _bounded(rm.group("lid"), MAX_LID, "lid") if rm else None
                lmc = _bounded(rm.group("lmc"), MAX_LMC, "lmc") if rm else None
            except ValueError as exc:
                header.clear()
                yield quarantine(f"bad node header: {exc}", text, lineno)
                block = _Block(node=None, rejected_reason="port line of a node whose header was rejected")
                block.rejected_line = lineno
                continue
            if guid in seen:
                header.clear()
                block = _Block(
                    node=None,
                    rejected_reason=f"duplicate node GUID {guid}: first block at line {seen[guid]}; "
                    "this block (header and port lines) is not used",
                    rejected_lines=[text],
                    rejected_size=len(text),
                    rejected_count=1,
                    rejected_line=lineno,
                )
                continue
            seen[guid] = lineno
            desc, port0 = "", None
            if rm:
                desc = rm.group("desc")
                if rm.group("port0"):
                    port0 = "enhanced" in rm.group("port0")
            elif rest.startswith('"'):
                # An opening quote and no closing one: the line was cut (truncated file). The GUID
                # is sound, the description is not: keep the node without one and say so.
                yield quarantine(
                    "node description cut short (truncated line?): node kept without a description",
                    text,
                    lineno,
                    guid=guid,
                )
            elif rest:
                desc = rest  # a description without quotes: keep it as written
            node = IbNode(
                guid=guid,
                node_type=node_type,
                port_count=port_count or 0,
                description=desc,
                system_guid=sysguid,
                vendor_id=header.get("vendid"),
                device_id=header.get("devid"),
                lid=lid,
                lmc=lmc,
                enhanced_port0=port0,
                line=lineno,
            )
            header.clear()
            block = _Block(node=node)
            if not_utf8:
                yield quarantine(
                    "node description is not valid UTF-8: node kept with the bytes escaped", text, lineno, guid=guid
                )
            if has_nul:
                yield quarantine("node header holds NUL bytes: node kept with them escaped", text, lineno, guid=guid)
            yield node
            continue
        p = _PORT_RE.match(line)
        if p:
            if block is None or block.node is None:
                yield quarantine("port line outside a node block", text, lineno)
                continue
            node = block.node
            try:
                port = _bounded(p.group("port"), MAX_PORT, "port") or 0
                ext = _bounded(p.group("ext"), MAX_PORT, "ext port")
                peer_port = _bounded(p.group("peer_port"), MAX_PORT, "peer port") or 0
            except ValueError as exc:
                yield quarantine(f"bad port line: {exc}", text, lineno, guid=node.guid)
                continue
            if port > node.port_count or (port == 0 and node.node_type != "switch"):
                yield quarantine(
                    f"port {port} is outside {node.guid}'s {node.port_count} ports", text, lineno, guid=node.guid
                )
                continue
            if port in block.ports_seen:
                yield quarantine(f"port {port} of {node.guid} listed twice", text, lineno, guid=node.guid)
                continue
            rest = (p.group("rest") or "").strip()
            rm2 = _PORT_REST_RE.match(rest)
            if rest and rm2 is None:
                yield quarantine("port line with an unreadable trailer (truncated?)", text, lineno, guid=node.guid)
                continue
            lid = lmc = peer_lid = None
            try:
                peer = _guid(p.group("peer"))
                pguid = _guid(p.group("pguid")) if p.group("pguid") else None
                ppguid = _guid(p.group("peer_pguid")) if p.group("peer_pguid") else None
                if rm2 is not None:
                    peer_lid = _bounded(rm2.group("peer_lid"), MAX_LID, "peer lid")
                    lid = _bounded(rm2.group("lid"), MAX_LID, "lid")
                    lmc = _bounded(rm2.group("lmc"), MAX_LMC, "lmc")
            except ValueError as exc:
                yield quarantine(f"bad port line: {exc}", text, lineno, guid=node.guid)
                continue
            width = speed = None
            gbps = None
            peer_desc = None
            if rm2 is not None:
                width, speed, gbps = _rate(rm2.group("width"), rm2.group("speed"))
                if width is None:
                    yield quarantine(
                        f"unknown link rate {rm2.group('width')}{rm2.group('speed')}", text, lineno, guid=node.guid
                    )
                    continue
                peer_desc = rm2.group("desc")
            block.ports_seen.add(port)
            yield IbPort(
                node_guid=node.guid,
                port=port,
                port_guid=pguid if node.node_type != "switch" else _switch_port_guid(node),
                ext_port=ext,
                peer_guid=peer,
                peer_port=peer_port,
                peer_port_guid=ppguid,
                peer_description=peer_desc,
                lid=lid,
                lmc=lmc,
                peer_lid=peer_lid,
                width=width,
                speed=speed,
                speed_gbps=gbps,
                line=lineno,
            )
            continue
        # A garbage line does not end the block: the port lines after it still belong to the node.
        yield quarantine("unrecognised line (not a node header, port line or key=value)", text, lineno)
    yield from close_block()


def _switch_port_guid(node: IbNode) -> str:
    """A switch's ports all carry the switch's port GUID (IBA: switch port 0's GUID = node GUID)."""
    return node.guid


# --- pairing both ends of every link ------------------------------------------------------------


class LinkResolver:
    """Pairs the two sightings of each cable. Memory: one small tuple per port line."""

    def __init__(self) -> None:
        self._ends: dict[tuple[str, int], tuple[str, int, str | None, str | None, float | None, int]] = {}
        self._conflicts: list[tuple[IbPort, str]] = []

    def add(self, port: IbPort) -> None:
        self._ends[(port.node_guid, port.port)] = (
            port.peer_guid,
            port.peer_port,
            port.width,
            port.speed,
            port.speed_gbps,
            port.line,
        )

    def resolve(
        self, nodes: dict[str, IbNode], switch_models: dict[str, str | None], source: str = SOURCE
    ) -> tuple[list[IbLink], list[Quarantined]]:
        links: list[IbLink] = []
        bad: list[Quarantined] = []
        done: set[tuple[str, int]] = set()
        for (guid, port), (peer, peer_port, width, speed, gbps, line) in self._ends.items():
            if (guid, port) in done:
                continue
            if peer not in nodes:
                bad.append(
                    Quarantined(
                        source=SOURCE,
                        device=source,
                        reason=f"port {guid}[{port}] points at {peer}[{peer_port}], a GUID with no node block "
                        "(truncated output, or a node that vanished mid-discovery)",
                        payload=f"{guid}[{port}] -> {peer}[{peer_port}]",
                        location=f"line {line}",
                        context={"guid": guid, "port": port, "peer_guid": peer, "peer_port": peer_port},
                    )
                )
                continue
            back = self._ends.get((peer, peer_port))
            both = back is not None and back[0] == guid and back[1] == port
            if back is not None and not both:
                # The far end names another port: ibnetdiscover saw two different cables on it.
                bad.append(
                    Quarantined(
                        source=SOURCE,
                        device=source,
                        reason=f"{guid}[{port}] says its peer is {peer}[{peer_port}], but that port says "
                        f"{back[0]}[{back[1]}]",
                        payload=f"{guid}[{port}] -> {peer}[{peer_port}] -> {back[0]}[{back[1]}]",
                        location=f"line {line}",
                        context={"guid": guid, "port": port, "peer_guid": peer, "peer_port": peer_port},
                    )
                )
                continue
            done.add((guid, port))
            if both:
                done.add((peer, peer_port))
            (ag, ap), (bg, bp) = sorted(((guid, port), (peer, peer_port)))
            internal = internal_port(switch_models.get(guid), port) or internal_port(switch_models.get(peer), peer_port)
            links.append(
                IbLink(
                    a_guid=ag,
                    a_port=ap,
                    b_guid=bg,
                    b_port=bp,
                    width=width,
                    speed=speed,
                    speed_gbps=gbps,
                    both_sides=both,
                    internal=internal,
                )
            )
        links.sort(key=lambda lk: (lk.a_guid, lk.a_port, lk.b_guid, lk.b_port))
        return links, bad


# --- the whole-file result ----------------------------------------------------------------------


@dataclass
class IbFabric:
    """Everything one ibnetdiscover output said, classified, with its rejects."""

    source: str
    nodes: list[IbNode] = field(default_factory=list)
    ports: list[IbPort] = field(default_factory=list)
    links: list[IbLink] = field(default_factory=list)
    classes: dict[str, Classification] = field(default_factory=dict)  # node GUID -> class
    quarantined: list[Quarantined] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    lines: int = 0

    @property
    def switches(self) -> list[IbNode]:
        return [n for n in self.nodes if n.node_type == "switch"]

    @property
    def problem(self) -> str | None:
        """Why this output cannot describe a fabric, if it cannot (None when it can)."""
        if not self.nodes:
            return "no nodes in the ibnetdiscover output"
        if not self.switches:
            cas = sum(1 for n in self.nodes if n.node_type == "ca")
            return (
                f"no switches in the ibnetdiscover output ({cas} adapter(s) only): the HCA it ran on is "
                "not cabled or its port is down, so nothing of the fabric was seen"
            )
        return None

    @property
    def status(self) -> CollectionStatus:
        if self.problem is not None:
            return CollectionStatus.NO_DATA if not self.quarantined else CollectionStatus.INVALID
        return CollectionStatus.PARTIAL if self.quarantined else CollectionStatus.OK

    def compute_links(self) -> list[IbLink]:
        """Links between switches and compute HCAs only (the fabric the topology is built from)."""
        keep = {g for g, c in self.classes.items() if c.node_class in (NodeClass.SWITCH, NodeClass.COMPUTE_HCA)}
        return [lk for lk in self.links if not lk.internal and lk.a_guid in keep and lk.b_guid in keep]


def parse_ibnetdiscover(
    lines: Iterable[str | tuple[str, bool, bool]],
    source: str = SOURCE,
    hca_filter: HcaFilter | None = None,
) -> IbFabric:
    """Parse a whole output into an :class:`IbFabric` (records, links, classes, findings).

    The cyclic garbage collector is paused meanwhile (and restored, even on error): the records
    are acyclic, yet tens of thousands of them kept alive trigger repeated full collections that
    cost two thirds of the parse time on a 16-SU fabric (``make bench``).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(lines, source, hca_filter)
    finally:
        if was_enabled:
            gc.enable()


def _parse(lines: Iterable[str | tuple[str, bool, bool]], source: str, hca_filter: HcaFilter | None) -> IbFabric:
    fabric = IbFabric(source=source)
    resolver = LinkResolver()
    by_guid: dict[str, IbNode] = {}
    counted = _Counted(lines)
    for rec in iter_records(counted, source):
        if isinstance(rec, IbNode):
            fabric.nodes.append(rec)
            by_guid[rec.guid] = rec
        elif isinstance(rec, IbPort):
            fabric.ports.append(rec)
            resolver.add(rec)
        else:
            fabric.quarantined.append(rec)
    fabric.lines = counted.count
    classifier = Classifier(hca_filter)
    for n in fabric.nodes:
        fabric.classes[n.guid] = classifier.classify(n.node_type, n.description)
    models = {g: c.switch_model for g, c in fabric.classes.items() if c.node_class is NodeClass.SWITCH}
    fabric.links, bad = resolver.resolve(by_guid, models, source)
    fabric.quarantined.extend(bad)
    summary = fabric_findings(
        (NodeView(n.guid, n.node_type, n.description, fabric.classes[n.guid]) for n in fabric.nodes),
        switches=len(fabric.switches),
    )
    fabric.findings = summary.findings
    return fabric


class _Counted:
    def __init__(self, lines: Iterable[str | tuple[str, bool, bool]]) -> None:
        self._lines = lines
        self.count = 0

    def __iter__(self) -> Iterator[str | tuple[str, bool, bool]]:
        for line in self._lines:
            self.count += 1
            yield line


def parse_file(path: str | Path, source: str | None = None, hca_filter: HcaFilter | None = None) -> IbFabric:
    """Parse a saved output, streamed; :class:`IbnetdiscoverError` when it cannot be opened."""
    path = Path(path)
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise IbnetdiscoverError(f"cannot read {path}: {exc.strerror or exc}") from None
    with fh:
        return parse_ibnetdiscover(read_lines(fh), source or path.name, hca_filter)
