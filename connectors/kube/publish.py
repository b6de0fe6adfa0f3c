"""Apply a publish plan to a cluster: node labels, node extended resources, Kueue objects.

Everything goes through server-side apply as our own field manager, so what we own is exactly
what managedFields says we own: the current state is read from there (not guessed from key
names), a label we stop publishing is removed by the API server, and a label someone else set
is never in our apply and never touched. Immutable Kueue fields are handled by the renderer
(versioned names); here stale objects carrying our managed-by label are deleted after the
objects that referenced them moved.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from connectors.kube.client import RESOURCE_PATHS, apply, list_nodes
from core.publish.diff import NodeDiff, NodeState, diff_nodes
from core.publish.kueue import API_VERSION, MANAGED_BY, object_key

KUEUE_GROUP, KUEUE_VERSION = API_VERSION.split("/")
# Deletion order: referrers before what they refer to.
DELETE_ORDER = ("LocalQueue", "ClusterQueue", "WorkloadPriorityClass", "Cohort", "ResourceFlavor", "Topology")
_IGNORED_META = ("resourceVersion", "managedFields", "generation", "uid", "creationTimestamp")


class BlastRadiusExceeded(Exception):
    """The plan would change more nodes than allowed; nothing was written."""


class PublishError(Exception):
    """The cluster refused a write; says which object and why (no traceback for the user)."""


@dataclass(frozen=True)
class ObjectChange:
    kind: str
    namespace: str
    name: str
    change: str  # created | changed | deleted | unchanged
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None


@dataclass
class Plan:
    nodes_total: int
    node_diffs: list[NodeDiff]
    objects: list[dict[str, Any]]
    object_changes: list[ObjectChange]
    guarded_nodes: int  # nodes whose already-published state changes (what the guard counts)
    max_fraction: float
    applied: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def changed_nodes(self) -> list[NodeDiff]:
        return [d for d in self.node_diffs if d.changed]

    @property
    def guard_exceeded(self) -> bool:
        return self.nodes_total > 0 and self.guarded_nodes / self.nodes_total > self.max_fraction

    def counts(self) -> dict[str, int]:
        labels = [c for d in self.changed_nodes for c in d.labels]
        objs = [c.change for c in self.object_changes]
        return {
            "nodes_total": self.nodes_total,
            "nodes_changed": len(self.changed_nodes),
            "nodes_guarded": self.guarded_nodes,
            "nodes_missing": sum(1 for d in self.node_diffs if d.missing),
            "labels_added": sum(1 for c in labels if c.change == "added"),
            "labels_changed": sum(1 for c in labels if c.change == "changed"),
            "labels_removed": sum(1 for c in labels if c.change == "removed"),
            "resources_changed": sum(len(d.resources) for d in self.changed_nodes),
            "objects_created": objs.count("created"),
            "objects_changed": objs.count("changed"),
            "objects_deleted": objs.count("deleted"),
        }


def _owned(entries: Sequence[Any] | None, manager: str, subresource: str, path: Sequence[str]) -> set[str]:
    keys: set[str] = set()
    for e in entries or ():
        if e.manager != manager or e.operation != "Apply" or (e.subresource or "") != subresource:
            continue
        node: Any = e.fields_v1 or {}
        for part in path:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        keys.update(k.removeprefix("f:") for k in node if k.startswith("f:"))
    return keys


def read_state(nodes: Sequence[client.V1Node], manager: str) -> dict[str, NodeState]:
    """Per node, the labels and capacity entries our field manager owns, with their values."""
    out: dict[str, NodeState] = {}
    for n in nodes:
        meta: Any = n.metadata
        labels = meta.labels or {}
        entries = meta.managed_fields
        own_labels = _owned(entries, manager, "", ("f:metadata", "f:labels"))
        own_res = _owned(entries, manager, "status", ("f:status", "f:capacity"))
        capacity = (n.status.capacity or {}) if n.status else {}
        out[str(meta.name)] = NodeState(
            labels={k: labels[k] for k in own_labels if k in labels},
            resources={k: str(capacity[k]) for k in own_res if k in capacity},
        )
    return out


def node_facts(nodes: Sequence[client.V1Node]) -> dict[str, dict[str, str]]:
    """node name -> its labels (the GFD product and count make the GPU pools)."""
    out: dict[str, dict[str, str]] = {}
    for n in nodes:
        meta: Any = n.metadata
        out[str(meta.name)] = dict(meta.labels or {})
    return out


def _strip(obj: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _IGNORED_META}
    out["metadata"] = meta
    return out


def _plural(kind: str) -> tuple[str, bool]:
    return RESOURCE_PATHS[(API_VERSION, kind)]


def list_managed_objects(api: client.ApiClient, manager: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Kueue objects carrying our managed-by label, keyed by (kind, namespace, name)."""
    custom = client.CustomObjectsApi(api)
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for kind in DELETE_ORDER:
        plural, _ = _plural(kind)
        selector = f"{MANAGED_BY}={manager}"
        # the cluster-wide list also covers namespaced kinds (LocalQueues in every namespace)
        items: Any = custom.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, label_selector=selector)
        for item in items.get("items", []):
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", API_VERSION)
            out[object_key(item)] = item
    return out


