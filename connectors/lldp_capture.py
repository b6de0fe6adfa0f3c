"""Saved LLDP captures read offline, through the same parsers as a live poll. Pure: no I/O.

Sites keep captures from devices gpufabric cannot reach. A CLI capture (any JSON/XML format of
:data:`connectors.ssh.platforms.CAPTURE_FORMATS`, ``lldpctl -f json``) goes through
:func:`connectors.ssh.parsers.parse_output` with the command row a live SSH poll would use; an SNMP
capture (an snmpsim ``.snmprec`` file, or ``snmpwalk -On`` text) becomes the
:class:`~connectors.snmp.lldp_mib.DeviceWalk` a live walk would have produced and goes through
:func:`~connectors.snmp.lldp_mib.interpret`. A line of a capture that cannot be read is
quarantined with its line number; a capture with nothing readable is quarantined whole.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from connectors.lldpctl import HostFilter, parse_lldpctl
from connectors.ssh.collector import status_of
from connectors.ssh.parsers import MAX_OUTPUT_BYTES, CliParse, OutputError, check_output, parse_output
from connectors.ssh.platforms import CAPTURE_FORMATS, command_for
from core.lldp import LldpNeighbor
from core.quality import CollectionStatus, Quarantined

if TYPE_CHECKING:  # importing connectors.snmp loads pysnmp (~1 s): only SNMP captures need it
    from connectors.snmp.lldp_mib import DeviceWalk, LldpCollection, Value

OID = tuple[int, ...]

SNMP_FORMATS = ("snmprec", "snmpwalk")
FORMATS: tuple[str, ...] = (*CAPTURE_FORMATS, *SNMP_FORMATS)
"""Every ``--format`` of ``gpufabric ingest lldp``."""


class CaptureFormatError(ValueError):
    """An unknown format name (the message lists the known ones)."""


@dataclass
class Capture:
    """One saved capture, read: what a live poll of that device would land."""

    device: str
    format: str
    collector: str  # raw.lldp_neighbor_observations.collector: 'snmp', 'cli' or 'lldpctl'
    platform: str | None
    neighbors: list[LldpNeighbor]
    quarantined: list[Quarantined]
    status: CollectionStatus
    detail: str | None = None
    snmp: LldpCollection | None = None  # SNMP captures: the whole interpreted walk (systems, interfaces)
    dropped: dict[str, str] = field(default_factory=dict)  # host captures: interfaces filtered out


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise CaptureFormatError(f"unknown capture format {fmt!r}; known formats: {', '.join(FORMATS)}")
    return fmt


def read_capture(data: bytes, fmt: str, device: str, platform: str | None = None) -> Capture:
    """Parse one capture; CaptureFormatError for an unknown format, never an error for its content."""
    check_format(fmt)
    if fmt in SNMP_FORMATS:
        return _snmp_capture(data, fmt, device, platform)
    platform_key, version = CAPTURE_FORMATS[fmt]
    spec = command_for(platform_key, version)
    if platform_key == "linux":
        # A host's own lldpctl: the host filter a live host collection applies (management NIC, VFs).
        parse = CliParse()
        try:
            text = check_output(data)
        except OutputError as err:
            parse.quarantined.append(
                Quarantined(source="lldpctl", device=device, reason=str(err), payload=data[: 1024 * 1024],
                            location="output", context={"command": spec.command, "platform": "linux"})
            )  # fmt: skip
            dropped: dict[str, str] = {}
        else:
            result = parse_lldpctl(text, device, host_filter=HostFilter())
            parse.neighbors, parse.quarantined, dropped = result.neighbors, result.quarantined, result.dropped
        return _cli_capture(device, fmt, "lldpctl", "linux", parse, dropped)
    return _cli_capture(device, fmt, "cli", spec.platform, parse_output(data, spec, device), {})


def _cli_capture(
    device: str, fmt: str, collector: str, platform: str, parse: CliParse, dropped: dict[str, str]
) -> Capture:
    status = status_of(parse)
    detail = parse.quarantined[0].reason if status is CollectionStatus.INVALID else None
    return Capture(device, fmt, collector, platform, parse.neighbors, parse.quarantined, status, detail, None, dropped)


# ------------------------------------------------------------------------------------------------
# SNMP captures -> DeviceWalk
# ------------------------------------------------------------------------------------------------


@functools.cache
def _bases() -> tuple[frozenset[OID], list[tuple[str, OID]]]:
    from connectors.snmp.oids import SYSTEM_OIDS, WALK_BASES

    return frozenset(SYSTEM_OIDS), sorted(WALK_BASES.items(), key=lambda kv: -len(kv[1]))


_SNMPREC_TAGS = {
    "2": "int", "4": "octets", "5": "null", "6": "oid", "64": "ipaddr", "65": "counter", "66": "gauge",
    "67": "timeticks", "68": "opaque", "70": "counter64",
}  # fmt: skip
"""snmpsim's type codes (the BER tag numbers); an ``x`` suffix means the value is hex."""


