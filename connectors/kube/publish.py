"""Apply a publish plan to a cluster: node labels and annotations, node extended resources, Kueue objects.

Everything goes through server-side apply as our own field manager, so what we own is exactly
what managedFields says we own: the current state is read from there (not guessed from key
names), a label we stop publishing is removed by the API server, and a label someone else set
is never in our apply and never touched. Annotations (the GPU-NIC map, docs/affinity.md) go in the
same apply of the node's metadata as its labels, so they are owned, diffed and removed the same
way. Immutable Kueue fields are handled by the renderer (versioned names); here stale objects
carrying our managed-by label are deleted after the objects that referenced them moved.

Two things a real API server insists on that a lenient fake let slide: a LocalQueue can only be
created in a namespace that exists (we create a tenant's missing namespace, never delete one),
and an object being deleted (a namespace, or a Kueue object held by Kueue's in-use finalizer)
cannot be re-created until it is gone, so the publish waits for it. A dry run is the server's:
every write is sent with ``dryRun=All``, so what the server would refuse is refused now.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from connectors.kube.client import RESOURCE_PATHS, apply, object_path, send
from connectors.kube.pods import list_nodes_raw
from core.publish.diff import NodeDiff, NodeState, diff_nodes
from core.publish.kueue import API_VERSION, MANAGED_BY, object_key

KUEUE_GROUP, KUEUE_VERSION = API_VERSION.split("/")
# Deletion order: referrers before what they refer to.
DELETE_ORDER = ("LocalQueue", "ClusterQueue", "WorkloadPriorityClass", "Cohort", "ResourceFlavor", "Topology")
_IGNORED_META = ("resourceVersion", "managedFields", "generation", "uid", "creationTimestamp")
# How long a publish waits for an object being deleted before it re-creates it. Kueue lifts its
# in-use finalizer within seconds once nothing refers to the object; a namespace goes once the
# namespace controller has emptied it.
DELETION_WAIT_S = 60.0
# Nodes written at once. Each node's writes are independent of every other's, and one at a time
# a 512-node publish spends most of its time waiting on round trips; 8 in flight keeps the API
# server busy without crowding other clients out of its priority level.
NODE_WRITERS = 8
# Quantities in Kueue's quota specs (ClusterQueue and Cohort resourceGroups).
QUANTITY_FIELDS = frozenset({"nominalQuota", "borrowingLimit", "lendingLimit"})


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
    # objects still being deleted that this publish re-creates: it waits for them to go first
    recreate: set[tuple[str, str, str]] = field(default_factory=set)

    @property
    def changed_nodes(self) -> list[NodeDiff]:
        return [d for d in self.node_diffs if d.changed]

    @property
    def guard_exceeded(self) -> bool:
        return self.nodes_total > 0 and self.guarded_nodes / self.nodes_total > self.max_fraction

    def counts(self) -> dict[str, int]:
        labels = [c for d in self.changed_nodes for c in d.labels]
        objs = [c.change for c in self.object_changes if c.kind != "Namespace"]
        return {
            "nodes_total": self.nodes_total,
            "nodes_changed": len(self.changed_nodes),
            "nodes_guarded": self.guarded_nodes,
            "nodes_missing": sum(1 for d in self.node_diffs if d.missing),
            "labels_added": sum(1 for c in labels if c.change == "added"),
            "labels_changed": sum(1 for c in labels if c.change == "changed"),
            "labels_removed": sum(1 for c in labels if c.change == "removed"),
            "resources_changed": sum(len(d.resources) for d in self.changed_nodes),
            "annotations_changed": sum(len(d.annotations) for d in self.changed_nodes),
            "objects_created": objs.count("created"),
            "objects_changed": objs.count("changed"),
            "objects_deleted": objs.count("deleted"),
            "namespaces_created": sum(1 for c in self.object_changes if c.kind == "Namespace"),
        }


NodeLike: TypeAlias = client.V1Node | Mapping[str, Any]  # an alias on kubernetes 36 (untyped) and 37


def _node_parts(n: NodeLike) -> tuple[str, dict[str, str], list[dict[str, Any]], dict[str, str], dict[str, str]]:
    """(name, labels, managedFields as JSON dicts, status.capacity, annotations) of a typed or a raw Node.

    Raw JSON (``list_nodes_raw``) is what :func:`plan` reads: the client's model classes cost
    about 2 s of CPU for 512 nodes with their managedFields, the JSON about 0.1 s.
    """
    if isinstance(n, Mapping):
        meta, status = n.get("metadata") or {}, n.get("status") or {}
        return (str(meta["name"]), dict(meta.get("labels") or {}), list(meta.get("managedFields") or []),
                dict(status.get("capacity") or {}), dict(meta.get("annotations") or {}))  # fmt: skip
    tm: Any = n.metadata
    entries = [{"manager": e.manager, "operation": e.operation, "subresource": e.subresource, "fieldsV1": e.fields_v1}
               for e in tm.managed_fields or ()]  # fmt: skip
    capacity = (n.status.capacity or {}) if n.status else {}
    return str(tm.name), dict(tm.labels or {}), entries, dict(capacity), dict(tm.annotations or {})


def _owned(entries: Sequence[Mapping[str, Any]], manager: str, subresource: str, path: Sequence[str]) -> set[str]:
    keys: set[str] = set()
    for e in entries:
        if e.get("manager") != manager or e.get("operation") != "Apply" or (e.get("subresource") or "") != subresource:
            continue
        node: Any = e.get("fieldsV1") or {}
        for part in path:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        keys.update(k.removeprefix("f:") for k in node if k.startswith("f:"))
    return keys


def read_state(nodes: Sequence[NodeLike], manager: str) -> dict[str, NodeState]:
    """Per node, the labels, annotations and capacity entries our field manager owns, with their values."""
    out: dict[str, NodeState] = {}
    for n in nodes:
        name, labels, entries, capacity, annotations = _node_parts(n)
        own_labels = _owned(entries, manager, "", ("f:metadata", "f:labels"))
        own_notes = _owned(entries, manager, "", ("f:metadata", "f:annotations"))
        own_res = _owned(entries, manager, "status", ("f:status", "f:capacity"))
        out[name] = NodeState(
            labels={k: labels[k] for k in own_labels if k in labels},
            resources={k: str(capacity[k]) for k in own_res if k in capacity},
            annotations={k: annotations[k] for k in own_notes if k in annotations},
        )
    return out


def node_facts(nodes: Sequence[NodeLike]) -> dict[str, dict[str, str]]:
    """node name -> its labels (the GFD product and count make the GPU pools)."""
    return {parts[0]: parts[1] for parts in map(_node_parts, nodes)}


def canonical_quantities(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with Kueue's quota quantities as the strings the API server stores.

    A quota is a ``resource.Quantity`` (int-or-string in the CRD). The renderer writes numbers;
    Kueue's controller rewrites every object it updates with Go's canonical string form, so a
    number applied again looks like a change every publish (and flips the stored value back and
    forth). Sent as the canonical string, an unchanged quota is unchanged.
    """

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, Mapping):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if key in QUANTITY_FIELDS and isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    out: dict[str, Any] = walk(obj)
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


