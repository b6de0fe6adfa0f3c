"""``raw/k8s_pod_lag``: how long agent pods waited to be scheduled and to run, per run of a watch;
and the check that the lag mart's p99 stays within the site's SLO (issue 20, part 2).

Thin: for every configured cluster at once, list + watch agent pods and Kueue Workloads for
``burst.watch_s`` (``connectors.kube.lag.watch_lag``) → one row per pod created since
``burst.lookback_s`` before the watch began → one transaction per cluster (``land_collection``:
rows, quarantined pods, status). The percentiles per group are dbt's
(``efficiency.pod_scheduling_lag_5m``) and the check reads that mart; the asset's metadata also
carries the run's overall p99 lags as floats, which the Dagster UI plots across runs.
No ``from __future__ import annotations``: Dagster reads annotations at runtime.
"""

import concurrent.futures as cf
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import psycopg
from kubernetes.client.exceptions import ApiException
from psycopg.rows import dict_row
from urllib3.exceptions import HTTPError as Urllib3HTTPError

from connectors.kube import api_client
from connectors.kube.lag import LAG_COLUMNS, SOURCE, LagCollection, WatchUnavailable, lag_row, watch_lag
from connectors.warehouse import Warehouse, land_collection, record_status
from core.quality import CollectionStatus
from settings import Settings

# One-shot runs (the demo, `gpufabric run`) want a list and a short watch, not the schedule's 45 s.
ENV_WATCH_SECONDS = "GPUFABRIC_BURST_WATCH_SECONDS"
POD_LAG = dg.AssetKey(["raw", "k8s_pod_lag"])
LAG_MART = dg.AssetKey(["efficiency", "pod_scheduling_lag_5m"])
LAG_CHECK = "lag_p99_within_slo"
TABLE = "raw.k8s_pod_lag"


def effective_watch_s(settings: Settings) -> float:
    """``$GPUFABRIC_BURST_WATCH_SECONDS`` when set to a positive number, else ``burst.watch_s``."""
    try:
        seconds = float(os.environ.get(ENV_WATCH_SECONDS) or "nan")
    except ValueError:
        seconds = float("nan")
    return seconds if 0 < seconds <= 86400 else settings.burst.watch_s


