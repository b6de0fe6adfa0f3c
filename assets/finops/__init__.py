"""FinOps: pod snapshots, agent-tree usage, cost anomalies and their alerts, the last day's cost as
a chart (the cost fact itself is dbt: dbt/models/marts/finops)."""

import dagster as dg
from dagster_dbt import build_dbt_asset_selection

from assets.dbt.assets import gpufabric_dbt_models
from assets.finops.anomalies import finops_anomalies, finops_anomaly_alerts
from assets.finops.cost_overview import cost_overview
from assets.finops.price_book import price_book
from assets.finops.resources import AlertWebhookResource, FinOpsResource
from assets.finops.snapshots import k8s_pod_snapshots, land_pod_snapshots
from services.price_book import COST_FACT_SELECT

pod_snapshots_job = dg.define_asset_job("finops_pod_snapshots", selection=dg.AssetSelection.assets(k8s_pod_snapshots))
cost_job = dg.define_asset_job(
    "finops_cost",
    selection=build_dbt_asset_selection(
        [gpufabric_dbt_models],
        dbt_select=f"{COST_FACT_SELECT} cost_anomalies int_finops_reconciliation int_finops_activity_unmatched",
    )
    | dg.AssetSelection.assets(finops_anomalies, price_book, cost_overview),
    description="Rebuild the cost fact, judge the latest hours for anomalies and chart the last day.",
)
pod_snapshots_every_minute = dg.ScheduleDefinition(
    name="finops_pod_snapshots_every_minute",
    job=pod_snapshots_job,
    cron_schedule="* * * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="List every cluster's pods each minute and watch in between (FinOpsResource.watch_seconds).",
)
cost_every_10_minutes = dg.ScheduleDefinition(
    name="finops_cost_every_10_minutes",
    job=cost_job,
    cron_schedule="*/10 * * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Cost fact and anomaly detection; alerts follow within a sensor tick (about a minute).",
)

defs = dg.Definitions(
    assets=[k8s_pod_snapshots, finops_anomalies, price_book, cost_overview],
    jobs=[pod_snapshots_job, cost_job],
    schedules=[pod_snapshots_every_minute, cost_every_10_minutes],
    sensors=[finops_anomaly_alerts],
    resources={"finops": FinOpsResource(), "alert_webhook": AlertWebhookResource()},
)

__all__ = ["cost_overview", "defs", "finops_anomalies", "finops_anomaly_alerts", "k8s_pod_snapshots",
           "land_pod_snapshots", "price_book"]
