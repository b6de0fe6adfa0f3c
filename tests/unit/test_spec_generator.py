"""simulator.spec + simulator.generator + simulator.dcim: the ground truth every twin renders.

The counts asserted here are the reference-architecture numbers the shipped specs claim (DGX
SuperPOD H100 / B200 / GB200 RAs), so a wiring change that breaks the fat tree fails loudly.
"""

from __future__ import annotations

import csv
import re
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.models import DeviceKind, IdentityKind, Link, LinkKind, Tier
from simulator.dcim import DCIM_COLUMNS, write_dcim_export
from simulator.generator import KNOB_KIND, DefectKind, GroundTruth, eth_port_name, generate
from simulator.spec import ClusterSpec, SpecError, load_spec, parse_spec_text

SPEC_DIR = Path(__file__).resolve().parents[2] / "simulator" / "specs"
SPEC_FILES = sorted(SPEC_DIR.glob("*.yaml"))
SPEC_IDS = [p.stem for p in SPEC_FILES]

# name: nodes, gpus, IB leaves, spines, cores, and cables node-leaf / leaf-spine / spine-core; service
# hosts (UFM ...) and their HCAs, cabled to leaves beside the nodes' (the RA's "Compute and UFM" cables)
EXPECTED: dict[str, dict[str, int]] = {
    "h100-1su": dict(
        nodes=32, gpus=256, leaves=8, spines=4, cores=0, node_leaf=256, leaf_spine=256, spine_core=0
    ),
    "h100-4su": dict(
        nodes=128, gpus=1024, leaves=32, spines=16, cores=0, node_leaf=1024, leaf_spine=1024, spine_core=0
    ),
    "b200-16su": dict(
        nodes=512,
        gpus=4096,
        leaves=128,
        spines=128,
        cores=64,
        node_leaf=4096,
        leaf_spine=4096,
        spine_core=4096,
    ),
    "gb200-nvl72": dict(
        nodes=144, gpus=576, leaves=32, spines=9, cores=0, node_leaf=576, leaf_spine=576, spine_core=0,
        service_hosts=2, service_hcas=4,
    ),
}

MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
GUID = re.compile(r"^0xb83fd2[0-9a-f]{10}$")


@cache
def spec_of(stem: str) -> ClusterSpec:
    return load_spec(SPEC_DIR / f"{stem}.yaml")


@cache
def truth_of(stem: str) -> GroundTruth:
    return generate(spec_of(stem))


def with_defects(stem: str, seed: int | None = None, **knobs: Any) -> GroundTruth:
    data = spec_of(stem).model_dump()
    data["defects"] = knobs
    if seed is not None:
        data["seed"] = seed
    return generate(ClusterSpec.model_validate(data))


def ib_tier_pairs(truth: GroundTruth) -> Counter[tuple[str, str]]:
    """Count IB links by the (sorted) roles of their ends: hca, leaf, spine, core."""

    def role(device_id: str) -> str:
        dev = truth.device(device_id)
        return "hca" if dev.kind is DeviceKind.HCA else str(truth.tiers[device_id])

    pairs: Counter[tuple[str, str]] = Counter()
    for lk in truth.links:
        if lk.kind is LinkKind.IB:
            x, y = sorted((role(lk.a.device_id), role(lk.b.device_id)))
            pairs[(x, y)] += 1
    return pairs


def test_all_shipped_specs_have_expectations() -> None:
    assert set(SPEC_IDS) == set(EXPECTED)


# --- counts -------------------------------------------------------------------------------------


@pytest.mark.parametrize("stem", SPEC_IDS)
def test_counts_match_the_reference_architecture(stem: str) -> None:
    exp = EXPECTED[stem]
    truth = truth_of(stem)
    spec = spec_of(stem)
    assert len(truth.hosts()) == exp["nodes"]
    assert [h.id for h in truth.hosts()] == spec.host_names
    assert len(truth.gpus()) == exp["gpus"]
    service, service_hcas = exp.get("service_hosts", 0), exp.get("service_hcas", 0)
    assert len(truth.service_hosts()) == service
    assert len(truth.hcas()) == exp["nodes"] * spec.rails + service_hcas
    assert len(truth.switches(Tier.LEAF, LinkKind.IB)) == exp["leaves"]
    assert len(truth.switches(Tier.SPINE, LinkKind.IB)) == exp["spines"]
    assert len(truth.switches(Tier.CORE, LinkKind.IB)) == exp["cores"]
    assert len(truth.switches(Tier.LEAF, LinkKind.ETH)) == spec.management_fabric.leaf.count
    assert len(truth.switches(Tier.SPINE, LinkKind.ETH)) == spec.management_fabric.spine.count
    pairs = ib_tier_pairs(truth)
    assert pairs[("hca", "leaf")] == exp["node_leaf"] + service_hcas
    assert pairs[("leaf", "spine")] == exp["leaf_spine"]
    assert pairs[("core", "spine")] == exp["spine_core"]
    assert sum(pairs.values()) == exp["node_leaf"] + service_hcas + exp["leaf_spine"] + exp["spine_core"]
    eth = [lk for lk in truth.links if lk.kind is LinkKind.ETH]
    mf = spec.management_fabric
    assert len(eth) == exp["nodes"] + mf.leaf.count * mf.spine.count * mf.links_per_spine
    assert truth.defects == []
    assert len(truth.dcim) == exp["nodes"] + service


