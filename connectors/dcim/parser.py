"""Parse a DCIM inventory export (CSV or YAML) into typed records, quarantining bad rows.

DCIM exports are hand-maintained spreadsheets more often than APIs: header spellings vary,
cells are blank or mistyped, rows are duplicated. Each row is judged on its own; a bad row is
quarantined with its line and reason and never stops the rest of the file. The file is streamed
line by line, so a huge export does not sit in memory.
"""

from __future__ import annotations

import csv
import io
import ipaddress
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from core.quality import Parsed, Quarantined

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
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
_HCA_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9_.\-]+)(?::rail(?P<rail>\d{1,3}))?(?::(?P<guid>0x[0-9A-Fa-f]{16}))?$")
MAX_FIELD = 64 * 1024  # a cell larger than this is not inventory; quarantine the row
MAX_GPU_OR_HCA = 1024


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


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _text(value: Any) -> str | None:
    return None if _blank(value) else str(value).strip()


def _count(name: str, value: Any) -> int | None:
    if _blank(value):
        return None
    if isinstance(value, bool):
        raise _RowError(f"{name} must be a whole number, got {value!r}")
    try:
        number = int(str(value).strip())
    except ValueError:
        raise _RowError(f"{name} must be a whole number, got {str(value)[:40]!r}") from None
    if not 0 <= number <= MAX_GPU_OR_HCA:
        raise _RowError(f"{name} must be between 0 and {MAX_GPU_OR_HCA}, got {number}")
    return number


def _hcas(value: Any) -> tuple[Hca, ...]:
    if _blank(value):
        return ()
    entries = value if isinstance(value, list) else str(value).split(";")
    out = []
    for entry in entries:
        entry = str(entry).strip()
        if not entry:
            continue
        match = _HCA_ENTRY.match(entry)
        if not match:
            raise _RowError(f"hcas entry {entry[:60]!r} is not name[:railN][:0x<16 hex>]")
        rail = match["rail"]
        out.append(Hca(match["name"], int(rail) if rail else None, match["guid"].lower() if match["guid"] else None))
    return tuple(out)


def _record(fields: Mapping[str, Any], extra: dict[str, str], line: int | None) -> DcimRecord:
    node = _text(fields.get("node"))
    if node is None:
        raise _RowError("node name is empty")
    if not _HOSTNAME.match(node):
        raise _RowError(f"node name {node[:80]!r} is not a valid hostname")
    bmc = _text(fields.get("bmc_address"))
    if bmc is not None:
        try:
            bmc = str(ipaddress.ip_address(bmc))
        except ValueError:
            raise _RowError(f"bmc_address {bmc[:60]!r} is not an IP address") from None
    hcas = _hcas(fields.get("hcas"))
    hca_count = _count("hca_count", fields.get("hca_count"))
    if hca_count is not None and hcas and hca_count != len(hcas):
        raise _RowError(f"hca_count says {hca_count} but {len(hcas)} HCAs are listed")
    return DcimRecord(
        node=node.lower(),  # hostnames are case-insensitive; Kubernetes node names are lower-case
        rack=_text(fields.get("rack")),
        role=_text(fields.get("role")),
        su=_text(fields.get("su")),
        gpu_model=_text(fields.get("gpu_model")),
        gpu_count=_count("gpu_count", fields.get("gpu_count")),
        hca_count=hca_count,
        hcas=hcas,
        bmc_address=bmc,
        serial=_text(fields.get("serial")),
        extra=extra,
        line=line,
    )


def _canonical(header: str) -> str:
    return re.sub(r"[\s\-]+", "_", header.strip().lower())


