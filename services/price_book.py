"""The price book in the warehouse, and restatements of the cost fact.

``load_price_book`` writes the site file's ``rate_cards`` (checked by ``core.finops.price_book``)
into ``finops.price_book``, the only prices dbt reads. It runs before every dbt build of the cost
fact (the ``finops/price_book`` asset, the CLI) and replaces the book only when it differs, so
``loaded_at`` is when the prices last changed.

The cost fact is incremental (dbt/models/marts/finops/gpu_cost_hourly.sql): a build reprices only
the last ``finops_lookback_hours`` before its newest line and everything after, so a new rate
reaches lines from its effective date on and lines already priced stay as they were.
``restate`` is the one way to reprice the past: it rebuilds [from, to) with dbt vars (the fact, the
incremental models it reads and the rollups: ``COST_FACT_SELECT``) and writes an audit row
(``ops.finops_restatements``) with the lines changed and the totals before and after.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from connectors.warehouse import Warehouse, copy_rows
from core.finops.price_book import PriceBookRow, RateCardLike, build_price_book, price_changes

DBT_DIR = Path(__file__).resolve().parents[1] / "dbt"
COST_FACT = "finops.gpu_cost_hourly"
# What a build of the cost fact runs (the finops_cost job, a restatement): the fact, every model it
# reads (the pod intervals and pod hours are incremental tables, so building the fact alone would
# price stale hours) and the query pack's rollups (sql/queries reads them; a restatement must reach
# them too).
COST_FACT_SELECT = "+gpu_cost_hourly cost_summary_hourly agent_tree_pods_monthly"
COLUMNS = ("gpu_model", "tier", "effective_from", "effective_to", "currency", "unit_price", "list_unit_price",
           "source", "loaded_at")
# A line of the fact is one (basis, hour, resource, node): the unique key of the incremental model.
LINE_KEY = ('"x_CostBasis"', '"ChargePeriodStart"', '"ResourceId"', '"x_Node"')
# What a restatement can change on a line: a line counts as changed if any of these differs
# (or it was added or removed).
LINE_VALUES = ("ConsumedQuantity", "ListUnitPrice", "ContractedUnitPrice", "ListCost", "EffectiveCost",
               "BillingCurrency")


class RestateError(RuntimeError):
    """A restatement that could not be done; nothing was changed and no audit row written."""


@dataclass(frozen=True)
class PriceBookLoad:
    rows: int
    changed: bool
    changes_from: date | None  # first UTC date priced differently than the book it replaced
    loaded_at: datetime | None  # when the book now in force was loaded


@dataclass(frozen=True)
class Restatement:
    restatement_id: int
    range_from: datetime
    range_to: datetime
    lines_before: int
    lines_after: int
    lines_changed: int
    old_list_cost: Decimal
    new_list_cost: Decimal
    old_effective_cost: Decimal
    new_effective_cost: Decimal


def stored_price_book(conn: psycopg.Connection) -> tuple[list[PriceBookRow], datetime | None]:
    rows = conn.execute(sql.SQL("SELECT {} FROM finops.price_book").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in COLUMNS))).fetchall()
    book = [PriceBookRow(m, t, f, to, c, Decimal(p), Decimal(lp)) for m, t, f, to, c, p, lp, _, _ in rows]
    return sorted(book), max((r[-1] for r in rows), default=None)


def load_price_book(conn: psycopg.Connection, cards: Sequence[RateCardLike], source: str,
                    now: datetime | None = None) -> PriceBookLoad:
    """Check ``cards`` (``PriceBookError`` names every bad one, before anything is written) and make
    them the price book, in the caller's connection, committed here."""
    book = build_price_book(cards)
    with conn.transaction():
        # One loader at a time: two concurrent loads must not interleave delete and copy.
        conn.execute("LOCK TABLE finops.price_book IN SHARE ROW EXCLUSIVE MODE")
        old, loaded_at = stored_price_book(conn)
        if [_comparable(r) for r in old] == [_comparable(r) for r in book]:
            return PriceBookLoad(len(book), False, None, loaded_at)
        stamp = now or datetime.now(UTC)
        conn.execute("DELETE FROM finops.price_book")
        copy_rows(conn, "finops.price_book", COLUMNS, (
            (r.gpu_model, r.tier, r.effective_from, r.effective_to, r.currency, r.unit_price, r.list_unit_price,
             source, stamp) for r in book))
    return PriceBookLoad(len(book), True, price_changes(old, book), stamp)


def _comparable(r: PriceBookRow) -> PriceBookRow:
    # numeric(12,4) reads back as 2.8500; the site file may say 2.85. Same price.
    return PriceBookRow(r.gpu_model, r.tier, r.effective_from, r.effective_to, r.currency,
                        r.unit_price.normalize(), r.list_unit_price.normalize())


def run_dbt(wh: Warehouse, args: Sequence[str], *, target_dir: Path | None = None,
            dbt_vars: dict[str, Any] | None = None, timeout_s: float = 3600) -> str:
    """Run the venv's dbt against ``wh``; returns its output, raises RestateError on failure."""
    cmd = [str(Path(sys.executable).with_name("dbt")), *args, "--project-dir", str(DBT_DIR),
           "--profiles-dir", str(DBT_DIR)]
    if target_dir is not None:
        cmd += ["--target-path", str(target_dir / "target"), "--log-path", str(target_dir / "logs")]
    if dbt_vars:
        cmd += ["--vars", json.dumps(dbt_vars)]
    result = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **wh.libpq_env()),
                            timeout=timeout_s, check=False)
    if result.returncode != 0:
        raise RestateError(f"dbt {' '.join(args)} failed:\n{result.stdout[-4000:]}{result.stderr[-2000:]}")
    return result.stdout