def test_h100_4su_leaves_have_32_down_and_2_up_to_each_spine() -> None:
    truth = truth_of("h100-4su")
    spines = {s.id for s in truth.switches(Tier.SPINE, LinkKind.IB)}
    for leaf in truth.switches(Tier.LEAF, LinkKind.IB):
        peers = [truth.peer(leaf.id, str(p)) for p in range(1, 65)]
        assert all(p is not None for p in peers)
        down = [p for p in peers[:32] if p is not None and truth.device(p.device_id).kind is DeviceKind.HCA]
        up = Counter(p.device_id for p in peers[32:] if p is not None)
        assert len(down) == 32
        assert set(up) == spines and set(up.values()) == {2}


def test_b200_16su_three_tier_wiring() -> None:
    """Spine groups of 4 SUs (32 leaves x 32 spines, 1 link each); spine j -> core group j, 16 x 2."""
    truth = truth_of("b200-16su")
    for spine in truth.switches(Tier.SPINE, LinkKind.IB):
        peers = Counter(
            str(truth.tiers[p.device_id])
            for p in (truth.peer(spine.id, str(n)) for n in range(1, 65))
            if p is not None
        )
        assert peers == Counter({"leaf": 32, "core": 32})
        cores = Counter(
            lk.a.device_id if lk.b.device_id == spine.id else lk.b.device_id
            for lk in truth.links_of(spine.id)
            if Tier.CORE in (truth.tiers.get(lk.a.device_id), truth.tiers.get(lk.b.device_id))
        )
        assert len(cores) == 2 and set(cores.values()) == {16}
        assert all(
            truth.device(c).attributes["core_group"] == f"cg{spine.attributes['position'] + 1:02d}"
            for c in cores
        )
    for core in truth.switches(Tier.CORE, LinkKind.IB):
        groups = Counter(
            truth.device(p.device_id).attributes["spine_group"]
            for p in (truth.peer(core.id, str(n)) for n in range(1, 65))
            if p is not None
        )
        assert groups == Counter({"sg01": 16, "sg02": 16, "sg03": 16, "sg04": 16})
    leaf_spines: dict[str, set[str]] = defaultdict(set)
    for lk in truth.links:
        tiers = {truth.tiers.get(lk.a.device_id), truth.tiers.get(lk.b.device_id)}
        if tiers == {Tier.LEAF, Tier.SPINE} and lk.kind is LinkKind.IB:
            leaf_id, spine_id = sorted(
                (lk.a.device_id, lk.b.device_id), key=lambda d: truth.tiers[d] != Tier.LEAF
            )
            leaf_spines[leaf_id].add(spine_id)
    for leaf_id, spines in leaf_spines.items():
        sg = truth.device(leaf_id).attributes["spine_group"]
        assert len(spines) == 32
        assert {truth.device(s).attributes["spine_group"] for s in spines} == {sg}


# --- hosts reach their rails ---------------------------------------------------------------------


@pytest.mark.parametrize("stem", SPEC_IDS)
def test_every_host_reaches_one_leaf_per_rail_and_its_ethernet_leaf(stem: str) -> None:
    truth = truth_of(stem)
    spec = spec_of(stem)
    eth_leaves = {s.id for s in truth.switches(Tier.LEAF, LinkKind.ETH)}
    for host in truth.hosts():
        hcas = truth.hcas(host.id)
        assert sorted(h.attributes["rail"] for h in hcas) == list(range(spec.rails))
        leaves = []
        for hca in hcas:
            peer = truth.peer(hca.id, "1")
            assert peer is not None, f"{hca.name} is not cabled"
            leaf = truth.device(peer.device_id)
            assert truth.tiers[leaf.id] is Tier.LEAF
            assert leaf.attributes["rail"] == hca.attributes["rail"]
            assert leaf.attributes["su"] == host.attributes["su"]
            leaves.append(leaf.id)
        assert len(set(leaves)) == spec.rails
        eth = truth.links_of(host.id)
        assert len(eth) == 1 and eth[0].kind is LinkKind.ETH
        far = truth.peer(host.id, spec.node.frontend_nic)
        assert far is not None and far.device_id in eth_leaves


# --- ports and links -----------------------------------------------------------------------------


@pytest.mark.parametrize("stem", SPEC_IDS)
def test_ports_links_radix_and_canonical_form(stem: str) -> None:
    truth = truth_of(stem)
    ends = Counter((end.device_id, end.port) for lk in truth.links for end in (lk.a, lk.b))
    assert max(ends.values()) == 1, "a port is used by two links"
    port_keys = {(p.device_id, p.port) for p in truth.ports}
    assert len(port_keys) == len(truth.ports), "duplicate port"
    assert set(ends) <= port_keys, "a link end has no port"
    for sw in truth.switches():
        radix = sw.attributes["radix"]
        assert len(truth.ports_of(sw.id)) == radix
        assert len(truth.links_of(sw.id)) <= radix
    for lk in truth.links:
        assert lk.a.sort_key() < lk.b.sort_key()
        assert Link.between(lk.b, lk.a, kind=lk.kind, speed_gbps=lk.speed_gbps, width=lk.width) == lk
        if lk.kind is LinkKind.IB:
            assert lk.width == "4x" and lk.speed_gbps == spec_of(stem).link_speed_gbps
    assert truth.links == sorted(truth.links, key=lambda lk: lk.key)


