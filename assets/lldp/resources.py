"""The SNMP collector's tuning knobs as a Dagster resource (site-wide fan-out and per-device
timeouts live in ``gpufabric.yaml``: ``sources.collection`` and each switch's ``snmp``)."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from connectors.snmp import CollectorOptions


class SnmpCollectorResource(dg.ConfigurableResource):
    """How the LLDP walker behaves on the wire. ``concurrency`` empty = ``sources.collection.concurrency``."""

    concurrency: int | None = Field(default=None, ge=1, le=4096)
    max_repetitions: int = Field(default=40, ge=1, le=200, description="GETBULK max-repetitions")
    device_deadline_s: float = Field(default=300.0, gt=0, description="a whole device's poll, all walks")
    max_rows_per_table: int = Field(default=200_000, ge=100, description="longer tables are cut and reported")

    def options(self, site_concurrency: int) -> CollectorOptions:
        return CollectorOptions(
            concurrency=self.concurrency or site_concurrency,
            max_repetitions=self.max_repetitions,
            device_deadline_s=self.device_deadline_s,
            max_rows_per_table=self.max_rows_per_table,
        )
