"""Done-when: over SNMP, every shipped spec's Ethernet adjacencies are reproduced exactly by the
production resolution (``core.topology.ethernet.resolve_ethernet`` on the rows the asset lands),
and every fault switch is reported with the status it was built to produce."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from snmp import support
from snmp.support import (
    SHIPPED_SPECS,
    SnmpSite,
    derived_links,
    resolve_production,
    split_by_truth,
    truth_eth_links,
)

from core.models import DeviceKind, LinkKind
from core.quality import CollectionStatus

pytestmark = pytest.mark.standalone  # starts what it needs itself (tests/conftest.py: the scheduler)

snmp_site = support.snmp_site  # the shared session fixture (one snmpsim per spec)


@pytest.mark.integration
@pytest.mark.parametrize("spec_name", SHIPPED_SPECS)
def test_observations_reproduce_every_eth_link(snmp_site: Callable[..., SnmpSite], spec_name: str) -> None:
    site = snmp_site(spec_name)
    collections = site.collected()
    truth = site.truth
    switches = truth.switches(fabric=LinkKind.ETH)
    # every real switch answered fully; each fault switch has exactly its own status
    for name, c in collections.items():
        expected = site.faults.get(name, "ok")
        assert str(c.status) == expected, (name, c.status, c.detail)
    assert len(collections) == len(switches) + len(site.faults)

    # the rows the asset lands, read back by the topology adapter, resolved by the production code
    result = resolve_production(truth, site.observations(collections))
    # The broken switch's row without a port id lands, but cannot become a link: it is reported, not guessed.
    assert result.unresolved == [
        {"source": "eth-fault-garbage", "local_port": "swp4", "remote": "peer", "reason": "host port cannot be named"}
    ]
    assert result.findings == []
    polled = {sid: sw.source for sid, sw in result.switches.items() if sw.source not in site.faults}
    assert polled == {sw.id: sw.attributes["inventory_name"] for sw in switches}  # identity: the chassis MAC
    links = derived_links(result)
    inside, outside = split_by_truth(truth, links)
    expected_links = truth_eth_links(truth)
    assert inside == expected_links  # none missing, none invented, every port named as the truth's
    # What the partly broken switch still answers is resolved too: its two readable rows, each to
    # the host its (garbled) sysName names; no other fault switch yields a row.
    garbage = next(sid for sid, sw in result.switches.items() if sw.source == "eth-fault-garbage")
    assert outside == {
        frozenset({(garbage, "swp1"), ("peer\\xff\\xfe", "swp1")}),
        frozenset({(garbage, "swp6"), ("peer", "swp6")}),
    }
    inventory = {sw.id: sw.attributes["inventory_name"] for sw in switches}
    for link in expected_links:
        ends = sorted(link)
        entry = links[link]
        if all(truth.device(dev).kind is DeviceKind.SWITCH for dev, _ in ends):
            # switch-switch links are seen from both sides, by the two switches they join
            assert entry["both_sides"] and entry["sources"] == {f"lldp:{inventory[dev]}" for dev, _ in ends}, link
        else:
            # hosts do not answer SNMP in the twin: one side, the switch's
            (switch,) = [dev for dev, _ in ends if truth.device(dev).kind is DeviceKind.SWITCH]
            assert entry["sources"] == {f"lldp:{inventory[switch]}"}, link
    observations = sum(len(c.neighbors) for c in collections.values() if c.device not in site.faults)
    switch_links = sum(1 for link in expected_links if {truth.device(d).kind for d, _ in link} == {DeviceKind.SWITCH})
    assert observations == len(expected_links) + switch_links


@pytest.mark.integration
def test_fault_switches_report_their_failure(snmp_site: Callable[..., SnmpSite]) -> None:
    site = snmp_site("h100-1su")
    collections = site.collected()
    timeout = collections["eth-fault-timeout"]
    assert timeout.status is CollectionStatus.TIMEOUT
    assert timeout.detail == "no response in 1 x 1s (SNMPv2c: a wrong community looks the same)"
    auth = collections["eth-fault-auth"]
    assert auth.status is CollectionStatus.AUTH_FAILURE
    assert "Wrong SNMP PDU digest" in (auth.detail or "")
    assert "not-the-" not in (auth.detail or "")  # the key never appears
    nolldp = collections["eth-fault-nolldp"]
    assert nolldp.status is CollectionStatus.NO_DATA
    assert nolldp.detail == "no LLDP: LLDP-MIB and LLDP-V2-MIB are empty"
    assert [i.name for i in nolldp.interfaces] == ["Ethernet1", "Ethernet2", "Ethernet3", "Ethernet4"]

    garbage = collections["eth-fault-garbage"]
    assert garbage.status is CollectionStatus.PARTIAL
    assert sorted(n.local_port or "" for n in garbage.neighbors) == ["swp1", "swp4", "swp6"]
    no_port = next(n for n in garbage.neighbors if n.local_port == "swp4")
    assert (no_port.port_id, no_port.port_id_subtype, no_port.sys_name) == (None, 5, "peer")  # subtype sent, id not
    bad_name = next(n for n in garbage.neighbors if n.local_port == "swp1")
    assert bad_name.sys_name == "peer\\xff\\xfe"
    assert bad_name.sys_name_raw == b"peer\xff\xfe"
    no_desc = next(n for n in garbage.neighbors if n.local_port == "swp6")
    assert no_desc.sys_desc is None
    reasons = sorted(q.reason for q in garbage.quarantined)
    assert reasons == [
        "ifHighSpeed: expected Gauge32, got OCTET STRING",
        "lldpRemChassisId: a MAC address is 6 bytes, got 5",
        "lldpRemChassisIdSubtype: expected INTEGER, got OCTET STRING",
        "lldpRemPortId: port id subtype 9 is not defined (1..7)",
        "lldpRemSysDesc: expected OCTET STRING, got INTEGER",
    ]
    assert {q.device for q in garbage.quarantined} == {"eth-fault-garbage"}


@pytest.mark.integration
def test_duplicate_sysnames_do_not_merge_switches(snmp_site: Callable[..., SnmpSite]) -> None:
    site = snmp_site("h100-1su", duplicate_sysnames=1)
    (defect,) = site.truth.defects
    keep, take = defect.devices
    collections = site.collected()
    names = {c.system.sys_name for c in collections.values() if c.system and c.device not in site.faults}
    assert len(names) == len(site.truth.switches(fabric=LinkKind.ETH)) - 1  # two switches share a sysName
    result = resolve_production(site.truth, site.observations(collections))
    assert [u["source"] for u in result.unresolved] == ["eth-fault-garbage"]  # its port-less row only
    inside, _ = split_by_truth(site.truth, derived_links(result))
    assert inside == truth_eth_links(site.truth)
    by_chassis = {c.system.chassis_id: c.device for c in collections.values() if c.system}
    assert by_chassis[keep] != by_chassis[take]  # identity is the chassis MAC, not the name
    # the shared name is reported, and resolves nothing: both switches keep their own links
    (finding,) = result.findings
    assert finding.kind == "duplicate_name" and set(finding.devices) == {keep, take}


@pytest.mark.integration
def test_local_ports_follow_each_platforms_numbering(snmp_site: Callable[..., SnmpSite]) -> None:
    """Local port numbers are not 1..N and remote indexes not all 1, as on real agents."""
    site = snmp_site("h100-4su")
    collections = site.collected()
    by_platform = {c.system.platform: c for c in collections.values() if c.system and c.device not in site.faults}
    nxos = by_platform["cisco_nxos_6"]  # detected from sysDescr over the configured cisco_nxos
    first = min(nxos.neighbors, key=lambda n: n.local_port_num)
    assert (first.local_port_num, first.local_if_index, first.local_port) == (436207616, 436207616, "Ethernet1/1")
    sonic = by_platform["sonic"]
    eth8 = next(n for n in sonic.neighbors if n.local_port == "Ethernet8")
    assert eth8.local_if_index == 3
    assert {i.if_descr for i in sonic.interfaces if i.name == "Ethernet8"} == {"etp3"}
    junos_peer = [n for c in collections.values() for n in c.neighbors if n.remote_platform == "juniper_junos"]
    assert junos_peer and all(n.port_id.isdigit() and n.remote_port == n.port_desc for n in junos_peer)
    assert all(n.time_mark > 0 for c in collections.values() for n in c.neighbors)
    assert any(n.rem_index != 1 for c in collections.values() for n in c.neighbors)
