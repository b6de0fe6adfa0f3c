"""One collection run end to end (fetch → parse → land), per target, failing soft.

The Dagster assets and the CLI both call these, so the behaviour (status per target, quarantine,
idempotent landing) is the same wherever a collection starts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

import psycopg

from connectors.prometheus.api import DEFAULT_QUERY, PrometheusClient, PrometheusError
from connectors.prometheus.scrape import scrape
from connectors.prometheus.storage import land_samples
from core.quality import CollectionStatus, Quarantined
from core.telemetry import SOURCE, ExpositionParser, ParsedSamples


@dataclass
class Outcome:
    """What a collection run did, summed over its targets (for asset metadata and CLI output)."""

    samples: int = 0
    new_series: int = 0
    quarantined: int = 0
    replaced_windows: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    value_flags: Counter[str] = field(default_factory=Counter)  # nan, blank, not_supported, mig_repeats ...
    details: dict[str, str] = field(default_factory=dict)

    def add(self, target: str, status: CollectionStatus, parsed: ParsedSamples, landed: int, new_series: int,
            replaced: bool, held: int, detail: str | None) -> None:
        self.samples += landed
        self.new_series += new_series
        self.quarantined += held
        self.replaced_windows += int(replaced)
        self.statuses[str(status)] += 1
        for key in ("nan", "non_finite", "blank", "not_found", "not_supported", "not_permissioned",
                    "mig_repeats", "duplicates"):
            if parsed.stats.get(key):
                self.value_flags[key] += parsed.stats[key]
        if detail:
            self.details[target] = detail


def collect_prometheus(
    conn: psycopg.Connection,
    *,
    name: str,
    url: str,
    start: datetime,
    end: datetime,
    step_s: float,
    run_id: str,
    query: str | None = None,
    timeout_s: float = 30.0,
    retries: int = 3,
    outcome: Outcome | None = None,
) -> Outcome:
    """Read ``[start, end)`` from one Prometheus and land it; a failing server is recorded, not raised."""
    outcome = outcome or Outcome()
    started = datetime.now(UTC)
    client = PrometheusClient(url, timeout_s=timeout_s, retries=retries)
    detail: str | None = None
    try:
        parsed = client.query_range(start, end, step_s, query=query or DEFAULT_QUERY, source=name)
        status = parsed.status
    except PrometheusError as err:
        parsed, detail = ParsedSamples(), str(err)
        status = CollectionStatus.UNREACHABLE if "attempts" in detail else CollectionStatus.ERROR
    result = land_samples(conn, parsed, run_id=run_id, device=name, started_at=started, status=status, detail=detail)
    outcome.add(name, status, parsed, result.samples, result.new_series, result.replaced_window,
                len(parsed.quarantined), detail)
    return outcome


def collect_exporters(
    conn: psycopg.Connection,
    urls: list[str],
    *,
    run_id: str,
    parser: ExpositionParser | None = None,
    concurrency: int = 64,
    timeout_s: float = 10.0,
    outcome: Outcome | None = None,
) -> Outcome:
    """Scrape every exporter once, concurrently, and land each answer (or its failure) on its own."""
    outcome = outcome or Outcome()
    parser = parser or ExpositionParser()
    started = datetime.now(UTC)
    for res in scrape(urls, concurrency=concurrency, timeout_s=timeout_s):
        if res.body is None or res.scraped_at_ms is None:
            parsed = ParsedSamples()
            status = res.status
        else:
            parsed = parser.parse(res.body, res.scraped_at_ms, device=res.target)
            status = parsed.status
            if status is CollectionStatus.NO_DATA:
                res = type(res)(res.target, status, res.body, res.scraped_at_ms, "empty exposition", res.elapsed_s)
        if status is CollectionStatus.INVALID and not parsed.quarantined:  # pragma: no cover - defensive
            parsed.quarantined.append(Quarantined(SOURCE, "nothing usable", res.body or b"", device=res.target))
        result = land_samples(conn, parsed, run_id=run_id, device=res.target, started_at=started, status=status,
                              detail=res.detail, around_ms=res.scraped_at_ms)
        outcome.add(res.target, status, parsed, result.samples, result.new_series, result.replaced_window,
                    len(parsed.quarantined), res.detail)
    return outcome
