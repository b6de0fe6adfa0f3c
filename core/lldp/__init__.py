"""LLDP, collector-agnostic: records, id rendering, interface names and the vendor quirk registry.

Shared by the SNMP collector (``connectors/snmp``) and, later, the SSH collector. Pure: no I/O.
"""

from core.lldp.models import (
    ChassisIdSubtype,
    IdError,
    Interface,
    LldpNeighbor,
    LldpSystem,
    PortIdSubtype,
    escaped,
    format_mac,
    parse_mac,
    render_chassis_id,
    render_port_id,
    text_of,
    unstorable,
)
from core.lldp.names import INTERFACE_PREFIXES, looks_like_interface, normalise_interface, split_port
from core.lldp.quirks import (
    DEFAULT_QUIRKS,
    QUIRKS,
    QUIRKS_BY_PLATFORM,
    PlatformQuirks,
    detect_platform,
    quirks_for,
    remote_port_name,
)

__all__ = [
    "DEFAULT_QUIRKS",
    "INTERFACE_PREFIXES",
    "QUIRKS",
    "QUIRKS_BY_PLATFORM",
    "ChassisIdSubtype",
    "IdError",
    "Interface",
    "LldpNeighbor",
    "LldpSystem",
    "PlatformQuirks",
    "PortIdSubtype",
    "detect_platform",
    "escaped",
    "format_mac",
    "looks_like_interface",
    "normalise_interface",
    "parse_mac",
    "quirks_for",
    "remote_port_name",
    "render_chassis_id",
    "render_port_id",
    "split_port",
    "text_of",
    "unstorable",
]
