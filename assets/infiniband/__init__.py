"""InfiniBand fabric (ibnetdiscover, UFM) and NVLink domains."""

from assets.infiniband.assets import defs, ib_fabric, nvlink_domains

__all__ = ["defs", "ib_fabric", "nvlink_domains"]
