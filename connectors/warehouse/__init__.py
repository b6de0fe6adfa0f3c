"""The Postgres warehouse: embedded server, engine, migrations and COPY loaders."""

from connectors.warehouse.loader import (
    copy_rows,
    land_collection,
    record_status,
    replace_rows,
    write_quarantine,
)
from connectors.warehouse.warehouse import Warehouse, WarehouseError, data_dir, open_warehouse

__all__ = [
    "Warehouse",
    "WarehouseError",
    "copy_rows",
    "data_dir",
    "land_collection",
    "open_warehouse",
    "record_status",
    "replace_rows",
    "write_quarantine",
]
