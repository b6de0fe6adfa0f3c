"""Agent trees: the orphan reaper sensor (the same rule as the ``controllers/reaper.py`` loop)."""

from assets.agents.sensor import OrphanReaperResource, defs, orphan_reaper, reap_clusters

__all__ = ["OrphanReaperResource", "defs", "orphan_reaper", "reap_clusters"]
