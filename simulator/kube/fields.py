"""Field ownership: ``managedFields`` bookkeeping and server-side apply (SSA).

Model (a faithful subset of sigs.k8s.io/structured-merge-diff):

* A field is a path of map keys, e.g. ``("metadata", "labels", "nvidia.com/gpu.product")``.
  Ownership is tracked at the leaves: scalars, empty maps and **whole lists** (the twin treats
  every list as ``atomic``; upstream keys some lists, e.g. containers by name, as ``k:{...}``
  entries; no caller of the twin applies partial lists, and an atomic list is the conservative
  reading: a manager owns a list it applied as a whole).
* ``fieldsV1`` is the upstream wire form: ``{"f:metadata": {"f:labels": {"f:key": {}}}}``.
* Identity fields are never owned: ``apiVersion``, ``kind``, ``metadata.name/namespace/uid/
  resourceVersion/generation/creationTimestamp/managedFields/...``.
* Apply (``application/apply-patch+yaml``) by manager M: a field M applies that another manager
  owns with a *different* value is a conflict (409) unless ``force``; with force M takes it.
  Same value: ownership is shared. Fields M applied last time but not now are removed from the
  object when nobody else owns them (that is how a publisher removes stale labels), and are only
  disowned when someone else does. Fields M never applied (a label added by hand with
  ``kubectl label``) are never touched.
* Update (PUT, merge/strategic/JSON patch) by manager U: every leaf U changed or added becomes
  U's, and is taken from every other manager (updates never conflict, as upstream); leaves that
  disappeared are disowned by everyone.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

Path = tuple[str, ...]

IGNORED_METADATA = frozenset({
    "name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields",
    "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "generateName",
})
_ROOT_SECTIONS = frozenset({"metadata", "spec", "status"})


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def leaves(obj: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every owned-able leaf path of an object (see module docstring)."""
    if not isinstance(obj, dict):
        yield prefix
        return
    if not obj and prefix:
        yield prefix
        return
    for key, value in obj.items():
        if not prefix and key in ("apiVersion", "kind"):
            continue
        if prefix == ("metadata",) and key in IGNORED_METADATA:
            continue
        yield from leaves(value, (*prefix, key))


def get_path(obj: Any, path: Path) -> tuple[bool, Any]:
    node = obj
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def set_path(obj: dict[str, Any], path: Path, value: Any) -> None:
    node = obj
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[path[-1]] = copy.deepcopy(value)


def remove_path(obj: dict[str, Any], path: Path) -> None:
    """Delete a leaf, then any map it leaves empty (below the root sections)."""
    chain: list[tuple[dict[str, Any], str]] = []
    node: Any = obj
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return
        chain.append((node, part))
        node = node[part]
    parent, key = chain.pop()
    del parent[key]
    while chain:
        parent, key = chain.pop()
        if parent[key] == {} and not (len(chain) == 0 and key in _ROOT_SECTIONS):
            del parent[key]
        else:
            break


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(paths):
        node = out
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return out


