"""MIG partitioning: the plan of per-GPU layouts from tenant demand (issue 21)."""

from assets.mig.assets import defs, mig_plan

__all__ = ["defs", "mig_plan"]
