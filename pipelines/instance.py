"""Dagster's instance: DAGSTER_HOME under the data dir, run and event storage in our Postgres.

The ``dagster.yaml`` we write names the URL through an environment variable, so the file never
holds a password and stays valid when the embedded server's port changes.
"""

from __future__ import annotations

import os
from pathlib import Path

from connectors.warehouse import Warehouse, data_dir

ENV_DAGSTER_PG_URL = "GPUFABRIC_DAGSTER_PG_URL"

DAGSTER_YAML = f"""\
# Written by gpufabric (pipelines/instance.py); edits are overwritten.
storage:
  postgres:
    postgres_url:
      env: {ENV_DAGSTER_PG_URL}
telemetry:
  enabled: false
"""


def dagster_home() -> Path:
    return Path(os.environ.get("DAGSTER_HOME") or data_dir() / "dagster").resolve()


def prepare_dagster_env(warehouse: Warehouse) -> Path:
    """Point this process (and the children it starts) at our instance; returns DAGSTER_HOME."""
    home = dagster_home()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists() or config.read_text() != DAGSTER_YAML:
        config.write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ[ENV_DAGSTER_PG_URL] = warehouse.dagster_url
    return home
