"""The HTTP face of the twin: Kubernetes REST paths, auth, discovery, watch and admin endpoints.

An ASGI app (Starlette request/response types, served by uvicorn) that routes by hand: the REST
layout is regular (``/api/v1/...``, ``/apis/{group}/{version}/...``, optional
``namespaces/{ns}/``, optional ``/status``), and a router per verb would only hide that.

Every answer that is not a success is a ``Status`` object with the upstream code and reason,
including bad input to the server itself (malformed JSON, a body over 3 MiB -> 413, an unknown
content type -> 415, unknown paths -> 404) and unexpected errors (500 ``InternalError``, logged
to stderr, no traceback on the wire).

Admin endpoints live under ``/_twin/`` (same bearer token): ``GET/POST/DELETE /_twin/faults``,
``POST /_twin/reset`` (back to the seeded population), ``POST /_twin/compact`` (drop the event
history, so older resourceVersions answer 410), ``GET /_twin/state`` (counters, CEL rules the
twin cannot evaluate).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
import traceback
from collections.abc import AsyncIterator
from typing import Any

import yaml
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from simulator.kube.errors import ApiError, bad_request, conflict, status_body
from simulator.kube.faults import WRITE_METHODS, Faults
from simulator.kube.resources import Resource
from simulator.kube.selectors import Requirement, labels_match, parse_field_selector, parse_label_selector
from simulator.kube.store import PATCH_APPLY, PATCH_TYPES, Event, Store, WriteOptions, WriteResult

MAX_BODY_BYTES = 3 * 1024 * 1024  # the API server's default request body limit (3 MiB)
DEFAULT_WATCH_TIMEOUT_S = 1800
KUBE_VERSION = {"major": "1", "minor": "33", "gitVersion": "v1.33.4-gpufabric-twin", "gitCommit": "",
                "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.6",
                "compiler": "gc", "platform": "linux/amd64"}
JSON = "application/json"


def _json_response(body: Any, status: int = 200, warnings: list[str] | None = None) -> Response:
    response = Response(json.dumps(body, separators=(",", ":")), status_code=status, media_type=JSON)
    for warning in warnings or []:
        # RFC 7234 warning header, as the API server sends for unknown fields and deprecations.
        response.headers.append("Warning", f'299 - "{warning.replace(chr(34), chr(39))}"')
    return response


def _error_response(error: ApiError) -> Response:
    response = _json_response(error.status(), error.code)
    for key, value in error.headers.items():
        response.headers[key] = value
    return response


class KubeApp:
    """The ASGI application; ``store`` and ``faults`` are shared with the admin endpoints."""

    def __init__(self, store: Store, token: str, faults: Faults | None = None,
                 max_body: int = MAX_BODY_BYTES) -> None:
        self.store = store
        self.token = token
        self.faults = faults or Faults()
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        try:
            response = await self._handle(request)
        except ApiError as exc:
            response = _error_response(exc)
        except Exception as exc:  # last resort: a Status, never a traceback on the wire
            traceback.print_exc(file=sys.stderr)
            response = _error_response(ApiError(500, "InternalError",
                                                f"Internal error occurred: {type(exc).__name__}"))
        await response(scope, receive, send)

    # -- dispatch -----------------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        path = request.url.path.rstrip("/") or "/"
        if path in ("/healthz", "/readyz", "/livez"):
            return Response("ok", media_type="text/plain")
        self._authenticate(request)
        if path.startswith("/_twin/"):
            return await self._admin(request, path)
        decision = self.faults.decide(request.method, path)
        if decision.delay_s:
            await asyncio.sleep(decision.delay_s)
        if decision.error_status is not None:
            headers = {"Retry-After": str(decision.retry_after_s)} if decision.retry_after_s is not None else {}
            raise ApiError(decision.error_status, "InternalError" if decision.error_status == 500
                           else "ServiceUnavailable", "injected fault: the twin was told to fail this request",
                           headers=headers)
        if path == "/version":
            return _json_response(KUBE_VERSION)
        segments = [s for s in path.split("/") if s]
        if segments[:1] == ["api"]:
            if len(segments) == 1:
                return _json_response({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": request.url.netloc}]})
            return await self._resource_request(request, "", segments[1], segments[2:], decision.conflict)
        if segments[:1] == ["apis"]:
            if len(segments) == 1:
                return _json_response(self._group_list())
            if len(segments) == 2:
                group = next((g for g in self._group_list()["groups"] if g["name"] == segments[1]), None)
                if group is None:
                    raise self._unknown_path()
                return _json_response({"kind": "APIGroup", "apiVersion": "v1", **group})
            return await self._resource_request(request, segments[1], segments[2], segments[3:], decision.conflict)
        raise self._unknown_path()

    @staticmethod
    def _unknown_path() -> ApiError:
        return ApiError(404, "NotFound", "the server could not find the requested resource")

    def _authenticate(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), self.token.encode()):
            raise ApiError(401, "Unauthorized", "Unauthorized")

    # -- discovery ----------------------------------------------------------------------------

    def _group_list(self) -> dict[str, Any]:
        groups: dict[str, list[str]] = {}
        for r in self.store.resources:
            if r.group and r.version not in groups.setdefault(r.group, []):
                groups[r.group].append(r.version)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
             "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
            for g, vs in sorted(groups.items())]}

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources = [r for r in self.store.resources if r.group == group and r.version == version]
        if not resources:
            raise self._unknown_path()
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        items: list[dict[str, Any]] = []
        for r in resources:
            items.append({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
                          "verbs": verbs, **({"shortNames": list(r.short_names)} if r.short_names else {})})
            if r.status_subresource:
                items.append({"name": f"{r.plural}/status", "singularName": "", "namespaced": r.namespaced,
                              "kind": r.kind, "verbs": ["get", "patch", "update"]})
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": items}

    # -- resources ----------------------------------------------------------------------------

    async def _resource_request(self, request: Request, group: str, version: str, rest: list[str],
                                inject_conflict: bool) -> Response:
        if not rest:
            return _json_response(self._resource_list(group, version))
        namespace: str | None = None
        name: str | None
        if rest[0] == "namespaces" and len(rest) >= 3 and group == "" and rest[2] == "status":
            plural, name, sub = "namespaces", rest[1], "status"  # /api/v1/namespaces/{name}/status
            extra = rest[3:]
        elif rest[0] == "namespaces" and len(rest) >= 3:
            namespace, plural = rest[1], rest[2]
            name = rest[3] if len(rest) > 3 else None
            sub = rest[4] if len(rest) > 4 else ""
            extra = rest[5:]
        else:
            plural = rest[0]
            name = rest[1] if len(rest) > 1 else None
            sub = rest[2] if len(rest) > 2 else ""
            extra = rest[3:]
        res = self.store.resource(group, version, plural)
        if res is None or extra or sub not in ("", "status") or (sub and not res.status_subresource):
            raise self._unknown_path()
        if namespace is not None and not res.namespaced:
            raise self._unknown_path()
        if res.namespaced and name is not None and namespace is None:
            raise self._unknown_path()  # namespaced objects are only addressable inside a namespace
        method = request.method.upper()
        if inject_conflict and method in WRITE_METHODS:
            raise conflict(res.plural, res.group, name or "")
        ns = namespace or ""
        query = request.query_params
        if name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    return self._watch(res, namespace, query)
                return self._list(res, namespace, query)
            if method == "POST":
                body = await self._read_json(request)
                result = self.store.create(res, ns, body, self._write_options(request, ""))
                return _json_response(result.obj, 201, result.warnings)
            if method == "DELETE":
                return self._delete_collection(res, namespace, query)
            raise self._method_not_allowed(method)
        if method == "GET":
            return _json_response(self.store.get(res, ns, name))
        if method == "PUT":
            body = await self._read_json(request)
            result = self.store.update(res, ns, name, body, self._write_options(request, sub))
            return _json_response(result.obj, 200, result.warnings)
        if method == "PATCH":
            content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if content_type not in PATCH_TYPES:
                raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                               f"accepted media types include: {', '.join(PATCH_TYPES)}")
            if content_type == PATCH_APPLY and not query.get("fieldManager"):
                raise bad_request("PATCH with apply-patch requires a fieldManager")
            raw = await self._read_body(request)
            force = self._bool(query.get("force"), "force")
            result = self.store.patch(res, ns, name, content_type, raw, self._write_options(request, sub), force)
            return self._write_response(result)
        if method == "DELETE" and not sub:
            raw = await self._read_body(request)
            options = self._parse_json(raw) if raw.strip() else {}
            dry = self._dry_run(query.get("dryRun")) or (isinstance(options, dict) and bool(options.get("dryRun")))
            return _json_response(self.store.delete(res, ns, name, options, dry))
        raise self._method_not_allowed(method)

    @staticmethod
    def _write_response(result: WriteResult) -> Response:
        return _json_response(result.obj, 201 if result.created else 200, result.warnings)

    @staticmethod
    def _method_not_allowed(method: str) -> ApiError:
        return ApiError(405, "MethodNotAllowed", f"the server does not allow this method on the requested "
                        f"resource ({method})")

    @staticmethod
    def _bool(value: str | None, name: str) -> bool:
        if value in (None, "", "false", "0"):
            return False
        if value in ("true", "1"):
            return True
        raise bad_request(f"invalid value for {name}: {value!r}")

    @staticmethod
    def _dry_run(value: str | None) -> bool:
        if not value:
            return False
        if value != "All":
            raise bad_request(f"Invalid dryRun value {value!r}: supported values: \"All\"")
        return True

    def _write_options(self, request: Request, subresource: str) -> WriteOptions:
        query = request.query_params
        manager = query.get("fieldManager")
        if manager is not None and len(manager) > 128:
            raise bad_request("fieldManager: Too long: may not be more than 128 bytes")
        if not manager:
            # Upstream default for non-apply writes: the user agent up to the first '/'.
            manager = request.headers.get("user-agent", "").split("/")[0] or "unknown"
        validation = query.get("fieldValidation") or "Warn"
        if validation not in ("Ignore", "Warn", "Strict"):
            raise bad_request(f"fieldValidation: Unsupported value: {validation!r}: supported values: "
                              '"Ignore", "Warn", "Strict"')
        return WriteOptions(manager=manager, dry_run=self._dry_run(query.get("dryRun")), field_validation=validation,
                            subresource=subresource)

    async def _read_body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            raise ApiError(413, "RequestEntityTooLarge", "the request is too large: limit is 3145728 bytes")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                raise ApiError(413, "RequestEntityTooLarge", "the request is too large: limit is 3145728 bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    @staticmethod
    def _parse_json(raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise bad_request(f"the request body is not valid JSON: {exc}") from None

    async def _read_json(self, request: Request) -> Any:
        content_type = request.headers.get("content-type", JSON).split(";")[0].strip().lower()
        raw = await self._read_body(request)
        if content_type in ("application/yaml", "application/x-yaml", "text/yaml"):
            try:
                return yaml.safe_load(raw.decode("utf-8"))
            except (yaml.YAMLError, UnicodeDecodeError) as exc:
                raise bad_request(f"the request body is not valid YAML: {exc}") from None
        if content_type not in (JSON, "*/*", ""):
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                           f"accepted media types include: {JSON}, application/yaml")
        return self._parse_json(raw)

    def _selectors(self, query: Any) -> tuple[list[Requirement], Any]:
        return parse_label_selector(query.get("labelSelector")), parse_field_selector(query.get("fieldSelector"))

    def _list(self, res: Resource, namespace: str | None, query: Any) -> Response:
        labels, fields = self._selectors(query)
        limit_text = query.get("limit") or "0"
        if not limit_text.isdigit():
            raise bad_request(f"invalid limit {limit_text!r}")
        items, token = self.store.select(res, namespace, labels, fields, int(limit_text), query.get("continue") or "")
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if token:
            meta["continue"] = token
        return _json_response({"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta,
                               "items": items})

    def _delete_collection(self, res: Resource, namespace: str | None, query: Any) -> Response:
        labels, fields = self._selectors(query)
        dry = self._dry_run(query.get("dryRun"))
        items, _ = self.store.select(res, namespace, labels, fields)
        deleted = [self.store.delete(res, o["metadata"].get("namespace", ""), o["metadata"]["name"], {}, dry)
                   for o in items]
        return _json_response({"kind": f"{res.kind}List", "apiVersion": res.api_version,
                               "metadata": {"resourceVersion": str(self.store.rv)}, "items": deleted})

    # -- watch --------------------------------------------------------------------------------

    def _watch(self, res: Resource, namespace: str | None, query: Any) -> Response:
        labels, fields = self._selectors(query)
        timeout_text = query.get("timeoutSeconds") or str(DEFAULT_WATCH_TIMEOUT_S)
        if not timeout_text.isdigit():
            raise bad_request(f"invalid timeoutSeconds {timeout_text!r}")
        timeout = int(timeout_text)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        rv_text = query.get("resourceVersion") or ""
        store = self.store
        initial: list[dict[str, Any]] = []
        expired: ApiError | None = None
        if rv_text in ("", "0"):
            initial, _ = store.select(res, namespace, labels, fields)
            cursor = store.rv
        elif not rv_text.isdigit():
            raise bad_request(f"invalid resourceVersion {rv_text!r}")
        else:
            cursor = int(rv_text)
            if cursor < store.floor:
                expired = ApiError(410, "Expired", f"too old resource version: {cursor} ({store.floor})")

        def matches(obj: dict[str, Any] | None) -> bool:
            if obj is None:
                return False
            if namespace is not None and obj["metadata"].get("namespace") != namespace:
                return False
            return labels_match(labels, obj["metadata"].get("labels")) and bool(fields(obj))

        def translate(event: Event) -> str | None:
            now, before = matches(event.obj), matches(event.prev)
            if event.type == "ADDED":
                return "ADDED" if now else None
            if event.type == "DELETED":
                return "DELETED" if before else None
            if now and before:
                return "MODIFIED"
            if now:
                return "ADDED"  # started matching the selector
            return "DELETED" if before else None  # stopped matching

        def line(type_: str, obj: dict[str, Any]) -> bytes:
            return json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"

        async def stream() -> AsyncIterator[bytes]:
            nonlocal cursor
            if expired is not None:
                yield line("ERROR", expired.status())
                return
            for obj in initial:
                yield line("ADDED", obj)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                notify = store.notify
                try:
                    events = store.events_since(res, cursor)
                except ApiError as exc:  # history compacted under a running watch
                    yield line("ERROR", exc.status())
                    return
                for event in events:
                    cursor = event.rv
                    type_ = translate(event)
                    if type_ is not None:
                        yield line(type_, event.obj)
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(notify.wait(), remaining)
                except TimeoutError:
                    pass
            if bookmarks:
                yield line("BOOKMARK", {"kind": res.kind, "apiVersion": res.api_version,
                                        "metadata": {"resourceVersion": str(max(cursor, store.rv))}})

        return StreamingResponse(stream(), media_type=JSON)

    # -- admin --------------------------------------------------------------------------------

    async def _admin(self, request: Request, path: str) -> Response:
        method = request.method.upper()
        if path == "/_twin/faults":
            if method == "GET":
                return _json_response(self.faults.describe())
            if method == "POST":
                self.faults.configure(self._parse_json(await self._read_body(request)))
                return _json_response(self.faults.describe())
            if method == "DELETE":
                self.faults.clear()
                return _json_response(self.faults.describe())
        elif path == "/_twin/reset" and method == "POST":
            self.faults.clear()
            self.store.reset()
            return _json_response({"resourceVersion": str(self.store.rv)})
        elif path == "/_twin/compact" and method == "POST":
            return _json_response({"floor": str(self.store.compact())})
        elif path == "/_twin/state" and method == "GET":
            return _json_response({
                "resourceVersion": str(self.store.rv),
                "floor": str(self.store.floor),
                "objects": {k: len(v) for k, v in self.store.objects.items()},
                "unsupportedCelRules": [rule for r in self.store.resources if r.crd
                                        for rule in r.crd.unsupported_rules],
                "faults": self.faults.describe(),
            })
        else:
            raise self._unknown_path()
        raise self._method_not_allowed(method)


__all__ = ["MAX_BODY_BYTES", "KubeApp", "status_body"]
