"""Liveness and readiness for the background controllers that serve nothing else (the orphan reaper,
the budget reconciler, burst admission): a loop ``tick``s its :class:`Heartbeat` once per
iteration, and a tiny HTTP server answers the kubelet's probes from it.

- ``/healthz`` (liveness): 200 while the loop has ticked within ``stale_periods`` periods (never
  less than ``min_window_s``, so a slow pass over a big cluster is not a hang); 503 once it has
  not, so the kubelet restarts a wedged loop. A pass that *failed* still ticks: an unreachable API
  server or warehouse is not cured by a restart, and the loop logs and retries it.
- ``/readyz`` (readiness): 200 when live and the latest pass succeeded (a follower of burst
  admission counts as ready: waiting for the Lease is its job).

HTTP rather than a heartbeat file and an exec probe: the containers keep a read-only root
filesystem with no volume to write to, and an httpGet probe costs the kubelet a request, not a
Python start-up every period.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger("gpufabric.health")

DEFAULT_STALE_PERIODS = 3.0
DEFAULT_MIN_WINDOW_S = 30.0


@dataclass
class Heartbeat:
    """When the loop last ticked and whether its last pass worked. Thread-safe; ``clock`` is
    monotonic seconds (injectable for tests)."""

    period_s: float
    stale_periods: float = DEFAULT_STALE_PERIODS
    min_window_s: float = DEFAULT_MIN_WINDOW_S
    clock: Callable[[], float] = time.monotonic
    _started: float = field(init=False)
    _last_tick: float | None = field(default=None, init=False)
    _last_ok: bool = field(default=False, init=False)
    _ticks: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        if not (self.period_s > 0 and self.stale_periods >= 1 and self.min_window_s >= 0):
            raise ValueError(
                f"heartbeat needs period_s > 0, stale_periods >= 1, min_window_s >= 0; got {self.period_s}, "
                f"{self.stale_periods}, {self.min_window_s}"
            )
        self._started = self.clock()

    @property
    def window_s(self) -> float:
        return max(self.stale_periods * self.period_s, self.min_window_s)

    def tick(self, ok: bool = True) -> None:
        with self._lock:
            self._last_tick = self.clock()
            self._last_ok = ok
            self._ticks += 1

    def live(self) -> tuple[bool, str]:
        """(alive, why). Before the first tick the start-up counts as one: a loop that never
        gets going is stale one window after start."""
        with self._lock:
            since = self._last_tick if self._last_tick is not None else self._started
            age = self.clock() - since
            what = "last tick" if self._last_tick is not None else "started, no tick yet"
        if age > self.window_s:
            return False, f"stale: {what} {age:.1f}s ago (window {self.window_s:.1f}s)"
        return True, f"ok: {what} {age:.1f}s ago ({self._ticks} ticks)"

    def ready(self) -> tuple[bool, str]:
        alive, why = self.live()
        if not alive:
            return False, why
        with self._lock:
            if self._last_tick is None:
                return False, "not ready: no pass yet"
            if not self._last_ok:
                return False, "not ready: the last pass failed"
        return True, why


def serve(heartbeat: Heartbeat, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Answer ``/healthz`` and ``/readyz`` on ``host:port`` (all interfaces by default: the kubelet
    probes the pod IP) from a daemon thread; returns the server (``shutdown()`` it to stop; port 0
    picks a free one, see ``server_address``)."""

    class Probe(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server finds handlers by this name
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                ok, why = heartbeat.live()
            elif path == "/readyz":
                ok, why = heartbeat.ready()
            else:
                ok, why = False, "not found: /healthz or /readyz"
            body = (why + "\n").encode()
            self.send_response(200 if ok else 404 if why.startswith("not found") else 503)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # probes every few seconds: not worth a log line
            pass

    server = ThreadingHTTPServer((host, port), Probe)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    log.info("health probes on %s:%d (/healthz, /readyz; stale after %.1fs)", host, server.server_address[1],
             heartbeat.window_s)  # fmt: skip
    return server
