"""Placement: what topology-blind placement costs on the derived fabric, and what gpufabric's
advisor saves against Kueue TAS (issue 22, part 4)."""

from assets.placement.assets import defs, placement_what_if

__all__ = ["defs", "placement_what_if"]
