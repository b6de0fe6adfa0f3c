"""LLDP records as every collector (SNMP now, SSH later) hands them over, and the id rules.

An LLDP neighbour is identified by what the *remote* end advertised: a chassis id and a port id,
each with a subtype saying how to read the bytes (IEEE 802.1AB-2009 9.5.2 / 9.5.3). We keep the
raw bytes next to one normalised text form, because the text form is a decision (MAC written
``aa:bb:..``, an address family byte decoded, non-UTF-8 escaped) and decisions can be wrong;
the bytes cannot.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, fields
from enum import IntEnum


class ChassisIdSubtype(IntEnum):
    """LldpChassisIdSubtype (LLDP-MIB)."""

    CHASSIS_COMPONENT = 1
    INTERFACE_ALIAS = 2
    PORT_COMPONENT = 3
    MAC_ADDRESS = 4
    NETWORK_ADDRESS = 5
    INTERFACE_NAME = 6
    LOCAL = 7


class PortIdSubtype(IntEnum):
    """LldpPortIdSubtype (LLDP-MIB)."""

    INTERFACE_ALIAS = 1
    PORT_COMPONENT = 2
    MAC_ADDRESS = 3
    NETWORK_ADDRESS = 4
    INTERFACE_NAME = 5
    AGENT_CIRCUIT_ID = 6
    LOCAL = 7


class IdError(ValueError):
    """A chassis or port id whose bytes do not fit its subtype (e.g. a 5-byte MAC)."""


BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1
"""The warehouse's integer columns (port numbers, remote indexes) are bigint."""

MAX_ID_BYTES = 255
"""802.1AB caps chassis and port ids at 255 octets; anything longer is not an LLDP id."""


def format_mac(raw: bytes) -> str:
    """Six bytes as ``aa:bb:cc:dd:ee:ff`` (the form ``core.models.Device.id`` uses)."""
    if len(raw) != 6:
        raise IdError(f"a MAC address is 6 bytes, got {len(raw)}")
    return ":".join(f"{b:02x}" for b in raw)


def parse_mac(text: str) -> bytes:
    """``aa:bb:cc:dd:ee:ff`` / ``aabb.ccdd.eeff`` / ``AA-BB-..`` → six bytes."""
    digits = "".join(ch for ch in text if ch not in ":-. ")
    if len(digits) != 12:
        raise IdError(f"not a MAC address: {text!r}")
    try:
        return bytes.fromhex(digits)
    except ValueError:
        raise IdError(f"not a MAC address: {text!r}") from None


def _network_address(raw: bytes) -> str:
    # IANA address family number first (1 = IPv4, 2 = IPv6), then the address.
    if len(raw) == 5 and raw[0] == 1:
        return str(ipaddress.IPv4Address(raw[1:]))
    if len(raw) == 17 and raw[0] == 2:
        return str(ipaddress.IPv6Address(raw[1:]))
    raise IdError(f"network address id must be family 1 + 4 bytes or family 2 + 16 bytes, got {raw[:17].hex()}")


def text_of(raw: bytes) -> tuple[str, bool]:
    """(text, was valid UTF-8): trailing NULs trimmed (agents pad with them), invalid bytes escaped."""
    raw = raw.rstrip(b"\x00")
    try:
        text, ok = raw.decode("utf-8"), True
    except UnicodeDecodeError:
        text, ok = raw.decode("utf-8", errors="backslashreplace"), False
    # Postgres text cannot hold NUL: escape the ones inside (the raw bytes are kept where it matters).
    return text.replace("\x00", "\\x00").strip(), ok


# Postgres text and jsonb hold neither NUL nor an unpaired surrogate (which is not even encodable
# as UTF-8). Bytes decoded by text_of never carry either; strings out of JSON ("\u0000",
# "\ud800") can, and one such string would fail the load of the device's whole batch.
_UNSTORABLE_RE = re.compile("[\x00\ud800-\udfff]")


def unstorable(text: str) -> str | None:
    """Why ``text`` cannot be stored as text (a NUL, an unpaired surrogate), or None."""
    bad = _UNSTORABLE_RE.search(text)
    if bad is None:
        return None
    return "a NUL character" if bad.group() == "\x00" else f"an unpaired surrogate (U+{ord(bad.group()):04X})"


