"""Dagster resources: one per external system. Issues add theirs here as they come."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from connectors.warehouse import Warehouse, open_warehouse
from pipelines.settings import Settings, default_settings_path, load_settings


class WarehouseResource(dg.ConfigurableResource):
    """The Postgres warehouse. Empty ``url`` means GPUFABRIC_DATABASE_URL, else the embedded server."""

    url: str | None = None
    _warehouse: Warehouse | None = PrivateAttr(default=None)

    def get(self) -> Warehouse:
        if self._warehouse is None:
            self._warehouse = open_warehouse(self.url)
        return self._warehouse


class SiteConfigResource(dg.ConfigurableResource):
    """The validated site file (``gpufabric.yaml``): sources, tenants, rate cards, guards."""

    path: str | None = None
    _settings: Settings | None = PrivateAttr(default=None)

    def get(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(Path(self.path) if self.path else default_settings_path())
        return self._settings
