"""Parse one ``nvidia-smi topo -m`` capture into a :class:`core.affinity.TopoMatrix`.

The format (current drivers; cells separated by tabs, or by spaces where a terminal or a paste
expanded them)::

            GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity   GPU NUMA ID
    GPU0     X      NV18    PIX     SYS     0-47,96-143     0               N/A
    GPU1    NV18     X      SYS     PIX     48-95,144-191   1               N/A
    NIC0    PIX     SYS      X      SYS
    NIC1    SYS     PIX     SYS      X

    Legend:

      X    = Self
      ...
    NIC Legend:

      NIC0: mlx5_0
      NIC1: mlx5_1

Variants read (each seen in a real capture or documented upstream; docs/affinity.md lists the
sources): NIC columns named by device (``mlx5_0``) instead of ``NIC<n>`` with no NIC Legend
(older drivers); no ``GPU NUMA ID`` column, or only ``CPU Affinity`` (older drivers); ``SOC`` for
``SYS`` (drivers before ``NODE`` existed); ``NUMA Affinity`` listing several nodes (Grace:
``0,3-9,11-17``); ``N/A`` for any affinity; header remnants of ANSI underline codes
(``[4mGPU0`` ... ``[0m``, with or without the ESC byte); empty tab-separated fields; CRLF; a
header without its leading blank cell; no Legend or NIC Legend (the matrix pasted alone); lines
before the header (a prompt, a label) and after the legends.

Everything else is a :class:`GpuTopoError` (a ``ValueError``) naming the line and the reason:
no header, a row count or a row length that differs from the header, a row out of order, an
unknown class token, an asymmetric matrix, ``X`` off the diagonal, NVLink to a NIC, a duplicate
device, a NIC Legend that misses or invents a NIC, an affinity that is no CPU/NUMA list, NUL or
non-UTF-8 bytes (``nvidia-smi`` prints ASCII), and input over :data:`MAX_BYTES` or lines over
:data:`MAX_LINE` (checked before any regex runs, so no input makes the parser slow). A capture
cut anywhere inside the matrix is always an error (a row, a cell or the GPU affinity values go
missing); a cut inside the NIC Legend is one when it drops a NIC.
"""

from __future__ import annotations

import re
from pathlib import Path

from core.affinity.matrix import (
    CPU_AFFINITY,
    GPU_NUMA_ID,
    LEGACY_CLASSES,
    NUMA_AFFINITY,
    SELF,
    Connection,
    GpuInfo,
    NicInfo,
    TopoMatrix,
)

SOURCE = "gpu_topo"
MAX_BYTES = 1024 * 1024  # an 8-GPU, 13-NIC capture is 5 KB; 16 GPUs and 20 NICs stay under 20 KB
MAX_LINE = 16 * 1024  # a matrix row is 8 characters a device plus the affinities
MAX_DEVICES = 512  # GPUs plus NICs of one node; far beyond any server
MAX_NUMA_NODES = 1024  # Linux's MAX_NUMNODES ceiling

# ANSI SGR codes some drivers wrap the header in, and their remnants once a paste lost the ESC
# byte (the B300 capture of sglang#26039: "[4mGPU0 ... GPU NUMA ID[0m").
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\[[0-9;]{0,8}m")
_SPLIT = re.compile(r"[ \t]+")
_GPU = re.compile(r"GPU(\d{1,4})")
_NIC = re.compile(r"NIC(\d{1,4})")
_DEVICE = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,63}")
# Trailing column names: where the device columns of the header end.
_KNOWN_COLUMNS = (
    (re.compile(r"CPU\s*Affinity", re.IGNORECASE), CPU_AFFINITY),
    (re.compile(r"NUMA\s*Affinity", re.IGNORECASE), NUMA_AFFINITY),
    (re.compile(r"GPU\s*NUMA\s*ID", re.IGNORECASE), GPU_NUMA_ID),
)
_FIRST_COLUMN = re.compile(r"(?:^|[ \t])(CPU\s*Affinity|NUMA\s*Affinity|GPU\s*NUMA\s*ID)", re.IGNORECASE)
_SEGMENTS = re.compile(r"\t+| {2,}")
_NUMBER_LIST = re.compile(r"\d{1,7}(?:-\d{1,7})?(?:,\d{1,7}(?:-\d{1,7})?)*")
_NA = "N/A"
_LEGEND = re.compile(r"Legend\s*:", re.IGNORECASE)
_NIC_LEGEND = re.compile(r"NIC\s+Legend\s*:", re.IGNORECASE)
_NIC_LEGEND_ENTRY = re.compile(r"NIC(\d{1,4})\s*:\s*(\S+)")
_DEVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")


