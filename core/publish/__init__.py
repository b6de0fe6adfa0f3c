"""Publishing the fabric to Kubernetes (pure): node labels, extended resources, Kueue objects."""

from core.publish.diff import LabelChange, NodeDiff, NodeState, diff_nodes
from core.publish.kueue import (
    KueuePolicy,
    Pool,
    RenderError,
    TenantSpec,
    object_key,
    render_kueue,
)
from core.publish.labels import (
    HOSTNAME_LABEL,
    LabelScheme,
    NodePlan,
    domain_values,
    extended_resources,
    is_label_value,
    node_labels,
    pool_name,
    pools_from_nodes,
    safe_value,
)
from core.publish.state import DesiredState, desired_state

__all__ = [
    "HOSTNAME_LABEL",
    "DesiredState",
    "KueuePolicy",
    "LabelChange",
    "LabelScheme",
    "NodeDiff",
    "NodePlan",
    "NodeState",
    "Pool",
    "RenderError",
    "TenantSpec",
    "desired_state",
    "diff_nodes",
    "domain_values",
    "extended_resources",
    "is_label_value",
    "node_labels",
    "object_key",
    "pool_name",
    "pools_from_nodes",
    "render_kueue",
    "safe_value",
]