def _hour(t: datetime, *, up: bool) -> datetime:
    if t.tzinfo is None:
        raise RestateError(f"{t.isoformat()}: give a time zone (e.g. 2026-11-01T00:00Z)")
    t = t.astimezone(UTC)
    floor = t.replace(minute=0, second=0, microsecond=0)
    return floor + timedelta(hours=1) if up and floor != t else floor


def _totals(conn: psycopg.Connection, table: sql.Composable, where: sql.Composable,
            params: Sequence[Any]) -> tuple[int, Decimal, Decimal]:
    row = conn.execute(sql.SQL('SELECT count(*), coalesce(sum("ListCost"), 0), coalesce(sum("EffectiveCost"), 0) '
                               "FROM {} WHERE {}").format(table, where), params).fetchone()
    assert row is not None
    return int(row[0]), Decimal(row[1]), Decimal(row[2])


def restate(wh: Warehouse, cards: Sequence[RateCardLike], source: str, *, start: datetime,
            end: datetime | None, reason: str, requested_by: str | None = None,
            target_dir: Path | None = None, site_vars: Mapping[str, str] | None = None) -> Restatement:
    """Reprice the cost fact's lines with ChargePeriodStart in [start, end) (end: the newest line + 1 h)
    with the site file's current prices, and audit it. ``start`` is floored and ``end`` ceiled to
    the hour. Lines outside the range are untouched. ``site_vars``: the site's answers to the
    models' vars (``Settings.dbt_vars()``), so restated lines are built as the pipeline builds them."""
    if not reason.strip():
        raise RestateError("say why (--reason): a restatement changes amounts already reported")
    lo = _hour(start, up=False)
    requested_at = datetime.now(UTC)
    who = requested_by or getpass.getuser()
    scratch = sql.Identifier("ops", f"restate_before_{uuid.uuid4().hex[:12]}")
    in_range = sql.SQL('"ChargePeriodStart" >= %s AND "ChargePeriodStart" < %s')
    with wh.connect() as conn:
        load = load_price_book(conn, cards, source)
        if conn.execute("SELECT to_regclass(%s)", (COST_FACT,)).fetchone() == (None,):
            raise RestateError(f"{COST_FACT} is not built yet: nothing to restate (run the finops_cost job first)")
        if end is None:
            newest = conn.execute(sql.SQL('SELECT max("ChargePeriodStart") FROM {}').format(
                sql.SQL(COST_FACT))).fetchone()
            end = (newest[0] if newest and newest[0] else lo) + timedelta(hours=1)
        hi = _hour(end, up=True)
        if hi <= lo:
            raise RestateError(f"empty range: --to {hi.isoformat()} is not after --from {lo.isoformat()}")
        db_user = conn.execute("SELECT current_user").fetchone()
        who = f"{who} (as {db_user[0] if db_user else '?'})"
        # The lines as they were, to count what changed: an unlogged copy of the range (dbt runs in
        # its own process, so a temporary table would not outlive this connection's view of it).
        conn.execute(sql.SQL("CREATE UNLOGGED TABLE {} AS SELECT {}, {} FROM {} WHERE {}").format(
            scratch, sql.SQL(", ").join(sql.SQL(k) for k in LINE_KEY),
            sql.SQL(", ").join(sql.Identifier(c) for c in LINE_VALUES), sql.SQL(COST_FACT), in_range), (lo, hi))
        conn.commit()
        try:
            before = _totals(conn, scratch, sql.SQL("true"), ())
            run_dbt(wh, ["build", "--select", COST_FACT_SELECT], target_dir=target_dir,
                    dbt_vars={**(site_vars or {}), "restate_from": lo.isoformat(), "restate_to": hi.isoformat()})
            after = _totals(conn, sql.SQL(COST_FACT), in_range, (lo, hi))
            on = sql.SQL(" AND ").join(sql.SQL("o.{k} = n.{k}").format(k=sql.SQL(k)) for k in LINE_KEY)
            differs = sql.SQL(" OR ").join(sql.SQL("o.{c} IS DISTINCT FROM n.{c}").format(c=sql.Identifier(c))
                                           for c in LINE_VALUES)
            changed = conn.execute(sql.SQL(
                "SELECT count(*) FROM {old} o FULL JOIN (SELECT * FROM {fact} WHERE {rng}) n ON {on} WHERE {differs}"
            ).format(old=scratch, fact=sql.SQL(COST_FACT), rng=in_range, on=on, differs=differs),
                (lo, hi)).fetchone()
            lines_changed = int(changed[0]) if changed else 0
            row = conn.execute(
                """
                INSERT INTO ops.finops_restatements (requested_by, requested_at, finished_at, range_from, range_to,
                    reason, price_book_loaded_at, lines_before, lines_after, lines_changed, old_list_cost,
                    new_list_cost, old_effective_cost, new_effective_cost)
                VALUES (%s, %s, now(), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
                RETURNING restatement_id
                """,
                (who, requested_at, lo, hi, reason.strip(), load.loaded_at, before[0], after[0], lines_changed,
                 before[1], after[1], before[2], after[2]),
            ).fetchone()
            conn.commit()
        finally:
            conn.rollback()
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(scratch))
            conn.commit()
    assert row is not None
    return Restatement(int(row[0]), lo, hi, before[0], after[0], lines_changed, before[1], after[1], before[2],
                       after[2])


__all__ = ["PriceBookLoad", "RestateError", "Restatement", "load_price_book", "restate", "run_dbt",
           "stored_price_book"]