def from_fields_v1(fields: dict[str, Any], prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for key, child in fields.items():
        if key == ".":
            if prefix:
                out.add(prefix)
            continue
        if not key.startswith("f:"):
            # k:/v:/i: list entries: the twin owns lists whole, so the list itself is the leaf.
            if prefix:
                out.add(prefix)
            continue
        path = (*prefix, key[2:])
        if isinstance(child, dict) and child:
            out |= from_fields_v1(child, path)
        else:
            out.add(path)
    return out


class ManagedFields:
    """The ``metadata.managedFields`` of one object as mutable per-manager path sets."""

    def __init__(self, entries: list[dict[str, Any]] | None) -> None:
        self.entries: list[dict[str, Any]] = []
        self.sets: list[set[Path]] = []
        for entry in entries or []:
            self.entries.append({k: v for k, v in entry.items() if k != "fieldsV1"})
            self.sets.append(from_fields_v1(entry.get("fieldsV1") or {}))

    @staticmethod
    def _key(entry: dict[str, Any]) -> tuple[str, str, str]:
        return (entry.get("manager", ""), entry.get("operation", ""), entry.get("subresource", ""))

    def _index(self, manager: str, operation: str, subresource: str) -> int | None:
        for i, entry in enumerate(self.entries):
            if self._key(entry) == (manager, operation, subresource):
                return i
        return None

    def owned(self, manager: str, operation: str, subresource: str) -> set[Path]:
        i = self._index(manager, operation, subresource)
        return set() if i is None else set(self.sets[i])

    def others(self, manager: str, operation: str, subresource: str) -> Iterator[tuple[dict[str, Any], set[Path]]]:
        for entry, paths in zip(self.entries, self.sets, strict=True):
            if self._key(entry) != (manager, operation, subresource):
                yield entry, paths

    def set_owned(self, manager: str, operation: str, subresource: str, api_version: str, paths: set[Path]) -> None:
        i = self._index(manager, operation, subresource)
        entry: dict[str, Any] = {"manager": manager, "operation": operation, "apiVersion": api_version,
                                 "time": now_rfc3339(), "fieldsType": "FieldsV1"}
        if subresource:
            entry["subresource"] = subresource
        if i is None:
            self.entries.append(entry)
            self.sets.append(set(paths))
        else:
            self.entries[i] = entry
            self.sets[i] = set(paths)

    def disown(self, paths: set[Path], *, keep: tuple[str, str, str] | None = None) -> None:
        """Take ``paths`` (and anything below them) away from every manager except ``keep``."""
        for entry, owned in zip(self.entries, self.sets, strict=True):
            if keep is not None and self._key(entry) == keep:
                continue
            owned -= {p for p in owned if any(p[: len(q)] == q or q[: len(p)] == p for q in paths)}

    def owners(self, path: Path) -> list[str]:
        return [e["manager"] for e, s in zip(self.entries, self.sets, strict=True) if path in s]

    def render(self) -> list[dict[str, Any]]:
        out = []
        for entry, paths in zip(self.entries, self.sets, strict=True):
            if paths:  # managers that own nothing are dropped, as upstream does
                out.append({**entry, "fieldsV1": to_fields_v1(paths)})
        return out


def _overlaps(a: Path, b: Path) -> bool:
    return a[: len(b)] == b or b[: len(a)] == a


def _clashes(mine: Path, theirs: Path, applied: dict[str, Any], live: dict[str, Any]) -> bool:
    """Does applying leaf ``mine`` fight over a field another manager owns as ``theirs``?"""
    if mine == theirs:
        # Same value: ownership becomes shared, no conflict (upstream semantics). An empty map
        # claims the map itself, never its keys, so it cannot disagree with a live map.
        mine_value, live_value = get_path(applied, mine)[1], get_path(live, mine)[1]
        if mine_value == {} and isinstance(live_value, dict):
            return False
        return bool(mine_value != live_value)
    if mine[: len(theirs)] == theirs:
        # They own an ancestor as a leaf; only a non-map value there (a list, a scalar) clashes.
        return not isinstance(get_path(live, theirs)[1], dict)
    if theirs[: len(mine)] == mine:
        # We apply a leaf over their subtree: clashes unless we apply an (empty) map there.
        return not isinstance(get_path(applied, mine)[1], dict)
    return False


class ApplyConflict(Exception):
    """Fields another manager owns with a different value: ``[(path, manager)]``."""

    def __init__(self, conflicts: list[tuple[Path, str]]) -> None:
        self.conflicts = conflicts
        super().__init__(f"{len(conflicts)} conflicts")


def dotted(path: Path) -> str:
    return "." + ".".join(path)


def server_side_apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    manager: str,
    *,
    force: bool,
    api_version: str,
    subresource: str = "",
    scope: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """Merge an apply configuration into ``live`` (None: create); returns the new object.

    ``scope`` limits which top-level sections the request may touch (``("status",)`` for the
    status subresource; everything but status on the main resource of a kind with a status
    subresource). Raises :class:`ApplyConflict`.
    """
    result: dict[str, Any] = copy.deepcopy(live) if live is not None else {}
    mf = ManagedFields(result.get("metadata", {}).get("managedFields"))
    me = (manager, "Apply", subresource)

    def in_scope(p: Path) -> bool:
        return scope is None or p[0] in scope

    new_paths = {p for p in leaves(applied) if in_scope(p)}
    previous = mf.owned(*me)

    conflicts: list[tuple[Path, str]] = []
    for entry, owned in mf.others(*me):
        for path in new_paths:
            for theirs in owned:
                if _clashes(path, theirs, applied, result):
                    conflicts.append((theirs, entry["manager"]))
    if conflicts and not force:
        raise ApplyConflict(sorted(set(conflicts)))
    if conflicts:
        mf.disown({p for p, _ in conflicts}, keep=me)

    for path in sorted(previous - new_paths):
        if any(path in owned for _, owned in mf.others(*me)):
            continue  # another manager still owns it: leave the value, just drop our claim
        if any(p[: len(path)] == path for p in new_paths):
            continue  # we now apply fields below it: removing it would drop them
        remove_path(result, path)

    for path in sorted(new_paths):
        found, value = get_path(applied, path)
        if not found:
            continue
        if value == {} and isinstance(get_path(result, path)[1], dict):
            continue  # applying an empty map claims the map, it does not clear other managers' keys
        set_path(result, path, value)

    mf.set_owned(manager, "Apply", subresource, api_version, new_paths)
    result.setdefault("metadata", {})["managedFields"] = mf.render()
    return result


def record_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    *,
    api_version: str,
    subresource: str = "",
) -> None:
    """Update ``new``'s managedFields in place for a non-apply write by ``manager``."""
    mf = ManagedFields((old or {}).get("metadata", {}).get("managedFields"))
    old_leaves = {} if old is None else {p: get_path(old, p)[1] for p in leaves(old)}
    new_leaves = {p: get_path(new, p)[1] for p in leaves(new)}
    changed = {p for p, v in new_leaves.items() if p not in old_leaves or old_leaves[p] != v}
    gone = set(old_leaves) - set(new_leaves)
    me = (manager, "Update", subresource)
    if gone:
        mf.disown(gone)
    if changed:
        mf.disown(changed, keep=me)
        mf.set_owned(manager, "Update", subresource, api_version, mf.owned(*me) | changed)
    new.setdefault("metadata", {})["managedFields"] = mf.render()
