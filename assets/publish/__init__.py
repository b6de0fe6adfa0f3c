"""Publishing the fabric to Kubernetes: labels, extended resources, Kueue objects, history."""

from assets.publish.assets import cluster_state, defs

__all__ = ["cluster_state", "defs"]
