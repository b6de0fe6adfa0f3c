"""Interface names: one canonical spelling per port, whichever tool or vendor wrote it.

The same front-panel port is ``Ethernet1/1`` in NX-OS ``show`` output and ifName, ``Eth1/1`` in
the LLDP port id NX-OS advertises, ``Et1/1`` in EOS abbreviations, and ``ethernet1/1`` when a
human typed it. Link resolution compares names from different sources (SNMP, SSH, the other end's
advertisement), so every name goes through :func:`normalise_interface` first. The prefix table is
data; nothing here knows which vendor it is talking to, so the SSH collector shares it.

Split (breakout) ports keep their lane in the name: Cumulus ``swp1s0``, EOS ``Ethernet49/1``,
NX-OS ``Ethernet1/49/1``, Junos ``et-0/0/0:1``. Whether ``Ethernet1/1`` is a split port depends
on the platform (EOS: lane 1 of port 1; NX-OS: slot 1 port 1), so :func:`split_port` takes the
platform's pattern from the quirk registry.
"""

from __future__ import annotations

import re

INTERFACE_PREFIXES: dict[str, str] = {
    # Ethernet: NX-OS/EOS/Onyx full names and their abbreviations (NX-OS advertises ``Eth1/1``,
    # EOS accepts ``Et1``, Onyx names ports ``Eth1/1``).
    "e": "Ethernet",
    "et": "Ethernet",
    "eth": "Ethernet",
    "ether": "Ethernet",
    "ethernet": "Ethernet",
    # Cisco IOS/IOS-XR speed-named interfaces.
    "gi": "GigabitEthernet",
    "gig": "GigabitEthernet",
    "gigabitethernet": "GigabitEthernet",
    "te": "TenGigabitEthernet",
    "tengig": "TenGigabitEthernet",
    "tengigabitethernet": "TenGigabitEthernet",
    "tengige": "TenGigE",
    "twe": "TwentyFiveGigE",
    "twentyfivegige": "TwentyFiveGigE",
    "fo": "FortyGigabitEthernet",
    "fortygigabitethernet": "FortyGigabitEthernet",
    "fortygige": "FortyGigE",
    "hu": "HundredGigE",
    "hundredgige": "HundredGigE",
    "hundredgigabitethernet": "HundredGigE",
    "fh": "FourHundredGigE",
    "fourhundredgige": "FourHundredGigE",
    # Aggregates and management.
    "po": "Port-Channel",
    "port-channel": "Port-Channel",
    "portchannel": "Port-Channel",
    "ma": "Management",
    "mgmt": "Management",
    "management": "Management",
    # Linux-style names are lower case already; listed so case mistakes fold back.
    "swp": "swp",  # Cumulus Linux switch ports (swp1, split swp1s0)
    "eno": "eno",
    "ens": "ens",
    "enp": "enp",
    "bond": "bond",
    # Junos physical interfaces keep their dash: et-0/0/0 (40G+), xe- (10G), ge- (1G).
    "et-": "et-",
    "xe-": "xe-",
    "ge-": "ge-",
    "em": "em",
}
"""Lower-cased prefix as written → canonical prefix. Unknown prefixes are kept as written."""

_JUNOS_UNIT_PREFIXES = frozenset({"et-", "xe-", "ge-"})
"""Junos names carry a logical unit (``et-0/0/0.0``); LLDP runs on the physical port."""

_NAME_RE = re.compile(r"^(?P<prefix>[A-Za-z][A-Za-z_-]*?-?)\s*(?P<rest>\d.*)$")
_SPACE_RE = re.compile(r"\s+")


def normalise_interface(name: str) -> str:
    """The canonical spelling of an interface name (``Eth1/1`` → ``Ethernet1/1``).

    Whitespace is removed (``Ethernet 1/1`` appears in some CLI tables), the alphabetic prefix is
    looked up case-insensitively in :data:`INTERFACE_PREFIXES`, and Junos unit ``.0`` is dropped.
    A name without a numeric part (``lo``, ``Vlan``) or with an unknown prefix is returned
    trimmed, unchanged otherwise: we never guess.
    """
    text = _SPACE_RE.sub("", name.strip().strip("\x00"))
    match = _NAME_RE.match(text)
    if match is None:
        return text
    prefix, rest = match.group("prefix"), match.group("rest")
    if prefix.lower() == "eth" and "/" not in rest:
        return text  # Linux eth0 stays eth0; only NX-OS/Onyx Eth1/1 abbreviates Ethernet1/1
    canonical = INTERFACE_PREFIXES.get(prefix.lower())
    if canonical is None:
        return text
    if canonical in _JUNOS_UNIT_PREFIXES and rest.endswith(".0"):
        rest = rest[:-2]
    return canonical + rest


def split_port(name: str, pattern: str | None) -> tuple[str, int] | None:
    """``(parent port, lane)`` when ``name`` is a breakout lane under the platform's ``pattern``.

    ``pattern`` is a regex with groups ``parent`` and ``lane`` from the quirk registry
    (``None``: the platform has no split-port naming we know of).
    """
    if pattern is None:
        return None
    match = re.fullmatch(pattern, normalise_interface(name))
    if match is None:
        return None
    return match.group("parent"), int(match.group("lane"))


def looks_like_interface(text: str) -> bool:
    """Whether ``text`` reads as an interface name with a known prefix (used to pick between a
    port id and a port description when a vendor puts the name in the wrong one)."""
    match = _NAME_RE.match(_SPACE_RE.sub("", text.strip()))
    return match is not None and match.group("prefix").lower() in INTERFACE_PREFIXES
