"""The pieces of derivation on small hand-built inputs: hostname rules, grouping, tiers, LLDP
identity and port matching, link evidence findings, bad input, diffs."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.models import Tier
from core.topology import (
    EthInterfaceObs,
    EthSystemObs,
    HostnameRules,
    IbLinkObs,
    LldpObs,
    Observations,
    TopologyConfig,
    derive,
    diff_models,
    summarise,
)
from core.topology.ethernet import resolve_ethernet
from core.topology.fabric import assign_tiers, domain_id, domain_name, similarity_groups
from tests.unit.test_topology_render import _guid, _node, oci_sim_fabric
from tests.unit.test_topology_support import observe, truth_with


def test_hostname_rules_join_every_spelling() -> None:
    rules = HostnameRules(rewrites=((r"-ib\d*$", ""),))
    assert {rules.normalise(n) for n in ("DGX001", "dgx001.cluster.local", " dgx001-ib0 ", "dgx001")} == {"dgx001"}
    assert rules.normalise("10.0.0.5") == "10.0.0.5"
    assert HostnameRules(strip_domain=False, lowercase=False).normalise("Node.A") == "Node.A"


def test_config_from_mapping_rejects_unknown_and_bad_values() -> None:
    cfg = TopologyConfig.from_mapping({"similarity": 0.6, "design_sizes": {"block": "32"}, "check_severity": "warning"})
    assert (cfg.similarity, dict(cfg.design_sizes), cfg.check_severity.value) == (0.6, {"block": 32}, "warning")
    with pytest.raises(ValueError, match="unknown topology settings: bogus"):
        TopologyConfig.from_mapping({"bogus": 1})
    with pytest.raises(ValueError, match="similarity must be in"):
        TopologyConfig.from_mapping({"similarity": 0})


def test_similarity_groups_tolerate_a_few_foreign_hosts() -> None:
    a = {f"h{i}" for i in range(32)}
    b = {f"h{i}" for i in range(32, 64)}
    members = {
        "leaf-a0": frozenset(a),
        "leaf-a1": frozenset(a - {"h3"} | {"h40"}),  # one miscabled host
        "leaf-b0": frozenset(b),
        "leaf-b1": frozenset(b - {"h33", "h34"}),  # two missing links
        "empty": frozenset(),
    }
    assert similarity_groups(members, 0.5) == [["empty"], ["leaf-a0", "leaf-a1"], ["leaf-b0", "leaf-b1"]]
    assert similarity_groups(members, 1.0) == [["empty"], ["leaf-a0"], ["leaf-a1"], ["leaf-b0"], ["leaf-b1"]]


def test_tiers_from_hop_distance_and_what_gets_none() -> None:
    edges = [("l1", "s1"), ("l2", "s1"), ("s1", "c1"), ("c1", "x1"), ("lonely", "lonely2")]
    tiers = assign_tiers(["l1", "l2", "s1", "c1", "x1", "lonely", "lonely2"], edges, ["l1", "l2"])
    assert {k: v[0] for k, v in tiers.items()} == {
        "l1": Tier.LEAF, "l2": Tier.LEAF, "s1": Tier.SPINE, "c1": Tier.CORE, "x1": None, "lonely": None,
        "lonely2": None,
    }  # fmt: skip
    assert tiers["x1"][1] == "3 hops above the nearest leaf: deeper than a three-tier fat tree"


def test_domain_ids_are_stable_and_names_readable() -> None:
    assert domain_id("block", ["0x2", "0x1"]) == domain_id("block", ["0x1", "0x2"])
    assert domain_id("block", ["0x1"]) != domain_id("spine_group", ["0x1"])
    assert domain_id("block", ["0x1", "0x2"]).startswith("blk-")
    assert domain_name(["ib-leaf-su01-r1", "ib-leaf-su01-r0"], "x") == "ib-leaf-su01-r[0-1]"
    assert domain_name(["bad name"], "blk-1") == "blk-1"


def _sys(source: str, mac: str, name: str, ip: str) -> EthSystemObs:
    return EthSystemObs(source=source, address=ip, sys_name=name, chassis_id=mac, chassis_id_subtype=4)


def _if(source: str, idx: int, name: str, **kw: str) -> EthInterfaceObs:
    return EthInterfaceObs(source=source, if_index=idx, name=name, if_name=name, **kw)


def test_lldp_identity_and_port_matching_by_subtype() -> None:
    systems = [_sys("leaf1", "44:4c:a8:00:00:01", "leaf1", "10.0.0.1"), _sys("spine1", "3c:61:04:00:00:02",
               "spine1", "10.0.0.2")]  # fmt: skip
    interfaces = [
        _if("leaf1", 1, "Ethernet1"), _if("leaf1", 49, "Ethernet49", if_alias="to-spine1", mac="44:4c:a8:00:01:31"),
        _if("spine1", 501, "et-0/0/0", if_alias="uplink-leaf1", if_descr="et-0/0/0 leaf1"),
        _if("spine1", 502, "et-0/0/1"),
    ]  # fmt: skip
    rows = [
        # spine1 seen from leaf1 by chassis MAC, port by ifAlias (subtype 1)
        LldpObs("leaf1", "Ethernet49", 4, "3c:61:04:00:00:02", 1, "uplink-leaf1", sys_name="spine1"),
        # leaf1 seen from spine1 by management address (chassis id is a local name), port by MAC
        LldpObs("spine1", "et-0/0/0", 7, "leaf1-chassis", 3, "44:4c:a8:00:01:31", man_addrs=("10.0.0.1",)),
        # a Junos-style ifIndex port id (subtype 7) to spine1 port et-0/0/1, identified by sysName
        LldpObs("leaf1", "Ethernet50", 7, "whatever", 7, "502", sys_name="SPINE1.example.net"),
        # a host by its hostname, port from the description lldpd sends
        LldpObs("leaf1", "Ethernet1", 4, "b4:96:91:00:00:01", 3, "b4:96:91:00:00:01", port_desc="eno1",
                sys_name="dgx001.cluster.local"),
        # nothing to go on
        LldpObs("leaf1", "Ethernet2", 7, "?", 7, "?"),
    ]  # fmt: skip
    res = resolve_ethernet(rows, systems, interfaces, ["dgx001"], HostnameRules())
    links = {(k[0], k[1], k[2], k[3]): v for k, v in res.links.items()}
    up = links[("3c:61:04:00:00:02", "et-0/0/0", "44:4c:a8:00:00:01", "Ethernet49")]
    assert up["both_sides"] is True and up["sources"] == {"lldp:leaf1", "lldp:spine1"}
    methods = {end: (r["device_method"], r["port_method"]) for end, r in up["resolution"].items()}
    assert methods == {
        "3c:61:04:00:00:02:et-0/0/0": ("chassis_mac", "if_alias"),
        "44:4c:a8:00:00:01:Ethernet49": ("management_ip", "port_mac"),
    }
    second = links[("3c:61:04:00:00:02", "et-0/0/1", "44:4c:a8:00:00:01", "Ethernet50")]
    assert second["both_sides"] is False  # spine1 did not report it
    assert second["resolution"]["3c:61:04:00:00:02:et-0/0/1"]["port_method"] == "if_index"
    assert second["resolution"]["3c:61:04:00:00:02:et-0/0/1"]["device_method"] == "sys_name"
    host = links[("44:4c:a8:00:00:01", "Ethernet1", "dgx001", "eno1")]
    assert host["resolution"]["dgx001:eno1"]["device_method"] == "host_name"
    assert res.hosts == {"dgx001"}
    assert [u["reason"] for u in res.unresolved] == [
        "no chassis MAC, management address or sysName that names a known device"
    ]


def test_shared_sysname_resolves_nothing_and_is_one_finding() -> None:
    systems = [_sys("a", "44:4c:a8:00:00:01", "edge", "10.0.0.1"), _sys("b", "44:4c:a8:00:00:02", "edge", "10.0.0.2")]
    rows = [LldpObs("a", "Ethernet1", 7, "x", 5, "Ethernet1", sys_name="edge")]
    res = resolve_ethernet(rows, systems, [], [], HostnameRules())
    (f,) = res.findings
    assert (f.kind, f.devices) == ("duplicate_name", ("44:4c:a8:00:00:01", "44:4c:a8:00:00:02"))
    assert res.links == {}
    assert res.unresolved[0]["reason"] == "sysName 'edge' is shared by 2 switches"


def test_one_sided_and_rate_mismatch_links_and_bad_rows_are_reported() -> None:
    base = oci_sim_fabric()
    links = list(base.ib_links)
    # srv1101's link seen from one end only, srv1102's at HDR 2x; a link to a GUID nobody reported.
    links[3] = IbLinkObs(**{**links[3].__dict__, "both_sides": False})
    links[4] = IbLinkObs(**{**links[4].__dict__, "speed_gbps": 100.0, "width": "2x", "speed": "HDR"})
    links.append(IbLinkObs("fabric", _guid(1), 40, "0xdeadbeef00000000", 1, "4x", "NDR", 400.0, True))
    nodes = [*base.ib_nodes, _node("not-a-guid", "switch", "MF0;ghost:MQM9700/U1")]
    model = derive(Observations(ib_nodes=nodes, ib_links=links))
    kinds = sorted((f.kind, f.devices[-1]) for f in model.findings)
    assert kinds == [("one_sided_link", links[3].b_guid), ("speed_width_mismatch", links[4].b_guid)]
    mismatch = next(f for f in model.findings if f.kind == "speed_width_mismatch")
    assert mismatch.evidence["expected_speed_gbps"] == 400 and mismatch.evidence["expected_width"] == "4x"
    assert [u["reason"] for u in model.inputs["unresolved"]] == [
        "not a 64-bit node GUID", "an end is not a node of any source",
    ]  # fmt: skip


def test_degraded_leaf_against_configured_design(tmp_path: Path) -> None:
    model = derive(observe(truth_with("h100-1su"), tmp_path), TopologyConfig(design_leaf_uplinks=40))
    degraded = [f for f in model.findings if f.kind == "degraded_leaf"]
    assert len(degraded) == 8 and all(f.evidence["design_from"] == "config" for f in degraded)
    assert {f.severity.value for f in degraded} == {"warning"}  # 32 of 40 is 80%


def test_diff_keys_items_and_lists_changed_fields(tmp_path: Path) -> None:
    before = derive(observe(truth_with("h100-1su"), tmp_path)).to_json(version=1)
    after = derive(observe(truth_with("h100-1su", degraded_uplinks=1), tmp_path)).to_json(version=2)
    changes = diff_models(before, after)
    assert summarise(changes) == {
        "switches": {"added": 0, "removed": 0, "changed": 3},  # the leaf and two spines
        "links": {"added": 0, "removed": 2, "changed": 0},
        "findings": {"added": 1, "removed": 0, "changed": 0},
    }
    leaf = next(c for c in changes if c.section == "switches" and c.fields() == ["uplinks"])
    assert (leaf.before or {})["uplinks"] == 32 and (leaf.after or {})["uplinks"] == 30
    assert diff_models(before, before) == []


def test_adapters_only_output_derives_no_fabric_and_says_why() -> None:
    """topograph's example-bad.out: one GB200 HCA and no switch (the real file, through the parser)."""
    from tests.conftest import FIXTURES
    from tests.unit.test_topology_support import ib_rows

    nodes, links = ib_rows((FIXTURES / "topograph" / "example-bad.out").read_text().splitlines())
    model = derive(Observations(ib_nodes=nodes, ib_links=links))
    assert [(f.kind, f.severity.value) for f in model.findings] == [("no_switches", "error")]
    (host,) = model.hosts
    assert (host.name, host.block, host.spine_group, host.pod) == ("dgx-gb200-n01-c1", None, None, None)
    assert model.switches == () and model.domains == ()
