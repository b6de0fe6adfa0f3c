"""GPU-NIC affinity inside each node (issue 23): the per-node asset with one check per finding kind."""

from assets.affinity.assets import defs, gpu_affinity

__all__ = ["defs", "gpu_affinity"]
