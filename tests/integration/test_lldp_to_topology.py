"""LLDP from the twins, landed by the real assets, derived by the real topology asset.

SNMP (the snmpsim twin) and SSH/CLI (the SSH twin) of one shipped spec are collected by their own
Dagster assets into ``raw.lldp_neighbor_observations`` (+ ``raw.snmp_systems`` and
``raw.snmp_interfaces``) of a fresh database; the InfiniBand, DCIM and NVLink observations of the
same cluster land through their own loaders; then ``topology/fabric_model`` reads the warehouse
(``services.topology.store.load_observations``), derives and writes a version. The Ethernet links of
that version in ``topology.links`` must be the simulator's Ethernet cables exactly, every switch
(InfiniBand and Ethernet) must carry its true tier, every host its true domains, and nothing may
be found: the cluster has no defect.

The SNMP twin runs without its fault switches here: the partly broken one still answers two
readable rows naming hosts that are not in the truth (test_snmp_twin.py pins what they resolve
to). The SSH twin keeps its fault switches: none of them lands a row.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import pytest
import yaml
from snmp.support import truth_eth_links

from assets.dcim.assets import DCIM_COLUMNS, dcim_rows
from assets.infiniband.assets import NVLINK_COLUMNS, nvlink_rows
from assets.lldp import lldp_neighbor_observations
from assets.lldp.resources import SnmpCollectorResource
from assets.lldp_cli import lldp_cli_observations
from assets.topology import fabric_model
from connectors.dcim.parser import parse_file as parse_dcim
from connectors.ibnetdiscover import parse_file
from connectors.nvlink import from_node_labels
from connectors.warehouse import land_collection, open_warehouse
from core.models import LinkKind
from core.quality import CollectionStatus
from core.topology.model import TopologyModel, model_from_json
from pipelines.resources import SiteConfigResource, WarehouseResource
from services.infiniband import land_fabric
from services.topology import load_model
from simulator.dcim import write_dcim_export
from simulator.generator import GroundTruth, generate
from simulator.ib.ibnetdiscover import write_ibnetdiscover
from simulator.kube.populate import node_objects
from simulator.snmp import SnmpTwinOptions, stop
from simulator.snmp import start_twin as start_snmp
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from simulator.ssh import start_twin as start_ssh
from simulator.twin import TwinRun
from tests.unit.test_topology_support import assert_model_matches_truth

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)
SPEC = "h100-1su"

Link = frozenset[tuple[str, str]]


@pytest.fixture
def twins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GroundTruth, TwinRun, TwinRun]]:
    """(truth, SNMP twin without fault switches, SSH twin with them) of one shipped spec."""
    truth = generate(load_spec(resolve_spec_path(SPEC)))
    snmp = start_snmp(truth, tmp_path_factory.mktemp("snmp-topology"), SnmpTwinOptions(faults=False))
    try:
        ssh = start_ssh(truth, tmp_path_factory.mktemp("ssh-topology"))
        try:
            yield truth, snmp, ssh
        finally:
            stop(ssh.pids[0])
    finally:
        stop(snmp.pids[0])


def site_file(path: Path, run: TwinRun) -> Path:
    sources = {"collection": {"concurrency": 16, "timeout_s": 3}, **run.sources}
    path.write_text(yaml.safe_dump({"version": 1, "sources": sources}, sort_keys=False))
    return path


def land_other_sources(url: str, truth: GroundTruth, tmp: Path) -> None:
    """InfiniBand (saved ibnetdiscover), DCIM export and NVLink labels, through their loaders."""
    at = datetime.now(UTC)
    run_id = "other-sources"
    fabric = parse_file(write_ibnetdiscover(truth, tmp / "fabric.out"), "saved")
    dcim = parse_dcim(write_dcim_export(truth, tmp / "dcim.csv"), device="dcim")
    nvl = from_node_labels({n["metadata"]["name"]: n["metadata"]["labels"] for n in node_objects(truth)}, "k8s")
    wh = open_warehouse(url)
    try:
        with wh.connect() as conn:
            land_fabric(conn, run_id=run_id, kind="ibnetdiscover", device="saved", fabric=fabric, started_at=at)
            land_collection(
                conn, run_id=run_id, source="dcim", device="dcim", table="raw.dcim_inventory", columns=DCIM_COLUMNS,
                rows=dcim_rows(run_id, "dcim", at, dcim.records), quarantined=[], status=CollectionStatus.OK,
                started_at=at,
            )  # fmt: skip
            land_collection(
                conn, run_id=run_id, source="nvlink", device="k8s", table="raw.nvlink_domains",
                columns=NVLINK_COLUMNS, rows=nvlink_rows(run_id, "k8s", at, nvl.records), quarantined=[],
                status=CollectionStatus.OK, started_at=at,
            )  # fmt: skip
    finally:
        wh.dispose()


def derive(url: str) -> tuple[int, dict[Link, dict[str, Any]], TopologyModel, dict[str, str]]:
    """Materialize the topology asset; (version, its Ethernet links as stored in topology.links,
    the stored model, {LLDP source: the run whose rows it was derived from})."""
    result = dg.materialize([fabric_model], resources={"warehouse": WarehouseResource(url=url)})
    assert result.success
    version = result.asset_materializations_for_node("topology__fabric_model")[0].metadata["version"].value
    assert isinstance(version, int)
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT a_device, a_port, b_device, b_port, both_sides, evidence FROM topology.links "
            "WHERE version = %s AND kind = 'eth'",
            (version,),
        ).fetchall()
        model = load_model(conn, version)
        stored = conn.execute("SELECT inputs FROM topology.versions WHERE version = %s", (version,)).fetchone()
    assert model is not None and stored is not None
    (inputs,) = stored
    links = {frozenset({(a, ap), (b, bp)}): {"both_sides": both, "evidence": ev} for a, ap, b, bp, both, ev in rows}
    assert len(links) == len(rows)  # no cable stored twice
    return version, links, model_from_json(model), dict(inputs["runs"]["lldp"])


def assert_is_the_truth(truth: GroundTruth, links: dict[Link, dict[str, Any]], model: TopologyModel) -> None:
    assert set(links) == truth_eth_links(truth)  # none missing, none invented, every port the truth's
    assert all(entry["both_sides"] for entry in links.values())
    eth_names = {sw.id: str(sw.attributes["inventory_name"]) for sw in truth.switches(fabric=LinkKind.ETH)}
    for link, entry in links.items():  # evidence: the switches that reported the cable
        assert set(entry["evidence"]["sources"]) == {f"lldp:{eth_names[d]}" for d, _ in link if d in eth_names}, link
    # the whole model, Ethernet included: every tier (IB and Ethernet) and every host domain
    assert_model_matches_truth(model, truth, eth=True)
    assert [f"{f.kind}: {f.message}" for f in model.findings] == []
    assert {(s.id, s.identity_kind) for s in model.switches if s.fabric == "eth"} == {
        (sid, "chassis_mac") for sid in eth_names
    }


def test_lldp_from_snmp_and_ssh_twins_derives_the_true_ethernet_adjacency(
    twins: tuple[GroundTruth, TwinRun, TwinRun], fresh_database_url: str, tmp_path: Path
) -> None:
    truth, snmp, ssh = twins
    url = fresh_database_url
    open_warehouse(url).dispose()  # migrate the fresh database
    land_other_sources(url, truth, tmp_path)
    eth_names = [str(sw.attributes["inventory_name"]) for sw in truth.switches(fabric=LinkKind.ETH)]

    # 1. SNMP: the LLDP asset polls the twin and lands LLDP rows, systems and interfaces.
    polled = dg.materialize(
        [lldp_neighbor_observations],
        resources={
            "warehouse": WarehouseResource(url=url),
            "site": SiteConfigResource(path=str(site_file(tmp_path / "snmp.yaml", snmp))),
            "snmp_collector": SnmpCollectorResource(concurrency=16),
        },
    )
    assert polled.success
    version, links, model, runs = derive(url)
    assert version == 1 and runs == dict.fromkeys(eth_names, polled.run_id)
    assert_is_the_truth(truth, links, model)

    # 2. SSH/CLI: the CLI asset collects the same switches over SSH. Its rows are now each
    # switch's latest LLDP collection; the switches' identities still come from the SNMP poll's
    # raw.snmp_systems (the CLI output has no local chassis id).
    collected = dg.materialize(
        [lldp_cli_observations],
        resources={
            "warehouse": WarehouseResource(url=url),
            "site": SiteConfigResource(path=str(site_file(tmp_path / "ssh.yaml", ssh))),
        },
    )
    assert collected.success
    meta = collected.asset_materializations_for_node("raw__lldp_cli_observations")[0].metadata
    assert meta["switches_by_status"].value == {"ok": 6, "auth_failure": 1, "timeout": 1, "invalid": 1}
    version, links, model, runs = derive(url)
    assert runs == dict.fromkeys(eth_names, collected.run_id)  # derived from the CLI rows alone
    assert_is_the_truth(truth, links, model)
