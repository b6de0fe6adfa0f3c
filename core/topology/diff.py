"""What moved between two versions of the model, from their JSON forms. Pure.

Each section is keyed by its natural key (switch id, host name, domain id, link ends, finding
kind + devices + ports), so a renamed switch is a change of one switch, not a removal and an
addition, and a moved host shows its old and new domains side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Doc = Mapping[str, Any]


@dataclass(frozen=True)
class Change:
    section: str  # switches | hosts | domains | links | findings
    change: str  # added | removed | changed
    key: str
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None

    def fields(self) -> list[str]:
        """Top-level fields that differ (for a changed item)."""
        if self.before is None or self.after is None:
            return []
        return sorted(k for k in set(self.before) | set(self.after) if self.before.get(k) != self.after.get(k))


def _link_key(lk: Doc) -> str:
    return f"{lk['a']['device']}:{lk['a']['port']}-{lk['b']['device']}:{lk['b']['port']}"


def _finding_key(f: Doc) -> str:
    ports = ",".join(f"{p['device']}:{p['port']}" for p in f.get("ports", ()))
    return f"{f['kind']}|{','.join(f.get('devices', ()))}|{ports}"


KEYS: Mapping[str, Callable[[Doc], str]] = {
    "switches": lambda s: str(s["id"]),
    "hosts": lambda h: str(h["name"]),
    "domains": lambda d: str(d["id"]),
    "links": _link_key,
    "findings": _finding_key,
}


def diff_models(old: Doc, new: Doc) -> list[Change]:
    """Every added, removed and changed item, section by section, in key order."""
    out: list[Change] = []
    for section, key in KEYS.items():
        before = {key(x): x for x in old.get(section, ())}
        after = {key(x): x for x in new.get(section, ())}
        for k in sorted(set(before) | set(after)):
            b, a = before.get(k), after.get(k)
            if b is None:
                out.append(Change(section, "added", k, None, a))
            elif a is None:
                out.append(Change(section, "removed", k, b, None))
            elif b != a:
                out.append(Change(section, "changed", k, b, a))
    return out


def summarise(changes: list[Change]) -> dict[str, dict[str, int]]:
    """``{section: {added: n, removed: n, changed: n}}`` for metadata and the CLI header."""
    out: dict[str, dict[str, int]] = {}
    for c in changes:
        out.setdefault(c.section, {"added": 0, "removed": 0, "changed": 0})[c.change] += 1
    return out
