-- Anomalies as analysts see them. A view, so an anomaly is visible the moment the detector
-- (assets/finops, Python: core/finops/anomaly.py) writes it, without a dbt run. The detector's
-- tables are referenced directly rather than as dbt sources: the detector runs *after* the cost
-- fact, and a source here would make Dagster see a cycle (dbt -> detector -> dbt). The view runs
-- with its owner's rights, so finops_reader reads it without any grant on ops.
{{ config(materialized='view') }}

select
    a.anomaly_id,
    a.client,
    a.agent_type,
    a.tier,
    a.hour,
    a.method,
    a.expected_usd,
    a.actual_usd,
    a.impact_usd,
    a.relative_impact,
    a.score,
    a.baseline_samples,
    a.detected_at,
    d.status as alert_status,
    d.attempts as alert_attempts,
    d.finished_at as alerted_at
from ops.finops_anomalies as a
left join ops.alert_deliveries as d on d.anomaly_id = a.anomaly_id
