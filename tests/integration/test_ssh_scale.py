"""Done-when: 200 simulated switches collected over SSH in one run, with progress shown, and the
rows resolved by the production code to the fabric's exact cabling. The wall time printed here is
the one in the README (run with ``-s`` to see the progress lines); it is reported, not asserted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from snmp.support import EthObservations, cli_lldp, derived_links, resolve_production, truth_eth_links

from assets.lldp_cli.assets import targets_from
from connectors.ssh import CliCollection, SshOptions, collect
from core.models import LinkKind
from settings import parse_settings
from simulator.generator import GroundTruth, generate
from simulator.snmp.twin import stop
from simulator.spec import load_spec, parse_spec
from simulator.specs import resolve_spec_path
from simulator.ssh import SshTwinOptions, start_twin

pytestmark = pytest.mark.standalone  # starts what it needs itself (tests/conftest.py: the scheduler)

CONCURRENCY = 64


def two_hundred_switches() -> GroundTruth:
    """b200-16su with its Ethernet fabric widened to 128 leaves + 72 spines (all six platforms)."""
    spec = load_spec(resolve_spec_path("b200-16su")).model_dump(mode="json")
    mf = spec["management_fabric"]
    mf["links_per_spine"] = 1
    mf["leaf"].update(count=128, radix=96)
    mf["spine"] = {
        "platforms": ["arista_eos", "juniper_junos", "mellanox_mlnxos", "cumulus"],
        "radix": 256,
        "count": 72,
    }
    return generate(parse_spec(spec))


@pytest.mark.integration
def test_two_hundred_switches_in_one_run(tmp_path: Path) -> None:
    truth = two_hundred_switches()
    switches = truth.switches(fabric=LinkKind.ETH)
    assert len(switches) == 200
    run = start_twin(truth, tmp_path, SshTwinOptions(faults=False))
    try:
        text = yaml.safe_dump({"version": 1, "sources": run.sources}, sort_keys=False)
        targets, failed = targets_from(parse_settings(text).sources.switches, timeout_s=30.0)
        assert failed == [] and len(targets) == 200
        done: list[CliCollection] = []
        started = time.monotonic()

        def progress(c: CliCollection) -> None:
            done.append(c)
            if len(done) % 25 == 0 or len(done) == len(targets):
                elapsed = time.monotonic() - started
                print(f"[{len(done):3d}/{len(targets)}] {elapsed:6.2f}s  last: {c.device} {c.status}")

        results = list(collect(targets, SshOptions(concurrency=CONCURRENCY), progress))
        wall = time.monotonic() - started
    finally:
        stop(run.pids[0])
    assert {str(c.status) for c in results} == {"ok"}, [(c.device, c.detail) for c in results if c.detail]
    expected = sum(1 for link in truth.links if link.kind is LinkKind.ETH) + 128 * 72  # leaf-spine seen twice
    assert sum(len(c.neighbors) for c in results) == expected
    print(
        f"200 switches, {expected} neighbours, concurrency {CONCURRENCY}: {wall:.1f}s wall "
        f"({200 / wall:.1f} switches/s)"
    )
    # The rows the CLI asset lands, through the production resolution: the whole fabric's cabling.
    # Only the CLI collected here, so switches are keyed by their configured name (the CLI output
    # has no local chassis id; test_ssh_twin.py covers the SNMP-identified case).
    result = resolve_production(truth, EthObservations(cli_lldp({c.device: c for c in results}), [], []))
    assert result.unresolved == [] and result.findings == []
    by_name = {f"switch:{sw.attributes['inventory_name']}": sw.id for sw in switches}
    assert set(result.switches) == set(by_name)
    renamed = {frozenset((by_name.get(dev, dev), port) for dev, port in link) for link in derived_links(result)}
    assert renamed == truth_eth_links(truth)
    assert all(entry["both_sides"] for entry in result.links.values())
