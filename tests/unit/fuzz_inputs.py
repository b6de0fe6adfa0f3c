"""Hostile variants of real captures, as hypothesis strategies, for the ``test_fuzz_*`` files.

Two kinds: byte-level damage to a capture (truncation, flipped bytes, invalid UTF-8, NULs,
duplicated or deleted lines, an endless line) and structural damage to a JSON document (a value
of another type, a key deleted or given twice, a huge value, a deeply nested one). Each mutation
is described in words (``Mutated.steps``) so a failing example says what was done to the capture.

The checks shared by the LLDP parsers (what a landed row or a quarantined one must look like to be
storable in Postgres) live here too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from core.lldp import LldpNeighbor
from core.quality import Quarantined

# --- byte-level damage -------------------------------------------------------------------------

# Byte strings no well-formed capture holds: invalid UTF-8 (a lone continuation byte, a cut
# two-byte sequence, an encoded surrogate, an overlong NUL), NUL and other control characters,
# a byte-order mark in the middle, a CR without LF.
HOSTILE_BYTES = (
    b"\xff",
    b"\x80",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xc0\x80",
    b"\x00",
    b"\x1b[31m",
    b"\x07",
    b"\xef\xbb\xbf",
    b"\r",
    b"\x85",
)
# Lines that would make a backtracking regex or a quadratic loop show: long runs of the characters
# the formats give meaning to (quotes, brackets, separators, digits) and one long line of nothing.
LONG_LINES = (
    b"A" * 200_000,
    b'"' * 100_000,
    b"[" * 50_000,
    b"{" * 50_000,
    b"<a>" * 30_000,
    b"|" * 100_000,
    b".1" * 60_000,
    b" " * 100_000 + b"x",
    b"\\" * 100_000,
    b'"a" ' * 30_000,
)


class _Recipe:
    """A mutated input that hypothesis prints as its recipe (the steps), not as 100 KB of text."""

    steps: list[str]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(steps={self.steps!r})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis's pretty-printer hook
        printer.text(repr(self))


class Mutated(_Recipe):
    def __init__(self, data: bytes, steps: list[str] | None = None) -> None:
        self.data = data
        self.steps = steps or []


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


@st.composite
def mutated_bytes(draw: st.DrawFn, data: bytes, max_steps: int = 3) -> Mutated:
    """``data`` with one to ``max_steps`` kinds of damage applied in turn."""
    out = Mutated(data)
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(
            st.sampled_from(
                ["truncate", "flip", "insert", "dup_line", "del_line", "swap_lines", "long_line", "splice", "crlf"]
            )
        )
        cur = out.data
        at = draw(st.integers(0, len(cur)))
        lines = _lines(cur)
        line = draw(st.integers(0, max(0, len(lines) - 1)))
        if kind == "truncate":
            out.data = cur[:at]
        elif kind == "flip" and cur:
            at = min(at, len(cur) - 1)
            xor = draw(st.integers(1, 255))
            out.data = cur[:at] + bytes([cur[at] ^ xor]) + cur[at + 1 :]
        elif kind == "insert":
            out.data = cur[:at] + draw(st.sampled_from(HOSTILE_BYTES)) + cur[at:]
        elif kind == "dup_line":
            out.data = b"\n".join(lines[: line + 1] + lines[line:])
        elif kind == "del_line":
            out.data = b"\n".join(lines[:line] + lines[line + 1 :])
        elif kind == "swap_lines" and len(lines) > 1:
            other = draw(st.integers(0, len(lines) - 1))
            lines[line], lines[other] = lines[other], lines[line]
            out.data = b"\n".join(lines)
        elif kind == "long_line":
            out.data = b"\n".join([*lines[:line], draw(st.sampled_from(LONG_LINES)), *lines[line:]])
        elif kind == "splice" and cur:
            end = draw(st.integers(at, min(len(cur), at + 4096)))
            out.data = cur[:end] + cur[at:end] * draw(st.integers(1, 3)) + cur[end:]
        elif kind == "crlf":
            out.data = cur.replace(b"\n", b"\r\n")
        out.steps.append(f"{kind}@{at}/line {line}")
    return out


# --- JSON damage -------------------------------------------------------------------------------

Path = tuple[str | int, ...]

# Values of every JSON type, including the awkward ones: numbers beyond int64 and float, strings
# with NUL, lone surrogates, control characters and XML entities, empty containers.
ODD_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            " ",
            "null",
            "-",
            "\x00",
            "a\x00b",
            "\ud800",
            "\x1b[0m",
            "&lt;&gt;",
            '"',
            "0",
            "²",
            "1e999",
            "NaN",
            "00:00:00:00:00:00",
            "aa:bb:cc:dd:ee:f",
            "Ethernet1/1",
            "et-0/0/0.0",
            "\u202e",
            "\ufeff",
        ]
    ),
)
JSON_VALUES = st.recursive(
    ODD_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


class Pairs(list):  # type: ignore[type-arg]
    """A JSON object written with the key/value pairs as given: a key may appear twice."""


def render(value: Any) -> str:
    """JSON text for ``value``; :class:`Pairs` become objects with repeated keys, and numbers too
    big for a float are written out as digits (as a hostile device would)."""
    if isinstance(value, Pairs):
        return "{" + ",".join(f"{json.dumps(str(k))}:{render(v)}" for k, v in value) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(render(v) for v in value) + "]"
    if isinstance(value, _Raw):
        return value.text
    return json.dumps(value)


@dataclass(frozen=True)
class _Raw:
    """JSON text inserted verbatim (numbers of 5,000 digits, nesting 100,000 deep)."""

    text: str


HUGE_VALUES = (
    _Raw("9" * 5000),
    _Raw("1" + "0" * 400),
    _Raw("1e400"),
    _Raw("-0.0"),
    _Raw("[" * 100_000 + "]" * 100_000),
    _Raw('{"a":' * 20_000 + "1" + "}" * 20_000),
    "x" * 300_000,
    "\x00" * 1000,
    ["a"] * 20_000,
)


def paths(doc: Any, prefix: Path = ()) -> list[Path]:
    """Every path in a JSON document (the root included)."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, (*prefix, i))
    return out


