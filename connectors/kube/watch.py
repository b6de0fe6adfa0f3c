"""List + watch one kind of object and keep a local copy current (a small client-go reflector).

Why not poll: a controller that re-lists every minute acts on a cluster up to a minute old, and
each poll costs the API server a full list. A watch delivers each change within milliseconds,
for the price of one list at start-up and after each interruption.

The protocol, as upstream's reflector does it:

* **list** (paged) → the objects and the list's ``resourceVersion``;
* **watch** from that resourceVersion (``allowWatchBookmarks``, a server-side ``timeoutSeconds``
  and a client read timeout a little longer, so a silently dead connection is noticed); each
  ``ADDED``/``MODIFIED``/``DELETED`` updates the copy, ``BOOKMARK`` only moves the resourceVersion;
* a watch the server **ends normally** (its timeout) is resumed from the last resourceVersion,
  no re-list;
* **410 Gone** (the resourceVersion was compacted away: an ``ERROR`` event or an HTTP 410) →
  re-list at once;
* anything else (a dropped connection, a 5xx, an ``ERROR`` event of another code, a body that is
  not JSON) → wait with exponential backoff and jitter, then re-list. The copy keeps its last
  state meanwhile: consumers act on slightly stale data rather than on none.

Objects stay plain JSON dicts (``_preload_content=False``), as in :mod:`connectors.kube.pods`:
the client's model classes cost more than the watch itself.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from connectors.kube.pods import _list_raw

log = logging.getLogger("gpufabric.kube.watch")

ListCall = Callable[..., Any]  # a generated list method, e.g. CoreV1Api(api).list_node


class Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): only a re-list recovers."""


class WatchFailed(Exception):
    """The server ended the watch with an ERROR event other than 410."""


@dataclass
class WatchStats:
    lists: int = 0  # successful lists (the first one included)
    events: int = 0  # ADDED / MODIFIED / DELETED applied
    expired: int = 0  # 410 Gone answers
    failures: int = 0  # lists or watches that failed and were retried after a backoff
    last_error: str = ""


def _describe(exc: BaseException) -> str:
    """One line; an ``ApiException``'s str() carries every response header, which logs need not."""
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason or ''}".strip()
    return f"{type(exc).__name__}: {exc}"[:300]


