"""Write the cost fact as a FOCUS file (CSV or Parquet), and read one back, both streaming.

The fact is read with a server-side cursor in batches, so a year of a large cluster never sits in
memory; CSV rows and Parquet row groups are written per batch into a temporary file beside the
target, renamed into place only when complete (a failed export leaves no half file behind).
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row

from core.finops.focus import (
    BOOLEAN,
    COLUMNS,
    DATETIME,
    DECIMAL_SCALE,
    FACT_COLUMNS,
    INTEGER,
    KEY_VALUE,
    TYPES,
    ExportOptions,
    FocusExportError,
    csv_cell,
    focus_row,
)
from core.finops.focus_rules import NUMERIC

BATCH_ROWS = 10_000
FORMATS = {".csv": "csv", ".parquet": "parquet"}


@dataclass(frozen=True)
class ExportResult:
    path: Path
    file_format: str
    focus_version: str
    basis: str
    rows: int
    columns: tuple[str, ...]


def file_format(path: Path) -> str:
    try:
        return FORMATS[path.suffix.lower()]
    except KeyError:
        raise FocusExportError(f"{path.name}: the file name must end in .csv or .parquet") from None


def _pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise FocusExportError("writing or reading Parquet needs pyarrow, which is not installed here; "
                               "export to a .csv file, or install pyarrow") from None
    return pa, pq


def iter_fact_batches(conn: Any, basis: str, batch_rows: int = BATCH_ROWS) -> Iterator[list[dict[str, Any]]]:
    """The cost fact's lines of one basis, ordered by hour, resource and node, ``batch_rows`` at a time."""
    query = sql.SQL('SELECT {} FROM finops.gpu_cost_hourly WHERE "x_CostBasis" = %s '
                    'ORDER BY "ChargePeriodStart", "ResourceId", "x_Node"').format(
        sql.SQL(", ").join(sql.Identifier(c) for c in FACT_COLUMNS))
    with conn.transaction(), conn.cursor(name="focus_export", row_factory=dict_row) as cur:
        cur.itersize = batch_rows
        cur.execute(query, (basis,))
        while batch := cur.fetchmany(batch_rows):
            yield batch


def export_focus(conn: Any, path: Path, options: ExportOptions, batch_rows: int = BATCH_ROWS,
                 on_batch: Callable[[int], None] | None = None) -> ExportResult:
    """Write the cost fact to ``path`` as FOCUS ``options.version``; CSV or Parquet by its suffix."""
    fmt = file_format(path)
    columns = COLUMNS[options.version]
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    rows = 0
    try:
        batches = (
            [focus_row(line, options) for line in batch]
            for batch in iter_fact_batches(conn, options.basis, batch_rows)
        )
        writer = _write_csv if fmt == "csv" else _write_parquet
        for n in writer(tmp, columns, batches):
            rows += n
            if on_batch is not None:
                on_batch(rows)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return ExportResult(path, fmt, options.version, options.basis, rows, columns)


def _write_csv(tmp: Path, columns: Sequence[str], batches: Iterator[list[dict[str, Any]]]) -> Iterator[int]:
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle, lineterminator="\n")
        out.writerow(columns)
        for batch in batches:
            out.writerows([csv_cell(r[c]) for c in columns] for r in batch)
            yield len(batch)


def parquet_schema(columns: Sequence[str]) -> Any:
    pa, _ = _pyarrow()
    fields = []
    for c in columns:
        kind = TYPES[c]
        if c in DECIMAL_SCALE:
            typ = pa.decimal128(38, DECIMAL_SCALE[c])
        elif kind == DATETIME:
            typ = pa.timestamp("us", tz="UTC")
        elif kind == INTEGER:
            typ = pa.int64()
        elif kind == BOOLEAN:
            typ = pa.bool_()
        else:
            typ = pa.string()  # key-value columns as JSON text, as FOCUS's KeyValueFormat is written
        fields.append(pa.field(c, typ))
    return pa.schema(fields)


def _write_parquet(tmp: Path, columns: Sequence[str], batches: Iterator[list[dict[str, Any]]]) -> Iterator[int]:
    pa, pq = _pyarrow()
    schema = parquet_schema(columns)
    key_value = [c for c in columns if TYPES[c] == KEY_VALUE]
    with pq.ParquetWriter(str(tmp), schema) as writer:
        for batch in batches:
            data: dict[str, list[Any]] = {c: [r[c] for r in batch] for c in columns}
            for c in key_value:
                data[c] = [None if v is None else csv_cell(v) for v in data[c]]
            writer.write_table(pa.table(data, schema=schema))
            yield len(batch)


# --- reading a FOCUS file back, for the 1.2 rule evaluator --------------------------------------

Rows = Callable[[], Iterator[dict[str, Any]]]


def read_focus(path: Path, batch_rows: int = BATCH_ROWS) -> tuple[tuple[str, ...], Rows]:
    """(columns, a function streaming the rows as typed values) of a FOCUS CSV or Parquet file.

    CSV carries no types, so a column reads as decimals when every non-empty value is numeric
    (as a CSV loader such as focus-validator's infers it: an all-digit id column reads as a
    number, and FOCUS's string-type rules catch that), otherwise as text; empty cells are null.
    """
    if file_format(path) == "parquet":
        _, pq = _pyarrow()
        parquet = pq.ParquetFile(str(path))
        columns = tuple(parquet.schema_arrow.names)

        def parquet_rows() -> Iterator[dict[str, Any]]:
            for batch in parquet.iter_batches(batch_size=batch_rows):
                yield from batch.to_pylist()

        return columns, parquet_rows
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise FocusExportError(f"{path.name}: empty file, no header")
        numeric = dict.fromkeys(header, True)
        for record in reader:
            for name, cell in zip(header, record, strict=False):
                if cell and numeric[name] and not NUMERIC.match(cell.strip()):
                    numeric[name] = False
    columns = tuple(header)

    def csv_rows() -> Iterator[dict[str, Any]]:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            next(reader)
            for record in reader:
                yield {name: _csv_value(cell, numeric[name]) for name, cell in zip(header, record, strict=False)}

    return columns, csv_rows


def _csv_value(cell: str, numeric: bool) -> Any:
    if cell == "":
        return None
    if numeric:
        try:
            return Decimal(cell.strip())
        except InvalidOperation:
            return cell
    return cell


def load_currency_codes(path: Path) -> frozenset[str]:
    """ISO 4217 codes from focus-validator's currency_codes.csv (one column ``currency_codes``)."""
    with path.open(newline="", encoding="utf-8") as handle:
        return frozenset(r["currency_codes"].strip() for r in csv.DictReader(handle) if r.get("currency_codes"))


def fact_summary(conn: Any, basis: str) -> Mapping[str, Any]:
    """Line count and EffectiveCost total of one basis: what an export must reproduce."""
    row = conn.execute('SELECT count(*) AS rows, coalesce(sum("EffectiveCost"), 0) AS effective '
                       'FROM finops.gpu_cost_hourly WHERE "x_CostBasis" = %s', (basis,)).fetchone()
    return {"rows": row[0], "effective": row[1]}