def _split(row: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Known columns by our name; the rest kept verbatim in ``extra`` (never dropped)."""
    known: dict[str, Any] = {}
    extra: dict[str, str] = {}
    for key, value in row.items():
        ours = COLUMN_ALIASES.get(_canonical(str(key)))
        if ours and ours not in known:
            known[ours] = value
        elif not _blank(value):
            extra[str(key)] = str(value)
    return known, extra


class _Collector:
    """Applies the per-row rules shared by CSV and YAML: validation and duplicate detection."""

    def __init__(self, device: str | None) -> None:
        self.device = device
        self.result: Parsed[DcimRecord] = Parsed()
        self.seen: dict[str, int | None] = {}

    def reject(self, reason: str, payload: str | bytes, line: int | None) -> None:
        self.result.quarantined.append(
            Quarantined(
                source=SOURCE,
                device=self.device,
                reason=reason,
                payload=payload,
                location=f"line {line}" if line else None,
            )
        )

    def add(self, row: Mapping[str, Any], payload: str, line: int | None) -> None:
        known, extra = _split(row)
        if any(isinstance(v, str) and len(v) > MAX_FIELD for v in row.values()):
            self.reject(f"a field is longer than {MAX_FIELD} characters", payload, line)
            return
        if any("\udc80" <= ch <= "\udcff" for v in row.values() if isinstance(v, str) for ch in v):
            raw = payload.encode("utf-8", errors="surrogateescape")
            self.reject("row is not valid UTF-8", raw, line)
            return
        try:
            record = _record(known, extra, line)
        except _RowError as err:
            self.reject(str(err), payload, line)
            return
        if record.node in self.seen:
            first = self.seen[record.node]
            self.reject(f"duplicate node {record.node!r} (first at line {first}); first row kept", payload, line)
            return
        self.seen[record.node] = line
        self.result.records.append(record)


def _decoded_lines(stream: Iterable[bytes]) -> Iterator[str]:
    # surrogateescape keeps undecodable bytes recoverable, so the row can be quarantined as-is.
    for raw in stream:
        yield raw.decode("utf-8", errors="surrogateescape")


def parse_csv(lines: Iterable[bytes], device: str | None = None) -> Parsed[DcimRecord]:
    """Parse CSV bytes line by line. Raises DcimFormatError only when the header is unusable."""
    collector = _Collector(device)
    text_lines = _decoded_lines(lines)
    # Keep the raw text of the current record for quarantine payloads (records may span lines).
    current: list[str] = []

    def tap() -> Iterator[str]:
        for text in text_lines:
            current.append(text)
            yield text

    reader = csv.reader(tap())
    try:
        header = next(reader)
    except StopIteration:
        raise DcimFormatError("the export is empty (no header row)") from None
    except csv.Error as err:
        raise DcimFormatError(f"the header row is not CSV: {err}") from None
    header = [h.lstrip("\ufeff") for h in header]  # Excel's BOM
    if not any(COLUMN_ALIASES.get(_canonical(h)) == "node" for h in header):
        raise DcimFormatError(
            f"no node column in header {header[:12]!r}; expected one of "
            + ", ".join(sorted(k for k, v in COLUMN_ALIASES.items() if v == "node"))
        )
    old_limit = csv.field_size_limit()
    csv.field_size_limit(MAX_FIELD * 16)  # past this csv raises; we quarantine instead of crashing
    try:
        while True:
            current.clear()
            line = reader.line_num + 1
            try:
                cells = next(reader)
            except StopIteration:
                break
            except csv.Error as err:
                collector.reject(f"malformed CSV: {err}", "".join(current)[:MAX_FIELD], line)
                continue
            payload = "".join(current).rstrip("\r\n")
            if not cells or all(not c.strip() for c in cells):
                continue  # blank line: nothing to lose
            if len(cells) != len(header):
                collector.reject(f"row has {len(cells)} cells, header has {len(header)}", payload, line)
                continue
            collector.add(dict(zip(header, cells, strict=True)), payload, line)
    finally:
        csv.field_size_limit(old_limit)
    return collector.result


MAX_YAML_BYTES = 64 * 1024 * 1024


def parse_yaml(data: bytes, device: str | None = None) -> Parsed[DcimRecord]:
    """Parse a YAML export: a list of mappings, or a mapping with a ``nodes`` list."""
    if len(data) > MAX_YAML_BYTES:
        raise DcimFormatError(f"YAML export is {len(data)} bytes; over the {MAX_YAML_BYTES} byte limit")
    try:
        doc = yaml.safe_load(io.BytesIO(data))
    except yaml.YAMLError as err:
        raise DcimFormatError(f"not valid YAML: {str(err).splitlines()[0]}") from None
    if isinstance(doc, dict) and isinstance(doc.get("nodes"), list):
        doc = doc["nodes"]
    if not isinstance(doc, list):
        raise DcimFormatError("YAML export must be a list of nodes (or a mapping with a 'nodes' list)")
    collector = _Collector(device)
    for index, item in enumerate(doc):
        payload = yaml.safe_dump(item, sort_keys=False)[:MAX_FIELD] if item is not None else "null"
        if not isinstance(item, dict):
            collector.reject(f"item {index} is not a mapping", payload, None)
            continue
        row = {str(k): v for k, v in item.items()}
        for key, value in row.items():
            if isinstance(value, (dict, list)) and COLUMN_ALIASES.get(_canonical(key)) != "hcas":
                row[key] = yaml.safe_dump(value, default_flow_style=True).strip()
        collector.add(row, payload, None)
        if collector.result.quarantined and collector.result.quarantined[-1].location is None:
            collector.result.quarantined[-1] = _with_location(collector.result.quarantined[-1], f"item {index}")
    return collector.result


def _with_location(q: Quarantined, location: str) -> Quarantined:
    return Quarantined(
        source=q.source, reason=q.reason, payload=q.payload, device=q.device, location=location, context=q.context
    )


def parse_file(path: Path, fmt: str | None = None, device: str | None = None) -> Parsed[DcimRecord]:
    """Parse an export file; the format comes from ``fmt`` or the file suffix."""
    fmt = (fmt or path.suffix.lstrip(".")).lower()
    if fmt in ("yaml", "yml"):
        return parse_yaml(path.read_bytes(), device)
    if fmt == "csv":
        with path.open("rb") as handle:
            return parse_csv(handle, device)
    raise DcimFormatError(f"unknown DCIM export format {fmt!r} (csv or yaml)")
