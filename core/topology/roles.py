"""Which hosts on the fabric are compute hosts: the fleet's compute pattern, learned from the data.

Name rules (``core.infiniband``) catch a UFM server called ``ufm01``. They miss one called
``fm01``, or one named like the compute hosts, and such a host was taken for a compute host: its
two HCAs did not follow the rail pattern, so it got two ``miscabled_port`` errors, and it counted
in a rail group. Here every host that name rules left as compute is compared with the pattern the
fleet itself shows (the rules and thresholds are :class:`HostRoleRules`, documented there):

* the HCA count of the fleet's compute hosts: the count most *HCAs* belong to (weighting by HCAs
  keeps twenty two-port storage servers from outvoting sixteen eight-rail DGX);
* the rail pattern: HCA *i* on the leaf whose majority rail is *i*;
* the naming: the shapes (digit runs collapsed) of hosts that have the fleet's HCA count.

Pure functions over plain values; ``derive`` feeds them and moves the hosts they set apart out of
every compute step.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from core.topology.inputs import HostRoleRules


@dataclass(frozen=True)
class HostFacts:
    """What the fabric shows of one host: its HCAs, and how many of its cabled ones sit on a leaf
    of their own rail (``rail_checked`` counts the cabled HCAs whose rail and leaf rail are known)."""

    name: str
    hcas: int
    on_rail: int = 0
    rail_checked: int = 0


@dataclass(frozen=True)
class FleetPattern:
    """The compute pattern of one fabric."""

    hca_count: int
    shapes: frozenset[str]  # name shapes of the hosts that have the fleet's HCA count
    example: str  # the commonest of them with digit widths kept, for messages ("dgx###")
    hosts: int  # hosts the pattern was learned from


def name_shape(name: str) -> str:
    """``dgx001`` and ``dgx1234`` -> ``dgx#``: a naming scheme, whatever the padding."""
    return re.sub(r"\d+", "#", name.lower())


def _shown_shape(name: str) -> str:
    return re.sub(r"\d", "#", name.lower())


def weighted_mode(counts: Iterable[int]) -> int | None:
    """The HCA count most HCAs belong to (ties go to the larger count)."""
    hosts = Counter(c for c in counts if c > 0)
    if not hosts:
        return None
    return max(hosts, key=lambda k: (k * hosts[k], k))


def learn_pattern(facts: Iterable[HostFacts], rules: HostRoleRules) -> FleetPattern | None:
    """The fleet's compute pattern, or None when too few hosts show one (``rules.min_fleet``)."""
    items = list(facts)
    mode = weighted_mode(f.hcas for f in items)
    if mode is None:
        return None
    full = [f for f in items if not _few(f.hcas, mode, rules)]
    if len(full) < rules.min_fleet:
        return None
    shown = Counter(_shown_shape(f.name) for f in full if f.hcas == mode) or Counter(_shown_shape(f.name) for f in full)
    example = max(shown, key=lambda s: (shown[s], s))
    return FleetPattern(mode, frozenset(name_shape(f.name) for f in full), example, len(full))


def _few(hcas: int, mode: int, rules: HostRoleRules) -> bool:
    return hcas <= mode * rules.max_hca_share


def judge(facts: HostFacts, pattern: FleetPattern, rules: HostRoleRules) -> tuple[str, str] | None:
    """``(role, reason)`` when the host is not a compute host, None when it is (or may be a broken
    one: few HCAs alone, with its name and rails intact, is a compute host missing HCAs)."""
    if not _few(facts.hcas, pattern.hca_count, rules):
        return None
    name_off = name_shape(facts.name) not in pattern.shapes
    rail_off = facts.rail_checked > 0 and facts.on_rail < facts.rail_checked * rules.min_rail_share
    if not (name_off or rail_off):
        return None
    hint = rules.role_hint(facts.name)
    role = hint or "management"
    why = [f"{facts.hcas} HCA{'s' if facts.hcas != 1 else ''} where the fleet's compute hosts have {pattern.hca_count}"]
    if name_off:
        why.append(f"name {facts.name!r} does not follow the compute pattern {pattern.example!r}")
    if rail_off:
        off = facts.rail_checked - facts.on_rail
        why.append(f"{off} of its {facts.rail_checked} cabled HCAs are not on their rail's leaf")
    why.append(f"the name suggests {hint}" if hint else "no name hint: management")
    return role, "; ".join(why)


def classify_hosts(facts: Iterable[HostFacts], rules: HostRoleRules) -> dict[str, tuple[str, str]]:
    """host -> (role, reason) for every host that is not a compute host by the fleet pattern."""
    items = list(facts)
    if not rules.enabled:
        return {}
    pattern = learn_pattern(items, rules)
    if pattern is None:
        return {}
    out: dict[str, tuple[str, str]] = {}
    for f in items:
        verdict = judge(f, pattern, rules)
        if verdict is not None:
            out[f.name] = verdict
    return out