@pytest.mark.parametrize("stem", SPEC_IDS)
def test_identities(stem: str) -> None:
    truth = truth_of(stem)
    ids = [d.id for d in truth.devices]
    assert len(set(ids)) == len(ids)
    for dev in truth.devices:
        if dev.kind is DeviceKind.HOST:
            assert dev.identity_kind is IdentityKind.NODE_NAME and dev.id == dev.name
        elif dev.kind is DeviceKind.HCA:
            assert GUID.match(dev.id) and dev.system_guid == dev.id
            assert dev.identity_kind is IdentityKind.NODE_GUID
            assert dev.parent_id is not None and dev.name == f"{dev.parent_id} {dev.attributes['hca']}"
            assert dev.attributes["node_description"] == dev.name
        elif dev.kind is DeviceKind.GPU:
            assert dev.identity_kind is IdentityKind.GPU_UUID and dev.parent_id is not None
        elif dev.attributes["fabric"] == LinkKind.IB:
            assert GUID.match(dev.id) and dev.system_guid == dev.id
        else:
            assert MAC.match(dev.id) and dev.identity_kind is IdentityKind.CHASSIS_MAC
            assert dev.platform in {
                "arista_eos",
                "cisco_nxos",
                "juniper_junos",
                "mellanox_mlnxos",
                "sonic",
                "cumulus",
            }
    for port in truth.ports:
        dev = truth.device(port.device_id)
        if dev.kind is DeviceKind.HCA:
            assert port.rail == dev.attributes["rail"] and port.guid == dev.id
        elif dev.kind is DeviceKind.HOST:
            assert port.mac is not None and MAC.match(port.mac)
        else:
            assert port.rail is None


def test_ethernet_port_names_follow_each_platform() -> None:
    assert [eth_port_name("sonic", k) for k in (1, 2, 3)] == ["Ethernet0", "Ethernet4", "Ethernet8"]
    assert eth_port_name("arista_eos", 1) == "Ethernet1"
    assert eth_port_name("cisco_nxos", 7) == "Ethernet1/7"
    assert eth_port_name("juniper_junos", 1) == "et-0/0/0"
    assert eth_port_name("mellanox_mlnxos", 3) == "Eth1/3"
    assert eth_port_name("cumulus", 48) == "swp48"
    truth = truth_of("h100-4su")
    patterns = {
        "arista_eos": r"Ethernet\d+",
        "cisco_nxos": r"Ethernet1/\d+",
        "juniper_junos": r"et-0/0/\d+",
        "mellanox_mlnxos": r"Eth1/\d+",
        "sonic": r"Ethernet(\d+)",
        "cumulus": r"swp\d+",
    }
    seen = set()
    for sw in truth.switches(fabric=LinkKind.ETH):
        seen.add(sw.platform)
        assert sw.platform is not None
        for port in truth.ports_of(sw.id):
            m = re.fullmatch(patterns[sw.platform], port.port)
            assert m, (sw.platform, port.port)
            if sw.platform == "sonic":
                assert int(m.group(1)) % 4 == 0
    assert seen == set(patterns)


# --- tiers and domains ---------------------------------------------------------------------------


@pytest.mark.parametrize("stem", SPEC_IDS)
def test_tiers_match_distance_from_the_hosts(stem: str) -> None:
    """Leaf = one hop from an HCA, spine = two, core = three: the tiers a derivation must find."""
    truth = truth_of(stem)
    switches = {s.id for s in truth.switches()}
    assert set(truth.tiers) == switches
    adj: dict[str, set[str]] = defaultdict(set)
    for lk in truth.links:
        adj[lk.a.device_id].add(lk.b.device_id)
        adj[lk.b.device_id].add(lk.a.device_id)
    for fabric, start in (
        (LinkKind.IB, [h.id for h in truth.hcas()]),
        (LinkKind.ETH, [h.id for h in truth.hosts()]),
    ):
        dist = dict.fromkeys(start, 0)
        frontier = list(start)
        while frontier:
            nxt = []
            for node in frontier:
                for peer in adj[node]:
                    if peer not in dist:
                        dist[peer] = dist[node] + 1
                        nxt.append(peer)
            frontier = nxt
        for sw in truth.switches(fabric=fabric):
            assert truth.tiers[sw.id] is [Tier.LEAF, Tier.SPINE, Tier.CORE][dist[sw.id] - 1], sw.name
            assert sw.attributes["tier"] is truth.tiers[sw.id]


@pytest.mark.parametrize("stem", SPEC_IDS)
def test_host_domains(stem: str) -> None:
    truth = truth_of(stem)
    spec = spec_of(stem)
    assert set(truth.host_domains) == set(spec.host_names)
    for name, dom in truth.host_domains.items():
        assert dom.host == name
        assert dom.block and dom.spine_group and dom.pod and dom.nvlink_domain and dom.nvlink_sub_domain
    # a block is exactly the set of hosts that share their leaves
    leaves_by_block: dict[str, set[frozenset[str]]] = defaultdict(set)
    for host in truth.hosts():
        leaves = frozenset(
            p.device_id for h in truth.hcas(host.id) if (p := truth.peer(h.id, "1")) is not None
        )
        leaves_by_block[truth.host_domains[host.id].block or ""].add(leaves)
    assert all(len(v) == 1 for v in leaves_by_block.values())
    assert len(leaves_by_block) == spec.scalable_units * spec.compute_fabric.rail_groups_per_su
    assert len({d.spine_group for d in truth.host_domains.values()}) == spec.spine_groups
    assert len({d.pod for d in truth.host_domains.values()}) == 1
    gpus_per_domain: Counter[str] = Counter()
    trays_per_sub: Counter[str] = Counter()
    for host in truth.hosts():
        dom = truth.host_domains[host.id]
        gpus_per_domain[dom.nvlink_domain or ""] += len(truth.gpus(host.id))
        trays_per_sub[dom.nvlink_sub_domain or ""] += 1
    if spec.nvlink.kind == "nvl72":
        assert set(gpus_per_domain.values()) == {72}
        assert len(gpus_per_domain) == len(spec.host_names) // 18
        assert set(trays_per_sub.values()) == {9}
        # one domain per rack
        for host in truth.hosts():
            assert truth.host_domains[host.id].nvlink_domain == f"nvl72-{host.attributes['rack']}"
    else:
        assert set(gpus_per_domain.values()) == {spec.node.gpus}
        assert len(gpus_per_domain) == len(spec.host_names)


