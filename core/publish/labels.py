"""Node labels and extended resources from a topology model (pure).

One label key per topology level. Values must be Kubernetes label values (at most 63
characters, alphanumeric at both ends, ``-_.`` inside); we use the readable domain name made
label-safe, and fall back to a readable prefix plus a stable hash when it is too long or when
two domains of one level would collide, so a value never changes unless the domain does. The
readable name of every value is returned beside it (``LabelValue``) for the warehouse.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from core.topology.model import TopologyModel

Scheme = Literal["gpufabric", "topograph"]
HOSTNAME_LABEL = "kubernetes.io/hostname"
MAX_VALUE = 63
HASH_CHARS = 10
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_BAD = re.compile(r"[^A-Za-z0-9_.-]+")

# Levels coarsest -> finest (the order of a Kueue Topology), as (model field, gpufabric key
# template, topograph key). Topograph numbers switch tiers from the leaves up (tier-1 = leaf
# block) and has a single accelerator level, so the sub-domain has no topograph key.
LEVELS: tuple[tuple[str, str, str | None], ...] = (
    ("pod", "fabric.{p}/pod", "fabric.topograph.run/tier-3"),
    ("spine_group", "fabric.{p}/spine-group", "fabric.topograph.run/tier-2"),
    ("block", "fabric.{p}/block", "fabric.topograph.run/tier-1"),
    ("nvlink_domain", "accelerator.{p}/domain", "accelerator.topograph.run/domain"),
    ("nvlink_sub_domain", "accelerator.{p}/sub-domain", None),
)


@dataclass(frozen=True)
class LabelScheme:
    """Which keys the publisher writes: ``prefix`` is the site's ``label_prefix``."""

    scheme: Scheme = "gpufabric"
    prefix: str = "gpufabric.io"

    def level_keys(self) -> list[tuple[str, str]]:
        """(model field, label key), coarsest first, without the hostname level."""
        out: list[tuple[str, str]] = []
        for field_name, template, topograph in LEVELS:
            key = template.format(p=self.prefix) if self.scheme == "gpufabric" else topograph
            if key is not None:
                out.append((field_name, key))
        return out

    def topology_levels(self) -> list[str]:
        """Kueue Topology levels: every level key, then the hostname (finest)."""
        return [key for _, key in self.level_keys()] + [HOSTNAME_LABEL]

    @property
    def pool_key(self) -> str:
        """Our own label naming a node's homogeneous pool; ResourceFlavors select on it."""
        return f"{self.prefix}/pool"

    def managed_keys(self) -> set[str]:
        return {key for _, key in self.level_keys()} | {self.pool_key}


@dataclass(frozen=True)
class LabelValue:
    key: str
    value: str
    level: str
    domain_id: str
    readable: str  # the domain's human name, kept in Postgres beside the value


def is_label_value(value: str) -> bool:
    return len(value) <= MAX_VALUE and bool(_VALUE_RE.match(value))


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()[:HASH_CHARS]


def safe_value(readable: str, *, force_hash: bool = False) -> str:
    """A label value for ``readable``: itself when valid, else made safe, else prefix + hash."""
    if not force_hash and is_label_value(readable):
        return readable
    # hostlist brackets carry no meaning in a value: ib-leaf-su01-r[0-7] -> ib-leaf-su01-r0-7
    unbracketed = readable.replace("[", "").replace("]", "").replace(",", "_")
    cleaned = re.sub(r"-{2,}", "-", _BAD.sub("-", unbracketed)).strip("-_.")
    if not force_hash and cleaned and is_label_value(cleaned):
        return cleaned
    head = cleaned[: MAX_VALUE - HASH_CHARS - 1].rstrip("-_.")
    return f"{head}-{_digest(readable)}" if head else f"h-{_digest(readable)}"


