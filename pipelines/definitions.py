"""The Dagster code location: every area's Definitions merged, with resources, jobs and schedules.

``dagster dev`` finds this through ``[tool.dagster]`` in pyproject.toml. Resources are bound
here, once, so every area's assets share one warehouse and one site config.
"""

from __future__ import annotations

import dagster as dg

from assets import (
    affinity,
    agents,
    dbt,
    dcim,
    finops,
    infiniband,
    lldp,
    lldp_cli,
    mig,
    placement,
    publish,
    telemetry,
    topology,
)
from pipelines.resources import SiteConfigResource, WarehouseResource

# A job holds one partitions definition: the LLDP collectors' switch groups (a launch without a group
# collects every switch). DCGM ingest is partitioned by hour and has its own job (dcgm_hourly).
collect_all = dg.define_asset_job(
    "collect_all",
    selection=dg.AssetSelection.all() - dg.AssetSelection.assets(telemetry.dcgm_samples),
    description="Collect every source and derive everything (DCGM hours: the dcgm_hourly job).",
)
inventory_daily = dg.ScheduleDefinition(
    name="inventory_daily",
    job=dg.define_asset_job("inventory", selection=dg.AssetSelection.groups("inventory")),
    cron_schedule="0 5 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="DCIM exports change with change tickets, not by the minute: once a day is plenty.",
)

defs = dg.Definitions.merge(
    dcim.defs,
    lldp.defs,
    lldp_cli.defs,
    infiniband.defs,
    telemetry.defs,
    topology.defs,
    affinity.defs,
    publish.defs,
    mig.defs,
    placement.defs,
    finops.defs,
    agents.defs,
    dbt.defs,
    dg.Definitions(
        jobs=[collect_all],
        schedules=[inventory_daily],
        resources={"warehouse": WarehouseResource(), "site": SiteConfigResource()},
    ),
)
