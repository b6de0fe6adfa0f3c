"""``gpufabric finops ...``: the FinOps query pack from the terminal.

The integrator mounts :data:`app` as ``finops`` on the main CLI. ``report`` runs the files of
``sql/queries/`` (the same ones analysts use, as tested) and prints the top lines of each;
``export --focus`` writes the cost fact as a FOCUS file (docs/focus.md). ``prices`` loads the site
file's rate_cards into the price book (finops.price_book) and prints it; ``restate --from T [--to T]
--reason TEXT`` reprices the cost fact's past lines with the current prices, audited in
ops.finops_restatements (services/price_book.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

QUERIES = Path(__file__).resolve().parents[1] / "sql" / "queries"
REPORT = (
    ("Cost by client and tier, this month", "cost_by_client_tier_this_month.sql"),
    ("Top agent trees by cost, this month", "top_agent_trees_by_cost.sql"),
    ("Efficiency vs cost per agent type, this month", "efficiency_vs_cost_by_agent_type.sql"),
    ("Idle cost by GPU model, this month", "idle_cost_by_gpu_model.sql"),
    ("Anomalies this week", "anomalies_this_week.sql"),
)

app = typer.Typer(help="FinOps: GPU cost attribution reports.", no_args_is_help=True)
out = Console()
err = Console(stderr=True)


@app.callback()
def finops() -> None:
    """GPU cost attribution reports."""  # a callback keeps `report` a subcommand


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, Decimal):
        return f"{value:,.2f}" if abs(value) >= 1 or value == 0 else f"{value:.4f}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    return str(value)


def run_report(conn: Any, as_of: datetime | None, limit: int) -> list[tuple[str, list[str], list[tuple[Any, ...]]]]:
    """(title, columns, rows) for each query of the report, at most ``limit`` rows each."""
    sections = []
    with conn.transaction():
        if as_of is not None:
            conn.execute("SELECT set_config('gpufabric.as_of', %s, true)", (as_of.isoformat(),))
        for title, name in REPORT:
            cur = conn.execute((QUERIES / name).read_text())
            columns = [d.name for d in cur.description or []]
            sections.append((title, columns, cur.fetchmany(limit)))
    return sections


@contextlib.contextmanager
def _exits_on_errors(*refused: type[Exception]) -> Iterator[None]:
    """One way every command ends on a known error: what the user asked for was refused (exit 2,
    the message), the cost tables do not exist yet (exit 1, how to build them), or the warehouse
    failed (exit 1)."""
    import psycopg

    from connectors.warehouse import WarehouseError

    try:
        yield
    except refused as exc:
        err.print(f"[red]{exc}[/]", highlight=False)
        raise typer.Exit(2) from None
    except psycopg.errors.UndefinedTable:
        err.print("[red]the finops tables are not built yet:[/] run `gpufabric run --select 'group:finops'` "
                  "and the dbt models (`gpufabric run`)")
        raise typer.Exit(1) from None
    except WarehouseError as exc:
        err.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from None


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


@app.command("report")
def report(
    as_of: Annotated[
        datetime | None, typer.Option(help="reference time for 'this month/week' (default: now), e.g. 2026-11-08T23:00")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="rows per section")] = 10,
) -> None:
    """Print the top lines of the FinOps query pack (sql/queries)."""
    from connectors.warehouse import open_warehouse

    with _exits_on_errors():
        wh = open_warehouse()
        with wh.connect() as conn:
            sections = run_report(conn, _utc(as_of) if as_of is not None else None, limit)
    for title, columns, rows in sections:
        table = Table(title=title, title_justify="left")
        for c in columns:
            table.add_column(c, overflow="fold")
        for row in rows:
            table.add_row(*(_cell(v) for v in row))
        if not rows:
            table.caption = "nothing in this period"
        out.print(table)


@app.command("export")
def export(
    file: Annotated[Path, typer.Argument(help="where to write: .parquet or .csv")],
    focus: Annotated[bool, typer.Option("--focus", help="write the FOCUS dataset (the only export so far)")] = False,
    version: Annotated[str, typer.Option(help="FOCUS version of the column set: 1.0 or 1.2")] = "1.2",
    basis: Annotated[str, typer.Option(help="cost basis to export: allocation or usage")] = "allocation",
) -> None:
    """Write the cost fact (finops.gpu_cost_hourly) as a FOCUS file, streaming in batches."""
    from connectors.warehouse import open_warehouse
    from core.finops.focus import ExportOptions, FocusExportError
    from services.finops_export import export_focus

    if not focus:
        err.print("[red]say which export:[/] --focus (FOCUS is the only format so far)")
        raise typer.Exit(2)
    with _exits_on_errors(FocusExportError):
        options = ExportOptions(version=version, basis=basis)
        wh = open_warehouse()
        with wh.connect() as conn:
            result = export_focus(conn, file, options,
                                  on_batch=lambda n: err.print(f"  {n:,} lines written", highlight=False))
    out.print(f"wrote {result.rows:,} lines of FOCUS {result.focus_version} ({result.basis} basis, "
              f"{len(result.columns)} columns) to {result.path} as {result.file_format}")


# --- price book and restatements (issue 25, part 2) ----------------------------------------------

ConfigOption = Annotated[Path | None, typer.Option("--config", help="site file (default $GPUFABRIC_CONFIG or "
                                                                     "./gpufabric.yaml)")]


def _site(config: Path | None) -> tuple[Any, str]:
    """The site file's settings and its resolved path (exit 2 with its problems if it is bad)."""
    from settings import SettingsError, default_settings_path, load_settings

    path = config or default_settings_path()
    try:
        return load_settings(path), str(Path(path).resolve())
    except SettingsError as exc:
        err.print(f"[red]{exc}[/]", highlight=False)
        raise typer.Exit(2) from None