def domain_values(model: TopologyModel, scheme: LabelScheme) -> dict[tuple[str, str], LabelValue]:
    """(level field, domain id) -> its label value. Values unique per level: a collision after
    sanitising hashes every colliding value (hash of the id, so it stays stable)."""
    readable: dict[tuple[str, str], str] = {}
    for d in model.domains:
        readable[(d.level, d.id)] = d.name
    for h in model.compute_hosts():
        for level in ("nvlink_domain", "nvlink_sub_domain"):
            ident = getattr(h, level)
            if ident:
                readable[(level, ident)] = ident
    keys = dict(scheme.level_keys())
    values = {k: safe_value(name) for k, name in readable.items()}
    counts = Counter((level, v) for (level, _), v in values.items())
    out: dict[tuple[str, str], LabelValue] = {}
    for (level, ident), value in values.items():
        if counts[(level, value)] > 1:
            value = safe_value(f"{readable[(level, ident)]}#{ident}", force_hash=True)
        if level in keys:
            out[(level, ident)] = LabelValue(keys[level], value, level, ident, readable[(level, ident)])
    return out


@dataclass(frozen=True)
class NodePlan:
    """What we publish on one node: the managed labels and extended resources."""

    labels: Mapping[str, str]
    resources: Mapping[str, str]
    complete: bool  # every level label present (only such nodes join a TAS pool)


def node_labels(
    model: TopologyModel,
    scheme: LabelScheme,
    pools: Mapping[str, str] | None = None,
) -> dict[str, NodePlan]:
    """Per compute host: one label per level. Hosts missing any level (or invalid) get no
    labels at all and no pool label: Kueue silently drops nodes of a TAS flavor that miss a
    level label, so a partial node must stay out of the flavor rather than half-in.
    ``pools`` maps a host to its pool name (from ``pool_of``)."""
    values = domain_values(model, scheme)
    findings_by_guid = _miscabled_guids(model)
    out: dict[str, NodePlan] = {}
    for h in model.compute_hosts():
        labels: dict[str, str] = {}
        complete = h.valid
        for level, key in scheme.level_keys():
            ident = getattr(h, level)
            if ident is None or (level, ident) not in values:
                complete = False
                continue
            labels[key] = values[(level, ident)].value
        if not complete:
            labels = {}
        elif pools and h.name in pools:
            labels[scheme.pool_key] = pools[h.name]
        out[h.name] = NodePlan(labels, extended_resources(model, h.name, scheme.prefix, findings_by_guid), complete)
    return out


def _miscabled_guids(model: TopologyModel) -> set[str]:
    guids: set[str] = set()
    for f in model.findings:
        if f.kind == "miscabled_port":
            guids.update(f.devices)
    return guids


def extended_resources(model: TopologyModel, host: str, prefix: str, bad: set[str] | None = None) -> dict[str, str]:
    """Counts an operator can request or gate on: distinct rails cabled, and IB ports that are
    linked to a leaf and not part of a miscabling finding."""
    h = model.host(host)
    bad = _miscabled_guids(model) if bad is None else bad
    rails = {c.rail for c in h.hcas if c.rail and c.leaf}
    healthy = sum(1 for c in h.hcas if c.leaf and c.guid not in bad)
    return {f"{prefix}/rails": str(len(rails)), f"{prefix}/healthy-ib-ports": str(healthy)}


def pool_name(product: str, gpus: int) -> str:
    """A homogeneous pool: one GPU product and count per node (``nvidia-h100-80gb-hbm3-x8``)."""
    base = _BAD.sub("-", product.lower()).strip("-") or "gpu"
    return safe_value(f"{base}-x{gpus}".lower()).lower()


def pools_from_nodes(nodes: Iterable[tuple[str, Mapping[str, str]]]) -> dict[str, str]:
    """host -> pool name from the GFD labels every GPU node carries (product, count)."""
    out: dict[str, str] = {}
    for name, labels in nodes:
        product = labels.get("nvidia.com/gpu.product")
        count = labels.get("nvidia.com/gpu.count")
        if product and count and count.isdigit():
            out[name] = pool_name(product, int(count))
    return out
