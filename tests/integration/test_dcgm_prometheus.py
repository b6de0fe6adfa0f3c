"""The collectors against the dcgm-exporter twin over real sockets, and a real Prometheus (Debian
``prometheus``) scraping the twin every second, read back through the HTTP API collector and the
Dagster asset."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg import sql

from connectors.prometheus import PrometheusClient, PrometheusError, read_targets_file
from connectors.prometheus.collect import collect_exporters, collect_prometheus
from connectors.warehouse import Warehouse, open_warehouse
from simulator.dcgm import start as start_twin
from simulator.dcgm import workloads as wl
from simulator.generator import generate
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from simulator.twin import stop_pids

pytestmark = pytest.mark.warehouse_only  # only Postgres of the site (tests/conftest.py)

NODES = 16
SCRAPE_S = 1
WINDOW_S = 6  # seconds of scrapes the query test reads


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def truth() -> Any:
    return generate(load_spec(resolve_spec_path("h100-1su")))


@pytest.fixture(scope="module")
def twin(truth: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    run = start_twin(truth, tmp_path_factory.mktemp("dcgm-twin"), max_nodes=NODES)
    yield run
    stop_pids(run.pids)


@pytest.fixture(scope="module")
def faulty_twin(truth: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    hosts = [h.name for h in truth.hosts()[:5]]
    faults = {hosts[1]: "http_500", hosts[2]: "malformed", hosts[3]: "timeout", hosts[4]: "empty"}
    run = start_twin(truth, tmp_path_factory.mktemp("dcgm-faulty"), max_nodes=5, faults=faults)
    run.extra["hosts"] = hosts
    yield run
    stop_pids(run.pids)


@pytest.fixture(scope="module")
def db(warehouse: Warehouse) -> Iterator[Warehouse]:
    name = f"t_dcgm_{uuid.uuid4().hex[:10]}"
    admin_url = warehouse.base_url.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    wh = open_warehouse(warehouse.base_url.set(database=name).render_as_string(hide_password=False))
    yield wh
    wh.dispose()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def prometheus(twin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Debian's prometheus on a free loopback port, scraping every twin endpoint each second."""
    binary = shutil.which("prometheus")
    assert binary, "the Debian package 'prometheus' is required (system-packages/telemetry.txt)"
    work = tmp_path_factory.mktemp("prometheus")
    config = {
        "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": "900ms", "evaluation_interval": "10s"},
        "scrape_configs": [
            {"job_name": "dcgm-exporter", "file_sd_configs": [{"files": [twin.extra["targets_file"]]}]},
            {"job_name": "workloads", "static_configs": [{"targets": [twin.extra["workloads_url"].split("/")[2]]}]},
        ],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    started = datetime.now(UTC)
    log = (work / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1h",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (work / "prometheus.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.2)
        # Targets come up over a few seconds (file_sd, scrape offsets): wait until every one has
        # been scraped, then let ~7 more scrapes of each land (the test reads a 6 s window).
        query = f"{url}/api/v1/query?query=count(up%3D%3D1)"
        while True:
            with urllib.request.urlopen(query, timeout=2) as answer:
                result = json.loads(answer.read())["data"]["result"]
            if result and int(result[0]["value"][1]) == NODES + 1:
                break
            assert time.monotonic() < deadline + 30, f"targets not all up: {result}"
            time.sleep(0.25)
        time.sleep(WINDOW_S + 1)
        yield {"url": url, "started": started, "proc": proc}
    finally:
        # SIGKILL at once: its graceful stop writes a TSDB head block for ~5 s, and nothing of its
        # temporary data directory is read again.
        proc.kill()
        proc.wait()
        log.close()


