"""``agents/budget_settlement``: settle-on-finish for the budget ledger, as a Dagster asset.

No ``from __future__ import annotations``: Dagster reads annotations at runtime.

Thin: the site file's ``budget.settlement`` bounds → :func:`connectors.warehouse.settlement.
settle_finished` (reads the ledger, pod snapshots and the cost fact; :func:`core.budget.
settlement` decides) → metadata with the counts. An asset, not a step of the enforcement loop:
its inputs change when the pod snapshots land and dbt rebuilds the cost fact, not every few
seconds; it needs the warehouse only (no Kubernetes); and each pass is visible in the run history
with what it settled. It has its own job and schedule rather than riding in ``finops_cost``, so a
failing dbt build does not stop the fallback that settles from snapshots once the fact is late.
"""

from datetime import UTC, datetime

import dagster as dg

from connectors.warehouse import Warehouse
from connectors.warehouse.settlement import settle_finished
from settings import Settings, settlement_policy_from_settings

BUDGET_SETTLEMENT = dg.AssetKey(["agents", "budget_settlement"])
COST_FACT = dg.AssetKey(["finops", "gpu_cost_hourly"])
POD_SNAPSHOTS = dg.AssetKey(["raw", "k8s_pod_snapshots"])


@dg.asset(
    key=BUDGET_SETTLEMENT,
    deps=[COST_FACT, POD_SNAPSHOTS],
    group_name="agents",
    kinds={"postgres"},
    description="Finished agents' budget reservations replaced by their measured GPU-hours and cost "
    "(agents.ledger, agents.envelopes; exceptions audited in agents.budget_audit).",
)
def budget_settlement(
    context: dg.AssetExecutionContext, warehouse: dg.ResourceParam[Warehouse], site: dg.ResourceParam[Settings]
) -> dg.MaterializeResult:
    settings = site
    policy = settlement_policy_from_settings(settings)
    with warehouse.connect(autocommit=True) as conn:
        report = settle_finished(conn, policy, datetime.now(UTC), prefix=settings.label_prefix)
    for res, decision in report.decisions:
        if decision.settles and decision.audited:
            context.log.warning("%s/%s: %s", res.root_id, res.agent_id, decision.reason)
    context.log.info("%d reservations open, %d settled (%s)", report.reserved, report.settled, dict(report.by_rule))
    return dg.MaterializeResult(
        metadata={
            "reservations_open": dg.MetadataValue.int(report.reserved),
            "settled": dg.MetadataValue.int(report.settled),
            "already_settled": dg.MetadataValue.int(report.already_settled),
            "by_rule": dg.MetadataValue.json(dict(report.by_rule)),
            "released_gpu_hours": dg.MetadataValue.float(float(report.released_gpu_hours)),
            "spent_gpu_hours": dg.MetadataValue.float(float(report.spent_gpu_hours)),
            "spent_cost_usd": dg.MetadataValue.float(float(report.spent_cost_usd)),
        }
    )


budget_settlement_job = dg.define_asset_job(
    "budget_settlement",
    selection=dg.AssetSelection.assets(budget_settlement),
    description="Settle finished agents' reservations from the cost fact (or, past the bound, the snapshots).",
)
budget_settlement_every_5_minutes = dg.ScheduleDefinition(
    name="budget_settlement_every_5_minutes",
    job=budget_settlement_job,
    cron_schedule="*/5 * * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Twice per cost-fact rebuild (finops_cost runs every 10 minutes).",
)

__all__ = ["BUDGET_SETTLEMENT", "budget_settlement", "budget_settlement_every_5_minutes", "budget_settlement_job"]
