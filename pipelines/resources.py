"""Dagster resources: one per external system. Issues add theirs here as they come."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from connectors.warehouse import Warehouse, data_dir, open_warehouse
from pipelines.settings import Settings, load_settings

ENV_CONFIG = "GPUFABRIC_CONFIG"


def default_config_path() -> Path:
    """``GPUFABRIC_CONFIG``; else ``./gpufabric.yaml``; else the simulated site of the last
    ``gpufabric sim up`` (so ``make ui`` after ``make demo`` shows the demo's sources)."""
    if os.environ.get(ENV_CONFIG):
        return Path(os.environ[ENV_CONFIG])
    local = Path("gpufabric.yaml")
    simulated = data_dir() / "sim" / "gpufabric.yaml"
    return simulated if not local.exists() and simulated.exists() else local


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
            self._settings = load_settings(Path(self.path) if self.path else default_config_path())
        return self._settings
