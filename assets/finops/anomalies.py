"""Cost anomalies from the cost fact, and the sensor that sends each one to the webhook once.

The detector (core/finops/anomaly.py) runs after the dbt cost fact in the same scheduled job, on
the allocation basis' EffectiveCost per (client, agent type, tier) and hour. Anomalies are keyed
by (series, hour), so a re-run updates a row instead of adding one, and the sensor's delivery
table makes each alert go out once: delivered rows are never sent again, failed ones are retried
on later ticks. An advisory lock keeps two ticks from delivering at the same time.
"""

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import dagster as dg
import psycopg
from psycopg.rows import dict_row

from assets.finops.resources import AlertWebhookResource, FinOpsResource
from connectors.warehouse import Warehouse
from core.finops.alerts import slack_payload
from core.finops.anomaly import Anomaly, SeriesKey, Thresholds, detect

COST_FACT = dg.AssetKey(["finops", "gpu_cost_hourly"])
ANOMALIES = dg.AssetKey(["ops", "finops_anomalies"])
_DELIVERY_LOCK = 0x66696E61  # "fina"


def load_series(
    conn: psycopg.Connection, latest: datetime, thr: Thresholds
) -> dict[SeriesKey, dict[datetime, Decimal]]:
    since = latest - timedelta(weeks=thr.history_weeks, hours=1)
    rows = conn.execute(
        """
        SELECT "SubAccountId", "x_AgentType", "x_Tier", "ChargePeriodStart", sum("EffectiveCost")
        FROM finops.gpu_cost_hourly
        WHERE "x_CostBasis" = 'allocation' AND "x_LineType" = 'workload'
          AND "ChargePeriodStart" >= %s AND "ChargePeriodStart" <= %s AND "EffectiveCost" IS NOT NULL
        GROUP BY 1, 2, 3, 4
        """,
        (since, latest),
    ).fetchall()
    series: dict[SeriesKey, dict[datetime, Decimal]] = defaultdict(dict)
    for client, agent_type, tier, hour, cost in rows:
        series[(client, agent_type, tier)][hour] = Decimal(cost)
    return dict(series)


def load_budgets(conn: psycopg.Connection) -> dict[str, Decimal | None]:
    if conn.execute("SELECT to_regclass('staging.clients')").fetchone() == (None,):
        return {}
    return {c: (None if b is None else Decimal(b))
            for c, b in conn.execute("SELECT client_id, monthly_budget_usd FROM staging.clients").fetchall()}


def store_anomalies(conn: psycopg.Connection, anomalies: Sequence[Anomaly], run_id: str) -> int:
    """Insert new anomalies, refresh known ones (same id); returns how many are new."""
    new = 0
    for a in anomalies:
        inserted = conn.execute(
            """
            INSERT INTO ops.finops_anomalies (anomaly_id, client, agent_type, tier, hour, method, expected_usd,
                actual_usd, impact_usd, relative_impact, score, baseline_samples, detail, run_id)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (anomaly_id) DO UPDATE SET
                expected_usd = EXCLUDED.expected_usd, actual_usd = EXCLUDED.actual_usd,
                impact_usd = EXCLUDED.impact_usd, relative_impact = EXCLUDED.relative_impact,
                score = EXCLUDED.score, baseline_samples = EXCLUDED.baseline_samples, detail = EXCLUDED.detail
            RETURNING (xmax = 0)
            """,
            (a.anomaly_id, a.client, a.agent_type, a.tier, a.hour, a.method, a.expected_usd, a.actual_usd,
             a.impact_usd, a.relative_impact, a.score, a.baseline_samples,
             psycopg.types.json.Jsonb(a.detail), run_id),
        ).fetchone()
        new += 1 if inserted and inserted[0] else 0
    return new


def _count(conn: psycopg.Connection, query: str) -> int | None:
    try:
        with conn.transaction():
            row = conn.execute(query).fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    return int(row[0]) if row else 0


def detect_anomalies(conn: psycopg.Connection, thr: Thresholds, lookback_hours: int, run_id: str) -> dict[str, Any]:
    """Judge the latest ``lookback_hours`` hours of data; store anomalies; return the counts."""
    row = conn.execute(
        """SELECT max("ChargePeriodStart") FROM finops.gpu_cost_hourly WHERE "x_LineType" = 'workload'"""
    ).fetchone()
    latest = row[0] if row else None
    if latest is None:
        return {"latest_hour": None, "anomalies": [], "new": 0, "methods": {}}
    hours = [latest - timedelta(hours=k) for k in range(lookback_hours)]
    found, methods = detect(load_series(conn, latest, thr), hours, load_budgets(conn), thr)
    new = store_anomalies(conn, found, run_id)
    return {"latest_hour": latest, "anomalies": found, "new": new, "methods": methods}