def test_b200_blocks_and_spine_groups() -> None:
    domains = truth_of("b200-16su").host_domains
    assert domains["dgx0001"].block == "su01" and domains["dgx0033"].block == "su02"
    assert domains["dgx0128"].spine_group == "sg01" and domains["dgx0129"].spine_group == "sg02"
    assert Counter(d.spine_group for d in domains.values()) == Counter({f"sg0{i}": 128 for i in range(1, 5)})


# --- determinism and speed -----------------------------------------------------------------------


@pytest.mark.parametrize("stem", SPEC_IDS)
def test_generation_is_deterministic(stem: str) -> None:
    assert generate(load_spec(SPEC_DIR / f"{stem}.yaml")) == truth_of(stem)


def test_same_seed_same_defects_different_seed_different_placement() -> None:
    knobs = dict(miscabled_ports=2, missing_links=3, degraded_uplinks=1, unnamed_hcas=2, dcim_missing_hosts=2)
    a = with_defects("h100-4su", **knobs)
    assert with_defects("h100-4su", **knobs) == a
    b = with_defects("h100-4su", seed=spec_of("h100-4su").seed + 1, **knobs)
    placed_a = [(d.kind, d.hosts, d.detail.get("leaf")) for d in a.defects]
    placed_b = [(d.kind, d.hosts, d.detail.get("leaf")) for d in b.defects]
    assert Counter(k for k, *_ in placed_a) == Counter(k for k, *_ in placed_b)
    assert placed_a != placed_b
    # identities are seeded too
    assert {h.id for h in a.hcas()}.isdisjoint({h.id for h in b.hcas()})


# --- defects -------------------------------------------------------------------------------------

COUNTS = {
    "miscabled_ports": 3,
    "missing_links": 4,
    "degraded_uplinks": 2,
    "unnamed_hcas": 3,
    "duplicate_sysnames": 1,
    "dcim_extra_hosts": 2,
    "dcim_missing_hosts": 3,
}


@pytest.mark.parametrize("stem", ["h100-1su", "h100-4su", "gb200-nvl72"])
@pytest.mark.parametrize("knob", list(COUNTS))
def test_each_knob_injects_exactly_what_it_records(stem: str, knob: str) -> None:
    clean = truth_of(stem)
    n = COUNTS[knob]
    dirty = with_defects(stem, **{knob: n})
    kind = KNOB_KIND[knob]
    assert [d.kind for d in dirty.defects] == [kind] * n
    # identities never move; the link diff is exactly the recorded removed / added links
    assert [d.id for d in dirty.devices] == [d.id for d in clean.devices]
    assert dirty.ports == clean.ports
    removed = set(clean.links) - set(dirty.links)
    added = set(dirty.links) - set(clean.links)
    assert removed == {lk for d in dirty.defects for lk in d.removed_links}
    assert added == {lk for d in dirty.defects for lk in d.added_links}
    assert len(dirty.links) == len(clean.links) - len(removed) + len(added)
    spec = spec_of(stem)

    if kind is DefectKind.MISCABLED_PORT:
        assert len(removed) == 2 * n and len(added) == 2 * n
        for d in dirty.defects:
            for lk in d.added_links:
                hca, leaf = (
                    (lk.a, lk.b) if dirty.device(lk.a.device_id).kind is DeviceKind.HCA else (lk.b, lk.a)
                )
                assert (
                    dirty.device(leaf.device_id).attributes["rail"]
                    != dirty.device(hca.device_id).attributes["rail"]
                )
            assert d.detail["rail"] != d.detail["landed_on_rail"]

        # a swap: exactly the same ports stay in use, each once
        def used(t: GroundTruth) -> Counter[tuple[str, str]]:
            return Counter((e.device_id, e.port) for lk in t.links for e in (lk.a, lk.b))

        assert used(dirty) == used(clean)
    elif kind is DefectKind.MISSING_LINK:
        assert len(removed) == n and not added
        for lk in removed:
            tiers = {dirty.tiers.get(lk.a.device_id), dirty.tiers.get(lk.b.device_id)}
            assert Tier.LEAF in tiers and tiers <= {Tier.LEAF, Tier.SPINE, None}
    elif kind is DefectKind.DEGRADED_UPLINKS:
        k = spec.defects.uplinks_removed_per_leaf
        assert len(removed) == n * k and not added
        for d in dirty.defects:
            leaf_id = d.devices[0]
            assert len(d.removed_links) == k
            assert all(leaf_id in (lk.a.device_id, lk.b.device_id) for lk in d.removed_links)
            assert dirty.tiers[leaf_id] is Tier.LEAF
            up = [
                lk
                for lk in dirty.links_of(leaf_id)
                if dirty.device(lk.a.device_id).kind is DeviceKind.SWITCH
                and dirty.device(lk.b.device_id).kind is DeviceKind.SWITCH
            ]
            assert len(up) == spec.leaf_uplinks - k
        assert len({d.devices[0] for d in dirty.defects}) == n
    else:
        assert not removed and not added

    if kind is DefectKind.UNNAMED_HCA:
        blank = [h for h in dirty.hcas() if h.attributes["node_description"] == ""]
        assert {h.id for h in blank} == {d.devices[0] for d in dirty.defects}
        assert len(blank) == n
        assert all(h.attributes["node_description"] == h.name for h in dirty.hcas() if h not in blank)
    if kind is DefectKind.DUPLICATE_SYSNAME:
        names = Counter(s.name for s in dirty.switches(fabric=LinkKind.ETH))
        assert sorted(names.values(), reverse=True)[: n + 1] == [2] * n + [1]
        d = dirty.defects[0]
        assert len(dirty.named(d.detail["name"])) == 2
        assert dirty.device(d.devices[1]).attributes["inventory_name"] == d.detail["original_name"]
    if kind is DefectKind.DCIM_EXTRA_HOST:
        assert len(dirty.dcim) == len(clean.dcim) + n
        extra = {r.node for r in dirty.dcim} - set(spec.host_names) - {h.name for h in spec.service_hosts}
        assert extra == {d.hosts[0] for d in dirty.defects} and len(extra) == n
    elif kind is DefectKind.DCIM_MISSING_HOST:
        assert len(dirty.dcim) == len(clean.dcim) - n
        missing = set(spec.host_names) - {r.node for r in dirty.dcim}
        assert missing == {d.hosts[0] for d in dirty.defects} and len(missing) == n
    else:
        assert dirty.dcim == clean.dcim


