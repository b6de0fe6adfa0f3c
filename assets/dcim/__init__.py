"""DCIM inventory: the data-center team's list of racks, nodes, GPUs, HCAs and BMCs."""

from assets.dcim.assets import dcim_inventory, defs

__all__ = ["dcim_inventory", "defs"]
