"""Agent pods' demand history for the warm-headroom forecast, from ``raw.k8s_pod_lag``.

The lag watch lands each agent pod once per run that saw it (``run_id``, ``source``, ``uid``);
a pod seen by several runs counts once. What a pod asked for is ``gpus`` (whole GPUs) and ``mig``
(profile -> instances, e.g. ``{"1g.10gb": 1}``), returned as the device plugin's resource names.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core.burst import WHOLE_GPU
from core.burst_headroom import DemandSample

_SELECT = """
SELECT DISTINCT ON (source, uid) created_at, agent_type, tier, gpus, mig
FROM raw.k8s_pod_lag
WHERE created_at >= %(since)s AND (%(source)s::text IS NULL OR source = %(source)s::text)
ORDER BY source, uid, window_end DESC
"""


def read_demand(conn: Any, *, since: datetime, source: str | None = None) -> list[DemandSample]:
    """Every agent pod created since ``since`` (of one cluster, or all), as forecast samples. A
    ``mig`` entry that is not a whole positive count is skipped (the watch quarantines such pods;
    a row edited by hand is not trusted to hold room)."""
    samples = []
    for created_at, agent_type, tier, gpus, mig in conn.execute(_SELECT, {"since": since, "source": source}):
        requests = {WHOLE_GPU: int(gpus)} if gpus else {}
        for profile, count in (mig or {}).items():
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                requests[f"nvidia.com/mig-{profile}"] = count
        samples.append(DemandSample(created_at, agent_type, tier, requests))
    return samples
