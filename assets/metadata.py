"""Metadata shapes the Dagster UI shows well, shared by the areas: tables with a schema, and images.

Tables: ``MetadataValue.table`` with a ``TableSchema`` renders as a sortable table (JSON renders
as a collapsed blob). Images: Dagster OSS has no image metadata type; the UI renders markdown, so a
PNG goes in as a base64 ``data:image/png`` markdown image (``services.diagrams.markdown_image``).
Plain ``int``/``float`` entries are what the UI plots across materializations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

Scalar = str | int | float | bool | None


def _cell(value: Any) -> Scalar:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)  # Decimal, datetime, lists: shown as text rather than refused


def table(rows: Sequence[Mapping[str, Any]], columns: Mapping[str, str], limit: int = 50) -> dg.TableMetadataValue:
    """``columns``: name -> Dagster column type (string, int, float, bool); at most ``limit`` rows."""
    schema = dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in columns.items()])
    records = [dg.TableRecord({name: _cell(row.get(name)) for name in columns}) for row in rows[:limit]]
    return dg.MetadataValue.table(records=records, schema=schema)

