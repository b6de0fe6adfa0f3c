"""SNMP: the LLDP-MIB walker (pysnmp 7 asyncio) and the pure interpretation of what it walked."""

from connectors.snmp.collector import (
    CollectionStats,
    CollectorOptions,
    SnmpTarget,
    collect,
    walk_devices,
)
from connectors.snmp.lldp_mib import SOURCE, DeviceWalk, LldpCollection, interpret

__all__ = [
    "SOURCE",
    "CollectionStats",
    "CollectorOptions",
    "DeviceWalk",
    "LldpCollection",
    "SnmpTarget",
    "collect",
    "interpret",
    "walk_devices",
]
