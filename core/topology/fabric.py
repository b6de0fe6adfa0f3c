"""Graph algorithms of the fabric: switch tiers, similarity groups, stable domain identities.

Tiers come from the graph, not from names: a leaf is a switch with compute hosts below it, a
spine is one hop above the nearest leaf, a core two hops. Groups (rail groups, spine groups) are
built by similarity, not exact set equality: two leaves belong together when the hosts below them
overlap by at least the configured Jaccard index, so one miscabled port, a missing link or an
unnamed HCA moves a host's evidence a little and never splits or merges a group. networkx does
the graph work (multi-source BFS, connected components).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping
from itertools import combinations
from typing import TypeVar

import networkx as nx

from core.hostlist import compress
from core.models import Tier

K = TypeVar("K", bound=Hashable)

TIER_BY_DISTANCE: Mapping[int, Tier] = {0: Tier.LEAF, 1: Tier.SPINE, 2: Tier.CORE}


def assign_tiers(
    switches: Iterable[str], edges: Iterable[tuple[str, str]], leaves: Iterable[str]
) -> dict[str, tuple[Tier | None, str]]:
    """Switch -> (tier, why). Hop distance from the nearest leaf: 0 leaf, 1 spine, 2 core.

    A switch no leaf reaches, or more than two hops up, gets no tier and the reason says so
    (a fourth tier is not a fat-tree we model; it becomes a finding, not a guess).
    """
    graph = nx.Graph()
    graph.add_nodes_from(switches)
    graph.add_edges_from((a, b) for a, b in edges if a != b)
    sources = [leaf for leaf in leaves if leaf in graph]
    dist: Mapping[str, int] = nx.multi_source_dijkstra_path_length(graph, sources) if sources else {}
    out: dict[str, tuple[Tier | None, str]] = {}
    for node in graph.nodes:
        d = dist.get(node)
        if d is None:
            out[node] = (None, "no path to any switch with compute hosts")
        elif d in TIER_BY_DISTANCE:
            tier = TIER_BY_DISTANCE[d]
            why = "compute hosts attached" if d == 0 else f"{d} hop(s) above the nearest leaf"
            out[node] = (tier, why)
        else:
            out[node] = (None, f"{d} hops above the nearest leaf: deeper than a three-tier fat tree")
    return out


def similarity_groups(members: Mapping[K, frozenset[str]], threshold: float) -> list[list[K]]:
    """Partition ``members`` (switch -> the set it is judged by) into groups: single linkage over
    pairs whose Jaccard index is at least ``threshold``. Members with an empty set stand alone.

    Pairs are counted through an inverted index (item -> members), so the cost is the number of
    co-occurring pairs, not members squared.
    """
    by_item: dict[str, list[K]] = defaultdict(list)
    for m, items in members.items():
        for item in items:
            by_item[item].append(m)
    together: Counter[tuple[K, K]] = Counter()
    for ms in by_item.values():
        if len(ms) > 1:
            together.update(combinations(sorted(ms, key=str), 2))
    graph = nx.Graph()
    graph.add_nodes_from(members)
    for (a, b), both in together.items():
        union = len(members[a]) + len(members[b]) - both
        if union and both / union >= threshold:
            graph.add_edge(a, b)
    groups = [sorted(c, key=str) for c in nx.connected_components(graph)]
    return sorted(groups, key=lambda g: str(g[0]))


def components(switches: Iterable[str], edges: Iterable[tuple[str, str]]) -> list[set[str]]:
    graph = nx.Graph()
    graph.add_nodes_from(switches)
    graph.add_edges_from(edges)
    return [set(c) for c in nx.connected_components(graph)]


PREFIX: Mapping[str, str] = {"block": "blk", "spine_group": "sg", "pod": "pod"}


def domain_id(level: str, member_ids: Iterable[str]) -> str:
    """Stable, label-safe id from the sorted member identities (GUIDs / MACs), so it survives a
    rename and changes only when the membership does."""
    body = "|".join(sorted(member_ids)).encode()
    return f"{PREFIX[level]}-{hashlib.blake2b(body, digest_size=5).hexdigest()}"


def domain_name(member_names: Iterable[str], fallback: str) -> str:
    """Readable name: the member switch names compressed (``ib-leaf-su01-r[0-7]``)."""
    names = list(member_names)
    try:
        return compress(names, sort=True) if names else fallback
    except ValueError:  # a name with brackets, commas or spaces cannot be compressed
        return fallback


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """``leaf-2`` before ``leaf-10``: the order operators (and topograph) list switches in."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name))


def majority(values: Iterable[K]) -> tuple[K | None, int, int]:
    """(most common value, its count, total); ties break on the smallest value's string form."""
    counts = Counter(values)
    if not counts:
        return None, 0, 0
    best = max(counts.items(), key=lambda kv: (kv[1], _neg(str(kv[0]))))
    return best[0], best[1], sum(counts.values())


def _neg(text: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in text)


def modal(values: Iterable[int]) -> int | None:
    """The most common value; ties go to the larger (a design is what most peers were built to)."""
    counts = Counter(values)
    if not counts:
        return None
    return max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]
