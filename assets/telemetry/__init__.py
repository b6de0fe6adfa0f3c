"""DCGM telemetry: Prometheus range reads (hourly partitions, backfillable) and direct exporter scrapes."""

from assets.telemetry.assets import dcgm_exporter_scrape, dcgm_samples, defs

__all__ = ["dcgm_exporter_scrape", "dcgm_samples", "defs"]
