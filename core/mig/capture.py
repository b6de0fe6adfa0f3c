"""Parsers for what ``nvidia-smi mig`` prints, and for the fixtures' profile table (text in, rows out).

* ``nvidia-smi mig -lgip`` (``--list-gpu-instance-profiles``): a box-drawn table, two rows per
  profile (name, ID, free/total instances, GiB, P2P, SM, DEC, ENC; then CE, JPEG, OFA).
* ``nvidia-smi mig -lgipp`` (``--list-gpu-instance-possible-placements``): one line per profile,
  ``GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1`` -- the allowed starts and the size on the
  memory-slice axis (``Placement :`` when there is only one).
* ``nvidia-smi mig -lgi`` (``--list-gpu-instances``): one row per existing instance, its
  placement as ``start:size``.

A capture may hold other text (shell prompts, comments, other commands' output): each parser reads
the lines that belong to its command and ignores the rest, but a line that is clearly its own and
does not parse -- a cut row, a missing second row, a placement set never closed -- is an error
naming the line, never a silently shorter result.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

from core.mig.profiles import PROFILE_NAME_RE, GpuModel, Profile

MAX_TEXT = 1 << 20  # a -lgip of 8 GPUs is ~20 KiB; anything near a MiB is not nvidia-smi output
MAX_LINE = 4096


class MigParseError(ValueError):
    """Text that should be nvidia-smi MIG output (or the profile table) and is not; says where."""


@dataclass(frozen=True)
class GiProfileRow:
    """One profile of ``-lgip``."""

    gpu: int
    name: str
    profile_id: int
    free: int
    total: int
    memory_gib: float
    p2p: bool
    sm: int
    dec: int
    enc: int
    ce: int
    jpeg: int
    ofa: int
    line: int


@dataclass(frozen=True)
class PlacementRow:
    """One line of ``-lgipp``: where a profile may start, and its size, on the memory-slice axis."""

    gpu: int
    profile_id: int
    starts: tuple[int, ...]
    size: int
    line: int


@dataclass(frozen=True)
class GpuInstanceRow:
    """One existing GPU instance of ``-lgi``."""

    gpu: int
    name: str
    profile_id: int
    instance_id: int
    start: int
    size: int
    line: int


_LGIP_ROW = re.compile(
    r"\|\s*(?P<gpu>\d{1,4})\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d{1,4})\s+(?P<free>\d{1,4})/(?P<total>\d{1,4})\s+"
    r"(?P<mem>\d{1,6}(?:\.\d{1,4})?)\s+(?P<p2p>Yes|No)\s+(?P<sm>\d{1,5})\s+(?P<dec>\d{1,3})\s+(?P<enc>\d{1,3})\s*\|"
)
_LGIP_ROW2 = re.compile(r"\|\s+(?P<ce>\d{1,3})\s+(?P<jpeg>\d{1,3})\s+(?P<ofa>\d{1,3})\s*\|")
_LGIPP = re.compile(
    r"GPU\s+(?P<gpu>\d{1,4})\s+Profile\s+ID\s+(?P<id>\d{1,4})\s+Placements?\s*:\s*\{(?P<starts>[\d,\s]*)\}:(?P<size>\d{1,3})"
)
_LGI_ROW = re.compile(
    r"\|\s*(?P<gpu>\d{1,4})\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d{1,4})\s+(?P<gi>\d{1,4})\s+(?P<start>\d{1,3}):(?P<size>\d{1,3})\s*\|"
)


def _lines(text: str, what: str) -> list[str]:
    if not isinstance(text, str):
        raise MigParseError(f"{what}: expected text, got {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise MigParseError(f"{what}: {len(text):,} characters, over the {MAX_TEXT:,} a capture can be")
    if "\x00" in text:
        raise MigParseError(f"{what}: contains a NUL byte: not nvidia-smi output")
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if len(line) > MAX_LINE:
            raise MigParseError(f"{what}: line {number} is {len(line):,} characters long (at most {MAX_LINE})")
    return lines


def _check_name(name: str, number: int) -> None:
    if PROFILE_NAME_RE.fullmatch(name) is None:
        raise MigParseError(f"line {number}: {name!r} is not a MIG profile name (like 1g.10gb or 1g.10gb+me)")


def parse_lgip(text: str) -> list[GiProfileRow]:
    """The profiles of an ``nvidia-smi mig -lgip`` table (every GPU in it)."""
    lines = _lines(text, "nvidia-smi mig -lgip")
    head = next((i for i, line in enumerate(lines) if "GPU instance profiles:" in line), None)
    if head is None:
        raise MigParseError("no 'GPU instance profiles:' table: not nvidia-smi mig -lgip output")
    rows: list[GiProfileRow] = []
    seen: set[tuple[int, int]] = set()
    i = head + 1
    closed = False
    while i < len(lines):
        number, line = i + 1, lines[i].strip()
        if not line.startswith(("|", "+")):
            break
        if line.startswith("+"):
            if not re.fullmatch(r"\+-+\+", line):
                raise MigParseError(f"line {number}: broken table border {line[:80]!r}")
            closed = True
            i += 1
            continue
        closed = False
        if re.fullmatch(r"\|=+\|", line) or "Free/Total" in line or re.search(r"\bName\b", line):
            i += 1
            continue
        if "MIG" not in line:
            raise MigParseError(f"line {number}: unexpected line in the -lgip table: {line[:80]!r}")
        match = _LGIP_ROW.fullmatch(line)
        if match is None:
            raise MigParseError(f"line {number}: malformed -lgip profile row: {line[:80]!r}")
        _check_name(match["name"], number)
        second = lines[i + 1].strip() if i + 1 < len(lines) else ""
        match2 = _LGIP_ROW2.fullmatch(second)
        if match2 is None:
            raise MigParseError(
                f"line {number + 1}: profile {match['name']} has no CE/JPEG/OFA row after it (truncated?)"
            )
        free, total = int(match["free"]), int(match["total"])
        if free > total:
            raise MigParseError(f"line {number}: {match['name']}: {free} free of {total} instances")
        key = (int(match["gpu"]), int(match["id"]))
        if key in seen:
            raise MigParseError(f"line {number}: GPU {key[0]} lists profile ID {key[1]} twice")
        seen.add(key)
        rows.append(
            GiProfileRow(
                gpu=key[0],
                name=match["name"],
                profile_id=key[1],
                free=free,
                total=total,
                memory_gib=float(match["mem"]),
                p2p=match["p2p"] == "Yes",
                sm=int(match["sm"]),
                dec=int(match["dec"]),
                enc=int(match["enc"]),
                ce=int(match2["ce"]),
                jpeg=int(match2["jpeg"]),
                ofa=int(match2["ofa"]),
                line=number,
            )
        )
        i += 2
    if not rows:
        raise MigParseError("the -lgip table lists no profile (MIG disabled, or the output was cut)")
    if not closed:
        raise MigParseError(f"line {i}: the -lgip table is not closed by a border line (truncated?)")
    return rows


def parse_lgipp(text: str) -> list[PlacementRow]:
    """The placement lines of ``nvidia-smi mig -lgipp`` output (other lines are ignored)."""
    rows: list[PlacementRow] = []
    seen: set[tuple[int, int]] = set()
    for number, raw in enumerate(_lines(text, "nvidia-smi mig -lgipp"), 1):
        line = raw.strip()
        if not (line.startswith("GPU") and "Profile" in line):
            continue
        match = _LGIPP.fullmatch(line)
        if match is None:
            raise MigParseError(f"line {number}: malformed -lgipp placement line: {line[:80]!r}")
        parts = [p.strip() for p in match["starts"].split(",")]
        if not parts or any(not p.isdigit() for p in parts):
            raise MigParseError(f"line {number}: placement set {{{match['starts']}}} is not a list of starts")
        starts = tuple(int(p) for p in parts)
        size = int(match["size"])
        if size < 1 or len(set(starts)) != len(starts) or max(starts) + size > 64:
            raise MigParseError(f"line {number}: placements {{{match['starts']}}}:{size} make no sense")
        key = (int(match["gpu"]), int(match["id"]))
        if key in seen:
            raise MigParseError(f"line {number}: GPU {key[0]} lists placements of profile ID {key[1]} twice")
        seen.add(key)
        rows.append(PlacementRow(key[0], key[1], starts, size, number))
    if not rows:
        raise MigParseError("no 'GPU n Profile ID m Placements: {...}:size' line: not nvidia-smi mig -lgipp output")
    return rows


def parse_lgi(text: str) -> list[GpuInstanceRow]:
    """The instances of ``nvidia-smi mig -lgi`` output (rows ``| gpu MIG name profile gi start:size |``)."""
    rows: list[GpuInstanceRow] = []
    for number, raw in enumerate(_lines(text, "nvidia-smi mig -lgi"), 1):
        line = raw.strip()
        # -lgip rows also start "| n MIG" but carry Free/Total ("7/7"); they are not ours.
        if not re.match(r"\|\s*\d+\s+MIG\s", line) or "/" in line:
            continue
        match = _LGI_ROW.fullmatch(line)
        if match is None:
            raise MigParseError(f"line {number}: malformed -lgi instance row: {line[:80]!r}")
        _check_name(match["name"], number)
        rows.append(
            GpuInstanceRow(
                gpu=int(match["gpu"]),
                name=match["name"],
                profile_id=int(match["id"]),
                instance_id=int(match["gi"]),
                start=int(match["start"]),
                size=int(match["size"]),
                line=number,
            )
        )
    if not rows:
        raise MigParseError("no '| gpu MIG profile id instance start:size |' row: not nvidia-smi mig -lgi output")
    return rows


def model_from_capture(
    name: str, profiles: list[GiProfileRow], placements: list[PlacementRow], gpu: int = 0
) -> GpuModel:
    """A :class:`GpuModel` built from what one GPU reported: ``-lgip`` for names, IDs, counts and
    GiB, ``-lgipp`` for starts and memory slices; compute slices are the ``Ng`` of the name."""
    mine = [p for p in profiles if p.gpu == gpu]
    where = {p.profile_id: p for p in placements if p.gpu == gpu}
    if not mine:
        raise MigParseError(f"the -lgip capture has no profile for GPU {gpu}")
    out: list[Profile] = []
    for row in mine:
        placement = where.pop(row.profile_id, None)
        if placement is None:
            raise MigParseError(f"GPU {gpu}: profile {row.name} (ID {row.profile_id}) has no -lgipp placements")
        match = PROFILE_NAME_RE.fullmatch(row.name)
        assert match is not None  # checked when parsed
        out.append(
            Profile(
                name=row.name,
                gi_profile_id=row.profile_id,
                compute_slices=int(match["compute"]),
                memory_slices=placement.size,
                starts=placement.starts,
                max_instances=row.total,
                memory_gib=row.memory_gib,
                memory_source="capture",
                media_extensions=match["me"] is not None,
            )
        )
    if where:
        raise MigParseError(f"GPU {gpu}: -lgipp places profile IDs {sorted(where)} that -lgip does not list")
    out.sort(key=lambda p: (p.compute_slices, p.memory_slices, p.media_extensions))
    return GpuModel(name, tuple(out), (), (), source="nvidia-smi mig -lgip/-lgipp capture")


@dataclass(frozen=True)
class ProfileTableRow:
    """One row of the fixtures' ``mig_profiles_h100_h200.csv``."""

    gpu: str
    profile: str
    gi_profile_id: int
    compute_slices: int
    memory_slices: int
    starts: tuple[int, ...]
    max_instances: int
    sm_count: int
    memory_gib: float | None  # None where the table has no plain number ("~69.8 (torch-reported)")
    memory_note: str
    media: str
    line: int


