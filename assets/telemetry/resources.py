"""The telemetry resource: partitioning, retention and scrape settings for DCGM samples."""

from __future__ import annotations

import dagster as dg
from pydantic import Field


class TelemetryResource(dg.ConfigurableResource):
    """How telemetry.dcgm_samples is kept.

    ``retention_days``: day partitions older than this are detached after each hourly load (kept as
    plain tables for archiving) and, with ``drop_detached``, dropped. ``partitions_ahead_days``:
    partitions created ahead so the next days' loads never wait on DDL.
    """

    retention_days: int = Field(default=30, ge=1)
    partitions_ahead_days: int = Field(default=2, ge=0, le=31)
    drop_detached: bool = False
    scrape_concurrency: int = Field(default=64, ge=1, le=4096)