def _once(seen: dict[OID, int], oid: OID, line: int) -> None:
    """A walk answers each OID once; a capture that repeats one (lines duplicated or two walks
    concatenated) would otherwise keep the last value without a word. The first one is kept."""
    first = seen.setdefault(oid, line)
    if first != line:
        raise ValueError(f"OID given twice (first at line {first}); the first value is kept")


def _place(walk: DeviceWalk, oid: OID, value: Value) -> bool:
    """Put one varbind where a live walk would have: the system GET or the walk it falls under."""
    system, bases = _bases()
    if oid in system:
        walk.system[oid] = value
        return True
    for name, base in bases:
        if oid[: len(base)] == base and len(oid) > len(base):
            walk.tables.setdefault(name, {})[oid[len(base) :]] = value
            return True
    return False  # an OID LLDP discovery does not walk: ignored, as a live walk never asks for it


MAX_SUB_ID = 2**32 - 1
"""An OID sub-identifier is 0..4294967295 (RFC 2578 3.5); the warehouse's bigint columns take any."""
# The range of each SMI type (RFC 2578 7.1): a value outside it is no value an agent can send.
_RANGES = {
    "int": (-(2**31), 2**31 - 1), "counter": (0, 2**32 - 1), "gauge": (0, 2**32 - 1),
    "timeticks": (0, 2**32 - 1), "counter64": (0, 2**64 - 1),
}  # fmt: skip


def _oid(text: str) -> OID:
    parts = text.strip().strip(".").split(".")
    # isascii: "²".isdigit() is true and int("²") fails; 10 digits hold every sub-identifier
    if not text.strip() or not all(p.isascii() and p.isdigit() and len(p) <= 10 for p in parts):
        raise ValueError(f"not a numeric OID: {text.strip()[:80]!r}")
    oid = tuple(int(p) for p in parts)
    if max(oid) > MAX_SUB_ID:
        raise ValueError(f"OID sub-identifier {max(oid)} exceeds {MAX_SUB_ID}: {text.strip()[:80]!r}")
    return oid


def _number(kind: str, what: str, digits: str) -> Value:
    # Integer32 / Counter32 / Gauge32 / TimeTicks / Counter64 ranges: an out-of-range number is no
    # value an agent can send, and would overflow the warehouse's bigint columns.
    if not re.fullmatch(r"-?[0-9]{1,20}", digits):
        raise ValueError(f"{what}: {digits[:40]!r} is not a number")
    low, high = _RANGES[kind]
    number = int(digits)
    if not low <= number <= high:
        raise ValueError(f"{what}: {number} is outside the type's range {low}..{high}")
    return (kind, number)


def _snmprec_value(tag: str, value: str) -> Value:
    hexed = tag.endswith("x")
    kind = _SNMPREC_TAGS.get(tag.removesuffix("x"))
    if kind is None:
        raise ValueError(f"unknown snmprec type {tag!r} (variation modules are not captures)")
    if kind == "null":
        return ("null", None)
    if kind in ("octets", "opaque", "ipaddr"):
        if hexed:
            try:
                return (kind, bytes.fromhex(value))
            except ValueError:
                raise ValueError(f"type {tag}: value is not hex") from None
        if kind == "ipaddr":
            return _ip(value)
        return (kind, value.encode())
    if kind == "oid":
        return ("oid", ".".join(str(x) for x in _oid(value)))
    return _number(kind, f"type {tag}", value.strip())