def test_all_knobs_together_never_share_a_port() -> None:
    clean = truth_of("gb200-nvl72")
    dirty = with_defects("gb200-nvl72", **COUNTS)
    assert Counter(d.kind for d in dirty.defects) == Counter({KNOB_KIND[k]: n for k, n in COUNTS.items()})
    touched = [(p.device_id, p.port) for d in dirty.defects for lk in d.removed_links for p in (lk.a, lk.b)]
    assert len(touched) == len(set(touched))
    assert set(clean.links) - set(dirty.links) == {lk for d in dirty.defects for lk in d.removed_links}


def test_explicit_targets_land_exactly_there() -> None:
    clean = truth_of("h100-4su")
    dirty = with_defects(
        "h100-4su",
        missing_links=["dgx001:mlx5_0", "ib-leaf-su02-r3:40"],
        miscabled_ports=[{"host": "dgx010", "rail": 1, "to_rail": 2, "with_host": "dgx011"}],
        degraded_uplinks=[{"leaf": "ib-leaf-su01-r7", "remove": 3}],
        unnamed_hcas=["dgx005:mlx5_7"],
        duplicate_sysnames=[["eth-leaf-01", "eth-spine-02"]],
        dcim_missing_hosts=["dgx[100-101]"],
        dcim_extra_hosts=["spare01"],
    )
    hca = {(h.parent_id, h.attributes["hca"]): h.id for h in clean.hcas()}
    leaf = {s.name: s.id for s in clean.switches()}
    missing = dirty.defects_of(DefectKind.MISSING_LINK)
    assert [d.removed_links[0] for d in missing] == [
        clean.link_at(hca[("dgx001", "mlx5_0")], "1"),
        clean.link_at(leaf["ib-leaf-su02-r3"], "40"),
    ]
    assert dirty.link_at(hca[("dgx001", "mlx5_0")], "1") is None
    # dgx010 mlx5_1 now sits on the rail-2 leaf in dgx011's port; dgx011 mlx5_2 on the rail-1 leaf
    (mis,) = dirty.defects_of(DefectKind.MISCABLED_PORT)
    assert dirty.peer(hca[("dgx010", "mlx5_1")], "1") == clean.peer(hca[("dgx011", "mlx5_2")], "1")
    assert dirty.peer(hca[("dgx011", "mlx5_2")], "1") == clean.peer(hca[("dgx010", "mlx5_1")], "1")
    assert mis.hosts == ("dgx010", "dgx011")
    (deg,) = dirty.defects_of(DefectKind.DEGRADED_UPLINKS)
    assert deg.devices[0] == leaf["ib-leaf-su01-r7"] and len(deg.removed_links) == 3
    (unnamed,) = dirty.defects_of(DefectKind.UNNAMED_HCA)
    assert dirty.device(hca[("dgx005", "mlx5_7")]).attributes["node_description"] == ""
    assert unnamed.devices == (hca[("dgx005", "mlx5_7")],)
    assert len(dirty.named("eth-leaf-01")) == 2 and not dirty.named("eth-spine-02")
    expected_rows = set(spec_of("h100-4su").host_names) - {"dgx100", "dgx101"} | {"spare01"}
    assert {r.node for r in dirty.dcim} == expected_rows


@pytest.mark.parametrize(
    ("knobs", "path"),
    [
        ({"missing_links": ["dgx001:mlx5_9"]}, "defects.missing_links[0]"),
        ({"missing_links": ["no-such-switch:1"]}, "defects.missing_links[0]"),
        ({"degraded_uplinks": [{"leaf": "eth-leaf-01", "remove": 1}]}, "defects.degraded_uplinks[0].leaf"),
        (
            {"miscabled_ports": [{"host": "dgx001", "rail": 0, "with_host": "dgx100"}]},
            "defects.miscabled_ports[0].with_host",
        ),
        ({"duplicate_sysnames": [["eth-leaf-01", "ib-spine-01"]]}, "defects.duplicate_sysnames[0]"),
    ],
)
def test_unresolvable_targets_raise_spec_error(knobs: dict[str, Any], path: str) -> None:
    with pytest.raises(SpecError, match=re.escape(path)):
        with_defects("h100-4su", **knobs)


