"""The derived model equals the ground truth on every shipped spec, with and without defects,
and every injected defect appears as exactly one finding (no finding without a defect)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.topology import TopologyConfig, derive
from core.topology.inputs import HostRoleRules
from simulator.generator import GroundTruth, generate
from simulator.spec import ClusterSpec
from tests.unit.test_topology_support import (
    DEFECTS,
    SPECS,
    assert_findings_match_defects,
    assert_model_matches_truth,
    assert_roles_match_truth,
    observe,
    spec_of,
    truth_with,
)


@pytest.mark.parametrize("spec", SPECS)
def test_clean_spec_derives_the_truth_with_no_findings(spec: str, tmp_path: Path) -> None:
    truth = truth_with(spec)
    model = derive(observe(truth, tmp_path))
    assert_model_matches_truth(model, truth)
    assert [f.message for f in model.findings] == []


@pytest.mark.parametrize("spec", SPECS)
def test_defects_each_appear_as_exactly_one_finding(spec: str, tmp_path: Path) -> None:
    truth = truth_with(spec, **DEFECTS)
    assert len(truth.defects) == 11
    model = derive(observe(truth, tmp_path))
    assert_model_matches_truth(model, truth)
    assert_findings_match_defects(model, truth)


@pytest.mark.parametrize("spec", ["h100-1su", "h100-4su"])
def test_with_lldp_ethernet_tiers_hosts_and_duplicate_sysnames(spec: str, tmp_path: Path) -> None:
    """Ethernet joins through the LLDP adapter: every Ethernet switch gets its true tier, every
    host is seen on both fabrics, and a shared sysName is one duplicate_name finding per pair."""
    truth = truth_with(spec, duplicate_sysnames=1, **DEFECTS)
    model = derive(observe(truth, tmp_path, lldp=True))
    assert_model_matches_truth(model, truth, eth=True)
    assert_findings_match_defects(model, truth)
    eth_links = [lk for lk in model.links if lk.kind == "eth"]
    assert len(eth_links) == sum(1 for lk in truth.links if lk.kind.value == "eth")
    assert all(lk.both_sides for lk in eth_links)
    host_link = next(lk for lk in eth_links if lk.b.device_id.startswith("dgx") or lk.a.device_id.startswith("dgx"))
    (end,) = host_link.resolution["ends"].values()
    assert (end["device_method"], end["port_method"]) == ("host_name", "port_description")
    switch_link = next(lk for lk in eth_links if ":" in lk.a.device_id and ":" in lk.b.device_id)
    assert {e["device_method"] for e in switch_link.resolution["ends"].values()} == {"chassis_mac"}
    assert {e["port_method"] for e in switch_link.resolution["ends"].values()} == {"if_name"}


def test_unnamed_hca_of_a_host_missing_from_dcim_is_attributed_by_topology(tmp_path: Path) -> None:
    """Without its DCIM row the HCA's GUID is unknown; its leaf's rail group has exactly one host
    with no HCA on that leaf, so the HCA is that host's (one finding for each of the two defects)."""
    truth = truth_with("h100-1su", unnamed_hcas=["dgx017:mlx5_3"], dcim_missing_hosts=["dgx017"])
    model = derive(observe(truth, tmp_path))
    assert_model_matches_truth(model, truth)
    assert_findings_match_defects(model, truth)
    (finding,) = [f for f in model.findings if f.kind == "unnamed_hca"]
    assert finding.evidence["attribution"] == "topology"
    hca = next(c for c in model.host("dgx017").hcas if c.guid == finding.devices[0])
    assert (hca.attribution, hca.rail) == ("topology", "rail3")


def test_without_dcim_unnamed_hcas_are_still_attributed_and_nothing_is_missing(tmp_path: Path) -> None:
    truth = truth_with("gb200-nvl72", unnamed_hcas=3)
    model = derive(observe(truth, tmp_path, dcim=False))
    assert_model_matches_truth(model, truth)
    assert sorted(f.evidence["attribution"] for f in model.findings) == ["topology"] * 3
    assert_findings_match_defects(model, truth)


# --- hosts that are on the fabric but are not compute hosts (issue 19) --------------------------------

H100_SERVICE_HOSTS: list[dict[str, Any]] = [
    # The case: a UFM server whose name no rule reads as UFM, two HCAs on rail leaves
    # (mlx5_0/1 on the rail-4/5 leaves: off their rails, as on the real fabric).
    {"name": "fm01", "role": "ufm_server", "rails": [4, 5]},
    # Named like the compute hosts: only its HCA count and rails give it away.
    {"name": "dgx033", "role": "management", "rails": [2, 3]},
    # Caught by the ingest name rules, as before.
    {"name": "lustre-oss1", "role": "storage", "rails": [6]},
    {"name": "login01", "role": "login", "rails": [7]},
]


