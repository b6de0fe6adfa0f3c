"""The pod snapshot asset against the Kubernetes API twin: list, then watch, over a real socket.

Pods are created in the twin (h100-1su's nodes) with the official client; while the asset watches,
a thread creates one more child of the agent tree and deletes another. Then the landed rows, the
node capacity, the quarantine/status bookkeeping and ``agents.tree_usage`` are checked. A second
configured cluster that refuses connections is reported unreachable and the run goes on.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import pytest
import yaml
from kubernetes import client
from psycopg import sql
from psycopg.rows import dict_row

from assets.finops.resources import FinOpsResource
from assets.finops.snapshots import k8s_pod_snapshots
from connectors.kube import ClusterTarget, api_client
from connectors.warehouse import Warehouse, open_warehouse
from pipelines.resources import SiteConfigResource, WarehouseResource
from simulator.generator import generate
from simulator.kube import start
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path

pytestmark = pytest.mark.integration
P = "gpufabric.io"


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def env(warehouse: Warehouse, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("finops-twin")
    run = start(generate(load_spec(resolve_spec_path("h100-1su"))), work / "kube")
    kubeconfig = Path(run.extra["kubeconfig"])
    cluster = f"twin-{uuid.uuid4().hex[:6]}"
    site = work / "gpufabric.yaml"
    site.write_text(yaml.safe_dump({"version": 1, "sources": {"kubernetes": [
        {"name": cluster, "kubeconfig": str(kubeconfig)},
        {"name": "gone", "api_url": "http://127.0.0.1:9"},  # nothing listens on the discard port
    ]}}))
    name = f"t_snap_{uuid.uuid4().hex[:10]}"
    admin_url = warehouse.base_url.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = warehouse.base_url.set(database=name).render_as_string(hide_password=False)

    api = api_client(ClusterTarget(kubeconfig=kubeconfig))
    try:
        yield {"wh": open_warehouse(url), "url": url, "site": site, "cluster": cluster, "api": api}
    finally:
        api.close()
        _stop(run.pids[0])
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def make_pod(core: client.CoreV1Api, ns: str, name: str, labels: dict[str, str], requests: dict[str, str],
             node: str, started: datetime) -> str:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "agent",
                                                       "resources": {"requests": requests, "limits": requests}}]}}
    created = core.create_namespaced_pod(ns, body)
    core.patch_namespaced_pod_status(name, ns, {"status": {"phase": "Running",
                                                           "startTime": started.strftime("%Y-%m-%dT%H:%M:%SZ")}})
    return str(created.metadata.uid)


def test_list_and_watch_land_snapshots_and_tree_usage(env: dict[str, Any]) -> None:
    core = client.CoreV1Api(env["api"])
    ns = f"agents-{uuid.uuid4().hex[:6]}"
    root = str(uuid.uuid4())
    started = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    tree = {f"{P}/client": "globex", f"{P}/task": "triage", f"{P}/tier": "interactive", f"{P}/root-id": root}
    root_uid = make_pod(core, ns, "planner", {**tree, f"{P}/depth": "0", f"{P}/agent-type": "planner"},
                        {"nvidia.com/gpu": "1"}, "dgx-h100-0001", started)
    child = {**tree, f"{P}/depth": "1", f"{P}/parent-id": root_uid}
    make_pod(core, ns, "coder-1", {**child, f"{P}/agent-type": "coder"}, {"nvidia.com/gpu": "1"},
             "dgx-h100-0001", started)
    make_pod(core, ns, "coder-2", {**child, f"{P}/agent-type": "coder"}, {"nvidia.com/gpu": "2"},
             "dgx-h100-0002", started)
    make_pod(core, ns, "bare", {}, {"nvidia.com/gpu": "1"}, "dgx-h100-0003", started)
    make_pod(core, ns, "odd", {f"{P}/client": "umbrella"}, {"example.com/gpu-share": "1"}, "dgx-h100-0003", started)

    def during_watch() -> None:
        time.sleep(1.5)
        make_pod(core, ns, "browser-1", {**child, f"{P}/agent-type": "browser"}, {"nvidia.com/mig-1g.10gb": "1"},
                 "dgx-h100-0004", datetime.now(UTC).replace(microsecond=0))
        core.delete_namespaced_pod("coder-1", ns)

    worker = threading.Thread(target=during_watch)
    worker.start()
    result = dg.materialize(
        [k8s_pod_snapshots],
        resources={"warehouse": WarehouseResource(url=env["url"]), "site": SiteConfigResource(path=str(env["site"])),
                   "finops": FinOpsResource(watch_seconds=4)},
    )
    worker.join()
    assert result.success
    meta = {str(m.asset_key): m.metadata for m in result.get_asset_materialization_events()
            for m in [m.materialization]}
    pod_meta = meta[str(dg.AssetKey(["raw", "k8s_pod_snapshots"]))]
    assert pod_meta["clusters_by_status"].data == {"ok": 1, "unreachable": 1}
    assert pod_meta["pods_by_issue"].data == {"labels_missing": 2, "gpu_requests_unknown": 1}
    assert pod_meta["pods_quarantined"].value == 0

    with env["wh"].connect() as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("SELECT * FROM raw.k8s_pod_snapshots WHERE namespace = %s ORDER BY collected_at",
                           (ns,)).fetchall()
        listed = {r["name"] for r in rows if r["event"] == "list"}
        assert listed == {"planner", "coder-1", "coder-2", "bare", "odd"}
        events = {(r["name"], r["event"]) for r in rows if r["event"] != "list"}
        assert ("browser-1", "ADDED") in events and ("coder-1", "DELETED") in events
        deleted = next(r for r in rows if r["event"] == "DELETED")
        assert deleted["end_time"] == deleted["collected_at"] and deleted["start_time"] == started
        bare = next(r for r in rows if r["name"] == "bare")
        assert (bare["client"], bare["task"], bare["tier"], bare["root_id"]) == ("unattributed",) * 4
        odd = next(r for r in rows if r["name"] == "odd")
        assert odd["unknown_gpu_resources"] == {"example.com/gpu-share": "1"} and odd["gpus"] == 0
        browser = next(r for r in rows if r["name"] == "browser-1")
        assert browser["mig"] == {"1g.10gb": 1} and browser["depth"] == 1 and browser["agent_type"] == "browser"
        nodes = cur.execute("SELECT count(*) AS n, sum(gpu_count) AS gpus, min(gpu_model) AS model "
                            "FROM raw.k8s_node_snapshots WHERE source = %s", (env["cluster"],)).fetchone()
        assert nodes == {"n": 32, "gpus": 256, "model": "NVIDIA-H100-80GB-HBM3"}
        status = cur.execute("SELECT device, status, rows_landed FROM ops.collection_status ORDER BY device").fetchall()
        assert [(s["device"], s["status"]) for s in status] == [("gone", "unreachable"), (env["cluster"], "ok")]
        usage = cur.execute("SELECT * FROM agents.tree_usage WHERE root_id = %s", (root,)).fetchone()
    assert usage is not None
    assert (usage["client"], usage["agent_type"]) == ("globex", "planner")
    assert (usage["pods_total"], usage["live_pods"]) == (4, 3)
    assert (usage["max_depth"], usage["max_fan_out"]) == (1, 3)
    assert usage["gpus_live"] == Decimal("3.142857143")  # planner 1 + coder-2 2 + browser 1g = 1/7
    assert usage["gpu_hours"] > Decimal("1.5")  # 30 min of 4 GPUs already, plus the watch
    # No rate cards in this database (dbt never seeded it): cost is unknown, never made up.
    assert usage["cost_usd"] is None and usage["burn_rate_usd_per_hour"] is None and usage["unpriced_pods"] == 4