# --- spec errors ---------------------------------------------------------------------------------


def _bad_yaml(tmp_path: Path, old: str, new: str, stem: str = "h100-4su") -> tuple[Path, int]:
    """Write a copy of a shipped spec with one edit; return the file and the first changed line (1-based)."""
    text = (SPEC_DIR / f"{stem}.yaml").read_text()
    assert text.count(old) == 1, old
    edited = text.replace(old, new)
    path = tmp_path / f"bad-{stem}.yaml"
    path.write_text(edited)
    pairs = zip(text.splitlines(), edited.splitlines(), strict=False)
    return path, next(i for i, (a, b) in enumerate(pairs, start=1) if a != b)


@pytest.mark.parametrize(
    ("old", "new", "path", "words"),
    [
        # missing field: reported at the mapping that lacks it
        (
            "leaf: {platform: quantum2, radix: 64, count: 32}",
            "leaf: {platform: quantum2, count: 32}",
            "compute_fabric.leaf.radix",
            "required",
        ),
        # wrong type
        ("  gpus: 8\n", "  gpus: eight\n", "node.gpus", "integer"),
        # unknown key
        ("  gpus: 8\n", "  gpus: 8\n  colour: green\n", "node.colour", "unknown key"),
        # wrong enum
        ("  speed: ndr", "  speed: edr", "compute_fabric.speed", "hdr"),
        # inconsistent counts
        (
            "leaf: {platform: quantum2, radix: 64, count: 32}",
            "leaf: {platform: quantum2, radix: 64, count: 30}",
            "compute_fabric.leaf.count",
            "32 leaves",
        ),
        (
            "spine: {platform: quantum2, radix: 64, count: 16}",
            "spine: {platform: quantum2, radix: 64, count: 12}",
            "compute_fabric.spine.count",
            "divide evenly",
        ),
        (
            "spine: {platform: quantum2, radix: 64, count: 16}",
            "spine: {platform: quantum2, radix: 64, count: 8}",
            "compute_fabric.spine.radix",
            "do not fit",
        ),
        (
            "leaf: {platform: quantum2, radix: 64, count: 32}",
            "leaf: {platform: quantum, radix: 64, count: 32}",
            "compute_fabric.leaf.radix",
            "40 ports",
        ),
        ('hosts: "dgx[001-128]"', 'hosts: "dgx[001-120]"', "hosts", "120 hosts"),
        ('hosts: "dgx[001-128]"', 'hosts: "dgx[001-128"', "hosts", "unbalanced"),
        ("nodes_per_rack: 4", "nodes_per_rack: 3", "nodes_per_rack", "racks"),
        ("  tiers: 2", "  tiers: 4", "compute_fabric.tiers", "2"),
        ("defects: {}", "defects: {missing_links: many}", "defects.missing_links", "integer"),
        (
            "defects: {}",
            "defects: {unnamed_hcas: ['dgx999:mlx5_0']}",
            "defects.unnamed_hcas[0]",
            "not one of",
        ),
        (
            "defects: {}",
            "defects: {degraded_uplinks: 1, uplinks_removed_per_leaf: 32}",
            "defects.uplinks_removed_per_leaf",
            "isolate",
        ),
    ],
)
def test_bad_spec_names_field_path_and_line(
    tmp_path: Path, old: str, new: str, path: str, words: str
) -> None:
    bad, line = _bad_yaml(tmp_path, old, new)
    with pytest.raises(SpecError) as info:
        load_spec(bad)
    message = str(info.value)
    assert f"{path} (line {line})" in message, message
    assert words in message
    assert str(bad) in message
    assert any(issue.path == path and issue.line == line for issue in info.value.issues)


def test_missing_top_level_field_and_bad_yaml(tmp_path: Path) -> None:
    bad, _ = _bad_yaml(tmp_path, "seed: 1004\n", "")
    with pytest.raises(SpecError, match=r"seed \(line \d+\): required"):
        load_spec(bad)
    with pytest.raises(SpecError, match=r"<root> \(line 4\): not valid YAML"):
        parse_spec_text("name: x\nseed: 1\nhosts: [unclosed\n")
    with pytest.raises(SpecError, match="a spec is a mapping"):
        parse_spec_text("- just\n- a list\n")


def test_three_tier_consistency(tmp_path: Path) -> None:
    bad, line = _bad_yaml(
        tmp_path,
        "core: {platform: quantum2, radix: 64, count: 64}",
        "core: {platform: quantum2, radix: 64, count: 48}",
        "b200-16su",
    )
    with pytest.raises(SpecError, match=rf"compute_fabric.core.count \(line {line}\)"):
        load_spec(bad)
    bad, line = _bad_yaml(tmp_path, "  sus_per_spine_group: 4\n", "  sus_per_spine_group: 3\n", "b200-16su")
    with pytest.raises(SpecError, match=rf"compute_fabric.sus_per_spine_group \(line {line}\)"):
        load_spec(bad)
    bad, _ = _bad_yaml(tmp_path, "  tiers: 3\n", "  tiers: 2\n", "b200-16su")
    with pytest.raises(SpecError, match=r"compute_fabric\.core.*no core layer"):
        load_spec(bad)


