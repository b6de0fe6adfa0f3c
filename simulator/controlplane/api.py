"""A small REST client for the control plane's API server (httpx, admin client certificate).

Why not the ``kubernetes`` package here: the node agent and node registration need exactly a few
verbs plus a resumable watch, at a rate of hundreds of requests a second for ~1,000 nodes, and a
thread-safe pooled httpx client does that with less overhead. Tests and production code talk to
the API server through their own clients.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

JSON = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


class ApiError(RuntimeError):
    """A non-2xx answer; keeps the status code and the API server's Status message."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.status = status
        try:
            payload = json.loads(body)
            self.reason = str(payload.get("reason", ""))
            message = str(payload.get("message", body))
        except ValueError:
            self.reason = ""
            message = body
        self.message = message
        super().__init__(f"{method} {path}: HTTP {status}: {message}")


def tls_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """Verify against our CA and present a client certificate (httpx 0.28+ takes an SSLContext;
    its old ``cert=`` argument is silently ignored there, which made requests anonymous)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None and key is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


class Api:
    """Pooled, thread-safe JSON client for one API server."""

    def __init__(self, server: str, ca: Path, cert: Path, key: Path, *, pool: int = 32, timeout: float = 30.0) -> None:
        self.server = server
        limits = httpx.Limits(max_connections=pool, max_keepalive_connections=pool)
        self._client = httpx.Client(
            base_url=server,
            verify=tls_context(ca, cert, key),
            limits=limits,
            timeout=httpx.Timeout(timeout, connect=10.0),
            headers={"Accept": "application/json", "User-Agent": "gpufabric-controlplane/1"},
        )

    def close(self) -> None:
        self._client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        ok: tuple[int, ...] = (),
    ) -> JSON:
        content = None
        headers = {}
        if body is not None:
            content = body if isinstance(body, (str, bytes)) else json.dumps(body)
            headers["Content-Type"] = content_type
        response = self._client.request(method, path, content=content, params=params, headers=headers)
        if response.status_code in ok:
            return {}
        if response.status_code >= 300:
            raise ApiError(method, path, response.status_code, response.text)
        return response.json() if response.content else {}

    def get(self, path: str, **params: Any) -> JSON:
        return self.request("GET", path, params=params or None)

    def post(self, path: str, body: Any, **params: Any) -> JSON:
        return self.request("POST", path, body=body, params=params or None)

    def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH, **params: Any) -> JSON:
        return self.request("PATCH", path, body=body, params=params or None, content_type=content_type)

    def delete(self, path: str, body: Any = None, **params: Any) -> JSON:
        return self.request("DELETE", path, body=body, params=params or None, ok=(404,))

    def list_all(self, path: str, **params: Any) -> tuple[list[JSON], str]:
        """Every item of a collection (paged with ``limit``/``continue``) and the list's resourceVersion."""
        items: list[JSON] = []
        cont = ""
        while True:
            query = {**params, "limit": 500}
            if cont:
                query["continue"] = cont
            page = self.get(path, **query)
            items.extend(page.get("items") or [])
            cont = page.get("metadata", {}).get("continue") or ""
            if not cont:
                return items, str(page.get("metadata", {}).get("resourceVersion", ""))

    def watch(self, path: str, resource_version: str, *, timeout_seconds: int = 300, **params: Any) -> Iterator[JSON]:
        """Watch events from ``resource_version`` until the server closes the stream.

        Yields the decoded events (``{"type": ..., "object": ...}``); an ``ERROR`` event (410 Gone
        when the version is too old) is yielded too, and the caller relists.
        """
        query = {
            **params,
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
        }
        with self._client.stream(
            "GET", path, params=query, timeout=httpx.Timeout(timeout_seconds + 30, connect=10.0)
        ) as response:
            if response.status_code >= 300:
                raise ApiError("WATCH", path, response.status_code, response.read().decode(errors="replace"))
            for line in response.iter_lines():
                if line.strip():
                    yield json.loads(line)


def ensure_namespace(api: Api, name: str) -> None:
    """Create namespace ``name`` unless it is there already."""
    try:
        api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except ApiError as exc:
        if exc.status != 409:
            raise