def h100_with_service_hosts(**defects: Any) -> GroundTruth:
    """h100-1su with 28 uplinks per leaf (7 to each spine), which frees 4 ports on every leaf for
    the service hosts above, as the RA frees a DGX's ports for its UFM pair."""
    data = spec_of("h100-1su").model_dump()
    data["compute_fabric"]["leaf"]["uplinks"] = 28
    data["service_hosts"] = H100_SERVICE_HOSTS
    data["defects"] = defects
    return generate(ClusterSpec.model_validate(data))


@pytest.mark.parametrize("dcim", [True, False], ids=["dcim", "fabric-only"])
def test_service_hosts_on_rail_leaves_get_their_role_and_no_compute_finding(dcim: bool, tmp_path: Path) -> None:
    """Issue 19: without the fleet pattern, fm01 and dgx033 were compute hosts with two
    miscabled_port errors each, missing rails, and a rail group over its design size."""
    truth = h100_with_service_hosts()
    obs = observe(truth, tmp_path, dcim=dcim)
    model = derive(obs)
    assert_model_matches_truth(model, truth)
    assert [f.message for f in model.findings] == []
    assert {d.hosts for d in model.domains if d.level == "block"} == {32}
    fm01 = model.host("fm01")
    if dcim:
        assert fm01.role_reason == "DCIM (dcim) lists its role as 'ufm_server'"
    else:
        assert fm01.role_reason == (
            "2 HCAs where the fleet's compute hosts have 8; name 'fm01' does not follow the compute pattern "
            "'dgx###'; 2 of its 2 cabled HCAs are not on their rail's leaf; the name suggests ufm_server"
        )
        assert model.host("dgx033").role_reason == (
            "2 HCAs where the fleet's compute hosts have 8; 2 of its 2 cabled HCAs are not on their rail's "
            "leaf; no name hint: management"
        )
    leaves = {s.id: s.name for s in model.switches}
    assert sorted((leaves[c.leaf or ""], c.leaf_port) for c in fm01.hcas) == [
        ("ib-leaf-su01-r4", "61"), ("ib-leaf-su01-r5", "61"),
    ]  # fmt: skip
    # The control: the same observations with the fleet pattern off reproduce the issue.
    off = derive(obs, TopologyConfig(host_roles=HostRoleRules(enabled=False)))
    miscabled = [f for f in off.findings if f.kind == "miscabled_port"]
    if dcim:  # the inventory's roles alone set them apart
        assert miscabled == [] and off.host("fm01").role == "ufm_server"
    else:
        assert sorted(f.message.split()[0] for f in miscabled) == ["dgx033", "dgx033", "fm01", "fm01"]
        assert off.host("fm01").role == "compute"


def test_broken_compute_hosts_stay_compute_next_to_service_hosts(tmp_path: Path) -> None:
    """A compute host with one unplugged HCA, and one with half of them gone, are still compute
    hosts and each is one finding; the service hosts add no finding (no DCIM: the pattern decides)."""
    missing = ["dgx005:mlx5_3", *(f"dgx006:mlx5_{r}" for r in range(4))]
    swap = [{"host": "dgx020", "rail": 2, "to_rail": 5, "with_host": "dgx021"}]
    truth = h100_with_service_hosts(missing_links=missing, miscabled_ports=swap, unnamed_hcas=["dgx010:mlx5_6"])
    model = derive(observe(truth, tmp_path, dcim=False))
    assert_model_matches_truth(model, truth)
    assert_findings_match_defects(model, truth)
    gone = {f.devices[0]: f.evidence["ib"] for f in model.findings if f.kind == "host_missing_from_fabric"}
    assert {h: (v["found"], v["expected_hcas"]) for h, v in gone.items()} == {"dgx005": (7, 8), "dgx006": (4, 8)}
    assert gone["dgx006"]["missing_rails"] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]


@pytest.mark.parametrize("spec", SPECS)
def test_every_shipped_spec_derives_true_roles_with_and_without_dcim(spec: str, tmp_path: Path) -> None:
    truth = truth_with(spec)
    for dcim in (True, False):
        model = derive(observe(truth, tmp_path, dcim=dcim))
        assert_roles_match_truth(model, truth)
        assert [f.message for f in model.findings] == []
    assert {h.id for h in truth.service_hosts()} == ({"fabricmgr01", "fabricmgr02"} if spec == "gb200-nvl72" else set())
