"""The efficiency marts against workloads whose tensor activity and clocks are known.

One simulated hour of the dcgm-exporter twin's output (the exact bytes a scrape returns, rendered
for successive timestamps) goes through the production path: ExpositionParser -> land_samples
(COPY) -> ``dbt build`` of the efficiency marts, once for the module. Expected values come from
the workload definitions (simulator/dcgm/workloads.py) and the peak-FLOPs seed, and must match
within 1 percentage point.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from connectors.prometheus.storage import land_samples
from connectors.warehouse import Warehouse, open_warehouse
from core import mfu
from core.telemetry import ExpositionParser
from simulator.dcgm import workloads as wl
from simulator.dcgm.exposition import nodes_of, render_node, render_workloads
from simulator.generator import generate
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path

pytestmark = pytest.mark.warehouse_only  # only Postgres of the site (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
DBT_DIR = ROOT / "dbt"
HOUR = datetime(2026, 12, 2, 10, tzinfo=UTC)
T0 = HOUR.timestamp()
STEP_S = 30
NODES = 8  # one block: every workload role
PP = 0.01  # one percentage point


def _seed() -> dict[str, dict[str, str]]:
    with (DBT_DIR / "seeds" / "gpu_peak_flops.csv").open() as handle:
        return {r["gpu_model"]: r for r in csv.DictReader(handle) if r["precision"] == "bf16"}


SEED = _seed()
H100_PEAK = float(SEED["H100 SXM"]["dense_tflops"])
H100_REF = float(SEED["H100 SXM"]["ref_sm_clock_mhz"])


@pytest.fixture(scope="module")
def marts(warehouse: Warehouse, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A fresh database with one simulated hour landed and the efficiency marts built."""
    name = f"t_eff_{uuid.uuid4().hex[:10]}"
    admin_url = warehouse.base_url.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = warehouse.base_url.set(database=name).render_as_string(hide_password=False)
    try:
        wh = open_warehouse(url)
        truth = generate(load_spec(resolve_spec_path("h100-1su")))
        nodes = nodes_of(truth)[:NODES]
        parser = ExpositionParser()
        run_id = f"test-{uuid.uuid4()}"
        stats: dict[str, int] = {}
        with wh.connect() as conn:
            # the hour, every 30 s; then the next hour holds one scrape only (unmeasured)
            times = [T0 + k * STEP_S for k in range(3600 // STEP_S)] + [T0 + 3600 + 5]
            for node in nodes:
                batch = None
                for t in times:
                    parsed = parser.parse(render_node(node, t), int(t * 1000), device=node.hostname)
                    if batch is None:
                        batch = parsed
                    else:
                        batch.extend(parsed)
                assert batch is not None
                land_samples(conn, batch, run_id=run_id, device=node.hostname, started_at=HOUR)
                for key, value in batch.stats.items():
                    stats[key] = stats.get(key, 0) + value
            workloads = parser.parse(render_workloads([n.hostname for n in nodes], T0), int(T0 * 1000))
            for t in times[1:-1]:
                workloads.extend(parser.parse(render_workloads([n.hostname for n in nodes], t), int(t * 1000)))
            land_samples(conn, workloads, run_id=run_id, device="workloads", started_at=HOUR)
            conn.commit()
        target = tmp_path_factory.mktemp("dbt")
        env = dict(os.environ, **wh.libpq_env())
        result = subprocess.run(
            [
                str(Path(sys.executable).with_name("dbt")),
                "build",
                "--select",
                "+path:models/marts/efficiency",
                "--project-dir",
                str(DBT_DIR),
                "--profiles-dir",
                str(DBT_DIR),
                "--target-path",
                str(target / "target"),
                "--log-path",
                str(target / "logs"),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
        yield {"wh": wh, "nodes": nodes, "stats": stats, "dbt": result.stdout}
        wh.dispose()
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _rows(marts: dict[str, Any], query: str, *params: Any) -> list[dict[str, Any]]:
    with marts["wh"].connect() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute(query, params).fetchall()


def _gpu(marts: dict[str, Any], host: int, gpu: int, instance: int = -1, hour: datetime = HOUR) -> dict[str, Any]:
    uuid_ = marts["nodes"][host].gpu_uuids[gpu]
    rows = _rows(
        marts,
        "SELECT * FROM efficiency.gpu_efficiency_hourly WHERE gpu_uuid = %s AND gpu_instance_key = %s AND hour = %s",
        uuid_,
        instance,
        hour,
    )
    assert len(rows) == 1, rows
    return rows[0]


def test_dbt_build_ran_its_tests(marts: dict[str, Any]) -> None:
    out = marts["dbt"]
    done = re.search(r"PASS=(\d+) WARN=(\d+) ERROR=(\d+) SKIP=(\d+)", out)
    assert done is not None, out[-2000:]
    assert int(done.group(3)) == 0 and int(done.group(4)) == 0
    assert int(done.group(1)) >= 15  # seed + 6 models + their data tests


def test_training_gpu_matches_known_tensor_activity_and_clock(marts: dict[str, Any]) -> None:
    row = _gpu(marts, 0, 0)
    assert row["measured"] is True
    assert row["samples"] == 3600 // STEP_S
    assert row["scrape_interval_s"] == pytest.approx(STEP_S)
    assert row["tensor_active"] == pytest.approx(wl.PRETRAIN["tensor"], abs=PP)
    assert row["sm_active"] == pytest.approx(wl.PRETRAIN["sm_active"], abs=PP)
    assert row["sm_occupancy"] == pytest.approx(wl.PRETRAIN["sm_occupancy"], abs=PP)
    assert row["dram_active"] == pytest.approx(wl.PRETRAIN["dram"], abs=PP)
    assert row["sm_clock_mhz"] == pytest.approx(wl.PRETRAIN["clock"])
    expected = mfu.hw_flop_utilisation(wl.PRETRAIN["tensor"], wl.PRETRAIN["clock"], H100_REF)
    assert expected == pytest.approx(0.5946, abs=1e-4)  # 0.62 x 1755 / 1830
    assert row["hw_flop_util"] == pytest.approx(expected, abs=PP)
    assert row["gpu_model"] == "H100 SXM"
    assert row["peak_tflops"] == pytest.approx(H100_PEAK)
    assert row["achieved_tflops"] == pytest.approx(expected * H100_PEAK, rel=0.02)


def test_finetune_gpu_at_reference_clock(marts: dict[str, Any]) -> None:
    row = _gpu(marts, 3, 5)
    assert row["hw_flop_util"] == pytest.approx(wl.FINETUNE["tensor"] * wl.FINETUNE["clock"] / H100_REF, abs=PP)


def test_inference_bursts_average_what_was_served(marts: dict[str, Any]) -> None:
    """Bursts are sampled at the scrape instants; the reference mean is over those same instants."""
    for gpu in (0, 3):
        states = [wl.gpu_state(4, gpu, T0 + k * STEP_S) for k in range(3600 // STEP_S)]
        tensor = [s.instances[0][2].tensor_active for s in states]
        util = [mfu.hw_flop_utilisation(s.instances[0][2].tensor_active, s.sm_clock_mhz, H100_REF) for s in states]
        row = _gpu(marts, 4, gpu)
        assert 0 < row["tensor_active"] < wl.BURST["tensor"]
        assert row["tensor_active"] == pytest.approx(mfu.mean(tensor), abs=PP)
        assert row["hw_flop_util"] == pytest.approx(mfu.mean(util), abs=PP)


def test_idle_gpu_is_zero_not_null(marts: dict[str, Any]) -> None:
    row = _gpu(marts, 6, 2)
    assert row["measured"] is True
    assert row["tensor_active"] == 0.0
    assert row["hw_flop_util"] == 0.0
    assert row["sm_active"] == 0.0
    assert row["achieved_tflops"] == 0.0


def test_mig_instances_scaled_by_sm_share(marts: dict[str, Any]) -> None:
    big = _gpu(marts, 5, 1, instance=2)
    assert big["gpu_instance_profile"] == "3g.40gb"
    util = mfu.hw_flop_utilisation(wl.MIG_INSTANCES["infer"], wl.MIG_INSTANCES["clock"], H100_REF)
    assert big["hw_flop_util"] == pytest.approx(util, abs=PP)
    assert big["peak_tflops"] == pytest.approx(H100_PEAK * mfu.mig_sm_share("3g.40gb"))
    small = _gpu(marts, 5, 1, instance=3)
    assert small["peak_tflops"] == pytest.approx(H100_PEAK * 2 / 7)
    assert small["hw_flop_util"] == pytest.approx(wl.MIG_INSTANCES["train"] * 1650 / H100_REF, abs=PP)
    idle = _gpu(marts, 5, 1, instance=4)
    assert idle["measured"] is True and idle["hw_flop_util"] == 0.0
    # a MIG GPU has no whole-GPU row: its profiling counters are per instance
    rows = _rows(marts, "SELECT count(*) AS n FROM efficiency.gpu_efficiency_hourly WHERE gpu_uuid = %s AND hour = %s",
                 marts["nodes"][5].gpu_uuids[1], HOUR)
    assert rows[0]["n"] == 3


def test_window_with_one_sample_is_unmeasured(marts: dict[str, Any]) -> None:
    from datetime import timedelta

    row = _gpu(marts, 0, 0, hour=HOUR + timedelta(hours=1))
    assert row["samples"] == 1
    assert row["measured"] is False
    assert row["tensor_active"] is None and row["hw_flop_util"] is None and row["sm_active"] is None


def test_every_gpu_of_the_block_has_a_row(marts: dict[str, Any]) -> None:
    rows = _rows(marts, "SELECT count(*) AS n, count(*) FILTER (WHERE measured) AS m "
                        "FROM efficiency.gpu_efficiency_hourly WHERE hour = %s", HOUR)
    # 7 whole-GPU nodes x 8 GPUs + the MIG node's 8 GPUs x 3 instances
    assert rows[0] == {"n": 7 * 8 + 8 * 3, "m": 7 * 8 + 8 * 3}


def test_pod_mart(marts: dict[str, Any]) -> None:
    rows = _rows(marts, "SELECT * FROM efficiency.pod_efficiency_hourly WHERE pod = %s AND hour = %s",
                 "pretrain-b00-worker-1", HOUR)
    assert len(rows) == 1
    pod = rows[0]
    assert pod["gpus"] == 8 and pod["namespace"] == "training" and pod["measured"] is True
    assert pod["hw_flop_util"] == pytest.approx(wl.PRETRAIN["tensor"] * wl.PRETRAIN["clock"] / H100_REF, abs=PP)
    mig = _rows(marts, "SELECT * FROM efficiency.pod_efficiency_hourly WHERE pod = %s", "mig-infer-h5-g2")[0]
    assert mig["gpus"] == 1
    assert mig["peak_tflops"] == pytest.approx(H100_PEAK * 3 / 7)
    assert mig["hw_flop_util"] == pytest.approx(wl.MIG_INSTANCES["infer"] * 1650 / H100_REF, abs=PP)


def test_job_mart_model_mfu(marts: dict[str, Any]) -> None:
    rows = _rows(marts, "SELECT * FROM efficiency.job_efficiency_hourly WHERE job = %s AND hour = %s",
                 "pretrain-b00", HOUR)
    assert len(rows) == 1
    job = rows[0]
    assert job["gpus"] == 24 and job["physical_gpus"] == 24
    assert job["peak_tflops"] == pytest.approx(24 * H100_PEAK)
    expected = mfu.model_mfu(wl.PRETRAIN_PARAMS, wl.PRETRAIN_TOKENS_PER_S, 24 * H100_PEAK * 1e12)
    assert expected == pytest.approx(0.4448, abs=1e-4)  # 6 x 8e9 x 220k / (24 x 989 TFLOP/s)
    assert job["model_mfu"] == pytest.approx(expected, abs=PP)
    assert job["tokens_per_s"] == pytest.approx(wl.PRETRAIN_TOKENS_PER_S, rel=1e-3)
    assert job["hw_flop_util"] == pytest.approx(wl.PRETRAIN["tensor"] * wl.PRETRAIN["clock"] / H100_REF, abs=PP)
    # inference reports no throughput: its model MFU is unknown, not zero
    infer = _rows(marts, "SELECT * FROM efficiency.job_efficiency_hourly WHERE job = %s AND hour = %s",
                  "agent-infer-b00", HOUR)[0]
    assert infer["model_mfu"] is None and infer["gpus"] == 8


def test_ingest_counts(marts: dict[str, Any]) -> None:
    stats = marts["stats"]
    assert stats.get("quarantined", 0) == 0
    # node 7 serves DCGM_INT64_NOT_SUPPORTED for the memory temperature of its 8 GPUs
    assert stats["not_supported"] == 8 * (3600 // STEP_S + 1)
    rows = _rows(
        marts,
        "SELECT count(*) AS n, count(value) AS v FROM telemetry.dcgm_samples s JOIN telemetry.dcgm_series r "
        "USING (series_id) WHERE r.metric = 'DCGM_FI_DEV_MEMORY_TEMP' AND r.hostname = %s",
        marts["nodes"][7].hostname,
    )
    assert rows[0] == {"n": 8 * (3600 // STEP_S + 1), "v": 0}
