"""A fault-injecting HTTP proxy in front of the real API server: what only a fake can do.

``start_proxy(plane)`` serves plain HTTP on 127.0.0.1 (a kubeconfig for it, no credentials) and
forwards every request, verb, query string, body and headers as sent, to the plane's API server
over TLS as the plane's admin (client certificate of the plane's CA). ``Impersonate-*`` headers
pass through, so a test can act as another user and RBAC judges it. Answers come back unchanged
(status, headers, body); watch answers are streamed chunk by chunk as the API server writes them.

On top of that, the rules of :mod:`simulator.kube.faults` (set from the test thread with
``set_faults``) answer instead of the API server: 5xx/429 with ``Retry-After``, 409 Conflict on
writes, an expired watch (HTTP 200, one ``ERROR`` event with a 410 ``Expired`` Status, as the API
server sends for a too-old resourceVersion), or a delay. ``drop_watches`` cuts open watch
streams mid-body, like a network failure or an API server restart. Every injected answer is the
``Status`` object the API server would write, so clients branch on it exactly as they would in
production.

Why a thread and not a process: tests and benchmarks set faults and read counters many times a
test; a direct call is simpler and faster than an admin endpoint. Why a real socket: controllers
a test starts as subprocesses (and kubectl) use the same kubeconfig.

Built on uvicorn (server) and httpx (client), both already used by the project; the ASGI app is
written by hand because a proxy needs the raw path, the raw query string, repeated headers, and
a way to end a response without its terminating chunk, none of which a framework router adds.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import logging
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs

import httpx
import uvicorn

from simulator.controlplane.api import tls_context
from simulator.controlplane.cluster import ControlPlane, write_kubeconfig
from simulator.kube.faults import WRITE_METHODS, Faults

log = logging.getLogger(__name__)

# RFC 9110 section 7.6.1: meaningful for one connection only, never forwarded.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                        "te", "trailer", "transfer-encoding", "upgrade"})
# The proxy authenticates upstream as the admin; a client's own credentials would change who it is.
# Host and length are the proxy's to set on its own request.
REQUEST_HEADERS_DROPPED = HOP_BY_HOP | {"host", "content-length", "authorization"}
RESPONSE_HEADERS_DROPPED = HOP_BY_HOP | {"content-length"}
# A request that does not name these gets none: httpx would add its own defaults (and a gzip
# answer or a "python-httpx" default field manager the client never asked for).
HTTPX_DEFAULTS = ("accept", "accept-encoding", "user-agent")

UPSTREAM_TIMEOUT = httpx.Timeout(90.0, connect=5.0)  # the API server itself gives up after 60 s
WATCH_TIMEOUT = httpx.Timeout(None, connect=5.0)  # a quiet watch is not a dead one
SHUTDOWN_GRACE_S = 3
# kube-apiserver keeps idle connections 90 s; closing them sooner races clients reusing them
# (urllib3 does not retry a POST or PATCH whose connection the server just closed).
KEEP_ALIVE_S = 90
START_TIMEOUT_S = 30.0

JSON_TYPE = b"application/json"


class Forwarded(NamedTuple):
    """One request the proxy passed to the API server: method and target (path and query as sent)."""

    method: str
    target: str

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def query(self) -> str:
        return self.target.partition("?")[2]


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    """A ``meta/v1 Status`` as the API server writes it."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return json.dumps(body, separators=(",", ":")).encode()


def _injected_error(code: int, retry_after_s: int | None) -> bytes:
    # The reason each code carries in k8s.io/apimachinery/pkg/api/errors (NewInternalError,
    # NewServiceUnavailable, NewTimeoutError, NewTooManyRequests).
    reasons = {429: ("TooManyRequests", "Too many requests, please try again later."),
               503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
               504: ("Timeout", "the server was unable to return a response in the time allotted")}
    reason, message = reasons.get(code, ("InternalError", "Internal error occurred"))
    details = {"retryAfterSeconds": retry_after_s} if retry_after_s is not None else None
    return status_body(code, reason, f"{message} (injected by the fault proxy)", details)