_TABLE_COLUMNS = (
    "gpu",
    "profile",
    "gi_profile_id",
    "compute_slices",
    "memory_slices",
    "allowed_starts",
    "max_instances",
    "sm_count",
    "memory_gib",
    "media",
)


def parse_profile_table(text: str) -> list[ProfileTableRow]:
    """Rows of the profile CSV (``#`` lines are comments); a bad row is an error naming its line."""
    lines = _lines(text, "profile table")
    data = [(n, line) for n, line in enumerate(lines, 1) if line.strip() and not line.lstrip().startswith("#")]
    if not data:
        raise MigParseError("profile table: no header and no rows")
    # One record per line: a quote left open must not swallow the rows after it.
    records = [(number, next(csv.reader(io.StringIO(line)), [])) for number, line in data]
    header = records[0][1]
    if tuple(h.strip() for h in header) != _TABLE_COLUMNS:
        raise MigParseError(f"line {data[0][0]}: header {header} is not {list(_TABLE_COLUMNS)}")
    rows: list[ProfileTableRow] = []
    for number, record in records[1:]:
        if len(record) != len(_TABLE_COLUMNS):
            raise MigParseError(f"line {number}: {len(record)} fields, expected {len(_TABLE_COLUMNS)}")
        field = dict(zip(_TABLE_COLUMNS, (f.strip() for f in record), strict=True))
        try:
            starts = tuple(int(s) for s in field["allowed_starts"].split("|"))
            ints = {k: int(field[k]) for k in ("gi_profile_id", "compute_slices", "memory_slices", "max_instances")}
            sm = int(field["sm_count"])
        except ValueError as exc:
            raise MigParseError(f"line {number}: not a number where one is expected ({exc})") from None
        _check_name(field["profile"], number)
        gib = field["memory_gib"]
        memory = float(gib) if re.fullmatch(r"\d+(\.\d+)?", gib) else None
        rows.append(
            ProfileTableRow(
                gpu=field["gpu"],
                profile=field["profile"],
                starts=starts,
                sm_count=sm,
                memory_gib=memory,
                memory_note=gib,
                media=field["media"],
                line=number,
                **ints,
            )
        )
    return rows