def test_nvl72_consistency(tmp_path: Path) -> None:
    bad, line = _bad_yaml(tmp_path, "  gpus: 4\n", "  gpus: 8\n", "gb200-nvl72")
    with pytest.raises(SpecError, match=r"nvlink.nodes_per_domain .*72 GPUs per domain"):
        load_spec(bad)
    bad, line = _bad_yaml(tmp_path, "  sub_domains: 2\n", "  sub_domains: 4\n", "gb200-nvl72")
    with pytest.raises(SpecError, match=rf"nvlink.sub_domains \(line {line}\)"):
        load_spec(bad)


def test_model_validate_on_a_dict_raises_spec_error_with_path() -> None:
    data = yaml.safe_load((SPEC_DIR / "h100-1su.yaml").read_text())
    assert ClusterSpec.model_validate(data) == spec_of("h100-1su")
    data["management_fabric"]["leaf"]["radix"] = 8
    with pytest.raises(SpecError, match=r"management_fabric.leaf.radix: 8 host ports \+ 2 uplinks"):
        ClusterSpec.model_validate(data)
    del data["node"]
    with pytest.raises(SpecError, match=r"node: required"):
        ClusterSpec.model_validate(data)


# --- DCIM export ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "yaml"])
def test_dcim_export(tmp_path: Path, fmt: str) -> None:
    truth = with_defects("h100-1su", dcim_extra_hosts=2, dcim_missing_hosts=1, miscabled_ports=1)
    out = write_dcim_export(truth, tmp_path / f"dcim.{fmt}", format=fmt)  # type: ignore[arg-type]
    if fmt == "csv":
        with out.open(newline="") as fh:
            reader = csv.DictReader(fh)
            assert tuple(reader.fieldnames or ()) == DCIM_COLUMNS
            rows = list(reader)
    else:
        rows = yaml.safe_load(out.read_text())
        assert all(tuple(r) == DCIM_COLUMNS for r in rows)
    assert len(rows) == 32 + 2 - 1
    assert [(r["rack"], r["node"]) for r in rows] == sorted((r["rack"], r["node"]) for r in rows)
    extra = {d.hosts[0] for d in truth.defects_of(DefectKind.DCIM_EXTRA_HOST)}
    missing = {d.hosts[0] for d in truth.defects_of(DefectKind.DCIM_MISSING_HOST)}
    assert {r["node"] for r in rows} == (set(spec_of("h100-1su").host_names) - missing) | extra
    guids = {(h.parent_id, h.attributes["hca"]): h.id for h in truth.hcas()}
    for row in rows:
        hcas = str(row["hcas"]).split(";")
        assert len(hcas) == int(row["hca_count"]) == 8
        assert int(row["gpu_count"]) == 8 and row["gpu_model"] == "H100-SXM5-80GB"
        assert isinstance(row["serial"], str) and len(row["serial"]) == 13
        for r, entry in enumerate(hcas):
            name, rail, guid = entry.split(":")
            assert (name, rail) == (f"mlx5_{r}", f"rail{r}") and GUID.match(guid)
            if row["node"] in extra:
                assert row["su"] == "" and guid not in guids.values()
            else:
                # inventory lists the intended rail even for the miscabled HCA
                assert guids[(row["node"], name)] == guid and row["su"] == "su01"


def test_dcim_rejects_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="format"):
        write_dcim_export(truth_of("h100-1su"), tmp_path / "x", format="xml")  # type: ignore[arg-type]


# --- service hosts (UFM, storage, login, management servers on the compute fabric) ---------------


def test_gb200_ufm_servers_are_on_rail_leaves_and_nowhere_a_gpu_node_is(tmp_path: Path) -> None:
    truth = truth_of("gb200-nvl72")
    spec = spec_of("gb200-nvl72")
    service = truth.service_hosts()
    assert [(h.id, h.attributes["role"], h.attributes["hca_count"]) for h in service] == [
        ("fabricmgr01", "ufm_server", 2), ("fabricmgr02", "ufm_server", 2),
    ]  # fmt: skip
    assert {h.id for h in service}.isdisjoint(h.id for h in truth.hosts())
    first_free = str(spec.leaf_downlinks + spec.leaf_uplinks + 1)
    landed = []
    for host in service:
        assert truth.gpus(host.id) == [] and host.id not in truth.host_domains
        assert [lk.kind for lk in truth.links_of(host.id)] == []  # no Ethernet cable in the twin
        for hca in sorted(truth.hcas(host.id), key=lambda d: str(d.attributes["hca"])):
            peer = truth.peer(hca.id, "1")
            assert peer is not None and peer.port == first_free
            leaf = truth.device(peer.device_id)
            assert leaf.attributes["rail"] == hca.attributes["rail"] and leaf.attributes["rail_group"] == 7
            landed.append((hca.attributes["node_description"], leaf.name))
    assert landed == [
        ("fabricmgr01 mlx5_0", "ib-leaf-su01-rg08-r0"), ("fabricmgr01 mlx5_1", "ib-leaf-su01-rg08-r1"),
        ("fabricmgr02 mlx5_0", "ib-leaf-su01-rg08-r2"), ("fabricmgr02 mlx5_1", "ib-leaf-su01-rg08-r3"),
    ]  # fmt: skip
    rows = {r.node: r for r in truth.dcim}
    ufm = rows["fabricmgr02"]
    assert (ufm.role, ufm.gpu_model, ufm.gpu_count, ufm.hca_count, ufm.su, ufm.rack) == (
        "ufm_server", None, 0, 2, "", "mgmt01",
    )  # fmt: skip
    assert [(h.name, h.rail) for h in ufm.hcas] == [("mlx5_0", 2), ("mlx5_1", 3)]
    assert len({r.bmc_address for r in truth.dcim}) == len(truth.dcim)
    with write_dcim_export(truth, tmp_path / "dcim.csv").open(newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["node"] == "fabricmgr01")
    assert (row["role"], row["gpu_model"], row["gpu_count"]) == ("ufm_server", "", "0")


