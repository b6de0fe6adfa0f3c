"""``python -m controllers budget-reconciler`` as deployed: a real process against the real
control plane (``kube_cluster``) and a fresh database on the test server, configured by a site
file's ``budget:`` section. Pod ages are the reconciler's clock minus the creationTimestamp the
API server stamped; the tree's pods run on a node of the test's own (see
``test_budget_incident._setup_over_budget_tree``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kubernetes import client

from connectors.kube import ClusterTarget, api_client
from connectors.warehouse import open_warehouse
from core.budget import BudgetConfig
from simulator.controlplane.identity import install_rbac, service_account_kubeconfig
from tests.integration.test_budget_incident import _setup_over_budget_tree, _wait_until_old, wait_for_pods

pytestmark = pytest.mark.integration

SITE = """\
version: 1
budget:
  governed_namespaces: [{namespace}]
  envelopes:
    acme: {{gpu_hours: 10, cost_usd: 100, max_live_pods: 10, max_depth: 3, max_fan_out: 10}}
  usd_per_gpu_hour: {{"*": 3}}
  reconciler: {{period_s: 0.2, stop_deadline_s: 600}}
"""


@pytest.fixture
def cluster(kube_cluster: Any) -> Iterator[tuple[Any, client.CoreV1Api, Path]]:
    """The plane, an admin client for the test, and the kubeconfig the reconciler runs with:
    ``deploy/budget``'s ServiceAccount, bound only by the RBAC shipped there."""
    api = api_client(ClusterTarget(kubeconfig=kube_cluster.kubeconfig))
    install_rbac(kube_cluster)
    try:
        yield kube_cluster, client.CoreV1Api(api), service_account_kubeconfig(kube_cluster, "gpufabric-budget")
    finally:
        api.close()


def _pods(core: client.CoreV1Api, namespace: str, root: str) -> dict[str, Any]:
    """The tree's pods, those being deleted left out."""
    items = core.list_namespaced_pod(namespace, label_selector=f"gpufabric.io/root-id={root}").items
    return {str(p.metadata.name): p for p in items if p.metadata is not None and not p.metadata.deletion_timestamp}


def test_dry_run_then_enforcing_then_sigterm(
    cluster: tuple[Any, client.CoreV1Api, Path], kube_namespace: str, fresh_database_url: str, tmp_path: Path
) -> None:
    from settings import budget_config_from_settings, load_settings

    plane, core, kubeconfig = cluster
    ns = kube_namespace
    site = tmp_path / "gpufabric.yaml"
    site.write_text(SITE.format(namespace=ns))
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
            # 12 GPU-h measured of a 10 GPU-h envelope; the API server stamps each pod's
            # creationTimestamp, and leaf -a is created a second after -b (newest by time, first by name)
            created = _setup_over_budget_tree(plane, core, ns, conn, config, root)

            # Dry run (the default): the plan is audited, nothing changes. The leaves are younger than
            # the site's 600 s stop deadline by the server's stamps, so they would get a deadline.
            dry = subprocess.run([*cmd, "--once"], env=env, capture_output=True, text=True, timeout=120)
            assert dry.returncode == 0, dry.stderr
            assert "dry run" in dry.stderr
            rows = conn.execute(
                "SELECT action, pod, reason, alert_only FROM agents.budget_audit ORDER BY id"
            ).fetchall()
            why = f"root {root} over envelope: gpu_hours 12 > 10"
            assert [(a, p, r) for a, p, r, _ in rows] == [
                ("alert", f"{root}-c", f"dry run: would gate: {why}"),
                ("alert", f"{root}-a", f"dry run: would deadline: {why}"),
                ("alert", f"{root}-b", f"dry run: would deadline: {why}"),
            ]
            assert all(r[3] for r in rows)
            assert conn.execute("SELECT state FROM agents.envelopes WHERE root_id = %s", (root,)).fetchone() == (
                "open",
            )
            pods = _pods(core, ns, root)
            assert len(pods) == 4 and not (pods[f"{root}-c"].metadata.annotations or {}).get("gpufabric.io/suspended")

            # Enforcing: the pending leaf is suspended, the running leaves (newest first) get the
            # 600 s deadline, the root stays.
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
            assert steps == [("gate", f"{root}-c"), ("deadline", f"{root}-a"), ("deadline", f"{root}-b")]
            pods = _pods(core, ns, root)
            assert root in pods and pods[f"{root}-c"].metadata.annotations["gpufabric.io/suspended"] == "true"
            assert pods[f"{root}-a"].spec.active_deadline_seconds == 600

            # Once the leaves are 1 s old by the server's stamps (real time, a second or two), a pass
            # with a 1 s stop deadline deletes the leaves still there, newest first.
            _wait_until_old(max(created.values()), 1)
            late = subprocess.run(
                [*cmd, "--once", "--no-dry-run", "--stop-deadline", "1"],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert late.returncode == 0, late.stderr
            steps = conn.execute(
                "SELECT action, pod FROM agents.budget_audit WHERE NOT alert_only ORDER BY id"
            ).fetchall()
            assert steps[3:] == [("delete", f"{root}-a"), ("delete", f"{root}-b")]
            assert sorted(_pods(core, ns, root)) == sorted([root, f"{root}-c"])
            wait_for_pods(core, ns, root, {root, f"{root}-c"})  # graceful deletion, finished by the node agent

            last_id = conn.execute("SELECT max(id) FROM agents.budget_audit").fetchone()[0]  # type: ignore[index]

        # The loop: runs until told to stop, then exits 0 promptly. Started as a background job of a
        # non-interactive shell is (SIGINT ignored) and stopped with SIGINT, the harder of the two:
        # SIGTERM takes the same handler.
        proc = subprocess.Popen(
            [*cmd, "--period", "0.2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
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
            proc.send_signal(signal.SIGINT)
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
        # Over budget on every pass, yet the one step the dry run would take (only the root and the
        # gated leaf are left: stop the root, last) is written once.
        assert passes >= 3 and written == [(root, "dry run: would deadline")], (passes, written)
    finally:
        wh.dispose()