def plan(
    api: client.ApiClient,
    labels: Mapping[str, Mapping[str, str]],
    resources: Mapping[str, Mapping[str, str]],
    objects: Sequence[dict[str, Any]],
    *,
    field_manager: str,
    max_fraction: float,
) -> Plan:
    """Read the cluster and work out every change, without writing. Kueue objects are checked
    with a server dry-run apply, so the diff shows defaults and validation errors as the
    server would apply them."""
    nodes = list_nodes(api)
    state = read_state(nodes, field_manager)
    diffs = diff_nodes(state, labels, resources)
    guarded = sum(1 for d in diffs if d.changed and d.had_managed_state)
    existing = list_managed_objects(api, field_manager)
    changes: list[ObjectChange] = []
    wanted = set()
    for obj in objects:
        key = object_key(obj)
        wanted.add(key)
        before = existing.get(key)
        try:
            after = apply(api, obj, field_manager=field_manager, force=True, dry_run=True)
        except ApiException as exc:
            raise PublishError(f"{key[0]} {key[2]}: the server refused it: {_reason(exc)}") from None
        if before is None:
            changes.append(ObjectChange(*key, "created", None, _strip(after)))
        elif _strip(before) != _strip(after):
            changes.append(ObjectChange(*key, "changed", _strip(before), _strip(after)))
        else:
            changes.append(ObjectChange(*key, "unchanged", _strip(before), _strip(after)))
    for key, obj in existing.items():
        if key not in wanted:
            changes.append(ObjectChange(*key, "deleted", _strip(obj), None))
    return Plan(len(nodes), diffs, list(objects), changes, guarded, max_fraction)


def _reason(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.reason)
    except (ValueError, TypeError):
        return f"HTTP {exc.status} {exc.reason}"


def execute(
    api: client.ApiClient,
    p: Plan,
    labels: Mapping[str, Mapping[str, str]],
    resources: Mapping[str, Mapping[str, str]],
    *,
    field_manager: str,
    force: bool = False,
) -> Plan:
    """Write the plan: Kueue objects (new versions first), node labels and resources, then
    delete stale objects. Refuses before any write when the blast-radius guard trips."""
    if p.guard_exceeded and not force:
        raise BlastRadiusExceeded(
            f"refusing to change {p.guarded_nodes} of {p.nodes_total} nodes "
            f"({p.guarded_nodes / p.nodes_total:.0%} > {p.max_fraction:.0%} allowed); re-run with --force"
        )
    try:
        for obj in p.objects:
            apply(api, obj, field_manager=field_manager, force=True)
        for d in p.changed_nodes:
            if d.labels:
                body = {"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": d.node, "labels": dict(labels.get(d.node, {}))}}  # fmt: skip
                # force: only our own keys are in the body, so it can only take back those.
                apply(api, body, field_manager=field_manager, force=True)
            if d.resources:
                res = dict(resources.get(d.node, {}))
                body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": d.node},
                        "status": {"capacity": res, "allocatable": res}}  # fmt: skip
                apply(api, body, field_manager=field_manager, force=True, subresource="status")
        custom = client.CustomObjectsApi(api)
        stale = [c for c in p.object_changes if c.change == "deleted"]
        for kind in DELETE_ORDER:
            for c in stale:
                if c.kind != kind:
                    continue
                plural, namespaced = _plural(kind)
                try:
                    if namespaced:
                        custom.delete_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, c.namespace, plural, c.name)
                    else:
                        custom.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, c.name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
    except ApiException as exc:
        raise PublishError(f"the cluster refused a write: {_reason(exc)}") from None
    p.applied = True
    return p


def render_diff(p: Plan) -> list[str]:
    """The human diff: per node, labels added/changed/removed; objects created/changed/deleted."""
    lines: list[str] = []
    for d in p.node_diffs:
        if d.missing:
            lines.append(f"node {d.node}: not in the cluster (skipped)")
            continue
        for c in (*d.labels, *d.resources):
            sign = {"added": "+", "removed": "-", "changed": "~"}[c.change]
            what = f"{c.key}={c.after}" if c.change == "added" else (
                f"{c.key} (was {c.before})" if c.change == "removed" else f"{c.key}: {c.before} -> {c.after}")
            lines.append(f"node {d.node}: {sign} {what}")
    for oc in p.object_changes:
        if oc.change != "unchanged":
            where = f"{oc.namespace}/" if oc.namespace else ""
            lines.append(f"{oc.kind} {where}{oc.name}: {oc.change}")
    counts = p.counts()
    lines.append(
        f"{counts['nodes_changed']} of {counts['nodes_total']} nodes change (+{counts['labels_added']} "
        f"~{counts['labels_changed']} -{counts['labels_removed']} labels, {counts['resources_changed']} resources); "
        f"objects: {counts['objects_created']} created, {counts['objects_changed']} changed, "
        f"{counts['objects_deleted']} deleted"
    )
    return lines
