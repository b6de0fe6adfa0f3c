"""Agent trees: the orphan reaper sensor (the same rule as the ``controllers/reaper.py`` loop) and
budget settle-on-finish (``agents/budget_settlement``)."""

import dagster as dg

from assets.agents.burst_lag import defs as burst_lag_defs
from assets.agents.sensor import OrphanReaperResource, orphan_reaper, reap_clusters
from assets.agents.sensor import defs as reaper_defs
from assets.agents.settlement import budget_settlement, budget_settlement_every_5_minutes, budget_settlement_job

defs = dg.Definitions.merge(
    reaper_defs,
    burst_lag_defs,
    dg.Definitions(
        assets=[budget_settlement], jobs=[budget_settlement_job], schedules=[budget_settlement_every_5_minutes]
    ),
)

__all__ = ["OrphanReaperResource", "budget_settlement", "defs", "orphan_reaper", "reap_clusters"]