class GpuTopoError(ValueError):
    """The capture is not a readable ``nvidia-smi topo -m`` matrix; ``reason`` says why and
    ``line`` (1-based) where, when one line is to blame."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {reason}" if line else reason)
        self.reason = reason
        self.line = line

    @property
    def location(self) -> str | None:
        return f"line {self.line}" if self.line else None


def parse_file(path: Path) -> TopoMatrix:
    """Read and parse a saved capture, never reading more than :data:`MAX_BYTES` + 1 bytes.
    An unreadable file is a :class:`GpuTopoError` too."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise GpuTopoError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_gpu_topo(data)


def decode(data: str | bytes) -> str:
    """The capture as text: size-capped, UTF-8, without NUL."""
    if len(data) > MAX_BYTES:
        raise GpuTopoError(f"capture is over {MAX_BYTES} bytes ({len(data)} read): not one node's matrix")
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise GpuTopoError(f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8", line) from None
    else:
        text = data
    nul = text.find("\x00")
    if nul >= 0:
        raise GpuTopoError(f"NUL character at offset {nul}", text.count("\n", 0, nul) + 1)
    bad = re.search(r"[\ud800-\udfff]", text)
    if bad:
        raise GpuTopoError("unpaired surrogate in the text", text.count("\n", 0, bad.start()) + 1)
    return text


def parse_gpu_topo(data: str | bytes) -> TopoMatrix:
    """One capture -> :class:`TopoMatrix`, or :class:`GpuTopoError` with the reason."""
    text = decode(data)
    raw_lines = text.split("\n")
    notes: list[str] = []
    lines: list[str] = []
    crlf = False
    ansi = False
    for n, raw in enumerate(raw_lines, 1):
        if len(raw) > MAX_LINE:
            raise GpuTopoError(f"line is {len(raw)} characters long (limit {MAX_LINE})", n)
        if raw.endswith("\r"):
            raw = raw[:-1]
            crlf = True
        clean = _ANSI.sub("", raw)
        ansi = ansi or clean != raw
        lines.append(clean)
    if crlf:
        notes.append("CRLF line ends")
    if ansi:
        notes.append("ANSI escape codes (or their remnants) stripped")

    header_at = _find_header(lines)
    devices, columns = _header(lines[header_at], header_at + 1)
    if header_at:
        notes.append(f"{header_at} line(s) before the header ignored")
    cells, tails, end = _rows(lines, header_at + 1, devices, columns)
    _check_matrix(devices, cells, header_at + 2)
    if any(c.raw in LEGACY_CLASSES for row in cells for c in row):
        notes.append(
            "legacy class tokens read as today's (" + ", ".join(f"{k} = {v}" for k, v in LEGACY_CLASSES.items()) + ")"
        )
    legend, nic_names, nic_legend_line = _legends(lines, end)
    gpus = tuple(
        _gpu(label, columns, tails[label], header_at + 2 + devices.index(label))
        for label in devices
        if _GPU.fullmatch(label)
    )
    nics = _nics(devices, nic_names, nic_legend_line)
    if not legend:
        notes.append("no Legend block")
    if nic_names is None and any(n.device is None for n in nics):
        notes.append("no NIC Legend: NIC device names unknown")
    return TopoMatrix(
        devices=tuple(devices),
        cells=tuple(tuple(row) for row in cells),
        gpus=gpus,
        nics=nics,
        columns=tuple(columns),
        legend=legend,
        nic_legend=nic_names is not None,
        notes=tuple(notes),
    )


def _tokens(line: str) -> list[str]:
    stripped = line.strip(" \t")
    return _SPLIT.split(stripped) if stripped else []


def _is_class(token: str) -> bool:
    try:
        Connection.parse(token)
    except ValueError:
        return False
    return True


def _find_header(lines: list[str]) -> int:
    """The header is the first line whose first cell is ``GPU<n>`` and whose second is not a class
    (a data row of GPU0 reads ``GPU0 X ...``). The leading blank cell may have been lost in a paste."""
    for i, line in enumerate(lines):
        tokens = _tokens(line)
        if tokens and _GPU.fullmatch(tokens[0]) and (len(tokens) == 1 or not _is_class(tokens[1])):
            return i
    raise GpuTopoError("no matrix header (a line of device columns starting with GPU0) found")


def _header(line: str, n: int) -> tuple[list[str], list[str]]:
    first = _FIRST_COLUMN.search(line)
    device_text, tail = (line[: first.start(1)], line[first.start(1) :]) if first else (line, "")
    devices = _tokens(device_text)
    if len(devices) > MAX_DEVICES:
        raise GpuTopoError(f"header names {len(devices)} devices (limit {MAX_DEVICES})", n)
    seen: set[str] = set()
    for d in devices:
        if not _DEVICE.fullmatch(d):
            raise GpuTopoError(f"header column {d[:40]!r} is not a device name", n)
        if d in seen:
            raise GpuTopoError(f"duplicate device {d} in the header", n)
        seen.add(d)
    columns: list[str] = []
    for segment in _SEGMENTS.split(tail.strip(" \t")):
        at = 0
        for m in _FIRST_COLUMN.finditer(segment):
            before = segment[at : m.start(1)].strip()
            if before:
                columns.append(before)
            columns.append(next(name for rx, name in _KNOWN_COLUMNS if rx.fullmatch(m.group(1))))
            at = m.end(1)
        rest = segment[at:].strip()
        if rest:
            columns.append(rest)
    if len(set(columns)) != len(columns):
        raise GpuTopoError(f"a trailing column is named twice: {', '.join(columns)}", n)
    return devices, columns


def _rows(
    lines: list[str], start: int, devices: list[str], columns: list[str]
) -> tuple[list[list[Connection]], dict[str, list[str]], int]:
    """The matrix rows, from ``start`` up to the first blank line or legend (returned as ``end``)."""
    width = len(devices)
    cells: list[list[Connection]] = []
    tails: dict[str, list[str]] = {}
    i = start
    while i < len(lines):
        tokens = _tokens(lines[i])
        if not tokens or _LEGEND.match(lines[i].strip()) or _NIC_LEGEND.match(lines[i].strip()):
            break
        n = i + 1
        if len(cells) == width:
            raise GpuTopoError(f"more matrix rows than the {width} devices of the header ({tokens[0][:40]!r})", n)
        expected = devices[len(cells)]
        if tokens[0] != expected:
            raise GpuTopoError(f"row {tokens[0][:40]!r} where the header's order expects {expected}", n)
        if len(tokens) - 1 < width:
            raise GpuTopoError(f"row {expected} has {len(tokens) - 1} of {width} cells (truncated?)", n)
        row = []
        for col, token in zip(devices, tokens[1 : 1 + width], strict=True):
            try:
                row.append(Connection.parse(token))
            except ValueError as exc:
                raise GpuTopoError(f"{expected}/{col}: {exc}", n) from None
        tail = tokens[1 + width :]
        if _GPU.fullmatch(expected):
            if len(tail) != len(columns):
                raise GpuTopoError(
                    f"row {expected} has {len(tail)} value(s) after the matrix for {len(columns)} column(s)"
                    f" ({', '.join(columns) or 'none'})",
                    n,
                )
        elif tail:
            raise GpuTopoError(f"NIC row {expected} has values after the matrix: {' '.join(tail)[:80]!r}", n)
        cells.append(row)
        tails[expected] = tail
        i += 1
    if len(cells) < width:
        raise GpuTopoError(f"matrix has {len(cells)} rows for the header's {width} devices (truncated?)", i + 1)
    return cells, tails, i


def _check_matrix(devices: list[str], cells: list[list[Connection]], first_row_line: int) -> None:
    for i, a in enumerate(devices):
        n = first_row_line + i
        for j, b in enumerate(devices):
            c = cells[i][j]
            if (c.kind == SELF) != (i == j):
                what = "is not X" if i == j else "is X off the diagonal"
                raise GpuTopoError(f"{a}/{b} {what} ({c.raw})", n)
            if j > i and c.label != cells[j][i].label:
                raise GpuTopoError(f"asymmetric matrix: {a}/{b} is {c.raw} but {b}/{a} is {cells[j][i].raw}", n)
            if c.kind == "NV" and not (_GPU.fullmatch(a) and _GPU.fullmatch(b)):
                raise GpuTopoError(f"{a}/{b} is {c.raw}: NVLink joins GPUs only", n)


def _legends(lines: list[str], start: int) -> tuple[bool, dict[int, tuple[str, int]] | None, int]:
    """Whether a Legend follows, and the NIC Legend (NIC index -> (device, line)) when one does."""
    legend = False
    names: dict[int, tuple[str, int]] | None = None
    nic_legend_line = 0
    for i in range(start, len(lines)):
        stripped = lines[i].strip()
        if _NIC_LEGEND.match(stripped):
            if names is not None:
                raise GpuTopoError("a second NIC Legend", i + 1)
            names, nic_legend_line = {}, i + 1
            continue
        if _LEGEND.match(stripped):
            legend = True
            continue
        entry = _NIC_LEGEND_ENTRY.fullmatch(stripped) if names is not None else None
        if entry and names is not None:
            index, device = int(entry.group(1)), entry.group(2)
            if not _DEVICE_NAME.fullmatch(device):
                raise GpuTopoError(f"NIC{index} is given the name {device[:40]!r}, which is no RDMA device name", i + 1)
            if index in names:
                raise GpuTopoError(f"NIC{index} appears twice in the NIC Legend", i + 1)
            names[index] = (device, i + 1)
    return legend, names, nic_legend_line


def _nics(devices: list[str], names: dict[int, tuple[str, int]] | None, legend_line: int) -> tuple[NicInfo, ...]:
    nics: list[NicInfo] = []
    position = 0
    for label in devices:
        if _GPU.fullmatch(label):
            continue
        m = _NIC.fullmatch(label)
        if m:
            index = int(m.group(1))
            device = names[index][0] if names is not None and index in names else None
            if names is not None and device is None:
                raise GpuTopoError(f"the NIC Legend does not name {label} (truncated?)", legend_line)
            nics.append(NicInfo(index, label, device))
        else:  # older drivers: the column is the RDMA device itself
            nics.append(NicInfo(position, label, label))
        position += 1
    if names is not None:
        labels = {n.label for n in nics}
        for index, (_, line) in names.items():
            if f"NIC{index}" not in labels:
                raise GpuTopoError(f"the NIC Legend names NIC{index}, which the matrix does not have", line)
        seen: dict[str, str] = {}
        for nic in nics:
            if nic.device is not None and nic.device in seen:
                raise GpuTopoError(f"duplicate device {nic.device} ({seen[nic.device]} and {nic.label})", legend_line)
            if nic.device is not None:
                seen[nic.device] = nic.label
    return tuple(nics)


def _numbers(value: str, what: str, label: str, n: int) -> tuple[int, ...] | None:
    """A CPU or NUMA list ("0-55,112-167", "0,3-9,11-17"), checked; None for N/A."""
    if value == _NA:
        return None
    if not _NUMBER_LIST.fullmatch(value):
        raise GpuTopoError(f"{label} {what} {value[:40]!r} is not a list of numbers and ranges", n)
    out: list[int] = []
    for part in value.split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise GpuTopoError(f"{label} {what} {value[:40]!r} has a range that runs backwards", n)
        out.append(first)
        if what == NUMA_AFFINITY:  # CPU lists stay text; NUMA lists are short and expanded
            if last - first + len(out) > MAX_NUMA_NODES:
                raise GpuTopoError(f"{label} {what} {value[:40]!r} lists over {MAX_NUMA_NODES} nodes", n)
            out.extend(range(first + 1, last + 1))
    return tuple(out)


def _gpu(label: str, columns: list[str], values: list[str], n: int) -> GpuInfo:
    m = _GPU.fullmatch(label)
    assert m is not None
    by_column = dict(zip(columns, values, strict=True))
    cpu = by_column.get(CPU_AFFINITY)
    numa = by_column.get(NUMA_AFFINITY)
    gpu_numa = by_column.get(GPU_NUMA_ID)
    if cpu is not None:
        _numbers(cpu, CPU_AFFINITY, label, n)
    numa_nodes = _numbers(numa, NUMA_AFFINITY, label, n) if numa is not None else None
    gpu_numa_id: int | None = None
    if gpu_numa is not None and gpu_numa != _NA:
        if not re.fullmatch(r"\d{1,7}", gpu_numa):
            raise GpuTopoError(f"{label} {GPU_NUMA_ID} {gpu_numa[:40]!r} is not a NUMA node", n)
        gpu_numa_id = int(gpu_numa)
    return GpuInfo(
        index=int(m.group(1)),
        label=label,
        cpu_affinity=None if cpu in (None, _NA) else cpu,
        numa_affinity=None if numa in (None, _NA) else numa,
        numa_node=numa_nodes[0] if numa_nodes else None,
        numa_nodes=numa_nodes or (),
        gpu_numa_id=gpu_numa_id,
        extra={c: v for c, v in by_column.items() if c not in (CPU_AFFINITY, NUMA_AFFINITY, GPU_NUMA_ID)},
    )
