"""Done-when: on a shipped spec, LLDP collected over SSH from the twin and over SNMP yields the same
resolved adjacencies; fault switches end in their status; the asset lands rows, quarantine and
status beside SNMP's in the same table without touching SNMP's rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from snmp import support
from snmp.support import (
    EthObservations,
    SnmpSite,
    cli_lldp,
    derived_links,
    resolve_production,
    split_by_truth,
    truth_eth_links,
)

from assets.lldp_cli.assets import collect_and_land, land, targets_from
from connectors.ssh import CliCollection, SshOptions, collect
from core.models import LinkKind
from core.quality import CollectionStatus
from settings import parse_settings
from simulator.snmp.twin import stop
from simulator.ssh import start_twin
from simulator.twin import TwinRun

pytestmark = pytest.mark.warehouse_only  # only Postgres of the site (tests/conftest.py)

snmp_site = support.snmp_site


@pytest.fixture(scope="module")
def ssh_site(snmp_site: Callable[..., SnmpSite], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    site = snmp_site("h100-1su")
    run = start_twin(site.truth, tmp_path_factory.mktemp("ssh-h100-1su"))
    try:
        yield site, run
    finally:
        stop(run.pids[0])


def _switches(run: TwinRun) -> Any:
    text = yaml.safe_dump({"version": 1, "sources": run.sources}, sort_keys=False)
    return parse_settings(text).sources.switches


def _collect(run: TwinRun) -> dict[str, CliCollection]:
    targets, failed = targets_from(_switches(run), timeout_s=3.0)
    assert failed == []
    return {c.device: c for c in collect(targets, SshOptions(concurrency=16))}


@pytest.fixture(scope="module")
def ssh_collected(ssh_site: Any) -> dict[str, CliCollection]:
    return _collect(ssh_site[1])


@pytest.mark.integration
def test_ssh_and_snmp_yield_the_same_resolved_adjacencies(ssh_site: Any, ssh_collected: Any) -> None:
    """Both collectors' rows, read back as the topology asset reads them, through the production
    resolution. The CLI does not report the polled switch's own chassis id, so the switches'
    identities come from the SNMP poll of the same switches (raw.snmp_systems and
    raw.snmp_interfaces), as in the warehouse where both collectors land."""
    site, run = ssh_site
    truth = site.truth
    for name, c in ssh_collected.items():
        assert str(c.status) == run.extra["faults"].get(name, "ok"), (name, c.status, c.detail)
    snmp = site.observations()
    over_snmp = resolve_production(truth, snmp)
    over_ssh = resolve_production(truth, EthObservations(cli_lldp(ssh_collected), snmp.systems, snmp.interfaces))
    assert over_ssh.unresolved == [] and over_ssh.findings == []
    ssh_links, snmp_links = derived_links(over_ssh), derived_links(over_snmp)
    inside, outside = split_by_truth(truth, ssh_links)
    assert inside == truth_eth_links(truth) and outside == set()  # the SSH fault switches land no row
    assert len(inside) == 40

    # the same links, each seen by the same switches, each remote device identified the same way
    # (the port may be named by another field: Junos' CLI gives no advertised port name)
    def devices(entry: dict[str, Any]) -> dict[str, tuple[str, str]]:
        return {end: (r["device_method"], r["seen_by"]) for end, r in entry["resolution"].items()}

    for link in inside:
        assert ssh_links[link]["sources"] == snmp_links[link]["sources"], link
        assert ssh_links[link]["both_sides"] and snmp_links[link]["both_sides"], link
        assert devices(ssh_links[link]) == devices(snmp_links[link]), link
    platforms = {c.platform for c in ssh_collected.values() if c.device not in run.extra["faults"]}
    assert platforms == {"arista_eos", "cisco_nxos", "juniper_junos", "mellanox_mlnxos", "sonic", "cumulus"}
    assert sum(len(c.neighbors) for c in ssh_collected.values()) == 40 + 8  # switch-switch links: both ends


@pytest.mark.integration
def test_ssh_alone_keys_switches_by_their_configured_name(ssh_site: Any, ssh_collected: Any) -> None:
    """Without an SNMP poll the production resolution has only the CLI rows: the polled switch's
    chassis MAC is not in them, so every switch is keyed ``switch:<configured name>`` (identity
    kind ``configured_name``) and remote switches are matched by the sysName they advertise. The
    cabling is still the truth's, port for port."""
    site, _ = ssh_site
    truth = site.truth
    result = resolve_production(truth, EthObservations(cli_lldp(ssh_collected), [], []))
    assert result.unresolved == [] and result.findings == []
    eth = truth.switches(fabric=LinkKind.ETH)
    by_name = {f"switch:{sw.attributes['inventory_name']}": sw.id for sw in eth}
    assert set(result.switches) == set(by_name)  # the fault switches landed no row
    renamed = {frozenset((by_name.get(dev, dev), port) for dev, port in link) for link in derived_links(result)}
    assert renamed == truth_eth_links(truth)