def namespace_object(name: str, manager: str) -> dict[str, Any]:
    """A tenant namespace we create because a LocalQueue needs it (labelled as ours)."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {MANAGED_BY: manager}}}


def _read(api: client.ApiClient, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The object as the server holds it now, or None when there is none."""
    response = send(api, "GET", object_path(dict(obj)))
    if response.status == 404:
        return None
    if not response.ok:
        raise response.error()
    found: dict[str, Any] = response.json()
    return found


def _terminating(obj: Mapping[str, Any] | None) -> bool:
    return bool(obj and (obj.get("metadata") or {}).get("deletionTimestamp"))


def _describe(kind: str, namespace: str, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _namespace_changes(
    api: client.ApiClient, objects: Sequence[Mapping[str, Any]], manager: str
) -> tuple[list[ObjectChange], list[str]]:
    """The namespaces our namespaced objects need that are missing or being deleted."""
    changes: list[ObjectChange] = []
    warnings: list[str] = []
    for ns in sorted({str(o["metadata"]["namespace"]) for o in objects if o["metadata"].get("namespace")}):
        wanted = namespace_object(ns, manager)
        try:
            found = _read(api, wanted)
        except ApiException as exc:
            raise PublishError(f"namespace {ns}: cannot read it: {_reason(exc)}") from None
        if found is None:
            changes.append(ObjectChange("Namespace", "", ns, "created", None, wanted))
        elif _terminating(found):
            changes.append(ObjectChange("Namespace", "", ns, "created", _strip(found), wanted))
            warnings.append(f"namespace {ns} is being deleted: the publish waits for it to go, then creates it again")
    return changes, warnings


def plan(
    api: client.ApiClient,
    labels: Mapping[str, Mapping[str, str]],
    resources: Mapping[str, Mapping[str, str]],
    objects: Sequence[dict[str, Any]],
    *,
    field_manager: str,
    max_fraction: float,
    annotations: Mapping[str, Mapping[str, str]] | None = None,
) -> Plan:
    """Read the cluster and work out every change, without writing. Kueue objects are checked
    with a server dry-run apply, so the diff shows defaults and validation errors as the
    server would apply them."""
    objects = [canonical_quantities(o) for o in objects]
    nodes = list_nodes_raw(api)
    state = read_state(nodes, field_manager)
    diffs = diff_nodes(state, labels, resources, annotations)
    guarded = sum(1 for d in diffs if d.changed and d.had_managed_state)
    existing = list_managed_objects(api, field_manager)
    changes, warnings = _namespace_changes(api, objects, field_manager)
    new_namespaces = {c.name for c in changes}
    recreate: set[tuple[str, str, str]] = set()
    wanted = set()
    for obj in objects:
        key = object_key(obj)
        wanted.add(key)
        before = existing.get(key)
        if before is not None and _terminating(before):
            recreate.add(key)
            warnings.append(f"{_describe(*key)} is being deleted (finalizers {before['metadata'].get('finalizers')}):"
                            " the publish waits for it to go, then creates it again")  # fmt: skip
        if key[1] in new_namespaces:
            # The server cannot even dry-run an object into a namespace that does not exist.
            warnings.append(f"{_describe(*key)}: its namespace is created by this publish, so the server checks the"
                            " object only when it is applied")  # fmt: skip
            changes.append(ObjectChange(*key, "created", None, _strip(obj)))
            continue
        try:
            after = apply(api, obj, field_manager=field_manager, force=True, dry_run=True)
        except ApiException as exc:
            raise PublishError(f"{_describe(*key)}: the server refused it: {_reason(exc)}") from None
        if before is None or key in recreate:
            changes.append(ObjectChange(*key, "created", None, _strip(after)))
        elif _strip(before) != _strip(after):
            changes.append(ObjectChange(*key, "changed", _strip(before), _strip(after)))
        else:
            changes.append(ObjectChange(*key, "unchanged", _strip(before), _strip(after)))
    for key, obj in existing.items():
        if key in wanted:
            continue
        if _terminating(obj):  # deleted before; Kueue lifts its finalizer once nothing refers to it
            warnings.append(f"{_describe(*key)} is already being deleted")
        else:
            changes.append(ObjectChange(*key, "deleted", _strip(obj), None))
    return Plan(len(nodes), diffs, list(objects), changes, guarded, max_fraction, warnings=warnings,
                recreate=recreate)  # fmt: skip


def _reason(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.reason)
    except (ValueError, TypeError):
        return f"HTTP {exc.status} {exc.reason}"


def _wait_gone(api: client.ApiClient, obj: Mapping[str, Any], timeout: float) -> bool:
    """Wait while the object is being deleted (an apply before it is gone would be deleted with
    it); True when it is gone, False when it exists and is not being deleted (any more)."""
    meta = obj["metadata"]
    what = _describe(obj["kind"], meta.get("namespace") or "", meta["name"])
    deadline = time.monotonic() + timeout
    while True:
        found = _read(api, obj)
        if found is None:
            return True
        if not _terminating(found):
            return False
        if time.monotonic() > deadline:
            raise PublishError(f"{what} is still being deleted after {timeout:.0f} s (finalizers "
                               f"{found['metadata'].get('finalizers')}); publish again once it is gone")  # fmt: skip
        time.sleep(0.2)


def _write_nodes(
    api: client.ApiClient,
    diffs: Sequence[NodeDiff],
    labels: Mapping[str, Mapping[str, str]],
    resources: Mapping[str, Mapping[str, str]],
    field_manager: str,
    dry_run: bool,
    workers: int,
    annotations: Mapping[str, Mapping[str, str]],
) -> None:
    """Each changed node's labels and annotations (one metadata apply), then its extended
    resources on the status subresource. The first refusal stops the nodes not yet started and
    is raised, naming the node and the write."""
    failed = threading.Event()

    def one(d: NodeDiff) -> None:
        if failed.is_set():
            return
        what = "labels"
        try:
            if d.metadata_changed:
                # Every label and annotation we want on the node, changed or not: SSA drops from
                # us whatever our apply no longer carries, which is how ours are removed.
                body = {"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": d.node, "labels": dict(labels.get(d.node, {})),
                                     "annotations": dict(annotations.get(d.node, {}))}}  # fmt: skip
                # force: only our own keys are in the body, so it can only take back those.
                apply(api, body, field_manager=field_manager, force=True, dry_run=dry_run)
            if d.resources:
                what = "status"
                res = dict(resources.get(d.node, {}))
                body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": d.node},
                        "status": {"capacity": res, "allocatable": res}}  # fmt: skip
                apply(api, body, field_manager=field_manager, force=True, subresource="status", dry_run=dry_run)
        except ApiException as exc:
            failed.set()
            raise PublishError(f"the cluster refused Node {d.node} ({what}): {_reason(exc)}") from None

    with cf.ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="publish") as pool:
        futures = [pool.submit(one, d) for d in diffs]
        errors = [f.exception() for f in futures]
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first


