"""The SNMP twin: snmpsim serving every Ethernet switch of a cluster spec (plus fault switches)."""

from simulator.snmp.twin import FAULTS, SnmpTwinOptions, start, start_twin, stop

__all__ = ["FAULTS", "SnmpTwinOptions", "start", "start_twin", "stop"]
