"""The numeric OIDs we walk. No MIB files exist offline, so everything is numeric (lookupMib=False).

Only what LLDP discovery needs is walked: a 48-port switch answers in ~25 GETBULK round trips.
"""

from __future__ import annotations

OID = tuple[int, ...]


def oid(text: str) -> OID:
    return tuple(int(x) for x in text.strip(".").split("."))


def dotted(value: OID) -> str:
    return ".".join(str(x) for x in value)


# SNMPv2-MIB system group (GET, one request)
SYS_DESCR = oid("1.3.6.1.2.1.1.1.0")
SYS_OBJECT_ID = oid("1.3.6.1.2.1.1.2.0")
SYS_NAME = oid("1.3.6.1.2.1.1.5.0")
SYSTEM_OIDS: tuple[OID, ...] = (SYS_DESCR, SYS_OBJECT_ID, SYS_NAME)

# IEEE 802.1AB-2005 LLDP-MIB (lldpMIB 1.0.8802.1.1.2)
LLDP_LOCAL_SYSTEM_DATA = oid("1.0.8802.1.1.2.1.3")  # scalars .1-.6, lldpLocPortTable .7, lldpLocManAddrTable .8
LLDP_REM_TABLE = oid("1.0.8802.1.1.2.1.4.1.1")  # lldpRemEntry: (col, timeMark, localPortNum, remIndex)
LLDP_REM_MAN_ADDR_TABLE = oid("1.0.8802.1.1.2.1.4.2.1")  # (col, timeMark, localPortNum, remIndex, subtype, addr)

# IEEE 802.1AB-2009 LLDP-V2-MIB (lldpV2MIB 1.3.111.2.802.1.1.13): walked when v1 is empty.
LLDP_V2_LOCAL_SYSTEM_DATA = oid("1.3.111.2.802.1.1.13.1.3")
LLDP_V2_REM_TABLE = oid("1.3.111.2.802.1.1.13.1.4.1.1")  # (col, timeMark, ifIndex, destAddrIndex, remIndex)
LLDP_V2_REM_MAN_ADDR_TABLE = oid("1.3.111.2.802.1.1.13.1.4.2.1")

# IF-MIB columns (index = ifIndex)
IF_DESCR = oid("1.3.6.1.2.1.2.2.1.2")
IF_PHYS_ADDRESS = oid("1.3.6.1.2.1.2.2.1.6")
IF_NAME = oid("1.3.6.1.2.1.31.1.1.1.1")
IF_HIGH_SPEED = oid("1.3.6.1.2.1.31.1.1.1.15")
IF_ALIAS = oid("1.3.6.1.2.1.31.1.1.1.18")

# BRIDGE-MIB dot1dBasePortIfIndex (index = dot1dBasePort)
DOT1D_BASE_PORT_IF_INDEX = oid("1.3.6.1.2.1.17.1.4.1.2")

V1_WALKS: tuple[tuple[str, OID], ...] = (
    ("lldpLocalSystemData", LLDP_LOCAL_SYSTEM_DATA),
    ("lldpRemTable", LLDP_REM_TABLE),
    ("lldpRemManAddrTable", LLDP_REM_MAN_ADDR_TABLE),
)
V2_WALKS: tuple[tuple[str, OID], ...] = (
    ("lldpV2LocalSystemData", LLDP_V2_LOCAL_SYSTEM_DATA),
    ("lldpV2RemTable", LLDP_V2_REM_TABLE),
    ("lldpV2RemManAddrTable", LLDP_V2_REM_MAN_ADDR_TABLE),
)
INTERFACE_WALKS: tuple[tuple[str, OID], ...] = (
    ("ifName", IF_NAME),
    ("ifDescr", IF_DESCR),
    ("ifAlias", IF_ALIAS),
    ("ifHighSpeed", IF_HIGH_SPEED),
    ("ifPhysAddress", IF_PHYS_ADDRESS),
    ("dot1dBasePortIfIndex", DOT1D_BASE_PORT_IF_INDEX),
)
WALK_BASES: dict[str, OID] = dict(V1_WALKS + V2_WALKS + INTERFACE_WALKS)
