"""The twin's state: objects by resource, one global resourceVersion counter, and the event log.

All operations are synchronous and run on the server's single event loop, so each request's
read-check-write is atomic without locks (that is also why optimistic concurrency, 409 on a stale
``resourceVersion``, behaves exactly as upstream: the check and the write cannot interleave).

Objects in the store are never mutated in place: every write builds a new dict. Events and list
answers can therefore share references with the store safely.

Nothing is persisted: a restart (or ``POST /_twin/reset``) returns to the seeded population. The
resourceVersion counter keeps rising across a reset so clients never see it go backwards; the
event history is dropped, so watches from before the reset get 410 Gone, as after an etcd
compaction.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import secrets
import string
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from simulator.kube import patches
from simulator.kube.errors import (
    ApiError,
    Cause,
    already_exists,
    bad_request,
    conflict,
    gone,
    invalid,
    not_found,
)
from simulator.kube.fields import (
    ApplyConflict,
    ManagedFields,
    dotted,
    now_rfc3339,
    record_update,
    server_side_apply,
)
from simulator.kube.fields import Path as FieldPath
from simulator.kube.resources import Resource, all_resources
from simulator.kube.selectors import Requirement, labels_match

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds
SERVER_OWNED = ("uid", "creationTimestamp", "resourceVersion", "generation", "deletionTimestamp",
                "deletionGracePeriodSeconds")
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", "kueue-system")

PATCH_MERGE = "application/merge-patch+json"
PATCH_STRATEGIC = "application/strategic-merge-patch+json"
PATCH_JSON = "application/json-patch+json"
PATCH_APPLY = "application/apply-patch+yaml"
PATCH_TYPES = (PATCH_MERGE, PATCH_STRATEGIC, PATCH_JSON, PATCH_APPLY)


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    resource: str  # Store.key_of(resource)
    obj: dict[str, Any]
    prev: dict[str, Any] | None


@dataclass
class WriteOptions:
    """Query parameters every write shares."""

    manager: str = ""
    dry_run: bool = False
    field_validation: str = "Warn"  # Ignore | Warn | Strict
    subresource: str = ""  # "" or "status"


@dataclass
class WriteResult:
    obj: dict[str, Any]
    created: bool = False
    warnings: list[str] | None = None


def _without_times(obj: dict[str, Any]) -> dict[str, Any]:
    """The object with managedFields timestamps blanked: a write that changes nothing else is a no-op."""
    meta = dict(obj.get("metadata", {}))
    meta["managedFields"] = [{k: v for k, v in e.items() if k != "time"} for e in meta.get("managedFields", [])]
    return {**obj, "metadata": meta}


def _namespace_object(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


class Store:
    def __init__(self, resources: list[Resource] | None = None, history: int = 10_000) -> None:
        self.resources = resources if resources is not None else all_resources()
        self._by_path = {(r.group, r.version, r.plural): r for r in self.resources}
        self.objects: dict[str, dict[Key, dict[str, Any]]] = {self.key_of(r): {} for r in self.resources}
        self.rv = 0
        self.events: deque[Event] = deque()
        self.history = history
        self.floor = 0  # history is complete for resourceVersions >= floor
        self.notify = asyncio.Event()
        self._seed: list[dict[str, Any]] = []

    # -- lookup -------------------------------------------------------------------------------

    @staticmethod
    def key_of(resource: Resource) -> str:
        return f"{resource.group}/{resource.plural}"

    def resource(self, group: str, version: str, plural: str) -> Resource | None:
        return self._by_path.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> Resource | None:
        return next((r for r in self.resources if r.api_version == api_version and r.kind == kind), None)

    def get(self, res: Resource, namespace: str, name: str) -> dict[str, Any]:
        obj = self.objects[self.key_of(res)].get((namespace, name))
        if obj is None:
            raise not_found(res.plural, res.group, name)
        return obj

    def select(
        self,
        res: Resource,
        namespace: str | None,
        labels: list[Requirement],
        fields: Callable[[Mapping[str, Any]], bool],
        limit: int = 0,
        continue_token: str = "",
    ) -> tuple[list[dict[str, Any]], str]:
        """Matching objects sorted by (namespace, name) and the next page's continue token."""
        start: Key | None = None
        if continue_token:
            try:
                ns, name, rv = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                start = (str(ns), str(name))
            except (ValueError, TypeError) as exc:
                raise bad_request(f"invalid continue token: {exc}") from None
            if int(rv) < self.floor:
                raise gone("The provided continue parameter is too old to display a consistent list result.")
        items = []
        for key in sorted(self.objects[self.key_of(res)]):
            if namespace is not None and key[0] != namespace:
                continue
            if start is not None and key <= start:
                continue
            obj = self.objects[self.key_of(res)][key]
            if labels_match(labels, obj["metadata"].get("labels")) and fields(obj):
                items.append(obj)
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = json.dumps([last.get("namespace", ""), last["name"], self.rv])
            return items[:limit], base64.urlsafe_b64encode(token.encode()).decode()
        return items, ""

    # -- events -------------------------------------------------------------------------------

    def _emit(self, res: Resource, type_: str, obj: dict[str, Any], prev: dict[str, Any] | None) -> None:
        self.events.append(Event(self.rv, type_, self.key_of(res), obj, prev))
        while len(self.events) > self.history:
            self.floor = self.events.popleft().rv
        self.notify.set()
        self.notify = asyncio.Event()

    def events_since(self, res: Resource, rv: int) -> list[Event]:
        if rv < self.floor:
            raise gone(f"too old resource version: {rv} ({self.floor})")
        key = self.key_of(res)
        return [e for e in self.events if e.rv > rv and e.resource == key]

    def compact(self) -> int:
        """Forget the event history (as an etcd compaction does); returns the new floor."""
        self.events.clear()
        self.floor = self.rv
        return self.floor

    # -- seeding ------------------------------------------------------------------------------

    def seed(self, objects: list[dict[str, Any]]) -> None:
        """Remember the initial population and load it (also what ``reset`` returns to)."""
        self._seed = copy.deepcopy(objects)
        self.reset()

    def reset(self) -> None:
        for bucket in self.objects.values():
            bucket.clear()
        self.compact()
        for ns in DEFAULT_NAMESPACES:
            self.insert(_namespace_object(ns), manager="kube-apiserver")
        for obj in copy.deepcopy(self._seed):  # insert() must not consume the seed: reset runs again
            managers = obj.get("metadata", {}).pop("x-twin-managers", None)
            self.insert(obj, manager="kubelet", managers=managers)
        self.compact()

    def insert(self, obj: dict[str, Any], manager: str, managers: dict[str, list[str]] | None = None) -> dict[str, Any]:
        """Store an object as given, status included, bypassing create-time resets (seeding).

        ``managers`` maps a manager name to top-level label keys it owns (e.g. GFD labels owned
        by ``nfd-master``); everything else is owned by ``manager`` as an Update.
        """
        res = self.by_kind(obj.get("apiVersion", ""), obj.get("kind", ""))
        if res is None:
            raise bad_request(f"unknown kind {obj.get('apiVersion')}/{obj.get('kind')}")
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        ns = meta.get("namespace", "") if res.namespaced else ""
        self.rv += 1
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), resourceVersion=str(self.rv),
                    generation=1)
        record_update(None, obj, manager, api_version=res.api_version)
        if managers:
            mf = ManagedFields(meta["managedFields"])
            for other, keys in managers.items():
                paths: set[FieldPath] = {("metadata", "labels", k) for k in keys}
                mf.disown(paths)
                mf.set_owned(other, "Update", "", res.api_version, paths)
            meta["managedFields"] = mf.render()
        self.objects[self.key_of(res)][(ns, meta["name"])] = obj
        self._emit(res, "ADDED", obj, None)
        return obj

    # -- writes -------------------------------------------------------------------------------

    def create(self, res: Resource, namespace: str, body: Any, opts: WriteOptions) -> WriteResult:
        body = self._check_body(res, body, namespace, None)
        meta = body["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            alphabet = string.ascii_lowercase + string.digits
            meta["name"] = meta["generateName"] + "".join(secrets.choice(alphabet) for _ in range(5))
        name = meta.get("name") or ""
        if (namespace, name) in self.objects[self.key_of(res)]:
            raise already_exists(res.plural, res.group, name)
        if res.kind == "Pod":
            body["status"] = {"phase": "Pending", "qosClass": "BestEffort"}  # PrepareForCreate resets status
        elif res.crd is not None and res.status_subresource:
            body.pop("status", None)
        return self._commit(res, namespace, name, None, body, opts, apply_fields=None)

    def update(self, res: Resource, namespace: str, name: str, body: Any, opts: WriteOptions) -> WriteResult:
        old = self.get(res, namespace, name)
        body = self._check_body(res, body, namespace, name)
        sent_rv = body["metadata"].get("resourceVersion")
        if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            raise conflict(res.plural, res.group, name)
        return self._commit(res, namespace, name, old, self._scope(res, old, body, opts.subresource), opts, None)

    def patch(
        self, res: Resource, namespace: str, name: str, patch_type: str, raw: bytes, opts: WriteOptions, force: bool
    ) -> WriteResult:
        if patch_type == PATCH_APPLY:
            return self._apply(res, namespace, name, raw, opts, force)
        if force:
            raise bad_request("force may not be specified for non-apply patch")
        if patch_type == PATCH_STRATEGIC and res.crd is not None:
            # Upstream: custom resources have no Go struct tags, so no strategic merge.
            raise ApiError(415, "UnsupportedMediaType",
                           f"the body of the request was in an unknown format - accepted media types include: "
                           f"{PATCH_JSON}, {PATCH_MERGE}, {PATCH_APPLY}")
        try:
            patch = json.loads(raw or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            raise bad_request(f"error decoding patch: {exc}") from None
        old = self.get(res, namespace, name)
        if patch_type == PATCH_JSON:
            new = patches.json_patch(old, patch)
        elif not isinstance(patch, dict):
            raise bad_request("a merge patch must be a JSON object")
        elif patch_type == PATCH_STRATEGIC:
            new = patches.strategic_merge_patch(old, patch)
        else:
            new = patches.merge_patch(old, patch)
        new = self._check_body(res, new, namespace, name)
        sent_rv = new["metadata"].get("resourceVersion")
        if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            raise conflict(res.plural, res.group, name)  # a patch carrying resourceVersion is a precondition
        return self._commit(res, namespace, name, old, self._scope(res, old, new, opts.subresource), opts, None)

    def _apply(self, res: Resource, namespace: str, name: str, raw: bytes, opts: WriteOptions,
               force: bool) -> WriteResult:
        if not opts.manager:
            raise bad_request("PATCH with apply-patch requires a fieldManager")
        try:
            applied = yaml.safe_load(raw.decode("utf-8")) if raw else None
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise bad_request(f"error decoding YAML: {exc}") from None
        if not isinstance(applied, dict):
            raise bad_request("apply configuration must be an object")
        if applied.get("apiVersion") != res.api_version or applied.get("kind") != res.kind:
            raise bad_request(f"apply configuration needs apiVersion {res.api_version!r} and kind {res.kind!r}, "
                              f"got {applied.get('apiVersion')!r} and {applied.get('kind')!r}")
        applied = self._check_body(res, applied, namespace, name)
        old = self.objects[self.key_of(res)].get((namespace, name))
        if old is None and opts.subresource:
            raise not_found(res.plural, res.group, name)
        sent_rv = applied["metadata"].get("resourceVersion")
        if sent_rv and (old is None or sent_rv != old["metadata"]["resourceVersion"]):
            raise conflict(res.plural, res.group, name)
        if opts.subresource == "status":
            scope: tuple[str, ...] | None = ("status",)
        elif res.status_subresource:
            applied.pop("status", None)  # the main resource ignores status, as upstream
            scope = None
        else:
            scope = None
        try:
            new = server_side_apply(old, applied, opts.manager, force=force, api_version=res.api_version,
                                    subresource=opts.subresource, scope=scope)
        except ApplyConflict as exc:
            n = len(exc.conflicts)
            lines = "\n".join(f'- {mgr}: {dotted(p)}' for p, mgr in exc.conflicts)
            raise ApiError(
                409, "Conflict", f"Apply failed with {n} conflict{'s' if n > 1 else ''}: "
                f"conflict with {', '.join(sorted({f'{m!r}' for _, m in exc.conflicts}))}:\n{lines}",
                name, res.plural, res.group,
                [Cause("FieldManagerConflict", f'conflict with "{mgr}" using {res.api_version}', dotted(p))
                 for p, mgr in exc.conflicts],
            ) from None
        new["apiVersion"], new["kind"] = res.api_version, res.kind
        new["metadata"]["name"] = name
        if res.namespaced:
            new["metadata"]["namespace"] = namespace
        if old is None and res.crd is not None and res.status_subresource:
            new.pop("status", None)
        return self._commit(res, namespace, name, old, new, opts, apply_fields=new["metadata"]["managedFields"])

    def delete(self, res: Resource, namespace: str, name: str, options: Any, dry_run: bool) -> dict[str, Any]:
        old = self.get(res, namespace, name)
        pre = (options or {}).get("preconditions") or {} if isinstance(options, dict) else {}
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise conflict(res.plural, res.group, name, "the ResourceVersion in the precondition "
                           f"({pre['resourceVersion']}) does not match the ResourceVersion in record "
                           f"({old['metadata']['resourceVersion']}). The object might have been modified")
        if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
            raise conflict(res.plural, res.group, name, "the UID in the precondition does not match the UID in record")
        if dry_run:
            return old
        if old["metadata"].get("finalizers"):
            # Finalizers keep the object, marked for deletion, until their owners remove them.
            if old["metadata"].get("deletionTimestamp"):
                return old
            new = copy.deepcopy(old)
            new["metadata"].update(deletionTimestamp=now_rfc3339(), deletionGracePeriodSeconds=0)
            self.rv += 1
            new["metadata"]["resourceVersion"] = str(self.rv)
            self.objects[self.key_of(res)][(namespace, name)] = new
            self._emit(res, "MODIFIED", new, old)
            return new
        return self._remove(res, namespace, name)

    def _remove(self, res: Resource, namespace: str, name: str) -> dict[str, Any]:
        old = self.objects[self.key_of(res)].pop((namespace, name))
        self.rv += 1
        gone_obj = copy.deepcopy(old)
        gone_obj["metadata"]["resourceVersion"] = str(self.rv)
        self._emit(res, "DELETED", gone_obj, old)
        if res.kind == "Namespace":
            # Namespace deletion removes its contents (the namespace controller's job upstream).
            for other in self.resources:
                if other.namespaced:
                    for key in [k for k in self.objects[self.key_of(other)] if k[0] == name]:
                        self._remove(other, key[0], key[1])
        return gone_obj

    # -- shared write path --------------------------------------------------------------------

    def _check_body(self, res: Resource, body: Any, namespace: str, name: str | None) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request(f"the body must be a {res.kind} object")
        body = copy.deepcopy(body)
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version not in (None, "", res.api_version) or kind not in (None, "", res.kind):
            raise bad_request(f"the API version in the data ({api_version}) and kind ({kind}) do not match the "
                              f"expected {res.api_version} {res.kind}")
        body["apiVersion"], body["kind"] = res.api_version, res.kind
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if name is not None:
            if meta.get("name") not in (None, "", name):
                raise bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                                  f"({name})")
            meta["name"] = name
        if res.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise bad_request(f"the namespace of the provided object ({meta.get('namespace')}) does not match "
                                  f"the namespace sent on the request ({namespace})")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        return body

    @staticmethod
    def _scope(res: Resource, old: dict[str, Any], new: dict[str, Any], subresource: str) -> dict[str, Any]:
        """The status subresource changes only status; the main resource never changes status."""
        if subresource == "status":
            out = copy.deepcopy(old)
            if "status" in new:
                out["status"] = new["status"]
            else:
                out.pop("status", None)
            return out
        if res.status_subresource:
            new = dict(new)
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        return new

    def _commit(
        self,
        res: Resource,
        namespace: str,
        name: str,
        old: dict[str, Any] | None,
        new: dict[str, Any],
        opts: WriteOptions,
        apply_fields: list[dict[str, Any]] | None,
    ) -> WriteResult:
        warnings: list[str] = []
        if res.crd is not None:
            new, unknown = res.crd.prepare(new)
            if unknown and opts.field_validation == "Strict":
                raise invalid(res.kind, res.group, name,
                              [Cause("FieldValueInvalid", "unknown field", f) for f in unknown])
            if unknown and opts.field_validation != "Ignore":
                warnings += [f'unknown field "{f}"' for f in unknown]
        causes, rule_warnings = res.validate(new, old)
        warnings += rule_warnings
        if causes:
            raise invalid(res.kind, res.group, name or new["metadata"].get("name", ""), causes)
        if res.namespaced and namespace not in {k[1] for k in self.objects["/namespaces"]} and not opts.dry_run:
            self.insert(_namespace_object(namespace), manager="kube-apiserver")  # namespaces are implicit
        meta = new["metadata"]
        for key in SERVER_OWNED:
            meta.pop(key, None)
        if old is not None:
            for key in SERVER_OWNED:
                if key in old["metadata"]:
                    meta[key] = old["metadata"][key]
            changed = {k: v for k, v in new.items() if k not in ("metadata", "status")} != {
                k: v for k, v in old.items() if k not in ("metadata", "status")}
            if changed:
                meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        else:
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1)
        manager = opts.manager
        if apply_fields is not None:
            meta["managedFields"] = apply_fields
        else:
            meta.pop("managedFields", None)
            record_update(old, new, manager, api_version=res.api_version, subresource=opts.subresource)
        if old is not None and _without_times(new) == _without_times(old):
            return WriteResult(old, warnings=warnings)  # a no-op write does not bump resourceVersion
        if opts.dry_run:
            meta["resourceVersion"] = old["metadata"]["resourceVersion"] if old is not None else ""
            return WriteResult(new, created=old is None, warnings=warnings)
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        bucket = self.objects[self.key_of(res)]
        if old is not None and meta.get("deletionTimestamp") and not meta.get("finalizers"):
            bucket[(namespace, name)] = new
            return WriteResult(self._remove(res, namespace, name), warnings=warnings)
        bucket[(namespace, name)] = new
        self._emit(res, "ADDED" if old is None else "MODIFIED", new, old)
        return WriteResult(new, created=old is None, warnings=warnings)
