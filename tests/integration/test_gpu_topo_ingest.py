"""``gpufabric ingest gpu-topo HOST FILE [--json]`` on every real capture in
../shared/fixtures/gpu-topo, against this session's warehouse: the landed row holds the text and
the parsed matrix, ``--json`` is exactly core's derivation (and the hand-written best NICs), and
a truncated or corrupted copy exits 1 with the reason on stderr and a quarantined row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from connectors.gpu_topo import parse_file
from core.affinity import derive_node
from pipelines.cli import app as cli_app
from tests.conftest import FIXTURES

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(p for p in (FIXTURES / "gpu-topo").glob("*.txt") if p.name != "SOURCE.txt")


def in_process(*args: str) -> subprocess.CompletedProcess[str]:
    result = CliRunner().invoke(cli_app, list(args), env={"COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["gpufabric", *args], result.exit_code, result.stdout, result.stderr)


def rows(warehouse: Any, sql: str, run: str) -> list[tuple[Any, ...]]:
    with warehouse.connect() as conn:
        return [tuple(r) for r in conn.execute(sql, (run,)).fetchall()]


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_capture_lands_and_json_is_the_derivation(warehouse: Any, capture: Path) -> None:
    run = f"test-gpu-topo-{uuid.uuid4().hex[:10]}"
    done = in_process("ingest", "gpu-topo", "node-a", str(capture), "--json", "--run-id", run)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    matrix = parse_file(capture)
    assert printed == derive_node("node-a", matrix).to_json()
    exp = yaml.safe_load(capture.with_suffix(".expected.yaml").read_text())
    for label, facts in exp["gpus"].items():
        g = printed[int(label[3:])]
        names = [d if d is not None else c for d, c in zip(facts["best_nics"], facts["best_nic_columns"], strict=True)]
        assert (g["gpu"], g["best_nics"], g["path_class"], g["numa_node"]) == (
            int(label[3:]), names, facts["best_nic_class"], facts["numa_node"]
        )  # fmt: skip
    landed = rows(
        warehouse,
        "SELECT source, origin, raw_text, gpu_count, nic_count, matrix FROM raw.gpu_topo_captures WHERE run_id = %s",
        run,
    )
    assert landed == [
        ("node-a", f"file:{capture.name}", capture.read_text(), exp["gpu_count"], exp["nic_count"], matrix.to_json())
    ]
    status = rows(
        warehouse,
        "SELECT source, device, status, rows_landed, rows_quarantined FROM ops.collection_status WHERE run_id = %s",
        run,
    )
    assert status == [("gpu_topo", "node-a", "ok", 1, 0)]


def test_table_output_lists_gpus_and_findings(warehouse: Any) -> None:
    run = f"test-gpu-topo-{uuid.uuid4().hex[:10]}"
    capture = next(p for p in CAPTURES if p.name.startswith("rtx4090"))
    done = in_process("ingest", "gpu-topo", "box1", str(capture), "--run-id", run)
    assert done.returncode == 0, done.stderr
    assert "nic_via_host_bridge: box1 GPU6" in done.stdout and done.stdout.count("nic_across_socket") == 7


def test_malformed_capture_is_quarantined_with_its_reason(warehouse: Any, tmp_path: Path) -> None:
    capture = next(p for p in CAPTURES if p.name.startswith("hgx"))
    text = capture.read_text()
    cut = tmp_path / "cut.txt"
    cut.write_text(text[: text.index("NIC3    NODE")])
    run = f"test-gpu-topo-{uuid.uuid4().hex[:10]}"
    done = in_process("ingest", "gpu-topo", "node-b", str(cut), "--json", "--run-id", run)
    assert done.returncode == 1 and done.stdout == ""
    assert "matrix has 11 rows for the header's 16 devices (truncated?)" in done.stderr
    assert rows(warehouse, "SELECT count(*) FROM raw.gpu_topo_captures WHERE run_id = %s", run) == [(0,)]
    held = rows(
        warehouse, "SELECT source, device, location, reason, payload FROM ops.quarantine WHERE run_id = %s", run
    )
    assert held == [
        (
            "gpu_topo",
            "node-b",
            "line 13",
            "matrix has 11 rows for the header's 16 devices (truncated?)",
            cut.read_text(),
        )
    ]
    status = rows(
        warehouse, "SELECT status, rows_landed, rows_quarantined FROM ops.collection_status WHERE run_id = %s", run
    )
    assert status == [("invalid", 0, 1)]


def test_binary_garbage_keeps_its_bytes_in_quarantine(warehouse: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\tGPU0\xff\n")
    run = f"test-gpu-topo-{uuid.uuid4().hex[:10]}"
    done = in_process("ingest", "gpu-topo", "node-c", str(bad), "--run-id", run)
    assert done.returncode == 1 and "byte 0xff at offset 5 is not UTF-8" in done.stderr
    held = rows(warehouse, "SELECT reason, payload_bytes FROM ops.quarantine WHERE run_id = %s", run)
    assert held == [("byte 0xff at offset 5 is not UTF-8", b"\tGPU0\xff\n")]


def test_real_process_exit_codes_without_traceback(warehouse: Any, tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    missing = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "ingest", "gpu-topo", "h", str(tmp_path / "absent.txt")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert missing.returncode == 1 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    bad = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "ingest", "gpu-topo", "h", str(junk)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert bad.returncode == 1 and "no matrix header" in bad.stderr and "Traceback" not in bad.stderr
