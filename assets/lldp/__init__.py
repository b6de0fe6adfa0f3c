"""LLDP discovery over SNMP: the Ethernet half of the physical truth."""

import dagster as dg

from assets.lldp.assets import lldp_job, lldp_neighbor_observations, lldp_schedule
from assets.lldp.partitions import SWITCH_GROUPS, switch_groups_asset
from assets.lldp.resources import SnmpCollectorResource

defs = dg.Definitions(
    assets=[switch_groups_asset, lldp_neighbor_observations],
    jobs=[lldp_job],
    schedules=[lldp_schedule],
    resources={"snmp_collector": SnmpCollectorResource()},
)

__all__ = ["SWITCH_GROUPS", "defs", "lldp_job", "lldp_neighbor_observations", "lldp_schedule", "switch_groups_asset"]
