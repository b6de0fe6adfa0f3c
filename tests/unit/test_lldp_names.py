"""Interface-name normalisation, shared by the SNMP and SSH collectors."""

from __future__ import annotations

import pytest

from core.lldp import looks_like_interface, normalise_interface, split_port
from core.lldp.quirks import QUIRKS_BY_PLATFORM


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("Et1/1", "Ethernet1/1"),
        ("Eth1/1", "Ethernet1/1"),
        ("Ethernet1/1", "Ethernet1/1"),
        ("ethernet 1/1", "Ethernet1/1"),
        ("Ethernet49/1", "Ethernet49/1"),
        ("Eth1/49/1", "Ethernet1/49/1"),
        ("swp1s0", "swp1s0"),
        ("SWP12", "swp12"),
        ("et-0/0/3.0", "et-0/0/3"),
        ("et-0/0/3:1", "et-0/0/3:1"),
        ("xe-0/0/1", "xe-0/0/1"),
        ("Gi1/0/1", "GigabitEthernet1/0/1"),
        ("Te1/1", "TenGigabitEthernet1/1"),
        ("Hu0/0/0/1", "HundredGigE0/0/0/1"),
        ("Po10", "Port-Channel10"),
        ("port-channel10", "Port-Channel10"),
        ("mgmt0", "Management0"),
        ("Ethernet0", "Ethernet0"),
        ("eno1", "eno1"),
        ("etp3", "etp3"),  # unknown prefix (a SONiC alias): kept, never guessed
        ("lo", "lo"),
        ("  Vlan100 ", "Vlan100"),
        ("", ""),
    ],
)
def test_normalise_interface(raw: str, canonical: str) -> None:
    assert normalise_interface(raw) == canonical


@pytest.mark.parametrize(
    ("platform", "name", "split"),
    [
        ("cumulus", "swp1s2", ("swp1", 2)),
        ("cumulus", "swp1", None),
        ("arista_eos", "Et49/1", ("Ethernet49", 1)),
        ("arista_eos", "Ethernet1", None),
        ("cisco_nxos", "Ethernet1/49/3", ("Ethernet1/49", 3)),
        ("cisco_nxos", "Ethernet1/1", None),  # NX-OS slot/port, not a lane
        ("juniper_junos", "et-0/0/4:2", ("et-0/0/4", 2)),
        ("sonic", "Ethernet8", None),
    ],
)
def test_split_ports_follow_the_platform(platform: str, name: str, split: tuple[str, int] | None) -> None:
    assert split_port(name, QUIRKS_BY_PLATFORM[platform].split_pattern) == split


def test_looks_like_interface() -> None:
    assert looks_like_interface("et-0/0/11")
    assert looks_like_interface("eno1")
    assert not looks_like_interface("514")
    assert not looks_like_interface("uplink to spine")


def test_linux_eth_names_are_not_taken_for_nxos_abbreviations() -> None:
    # Linux hosts advertise eth0; NX-OS/Onyx abbreviate Ethernet1/1 as Eth1/1. Only the latter expands.
    assert normalise_interface("eth0") == "eth0"
    assert normalise_interface("Eth1/1") == "Ethernet1/1"
