"""Parse a DCIM inventory export (CSV or YAML) into typed records, quarantining bad rows.

DCIM exports are hand-maintained spreadsheets more often than APIs: header spellings vary,
cells are blank or mistyped, rows are duplicated. Each row is judged on its own; a bad row is
quarantined with its line and reason and never stops the rest of the file. The file is streamed
line by line (with a cap on the length of a line), so a huge export does not sit in memory.

Accounting rule: every non-blank physical line after the header ends up in exactly one place —
a record, a quarantined item, or (only for a valid record whose quoted cell legitimately spans
lines) inside that one record. A record that spans lines is trusted only when it is valid: if
it is not, its first line is quarantined and the following lines are read again as rows of their
own, so one stray quote cannot swallow the rest of the file.
"""

from __future__ import annotations

import csv
import functools
import ipaddress
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from core.quality import MAX_QUARANTINE_PAYLOAD, Parsed, Quarantined

SOURCE = "dcim"

# Header spellings seen in DCIM exports (NetBox, Nlyte, spreadsheets), folded to our names.
# Matching is on the lower-cased header with spaces and dashes as underscores.
COLUMN_ALIASES: Mapping[str, str] = {
    "node": "node",
    "hostname": "node",
    "host": "node",
    "name": "node",
    "node_name": "node",
    "device": "node",
    "device_name": "node",
    "rack": "rack",
    "rack_name": "rack",
    "cabinet": "rack",
    "location": "rack",
    "role": "role",
    "device_role": "role",
    "su": "su",
    "scalable_unit": "su",
    "pod": "su",
    "gpu_model": "gpu_model",
    "gpu_type": "gpu_model",
    "gpu": "gpu_model",
    "gpu_count": "gpu_count",
    "gpus": "gpu_count",
    "num_gpus": "gpu_count",
    "hca_count": "hca_count",
    "hcas_count": "hca_count",
    "num_hcas": "hca_count",
    "hcas": "hcas",
    "hca": "hcas",
    "hca_list": "hcas",
    "bmc_address": "bmc_address",
    "bmc": "bmc_address",
    "bmc_ip": "bmc_address",
    "oob_ip": "bmc_address",
    "ipmi": "bmc_address",
    "serial": "serial",
    "serial_number": "serial",
    "asset_serial": "serial",
}
# RFC 1123 host label(s): what a Kubernetes node name must be, so inventory names can join later.
# \Z, not $: $ also matches before a trailing newline.
_HOSTNAME = re.compile(
    r"(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\Z"
)
# [0-9], not \d: \d also matches other scripts' digits (int("٣") == 3).
_HCA_ENTRY = re.compile(r"(?P<name>[A-Za-z0-9_.\-]+)(?::rail(?P<rail>[0-9]{1,3}))?(?::(?P<guid>0x[0-9A-Fa-f]{16}))?\Z")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_CANONICAL_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}\Z")
_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# NUL cannot be stored in a Postgres text or jsonb value; lone surrogates cannot be encoded.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")

MAX_FIELD = 64 * 1024  # a cell larger than this is not inventory; quarantine the row
MAX_LINE = 16 * MAX_FIELD  # a physical line (bytes) or a record spanning lines (characters)
MAX_GPU_OR_HCA = 1024
MAX_YAML_BYTES = 64 * 1024 * 1024


class DcimFormatError(ValueError):
    """The export as a whole is unusable (no header, no node column, not a list)."""


@dataclass(frozen=True)
class Hca:
    name: str
    rail: int | None
    guid: str | None


@dataclass(frozen=True)
class DcimRecord:
    node: str
    rack: str | None = None
    role: str | None = None
    su: str | None = None
    gpu_model: str | None = None
    gpu_count: int | None = None
    hca_count: int | None = None
    hcas: tuple[Hca, ...] = ()
    bmc_address: str | None = None
    serial: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    line: int | None = None


