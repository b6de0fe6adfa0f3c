"""MIG layouts onto a cluster: plan from the nodes, apply window by window through publish's
machinery, read mig-manager's progress back (issue 21); shared by ``gpufabric mig`` and the asset.
``history`` turns the warehouse's history into slice demand (``core.mig.sizing``)."""

from services.mig.history import history_demands, read_history, with_history
from services.mig.service import (
    ApplyOutcome,
    ClusterView,
    MigConfig,
    MigRefused,
    NodeStatus,
    apply,
    apply_window,
    config_from_settings,
    plan_cluster,
    read_cluster,
    rollback,
    status,
    wait_window,
)

__all__ = [
    "ApplyOutcome", "ClusterView", "MigConfig", "MigRefused", "NodeStatus", "apply", "apply_window",
    "config_from_settings", "history_demands", "plan_cluster", "read_cluster", "read_history", "rollback", "status",
    "wait_window", "with_history",
]  # fmt: skip
