"""The whole desired state of one publish, from a topology model, node facts and tenants (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from core.publish.kueue import KueuePolicy, Pool, TenantSpec, render_kueue
from core.publish.labels import LabelScheme, LabelValue, domain_values, node_labels, pools_from_nodes
from core.topology.model import TopologyModel


@dataclass(frozen=True)
class DesiredState:
    labels: dict[str, dict[str, str]]  # node -> managed labels (empty: remove ours)
    resources: dict[str, dict[str, str]]  # node -> extended resources
    objects: list[dict[str, Any]]  # Kueue objects in apply order
    values: list[LabelValue]  # every label value with its readable domain name
    incomplete: list[str]  # compute hosts left out of every pool (a level is missing)
    # node -> managed annotations (empty: remove ours); applied with the labels, in one SSA
    annotations: dict[str, dict[str, str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"labels": self.labels, "resources": self.resources, "objects": self.objects,
                "annotations": self.annotations}  # fmt: skip

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> DesiredState:
        return DesiredState(
            {k: dict(v) for k, v in doc["labels"].items()},
            {k: dict(v) for k, v in doc["resources"].items()},
            list(doc["objects"]),
            [],
            [],
            # publishes recorded before annotations were managed have none: rolling back to one
            # removes ours, as it would have had none then
            {k: dict(v) for k, v in (doc.get("annotations") or {}).items()},
        )

    def with_node_metadata(self, patches: Mapping[str, Mapping[str, Any]]) -> DesiredState:
        """This state plus each node's labels and annotations from ``patches`` (node -> a partial
        Node as :func:`core.affinity.render.node_patch` renders it). A patched node absent from the
        plan joins it with those alone; a node without a patch keeps what it had."""
        labels = {n: dict(v) for n, v in self.labels.items()}
        annotations = {n: dict(v) for n, v in self.annotations.items()}
        for node, patch in sorted(patches.items()):
            meta = patch.get("metadata") or {}
            labels.setdefault(node, {}).update({str(k): str(v) for k, v in (meta.get("labels") or {}).items()})
            extra = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
            if extra:
                annotations.setdefault(node, {}).update(extra)
        return replace(self, labels=labels, annotations=annotations)


def desired_state(
    model: TopologyModel,
    scheme: LabelScheme,
    node_facts: Mapping[str, Mapping[str, str]],
    tenants: Sequence[TenantSpec],
    policy: KueuePolicy | None = None,
) -> DesiredState:
    """``node_facts`` is node name -> its current labels (the GFD product and count make pools)."""
    pools_by_host = pools_from_nodes(node_facts.items())
    plans = node_labels(model, scheme, pools_by_host)
    members = Counter(plan.labels[scheme.pool_key] for plan in plans.values() if scheme.pool_key in plan.labels)
    pools = []
    for name, count in sorted(members.items()):
        host = next(h for h, p in pools_by_host.items() if p == name)
        facts = node_facts[host]
        pools.append(Pool(name, facts["nvidia.com/gpu.product"], int(facts["nvidia.com/gpu.count"]), count))
    return DesiredState(
        labels={h: dict(p.labels) for h, p in plans.items()},
        resources={h: dict(p.resources) for h, p in plans.items()},
        objects=render_kueue(scheme, pools, tenants, policy),
        values=sorted(domain_values(model, scheme).values(), key=lambda v: (v.key, v.value)),
        incomplete=sorted(h for h, p in plans.items() if not p.complete),
    )