class _RowError(ValueError):
    pass


# --- cell rules (shared by CSV and YAML) ------------------------------------------------------


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _text(name: str, value: Any) -> str | None:
    if value is None:
        return None
    text = (value if isinstance(value, str) else str(value)).strip()
    if not text:
        return None
    bad = _CONTROL.search(text)
    if bad:
        raise _RowError(f"{name} {text[:60]!r} contains a control character (U+{ord(bad.group()):04X})")
    return text


def _count(name: str, value: Any) -> int | None:
    if isinstance(value, str) and 0 < len(value) < 4 and value.isascii() and value.isdigit():
        return int(value)  # the common case, "8": at most 999, so within range
    if _blank(value):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _RowError(f"{name} must be a whole number, got {str(value)[:40]!r}")
    text = str(value).strip()
    if not _WHOLE_NUMBER.match(text):
        raise _RowError(f"{name} must be a whole number, got {text[:40]!r}")
    digits = text.lstrip("+-").lstrip("0")
    # Compare digit counts before int(): int() of a 5000-digit string raises (CVE-2020-10735 limit).
    if len(digits) > len(str(MAX_GPU_OR_HCA)) or not 0 <= int(text) <= MAX_GPU_OR_HCA:
        raise _RowError(f"{name} must be between 0 and {MAX_GPU_OR_HCA}, got {text[:40]}")
    return int(text)


def _hcas(value: Any) -> tuple[Hca, ...]:
    if _blank(value):
        return ()
    if isinstance(value, str):
        entries: list[Any] = value.split(";")
    elif isinstance(value, list):
        entries = value
    else:
        raise _RowError(f"hcas must be a list or a ';'-separated string, got a {type(value).__name__}")
    out = []
    for entry in entries:
        if entry is None:
            continue
        if not isinstance(entry, str):
            # Never str() a container here: YAML aliases can make it exponentially large.
            raise _RowError(f"hcas entry must be text like mlx5_0:rail0:0x<16 hex>, got a {type(entry).__name__}")
        entry = entry.strip()
        if not entry:
            continue
        match = _HCA_ENTRY.match(entry)
        if not match:
            raise _RowError(f"hcas entry {entry[:60]!r} is not name[:railN][:0x<16 hex>]")
        rail = match["rail"]
        out.append(Hca(match["name"], int(rail) if rail else None, match["guid"].lower() if match["guid"] else None))
    return tuple(out)


def _record(fields: Mapping[str, Any], extra: dict[str, str], line: int | None) -> DcimRecord:
    node = _text("node name", fields.get("node"))
    if node is None:
        raise _RowError("node name is empty")
    if not _HOSTNAME.match(node):
        raise _RowError(f"node name {node[:80]!r} is not a valid hostname")
    bmc = _text("bmc_address", fields.get("bmc_address"))
    if bmc is not None and not _CANONICAL_IPV4.match(bmc):  # the fast path is already canonical
        try:
            bmc = str(ipaddress.ip_address(bmc))
        except ValueError:
            raise _RowError(f"bmc_address {bmc[:60]!r} is not an IP address") from None
    get = fields.get
    rack, role, su = _text("rack", get("rack")), _text("role", get("role")), _text("su", get("su"))
    gpu_model, serial = _text("gpu_model", get("gpu_model")), _text("serial", get("serial"))
    gpu_count = _count("gpu_count", fields.get("gpu_count"))
    hca_count = _count("hca_count", fields.get("hca_count"))
    hcas = _hcas(fields.get("hcas"))
    if hca_count is not None and hcas and hca_count != len(hcas):
        raise _RowError(f"hca_count says {hca_count} but {len(hcas)} HCAs are listed")
    return DcimRecord(
        node=node.lower(),  # hostnames are case-insensitive; Kubernetes node names are lower-case
        rack=rack,
        role=role,
        su=su,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        hca_count=hca_count,
        hcas=hcas,
        bmc_address=bmc,
        serial=serial,
        extra=extra,
        line=line,
    )