def escaped(text: str) -> str:
    """``text`` fit for a quarantine reason or location: NULs and unpaired surrogates written as
    ``\\x00`` / ``\\ud800`` (text without them comes back unchanged)."""
    if _UNSTORABLE_RE.search(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _opaque(raw: bytes) -> str:
    text, ok = text_of(raw)
    if ok and text and text.isprintable():
        return text
    return ":".join(f"{b:02x}" for b in raw)


def render_chassis_id(subtype: int, raw: bytes) -> str:
    """The normalised text form of a chassis id; :class:`IdError` when the bytes don't fit."""
    if not raw:
        raise IdError("empty chassis id")
    if len(raw) > MAX_ID_BYTES:
        raise IdError(f"chassis id of {len(raw)} bytes exceeds {MAX_ID_BYTES}")
    if subtype == ChassisIdSubtype.MAC_ADDRESS:
        return format_mac(raw)
    if subtype == ChassisIdSubtype.NETWORK_ADDRESS:
        return _network_address(raw)
    if subtype not in ChassisIdSubtype._value2member_map_:
        raise IdError(f"chassis id subtype {subtype} is not defined (1..7)")
    return _opaque(raw)


def render_port_id(subtype: int, raw: bytes) -> str:
    """The normalised text form of a port id; :class:`IdError` when the bytes don't fit."""
    if not raw:
        raise IdError("empty port id")
    if len(raw) > MAX_ID_BYTES:
        raise IdError(f"port id of {len(raw)} bytes exceeds {MAX_ID_BYTES}")
    if subtype == PortIdSubtype.MAC_ADDRESS:
        return format_mac(raw)
    if subtype == PortIdSubtype.NETWORK_ADDRESS:
        return _network_address(raw)
    if subtype not in PortIdSubtype._value2member_map_:
        raise IdError(f"port id subtype {subtype} is not defined (1..7)")
    return _opaque(raw)


@dataclass(frozen=True)
class LldpSystem:
    """What a polled switch says about itself (SNMPv2-MIB system group + lldpLocalSystemData)."""

    sys_name: str | None
    sys_name_raw: bytes | None  # only when sysName was not valid UTF-8
    sys_descr: str | None
    sys_object_id: str | None
    platform: str | None  # the quirk-registry key used for this device
    platform_source: str  # "config", "sysObjectID", "sysDescr" or "none"
    mib: str | None  # "lldp" (IEEE 802.1AB-2005 LLDP-MIB), "lldp-v2" (LLDP-V2-MIB) or None (no LLDP)
    chassis_id_subtype: int | None
    chassis_id_raw: bytes | None
    chassis_id: str | None
    lldp_sys_name: str | None


@dataclass(frozen=True)
class Interface:
    """One interface of a polled switch (IF-MIB + BRIDGE-MIB), with its canonical name."""

    if_index: int
    name: str | None  # normalised; from ifName (or ifDescr where the platform's ifDescr is the name)
    if_name: str | None
    if_descr: str | None
    if_alias: str | None
    if_high_speed_mbps: int | None
    mac: str | None
    base_port: int | None  # dot1dBasePort whose dot1dBasePortIfIndex is this interface


@dataclass(frozen=True)
class LldpNeighbor:
    """One neighbour on one local port, as one poll saw it (a row of lldpRemTable / lldpV2RemTable).

    Rows are keyed by (``local_port_num``, ``rem_index``): the time mark only says when the agent
    last changed the row and is not part of the identity.
    """

    mib: str
    time_mark: int
    local_port_num: int  # lldpRemLocalPortNum (v1) or lldpV2RemLocalIfIndex (v2) as the agent wrote it
    rem_index: int
    local_if_index: int | None  # resolved through the platform's port numbering
    local_port: str | None  # normalised local interface name
    local_port_vendor: str | None  # the local name exactly as the switch reported it
    # A side the device did not send is None (Junos brief replies have no port id, NX-OS summaries
    # no chassis id, agents leave lldpRemChassisId/lldpRemPortId out of lldpRemTable); the
    # subtype may be known when the id is not.
    chassis_id_subtype: int | None
    chassis_id_raw: bytes | None
    chassis_id: str | None
    port_id_subtype: int | None
    port_id_raw: bytes | None
    port_id: str | None
    port_desc: str | None
    sys_name: str | None
    sys_name_raw: bytes | None  # only when the advertised sysName was not valid UTF-8
    sys_desc: str | None
    remote_port: str | None  # normalised name of the remote port when the advertisement names one
    remote_platform: str | None  # quirk-registry key guessed from the advertised sysDesc
    man_addrs: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[int, int]:
        return (self.local_port_num, self.rem_index)

    def unstorable_field(self) -> str | None:
        """What the first field Postgres could not store holds (a NUL or an unpaired surrogate in a
        text column, a number beyond bigint), or None when the whole record can be stored."""
        for f in fields(self):
            value = getattr(self, f.name)
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, str) and (why := unstorable(item)) is not None:
                    return f"{f.name} holds {why}, which cannot be stored as text"
                if isinstance(item, int) and not BIGINT_MIN <= item <= BIGINT_MAX:
                    return f"{f.name} is outside the 64-bit range of the warehouse's bigint columns"
        return None
