"""Resources of the FinOps area: detection thresholds and snapshot timing, and the alert webhook."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import dagster as dg
import httpx

from core.finops.anomaly import Thresholds

ENV_WEBHOOK_URL = "GPUFABRIC_FINOPS_WEBHOOK_URL"
# One-shot runs (the demo, `gpufabric run`) want a list and a short watch, not the schedule's 45 s.
ENV_WATCH_SECONDS = "GPUFABRIC_FINOPS_WATCH_SECONDS"


class FinOpsResource(dg.ConfigurableResource):
    """How pods are collected and how anomalies are judged (see core/finops/anomaly.py)."""

    watch_seconds: float = 45.0  # after each list, watch this long (the schedule runs every minute)

    def effective_watch_seconds(self) -> float:
        """``$GPUFABRIC_FINOPS_WATCH_SECONDS`` when set (one-shot runs), else ``watch_seconds``."""
        return float(os.environ.get(ENV_WATCH_SECONDS) or self.watch_seconds)
    lookback_hours: int = 2  # hours judged per detector run, ending with the latest hour of data
    min_score: float = 4.0
    min_impact_usd: float = 25.0
    min_relative_impact: float = 0.5
    burn_factor: float = 10.0
    history_weeks: int = 4

    def thresholds(self) -> Thresholds:
        return Thresholds(min_score=self.min_score, min_impact_usd=self.min_impact_usd,
                          min_relative_impact=self.min_relative_impact, burn_factor=self.burn_factor,
                          history_weeks=self.history_weeks)


@dataclass
class Delivery:
    delivered: bool
    attempts: int
    http_status: int | None
    error: str | None


class AlertWebhookResource(dg.ConfigurableResource):
    """A Slack-compatible incoming webhook. The URL is a secret (Slack's embeds its token), so it
    comes from the environment variable ``url_env`` unless ``url`` is set (tests, receivers on
    loopback); it never appears in logs or errors."""

    url: str | None = None
    url_env: str = ENV_WEBHOOK_URL
    timeout_s: float = 5.0
    max_attempts: int = 4
    backoff_s: float = 0.5

    def resolved_url(self) -> str | None:
        return self.url or os.environ.get(self.url_env) or None

    def post(self, payload: dict[str, Any], idempotency_key: str) -> Delivery:
        """POST with retries (exponential backoff) on 5xx, 429 and transport errors; a 4xx other
        than 429 is final. The idempotency key travels as a header so a receiver can drop a
        duplicate if a 2xx got lost on the way back."""
        url = self.resolved_url()
        if url is None:
            return Delivery(False, 0, None, f"no webhook URL (set {self.url_env})")
        status: int | None = None
        error: str | None = None
        headers = {"Idempotency-Key": idempotency_key, "X-Gpufabric-Anomaly-Id": idempotency_key}
        with httpx.Client(timeout=self.timeout_s) as client:
            for attempt in range(1, self.max_attempts + 1):
                try:
                    response = client.post(url, json=payload, headers=headers)
                    status = response.status_code
                    if 200 <= status < 300:
                        return Delivery(True, attempt, status, None)
                    error = f"HTTP {status}"
                    if 400 <= status < 500 and status != 429:
                        return Delivery(False, attempt, status, error)
                except httpx.HTTPError as err:
                    status, error = None, type(err).__name__  # no URL in the message: it is a secret
                if attempt < self.max_attempts:
                    time.sleep(self.backoff_s * 2 ** (attempt - 1))
        return Delivery(False, self.max_attempts, status, error)
