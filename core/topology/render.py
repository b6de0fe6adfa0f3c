"""Renderers of the model: Slurm ``topology.conf`` (tree and block plugins) and JSON. Pure.

The Slurm output follows the shape of NVIDIA topograph's golden files
(``../shared/fixtures/topograph/expected.slinky-*.conf``), which Slurm sites already read:
switches named ``switch.<level>.<n>`` with a comment mapping each to the real domain, top level
first, and blocks with a ``# <block>=<domain>`` comment and ``BlockSizes`` last. Only valid
domains and valid compute hosts are rendered: a domain marked invalid is left out, the rest is
published (fail soft).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from core.hostlist import compress
from core.topology.fabric import natural_key
from core.topology.model import LEVELS, DomainOut, HostOut, TopologyModel

_SLURM_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")


def _valid_hosts(model: TopologyModel) -> list[HostOut]:
    return [h for h in model.compute_hosts() if h.valid]


def render_tree(model: TopologyModel) -> str:
    """``topology/tree``: pods over spine groups over rail groups (blocks), blocks list nodes.

    A rail-optimised host hangs off one leaf per rail; Slurm's tree wants each node under one
    leaf switch, so the leaf level is the rail group (the set of leaves sharing the same hosts),
    which is exactly the locality unit NCCL sees.
    """
    valid = {d.id: d for d in model.domains if d.valid}
    hosts_of: dict[str, list[str]] = defaultdict(list)
    children: dict[str, set[str]] = defaultdict(set)
    for h in _valid_hosts(model):
        chain = [getattr(h, lvl) for lvl in LEVELS]
        if any(c is None or c not in valid for c in chain):
            continue
        block, sg, pod = chain
        hosts_of[block].append(h.name)
        children[sg].add(block)
        children[pod].add(sg)
    used = set(hosts_of) | set(children)
    names: dict[str, str] = {}
    lines_by_level: list[list[str]] = []
    for depth, lvl in enumerate(LEVELS, start=1):
        ordered = sorted((d for d in valid.values() if d.level == lvl and d.id in used), key=_domain_order)
        for i, d in enumerate(ordered, start=1):
            names[d.id] = f"switch.{depth}.{i}"
        lines: list[str] = []
        for d in ordered:
            sw = names[d.id]
            lines.append(f"# {sw}={d.name}")
            if lvl == "block":
                lines.append(f"SwitchName={sw} Nodes={compress(hosts_of[d.id], sort=True)}")
            else:
                kids = [names[c] for c in children[d.id]]
                lines.append(f"SwitchName={sw} Switches={compress(kids, sort=True)}")
        lines_by_level.append(lines)
    out = [line for lines in reversed(lines_by_level) for line in lines]
    return "\n".join(out) + ("\n" if out else "")


def _domain_order(d: DomainOut) -> tuple[Any, ...]:
    return (natural_key(d.name), d.id)


def block_units(model: TopologyModel) -> list[tuple[str, str, list[str]]]:
    """(block name, domain label, hosts) for ``topology/block``.

    The unit is the NVLink domain when multi-node NVLink exists (NVL72: the rack), because that is
    what block scheduling is for; otherwise the rail group. A block is named by the DCIM rack all
    its hosts share, else by its domain when that is a Slurm-safe word, else by the domain id.
    """
    hosts = _valid_hosts(model)
    nvl: dict[str, list[HostOut]] = defaultdict(list)
    for h in hosts:
        if h.nvlink_domain:
            nvl[h.nvlink_domain].append(h)
    units: list[tuple[str, list[HostOut]]] = []
    if any(len(v) > 1 for v in nvl.values()):
        units = sorted(nvl.items())
    else:
        valid = {d.id: d for d in model.domains if d.valid and d.level == "block"}
        by_block: dict[str, list[HostOut]] = defaultdict(list)
        for h in hosts:
            if h.block in valid:
                by_block[h.block].append(h)
        units = sorted(((valid[b].name, hs) for b, hs in by_block.items()), key=lambda u: natural_key(u[0]))
        ids = {valid[b].name: b for b in by_block}
        units = [(u[0] if _SLURM_SAFE.match(u[0]) else ids[u[0]], u[1]) for u in units]
    out: list[tuple[str, str, list[str]]] = []
    for label, hs in units:
        racks = {h.rack for h in hs}
        rack = next(iter(racks)) if len(racks) == 1 else None
        name = rack if rack and _SLURM_SAFE.match(rack) else (label if _SLURM_SAFE.match(label) else None)
        out.append((name or f"block{len(out) + 1:03d}", label, sorted((h.name for h in hs), key=natural_key)))
    return sorted(out, key=lambda u: natural_key(u[0]))


def block_sizes(units: Sequence[tuple[str, str, list[str]]], configured: Sequence[int] | None = None) -> list[int]:
    """Slurm BlockSizes: configured, else the smallest block, doubled while the aggregate stays at
    most half of the blocks (a larger aggregate gives the scheduler no locality left to choose)."""
    if configured:
        return list(configured)
    if not units:
        return []
    base = min(len(u[2]) for u in units)
    sizes = [base]
    factor = 2
    while factor * 2 <= len(units):
        sizes.append(base * factor)
        factor *= 2
    return sizes


def render_block(model: TopologyModel, configured_sizes: Sequence[int] | None = None) -> str:
    """``topology/block``: one ``BlockName`` per block, then ``BlockSizes``."""
    units = block_units(model)
    lines: list[str] = []
    for name, label, hosts in units:
        lines.append(f"# {name}={label}")
        lines.append(f"BlockName={name} Nodes={compress(hosts, sort=True)}")
    sizes = block_sizes(units, configured_sizes)
    if sizes:
        lines.append("BlockSizes=" + ",".join(str(s) for s in sizes))
    return "\n".join(lines) + ("\n" if lines else "")


def render_json(model: TopologyModel, **kwargs: Any) -> str:
    """The JSON contract (docs/topology-json.md), indented, keys in a stable order."""
    return json.dumps(model.to_json(**kwargs), indent=2, default=str) + "\n"