def _resource_of(path: str) -> tuple[str, str, str]:
    """(resource, group, name) of a REST path, for a Conflict message like the API server's."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"]:
        group, rest = (parts[1] if len(parts) > 1 else ""), parts[3:]
    else:
        return "", "", ""
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        rest = rest[2:]  # /namespaces/{ns}/{resource}/...; a Namespace itself stays as is
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    return resource, group, name


def _conflict(path: str, body: bytes) -> bytes:
    resource, group, name = _resource_of(path)
    if not name:  # a create: the object's name is in the body
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            name = str(json.loads(body)["metadata"]["name"])
    qualified = f"{resource}.{group}" if group else resource
    message = (f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
               "please apply your changes to the latest version and try again")
    details = {k: v for k, v in {"name": name, "group": group, "kind": resource}.items() if v}
    return status_body(409, "Conflict", message, details)


def _expired_event(query: dict[str, list[str]]) -> bytes:
    rv = (query.get("resourceVersion") or ["0"])[0] or "0"
    status = json.loads(status_body(410, "Expired", f"too old resource version: {rv} (injected by the fault proxy)"))
    return json.dumps({"type": "ERROR", "object": status}, separators=(",", ":")).encode() + b"\n"


class _Dropped(Exception):
    """Raised in the app to make uvicorn close a watch's connection without ending the body."""


