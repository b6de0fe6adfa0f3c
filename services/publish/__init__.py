"""One publish of the fabric to a cluster (labels, extended resources, Kueue objects) and its
history: what the publish asset, ``gpufabric publish`` and ``gpufabric kueue render`` share."""

from services.publish.service import (
    Outcome,
    PublishConfig,
    PublishRefused,
    config_from_settings,
    desired_state_for,
    publish_fabric,
    write_gitops,
)
from services.publish.store import applied_run_for, history, last_applied_run, record_run

__all__ = [
    "Outcome", "PublishConfig", "PublishRefused", "applied_run_for", "config_from_settings", "desired_state_for",
    "history", "last_applied_run", "publish_fabric", "record_run", "write_gitops",
]  # fmt: skip
