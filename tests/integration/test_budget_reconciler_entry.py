"""``python -m controllers budget-reconciler`` as deployed: a real process against the Kubernetes
twin and a fresh database on the test server, configured by a site file's ``budget:`` section."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kubernetes import client

from connectors.kube import api_client
from connectors.warehouse import open_warehouse
from core.budget import BudgetConfig
from simulator.generator import generate
from simulator.kube import start
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from simulator.up import stop_pids

pytestmark = pytest.mark.integration
NS = "agents"
START = datetime(2026, 12, 31, 9, 0, tzinfo=UTC)


@dataclass
class Source:
    kubeconfig: Path | None = None
    context: str | None = None
    in_cluster: bool = False
    api_url: str | None = None


def _setup_over_budget_tree(core: client.CoreV1Api, conn: Any, config: BudgetConfig, root: str) -> None:
    """A root, two running leaves and one pending leaf, admitted through the ledger and created on
    the twin; then late telemetry says the tree used 12 GPU-h (as in test_budget_incident.py)."""
    from connectors.warehouse.ledger import admit
    from core.budget import PodRequest, parse_pod
    from simulator.budget_incident import PlannedPod, manifest

    for p in (
        PlannedPod(root, None, 0, "orchestrator", 0, 60, 1),
        PlannedPod(f"{root}-a", root, 1, "worker", 1, 60, 1),
        PlannedPod(f"{root}-b", root, 1, "worker", 2, 60, 1),
        PlannedPod(f"{root}-c", root, 1, "worker", 3, 60, 1),
    ):
        body = manifest(p, root, "acme", "standard")
        req = parse_pod(body, NS, config)
        assert isinstance(req, PodRequest), req
        assert admit(conn, req, START).allowed
        core.create_namespaced_pod(NS, body)  # type: ignore[arg-type]  # the client sends a dict as it is
        if not p.agent_id.endswith("-c"):
            core.patch_namespaced_pod_status(p.agent_id, NS, {"status": {"phase": "Running"}})
    conn.execute(
        "INSERT INTO agents.tree_usage (root_id, client, task, agent_type, tier, clusters, pods_total, live_pods, "
        "max_fan_out, gpus_live, gpu_hours, cost_usd, as_of) "
        "VALUES (%s,'acme','q4','orchestrator','standard','{twin}',4,4,3,4,12,36,%s)",
        (root, START),
    )


SITE = """\
version: 1
budget:
  governed_namespaces: [agents]
  envelopes:
    acme: {gpu_hours: 10, cost_usd: 100, max_live_pods: 10, max_depth: 3, max_fan_out: 10}
  usd_per_gpu_hour: {"*": 3}
  reconciler: {period_s: 0.2, stop_deadline_s: 30}
