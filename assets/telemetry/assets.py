"""DCGM telemetry assets: thin wrappers over connectors.prometheus.collect.

``telemetry/dcgm_samples`` is partitioned by hour: each partition reads its hour from every
configured Prometheus (``sources.prometheus``) with ``query_range``, so history is backfilled with
Dagster's ordinary partition backfills, and re-running an hour replaces it idempotently.
``telemetry/dcgm_exporter_scrape`` scrapes the exporters in ``sources.dcgm_exporters`` directly,
once per materialization (for sites without Prometheus; put it on a schedule).
No ``from __future__ import annotations`` here: Dagster reads the context annotation at runtime.
"""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg

from assets.telemetry.resources import TelemetryResource
from connectors.prometheus import apply_retention, ensure_partitions, read_targets_file
from connectors.prometheus.collect import Outcome, collect_exporters, collect_prometheus
from connectors.prometheus.scrape import TargetsError
from connectors.warehouse import Warehouse
from settings import Settings

HOURLY = dg.HourlyPartitionsDefinition(start_date="2026-01-01-00:00", timezone="UTC")


def _metadata(outcome: Outcome, extra: dict[str, dg.MetadataValue]) -> dict[str, dg.MetadataValue]:
    return {
        "samples_landed": dg.MetadataValue.int(outcome.samples),
        "new_series": dg.MetadataValue.int(outcome.new_series),
        "rows_quarantined": dg.MetadataValue.int(outcome.quarantined),
        "targets_by_status": dg.MetadataValue.json(dict(outcome.statuses)),
        "null_values_by_reason": dg.MetadataValue.json(dict(outcome.value_flags)),
        "windows_reloaded": dg.MetadataValue.int(outcome.replaced_windows),
        **extra,
    }


@dg.asset(
    key=["telemetry", "dcgm_samples"],
    group_name="telemetry",
    kinds={"postgres", "prometheus"},
    partitions_def=HOURLY,
    description="DCGM samples for one hour, read from every configured Prometheus (query_range).",
)
def dcgm_samples(
    context: dg.AssetExecutionContext,
    warehouse: dg.ResourceParam[Warehouse],
    site: dg.ResourceParam[Settings],
    telemetry: TelemetryResource,
) -> dg.MaterializeResult:
    settings = site
    window = context.partition_time_window
    run_id = context.run.run_id
    outcome = Outcome()
    if not settings.sources.prometheus:
        context.log.warning("no Prometheus sources configured (sources.prometheus in %s)", settings.source_path)
    with warehouse.connect() as conn:
        for src in settings.sources.prometheus:
            collect_prometheus(
                conn,
                name=src.name,
                url=src.url,
                start=window.start,
                end=window.end,
                step_s=src.step_s,
                run_id=run_id,
                query=src.query,
                timeout_s=src.timeout_s,
                retries=src.retries,
                outcome=outcome,
            )
            conn.commit()
        today = datetime.now(UTC).date()
        created = ensure_partitions(conn, today, today + timedelta(days=telemetry.partitions_ahead_days))
        detached = apply_retention(conn, keep_days=telemetry.retention_days, drop=telemetry.drop_detached)
        conn.commit()
    for target, detail in outcome.details.items():
        context.log.warning("%s: %s", target, detail)
    return dg.MaterializeResult(
        metadata=_metadata(
            outcome,
            {
                "window": dg.MetadataValue.text(f"{window.start.isoformat()} .. {window.end.isoformat()}"),
                "partitions_created": dg.MetadataValue.json(created),
                "partitions_detached": dg.MetadataValue.json(detached),
            },
        )
    )


@dg.asset(
    key=["telemetry", "dcgm_exporter_scrape"],
    group_name="telemetry",
    kinds={"postgres"},
    description="One concurrent scrape of every configured dcgm-exporter, landed in telemetry.dcgm_samples.",
)
def dcgm_exporter_scrape(
    context: dg.AssetExecutionContext,
    warehouse: dg.ResourceParam[Warehouse],
    site: dg.ResourceParam[Settings],
    telemetry: TelemetryResource,
) -> dg.MaterializeResult:
    settings = site
    outcome = Outcome()
    targets = 0
    with warehouse.connect() as conn:
        for src in settings.sources.dcgm_exporters:
            try:
                urls = list(src.urls) if src.urls else read_targets_file(Path(str(src.targets_file)))
            except TargetsError as err:
                context.log.error("%s: %s", src.name, err)
                outcome.statuses["invalid"] += 1
                outcome.details[src.name] = str(err)
                continue
            targets += len(urls)
            collect_exporters(
                conn,
                urls,
                run_id=context.run.run_id,
                concurrency=telemetry.scrape_concurrency,
                timeout_s=src.timeout_s,
                outcome=outcome,
            )
            conn.commit()
    for target, detail in outcome.details.items():
        context.log.warning("%s: %s", target, detail)
    return dg.MaterializeResult(metadata=_metadata(outcome, {"targets": dg.MetadataValue.int(targets)}))


dcgm_hourly_job = dg.define_asset_job("dcgm_hourly", selection=[dcgm_samples], partitions_def=HOURLY)
dcgm_hourly_schedule = dg.build_schedule_from_partitioned_job(
    dcgm_hourly_job, default_status=dg.DefaultScheduleStatus.STOPPED
)

defs = dg.Definitions(
    assets=[dcgm_samples, dcgm_exporter_scrape],
    jobs=[dcgm_hourly_job],
    schedules=[dcgm_hourly_schedule],
    resources={"telemetry": TelemetryResource()},
)
