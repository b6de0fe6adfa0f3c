"""Read DCGM series from a Prometheus server's HTTP API (``/api/v1/query_range``).

A range is cut into chunks so no request asks for more than ``max_points`` points per series
(Prometheus refuses more than 11,000) and no answer grows unbounded; each chunk is retried with
backoff on timeouts, connection errors and 5xx/429 answers (Prometheus under load), and not on
4xx (a bad query stays bad). Chunks are half-open ``[start, end)`` on the step grid, so adjacent
chunks never return the same timestamp twice.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import httpx
import orjson

from core.telemetry import ParsedSamples, parse_matrix

DEFAULT_QUERY = '{__name__=~"DCGM_FI_.*|DCGM_EXP_.*|gpufabric_workload_.*"}'
MAX_POINTS_PER_SERIES = 10_000


class PrometheusError(RuntimeError):
    """The server refused the query or kept failing; the message says which and why."""


@dataclass(frozen=True)
class Chunk:
    start: float  # epoch seconds, on the step grid
    end: float  # inclusive last evaluation time


def chunks(start: datetime, end: datetime, step_s: float, *, max_points: int = MAX_POINTS_PER_SERIES,
           max_span_s: float = 3600.0) -> Iterator[Chunk]:
    """Evaluation times ``start, start+step, ... < end`` in chunks of at most ``max_points``."""
    if step_s <= 0:
        raise ValueError("step must be positive")
    t0 = math.ceil(start.timestamp() / step_s) * step_s
    t_end = end.timestamp()
    per_chunk = max(1, min(max_points, int(max_span_s // step_s) or 1))
    t = t0
    while t < t_end:
        n = min(per_chunk, math.ceil((t_end - t) / step_s))
        last = t + (n - 1) * step_s
        if last >= t_end:
            last -= step_s
        if last < t:
            break
        yield Chunk(t, last)
        t = last + step_s


@dataclass
class PrometheusClient:
    url: str
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    transport: httpx.BaseTransport | None = None

    def _get(self, client: httpx.Client, path: str, params: dict[str, str]) -> dict:
        last: str = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = client.get(path, params=params, timeout=self.timeout_s)
            except httpx.TimeoutException:
                last = f"no answer within {self.timeout_s:g}s"
                continue
            except httpx.TransportError as err:
                last = f"{type(err).__name__}: {err}"
                continue
            if response.status_code >= 500 or response.status_code == 429:
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            try:
                body = orjson.loads(response.content)
            except orjson.JSONDecodeError:
                raise PrometheusError(f"{self.url}{path}: HTTP {response.status_code}, not JSON") from None
            if response.status_code != 200 or body.get("status") != "success":
                kind, error = body.get("errorType", ""), body.get("error", "")
                raise PrometheusError(f"{self.url}{path}: HTTP {response.status_code} {kind}: {error}")
            return body
        raise PrometheusError(f"{self.url}{path}: failed after {self.retries + 1} attempts: {last}")

    def query_range(self, start: datetime, end: datetime, step_s: float, *, query: str = DEFAULT_QUERY,
                    max_points: int = MAX_POINTS_PER_SERIES, max_span_s: float = 3600.0,
                    source: str = "prometheus") -> ParsedSamples:
        """All samples of ``query`` at step ``step_s`` for ``[start, end)``, parsed and deduplicated."""
        out = ParsedSamples()
        with httpx.Client(base_url=self.url.rstrip("/"), transport=self.transport, trust_env=False) as client:
            for chunk in chunks(start, end, step_s, max_points=max_points, max_span_s=max_span_s):
                body = self._get(
                    client,
                    "/api/v1/query_range",
                    {"query": query, "start": f"{chunk.start:.3f}", "end": f"{chunk.end:.3f}", "step": f"{step_s:g}"},
                )
                data = body.get("data") or {}
                if data.get("resultType") != "matrix":
                    raise PrometheusError(f"{self.url}: expected a matrix, got {data.get('resultType')!r}")
                out.extend(parse_matrix(data.get("result") or [], device=source))
        return out
