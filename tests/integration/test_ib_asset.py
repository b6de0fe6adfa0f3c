"""The InfiniBand assets and `ingest ibnetdiscover` end to end, against the test warehouse."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
from typer.testing import CliRunner

from assets.infiniband import ib_fabric, nvlink_domains
from pipelines.cli_ib import app
from pipelines.resources import SiteConfigResource, WarehouseResource
from simulator.generator import generate
from simulator.ib.ibnetdiscover import write_ibnetdiscover
from simulator.ib.ufm import UfmTwinThread
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from tests.conftest import FIXTURES

pytestmark = pytest.mark.warehouse_only  # only Postgres of the site (tests/conftest.py)


def test_fabric_managers_land_with_status_and_quarantine(tmp_path: Path, warehouse) -> None:  # type: ignore[no-untyped-def]
    truth = generate(load_spec(resolve_spec_path("h100-1su")))
    write_ibnetdiscover(truth, tmp_path / "saved.out")
    (tmp_path / "bad.out").write_bytes((FIXTURES / "topograph" / "example-bad.out").read_bytes())
    with UfmTwinThread(truth) as twin:
        (tmp_path / "pw").write_text(twin.password)
        site = tmp_path / "gpufabric.yaml"
        site.write_text(
            "version: 1\nsources:\n  fabric_managers:\n"
            f"    - {{name: ufm-a, kind: ufm, url: '{twin.url}', auth: basic, username: admin,"
            f" ca_file: '{twin.ca_file}', password: {{file: pw}}, retries: 0}}\n"
            "    - {name: ufm-down, kind: ufm, url: 'https://127.0.0.1:9', auth: basic, username: admin,"
            " password: {file: pw}, retries: 0, timeout_s: 2}\n"
            "    - {name: saved, kind: ibnetdiscover, path: saved.out}\n"
            "    - {name: adapters-only, kind: ibnetdiscover, path: bad.out}\n"
        )
        result = dg.materialize(
            [ib_fabric], resources={"warehouse": WarehouseResource(), "site": SiteConfigResource(path=str(site))}
        )
    assert result.success
    rid = result.run_id
    meta = result.asset_materializations_for_node("ib_fabric")
    by_key = {m.asset_key.to_user_string(): m.metadata for m in meta}
    assert by_key["raw/ib_links"]["links_landed"].value == 512 + (512 + 12)  # UFM + saved (with SHARP)
    assert by_key["raw/ib_nodes"]["sources_by_status"].value == {"ok": 2, "unreachable": 1, "no_data": 1}
    assert by_key["raw/ib_nodes"]["nodes_by_class"].value == {
        "switch": 24,
        "compute_hca": 512 + 1,
        "sharp_aggregation_node": 12,
    }
    with warehouse.connect() as conn:
        status = {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT device, source, status, rows_landed FROM ops.collection_status WHERE run_id = %s", (rid,)
            )
        }
        ufm_links = {
            tuple(r)
            for r in conn.execute(
                "SELECT a_guid, a_port, b_guid, b_port, speed_gbps FROM raw.ib_links "
                "WHERE run_id = %s AND source = 'ufm-a'",
                (rid,),
            )
        }
        saved_links = {
            tuple(r)
            for r in conn.execute(
                "SELECT a_guid, a_port, b_guid, b_port, speed_gbps FROM raw.ib_links "
                "WHERE run_id = %s AND source = 'saved' AND NOT internal",
                (rid,),
            )
        }
        hosts = {
            r[0]
            for r in conn.execute(
                "SELECT DISTINCT hostname FROM raw.ib_nodes WHERE run_id = %s AND source = 'saved' "
                "AND node_class = 'compute_hca'",
                (rid,),
            )
        }
    assert status["ufm-a"] == ("ufm", "ok", 512)
    assert status["ufm-down"][:2] == ("ufm", "unreachable")
    assert status["saved"] == ("ibnetdiscover", "ok", 524)
    assert status["adapters-only"] == ("ibnetdiscover", "no_data", 0)
    assert ufm_links == saved_links and len(ufm_links) == 512
    assert hosts == {h.name for h in truth.hosts()}


def test_ingest_cli_loads_a_saved_output_and_says_no_switches(tmp_path: Path, warehouse) -> None:  # type: ignore[no-untyped-def]
    truth = generate(load_spec(resolve_spec_path("h100-1su")))
    path = write_ibnetdiscover(truth, tmp_path / "handed-over.out")
    runner = CliRunner()
    ok = runner.invoke(app, ["ibnetdiscover", str(path), "--run-id", "ingest-test-1"])
    assert ok.exit_code == 0, ok.output
    assert "sharp_aggregation_node 12" in ok.output
    bad = runner.invoke(app, ["ibnetdiscover", str(FIXTURES / "topograph" / "example-bad.out"), "--run-id", "i-2"])
    assert bad.exit_code == 1
    assert "no switches" in bad.output
    missing = runner.invoke(app, ["ibnetdiscover", str(tmp_path / "nope.out")])
    assert missing.exit_code == 1 and "cannot read" in missing.output
    with warehouse.connect() as conn:
        n = conn.execute(
            "SELECT count(*) FROM raw.ib_links WHERE run_id = 'ingest-test-1' AND source = 'handed-over.out'"
        ).fetchone()
        st = conn.execute("SELECT status FROM ops.collection_status WHERE run_id = 'i-2'").fetchone()
    assert n == (524,)
    assert st == ("no_data",)


def test_nvlink_domains_asset(tmp_path: Path, warehouse) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "smi.csv").write_text("[N/A], [N/A]\n" * 8)
    cfg = {
        "inputs": [
            {"name": "nmx", "kind": "nmx", "path": str(FIXTURES / "topograph" / "computeNodes.json")},
            {"name": "dgx001-smi", "kind": "nvidia_smi", "path": str(tmp_path / "smi.csv"), "node": "dgx001"},
            {"name": "gone", "kind": "nmx", "path": str(tmp_path / "missing.json")},
        ]
    }
    # The site file names one more input (a saved NMX response); run config adds the rest.
    (tmp_path / "gpufabric.yaml").write_text(
        "version: 1\nsources:\n  nvlink:\n"
        f"    - {{name: nmx-site, kind: nmx, path: {FIXTURES / 'topograph' / 'computeNodes.json'}}}\n"
    )
    result = dg.materialize(
        [nvlink_domains],
        resources={"warehouse": WarehouseResource(), "site": SiteConfigResource(path=str(tmp_path / "gpufabric.yaml"))},
        run_config={"ops": {"raw__nvlink_domains": {"config": cfg}}},
    )
    assert result.success
    meta = result.asset_materializations_for_node("raw__nvlink_domains")[0].metadata
    assert meta["nodes_landed"].value == 5
    assert meta["inputs_by_status"].value == {"ok": 3, "unreachable": 1}
    with warehouse.connect() as conn:
        rows = conn.execute(
            "SELECT node, method, domain, gpus FROM raw.nvlink_domains WHERE run_id = %s AND source <> 'nmx-site' "
            "ORDER BY node",
            (result.run_id,),
        ).fetchall()
    assert rows == [
        ("dgx001", "hgx_single_node", "nvl-dgx001", 8),
        ("node1", "nmx", "3fbfc98b-7f95-4749-ab11-bd351a2aab3e", 4),
        ("node2", "nmx", "3fbfc98b-7f95-4749-ab11-bd351a2aab3e", 4),
    ]
    assert json.dumps(meta["nodes_by_method"].value, sort_keys=True) == '{"hgx_single_node": 1, "nmx": 4}'
