"""The pieces of derivation on small hand-built inputs: hostname rules, grouping, tiers, LLDP
identity and port matching, link evidence findings, bad input, diffs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from pathlib import Path

import pytest

from core.infiniband import Classifier, HcaFilter
from core.models import Tier
from core.topology import (
    DcimNodeObs,
    EthInterfaceObs,
    EthSystemObs,
    HostnameRules,
    IbLinkObs,
    IbNodeObs,
    LldpObs,
    Observations,
    TopologyConfig,
    TopologyModel,
    derive,
    diff_models,
    summarise,
)
from core.topology.ethernet import resolve_ethernet
from core.topology.fabric import assign_tiers, domain_id, domain_name, similarity_groups
from core.topology.inputs import HostRoleRules
from core.topology.roles import FleetPattern, HostFacts, classify_hosts, judge, learn_pattern, name_shape, weighted_mode
from tests.unit.test_topology_render import _guid, _link, _node, oci_sim_fabric
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


# --- hosts that are not compute hosts although no name rule says so (issue 19) -------------------


def rail_fabric(
    extra: dict[str, list[tuple[str, int]]] | None = None,
    *,
    drop: Collection[tuple[str, int]] = (),
    classifier: Classifier | None = None,
    dcim: Sequence[DcimNodeObs] = (),
) -> Observations:
    """A DGX H100-shaped rail-optimised fabric: 8 rail leaves under one spine, dgx001..dgx008 with
    ``mlx5_r`` on the rail-r leaf (less the ``drop`` ones: dead HCAs), and ``extra`` hosts:
    name -> [(HCA name, rail of the leaf it is cabled to)]."""
    cls = classifier or Classifier()

    def node(guid: str, node_type: str, description: str) -> IbNodeObs:
        c = cls.classify(node_type, description)
        return IbNodeObs(
            source="fabric", guid=guid, node_type=node_type, description=description, node_class=c.node_class.value,
            class_reason=c.reason, system_guid=guid, hostname=c.hostname, hca=c.hca, switch_name=c.switch_name,
        )  # fmt: skip

    nodes, links = [node(_guid(1), "switch", "MF0;spine-1:MQM9700/U1")], []
    for r in range(8):
        nodes.append(node(_guid(10 + r), "switch", f"MF0;leaf-r{r}:MQM9700/U1"))
        links.append(_link(_guid(1), r + 1, _guid(10 + r), 64))
    ports: Counter[int] = Counter()
    cas = [(f"dgx{h:03d}", f"mlx5_{r}", r) for h in range(1, 9) for r in range(8) if (f"dgx{h:03d}", r) not in drop]
    cas += [(name, hca, r) for name, items in (extra or {}).items() for hca, r in items]
    for n, (host, hca, r) in enumerate(cas, start=100):
        nodes.append(node(_guid(n), "ca", f"{host} {hca}"))
        ports[r] += 1
        links.append(_link(_guid(10 + r), ports[r], _guid(n), 1))
    return Observations(ib_nodes=nodes, ib_links=links, dcim=dcim)


def _non_compute(model: TopologyModel) -> dict[str, str]:
    return {h.name: h.role for h in model.hosts if h.role != "compute"}


def test_ufm_server_with_a_generic_name_on_rail_leaves_is_not_compute() -> None:
    """The issue's reproduction: a 2-HCA server named 'fm01' on the rail-6 and rail-7 leaves of an
    8-rail fleet, and one named 'svc7' on its own rails. Without the fleet pattern fm01 is a
    compute host with the issue's two miscabled_port errors; with it, both are set apart."""
    obs = rail_fabric({"fm01": [("mlx5_0", 6), ("mlx5_1", 7)], "svc7": [("mlx5_0", 0), ("mlx5_1", 1)]})
    before = derive(obs, TopologyConfig(host_roles=HostRoleRules(enabled=False)))
    assert sorted((f.kind, f.message) for f in before.findings if "fm01" in f.message) == [
        ("host_missing_from_fabric", "fm01 is missing from ib (2 of 8 HCAs linked)"),
        ("miscabled_port", "fm01 mlx5_0 (mlx5_0) is cabled to the mlx5_6 leaf"),
        ("miscabled_port", "fm01 mlx5_1 (mlx5_1) is cabled to the mlx5_7 leaf"),
    ]
    model = derive(obs)
    assert model.findings == ()
    assert _non_compute(model) == {"fm01": "ufm_server", "svc7": "management"}
    fm01, svc7 = model.host("fm01"), model.host("svc7")
    assert fm01.role_reason == (
        "2 HCAs where the fleet's compute hosts have 8; name 'fm01' does not follow the compute pattern 'dgx###'; "
        "2 of its 2 cabled HCAs are not on their rail's leaf; the name suggests ufm_server"
    )
    assert svc7.role_reason == (
        "2 HCAs where the fleet's compute hosts have 8; name 'svc7' does not follow the compute pattern 'dgx###'; "
        "no name hint: management"
    )
    assert [(c.hca, c.leaf, c.leaf_port) for c in fm01.hcas] == [("mlx5_0", _guid(16), "9"), ("mlx5_1", _guid(17), "9")]
    assert (fm01.block, fm01.spine_group, fm01.pod, fm01.sources) == (None, None, None, ("ib",))
    (block,) = [d for d in model.domains if d.level == "block"]
    assert (block.hosts, block.design_size) == (8, 8)
    assert {s.rail for s in model.switches if s.tier is Tier.LEAF} == {f"mlx5_{r}" for r in range(8)}