def test_ibnetdiscover_shows_service_hosts_as_the_fabric_would() -> None:
    from connectors.ibnetdiscover.parser import parse_ibnetdiscover
    from simulator.ib.ibnetdiscover import ib_device_count, render_lines

    truth = truth_of("gb200-nvl72")
    fabric = parse_ibnetdiscover(list(render_lines(truth)))
    assert fabric.quarantined == []
    by_host: dict[str, set[str]] = defaultdict(set)
    for guid, c in fabric.classes.items():
        if c.hostname:
            by_host[c.hostname].add(guid)
    assert {h: len(g) for h, g in by_host.items() if h.startswith("fabricmgr")} == {"fabricmgr01": 2, "fabricmgr02": 2}
    assert set(by_host) == {h.id for h in truth.hosts()} | {"fabricmgr01", "fabricmgr02"}
    assert ib_device_count(truth) == (41, 144 * 4 + 4)


def test_service_host_defects_stay_on_compute_hosts() -> None:
    """Count-placed link defects never pick a service host's cable, so what they record is the same."""
    truth = with_defects("gb200-nvl72", missing_links=20, miscabled_ports=5, unnamed_hcas=10)
    service = {h.id for h in truth.service_hosts()}
    assert all(not (set(d.hosts) & service) for d in truth.defects)
    assert all(truth.peer(h.id, "1") is not None for s in service for h in truth.hcas(s))


@pytest.mark.parametrize(
    ("entry", "path", "words"),
    [
        ({"name": "fm01", "role": "ufm_server", "rails": [5]}, "service_hosts[0].rails[0]",
         "the rail-5 leaf of SU 1 rail group 1 has no free port (32 host ports + 32 uplinks of 64)"),
        ({"name": "dgx003", "role": "management", "rails": [0]}, "service_hosts[0].name", "'dgx003' is a compute host"),
        ({"name": "fm01", "role": "ufm_server", "rails": [9]}, "service_hosts[0].rails[0]", "rail 9 >= rails (8)"),
        ({"name": "fm01", "role": "ufm_server", "rails": [0], "su": 2}, "service_hosts[0].su",
         "SU 2 > scalable_units (1)"),
        ({"name": "FM_01", "role": "ufm_server", "rails": [0]}, "service_hosts[0].name", "should match pattern"),
        ({"name": "fm01", "role": "gpu", "rails": [0]}, "service_hosts[0].role", "'ufm_server'"),
        ({"name": "fm01", "role": "ufm_server", "rails": []}, "service_hosts[0].rails", "at least 1"),
    ],
)  # fmt: skip
def test_bad_service_hosts_name_the_field(entry: dict[str, Any], path: str, words: str) -> None:
    data = yaml.safe_load((SPEC_DIR / "h100-1su.yaml").read_text())
    if "free port" not in words:  # the shipped leaves are full: free 4 ports so only `entry` is wrong
        data["compute_fabric"]["leaf"]["uplinks"] = 28
    data["service_hosts"] = [entry]
    with pytest.raises(SpecError) as info:
        ClusterSpec.model_validate(data)
    assert [i.path for i in info.value.issues] == [path], str(info.value)
    assert words in str(info.value)


def test_service_hosts_fill_free_ports_in_order_and_no_more() -> None:
    """28 uplinks per leaf leave 4 free ports on an h100-1su leaf: four HCAs fit on one, a fifth not."""
    data = spec_of("h100-1su").model_dump()
    data["compute_fabric"]["leaf"]["uplinks"] = 28
    data["service_hosts"] = [{"name": f"stor{i}", "role": "storage", "rails": [3]} for i in range(4)]
    truth = generate(ClusterSpec.model_validate(data))
    leaf = next(s.id for s in truth.switches(Tier.LEAF, LinkKind.IB) if s.name == "ib-leaf-su01-r3")
    peers = [truth.peer(leaf, str(p)) for p in range(61, 65)]
    assert [truth.device(p.device_id).parent_id for p in peers if p is not None] == [f"stor{i}" for i in range(4)]
    data["service_hosts"].append({"name": "stor4", "role": "storage", "rails": [3]})
    full = r"service_hosts\[4\]\.rails\[0\]: .*\(32 host ports \+ 28 uplinks of 64, 4 free and all taken\)"
    with pytest.raises(SpecError, match=full):
        ClusterSpec.model_validate(data)


def test_service_host_errors_in_a_spec_file_name_the_yaml_line(tmp_path: Path) -> None:
    bad, line = _bad_yaml(tmp_path, "rails: [2, 3], rail_group: 8}", "rails: [2, 4], rail_group: 8}", "gb200-nvl72")
    with pytest.raises(SpecError) as info:
        load_spec(bad)
    assert [(i.path, i.line) for i in info.value.issues] == [("service_hosts[1].rails[1]", line)]
    assert "rail 4 >= rails (4)" in str(info.value)
    bad, line = _bad_yaml(tmp_path, "- {name: fabricmgr02", "- {name: fabricmgr01", "gb200-nvl72")
    with pytest.raises(SpecError, match=rf"service_hosts\[1\]\.name \(line {line}\): 'fabricmgr01' is listed twice"):
        load_spec(bad)
