"""The CLI as a user runs it: the demo pipeline, clear errors, and the Dagster UI over HTTP."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from connectors.warehouse import data_dir
from core.publish.kueue import MANAGED_BY
from pipelines.instance import dagster_home
from simulator.agents.live import plan_trees
from simulator.controlplane import Versions, status
from simulator.generator import generate
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from simulator.twin import alive
from simulator.up import plane_workdir, sim_down
from tests.e2e.browser import chromium, click_button, images, open_markdown_entry, open_page, screenshot

ROOT = Path(__file__).resolve().parents[2]
GPUFABRIC = [sys.executable, "-m", "pipelines.cli"]


def cli(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUFABRIC, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def _dagster_runs(warehouse) -> int:  # type: ignore[no-untyped-def]
    with warehouse.connect() as conn:
        row = conn.execute("SELECT count(*) FROM runs").fetchone()
    return int(row[0]) if row else 0


def _ours(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k.split("/")[0].endswith("gpufabric.io")}


def test_demo_runs_the_pipeline_and_keeps_run_history(warehouse, kube_binaries) -> None:  # type: ignore[no-untyped-def]
    # The demo's cluster is the real control plane `sim up` starts in this session's data dir.
    sim_root = data_dir() / "sim"
    with warehouse.connect() as conn:
        publishes_before = conn.execute("SELECT coalesce(max(id), 0) FROM publish.runs").fetchone()[0]
    try:
        first = cli("demo", timeout=900)  # a hang guard: a loaded 2-core machine takes minutes
        assert first.returncode == 0, first.stderr + first.stdout
        assert "128 nodes, 1024 GPUs" in first.stdout
        # No noise: paramiko's bare "Socket exception" lines for the fault switch that resets SSH
        # sessions (its status row says it), dbt's log (in the run's output file instead) and its
        # unused-config warning.
        for noise in ("Socket exception", "Running with dbt", "unused configuration paths", "START sql"):
            assert noise not in first.stdout + first.stderr, noise
        log = re.search(r"run ([0-9a-f-]{36})", first.stdout)
        assert log is not None
        step_output = (dagster_home() / "logs" / f"run-{log[1]}.log").read_text()
        assert "Running with dbt" in step_output and "unused configuration paths" not in step_output
        assert "raw/dcim_inventory" in first.stdout and "nodes_landed=128" in first.stdout
        # The story: agent trees run on the cluster, so the snapshots, the cost fact and the trees'
        # budget usage show money, per client and tier (issue 24, part 3).
        agents = plan_trees(["agents"])
        roots = [p for p in agents if p.parent_id is None]
        assert (
            f"{len(agents)} pods in {len(roots)} agent trees created in namespace agents, each admitted "
            "by the budget webhook" in first.stdout
        )
        # The webhook reserved each agent in the ledger; the sub-agents finished before the run, so
        # settlement replaced their reservations with measured cost; the planners still run.
        settled = re.search(r"budget settlement \(agents/budget_settlement\): (\d+) finished agents'", first.stdout)
        assert settled is not None and int(settled[1]) == len(agents) - len(roots), first.stdout[-3000:]
        assert f"{len(roots)} still reserved (agents still running)" in first.stdout
        landed = re.search(r"pod_rows_landed=(\d+)", first.stdout)
        assert landed is not None and int(landed[1]) >= 40
        live = first.stdout.split("cost so far on sim")[1].split("the simulated week of history")[0]
        costs = dict(re.findall(r"│ (globex|initech|umbrella) +│ \S+ +│ (\d+\.\d\d) ", live))
        assert set(costs) == {"globex", "initech", "umbrella"} and all(float(c) > 0 for c in costs.values()), costs
        assert "agent trees against their budget envelope" in first.stdout
        # A week of simulated agent history (landed once, through the collectors' loaders) gives the
        # detector a baseline, and its runaway tree in the current hour is the anomaly it finds.
        assert "a simulated week of agent history (simulator/agents/week.py, cluster agents-week)" in first.stdout
        anomalies = re.search(r"cost anomalies \(finops.cost_anomalies\): (\d+)", first.stdout)
        assert anomalies is not None and int(anomalies[1]) >= 1, first.stdout[-3000:]
        runaway = r"^  \S+ \S+ globex/\w+/interactive: \$\d+\.\d\d against"
        assert re.search(runaway, first.stdout, re.M), first.stdout[-3000:]
        plane = status(plane_workdir(sim_root))
        assert plane is not None and f"Kubernetes {plane.kubernetes_version} at {plane.server}" in first.stdout
        runs_after_first = _dagster_runs(warehouse)
        # What a user does next: `sim up` again reuses the twins and the very same control plane
        # processes, and publishing again (one asset, through `gpufabric run`, the same runner the
        # demo used) changes nothing. (A whole second demo proved no more and cost ~35 s.)
        again_up = cli("sim", "up", "--spec", "h100-4su")
        assert again_up.returncode == 0, again_up.stderr + again_up.stdout
        assert "(already running, reused)" in again_up.stdout
        again = status(plane_workdir(sim_root))
        assert again is not None and again.pids == plane.pids
        second = cli("run", "--select", "key:publish/cluster_state", "--config", str(sim_root / "gpufabric.yaml"))
        assert second.returncode == 0, second.stderr + second.stdout
        assert "publish/cluster_state" in second.stdout
        # Run history lives in the same Postgres (dagster-postgres): each run adds exactly one.
        assert _dagster_runs(warehouse) == runs_after_first + 1
        with warehouse.connect() as conn:
            latest = conn.execute(
                "SELECT run_id, status, rows_landed FROM ops.collection_status WHERE source = 'dcim' "
                "ORDER BY finished_at DESC LIMIT 1"
            ).fetchone()
            assert latest is not None and latest[1:] == ("ok", 128)
            assert conn.execute(
                "SELECT count(DISTINCT node) FROM raw.dcim_inventory WHERE run_id = %s", (latest[0],)
            ).fetchone() == (128,)
            # dbt ran too: the staging view shows the latest collection of the demo's export only once.
            assert conn.execute(
                "SELECT count(*), count(DISTINCT node) FROM staging.stg_dcim_inventory WHERE source = 'dcim-export'"
            ).fetchone() == (128, 128)
            publishes = conn.execute(
                "SELECT cluster, mode, status, counts, desired FROM publish.runs WHERE id > %s ORDER BY id",
                (publishes_before,),
            ).fetchall()
        # Other tests' sources share this database, so the summary's totals are at least the demo's.
        summary = re.search(
            r"current inventory \(staging.stg_dcim_inventory\): (\d+) nodes in (\d+) racks", first.stdout
        )
        assert summary is not None and int(summary[1]) >= 128 and int(summary[2]) >= 32
        # The demo published to the plane; the second publish changed nothing and the blast-radius guard,
        # which compares with what the cluster carries, had nothing to refuse.
        assert [r[:3] for r in publishes] == [("sim", "apply", "applied")] * 2
        assert publishes[0][3]["nodes_changed"] == 128 and publishes[0][3]["objects_created"] > 0
        assert publishes[1][3]["nodes_changed"] == 0 and publishes[1][3]["objects_changed"] == 0
        # The labels are on the API server's Node objects (one per simulated host), exactly as the
        # publish meant them. (The desired state also names LLDP neighbours that are no nodes of the
        # cluster, e.g. a fault switch's "peer": the publisher skips those.)
        desired = publishes[1][4]["labels"]
        nodes = json.loads(plane.kubectl("get", "nodes", "-o", "json").stdout)["items"]
        hosts = {h.id for h in generate(load_spec(resolve_spec_path("h100-4su"))).hosts()}
        assert {n["metadata"]["name"] for n in nodes} == hosts
        for node in nodes:
            assert _ours(node["metadata"]["labels"]) == desired[node["metadata"]["name"]] != {}
            assert node["spec"]["providerID"] == f"gpufabric-sim://h100-4su/{node['metadata']['name']}"

        # What a user does next (issue 26's check): kubectl on `sim kubeconfig` names the pinned real
        # server, and lists our Kueue objects, which Kueue's own controller took up (Active).
        kubeconfig = cli("sim", "kubeconfig")
        assert kubeconfig.returncode == 0 and kubeconfig.stdout.strip() == str(plane.kubeconfig)
        kubectl = [str(kube_binaries.kubectl), "--kubeconfig", kubeconfig.stdout.strip()]
        version = json.loads(subprocess.run([*kubectl, "version", "-o", "json"], capture_output=True, text=True,
                                            timeout=120, check=True).stdout)  # fmt: skip
        assert version["serverVersion"]["gitVersion"] == Versions.load().kubernetes
        listed = json.loads(
            subprocess.run(
                [*kubectl, "get", "clusterqueues,resourceflavors,topologies", "-o", "json"],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            ).stdout
        )["items"]
        wanted = {(o["kind"], o["metadata"]["name"]) for o in publishes[1][4]["objects"]
                  if o["kind"] in ("ClusterQueue", "ResourceFlavor", "Topology")}  # fmt: skip
        assert {(o["kind"], o["metadata"]["name"]) for o in listed} == wanted
        assert {name for kind, name in wanted if kind == "ClusterQueue"} == {"research", "inference"}
        assert all(o["metadata"]["labels"][MANAGED_BY] == "gpufabric" for o in listed)
        queues = [o for o in listed if o["kind"] == "ClusterQueue"]
        assert all(any(c["type"] == "Active" and c["status"] == "True" for c in q["status"]["conditions"])
                   for q in queues), queues  # fmt: skip
    finally:
        sim_down(sim_root)
    assert status(plane_workdir(sim_root)) is None
    assert [pid for pid in plane.pids.values() if alive(pid)] == []
    gone = cli("sim", "kubeconfig")
    assert gone.returncode == 1 and gone.stdout == "" and "Traceback" not in gone.stderr
    assert gone.stderr.startswith("error: no Kubernetes control plane is running in ")
    assert "gpufabric sim up" in gone.stderr


def test_db_url_and_status(warehouse) -> None:  # type: ignore[no-untyped-def]
    url = cli("db", "url")
    assert url.returncode == 0
    assert url.stdout.strip() == warehouse.display_url
    status = cli("db", "status")
    assert status.returncode == 0, status.stderr
    assert "ops.collection_status" in status.stdout and "embedded" in status.stdout


def _assert_clear_error(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.startswith("error:")
    for text in expected:
        assert text in result.stderr, result.stderr


def test_bad_site_file_is_one_clear_message(tmp_path: Path) -> None:
    bad = tmp_path / "gpufabric.yaml"
    bad.write_text("version: 1\nsources:\n  dcim:\n    - name: x\n      path: a.csv\n      colour: red\n")
    _assert_clear_error(cli("config", "validate", str(bad)), "gpufabric.yaml:6", "unknown key 'colour'")


def test_bad_spec_is_one_clear_message(tmp_path: Path) -> None:
    spec = (ROOT / "simulator/specs/h100-1su.yaml").read_text().replace("nodes_per_su: 32", "nodes_per_su: thirty")
    bad = tmp_path / "spec.yaml"
    bad.write_text(spec)
    line = next(i for i, t in enumerate(spec.splitlines(), 1) if "nodes_per_su" in t)
    _assert_clear_error(cli("sim", "spec", "validate", str(bad)), "nodes_per_su", f"line {line}")
    ok = cli("sim", "spec", "validate", "b200-16su")
    assert ok.returncode == 0 and "512 nodes, 4096 GPUs" in ok.stdout
    assert "(leaf 128, spine 128, core 64)" in ok.stdout


def test_unknown_selection_names_the_known_assets() -> None:
    _assert_clear_error(cli("run", "--select", "key:no/such_asset"), "raw/dcim_inventory")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _graphql(port: int, query: str) -> dict[str, object]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid``, from /proc (children in other process groups included)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        if fields[0] != "Z":
            parents[int(stat.parent.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def test_ui_serves_the_assets_in_a_browser_runs_from_it_and_stops(warehouse, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if _dagster_runs(warehouse) == 0:
        assert cli("run").returncode == 0
    port = _free_port()
    log = tmp_path / "ui.log"
    # Started as a background job of a non-interactive shell starts it (nohup, CI runners,
    # `make test &`): SIGINT ignored. That inherited SIG_IGN once kept dagster dev running.
    proc = subprocess.Popen(
        [*GPUFABRIC, "ui", "--port", str(port)],
        cwd=ROOT,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        deadline = time.monotonic() + 120
        assets: dict[str, object] | None = None
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            try:
                assets = _graphql(port, "{ assetNodes { assetKey { path } } }")
                if assets.get("data"):
                    break
            except OSError:
                pass
            time.sleep(1)
        assert assets is not None and assets.get("data"), "the UI did not answer within 120 s"
        paths = {"/".join(n["assetKey"]["path"]) for n in assets["data"]["assetNodes"]}  # type: ignore[index]
        assert {"raw/dcim_inventory", "staging/stg_dcim_inventory"} <= paths
        runs = _graphql(port, "{ runsOrError { ... on Runs { results { runId status } } } }")
        results = runs["data"]["runsOrError"]["results"]  # type: ignore[index]
        assert len(results) == _dagster_runs(warehouse) >= 1
        _check_in_chromium(port)
        children = _descendants(proc.pid)
        assert children, "dagster dev and its webserver and daemon run below gpufabric ui"
        # Under load, as on a busy CI machine: two CPU burners while it shuts down.
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        try:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)  # hang guard; the supervisor escalates to SIGKILL after ~17 s
        finally:
            for burner in burners:
                burner.kill()
                burner.wait()
        assert code == 0, log.read_text()
        # SIGTERM reached dagster dev as the Ctrl-C it handles: its own shutdown began.
        assert "Shutting down Dagster services" in log.read_text()
        assert not [pid for pid in children if alive(pid)], "a child of gpufabric ui outlived it"
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            # A failure before the SIGTERM is the one to report; this one only when it stands alone.
            if sys.exc_info()[0] is None:
                pytest.fail("gpufabric ui did not stop on SIGTERM")


def _check_in_chromium(port: int) -> None:
    """What a person sees in the UI (issue 24, part 5): the lineage lists every asset group the
    server has, the topology asset's page shows its description, diagram and checks, and a click on
    Materialize launches a run that succeeds. Screenshots of each page: tests/e2e/browser.py."""
    base = f"http://127.0.0.1:{port}"
    nodes = _graphql(
        port,
        "{ assetNodes { assetKey { path } groupName description "
        "assetChecksOrError { ... on AssetChecks { checks { name } } } } }",
    )["data"]["assetNodes"]  # type: ignore[index]
    by_key = {"/".join(n["assetKey"]["path"]): n for n in nodes}  # type: ignore[index]
    topology = by_key["topology/fabric_model"]
    checks = [c["name"] for c in topology["assetChecksOrError"]["checks"]]
    assert len(checks) >= 3
    with chromium() as browser:
        lineage = open_page(browser, f"{base}/asset-groups", until_text="topology")
        screenshot(browser, "lineage")
        assert {n["groupName"] for n in nodes} <= set(lineage.splitlines())
        page = open_page(browser, f"{base}/assets/topology/fabric_model", until_text=topology["description"])
        screenshot(browser, "topology-overview")
        assert "Latest materialization" in page and "findings_table" in page
        # The fabric diagram (issue 24, part 4): a PNG in the asset's metadata, drawn by the browser.
        open_markdown_entry(browser, "diagram")
        screenshot(browser, "topology-diagram")
        pngs = [src for src in images(browser) if src.startswith("data:image/png;base64,")]
        assert len(pngs) == 1 and base64.b64decode(pngs[0].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
        page = open_page(browser, f"{base}/assets/topology/fabric_model?view=checks", until_text=checks[0])
        screenshot(browser, "topology-checks")
        assert all(name in page for name in checks), page[:2000]
        # A run launched from the UI: the cheapest asset (the price book from the site file).
        before = {r["runId"] for r in _ui_runs(port)}
        open_page(browser, f"{base}/assets/finops/price_book", until_text=by_key["finops/price_book"]["description"])
        click_button(browser, "Materialize")
        deadline = time.monotonic() + 300  # hang guard: the run starts in a process of its own
        launched: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            launched = [r for r in _ui_runs(port) if r["runId"] not in before]
            if launched and launched[0]["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
                break
            time.sleep(1)
        assert len(launched) == 1, launched
        run = launched[0]
        assert {"key": "dagster/from_ui", "value": "true"} in run["tags"]  # type: ignore[operator]
        open_page(browser, f"{base}/runs/{run['runId']}", until_text=str(run["runId"])[:8])
        screenshot(browser, "run-from-ui")
        assert run["status"] == "SUCCESS", run


def _ui_runs(port: int) -> list[dict[str, object]]:
    answer = _graphql(port, "{ runsOrError(limit: 20) { ... on Runs { results { runId status tags { key value } } } } }"
                      )  # fmt: skip
    return answer["data"]["runsOrError"]["results"]  # type: ignore[index,no-any-return]


def test_db_psql_runs_against_the_warehouse(warehouse) -> None:  # type: ignore[no-untyped-def]
    result = cli(
        "db", "psql", "--", "-At", "-c", "SELECT current_database() || ':' || count(*) FROM ops.alembic_version"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(f"{warehouse.base_url.database}:")
