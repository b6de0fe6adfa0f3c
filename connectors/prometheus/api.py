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
from typing import Any

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
            if not isinstance(body, dict):
                raise PrometheusError(f"{self.url}{path}: HTTP {response.status_code}, JSON but not an object")
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
                out.extend(parse_matrix(matrix_result(body, self.url), device=source))
        return out


def _bad_time(pair: Any) -> str | None:
    """Why a sample's time is no JSON number of seconds (the rest of a sample is judged by
    parse_matrix, sample by sample)."""
    if not isinstance(pair, list) or len(pair) != 2:
        return None  # parse_matrix quarantines it: "sample is not [time, value]"
    t = pair[0]
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
        return f"sample time {str(t)[:40]!r} is not a number of seconds"
    return None


def matrix_result(body: Any, url: str) -> list[dict[str, Any]]:
    """The ``result`` of a ``query_range`` answer, checked for the shape the API documents
    (``{metric: {label: text}, values: [[seconds, "value"], ...]}`` per series); PrometheusError
    for any other answer. Samples are judged later, one by one (parse_matrix), but a time is a
    JSON number or the answer is not Prometheus's: a time of "1e400" overflows the conversion to
    milliseconds, and a metric name that is no text fails the series id."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, dict):
        raise PrometheusError(f"{url}: the answer has no data object")
    if data.get("resultType") != "matrix":
        raise PrometheusError(f"{url}: expected a matrix, got {str(data.get('resultType'))[:40]!r}")
    result = data.get("result") or []
    if not isinstance(result, list):
        raise PrometheusError(f"{url}: the matrix result is not a list")
    for index, item in enumerate(result):
        where = f"{url}: malformed query_range answer at result[{index}]"
        metric = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(metric, dict) or not all(isinstance(v, str) for v in metric.values()):
            raise PrometheusError(f"{where}: metric is not an object of label texts")
        values = item.get("values") or []
        if not isinstance(values, list):
            raise PrometheusError(f"{where}: values is not a list")
        for pair in values:
            why = _bad_time(pair)
            if why is not None:
                raise PrometheusError(f"{where}: {why}")
    return result
