"""LLDP over SSH CLI (switches) and lldpctl (hosts): the same raw table as SNMP."""

import dagster as dg

from assets.lldp_cli.assets import lldp_cli_observations, lldpctl_host_observations

defs = dg.Definitions(assets=[lldp_cli_observations, lldpctl_host_observations])

__all__ = ["defs", "lldp_cli_observations", "lldpctl_host_observations"]