def test_compute_hosts_with_dead_hcas_stay_compute_and_keep_their_finding() -> None:
    """One dead HCA (7 of 8), half of them (4 of 8) and 2 of 8 left on their own rails: broken
    compute hosts, each one finding. A host named like them whose 2 HCAs sit off their rails is not."""
    drop = [("dgx003", 5), *(("dgx004", r) for r in range(4)), *(("dgx005", r) for r in range(6))]
    model = derive(rail_fabric({"dgx009": [("mlx5_0", 3), ("mlx5_1", 4)]}, drop=drop))
    assert _non_compute(model) == {"dgx009": "management"}
    assert model.host("dgx009").role_reason == (
        "2 HCAs where the fleet's compute hosts have 8; 2 of its 2 cabled HCAs are not on their rail's leaf; "
        "no name hint: management"
    )
    found = {f.devices[0]: (f.evidence["ib"]["found"], f.evidence["ib"]["expected_hcas"]) for f in model.findings}
    assert found == {"dgx003": (7, 8), "dgx004": (4, 8), "dgx005": (2, 8)}
    assert {f.kind for f in model.findings} == {"host_missing_from_fabric"}
    assert all(model.host(h).block is not None for h in ("dgx003", "dgx004", "dgx005"))


def test_dcim_role_wins_over_the_fabric_and_over_name_rules() -> None:
    """The inventory is the operator's word: 'compute' keeps fm01 a compute host (its miscabling is
    real then) and makes head01, which the management name rule caught, one; 'Storage Server' sets
    dgx008 apart; a DCIM-only management node is listed with its role, not as missing from the fabric."""
    rows = [DcimNodeObs("dcim", f"dgx{h:03d}", rack="r1", role="compute", hca_count=8) for h in range(1, 8)]
    rows += [
        DcimNodeObs("dcim", "dgx008", rack="r2", role="Storage Server", hca_count=8),
        DcimNodeObs("dcim", "fm01", rack="r9", role="compute", hca_count=2),
        DcimNodeObs("dcim", "head01", rack="r9", role="Compute", hca_count=8),
        DcimNodeObs("dcim", "bcm01", rack="r9", role="management"),
    ]
    head = [(f"mlx5_{r}", r) for r in range(8)]
    model = derive(rail_fabric({"fm01": [("mlx5_0", 6), ("mlx5_1", 7)], "head01": head}, dcim=rows))
    assert _non_compute(model) == {"dgx008": "storage_server", "bcm01": "management"}
    assert model.host("dgx008").role_reason == "DCIM (dcim) lists its role as 'Storage Server'"
    assert model.host("bcm01").role_reason == "DCIM (dcim) lists its role as 'management'; on no fabric"
    assert (model.host("dgx008").rack, model.host("bcm01").sources) == ("r2", ("dcim",))
    # DCIM says fm01 is a compute host with 2 HCAs: its off-rail cables are real findings then.
    assert sorted(f.message for f in model.findings) == [
        "fm01 mlx5_0 (mlx5_0) is cabled to the mlx5_6 leaf", "fm01 mlx5_1 (mlx5_1) is cabled to the mlx5_7 leaf",
    ]  # fmt: skip
    (block,) = [d for d in model.domains if d.level == "block"]
    assert block.hosts == 9  # dgx001-007, head01, fm01


def test_site_host_classes_still_set_hosts_apart_by_name() -> None:
    site = Classifier(HcaFilter.from_mapping({"storage": [r"^scratch\d+$"], "login": [r"^gate\d+$"]}))
    extra = {"scratch1": [("mlx5_0", 2)], "gate1": [("mlx5_0", 0)], "ufm-a": [("mlx5_0", 1), ("mlx5_1", 5)]}
    model = derive(rail_fabric(extra, classifier=site))
    assert model.findings == ()
    assert _non_compute(model) == {"scratch1": "storage", "gate1": "login", "ufm-a": "ufm_server"}
    assert model.host("scratch1").role_reason == "storage rule '^scratch\\\\d+$' matched 'scratch1'"
    assert [(c.hca, c.leaf, c.leaf_port) for c in model.host("ufm-a").hcas] == [
        ("mlx5_0", _guid(11), "9"), ("mlx5_1", _guid(15), "9"),
    ]  # fmt: skip
    assert len(model.compute_hosts()) == 8