def execute(
    api: client.ApiClient,
    p: Plan,
    labels: Mapping[str, Mapping[str, str]],
    resources: Mapping[str, Mapping[str, str]],
    *,
    field_manager: str,
    force: bool = False,
    dry_run: bool = False,
    deletion_wait_s: float = DELETION_WAIT_S,
    workers: int = NODE_WRITERS,
    annotations: Mapping[str, Mapping[str, str]] | None = None,
) -> Plan:
    """Write the plan: missing namespaces, Kueue objects (new versions first), node labels and
    resources (``workers`` nodes at a time), then delete stale objects. Refuses before any write
    when the blast-radius guard trips. ``dry_run`` sends every node write and delete with the
    server's ``dryRun=All`` (the Kueue objects were dry-run by :func:`plan`): the server
    validates and admits each, stores nothing, and the first refusal is raised; the guard is not
    enforced (nothing is written)."""
    if p.guard_exceeded and not force and not dry_run:
        raise BlastRadiusExceeded(
            f"refusing to change {p.guarded_nodes} of {p.nodes_total} nodes "
            f"({p.guarded_nodes / p.nodes_total:.0%} > {p.max_fraction:.0%} allowed); re-run with --force"
        )
    what = "a write"
    try:
        for c in p.object_changes:
            if c.kind == "Namespace" and c.after is not None:
                what = _describe("Namespace", "", c.name)
                # created meanwhile by someone else: theirs, left as it is
                if dry_run or _wait_gone(api, c.after, deletion_wait_s):
                    apply(api, dict(c.after), field_manager=field_manager, dry_run=dry_run)
        if not dry_run:
            # An object the server's dry run found unchanged is not sent again: a no-op apply
            # still costs a request each, every publish.
            unchanged = {(c.kind, c.namespace, c.name) for c in p.object_changes if c.change == "unchanged"}
            for obj in p.objects:
                key = object_key(obj)
                if key in unchanged:
                    continue
                what = _describe(*key)
                if key in p.recreate:
                    _wait_gone(api, obj, deletion_wait_s)
                apply(api, obj, field_manager=field_manager, force=True)
        _write_nodes(api, p.changed_nodes, labels, resources, field_manager, dry_run, workers, annotations or {})
        custom = client.CustomObjectsApi(api)
        stale = [c for c in p.object_changes if c.change == "deleted"]
        server_dry_run = "All" if dry_run else None
        for kind in DELETE_ORDER:
            for c in stale:
                if c.kind != kind:
                    continue
                what = f"deleting {_describe(c.kind, c.namespace, c.name)}"
                plural, namespaced = _plural(kind)
                try:
                    if namespaced:
                        custom.delete_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, c.namespace, plural, c.name,
                                                               dry_run=server_dry_run)  # fmt: skip
                    else:
                        custom.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, c.name,
                                                            dry_run=server_dry_run)  # fmt: skip
                except ApiException as exc:
                    if exc.status != 404:
                        raise
    except ApiException as exc:
        raise PublishError(f"the cluster refused {what}: {_reason(exc)}") from None
    p.applied = not dry_run
    return p