class ListWatch:
    """A local copy of the objects ``list_call`` lists, kept current by a watch on a thread.

    ``on_change`` is called (on the watch thread) after each list and each applied event; it
    should be cheap (set a flag): a publish that relabels 500 nodes is 500 events. ``transform``
    trims each object before it is kept (as client-go's TransformFunc): a real Node carries its
    image list and managedFields, tens of KiB that a consumer of labels never reads.
    """

    def __init__(
        self,
        list_call: ListCall,
        *,
        name: str,
        on_change: Callable[[], None] | None = None,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        watch_timeout_s: int = 300,
        read_margin_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
    ) -> None:
        self.list_call = list_call
        self.name = name
        self.on_change = on_change
        self.transform = transform
        self.watch_timeout_s = watch_timeout_s
        self.read_margin_s = read_margin_s
        self.connect_timeout_s = connect_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.stats = WatchStats()
        self.synced = threading.Event()  # set after the first successful list
        self._objects: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    # -- consumers ------------------------------------------------------------------------------

    def snapshot(self) -> list[dict[str, Any]]:
        """The objects as last seen (the dicts are shared: do not modify them)."""
        with self._lock:
            return list(self._objects.values())

    @property
    def watching(self) -> bool:
        """A watch stream is open now (between a list and the next interruption)."""
        return self._response is not None

    def start(self) -> ListWatch:
        self._thread = threading.Thread(target=self.run, name=f"watch-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop now: a read blocked on the open watch is woken by shutting its socket down."""
        self._stop.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # urllib3 >= 2.3: wakes a read blocked in another thread
            except Exception:  # already closed or released: nothing left to wake
                pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> None:
        """List, watch, repeat until :meth:`stop`; never raises."""
        failures = 0
        while not self._stop.is_set():
            try:
                version = self._list()
                while not self._stop.is_set():
                    started = time.monotonic()
                    version, applied = self._watch(version)
                    if applied or time.monotonic() - started >= 1.0:
                        failures = 0  # a watch that worked: the next failure starts the backoff afresh
                    elif not self._stop.is_set():
                        # A watch the server (or a proxy) closes at once, again and again, must
                        # not become a busy loop of requests.
                        failures += 1
                        self._stop.wait(self._backoff(failures))
            except Expired as exc:
                self.stats.expired += 1
                failures += 1  # re-list at once, unless the attempt before failed too
                log.info("%s watch expired (%s); re-listing", self.name, exc)
                if failures > 1:
                    self._stop.wait(self._backoff(failures - 1))
            except Exception as exc:  # a dropped connection, a 5xx, garbage: back off, re-list
                if self._stop.is_set():
                    break
                failures += 1
                delay = self._backoff(failures)
                self.stats.failures += 1
                self.stats.last_error = _describe(exc)
                log.warning("%s watch failed (%s); re-listing in %.1fs", self.name, self.stats.last_error, delay)
                self._stop.wait(delay)

    def _backoff(self, failures: int) -> float:
        ceiling = min(self.backoff_max_s, self.backoff_initial_s * 2 ** (failures - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # jitter: replicas must not re-list in step

    def _key(self, obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace")
        return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))

    def _list(self) -> str:
        try:
            items, version = _list_raw(self.list_call)
        except ApiException as exc:
            if exc.status == 410:  # a paged list whose continue token expired
                raise Expired(_describe(exc)) from None
            raise
        if self.transform is not None:
            items = [self.transform(o) for o in items]
        with self._lock:
            self._objects = {self._key(o): o for o in items}
        if self.stats.lists:
            log.info("%s re-listed: %d objects at resourceVersion %s", self.name, len(items), version)
        self.stats.lists += 1
        self.synced.set()
        self._changed()
        return version

    def _watch(self, version: str) -> tuple[str, int]:
        """One watch request from ``version``; returns where to resume and how many events it applied."""
        applied = 0
        try:
            response = self.list_call(
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout_s,
                _preload_content=False,
                _request_timeout=(self.connect_timeout_s, self.watch_timeout_s + self.read_margin_s),
            )
        except ApiException as exc:
            if exc.status == 410:
                raise Expired(_describe(exc)) from None
            raise
        self._response = response
        complete = False
        try:
            if self._stop.is_set():
                return version, applied
            buffer = b""
            for chunk in response.stream(amt=None, decode_content=True):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        version, counted = self._apply(json.loads(line), version)
                        applied += counted
                if self._stop.is_set():
                    break
            if buffer.strip() and not self._stop.is_set():
                version, counted = self._apply(json.loads(buffer), version)
                applied += counted
            complete = not self._stop.is_set()
            return version, applied
        finally:
            self._response = None
            if not complete:
                response.close()  # unread data or a dead socket: not for reuse
            response.release_conn()

    def _apply(self, event: Any, version: str) -> tuple[str, int]:
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            raise ValueError(f"not a watch event: {str(event)[:200]}")
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            code, message = obj.get("code"), obj.get("message", "")
            if code == 410:
                raise Expired(f"HTTP 410 Gone: {message}")
            raise WatchFailed(f"ERROR event {code} {obj.get('reason', '')}: {message}")
        new_version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        if kind == "BOOKMARK":
            return new_version, 0
        if self.transform is not None:
            obj = self.transform(obj)
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                self._objects[self._key(obj)] = obj
            elif kind == "DELETED":
                self._objects.pop(self._key(obj), None)
            else:
                raise ValueError(f"unknown watch event type {kind!r}")
        self.stats.events += 1
        self._changed()
        return new_version, 1

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


def watch_nodes(api: client.ApiClient, on_change: Callable[[], None] | None = None, **options: Any) -> ListWatch:
    """Every node of the cluster, kept current (not started: call ``.start()``)."""
    return ListWatch(client.CoreV1Api(api).list_node, name="node", on_change=on_change, **options)


def node_labels_and_allocatable(node: dict[str, Any]) -> dict[str, Any]:
    """A ``transform`` for consumers of node labels and allocatable resources only."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    return {"metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {},
                         "resourceVersion": meta.get("resourceVersion")},
            "status": {"allocatable": status.get("allocatable") or {}}}  # fmt: skip
