"""Switch groups: how LLDP collection is cut into partitions, one Dagster run (one Kubernetes Job) each.

A group is a fixed-size slice of the site's switches in natural name order (``leaf-su1-r2``
before ``leaf-su1-r10``), so switches named by pod, scalable unit or row land in the same group
as their neighbours, and a site that names them ``<role>-su<N>-...`` gets groups that follow its
scalable units closely. Keys are positional (``group-000``), not derived from names, so they stay
short, valid as Dagster partition keys and stable while the switch list is stable; adding a switch
moves at most the tail of the groups after it, and since every raw row is keyed by (run, switch)
a regrouping never loses or duplicates a switch's rows.

Pure: no I/O, no Dagster.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

DEFAULT_SWITCHES_PER_GROUP = 64
MAX_SWITCHES_PER_GROUP = 4096
GROUP_PREFIX = "group-"
_KEY = re.compile(r"^group-(\d{3,})$")
_DIGITS = re.compile(r"(\d+)")


class GroupError(ValueError):
    """A group size or key that cannot be used; the message says which and why."""


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders the digits inside a name by value (``r2`` < ``r10``)."""
    return tuple((1, int(part)) if part.isdigit() else (0, part) for part in _DIGITS.split(name) if part)


def group_key(index: int) -> str:
    return f"{GROUP_PREFIX}{index:03d}"


def group_index(key: str) -> int:
    """The position a key names; GroupError for anything that is not a group key."""
    match = _KEY.match(key) if isinstance(key, str) else None
    if match is None:
        raise GroupError(f"not a switch group key: {key!r} (expected {GROUP_PREFIX}NNN)")
    return int(match.group(1))


def check_size(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SWITCHES_PER_GROUP:
        raise GroupError(f"switches per group must be an integer from 1 to {MAX_SWITCHES_PER_GROUP}, got {size!r}")
    return size


def switch_groups(names: Iterable[str], size: int = DEFAULT_SWITCHES_PER_GROUP) -> dict[str, list[str]]:
    """{group key: switch names}, every distinct name in exactly one group, groups in key order."""
    size = check_size(size)
    ordered = sorted(set(names), key=lambda n: (natural_key(n), n))
    return {group_key(i // size): ordered[i : i + size] for i in range(0, len(ordered), size)}


def members(names: Iterable[str], key: str, size: int = DEFAULT_SWITCHES_PER_GROUP) -> list[str]:
    """The switches of one group (empty when the site has fewer groups than the key names: a
    partition left over from a longer switch list collects nothing and says so)."""
    group_index(key)
    return switch_groups(names, size).get(key, [])


def partition_changes(wanted: Sequence[str], existing: Iterable[str]) -> tuple[list[str], list[str]]:
    """(keys to add, keys to delete) to make a partition set equal ``wanted``; only group keys
    are ever deleted (a key someone added by hand under another name is left alone)."""
    have = set(existing)
    add = [k for k in wanted if k not in have]
    stale = sorted(k for k in have - set(wanted) if _KEY.match(k))
    return add, stale


def describe(groups: Mapping[str, Sequence[str]]) -> list[tuple[str, int, str, str]]:
    """(key, switches, first, last) per group: what the UI shows for the partition set."""
    return [(k, len(v), v[0], v[-1]) for k, v in groups.items() if v]
