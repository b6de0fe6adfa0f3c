"""DCGM telemetry collectors: dcgm-exporter scrapes, the Prometheus HTTP API, and the sample store."""

from connectors.prometheus.api import PrometheusClient, PrometheusError, chunks
from connectors.prometheus.scrape import ScrapeResult, TargetsError, read_targets_file, scrape
from connectors.prometheus.storage import (
    LoadResult,
    apply_retention,
    copy_samples,
    ensure_partitions,
    land_samples,
    list_partitions,
)

__all__ = [
    "LoadResult",
    "PrometheusClient",
    "PrometheusError",
    "ScrapeResult",
    "TargetsError",
    "apply_retention",
    "chunks",
    "copy_samples",
    "ensure_partitions",
    "land_samples",
    "list_partitions",
    "read_targets_file",
    "scrape",
]
