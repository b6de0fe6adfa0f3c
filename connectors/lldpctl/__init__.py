"""Host-side LLDP: ``lldpctl -f json`` (lldpd) parsed into core LLDP records, with management
ports and SR-IOV VF representors filtered by configurable regexes and data-plane NICs mapped to
rails. Also used for switches that run lldpd themselves (Cumulus, SONiC's lldp container)."""

from connectors.lldpctl.parser import (
    DEFAULT_EXCLUDE,
    DEFAULT_RAIL_PATTERN,
    HostFilter,
    LldpctlResult,
    parse_lldpctl,
)

__all__ = ["DEFAULT_EXCLUDE", "DEFAULT_RAIL_PATTERN", "HostFilter", "LldpctlResult", "parse_lldpctl"]