"""


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[client.CoreV1Api, Path]]:
    run = start(generate(load_spec(resolve_spec_path("h100-1su"))), tmp_path_factory.mktemp("budget-entry-twin"))
    kubeconfig = Path(run.extra["kubeconfig"])
    api = api_client(Source(kubeconfig=kubeconfig))
    try:
        yield client.CoreV1Api(api), kubeconfig
    finally:
        api.close()
        stop_pids(run.pids)


def _pods(core: client.CoreV1Api, root: str) -> dict[str, Any]:
    items = core.list_namespaced_pod(NS, label_selector=f"gpufabric.io/root-id={root}").items
    return {str(p.metadata.name): p for p in items if p.metadata is not None}


def test_dry_run_then_enforcing_then_sigterm(
    twin: tuple[client.CoreV1Api, Path], fresh_database_url: str, tmp_path: Path
) -> None:
    from pipelines.settings import budget_config_from_settings, load_settings

    core, kubeconfig = twin
    site = tmp_path / "gpufabric.yaml"
    site.write_text(SITE)
    config: BudgetConfig = budget_config_from_settings(load_settings(site))
    root = "entry-root"
    wh = open_warehouse(fresh_database_url)
    env = {**os.environ, "GPUFABRIC_DATABASE_URL": fresh_database_url}
    cmd = [
        sys.executable,
        "-m",
        "controllers",
        "budget-reconciler",
        "--config",
        str(site),
        "--kubeconfig",
        str(kubeconfig),
    ]
    try:
        with psycopg.connect(fresh_database_url, autocommit=True) as conn:
            _setup_over_budget_tree(core, conn, config, root)  # 12 GPU-h measured of a 10 GPU-h envelope

            # Dry run (the default): the plan is audited, nothing changes.
            dry = subprocess.run([*cmd, "--once"], env=env, capture_output=True, text=True, timeout=120)
            assert dry.returncode == 0, dry.stderr
            assert "dry run" in dry.stderr
            rows = conn.execute(
                "SELECT action, pod, reason, alert_only FROM agents.budget_audit ORDER BY id"
            ).fetchall()
            assert [(a, p) for a, p, _, _ in rows] == [
                ("alert", f"{root}-c"),
                ("alert", f"{root}-b"),
                ("alert", f"{root}-a"),
            ]
            assert rows[0][2].startswith(f"dry run: would gate: root {root} over envelope: gpu_hours 12 > 10")
            assert all(r[2].startswith("dry run: would ") and r[3] for r in rows)
            assert conn.execute("SELECT state FROM agents.envelopes WHERE root_id = %s", (root,)).fetchone() == (
                "open",
            )
            pods = _pods(core, root)
            assert len(pods) == 4 and not (pods[f"{root}-c"].metadata.annotations or {}).get("gpufabric.io/suspended")

            # Enforcing: the pending leaf is suspended, the running leaves are stopped, the root stays.
            live = subprocess.run(
                [*cmd, "--once", "--no-dry-run"], env=env, capture_output=True, text=True, timeout=120
            )
            assert live.returncode == 0, live.stderr
            assert conn.execute("SELECT state FROM agents.envelopes WHERE root_id = %s", (root,)).fetchone() == (
                "over_budget",
            )
            steps = conn.execute(
                "SELECT action, pod FROM agents.budget_audit WHERE NOT alert_only ORDER BY id"
            ).fetchall()
            assert steps[0] == ("gate", f"{root}-c")
            assert {a for a, _ in steps[1:]} <= {"deadline", "delete"} and len(steps) == 3
            pods = _pods(core, root)
            assert root in pods and pods[f"{root}-c"].metadata.annotations["gpufabric.io/suspended"] == "true"

            last_id = conn.execute("SELECT max(id) FROM agents.budget_audit").fetchone()[0]  # type: ignore[index]

        # The loop: runs until SIGTERM, then exits 0 promptly.
        proc = subprocess.Popen(
            [*cmd, "--period", "0.2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 60
            with psycopg.connect(fresh_database_url, autocommit=True) as watch:
                while time.monotonic() < deadline and proc.poll() is None:  # wait for the first pass
                    if watch.execute("SELECT 1 FROM agents.budget_audit WHERE id > %s", (last_id,)).fetchone():
                        break
                    time.sleep(0.1)
            time.sleep(2)  # several more passes over the same over-budget tree
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err
        assert "budget reconciler started (dry run, every 0.2s" in err
        assert "budget reconciler stopped after" in err and "Traceback" not in err
        passes = int(err.split("budget reconciler stopped after ")[1].split()[0])
        with psycopg.connect(fresh_database_url, autocommit=True) as conn:
            written = [
                (pod, ":".join(reason.split(":")[:2]))
                for pod, reason in conn.execute(
                    "SELECT pod, reason FROM agents.budget_audit WHERE id > %s ORDER BY id", (last_id,)
                )
            ]
        # Over budget on every pass, yet each (pod, step) the dry run would take is written once.
        assert passes >= 3 and written and len(written) == len(set(written)), (passes, written)
        assert all(step.startswith("dry run: would ") for _, step in written)
    finally:
        wh.dispose()