def test_fleet_pattern_rules() -> None:
    rules = HostRoleRules()
    assert weighted_mode([8] * 16 + [2] * 20) == 8  # twenty 2-port servers do not outvote sixteen DGX
    assert weighted_mode([4, 4, 8]) == 8 and weighted_mode([]) is None
    assert name_shape("dgx001") == name_shape("DGX12") == "dgx#"
    assert name_shape("gb200-r01-t18") == "gb#-r#-t#"
    fleet = [HostFacts(f"dgx{i:03d}", 8, 8, 8) for i in range(1, 4)]
    assert learn_pattern([*fleet, HostFacts("fm01", 2)], rules) is None  # three hosts are no fleet
    pattern = learn_pattern([*fleet, HostFacts("dgx004", 7, 7, 7), HostFacts("fm01", 2)], rules)
    assert pattern == FleetPattern(8, frozenset({"dgx#"}), "dgx###", 4)
    assert judge(HostFacts("dgx005", 7, 7, 7), pattern, rules) is None
    assert judge(HostFacts("dgx005", 4, 4, 4), pattern, rules) is None  # few, but name and rails hold
    assert judge(HostFacts("node5", 5, 0, 5), pattern, rules) is None  # more than half: not "far fewer"
    assert judge(HostFacts("dgx005", 4, 1, 4), pattern, rules) == (
        "management",
        "4 HCAs where the fleet's compute hosts have 8; 3 of its 4 cabled HCAs are not on their rail's leaf; "
        "no name hint: management",
    )
    assert judge(HostFacts("ddn-ai400x-1", 1), pattern, rules) == (
        "storage",
        "1 HCA where the fleet's compute hosts have 8; name 'ddn-ai400x-1' does not follow the compute pattern "
        "'dgx###'; the name suggests storage",
    )
    strict = HostRoleRules(max_hca_share=0.25)
    assert judge(HostFacts("fm01", 3, 3, 3), pattern, strict) is None
    assert classify_hosts([*fleet, HostFacts("dgx004", 8), HostFacts("fm01", 2)], HostRoleRules(enabled=False)) == {}


@pytest.mark.parametrize(
    ("name", "role"),
    [("fm01", "ufm_server"), ("ib-ufm-a", "ufm_server"), ("fabricmgr02", "ufm_server"), ("bufmaster01", None),
     ("ddn-ai400x-1", "storage"), ("vast-cnode-3", "storage"), ("login-2", "login"), ("bcm-head", "management"),
     ("dgx033", None), ("node7", None)],
)  # fmt: skip
def test_role_hints_read_whole_words(name: str, role: str | None) -> None:
    assert HostRoleRules().role_hint(name) == role


def test_host_roles_settings_from_mapping() -> None:
    cfg = TopologyConfig.from_mapping(
        {"host_roles": {"max_hca_share": 0.25, "min_fleet": 8, "compute_roles": ["compute", "GPU node"],
                        "hints": {"storage": ["scratch"]}}}
    )  # fmt: skip
    rules = cfg.host_roles
    assert (rules.enabled, rules.max_hca_share, rules.min_rail_share, rules.min_fleet) == (True, 0.25, 0.5, 8)
    assert rules.role_hint("scratch-07") == "storage" and rules.role_hint("fm01") == "ufm_server"
    assert [rules.dcim_role(r) for r in ("gpu-node", " UFM Server ", "", None)] == ["compute", "ufm_server", None, None]
    assert TopologyConfig.from_mapping({"host_roles": {"enabled": False}}).host_roles.enabled is False
    with pytest.raises(ValueError, match="unknown host_roles settings: max_hcas"):
        TopologyConfig.from_mapping({"host_roles": {"max_hcas": 2}})
    with pytest.raises(ValueError, match=r"host_roles.min_rail_share must be in \(0, 1\], got 0.0"):
        TopologyConfig.from_mapping({"host_roles": {"min_rail_share": 0}})
    with pytest.raises(ValueError, match=r"host_roles\.min_fleet must be at least 1, got 0"):
        TopologyConfig.from_mapping({"host_roles": {"min_fleet": 0}})
    with pytest.raises(ValueError, match=r"host_roles.hints.login: '\(' is not a regex"):
        TopologyConfig.from_mapping({"host_roles": {"hints": {"login": ["("]}}})