def percentile_cont(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks: Postgres' ``percentile_cont``, which the lag
    mart uses, so the asset's number and the mart's agree on the same pods."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def lag_percentiles(pods: Iterable[Any], q: float = 0.99) -> dict[str, float]:
    """p99 creation -> scheduled and creation -> Running (seconds) over the pods that got there;
    an entry is left out when no pod did (Dagster plots numbers, not gaps)."""
    scheduled, running = [], []
    for p in pods:
        if p.scheduled_at is not None:
            scheduled.append((p.scheduled_at - p.created_at).total_seconds())
        if p.running_at is not None:
            running.append((p.running_at - p.created_at).total_seconds())
    pct = round(q * 100)
    out = {f"scheduled_lag_p{pct}_s": percentile_cont(scheduled, q),
           f"running_lag_p{pct}_s": percentile_cont(running, q)}  # fmt: skip
    return {k: round(v, 3) for k, v in out.items() if v is not None}


def land_pod_lag(conn: psycopg.Connection, *, run_id: str, cluster: str, collection: LagCollection,
                 started_at: datetime) -> tuple[int, int]:  # fmt: skip
    """Land one cluster's lag records atomically (replacing this run's earlier attempt)."""
    notes = []
    if collection.kueue_note:
        notes.append(f"{collection.kueue_note}: no admission times")
    relists = collection.pod_watch.lists + collection.workload_watch.lists - (2 if collection.kueue else 1)
    if relists > 0:
        notes.append(f"watch re-listed {relists} time(s) ({collection.pod_watch.last_error or 'expired'})")
    rows = (lag_row(run_id, cluster, collection.window_start, collection.window_end, p)
            for p in collection.pods.records)  # fmt: skip
    return land_collection(conn, run_id=run_id, source=SOURCE, device=cluster, table=TABLE, columns=LAG_COLUMNS,
                           rows=rows, quarantined=collection.pods.quarantined, status=collection.pods.status,
                           started_at=started_at, detail="; ".join(notes) or None)  # fmt: skip


@dg.asset(
    key=POD_LAG,
    group_name="agents",
    kinds={"kubernetes", "postgres"},
    description="Every agent pod's creation, PodScheduled, Running and Kueue admission times, per run of "
    "a watch of burst.watch_s seconds on every configured cluster.",
)
def k8s_pod_lag(
    context: dg.AssetExecutionContext, warehouse: dg.ResourceParam[Warehouse], site: dg.ResourceParam[Settings]
) -> dg.MaterializeResult:
    settings = site
    run_id = context.run.run_id
    burst = settings.burst
    watch_s = effective_watch_s(settings)
    if not settings.sources.kubernetes:
        context.log.warning("no Kubernetes clusters configured (sources.kubernetes in %s)", settings.source_path)
    started = datetime.now(UTC)
    since = started - timedelta(seconds=burst.lookback_s)

    def collect(src: Any) -> LagCollection:
        api = api_client(src)
        try:
            return watch_lag(api, cluster=src.name, seconds=watch_s, since=since, prefix=settings.label_prefix,
                             progress=lambda message: context.log.info("%s: %s", src.name, message))  # fmt: skip
        finally:
            api.close()

    statuses: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    kueue: dict[str, bool] = {}
    landed_pods: list[Any] = []
    # Clusters are watched at once: one window, not one per cluster.
    with cf.ThreadPoolExecutor(max_workers=max(1, len(settings.sources.kubernetes))) as pool:
        futures = {pool.submit(collect, src): src for src in settings.sources.kubernetes}
        with warehouse.connect() as conn:
            for future in cf.as_completed(futures):
                src = futures[future]
                try:
                    collection = future.result()
                except (ApiException, Urllib3HTTPError, OSError, ValueError, WatchUnavailable) as err:
                    detail = str(err) if isinstance(err, WatchUnavailable) else (
                        f"{type(err).__name__}: {getattr(err, 'status', '') or ''} {getattr(err, 'reason', '') or ''}")
                    record_status(conn, run_id=run_id, source=SOURCE, device=src.name,
                                  status=CollectionStatus.UNREACHABLE, started_at=started,
                                  finished_at=datetime.now(UTC), detail=detail.strip()[:500])  # fmt: skip
                    conn.commit()
                    statuses["unreachable"] += 1
                    context.log.warning("%s: unreachable (%s)", src.name, detail.strip())
                    continue
                landed, held = land_pod_lag(conn, run_id=run_id, cluster=src.name, collection=collection,
                                            started_at=started)  # fmt: skip
                conn.commit()
                statuses[str(collection.pods.status)] += 1
                kueue[src.name] = collection.kueue
                records = collection.pods.records
                landed_pods.extend(records)
                waiting = sum(1 for p in records if p.running_at is None)
                totals.update(pods=landed, quarantined=held, older=collection.older, not_running=waiting,
                              deleted=sum(1 for p in records if p.deleted),
                              with_issues=sum(1 for p in records if p.issues))  # fmt: skip
                context.log.info("%s: %d agent pods landed (%d not running at the end), %d quarantined",
                                 src.name, landed, waiting, held)  # fmt: skip
    return dg.MaterializeResult(metadata={
        "pods_landed": dg.MetadataValue.int(totals["pods"]),
        "pods_quarantined": dg.MetadataValue.int(totals["quarantined"]),
        "pods_not_running_at_end": dg.MetadataValue.int(totals["not_running"]),
        "pods_deleted_in_window": dg.MetadataValue.int(totals["deleted"]),
        "pods_with_issues": dg.MetadataValue.int(totals["with_issues"]),
        "pods_older_than_lookback": dg.MetadataValue.int(totals["older"]),
        "clusters_by_status": dg.MetadataValue.json(dict(statuses)),
        "kueue_by_cluster": dg.MetadataValue.json(kueue),
        "watch_s": dg.MetadataValue.float(watch_s),
        **{k: dg.MetadataValue.float(v) for k, v in lag_percentiles(landed_pods).items()},
    })  # fmt: skip


def evaluate_lag_slo(conn: psycopg.Connection, slo_s: float) -> dg.AssetCheckResult:
    """The latest lag run against the SLO: it fails when any (bucket, tenant, tier, agent type)
    has a p99 creation-to-Running over ``slo_s``, or pods still not running that had waited
    longer than ``slo_s`` by the end of the window (they would only make the p99 worse)."""
    if conn.execute("SELECT to_regclass('efficiency.pod_scheduling_lag_5m')").fetchone() == (None,):
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN,
                                   description="no lag mart yet (dbt has not built efficiency.pod_scheduling_lag_5m)",
                                   metadata={"slo_s": slo_s})  # fmt: skip
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            """
            WITH latest AS (
                SELECT run_id FROM efficiency.pod_scheduling_lag_5m
                GROUP BY run_id ORDER BY max(window_end) DESC, run_id LIMIT 1
            )
            SELECT m.* FROM efficiency.pod_scheduling_lag_5m m JOIN latest USING (run_id)
            ORDER BY m.bucket, m.client, m.tier, m.agent_type
            """
        ).fetchall()
    if not rows:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN,
                                   description="no lag run in the mart: nothing measured", metadata={"slo_s": slo_s})
    over = [r for r in rows if (r["running_lag_p99_s"] or 0) > slo_s or (r["max_waiting_s"] or 0) > slo_s]
    worst = max((r["running_lag_p99_s"] for r in rows if r["running_lag_p99_s"] is not None), default=None)
    longest_wait = max((r["max_waiting_s"] for r in rows if r["max_waiting_s"] is not None), default=None)

    def group(r: Mapping[str, Any]) -> dict[str, Any]:
        return {"bucket": r["bucket"].isoformat(), "client": r["client"], "tier": r["tier"],
                "agent_type": r["agent_type"], "pods": r["pods"], "running_lag_p99_s": r["running_lag_p99_s"],
                "pods_not_running": r["pods_not_running"], "max_waiting_s": r["max_waiting_s"]}  # fmt: skip

    ranked = sorted(over, key=lambda r: -max(r["running_lag_p99_s"] or 0, r["max_waiting_s"] or 0))
    return dg.AssetCheckResult(
        passed=not over,
        severity=dg.AssetCheckSeverity.ERROR,
        description=(f"{len(over)} of {len(rows)} groups over the {slo_s:g} s SLO" if over
                     else f"every group's p99 creation-to-Running within {slo_s:g} s"),
        metadata={
            "slo_s": slo_s,
            "run_id": rows[0]["run_id"],
            "groups": len(rows),
            "groups_over_slo": len(over),
            "pods": sum(r["pods"] for r in rows),
            "pods_not_running": sum(r["pods_not_running"] for r in rows),
            "worst_p99_running_lag_s": worst,
            "longest_wait_not_running_s": longest_wait,
            "worst_groups": dg.MetadataValue.json([group(r) for r in ranked[:5]]),
        },
    )  # fmt: skip