def render_diff(p: Plan) -> list[str]:
    """The human diff: per node, labels added/changed/removed; objects created/changed/deleted."""
    lines: list[str] = []
    for d in p.node_diffs:
        if d.missing:
            lines.append(f"node {d.node}: not in the cluster (skipped)")
            continue
        for kind, c in (*(("", c) for c in (*d.labels, *d.resources)), *(("annotation ", c) for c in d.annotations)):
            sign = {"added": "+", "removed": "-", "changed": "~"}[c.change]
            before, after = _short(c.before), _short(c.after)
            what = f"{c.key}={after}" if c.change == "added" else (
                f"{c.key} (was {before})" if c.change == "removed" else f"{c.key}: {before} -> {after}")
            lines.append(f"node {d.node}: {sign} {kind}{what}")
    for oc in p.object_changes:
        if oc.change != "unchanged":
            where = f"{oc.namespace}/" if oc.namespace else ""
            lines.append(f"{oc.kind} {where}{oc.name}: {oc.change}")
    lines.extend(f"warning: {w}" for w in p.warnings)
    counts = p.counts()
    lines.append(
        f"{counts['nodes_changed']} of {counts['nodes_total']} nodes change (+{counts['labels_added']} "
        f"~{counts['labels_changed']} -{counts['labels_removed']} labels, {counts['resources_changed']} resources"
        + (f", {counts['annotations_changed']} annotations" if counts["annotations_changed"] else "") + "); "
        f"objects: {counts['objects_created']} created, {counts['objects_changed']} changed, "
        f"{counts['objects_deleted']} deleted"
        + (f"; {counts['namespaces_created']} namespace(s) created" if counts["namespaces_created"] else "")
    )
    return lines


DIFF_VALUE_CHARS = 80  # an annotation (the GPU-NIC map) runs to hundreds of characters: the diff shows its start


def _short(value: str | None) -> str | None:
    if value is None or len(value) <= DIFF_VALUE_CHARS:
        return value
    return value[: DIFF_VALUE_CHARS - 1] + "…"