@pytest.mark.integration
def test_fault_switches(ssh_collected: dict[str, CliCollection]) -> None:
    auth = ssh_collected["eth-fault-ssh-auth"]
    assert (auth.status, auth.detail) == (CollectionStatus.AUTH_FAILURE, "authentication failed")
    hang = ssh_collected["eth-fault-ssh-hang"]
    assert hang.status is CollectionStatus.TIMEOUT
    assert hang.detail == "no complete answer to the LLDP command within the read timeout"
    garbage = ssh_collected["eth-fault-ssh-garbage"]
    assert garbage.status is CollectionStatus.INVALID
    (q,) = garbage.quarantined
    assert q.reason.startswith("binary output: ")
    assert q.context["command"] == "show lldp neighbors detail | json"
    assert q.context["platform"] == "arista_eos"


@pytest.mark.integration
def test_asset_lands_beside_snmp(ssh_site: Any, warehouse: Any, run_id: str) -> None:  # type: ignore[no-untyped-def]
    site, run = ssh_site
    started = datetime.now(UTC)
    with warehouse.connect() as conn:
        # an SNMP row of the same switch in the same run must survive the CLI landing
        snmp = site.collected()["eth-leaf-01"]
        land(
            conn,
            run_id=run_id,
            collector="snmp",
            device="eth-leaf-01",
            platform="arista_eos",
            neighbors=snmp.neighbors,
            quarantined=[],
            status=CollectionStatus.OK,
            started_at=started,
            detail=None,
        )
        counts = collect_and_land(conn, run_id, _switches(run), SshOptions(16), timeout_s=3.0)
        assert counts["statuses"] == {"ok": 6, "auth_failure": 1, "timeout": 1, "invalid": 1}
        assert counts["neighbors"] == 48
        assert counts["quarantined"] == 1
        by_collector = dict(
            conn.execute(
                "SELECT collector, count(*) FROM raw.lldp_neighbor_observations WHERE run_id = %s GROUP BY 1", (run_id,)
            ).fetchall()
        )
        assert by_collector == {"cli": 48, "snmp": len(snmp.neighbors)}
        status = {
            r[0]: r[1]
            for r in conn.execute(
                "SELECT device, status FROM ops.collection_status WHERE run_id = %s AND source = 'cli'", (run_id,)
            )
        }
        assert status["eth-fault-ssh-garbage"] == "invalid" and status["eth-leaf-04"] == "ok"
        (reason, context) = conn.execute(
            "SELECT reason, context FROM ops.quarantine WHERE run_id = %s AND source = 'cli'", (run_id,)
        ).fetchone()
        assert reason.startswith("binary output: ")
        assert context["command"] == "show lldp neighbors detail | json" and context["platform"] == "arista_eos"
        # a retry of the same run replaces, never duplicates
        collect_and_land(conn, run_id, _switches(run), SshOptions(16), timeout_s=3.0)
        (n,) = conn.execute(
            "SELECT count(*) FROM raw.lldp_neighbor_observations WHERE run_id = %s AND collector = 'cli'", (run_id,)
        ).fetchone()
        assert n == 48
    assert Path(run.sources["switches"][0]["ssh"]["password"]["file"]).exists()
    assert len(site.truth.switches(fabric=LinkKind.ETH)) == 6


@pytest.mark.integration
def test_assets_materialize(ssh_site: Any, tmp_path: Path, warehouse: Any) -> None:  # type: ignore[no-untyped-def]
    import shutil

    import dagster as dg

    from assets.lldp_cli import lldp_cli_observations, lldpctl_host_observations
    from pipelines.resources import SiteConfigResource, WarehouseResource

    _, run = ssh_site
    sources = {"collection": {"concurrency": 16, "timeout_s": 3}, **run.sources}
    config = tmp_path / "gpufabric.yaml"
    config.write_text(yaml.safe_dump({"version": 1, "sources": sources}, sort_keys=False))
    drop = tmp_path / "lldpctl"
    drop.mkdir()
    shutil.copy(Path(__file__).resolve().parents[3] / "shared/fixtures/topograph/lldp.log", drop / "spcx-host.json")
    (drop / "broken-host.json").write_bytes(b"\x00\xffnot json")
    result = dg.materialize(
        [lldp_cli_observations, lldpctl_host_observations],
        resources={"warehouse": WarehouseResource(), "site": SiteConfigResource(path=str(config))},
        run_config={"ops": {"raw__lldpctl_host_observations": {"config": {"drop_dir": str(drop)}}}},
    )
    assert result.success
    cli = result.asset_materializations_for_node("raw__lldp_cli_observations")[0].metadata
    assert cli["switches_by_status"].value == {"ok": 6, "auth_failure": 1, "timeout": 1, "invalid": 1}
    assert cli["neighbors_landed"].value == 48
    hosts = result.asset_materializations_for_node("raw__lldpctl_host_observations")[0].metadata
    assert hosts["hosts_by_status"].value == {"ok": 1, "invalid": 1}
    assert hosts["neighbors_landed"].value == 32
    assert hosts["interfaces_dropped"].value == 17
    with warehouse.connect() as conn:
        (reason,) = conn.execute(
            "SELECT reason FROM ops.quarantine WHERE run_id = %s AND source = 'lldpctl'", (result.run_id,)
        ).fetchone()
    assert reason == "binary output: not UTF-8 at byte 1"
