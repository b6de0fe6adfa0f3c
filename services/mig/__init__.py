"""MIG layouts onto a cluster: plan from the nodes, apply window by window through publish's
machinery, read mig-manager's progress back (issue 21); shared by ``gpufabric mig`` and the asset."""

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
    "config_from_settings", "plan_cluster", "read_cluster", "rollback", "status", "wait_window",
]  # fmt: skip
