"""MIG demand from the warehouse's history (issue 21, part 1): read, then size with ``core.mig.sizing``.

Two sources, one window ``[since, until)``:

* ``finops.gpu_cost_hourly``, allocation-basis workload lines: per tenant (SubAccountId), agent type
  and GPU model, the pod-seconds of every hour (mean pods holding GPUs = seconds / 3600), the pods,
  the whole GPUs a pod asked for and the MIG profile its pods asked for. The cost fact is the
  contract table (``finops``), already cut per pod and hour; reading the staging views would
  re-derive every pod's intervals from all snapshots.
* ``telemetry.dcgm_samples`` / ``dcgm_series``: each pod's peak ``DCGM_FI_DEV_FB_USED`` (MiB, per
  GPU or per MIG instance as dcgm-exporter labels it with the pod), joined to the fact's lines by
  ``namespace/pod`` (the fact's ResourceName).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg

from core.mig.demand import Isolation, TenantDemand
from core.mig.sizing import (
    DEFAULT_POLICY,
    HistoryDemand,
    SizingPolicy,
    WorkloadHistory,
    demands_from_history,
    merge_demands,
)

FB_USED = "DCGM_FI_DEV_FB_USED"

_HISTORY = """
WITH lines AS (
    SELECT "SubAccountId" AS tenant, coalesce("x_AgentType", 'unattributed') AS agent_type,
           "x_GpuModel" AS model, "ChargePeriodStart" AS hour, "ResourceName" AS pod, "x_Seconds" AS seconds,
           "x_MigProfile" AS profile, "x_GpuUnits" AS units
    FROM finops.gpu_cost_hourly
    WHERE "x_CostBasis" = 'allocation' AND "x_LineType" = 'workload'
      AND "ChargePeriodStart" >= %(since)s AND "ChargePeriodStart" < %(until)s
      AND (%(cluster)s::text IS NULL OR "x_Cluster" = %(cluster)s::text)
), hourly AS (
    SELECT tenant, agent_type, model, array_agg(pods ORDER BY hour) AS pods
    FROM (SELECT tenant, agent_type, model, hour, sum(seconds) / 3600 AS pods FROM lines GROUP BY 1, 2, 3, 4) AS h
    GROUP BY 1, 2, 3
), fb AS (
    SELECT r.namespace || '/' || r.pod AS pod, max(s.value) AS mib
    FROM telemetry.dcgm_samples AS s
    JOIN telemetry.dcgm_series AS r ON r.series_id = s.series_id
    WHERE r.metric = %(metric)s AND r.pod IS NOT NULL AND r.namespace IS NOT NULL
      AND s.ts >= %(since)s AND s.ts < %(until)s
    GROUP BY 1
), per_pod AS (
    SELECT tenant, agent_type, model, pod,
           max(units) FILTER (WHERE profile IS NULL) AS whole, mode() WITHIN GROUP (ORDER BY profile) AS profile
    FROM lines GROUP BY 1, 2, 3, 4
)
SELECT p.tenant, p.agent_type, p.model, count(*) AS pods, max(h.pods) AS hourly,
       array_remove(array_agg(fb.mib), NULL) AS fb, coalesce(ceil(max(p.whole)), 0)::integer AS gpus_per_pod,
       mode() WITHIN GROUP (ORDER BY p.profile) AS profile
FROM per_pod AS p
JOIN hourly AS h ON h.tenant IS NOT DISTINCT FROM p.tenant AND h.agent_type = p.agent_type
                AND h.model IS NOT DISTINCT FROM p.model
LEFT JOIN fb ON fb.pod = p.pod
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
"""


def window_hours(since: datetime, until: datetime) -> int:
    """Whole hours in [since, until), rounded up; refuses an empty or naive window."""
    if since.tzinfo is None or until.tzinfo is None:
        raise ValueError("give the window's bounds a time zone")
    if until <= since:
        raise ValueError(f"an empty window: {since.isoformat()} .. {until.isoformat()}")
    return math.ceil((until - since).total_seconds() / 3600)


def read_history(conn: psycopg.Connection, *, since: datetime, until: datetime,
                 cluster: str | None = None) -> list[WorkloadHistory]:
    """Per tenant, agent type and GPU model: what the window's cost lines and DCGM samples hold."""
    hours = window_hours(since, until)
    rows = conn.execute(_HISTORY, {"since": since, "until": until, "cluster": cluster, "metric": FB_USED}).fetchall()
    # the tuple of an array element arrives as Decimal from numeric; floats are what sizing takes
    return [WorkloadHistory(tenant or "", agent_type, model, hours, int(pods),
                            tuple(float(v) for v in (hourly or ())), tuple(float(v) for v in (fb or ())),
                            int(gpus or 0), profile)
            for tenant, agent_type, model, pods, hourly, fb, gpus, profile in rows]


def history_demands(conn: psycopg.Connection, site: Sequence[TenantDemand], *, since: datetime, until: datetime,
                    policy: SizingPolicy = DEFAULT_POLICY, cluster: str | None = None,
                    ) -> tuple[tuple[TenantDemand, ...], HistoryDemand]:
    """The demand to plan: the site file's, completed by the window's history
    (``core.mig.sizing.merge_demands``); the history's own result for metadata (what was sized
    how, what was skipped and why)."""
    classes = {d.tenant: str(d.isolation) for d in site}
    sized = demands_from_history(read_history(conn, since=since, until=until, cluster=cluster), classes, policy,
                                 default_isolation=Isolation.MIG)
    return merge_demands(site, sized.demands), sized


def with_history(cfg: Any, conn: psycopg.Connection, *, hours: int | None, now: datetime,
                 cluster: str | None = None) -> tuple[Any, HistoryDemand | None]:
    """``cfg`` (a ``MigConfig``) with its demand completed by the last ``hours`` of history, and
    the sizing's result for metadata; ``cfg`` unchanged when ``hours`` is None (the site file only)."""
    if hours is None:
        return cfg, None
    demands, sized = history_demands(conn, cfg.demands, since=now - timedelta(hours=hours), until=now,
                                     cluster=cluster)  # fmt: skip
    return dataclasses.replace(cfg, demands=demands), sized