def _ip(value: str) -> Value:
    parts = value.strip().split(".")
    if len(parts) != 4 or not all(p.isdigit() and int(p) < 256 for p in parts):
        raise ValueError(f"IpAddress {value[:40]!r} is not a dotted quad")
    return ("ipaddr", bytes(int(p) for p in parts))


def walk_from_snmprec(text: str, device: str, platform: str | None = None) -> tuple[DeviceWalk, list[Quarantined]]:
    """An snmprec file as the walk snmpsim would serve: one ``OID|TYPE|VALUE`` per line (snmpsim
    strips whitespace around each line; ``4`` is text, ``4x`` hex octets)."""
    from connectors.snmp.lldp_mib import DeviceWalk

    walk = DeviceWalk(device=device, configured_platform=platform)
    bad: list[Quarantined] = []
    seen: dict[OID, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            oid_text, tag, value = line.split("|", 2)
            oid = _oid(oid_text)
            _once(seen, oid, number)
            _place(walk, oid, _snmprec_value(tag, value))
        except ValueError as err:
            reason = str(err) if "|" in line and line.count("|") >= 2 else "not an OID|TYPE|VALUE line"
            bad.append(Quarantined(source="snmp", device=device, reason=reason, payload=line[:1024],
                                   location=f"line {number}", context={"format": "snmprec"}))  # fmt: skip
    return walk, bad


_WALK_LINE = re.compile(r"^(?P<oid>\.?\d+(?:\.\d+)*)\s*=\s*(?P<rest>.*)$", re.DOTALL)
_WALK_TYPES = {
    "INTEGER": "int", "STRING": "octets", "Hex-STRING": "octets", "OID": "oid", "IpAddress": "ipaddr",
    "Counter32": "counter", "Gauge32": "gauge", "Unsigned32": "gauge", "Timeticks": "timeticks",
    "Counter64": "counter64", "Opaque": "opaque", "Network Address": "ipaddr", "BITS": "octets",
}  # fmt: skip
_NO_VALUE = ("No Such Object", "No Such Instance", "No more variables")


def _walk_value(rest: str) -> Value:
    """The value part of one ``snmpwalk -On`` line (after ``=``)."""
    rest = rest.strip()
    if rest == '""':
        return ("octets", b"")
    if rest.startswith(_NO_VALUE):
        return ("end", None) if rest.startswith("No more") else ("nosuch", None)
    if rest.startswith("NULL"):
        return ("null", None)
    kind_text, sep, value = rest.partition(": ")
    if not sep:
        kind_text, value = rest.rstrip(":"), ""
    kind = _WALK_TYPES.get(kind_text)
    if kind is None:
        raise ValueError(f"unknown snmpwalk type {kind_text[:40]!r}")
    value = value.strip()
    if kind_text in ("Hex-STRING", "BITS"):
        digits = re.sub(r"\s+", "", value.split("  ")[0] if kind_text == "BITS" else value)
        try:
            return (kind, bytes.fromhex(digits))
        except ValueError:
            raise ValueError("Hex-STRING with non-hex digits") from None
    if kind == "octets":
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        return (kind, value.encode())
    if kind == "oid":
        return (kind, ".".join(str(x) for x in _oid(value)))
    if kind == "ipaddr":
        return _ip(value)
    if kind == "opaque":
        return (kind, value.encode())
    number = re.search(r"\((-?[0-9]+)\)", value) if kind in ("int", "timeticks") else None
    digits = number.group(1) if number else value.split()[0] if value else ""
    return _number(kind, kind_text, digits)


def _closes_quote(text: str) -> bool:
    return '"' in text.replace("\\\\", "").replace('\\"', "")


def _opens(line: str) -> str | None:
    """Whether a record's value goes on on the next line, and how: ``"string"`` for a quoted
    STRING whose closing quote has not come yet, ``"hex"`` for a Hex-STRING (net-snmp wraps long
    ones), None when the line is the whole record."""
    _, _, rest = line.partition("=")
    rest = rest.strip()
    if rest.startswith("Hex-STRING:"):
        return "hex"
    if rest.startswith('STRING: "') and not _closes_quote(rest[len('STRING: "') :]):
        return "string"
    return None


def _walk_records(text: str) -> list[tuple[int, str]]:
    """Logical records (line number, text): snmpwalk continues a quoted STRING holding newlines,
    and a long Hex-STRING, on the lines that follow (they do not start with an OID).

    Linear in the text: continuation lines are collected in a list and only each new line is
    scanned for the closing quote (re-scanning and re-joining the record on every line took
    minutes for an unclosed quote followed by a few MB of lines)."""
    records: list[tuple[int, list[str], str | None]] = []
    kind: str | None = None  # how the last record goes on, None when it is complete
    for number, line in enumerate(text.splitlines(), 1):
        if records and kind is not None and not _WALK_LINE.match(line):
            records[-1][1].append(line)
            if kind == "string" and _closes_quote(line):
                kind = None
            continue
        kind = _opens(line)
        records.append((number, [line], kind))
    return [(number, (" " if first_kind == "hex" else "\n").join(parts)) for number, parts, first_kind in records]


def walk_from_snmpwalk(text: str, device: str, platform: str | None = None) -> tuple[DeviceWalk, list[Quarantined]]:
    """``snmpwalk -On`` (net-snmp) text: ``.1.3.6... = TYPE: value`` per varbind."""
    from connectors.snmp.lldp_mib import DeviceWalk

    walk = DeviceWalk(device=device, configured_platform=platform)
    bad: list[Quarantined] = []
    seen: dict[OID, int] = {}
    for number, record in _walk_records(text):
        if not record.strip():
            continue
        match = _WALK_LINE.match(record.strip())
        try:
            if match is None:
                raise ValueError("not an 'OID = TYPE: value' line (was the walk made with -On?)")
            value = _walk_value(match.group("rest"))
            if value[0] != "end":
                oid = _oid(match.group("oid"))
                _once(seen, oid, number)
                _place(walk, oid, value)
        except ValueError as err:
            bad.append(Quarantined(source="snmp", device=device, reason=str(err), payload=record[:1024],
                                   location=f"line {number}", context={"format": "snmpwalk"}))  # fmt: skip
    return walk, bad


def _snmp_capture(data: bytes, fmt: str, device: str, platform: str | None) -> Capture:
    from connectors.snmp.lldp_mib import interpret

    def whole(reason: str) -> Capture:
        q = Quarantined(source="snmp", device=device, reason=reason, payload=data[: 1024 * 1024], location="file",
                        context={"format": fmt})  # fmt: skip
        return Capture(device, fmt, "snmp", platform, [], [q], CollectionStatus.INVALID, reason)

    if len(data) > MAX_SNMP_CAPTURE_BYTES:
        return whole(f"capture of {len(data)} bytes exceeds the {MAX_SNMP_CAPTURE_BYTES}-byte limit")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return whole(f"binary file: not UTF-8 at byte {err.start}")
    reader = walk_from_snmprec if fmt == "snmprec" else walk_from_snmpwalk
    walk, bad = reader(text, device, platform)
    if not walk.system and not any(walk.tables.values()):
        reason = f"no varbind of the system group, LLDP-MIB, LLDP-V2-MIB or IF-MIB in this {fmt} file"
        if bad:
            reason += f" ({len(bad)} unreadable lines, first: {bad[0].location}: {bad[0].reason})"
        return whole(reason)
    collection = interpret(walk)
    quarantined = bad + collection.quarantined
    status, detail = collection.status, collection.detail
    if bad and status is CollectionStatus.OK:
        status, detail = CollectionStatus.PARTIAL, f"{len(bad)} unreadable line(s) in the {fmt} file"
    elif bad and status is CollectionStatus.NO_DATA:
        status, detail = CollectionStatus.INVALID, f"no LLDP row readable; {len(bad)} unreadable line(s)"
    return Capture(device, fmt, "snmp", collection.system.platform if collection.system else platform,
                   collection.neighbors, quarantined, status, detail, collection)  # fmt: skip


MAX_SNMP_CAPTURE_BYTES = 16 * MAX_OUTPUT_BYTES
"""A full walk of a big chassis is a few MB; LibreNMS's test walks are under 1 MB."""
