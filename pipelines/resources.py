"""The Dagster resources every area shares, built from the site file and the warehouse settings.

Assets ask for the objects themselves (``warehouse: dg.ResourceParam[Warehouse]``,
``site: dg.ResourceParam[Settings]``), not for these classes: the code location decides how a
warehouse or a site file is found, and the assets below it never import ``pipelines``. Area-only
resources (the SNMP collector's knobs, telemetry retention, FinOps thresholds) live in their area.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

# Documented as dagster.ConfigurableResourceFactory, but 1.13 no longer exports it at the top level.
from dagster._config.pythonic_config import ConfigurableResourceFactory

from connectors.warehouse import Warehouse, open_warehouse
from settings import Settings, default_settings_path, load_settings


class WarehouseResource(ConfigurableResourceFactory[Warehouse]):
    """The Postgres warehouse. Empty ``url`` means GPUFABRIC_DATABASE_URL, else the embedded server."""

    url: str | None = None

    def create_resource(self, context: dg.InitResourceContext) -> Warehouse:
        return open_warehouse(self.url)


class SiteConfigResource(ConfigurableResourceFactory[Settings]):
    """The validated site file (``gpufabric.yaml``): sources, tenants, rate cards, guards."""

    path: str | None = None

    def create_resource(self, context: dg.InitResourceContext) -> Settings:
        return load_settings(Path(self.path) if self.path else default_settings_path())
