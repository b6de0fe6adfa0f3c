"""Load and store topology versions: what the topology asset, the CLI and publishing share."""

from services.topology.store import (
    Loaded,
    latest_version,
    list_versions,
    load_model,
    load_observations,
    write_snapshot,
)

__all__ = ["Loaded", "latest_version", "list_versions", "load_model", "load_observations", "write_snapshot"]