@dg.asset_check(
    asset=LAG_MART,
    name=LAG_CHECK,
    description="p99 creation-to-Running per tenant, tier, agent type and 5 minutes of the latest lag run "
    "is within burst.lag_slo_s, and no pod still waiting has waited longer.",
)
def lag_p99_within_slo(warehouse: dg.ResourceParam[Warehouse], site: dg.ResourceParam[Settings]) -> dg.AssetCheckResult:
    with warehouse.connect() as conn:
        return evaluate_lag_slo(conn, site.burst.lag_slo_s)


pod_lag_job = dg.define_asset_job(
    "agents_pod_lag", selection=dg.AssetSelection.assets(k8s_pod_lag),
    description="Watch agent pods for burst.watch_s and land their scheduling times.",
)  # fmt: skip
pod_lag_every_minute = dg.ScheduleDefinition(
    name="agents_pod_lag_every_minute",
    job=pod_lag_job,
    cron_schedule="* * * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Watch agent pods each minute (burst.watch_s of it); burst.lookback_s re-lands pods still "
    "pending from the run before.",
)

defs = dg.Definitions(assets=[k8s_pod_lag], asset_checks=[lag_p99_within_slo], jobs=[pod_lag_job],
                      schedules=[pod_lag_every_minute])  # fmt: skip

__all__ = ["LAG_CHECK", "LAG_MART", "POD_LAG", "defs", "effective_watch_s", "evaluate_lag_slo", "k8s_pod_lag",
           "lag_p99_within_slo", "lag_percentiles", "land_pod_lag", "percentile_cont",
           "pod_lag_every_minute"]  # fmt: skip
