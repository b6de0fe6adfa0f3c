"""The real ibnetdiscover (infiniband-diags) against the real fabric simulator ibsim (ibsim-utils).

ibsim is loaded with a topology generated from HDR variants of the shipped specs (Debian 12's
ibsim stops at HDR); the parser must reproduce the ground truth's links, speeds and widths
exactly on what the real tool prints. The 4-SU spec keeps its Quantum-2 radix (32 host ports +
32 uplinks do not fit a 40-port Quantum QM8700) and runs at HDR, which the spec allows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from connectors.ibnetdiscover import discover
from core.models import LinkKind
from simulator.generator import GroundTruth, generate
from simulator.ib.ibsim import start_ibsim
from simulator.spec import ClusterSpec
from simulator.specs import resolve_spec_path

pytestmark = pytest.mark.standalone  # starts what it needs itself (tests/conftest.py: the scheduler)


def hdr_truth(name: str) -> GroundTruth:
    data = yaml.safe_load(resolve_spec_path(name).read_text())
    data["compute_fabric"]["speed"] = "hdr"
    return generate(ClusterSpec.model_validate(data))


def truth_links(truth: GroundTruth) -> set[tuple[str, str, str, str, float | None, str | None]]:
    return {
        (lk.a.device_id, lk.a.port, lk.b.device_id, lk.b.port, lk.speed_gbps, lk.width)
        for lk in truth.links
        if lk.kind is LinkKind.IB
    }


def seen_links(fabric) -> set[tuple[str, str, str, str, float | None, str | None]]:  # type: ignore[no-untyped-def]
    out = set()
    for lk in fabric.compute_links():
        link = lk.to_link()
        out.add((link.a.device_id, link.a.port, link.b.device_id, link.b.port, link.speed_gbps, link.width))
    return out


def test_real_ibnetdiscover_on_ibsim_reproduces_hdr_1su_and_4su(tmp_path: Path) -> None:
    for name in ("h100-1su", "h100-4su"):
        truth = hdr_truth(name)
        with start_ibsim(truth, tmp_path / name) as sim:
            fabric = discover(env=sim.env, timeout_s=60, source=name)
        assert fabric.quarantined == [], fabric.quarantined[:3]
        assert fabric.problem is None
        assert seen_links(fabric) == truth_links(truth)
        assert {(lk.width, lk.speed, lk.speed_gbps) for lk in fabric.links} == {("4x", "HDR", 200.0)}
        assert all(lk.both_sides for lk in fabric.links)
        hcas = truth.hcas()
        assert {n.guid for n in fabric.nodes} == {d.id for d in truth.switches(fabric="ib")} | {h.id for h in hcas}
        hosts = {c.hostname for c in fabric.classes.values() if c.hostname}
        assert hosts == {h.name for h in truth.hosts()}
        # lids come from the topology file and come back through the real MAD queries
        switch_lids = sorted(n.lid for n in fabric.nodes if n.node_type == "switch")
        assert switch_lids == list(range(1, len(truth.switches(fabric="ib")) + 1))


def test_link_taken_down_on_the_ibsim_console_is_missing_from_the_next_discovery(tmp_path: Path) -> None:
    truth = hdr_truth("h100-1su")
    uplink = next(
        lk
        for lk in truth.links
        if lk.kind is LinkKind.IB and truth.device(lk.a.device_id).kind == "switch"
        and truth.device(lk.b.device_id).kind == "switch"
    )  # fmt: skip
    with start_ibsim(truth, tmp_path / "sim") as sim:
        before = seen_links(discover(env=sim.env, timeout_s=60))
        sim.console(f'Unlink "S-{uplink.a.device_id.removeprefix("0x")}"[{uplink.a.port}]')
        after_fabric = discover(env=sim.env, timeout_s=60)
        after = seen_links(after_fabric)
    assert before == truth_links(truth)
    gone = before - after
    assert gone == {(uplink.a.device_id, uplink.a.port, uplink.b.device_id, uplink.b.port, 200.0, "4x")}
    assert after <= before and after_fabric.quarantined == []
