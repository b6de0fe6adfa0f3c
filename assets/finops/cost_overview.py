"""``finops/cost_overview``: the last day of the cost fact as a picture and as numbers to plot.

The cost fact itself is dbt's (``finops.gpu_cost_hourly``); this asset runs after it in the
``finops_cost`` job and reads the 24 hours up to its latest hour on the allocation basis (what
tenants are charged): a chart of cost by tenant, tier and agent type (PNG in markdown, the way the
Dagster UI shows images), ``cost_per_day`` and its workload/idle split as floats the UI plots
across materializations, and the breakdown as a table. Idle capacity has no tenant, tier or agent
type: it is its own bar in the tenant panel and its own number, never spread onto tenants.
No ``from __future__ import annotations``: Dagster reads the context annotation at runtime.
"""

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import dagster as dg
import psycopg

from assets.finops.anomalies import COST_FACT
from assets.metadata import table
from connectors.warehouse import Warehouse
from services.diagrams import bar_panels_png, markdown_image

COST_OVERVIEW = dg.AssetKey(["finops", "cost_overview"])
WINDOW = timedelta(hours=24)
IDLE = "(idle capacity)"
UNSET = "unattributed"
BREAKDOWN_COLUMNS = {"tenant": "string", "tier": "string", "agent_type": "string", "cost": "float"}


@dataclass
class CostDay:
    """One window of the cost fact, summed the ways the chart and the metadata need."""

    latest_hour: datetime | None = None
    currency: str = "USD"
    workload: Decimal = Decimal(0)
    idle: Decimal = Decimal(0)
    by_tenant: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    by_tier: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    by_agent_type: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    lines: dict[tuple[str, str, str], Decimal] = field(default_factory=lambda: defaultdict(Decimal))

    @property
    def total(self) -> Decimal:
        return self.workload + self.idle

    def panels(self) -> list[tuple[str, Mapping[str, float]]]:
        tenants = {k: float(v) for k, v in self.by_tenant.items()}
        if self.idle:
            tenants[IDLE] = float(self.idle)
        return [
            ("by tenant", tenants),
            ("by tier", {k: float(v) for k, v in self.by_tier.items()}),
            ("by agent type", {k: float(v) for k, v in self.by_agent_type.items()}),
        ]

    def breakdown(self) -> list[dict[str, Any]]:
        rows = [{"tenant": t, "tier": r, "agent_type": a, "cost": float(c)} for (t, r, a), c in self.lines.items()]
        return sorted(rows, key=lambda r: (-r["cost"], r["tenant"], r["tier"], r["agent_type"]))


def summarise(rows: Iterable[tuple[str | None, str | None, str | None, str, Decimal | None]]) -> CostDay:
    """(tenant, tier, agent type, line type, cost) rows -> the sums. Pure: unit-tested as is.
    Unpriced lines (cost NULL) add nothing here; ``finops/anomalies`` counts them."""
    day = CostDay()
    for tenant, tier, agent_type, line_type, cost in rows:
        if cost is None:
            continue
        if line_type == "idle":
            day.idle += cost
            continue
        key = (tenant or UNSET, tier or UNSET, agent_type or UNSET)
        day.workload += cost
        day.by_tenant[key[0]] += cost
        day.by_tier[key[1]] += cost
        day.by_agent_type[key[2]] += cost
        day.lines[key] += cost
    return day


def load_cost_day(conn: psycopg.Connection) -> CostDay | None:
    """The 24 hours up to the fact's latest hour; None when dbt has not built the fact yet."""
    try:
        with conn.transaction():
            latest, currency = conn.execute(
                """SELECT max("ChargePeriodStart"), max("BillingCurrency") FROM finops.gpu_cost_hourly
                   WHERE "x_CostBasis" = 'allocation'"""
            ).fetchone() or (None, None)
            if latest is None:
                return CostDay()
            rows = conn.execute(
                """
                SELECT "SubAccountId", "x_Tier", "x_AgentType", "x_LineType", sum("EffectiveCost")
                FROM finops.gpu_cost_hourly
                WHERE "x_CostBasis" = 'allocation' AND "ChargePeriodStart" > %s AND "ChargePeriodStart" <= %s
                GROUP BY 1, 2, 3, 4
                """,
                (latest - WINDOW, latest),
            ).fetchall()
    except psycopg.errors.UndefinedTable:
        return None
    day = summarise(rows)
    day.latest_hour, day.currency = latest, currency or "USD"
    return day


@dg.asset(
    key=COST_OVERVIEW,
    deps=[COST_FACT],
    group_name="finops",
    kinds={"postgres"},
    description="The last 24 hours of GPU cost (allocation basis) by tenant, tier and agent type: a chart, "
    "cost_per_day and a table.",
)
def cost_overview(context: dg.AssetExecutionContext, warehouse: dg.ResourceParam[Warehouse]) -> dg.MaterializeResult:
    with warehouse.connect() as conn:
        day = load_cost_day(conn)
    if day is None:
        context.log.warning("no cost fact yet: dbt has not built finops.gpu_cost_hourly")
        return dg.MaterializeResult(metadata={"cost_fact_built": False})
    unit = f"{day.currency} in the 24 h to {day.latest_hour:%Y-%m-%d %H:00}" if day.latest_hour else day.currency
    chart = bar_panels_png("GPU cost, last 24 hours (allocation basis)", day.panels(), unit)
    return dg.MaterializeResult(metadata={
        "cost_fact_built": True,
        "latest_hour": dg.MetadataValue.text(str(day.latest_hour)),
        "cost_per_day": float(day.total),
        "workload_cost_per_day": float(day.workload),
        "idle_cost_per_day": float(day.idle),
        "currency": day.currency,
        "chart": dg.MetadataValue.md(markdown_image(chart, "GPU cost by tenant, tier and agent type")),
        "cost_by_tenant_tier_agent_type": table(day.breakdown(), BREAKDOWN_COLUMNS),
    })  # fmt: skip