@dg.asset(
    key=ANOMALIES,
    deps=[COST_FACT],
    group_name="finops",
    kinds={"postgres"},
    description="Cost anomalies per (client, agent type, tier) and hour: seasonal median/MAD, or budget burn rate.",
)
def finops_anomalies(
    context: dg.AssetExecutionContext, warehouse: dg.ResourceParam[Warehouse], finops: FinOpsResource
) -> dg.MaterializeResult:
    with warehouse.connect() as conn:
        result = detect_anomalies(conn, finops.thresholds(), finops.lookback_hours, context.run.run_id)
        quality = {
            "telemetry_pod_hours_without_pod": _count(
                conn, "SELECT count(*) FROM staging.int_finops_activity_unmatched"),
            "unbalanced_node_hours": _count(conn, "SELECT count(*) FROM staging.int_finops_reconciliation "
                                                  "WHERE NOT balanced"),
            "negative_idle_node_hours": _count(conn, "SELECT count(*) FROM staging.int_finops_reconciliation "
                                                     "WHERE NOT idle_nonnegative"),
            "unpriced_lines": _count(conn, """SELECT count(*) FROM finops.gpu_cost_hourly
                                              WHERE "EffectiveCost" IS NULL"""),
        }
        conn.commit()
    for a in result["anomalies"]:
        context.log.warning("anomaly %s/%s/%s at %s: actual %s expected %s (score %.1f)", a.client, a.agent_type,
                            a.tier, a.hour, a.actual_usd, a.expected_usd, a.score)
    return dg.MaterializeResult(metadata={
        "latest_hour": dg.MetadataValue.text(str(result["latest_hour"])),
        "anomalies_found": dg.MetadataValue.int(len(result["anomalies"])),
        "anomalies_new": dg.MetadataValue.int(result["new"]),
        "series_hours_by_method": dg.MetadataValue.json(result["methods"]),
        **{k: dg.MetadataValue.int(v) for k, v in quality.items() if v is not None},
    })


def deliver_pending(conn: psycopg.Connection, webhook: AlertWebhookResource) -> dict[str, int]:
    """Send every anomaly without a successful delivery; record the outcome. Returns counts."""
    counts = {"delivered": 0, "failed": 0, "skipped_locked": 0}
    with conn.transaction():
        if not conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (_DELIVERY_LOCK,)).fetchone()[0]:  # type: ignore[index]
            counts["skipped_locked"] = 1
            return counts
        with conn.cursor(row_factory=dict_row) as cur:
            pending = cur.execute(
                """
                SELECT a.*, d.attempts AS previous_attempts, d.first_attempt_at
                FROM ops.finops_anomalies a
                LEFT JOIN ops.alert_deliveries d ON d.anomaly_id = a.anomaly_id
                WHERE d.anomaly_id IS NULL OR d.status = 'failed'
                ORDER BY a.hour, a.anomaly_id
                """
            ).fetchall()
        for a in pending:
            started = datetime.now().astimezone()
            outcome = webhook.post(slack_payload(a), a["anomaly_id"])
            conn.execute(
                """
                INSERT INTO ops.alert_deliveries (anomaly_id, status, attempts, http_status, last_error,
                    first_attempt_at, finished_at)
                VALUES (%s, %s, %s, %s, %s, %s, now())
                ON CONFLICT (anomaly_id) DO UPDATE SET status = EXCLUDED.status,
                    attempts = ops.alert_deliveries.attempts + EXCLUDED.attempts, http_status = EXCLUDED.http_status,
                    last_error = EXCLUDED.last_error, finished_at = EXCLUDED.finished_at
                """,
                (a["anomaly_id"], "delivered" if outcome.delivered else "failed", outcome.attempts,
                 outcome.http_status, outcome.error, a["first_attempt_at"] or started),
            )
            counts["delivered" if outcome.delivered else "failed"] += 1
    return counts


@dg.sensor(
    name="finops_anomaly_alerts",
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Sends each new cost anomaly to the configured webhook once (Slack-compatible JSON), with retries.",
)
def finops_anomaly_alerts(
    context: dg.SensorEvaluationContext, warehouse: dg.ResourceParam[Warehouse], alert_webhook: AlertWebhookResource
) -> dg.SkipReason:
    with warehouse.connect() as conn:
        counts = deliver_pending(conn, alert_webhook)
    if counts["failed"]:
        context.log.warning("finops alerts: %d delivery(ies) failed; retried next tick", counts["failed"])
    return dg.SkipReason(f"alerts delivered {counts['delivered']}, failed {counts['failed']}")