def _canonical(header: str) -> str:
    return re.sub(r"[\s\-]+", "_", header.strip().lower())


@functools.lru_cache(maxsize=4096)
def _ours(header: str) -> str | None:
    """Our field name for a column header, or None for a column we do not know."""
    return COLUMN_ALIASES.get(_canonical(header))


def _split(row: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Known columns by our name; the rest kept verbatim in ``extra`` (never dropped).

    When two columns mean the same thing (``node`` and ``Hostname``), the first non-blank one is
    used and any other non-blank one is kept in ``extra`` under its own header.
    """
    known: dict[str, Any] = {}
    extra: dict[str, str] = {}
    for key, value in row.items():
        ours = _ours(key)
        if ours is not None and (ours not in known or _blank(known[ours])):
            known[ours] = value
        elif not _blank(value):
            extra[key] = value if isinstance(value, str) else str(value)
    return known, extra


class _Collector:
    """Applies the per-row rules shared by CSV and YAML: validation and duplicate detection."""

    def __init__(self, device: str | None) -> None:
        self.device = device
        self.result: Parsed[DcimRecord] = Parsed()
        self.seen: dict[str, str] = {}  # node -> where its first row was

    def reject(self, reason: str, payload: str | bytes, location: str, context: dict[str, Any] | None = None) -> None:
        if isinstance(payload, str) and _SURROGATE.search(payload):
            # Undecodable bytes (surrogateescape) go back to bytes, so the raw row is recoverable;
            # other lone surrogates (a YAML "\ud800" escape) cannot be bytes, so escape them.
            text = payload
            try:
                payload = text.encode("utf-8", errors="surrogateescape")
            except UnicodeEncodeError:
                payload = text.encode("utf-8", errors="backslashreplace").decode("utf-8")
        self.result.quarantined.append(
            Quarantined(
                source=SOURCE,
                device=self.device,
                reason=reason,
                payload=payload,
                location=location,
                context=context or {},
            )
        )

    def judge(
        self, row: Mapping[str, Any], line: int | None, utf8: bool = True, raw: str | None = None
    ) -> DcimRecord | str:
        """The record, or the reason the row is rejected.

        ``raw`` is the row's source text when there is one (CSV): if it is short and clean, no
        cell can be too long or hold a NUL, and one scan of it replaces a scan per cell.
        """
        if not utf8:
            return "row is not valid UTF-8"
        if raw is None or len(raw) > MAX_FIELD or _UNSTORABLE.search(raw):
            texts = [t for t in (*row.keys(), *row.values()) if isinstance(t, str)]
            if texts and max(map(len, texts)) > MAX_FIELD:
                return f"a field is longer than {MAX_FIELD} characters"
            bad = _UNSTORABLE.search("".join(texts))
            if bad and bad.group() == "\x00":
                return "row contains a NUL byte"
            if bad:
                return f"row contains an unpaired surrogate (U+{ord(bad.group()):04X}), which is not valid text"
        known, extra = _split(row)
        try:
            record = _record(known, extra, line)
        except _RowError as err:
            return str(err)
        if record.node in self.seen:
            return f"duplicate node {record.node!r} (first at {self.seen[record.node]}); first row kept"
        return record

    def accept(self, record: DcimRecord, location: str) -> None:
        self.seen[record.node] = location
        self.result.records.append(record)


# --- CSV --------------------------------------------------------------------------------------


class _Line(NamedTuple):
    number: int
    text: str
    utf8: bool


class _LineTooLong(Exception):
    def __init__(self, number: int, prefix: bytes, length: int) -> None:
        super().__init__(number)
        self.number, self.prefix, self.length = number, prefix, length


class _RecordTooLong(Exception):
    pass


def _physical_lines(stream: Iterable[bytes | str]) -> Iterator[tuple[bytes, int]]:
    """Re-cut any chunking of the input into ``\\n``-terminated lines, as (bytes, length).

    A line longer than MAX_LINE is not kept whole: only its first bytes are (the payload is
    clipped on quarantine anyway) and the length says how long it was, so a multi-gigabyte file
    without newlines cannot exhaust memory. Only ``\\n`` ends a line: a bare ``\\r`` inside a
    quoted cell is data.
    """
    parts: list[bytes] = []
    size = 0
    for chunk in stream:
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8", errors="surrogateescape")
        if not parts and chunk.endswith(b"\n") and chunk.find(b"\n") == len(chunk) - 1 and len(chunk) <= MAX_LINE:
            yield chunk, len(chunk)  # the common case: the caller already gave us lines
            continue
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start : end + 1]
            if size < MAX_LINE:
                parts.append(piece[: MAX_LINE + 1 - size])
            size += len(piece)
            if end < 0:
                break
            yield b"".join(parts), size
            parts, size = [], 0
            start = end + 1
    if parts:
        yield b"".join(parts), size


class _Lines:
    """Numbered, decoded physical lines for ``csv.reader``, with push-back.

    It remembers the lines of the record being read (``current``) so a rejected record's raw
    text can be quarantined, and so lines swallowed by a stray quote can be read again.
    """

    def __init__(self, stream: Iterable[bytes | str]) -> None:
        self._lines = _physical_lines(stream)
        self._pushed: deque[_Line] = deque()
        self._count = 0
        self.current: list[_Line] = []
        self._size = 0

    def start_record(self) -> None:
        self.current = []
        self._size = 0

    def push_back(self, lines: list[_Line]) -> None:
        self._pushed.extendleft(reversed(lines))

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        if self._pushed:
            line = self._pushed.popleft()
        else:
            raw, length = next(self._lines)  # StopIteration ends the reader
            self._count += 1
            if self._count == 1 and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
                raise DcimFormatError("the export is UTF-16 or UTF-32 encoded; export it as UTF-8 CSV")
            if length > MAX_LINE:
                raise _LineTooLong(self._count, raw[:MAX_QUARANTINE_PAYLOAD], length)
            try:
                text, utf8 = raw.decode("utf-8"), True
            except UnicodeDecodeError:
                # surrogateescape keeps undecodable bytes recoverable, so the row can be quarantined as-is.
                text, utf8 = raw.decode("utf-8", errors="surrogateescape"), False
            if self._count == 1:
                text = text.removeprefix("\ufeff")  # Excel's "CSV UTF-8" byte order mark
            line = _Line(self._count, text, utf8)
        self.current.append(line)
        self._size += len(line.text)
        if self._size > MAX_LINE:
            raise _RecordTooLong
        return line.text


def _header_names(cells: list[str]) -> list[str]:
    """Printable, unique column names: duplicates get `` (2)``, so no column overwrites another."""
    names: list[str] = []
    taken: set[str] = set()
    for i, cell in enumerate(cells):
        name = cell.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="backslashreplace").strip()
        name = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", name) or f"column {i + 1}"
        unique, n = name, 1
        while unique in taken:
            n += 1
            unique = f"{name} ({n})"
        taken.add(unique)
        names.append(unique)
    return names


def _read_header(reader: Iterator[list[str]], lines: _Lines) -> list[str]:
    while True:
        lines.start_record()
        try:
            cells = next(reader)
        except StopIteration:
            raise DcimFormatError("the export is empty (no header row)") from None
        except csv.Error as err:
            raise DcimFormatError(f"the header row is not CSV: {err}") from None
        except (_LineTooLong, _RecordTooLong):
            raise DcimFormatError(f"the header row is longer than {MAX_LINE} bytes; this is not a CSV export") from None
        if any(c.strip() for c in cells):
            break  # blank lines before the header carry nothing
    header = _header_names(cells)
    if not any(_ours(h) == "node" for h in header):
        raise DcimFormatError(
            f"no node column in header {header[:12]!r}; expected one of "
            + ", ".join(sorted(k for k, v in COLUMN_ALIASES.items() if v == "node"))
        )
    return header


def parse_csv(lines: Iterable[bytes], device: str | None = None) -> Parsed[DcimRecord]:
    """Parse CSV bytes line by line. Raises DcimFormatError only when the header is unusable.

    ``lines`` may be lines (a file opened in binary mode) or any other chunking of the bytes.
    """
    collector = _Collector(device)
    source = _Lines(lines)
    # strict: a quoted field still open at the end of the input, or text after a closing quote,
    # is an error (the default silently accepts a file cut off inside a quoted cell).
    reader = csv.reader(source, strict=True)
    header = _read_header(reader, source)

    def reject_record(reason: str) -> None:
        """Quarantine the record being read; when it spans lines, only its first line."""
        if not source.current:  # not expected: csv raises only after reading a line
            collector.reject(reason, "", "end of file")
            return
        first, rest = source.current[0], source.current[1:]
        if rest:
            reason += (
                f" (the record runs from line {first.number} to line {rest[-1].number} inside a quoted field;"
                " only its first line is quarantined, the following lines are read again as rows)"
            )
            source.push_back(rest)
        collector.reject(reason, first.text.rstrip("\r\n"), f"line {first.number}")

    while True:
        source.start_record()
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            reject_record(f"malformed CSV: {err}")
            continue
        except _RecordTooLong:
            reject_record(f"a quoted field runs on for more than {MAX_LINE} characters")
            continue
        except _LineTooLong as err:
            collector.reject(
                f"line is {err.length} bytes long, over the {MAX_LINE} byte limit",
                err.prefix,
                f"line {err.number}",
                {"line_bytes": err.length},
            )
            if source.current:  # the record that this line interrupted
                reject_record(f"malformed CSV: the record is cut by the over-long line {err.number}")
            continue
        if not "".join(cells).strip():
            continue  # blank line: nothing to lose
        current = source.current
        first = current[0].number
        if len(cells) != len(header):
            reject_record(f"row has {len(cells)} cells, header has {len(header)}")
            continue
        if len(current) == 1:
            utf8, raw = current[0].utf8, current[0].text
        else:
            utf8, raw = all(line.utf8 for line in current), "".join(line.text for line in current)
        verdict = collector.judge(dict(zip(header, cells, strict=True)), first, utf8, raw)
        if isinstance(verdict, str):
            reject_record(verdict)
        else:
            collector.accept(verdict, f"line {first}")
    return collector.result


# --- YAML -------------------------------------------------------------------------------------

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: faster, and caps nesting


class _TextLoader(_BaseLoader):
    """Safe loading, but plain scalars stay strings (only ``null`` and ``<<`` are resolved).

    Inventory values are identifiers, and YAML 1.1 typing corrupts them: serial ``0012345670``
    is octal 2739128, rack ``1:30`` is sexagesimal 90, node ``yes`` is True.
    """


_TextLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag in ("tag:yaml.org,2002:null", "tag:yaml.org,2002:merge")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# Explicit scalar tags stay text too: PyYAML's own constructors crash on bad values with plain
# ValueError / KeyError / AttributeError (``!!int foo``, ``!!bool maybe``, ``!!timestamp 2024-02-30``)
# instead of a YAMLError, which would abort the whole file; as text, the row rules judge them.
for _tag in ("int", "float", "bool", "timestamp"):
    _TextLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _TextLoader.construct_yaml_str)


def _flow(value: Any) -> str:
    """A nested value as one line of flow YAML (aliases stay aliases, so a YAML bomb stays small)."""
    try:
        return str(yaml.safe_dump(value, default_flow_style=True, width=10**9)).strip()
    except RecursionError:
        raise _RowError("value is nested too deeply") from None
    except yaml.YAMLError as err:
        raise _RowError(f"value cannot be shown as text: {' '.join(str(err).split())[:120]}") from None


def _item_payload(item: Any) -> str:
    try:
        text = str(yaml.safe_dump(item, sort_keys=False, allow_unicode=True)).removesuffix("...\n")
        return text[:MAX_QUARANTINE_PAYLOAD]
    except (RecursionError, yaml.YAMLError):
        return f"<{type(item).__name__} that cannot be shown>"


def _yaml_row(item: dict[Any, Any]) -> dict[str, Any]:
    """Keys as text; nested values (other than the hcas list) as flow YAML text."""
    row: dict[str, Any] = {}
    for key, value in item.items():
        name = key if isinstance(key, str) else str(key)  # unhashable keys never get here
        if isinstance(value, (bytes, bytearray)):
            raise _RowError(f"{name} is binary (!!binary) data, not text")
        if isinstance(value, (dict, list, set, tuple)):
            if _ours(name) != "hcas":  # _hcas judges its own shape
                value = _flow(value)
        elif value is not None and not isinstance(value, str):
            value = str(value)  # an explicit tag (!!int 8, !!timestamp ...)
        row[name] = value
    return row


def parse_yaml(data: bytes, device: str | None = None) -> Parsed[DcimRecord]:
    """Parse a YAML export: a list of mappings, or a mapping with a ``nodes`` list.

    A bad item is quarantined with location ``item N`` (N counts from 0, as in the list).
    """
    if len(data) > MAX_YAML_BYTES:
        raise DcimFormatError(f"YAML export is larger than the {MAX_YAML_BYTES} byte limit")
    try:
        doc = yaml.load(data, Loader=_TextLoader)  # a SafeLoader subclass: safe
    except yaml.YAMLError as err:
        raise DcimFormatError(f"not valid YAML: {' '.join(str(err).split())[:300]}") from None
    except RecursionError:
        raise DcimFormatError("not valid YAML: nested too deeply") from None
    if doc is None:
        raise DcimFormatError("the export is empty (no nodes)")
    if isinstance(doc, dict) and isinstance(doc.get("nodes"), list):
        doc = doc["nodes"]
    if not isinstance(doc, list):
        raise DcimFormatError(
            f"YAML export must be a list of nodes (or a mapping with a 'nodes' list), got a {type(doc).__name__}"
        )
    collector = _Collector(device)
    for index, item in enumerate(doc):
        location = f"item {index}"
        if not isinstance(item, dict):
            kind = type(item).__name__
            got = "null" if item is None else f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"
            collector.reject(f"item {index} is not a mapping (got {got})", _item_payload(item), location)
            continue
        try:
            verdict = collector.judge(_yaml_row(item), None)
        except _RowError as err:
            verdict = str(err)
        if isinstance(verdict, str):
            collector.reject(verdict, _item_payload(item), location)
        else:
            collector.accept(verdict, location)
    return collector.result


# --- files ------------------------------------------------------------------------------------


def parse_file(path: Path, fmt: str | None = None, device: str | None = None) -> Parsed[DcimRecord]:
    """Parse an export file; the format comes from ``fmt`` or the file suffix."""
    path = Path(path)
    fmt = (fmt or path.suffix.lstrip(".")).lower()
    if fmt in ("yaml", "yml"):
        with path.open("rb") as handle:
            data = handle.read(MAX_YAML_BYTES + 1)  # never read a runaway file whole
        return parse_yaml(data, device)
    if fmt == "csv":
        with path.open("rb") as handle:
            # Bounded reads: a line longer than MAX_LINE arrives in pieces, never whole.
            read: Callable[[], bytes] = functools.partial(handle.readline, MAX_LINE + 1)
            return parse_csv(iter(read, b""), device)
    raise DcimFormatError(f"unknown DCIM export format {fmt!r} (csv or yaml)")