def _site_cards(config: Path | None) -> tuple[Any, str]:
    settings, source = _site(config)
    return settings.rate_cards, source


@app.command("prices")
def prices(config: ConfigOption = None) -> None:
    """Load the site file's rate_cards into the price book (finops.price_book) and print it."""
    from connectors.warehouse import open_warehouse
    from core.finops.price_book import PriceBookError
    from services.price_book import load_price_book, stored_price_book

    cards, source = _site_cards(config)
    with _exits_on_errors(PriceBookError):
        wh = open_warehouse()
        with wh.connect() as conn:
            load = load_price_book(conn, cards, source)
            book, _ = stored_price_book(conn)
    table = Table(title=f"Price book from {source}", title_justify="left")
    for c in ("gpu model", "tier", "from", "to", "currency", "price / GPU-h", "list / GPU-h"):
        table.add_column(c)
    for r in book:
        table.add_row(r.gpu_model, r.tier, str(r.effective_from), str(r.effective_to or "-"), r.currency,
                      str(r.unit_price), str(r.list_unit_price))
    out.print(table)
    out.print(f"changed: prices differ from {load.changes_from} on (lines already priced keep their price; "
              "`gpufabric finops restate` reprices the past)" if load.changed else "unchanged", highlight=False)


@app.command("restate")
def restate_cmd(
    start: Annotated[datetime, typer.Option("--from", help="first hour to reprice (UTC unless a zone is given)")],
    reason: Annotated[str, typer.Option(help="why: kept in the audit (ops.finops_restatements)")],
    end: Annotated[datetime | None, typer.Option("--to", help="end, exclusive (default: after the newest line)")]
    = None,
    config: ConfigOption = None,
) -> None:
    """Reprice the cost fact's lines in [--from, --to) with the site file's current prices, audited."""
    from connectors.warehouse import open_warehouse
    from core.finops.price_book import PriceBookError
    from services.price_book import RestateError, restate

    settings, source = _site(config)
    with _exits_on_errors(PriceBookError, RestateError):
        wh = open_warehouse()
        result = restate(wh, settings.rate_cards, source, start=_utc(start), end=_utc(end) if end is not None else None,
                         reason=reason, site_vars=settings.dbt_vars())
    out.print(f"restatement {result.restatement_id}: {result.range_from.isoformat()} to {result.range_to.isoformat()}, "
              f"{result.lines_changed:,} of {result.lines_after:,} lines changed; EffectiveCost "
              f"{result.old_effective_cost:,.2f} -> {result.new_effective_cost:,.2f}, ListCost "
              f"{result.old_list_cost:,.2f} -> {result.new_list_cost:,.2f}", highlight=False)