class _QuietDrops(logging.Filter):
    """uvicorn logs every exception out of the app; a dropped watch is one we asked for."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], _Dropped))


_END, _DROP, _GONE = object(), object(), object()


@dataclass(eq=False)
class _Watch:
    path: str
    task: asyncio.Task[Any]  # the request's own task: cancelled to cut the stream
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    dropped: bool = False


class _App:
    """The ASGI application; runs on the proxy thread's event loop."""

    def __init__(self, upstream: str, ssl_context: Any, faults: Faults) -> None:
        self.upstream = upstream.rstrip("/")
        self.ssl_context = ssl_context
        self.faults = faults
        self.watches: set[_Watch] = set()
        self.forwarded: list[Forwarded] = []
        self.lock = threading.Lock()  # guards ``forwarded`` (read from the test thread)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.client: httpx.AsyncClient | None = None
        self.closing: asyncio.Event | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            try:
                await self._handle(scope, receive, send)
            except (_Dropped, asyncio.CancelledError):
                raise
            except Exception as exc:  # a bug of ours: a Status, never a traceback on the wire
                log.exception("fault proxy: %s %s failed", scope.get("method"), scope.get("path"))
                await _respond(send, 500, status_body(500, "InternalError", f"fault proxy error: {exc!r}"))

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.loop = asyncio.get_running_loop()
                self.closing = asyncio.Event()
                # No connection cap: every open watch holds a connection for as long as it lasts.
                self.client = httpx.AsyncClient(
                    verify=self.ssl_context, timeout=UPSTREAM_TIMEOUT, follow_redirects=False,
                    limits=httpx.Limits(max_connections=None, max_keepalive_connections=32))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.client is not None:
                    await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert self.client is not None and self.closing is not None
        method: str = scope["method"].upper()
        path: str = scope["path"]
        raw_query: bytes = scope.get("query_string") or b""
        query = parse_qs(raw_query.decode("latin-1"), keep_blank_values=True)
        body = await _read_body(receive)
        if body is None:
            return  # the client went away before it finished sending
        # As the API server reads it (Go's strconv.ParseBool): true, True, TRUE, t, T, 1.
        watch = method == "GET" and (query.get("watch") or [""])[0].lower() in ("true", "t", "1")
        decision = self.faults.decide(method, path.rstrip("/") or "/", watch=watch)
        if decision.delay_s and await self._client_left_during(decision.delay_s, receive):
            return  # the client gave up waiting: the request never reaches the API server
        if self.closing.is_set():
            await _respond(send, 503, status_body(503, "ServiceUnavailable", "the fault proxy is shutting down"))
            return
        if decision.error_status is not None:
            headers = [(b"retry-after", str(decision.retry_after_s).encode())] \
                if decision.retry_after_s is not None else []
            await _respond(send, decision.error_status, _injected_error(decision.error_status,
                                                                         decision.retry_after_s), headers)
            return
        if decision.conflict and method in WRITE_METHODS:
            await _respond(send, 409, _conflict(path, body))
            return
        if decision.expire_watch:
            await _respond(send, 200, _expired_event(query))
            return

        raw_path = (scope.get("raw_path") or path.encode()).decode("latin-1")
        target = raw_path + ("?" + raw_query.decode("latin-1") if raw_query else "")
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]
                   if k.decode("latin-1").lower() not in REQUEST_HEADERS_DROPPED]
        request = self.client.build_request(method, self.upstream + target, headers=headers, content=body,
                                            timeout=WATCH_TIMEOUT if watch else UPSTREAM_TIMEOUT)
        sent = {name.lower() for name, _ in headers}
        for name in HTTPX_DEFAULTS:
            if name not in sent:
                request.headers.pop(name, None)
        with self.lock:
            self.forwarded.append(Forwarded(method, target))
        try:
            response = await self.client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            await _respond(send, 504, status_body(504, "Timeout", f"the fault proxy got no answer from the API "
                                                  f"server at {self.upstream}: {type(exc).__name__}"))
            return
        except httpx.TransportError as exc:
            await _respond(send, 502, status_body(502, "ServiceUnavailable", f"the fault proxy could not reach "
                                                  f"the API server at {self.upstream}: {type(exc).__name__}: {exc}"))
            return
        out_headers = [(k.lower(), v) for k, v in response.headers.raw if k.decode("latin-1").lower()
                       not in RESPONSE_HEADERS_DROPPED]
        if watch and response.status_code == 200:
            await self._stream(send, receive, response, out_headers, path)
            return
        try:
            content = b"".join([chunk async for chunk in response.aiter_raw()])
        except httpx.HTTPError as exc:
            await _respond(send, 502, status_body(502, "ServiceUnavailable", f"the API server at {self.upstream} "
                                                  f"broke off its answer: {type(exc).__name__}: {exc}"))
            return
        finally:
            await response.aclose()
        await _respond(send, response.status_code, content, out_headers, content_type=None)

    async def _client_left_during(self, seconds: float, receive: Any) -> bool:
        """Wait out an injected delay; cut short by shutdown, or by the client hanging up."""
        assert self.closing is not None
        closing = asyncio.create_task(self.closing.wait())
        gone = asyncio.create_task(_disconnected(receive))
        try:
            done, _ = await asyncio.wait({closing, gone}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (closing, gone):
                task.cancel()
            await asyncio.gather(closing, gone, return_exceptions=True)
        return gone in done

    async def _stream(self, send: Any, receive: Any, response: httpx.Response,
                      headers: list[tuple[bytes, bytes]], path: str) -> None:
        """Relay a watch: each chunk as it arrives; end as the API server ends, or cut when dropped."""
        task = asyncio.current_task()
        assert task is not None
        watch = _Watch(path, task)
        self.watches.add(watch)

        async def pump() -> None:
            try:
                async for chunk in response.aiter_raw():
                    watch.queue.put_nowait(chunk)
                watch.queue.put_nowait(_END)
            except httpx.HTTPError:
                watch.queue.put_nowait(_DROP)  # the API server cut us off: so do we

        async def disconnect() -> None:
            await _disconnected(receive)
            watch.queue.put_nowait(_GONE)

        tasks = [asyncio.create_task(pump()), asyncio.create_task(disconnect())]
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            while True:
                item = await watch.queue.get()
                if isinstance(item, bytes):
                    if item:
                        await send({"type": "http.response.body", "body": item, "more_body": True})
                elif item is _END:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
                elif item is _GONE:
                    return
                else:
                    raise _Dropped(path)
        except asyncio.CancelledError:
            # Cancelled by ``drop`` (not by shutdown): cut the connection, whatever it was waiting
            # on, a client that stopped reading included.
            if watch.dropped:
                raise _Dropped(path) from None
            raise
        finally:
            self.watches.discard(watch)  # before any await: ``drop`` never cancels a closing watch
            try:
                for helper in tasks:
                    helper.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await response.aclose()
            finally:
                watch.closed.set()

    async def drop(self, path_glob: str | None) -> int:
        chosen = [w for w in self.watches if path_glob is None or fnmatch.fnmatchcase(w.path, path_glob)]
        for watch in chosen:
            watch.dropped = True
            watch.task.cancel()
        await asyncio.gather(*(w.closed.wait() for w in chosen))
        return len(chosen)

    async def shut(self) -> None:
        assert self.closing is not None
        self.closing.set()
        await self.drop(None)


async def _read_body(receive: Any) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _disconnected(receive: Any) -> None:
    """Returns once the client has hung up (the request body has been read by then)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _respond(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None,
                   *, content_type: bytes | None = JSON_TYPE) -> None:
    out = list(headers or [])
    if content_type is not None:
        out.append((b"content-type", content_type))
    out.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class FaultProxy:
    """A running proxy; see the module docstring. Thread-safe; stop it with :meth:`stop`."""

    def __init__(self, app: _App, server: uvicorn.Server, thread: threading.Thread, port: int,
                 kubeconfig: Path) -> None:
        self._app = app
        self._server = server
        self._thread = thread
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.kubeconfig = kubeconfig
        self._stopped = False

    # -- faults -------------------------------------------------------------------------------

    def set_faults(self, rules: Any) -> None:
        """Replace the rules: one rule (dict or ``FaultSpec``), a list of them, or ``{"rules": [...]}``.
        Raises ``InvalidFaultRule`` (a ``ValueError`` naming the field) and keeps the old rules."""
        self._app.faults.set_rules(rules)

    def clear_faults(self) -> None:
        """No rules, and ``fired`` back to zero."""
        self._app.faults.clear()
        self._app.faults.reset_counts()

    def describe_faults(self) -> dict[str, Any]:
        return self._app.faults.describe()

    @property
    def fired(self) -> dict[str, int]:
        """How many requests each kind of fault answered since the last ``clear_faults``:
        ``5xx`` (429 included), ``conflict``, ``delayed``, ``expired``."""
        return self._app.faults.counts()

    # -- watches ------------------------------------------------------------------------------

    def drop_watches(self, path_glob: str | None = None) -> int:
        """Cut every open watch whose path matches (all if ``None``) mid-stream, as a broken
        connection would; returns how many, once they are closed."""
        return self._call(self._app.drop(path_glob))

    def open_watches(self) -> list[str]:
        """Paths of the watches being relayed now (opened once the API server answered 200)."""
        return self._call(self._paths())

    async def _paths(self) -> list[str]:
        return sorted(w.path for w in self._app.watches)

    def _call(self, coroutine: Any) -> Any:
        loop = self._app.loop
        if self._stopped or loop is None:
            coroutine.close()
            raise RuntimeError("the fault proxy is stopped")
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout=60)

    # -- counting -----------------------------------------------------------------------------

    @property
    def requests(self) -> list[Forwarded]:
        """Every request forwarded to the API server so far, in order (a copy). Injected answers
        (5xx, 409, expired watches) never reach the API server and are not listed."""
        with self._app.lock:
            return list(self._app.forwarded)

    def request_counts(self) -> Counter[tuple[str, str]]:
        """``(method, path)`` -> how many times it was forwarded (query strings ignored)."""
        return Counter((r.method, r.path) for r in self.requests)

    # -- lifecycle ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Cut open watches, answer delayed requests with 503, stop serving, join the thread."""
        if self._stopped:
            return
        if self._thread.is_alive() and self._app.loop is not None:
            with contextlib.suppress(RuntimeError, TimeoutError):
                self._call(self._app.shut())
        self._stopped = True
        self._server.should_exit = True
        self._thread.join(timeout=SHUTDOWN_GRACE_S + 30)
        if self._thread.is_alive():
            raise RuntimeError(f"the fault proxy on port {self.port} did not stop")
        self.kubeconfig.unlink(missing_ok=True)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_filter_installed = False


def start_proxy(plane: ControlPlane, *, port: int = 0) -> FaultProxy:
    """Serve a fault proxy for ``plane``'s API server on ``127.0.0.1:port`` (0 = any free port)."""
    global _filter_installed
    if not _filter_installed:
        logging.getLogger("uvicorn.error").addFilter(_QuietDrops())
        _filter_installed = True
    app = _App(plane.server, tls_context(plane.ca_file, plane.admin_cert, plane.admin_key), Faults())
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="on", loop="asyncio", ws="none", log_config=None, log_level="warning",
                            access_log=False, server_header=False, date_header=False,
                            timeout_graceful_shutdown=SHUTDOWN_GRACE_S, timeout_keep_alive=KEEP_ALIVE_S)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"fault-proxy-{port}",
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(timeout=5)
            sock.close()
            raise RuntimeError(f"the fault proxy on port {port} did not start")
        time.sleep(0.01)
    kubeconfig = write_kubeconfig(plane.workdir / "kubeconfigs" / f"fault-proxy-{port}.kubeconfig",
                                  f"http://127.0.0.1:{port}", user="fault-proxy", credentials={})
    return FaultProxy(app, server, thread, port, kubeconfig)


__all__ = ["FaultProxy", "Forwarded", "start_proxy", "status_body"]
