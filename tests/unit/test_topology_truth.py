"""The derived model equals the ground truth on every shipped spec, with and without defects,
and every injected defect appears as exactly one finding (no finding without a defect)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.topology import derive
from tests.unit.test_topology_support import (
    DEFECTS,
    SPECS,
    assert_findings_match_defects,
    assert_model_matches_truth,
    observe,
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
