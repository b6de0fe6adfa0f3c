"""Kueue v1beta2 objects from the label scheme, the GPU pools and the tenants (pure).

Immutable fields are never patched: a Topology's ``levels`` and a ResourceFlavor's
``nodeLabels``/``topologyName`` are folded into the object's name as a short content hash, so a
change yields a new object and the ClusterQueues move to it; the publisher deletes the old one
after the references moved. Every object carries ``app.kubernetes.io/managed-by: gpufabric``
so the publisher only ever deletes what it created.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.publish.labels import LabelScheme

API_VERSION = "kueue.x-k8s.io/v1beta2"
MANAGED_BY = "app.kubernetes.io/managed-by"
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_PRIORITIES: Mapping[str, int] = {"prod": 1000, "production": 1000, "standard": 500, "batch": 200,
                                         "preemptible": 100, "spot": 100}  # fmt: skip


@dataclass(frozen=True)
class Pool:
    name: str  # the pool label value
    product: str  # nvidia.com/gpu.product
    gpus_per_node: int
    nodes: int


@dataclass(frozen=True)
class TenantSpec:
    """What the renderer needs of a tenant (``settings.Tenant`` has this shape)."""

    id: str
    name: str
    tiers: Sequence[str]
    cohort: str | None = None
    gpu_quota: Mapping[str, int] | None = None
    # Per-tenant overrides of KueuePolicy's fractions of nominal quota (None: the policy's).
    borrowing_fraction: float | None = None
    lending_fraction: float | None = None


@dataclass(frozen=True)
class KueuePolicy:
    """Site knobs. Fractions apply to each tenant's nominal quota per flavor."""

    root_cohort: str = "gpufabric"
    topology_base: str = "gpufabric"
    borrowing_fraction: float | None = 1.0  # None: unlimited borrowing
    lending_fraction: float | None = 0.5  # None: lends everything unused
    priorities: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_PRIORITIES))
    default_priority: int = 500
    manager: str = "gpufabric"


class RenderError(ValueError):
    """The inputs cannot make valid Kueue objects (the message says which and why)."""


def dns_name(text: str) -> str:
    """A DNS-1123 label from a tenant id or tier (lower case, ``_``/``.`` -> ``-``)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].rstrip("-")
    if not name:
        raise RenderError(f"{text!r} cannot be made a Kubernetes object name")
    return name


def _hash(obj: Any) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True).encode(), digest_size=4).hexdigest()


def _obj(kind: str, name: str, spec: dict[str, Any] | None, policy: KueuePolicy, namespace: str | None = None,
         **top: Any) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {"name": name, "labels": {MANAGED_BY: policy.manager}}
    if namespace:
        meta["namespace"] = namespace
    body: dict[str, Any] = {"apiVersion": API_VERSION, "kind": kind, "metadata": meta}
    if spec is not None:
        body["spec"] = spec
    body.update(top)
    return body


def topology_object(scheme: LabelScheme, policy: KueuePolicy) -> dict[str, Any]:
    levels = [{"nodeLabel": key} for key in scheme.topology_levels()]
    return _obj("Topology", f"{policy.topology_base}-{_hash(levels)}", {"levels": levels}, policy)


def flavor_object(pool: Pool, scheme: LabelScheme, topology_name: str, policy: KueuePolicy) -> dict[str, Any]:
    spec = {"nodeLabels": {scheme.pool_key: pool.name}, "topologyName": topology_name}
    name = f"{pool.name[:50].rstrip('-.')}-{_hash(spec)}"
    return _obj("ResourceFlavor", name, spec, policy)


def _quota_for(tenant: TenantSpec, pool: Pool) -> int | None:
    """A tenant's quota key matches a pool by its name, its product, or a token of the product
    (``H100`` matches ``NVIDIA-H100-80GB-HBM3``)."""
    for key, value in (tenant.gpu_quota or {}).items():
        k = key.lower()
        tokens = re.split(r"[-_ ]", pool.product.lower())
        if k in (pool.name.lower(), pool.product.lower()) or k in tokens:
            return value
    return None


def render_kueue(
    scheme: LabelScheme, pools: Sequence[Pool], tenants: Sequence[TenantSpec], policy: KueuePolicy | None = None
) -> list[dict[str, Any]]:
    """Every Kueue object, in apply order: Topology, flavors, cohorts, priority classes,
    ClusterQueues, LocalQueues."""
    policy = policy or KueuePolicy()
    topo = topology_object(scheme, policy)
    ordered = sorted(pools, key=lambda p: p.name)
    flavors = [(p, flavor_object(p, scheme, topo["metadata"]["name"], policy)) for p in ordered]
    objects: list[dict[str, Any]] = [topo, *(f for _, f in flavors)]
    root = dns_name(policy.root_cohort)
    cohorts = {root: _obj("Cohort", root, {}, policy)}
    for t in tenants:
        if t.cohort:
            name = dns_name(t.cohort)
            if name == root:
                raise RenderError(f"tenant {t.id}: cohort {t.cohort!r} is the root cohort's name")
            cohorts[name] = _obj("Cohort", name, {"parentName": root}, policy)
    objects += [cohorts[k] for k in sorted(cohorts)]
    tiers = sorted({tier for t in tenants for tier in t.tiers})
    objects += [
        _obj("WorkloadPriorityClass", dns_name(tier), None, policy,
             value=policy.priorities.get(tier, policy.default_priority), description=f"gpufabric tier {tier}")
        for tier in tiers
    ]  # fmt: skip
    unmatched: list[str] = []
    queues: list[dict[str, Any]] = []
    for t in sorted(tenants, key=lambda t: t.id):
        for key in t.gpu_quota or {}:
            if not any(_quota_for(TenantSpec(t.id, t.name, t.tiers, gpu_quota={key: 0}), p) is not None for p in pools):
                unmatched.append(f"tenant {t.id}: gpu_quota key {key!r} matches no GPU pool")
        flavor_specs = []
        for pool, flavor in flavors:
            nominal = _quota_for(t, pool) or 0
            res: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": nominal}
            borrowing = t.borrowing_fraction if t.borrowing_fraction is not None else policy.borrowing_fraction
            lending = t.lending_fraction if t.lending_fraction is not None else policy.lending_fraction
            if borrowing is not None and t.gpu_quota:  # no quota: borrow-only, unlimited
                res["borrowingLimit"] = math.ceil(nominal * borrowing)
            if lending is not None and nominal:
                res["lendingLimit"] = math.floor(nominal * lending)
            flavor_specs.append({"name": flavor["metadata"]["name"], "resources": [res]})
        spec: dict[str, Any] = {"cohortName": dns_name(t.cohort) if t.cohort else root, "namespaceSelector": {}}
        if flavor_specs:
            spec["resourceGroups"] = [{"coveredResources": [GPU_RESOURCE], "flavors": flavor_specs}]
        cq = dns_name(t.id)
        queues.append(_obj("ClusterQueue", cq, spec, policy))
        queues.append(_obj("LocalQueue", cq, {"clusterQueue": cq}, policy, namespace=cq))
    if unmatched:
        raise RenderError("; ".join(unmatched))
    objects += [q for q in queues if q["kind"] == "ClusterQueue"] + [q for q in queues if q["kind"] == "LocalQueue"]
    return objects


def object_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace") or "", meta["name"])