def get(doc: Any, path: Path) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _replace(doc: Any, path: Path, value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {k: (_replace(v, rest, value) if k == head else v) for k, v in doc.items()}
    return [(_replace(v, rest, value) if i == head else v) for i, v in enumerate(doc)]


def _delete(doc: Any, path: Path) -> Any:
    parent, last = path[:-1], path[-1]
    container = get(doc, parent)
    if isinstance(container, dict):
        trimmed: Any = {k: v for k, v in container.items() if k != last}
    else:
        trimmed = [v for i, v in enumerate(container) if i != last]
    return _replace(doc, parent, trimmed)


class MutatedJson(_Recipe):
    def __init__(self, text: str, steps: list[str], touched: list[Path]) -> None:
        self.text = text
        self.steps = steps
        self.touched = touched  # where each mutation was made


@st.composite
def mutated_json(draw: st.DrawFn, doc: Any, within: list[Path] | None = None, max_steps: int = 2) -> MutatedJson:
    """``doc`` with one to ``max_steps`` structural mutations at paths below one of ``within``
    (every path when None), rendered to JSON text."""
    steps: list[str] = []
    touched: list[Path] = []
    for _ in range(draw(st.integers(1, max_steps))):
        candidates = [
            p for p in paths(doc) if within is None or any(p[: len(w)] == w and len(p) > len(w) for w in within)
        ]
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        kind = draw(st.sampled_from(["retype", "retype", "delete", "duplicate_key", "huge", "wrap"]))
        if kind == "retype":
            doc = _replace(doc, path, draw(JSON_VALUES))
        elif kind == "delete" and path:
            doc = _delete(doc, path)
        elif kind == "duplicate_key" and path and isinstance(get(doc, path[:-1]), dict):
            parent = get(doc, path[:-1])
            pairs = Pairs(parent.items())
            pairs.append((path[-1], draw(JSON_VALUES)))
            if draw(st.booleans()):
                pairs.reverse()
            doc = _replace(doc, path[:-1], pairs)
        elif kind == "huge":
            doc = _replace(doc, path, draw(st.sampled_from(HUGE_VALUES)))
        elif kind == "wrap":
            doc = _replace(doc, path, [get(doc, path)] if draw(st.booleans()) else {"": get(doc, path)})
        else:
            continue
        steps.append(f"{kind} at {path!r}")
        touched.append(path)
        if kind == "duplicate_key":
            break  # a mapping with a repeated key is no dict: nothing below it can be addressed any more
    return MutatedJson(render(doc), steps, touched)


# --- what the LLDP parsers must hand over ------------------------------------------------------

# Postgres text and jsonb cannot hold NUL, and a lone surrogate cannot be encoded as UTF-8: either
# in a landed row or a quarantine reason would fail the whole device's load, not one row.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str | None) -> bool:
    return text is None or UNSTORABLE.search(text) is None


def assert_storable_neighbor(n: LldpNeighbor) -> None:
    for name in ("local_port", "local_port_vendor", "chassis_id", "port_id", "port_desc", "sys_name", "sys_desc",
                 "remote_port", "remote_platform"):  # fmt: skip
        assert storable(getattr(n, name)), (name, getattr(n, name))
    assert all(storable(a) for a in n.man_addrs), n.man_addrs


def assert_quarantine_row(q: Quarantined, device: str) -> None:
    """A quarantined row says why, where, for which device, in text Postgres can store (the
    payload may hold anything: the loader escapes it)."""
    assert q.reason and q.reason.strip(), q
    assert q.device == device, q
    assert storable(q.reason) and storable(q.location), (q.reason, q.location)
    assert isinstance(q.payload, str | bytes)
    if isinstance(q.payload, str):
        # the text column takes the payload with NULs escaped; a lone surrogate cannot be escaped there
        assert re.search("[\ud800-\udfff]", q.payload) is None, q.payload[:200]
