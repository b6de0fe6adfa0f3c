"""Topology derivation: the versioned fabric model with its asset checks."""

from assets.topology.assets import defs, fabric_model

__all__ = ["defs", "fabric_model"]
