"""Topology end to end on a real Postgres (a fresh database per test, so other areas' test rows
and versions never mix in): the CLI on a production-shaped ibnetdiscover file, the asset with its
checks, versions written only on change, and `topology diff`."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from typer.testing import CliRunner

from assets.dcim.assets import DCIM_COLUMNS, dcim_rows
from assets.infiniband.assets import NVLINK_COLUMNS, nvlink_rows
from assets.topology import fabric_model
from connectors.dcim.parser import parse_file as parse_dcim
from connectors.ibnetdiscover import parse_file
from connectors.nvlink import from_node_labels
from connectors.warehouse import land_collection, open_warehouse
from core.models import DeviceKind
from core.quality import CollectionStatus
from pipelines.cli_ib import app as ingest_app
from pipelines.cli_topology import app as topology_app
from pipelines.cli_topology import slurm_app
from pipelines.resources import WarehouseResource
from services.infiniband import land_fabric
from simulator.dcim import write_dcim_export
from simulator.generator import GroundTruth
from simulator.ib.ibnetdiscover import write_ibnetdiscover
from simulator.kube.populate import node_objects
from tests.unit.test_topology_support import truth_with

pytestmark = pytest.mark.warehouse_only  # only Postgres of the site (tests/conftest.py)

runner = CliRunner()


def production_like(truth: GroundTruth) -> GroundTruth:
    """What real fabrics show: a host still called ``localhost`` (dgx005) and a UFM appliance
    (dgx032's ports described ``ufm01 mlx5_N``); SHARP nodes come with Quantum-2 already."""
    devices = []
    for d in truth.devices:
        if d.kind is DeviceKind.HCA and d.parent_id in ("dgx005", "dgx032"):
            who = "localhost" if d.parent_id == "dgx005" else "ufm01"
            desc = f"{who} {d.attributes['hca']}"
            d = d.model_copy(update={"attributes": {**d.attributes, "node_description": desc}})
        devices.append(d)
    return dataclasses.replace(truth, devices=devices)


@pytest.fixture
def fresh_env(fresh_database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("GPUFABRIC_DATABASE_URL", fresh_database_url)
    return fresh_database_url


def test_ingest_then_show_json_on_a_production_shaped_file(tmp_path: Path, fresh_env: str) -> None:
    truth = production_like(truth_with("h100-1su", unnamed_hcas=2))
    saved = write_ibnetdiscover(truth, tmp_path / "fabric.out")
    ingested = runner.invoke(ingest_app, ["ibnetdiscover", str(saved), "--name", "prod"])
    assert ingested.exit_code == 0, ingested.output
    shown = runner.invoke(topology_app, ["show", "--json"])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert doc["version"] == 1
    assert Counter(s["tier"] for s in doc["switches"]) == {"leaf": 8, "spine": 4}
    roles = Counter(h["role"] for h in doc["hosts"])
    assert roles == {"compute": 30, "sharp_aggregation_node": 12, "default_hostname": 8, "ufm_server": 1,
                     "unnamed_hca": 2}  # fmt: skip
    compute = [h for h in doc["hosts"] if h["role"] == "compute"]
    assert all(all(h["domains"].values()) for h in compute)
    assert len({h["domains"]["block"] for h in compute}) == 1
    ufm = next(h for h in doc["hosts"] if h["role"] == "ufm_server")
    assert ufm["name"] == "ufm01" and "ufm" in ufm["role_reason"]
    kinds = Counter(f["kind"] for f in doc["findings"])
    # The localhost HCAs sit on every leaf, so the two nameless HCAs cannot be told apart from
    # them by topology: all ten stay unattributed, and the two hosts behind the unnamed HCAs are
    # each missing one rail.
    assert kinds == {"default_hostname": 8, "unnamed_hca": 2, "host_missing_from_fabric": 2}
    assert {f["severity"] for f in doc["findings"]} == {"warning"}
    # Nothing changed: showing again writes no new version.
    again = runner.invoke(topology_app, ["show", "--json"])
    assert json.loads(again.stdout)["version"] == 1
    tree = runner.invoke(slurm_app, ["render", "--plugin", "tree"])
    assert tree.exit_code == 0, tree.output
    assert tree.stdout.splitlines()[-1].startswith("SwitchName=switch.1.1 Nodes=dgx[001-004,006-")


def test_show_without_observations_is_one_clear_error(fresh_env: str) -> None:
    shown = runner.invoke(topology_app, ["show"])
    assert shown.exit_code == 1
    assert "nothing observed yet" in shown.output
    missing = runner.invoke(topology_app, ["show", "--version", "7"])
    assert missing.exit_code == 1 and "no topology version 7" in missing.output


def _land(url: str, truth: GroundTruth, tmp: Path, run_id: str) -> None:
    at = datetime.now(UTC)
    fabric = parse_file(write_ibnetdiscover(truth, tmp / f"{run_id}.out"), "saved")
    dcim = parse_dcim(write_dcim_export(truth, tmp / f"{run_id}.csv"), device="dcim")
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in node_objects(truth)}
    nvl = from_node_labels(labels, "k8s")
    with open_warehouse(url).connect() as conn:
        land_fabric(conn, run_id=run_id, kind="ibnetdiscover", device="saved", fabric=fabric, started_at=at)
        land_collection(
            conn, run_id=run_id, source="dcim", device="dcim", table="raw.dcim_inventory", columns=DCIM_COLUMNS,
            rows=dcim_rows(run_id, "dcim", at, dcim.records), quarantined=[], status=CollectionStatus.OK, started_at=at,
        )  # fmt: skip
        land_collection(
            conn, run_id=run_id, source="nvlink", device="k8s", table="raw.nvlink_domains", columns=NVLINK_COLUMNS,
            rows=nvlink_rows(run_id, "k8s", at, nvl.records), quarantined=[], status=CollectionStatus.OK, started_at=at,
        )  # fmt: skip


def _materialize(url: str) -> dg.ExecuteInProcessResult:
    return dg.materialize([fabric_model], resources={"warehouse": WarehouseResource(url=url)}, raise_on_error=True)


def test_asset_versions_on_change_checks_and_diff(tmp_path: Path, fresh_env: str) -> None:
    url = fresh_env
    _land(url, truth_with("gb200-nvl72"), tmp_path, "run-1")
    first = _materialize(url)
    meta = first.asset_materializations_for_node("topology__fabric_model")[0].metadata
    assert (meta["version"].value, meta["new_version"].value, meta["compute_hosts"].value) == (1, True, 144)
    assert meta["domains_by_level"].value == {"block": 8, "spine_group": 1, "pod": 1}
    checks = {c.check_name: c for c in first.get_asset_check_evaluations()}
    assert {name: c.passed for name, c in checks.items()} == {
        "every_host_has_every_domain": True, "domains_within_design_size": True, "no_findings_at_threshold": True,
    }  # fmt: skip

    again = _materialize(url)
    meta = again.asset_materializations_for_node("topology__fabric_model")[0].metadata
    assert (meta["version"].value, meta["new_version"].value) == (1, False)

    _land(url, truth_with("gb200-nvl72", miscabled_ports=1), tmp_path, "run-2")
    third = _materialize(url)
    meta = third.asset_materializations_for_node("topology__fabric_model")[0].metadata
    assert (meta["version"].value, meta["new_version"].value) == (2, True)
    assert meta["findings_by_kind"].value == {"miscabled_port": 1}
    # the UI's picture and plots (issue 24, part 4): the diagram as a markdown image, a count per kind
    assert meta["diagram"].value.startswith("![topology version 2](data:image/png;base64,iVBORw0KGgo")
    assert (meta["findings_miscabled_port"].value, meta["findings_degraded_leaf"].value) == (1, 0)
    assert [r.data["kind"] for r in meta["findings_table"].records] == ["miscabled_port"]
    failed = {c.check_name: c for c in third.get_asset_check_evaluations()}["no_findings_at_threshold"]
    assert failed.passed is False
    (evidence,) = failed.metadata["evidence"].value
    assert evidence["kind"] == "miscabled_port" and len(evidence["evidence"]["hcas"]) == 2

    diff = runner.invoke(topology_app, ["diff", "1", "2", "--json"])
    assert diff.exit_code == 0, diff.output
    changes = json.loads(diff.stdout)
    sections = Counter((c["section"], c["change"]) for c in changes)
    # Two cables swapped: 2 links gone, 2 new, one finding, the two hosts' HCA lists changed.
    assert sections == {("links", "removed"): 2, ("links", "added"): 2, ("findings", "added"): 1,
                        ("hosts", "changed"): 2}  # fmt: skip
    text = runner.invoke(topology_app, ["diff", "1", "2"])
    assert "version 1 -> 2" in text.stdout
    with open_warehouse(url).connect() as conn:
        stored = conn.execute("SELECT count(*) FROM topology.diffs WHERE version = 2").fetchone()
        assert stored is not None and stored[0] == len(changes)
        query = "SELECT role, count(*) FROM topology.hosts WHERE version = 2 GROUP BY role"
        roles = dict(conn.execute(query).fetchall())
        # one SHARP node per Quantum-2 switch, and the spec's two UFM servers told apart by the
        # fleet's compute pattern (2 HCAs where the trays have 4), not by name
        assert roles == {"compute": 144, "sharp_aggregation_node": 41, "ufm_server": 2}
