"""dbt's event metadata, tidied for the Dagster UI.

dagster-dbt puts ``unique_id``, ``invocation_id``, ``status`` and ``Execution Duration`` on every
model materialization and test result as four loose entries (dagster_dbt/core/dbt_cli_event.py,
``_get_default_metadata``): the same boilerplate on every asset, shown above what matters. We keep
what dbt tells us and fold it into one ``dbt`` table row, keep the duration as a float the UI plots
across materializations (``duration_s``), the failed-row count of a test as an int, and leave every
other entry (column schema, lineage, row counts) as dagster-dbt made it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from assets.metadata import table

BOILERPLATE = ("unique_id", "invocation_id", "status", "Execution Duration", "dagster_dbt/failed_row_count")
DBT_COLUMNS = {"node": "string", "status": "string", "duration_s": "float", "failed_rows": "int",
               "invocation": "string"}  # fmt: skip


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, dg.MetadataValue) else value


def tidy(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """One event's metadata with dbt's boilerplate folded into a ``dbt`` table (unchanged when the
    event carries none of it, e.g. an event of ours)."""
    if "invocation_id" not in metadata and "unique_id" not in metadata:
        return dict(metadata)
    raw = {k: _plain(metadata.get(k)) for k in BOILERPLATE}
    duration = raw["Execution Duration"]
    failed = raw["dagster_dbt/failed_row_count"]
    row = {"node": raw["unique_id"], "status": raw["status"],
           "duration_s": round(float(duration), 3) if isinstance(duration, int | float) else None,
           "failed_rows": int(failed) if isinstance(failed, int | float) else None,
           "invocation": raw["invocation_id"]}  # fmt: skip
    out = {k: v for k, v in metadata.items() if k not in BOILERPLATE}
    out["dbt"] = table([row], DBT_COLUMNS)
    if row["duration_s"] is not None:
        out["duration_s"] = row["duration_s"]
    if row["failed_rows"] is not None:
        out["failed_rows"] = row["failed_rows"]
    return out


def tidy_event(event: Any) -> Any:
    """The same event (Output, AssetMaterialization, AssetCheckResult, ...) with tidied metadata."""
    metadata = getattr(event, "metadata", None)
    if not metadata or not hasattr(event, "with_metadata"):
        return event
    return event.with_metadata(tidy(metadata))