def test_prometheus_query_range_reads_the_twin(prometheus: dict[str, Any], truth: Any, db: Warehouse,
                                               run_id: str) -> None:
    end = datetime.now(UTC)
    start = end - timedelta(seconds=WINDOW_S)
    client = PrometheusClient(prometheus["url"], timeout_s=10, retries=2)
    # max_span_s=2 forces three chunks: adjacent chunks must neither overlap nor leave gaps
    parsed = client.query_range(start, end, 1.0, max_span_s=2)
    assert not parsed.quarantined
    hosts = {h.name for h in truth.hosts()[:NODES]}
    series = parsed.series.values()
    assert {s.hostname for s in series if s.hostname} == hosts  # Hostname and hostname both normalised
    gpus = {s.gpu_uuid for s in series if s.gpu_uuid}
    assert len(gpus) == NODES * 8
    # per-instance fields of the MIG node: 8 GPUs x 3 instances; device fields once per GPU
    mig_host = truth.hosts()[5].name
    tensor = [s for s in series if s.metric == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" and s.hostname == mig_host]
    assert sorted({(s.gpu_instance_profile, s.gpu_instance_id) for s in tensor}) == [
        ("2g.20gb", 3), ("2g.20gb", 4), ("3g.40gb", 2)]
    assert len(tensor) == 24
    clocks = [s for s in series if s.metric == "DCGM_FI_DEV_SM_CLOCK" and s.hostname == mig_host]
    assert len(clocks) == 8 and all(s.gpu_instance_id is None for s in clocks)
    assert parsed.stats["mig_repeats"] > 0
    # Chunking is invisible: the same window in one request gives exactly the same samples (a
    # past window of the TSDB is immutable), with no (series, ts) twice and every ts on the step grid.
    whole = client.query_range(start, end, 1.0)
    chunked = set(zip(parsed.series_ids, parsed.ts_ms, parsed.values, strict=True))
    assert chunked == set(zip(whole.series_ids, whole.ts_ms, whole.values, strict=True))
    assert len(chunked) == len(parsed)
    assert all(ts % 1000 == 0 and start.timestamp() * 1000 <= ts < end.timestamp() * 1000 for ts in parsed.ts_ms)
    per_series: dict[int, int] = {}
    for sid in parsed.series_ids:
        per_series[sid] = per_series.get(sid, 0) + 1
    # WINDOW_S evaluation times; a scrape that timed out on this busy 2-core box leaves a gap (stale)
    assert max(per_series.values()) == WINDOW_S and min(per_series.values()) >= 2
    # values: training clock is constant; idle tensor is 0.0 (not NULL); blank sentinel -> NULL
    by_id = parsed.series
    values: dict[tuple[str, str | None, int | None], set[float | None]] = {}
    for sid, value in zip(parsed.series_ids, parsed.values, strict=True):
        s = by_id[sid]
        values.setdefault((s.metric, s.hostname, s.gpu), set()).add(value)
    hosts_list = [h.name for h in truth.hosts()]
    assert values[("DCGM_FI_DEV_SM_CLOCK", hosts_list[0], 0)] == {wl.PRETRAIN["clock"]}
    assert values[("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", hosts_list[6], 3)] == {0.0}
    assert values[("DCGM_FI_DEV_MEMORY_TEMP", hosts_list[7], 0)] == {None}
    # pods and jobs from the k8s mapping labels
    pod = next(s for s in series if s.hostname == hosts_list[0] and s.metric == "DCGM_FI_PROF_SM_ACTIVE")
    assert (pod.namespace, pod.pod, pod.container, pod.job) == (
        "training", "pretrain-b00-worker-0", "trainer", "pretrain-b00")
    # Prometheus' own target labels are attributes, not identity
    assert pod.labels["job"] == "dcgm-exporter" and "instance" in pod.labels

    # land twice: idempotent per (series, timestamp)
    with db.connect() as conn:
        first = collect_prometheus(conn, name="prom", url=prometheus["url"], start=start, end=end, step_s=1.0,
                                   run_id=run_id)
        again = collect_prometheus(conn, name="prom", url=prometheus["url"], start=start, end=end, step_s=1.0,
                                   run_id=run_id)
        conn.commit()
        stored = conn.execute(
            "SELECT count(*) FROM telemetry.dcgm_samples WHERE ts >= %s AND ts < %s", (start, end)
        ).fetchone()
        status = conn.execute(
            "SELECT status, rows_landed FROM ops.collection_status WHERE run_id = %s AND device = 'prom'", (run_id,)
        ).fetchone()
    assert first.samples == len(parsed) == again.samples
    assert again.replaced_windows == 1 and first.replaced_windows == 0
    assert stored is not None and stored[0] == len(parsed)
    assert status == ("ok", len(parsed))


def test_prometheus_errors_are_clear(prometheus: dict[str, Any]) -> None:
    client = PrometheusClient(prometheus["url"], retries=0)
    now = datetime.now(UTC)
    with pytest.raises(PrometheusError, match="bad_data"):
        client.query_range(now - timedelta(seconds=5), now, 1.0, query="DCGM_FI_DEV_SM_CLOCK{")
    dead = PrometheusClient(f"http://127.0.0.1:{_free_port()}", retries=1, backoff_s=0.01)
    with pytest.raises(PrometheusError, match="failed after 2 attempts"):
        dead.query_range(now - timedelta(seconds=5), now, 1.0)


def test_scrape_many_exporters_concurrently(twin: Any, db: Warehouse, run_id: str) -> None:
    urls = read_targets_file(Path(twin.extra["targets_file"]))
    assert len(urls) == NODES
    with db.connect() as conn:
        outcome = collect_exporters(conn, urls, run_id=run_id, timeout_s=5)
        conn.commit()
        statuses = conn.execute(
            "SELECT status, count(*) FROM ops.collection_status WHERE run_id = %s GROUP BY 1", (run_id,)
        ).fetchall()
    # 14 whole-GPU nodes x 8 GPUs x 28 fields + 2 MIG nodes: 8 x (20 device + 8 fields x 3 instances)
    assert outcome.samples == 14 * 8 * 28 + 2 * 8 * (20 + 8 * 3)
    assert outcome.value_flags["mig_repeats"] == 2 * 8 * 20 * 2  # device fields printed on 3 instance lines
    assert outcome.quarantined == 0
    assert statuses == [("ok", NODES)]
    assert outcome.value_flags["not_supported"] == 16  # nodes 7 and 15: memory temperature


def test_faulty_exporters_fail_soft(faulty_twin: Any, db: Warehouse, run_id: str) -> None:
    urls = read_targets_file(Path(faulty_twin.extra["targets_file"]))
    by_host = dict(zip(faulty_twin.extra["hosts"], urls, strict=True))
    with db.connect() as conn:
        outcome = collect_exporters(conn, urls, run_id=run_id, timeout_s=1.5)
        conn.commit()
        rows = dict(
            (device, (status, landed, held, detail))
            for device, status, landed, held, detail in conn.execute(
                "SELECT device, status, rows_landed, rows_quarantined, detail FROM ops.collection_status "
                "WHERE run_id = %s",
                (run_id,),
            ).fetchall()
        )
        reasons = [
            r[0]
            for r in conn.execute(
                "SELECT reason FROM ops.quarantine WHERE run_id = %s ORDER BY id", (run_id,)
            ).fetchall()
        ]
    hosts = faulty_twin.extra["hosts"]
    assert rows[by_host[hosts[0]]][:3] == ("ok", 224, 0)
    assert rows[by_host[hosts[1]]][0] == "error" and rows[by_host[hosts[1]]][3] == "HTTP 500"
    assert rows[by_host[hosts[2]]][:3] == ("partial", 224, 3)
    assert rows[by_host[hosts[3]]][0] == "timeout"
    assert rows[by_host[hosts[4]]][:2] == ("no_data", 0)
    assert outcome.samples == 2 * 224
    assert reasons == [
        "label block not closed ('{' without '}')",
        "'not-a-number' is not 'value [timestamp]'",
        "line has a metric name but no value",
    ]
