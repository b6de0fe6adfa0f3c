"""The DCIM asset end to end: config file → parser → warehouse, fail soft on bad sources."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from assets.dcim import dcim_inventory
from pipelines.resources import SiteConfigResource, WarehouseResource
from simulator.dcim import write_dcim_export
from simulator.generator import generate
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path

pytestmark = pytest.mark.warehouse_only  # only Postgres of the site (tests/conftest.py)

BAD_ROWS = (
    "node,rack,gpu_count,bmc_address\n"
    "good-01,r1,8,10.0.0.1\n"
    "good-02,r1,eight,10.0.0.2\n"  # wrong type
    "good-03,r1,8,not-an-ip\n"
    "good-01,r2,8,10.0.0.3\n"  # duplicate
    "good-04,r2,8\n"  # truncated row
)


def _materialize(tmp_path: Path, config: str) -> dg.ExecuteInProcessResult:
    site = tmp_path / "gpufabric.yaml"
    site.write_text(config)
    return dg.materialize(
        [dcim_inventory],
        resources={"warehouse": WarehouseResource(), "site": SiteConfigResource(path=str(site))},
    )


def test_one_bad_export_and_one_missing_file_do_not_fail_the_run(tmp_path: Path, warehouse) -> None:  # type: ignore[no-untyped-def]
    truth = generate(load_spec(resolve_spec_path("h100-1su")))
    write_dcim_export(truth, tmp_path / "good.csv")
    (tmp_path / "bad.csv").write_text(BAD_ROWS)
    result = _materialize(
        tmp_path,
        "version: 1\nsources:\n  dcim:\n"
        "    - {name: good, path: good.csv}\n"
        "    - {name: messy, path: bad.csv}\n"
        "    - {name: gone, path: missing.csv}\n",
    )
    assert result.success
    run_id = result.run_id
    meta = result.asset_materializations_for_node("raw__dcim_inventory")[0].metadata
    assert meta["nodes_landed"].value == 32 + 1
    assert meta["rows_quarantined"].value == 4
    assert meta["sources_by_status"].value == {"ok": 1, "partial": 1, "unreachable": 1}
    with warehouse.connect() as conn:
        landed = dict(
            conn.execute(
                "SELECT source, count(*) FROM raw.dcim_inventory WHERE run_id = %s GROUP BY 1", (run_id,)
            ).fetchall()
        )
        status = {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT device, status, rows_landed, rows_quarantined, detail FROM ops.collection_status "
                "WHERE run_id = %s",
                (run_id,),
            ).fetchall()
        }
        reasons = [
            r[0]
            for r in conn.execute(
                "SELECT reason FROM ops.quarantine WHERE run_id = %s AND device = 'messy' ORDER BY id", (run_id,)
            )
        ]
        nodes = {
            r[0]
            for r in conn.execute(
                "SELECT node FROM raw.dcim_inventory WHERE run_id = %s AND source = 'good'", (run_id,)
            )
        }
    assert landed == {"good": 32, "messy": 1}
    assert nodes == {h.name for h in truth.hosts()}
    assert status["good"][:3] == ("ok", 32, 0)
    assert status["messy"][:3] == ("partial", 1, 4)
    assert status["gone"][0] == "unreachable" and "missing.csv" in status["gone"][3]
    assert len(reasons) == 4
    assert any("gpu_count" in r for r in reasons)
    assert any("not an IP" in r for r in reasons)
    assert any("duplicate node" in r for r in reasons)
    assert any("cells" in r for r in reasons)


def test_an_export_without_a_node_column_is_quarantined_whole(tmp_path: Path, warehouse) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "junk.csv").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00garbage")
    result = _materialize(tmp_path, "version: 1\nsources:\n  dcim:\n    - {name: junk, path: junk.csv}\n")
    assert result.success
    with warehouse.connect() as conn:
        status = conn.execute("SELECT status FROM ops.collection_status WHERE run_id = %s", (result.run_id,)).fetchone()
        reason = conn.execute("SELECT reason FROM ops.quarantine WHERE run_id = %s", (result.run_id,)).fetchone()
    assert status == ("invalid",)
    assert reason is not None and "no node column" in reason[0]
