"""Compact host ranges (``dgx[001-128]``), the notation Slurm, pdsh and DCIM exports use.

Cluster specs, inventory files and operators all write node sets this way, so the simulator and
the derivations need one strict implementation: malformed input is an error with a reason, never a
silently shorter list (a typo that drops 64 nodes from a spec would look like 64 missing hosts).

Semantics (those of Slurm's hostlist, which operators already know):

* top-level commas separate items; commas inside brackets separate ranges of one group;
* ``[lo-hi]`` keeps the zero padding of ``lo`` (``[001-128]`` gives ``001`` .. ``128``;
  ``[8-10]`` gives ``8, 9, 10``);
* several bracket groups in one item expand as a cartesian product, the leftmost group varying
  slowest (``rack[1-2]-node[01-02]`` -> ``rack1-node01, rack1-node02, rack2-node01, rack2-node02``);
* order and duplicates are kept as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import product

MAX_NAMES = 100_000
"""Refuse to expand beyond this many names: a typo like ``[1-1000000]`` must not eat memory."""

_SPECIAL = frozenset("[],")
_TRAILING_DIGITS = re.compile(r"^(.*?)([0-9]+)([^0-9]*)$")
_DIGITS = re.compile(r"[0-9]+")


def _split_top_level(expr: str) -> list[str]:
    """Split on commas outside brackets, checking bracket balance on the way."""
    items: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested '[' at position {i} in {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' at position {i} in {expr!r}")
        elif ch == "," and depth == 0:
            items.append(expr[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError(f"unbalanced '[' in {expr!r}")
    items.append(expr[start:])
    return items


def _expand_group(body: str, item: str) -> list[str]:
    """Expand the inside of one bracket group: ``001-004,010`` -> the zero-padded numbers."""
    out: list[str] = []
    for part in body.split(","):
        part = part.strip()
        if not part:
            raise ValueError(f"empty range in [{body}] of {item!r}")
        lo, sep, hi = part.partition("-")
        if not _DIGITS.fullmatch(lo) or (sep and not _DIGITS.fullmatch(hi)):
            raise ValueError(f"range {part!r} in {item!r} is not N or N-M with decimal digits")
        if not sep:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a:
            raise ValueError(f"reversed range [{part}] in {item!r}")
        if b - a + 1 > MAX_NAMES:
            raise ValueError(f"range [{part}] in {item!r} has more than {MAX_NAMES} names")
        width = len(lo)
        out.extend(str(n).zfill(width) for n in range(a, b + 1))
    return out


def _expand_item(item: str) -> list[str]:
    """Expand one top-level item (no top-level commas) into its names."""
    pieces: list[list[str]] = []
    pos = 0
    while pos < len(item):
        open_at = item.find("[", pos)
        if open_at < 0:
            pieces.append([item[pos:]])
            break
        if open_at > pos:
            pieces.append([item[pos:open_at]])
        close_at = item.find("]", open_at)
        pieces.append(_expand_group(item[open_at + 1 : close_at], item))
        pos = close_at + 1
    total = 1
    for choices in pieces:
        total *= len(choices)
    if total > MAX_NAMES:
        raise ValueError(f"{item!r} expands to {total} names, more than {MAX_NAMES}")
    return ["".join(parts) for parts in product(*pieces)]


def expand(expr: str) -> list[str]:
    """Expand a host range expression into the list of names, in the order written.

    Raises ``ValueError`` for empty input or items, unbalanced or nested brackets, non-numeric or
    reversed ranges, and expressions that expand to more than ``MAX_NAMES`` names.
    """
    if not isinstance(expr, str):
        raise ValueError(f"host range must be a string, got {type(expr).__name__}")
    if not expr.strip():
        raise ValueError("empty host range")
    names: list[str] = []
    for raw in _split_top_level(expr):
        item = raw.strip()
        if not item:
            raise ValueError(f"empty item in host range {expr!r}")
        if any(ch.isspace() for ch in item):
            raise ValueError(f"whitespace inside host name {item!r}")
        names.extend(_expand_item(item))
        if len(names) > MAX_NAMES:
            raise ValueError(f"{expr!r} expands to more than {MAX_NAMES} names")
    return names


def _split_name(name: str) -> tuple[str, str, str] | None:
    """``dgx001`` -> ``("dgx", "001", "")``; the last run of digits is the varying part."""
    m = _TRAILING_DIGITS.match(name)
    if m is None:
        return None
    return m.group(1), m.group(2), m.group(3)


def _fits(digits: str, width: int) -> bool:
    """Whether ``digits`` is what a range of this padding width would print for its value."""
    return str(int(digits)).zfill(width) == digits


def _format_group(ranges: list[tuple[str, str]]) -> str:
    parts = [lo if lo == hi else f"{lo}-{hi}" for lo, hi in ranges]
    return "[" + ",".join(parts) + "]"


def compress(names: Iterable[str], *, sort: bool = False) -> str:
    """Fold names back into a compact expression; ``expand(compress(x)) == x`` for any list.

    Runs of adjacent names that differ only in their last number become one bracket group, so the
    order written is preserved exactly (the round trip is the contract). Pass ``sort=True`` to
    de-duplicate and sort naturally first, which gives the most compact form for unordered input.
    Only the last number of a name varies; multi-dimensional names compress per item.
    """
    items = list(names)
    for name in items:
        if not isinstance(name, str) or not name or _SPECIAL.intersection(name) or name != name.strip():
            raise ValueError(f"cannot compress name {name!r}: empty, padded or containing '[', ']' or ','")
        if any(ch.isspace() for ch in name):
            raise ValueError(f"cannot compress name {name!r}: contains whitespace")
    if sort:
        items = sorted(set(items), key=_natural_key)

    out: list[str] = []
    # The open run: prefix, suffix, ranges [(lo, hi)] as printed strings.
    run_prefix: str | None = None
    run_suffix = ""
    ranges: list[tuple[str, str]] = []

    def flush() -> None:
        nonlocal run_prefix, ranges
        if run_prefix is None:
            return
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            out.append(f"{run_prefix}{ranges[0][0]}{run_suffix}")
        else:
            out.append(f"{run_prefix}{_format_group(ranges)}{run_suffix}")
        run_prefix, ranges = None, []

    for name in items:
        parts = _split_name(name)
        if parts is None:
            flush()
            out.append(name)
            continue
        prefix, digits, suffix = parts
        if run_prefix == prefix and run_suffix == suffix and ranges:
            lo, hi = ranges[-1]
            if int(digits) == int(hi) + 1 and _fits(digits, len(lo)):
                ranges[-1] = (lo, digits)
            else:
                ranges.append((digits, digits))
            continue
        flush()
        run_prefix, run_suffix, ranges = prefix, suffix, [(digits, digits)]
    flush()
    return ",".join(out)


def _natural_key(name: str) -> tuple[object, ...]:
    """Sort ``n2`` before ``n10``; equal values order by width, so ``n1`` comes before ``n01``."""
    key: list[object] = []
    for text, digits in re.findall(r"([^0-9]*)([0-9]*)", name):
        key.append(text)
        if digits:
            key.append((int(digits), len(digits)))
        else:
            key.append((-1, 0))
    return tuple(key)
