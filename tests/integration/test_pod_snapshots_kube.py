"""The pod snapshot asset against the real control plane: list, then watch, over a real socket.

The test registers the 32 nodes of h100-1su under names of its own and creates pods bound to
them (``spec.nodeName``); the node agent starts them, and the test then backdates each pod's
``status.startTime`` by half an hour, as kubelet would show a pod that has been running that
long. While the asset watches, the test creates one more child of the agent tree and deletes
another (a graceful delete the node agent finishes). Then the landed rows, the node capacity,
the quarantine/status bookkeeping and ``agents.tree_usage`` are checked. A second configured
cluster that refuses connections is reported unreachable and the run goes on. A second test
hands the asset a watch the API server has expired (410, through the fault proxy).
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
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
from simulator.agents.plane import spec_nodes, wait_for_no_foreign_pods, wait_until
from simulator.controlplane.api import tls_context
from simulator.controlplane.identity import install_rbac, service_account_kubeconfig

pytestmark = pytest.mark.integration
P = "gpufabric.io"
POD_WATCHES = re.compile(r'^apiserver_longrunning_requests\{[^}]*resource="pods"[^}]*verb="WATCH"[^}]*\} (\d+)$', re.M)


@pytest.fixture
def env(warehouse: Warehouse, kube_cluster: Any, kube_namespace: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    prefix = f"snap{uuid.uuid4().hex[:6]}"
    nodes = kube_cluster.register_nodes(spec_nodes("h100-1su", prefix))
    name = f"t_snap_{uuid.uuid4().hex[:10]}"
    admin_url = warehouse.base_url.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = warehouse.base_url.set(database=name).render_as_string(hide_password=False)
    api = api_client(ClusterTarget(kubeconfig=kube_cluster.kubeconfig))
    wh = open_warehouse(url)
    try:
        yield {"wh": wh, "url": url, "plane": kube_cluster, "api": api, "ns": kube_namespace,
               "nodes": sorted(nodes), "work": tmp_path}  # fmt: skip
    finally:
        wh.dispose()
        api.close()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def site_file(env: dict[str, Any], kubeconfig: Path) -> tuple[Path, str]:
    cluster = f"kube-{uuid.uuid4().hex[:6]}"
    site = env["work"] / "gpufabric.yaml"
    site.write_text(yaml.safe_dump({"version": 1, "sources": {"kubernetes": [
        {"name": cluster, "kubeconfig": str(kubeconfig)},
        {"name": "gone", "api_url": "http://127.0.0.1:9"},  # nothing listens on the discard port
    ]}}))  # fmt: skip
    return site, cluster


def make_pod(core: client.CoreV1Api, ns: str, name: str, labels: dict[str, str], requests: dict[str, str],
             node: str, started: datetime) -> str:
    """A pod bound to ``node``, Running (the node agent), showing ``started`` as its start time."""
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "agent",
                                                       "resources": {"requests": requests, "limits": requests}}]}}
    created = core.create_namespaced_pod(ns, body)
    wait_until(f"{name} to run", lambda: core.read_namespaced_pod(name, ns).status.phase == "Running")
    core.patch_namespaced_pod_status(name, ns, {"status": {"startTime": started.strftime("%Y-%m-%dT%H:%M:%SZ")}})
    return str(created.metadata.uid)


def pod_watches(plane: Any) -> int:
    """Open watches on pods, as the API server's own metrics count them."""
    with httpx.Client(verify=tls_context(plane.ca_file, plane.admin_cert, plane.admin_key), timeout=10) as http:
        text = http.get(f"{plane.server}/metrics").text
    return sum(int(n) for n in POD_WATCHES.findall(text))


def materialize(env: dict[str, Any], site: Path, watch_seconds: float) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [k8s_pod_snapshots],
        resources={"warehouse": WarehouseResource(url=env["url"]), "site": SiteConfigResource(path=str(site)),
                   "finops": FinOpsResource(watch_seconds=watch_seconds)},
    )


def asset_metadata(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    meta = {str(m.asset_key): m.metadata for m in result.get_asset_materialization_events()
            for m in [m.materialization]}  # fmt: skip
    return meta[str(dg.AssetKey(["raw", "k8s_pod_snapshots"]))]


def test_list_and_watch_land_snapshots_and_tree_usage(env: dict[str, Any]) -> None:
    core = client.CoreV1Api(env["api"])
    ns, nodes = env["ns"], env["nodes"]
    # The asset reads as deploy/pipeline's ServiceAccount, bound only by the RBAC shipped there.
    install_rbac(env["plane"])
    site, cluster = site_file(env, service_account_kubeconfig(env["plane"], "gpufabric-pipeline"))
    root = str(uuid.uuid4())
    started = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    tree = {f"{P}/client": "globex", f"{P}/task": "triage", f"{P}/tier": "interactive", f"{P}/root-id": root}
    root_uid = make_pod(core, ns, "planner", {**tree, f"{P}/depth": "0", f"{P}/agent-type": "planner"},
                        {"nvidia.com/gpu": "1"}, nodes[0], started)
    child = {**tree, f"{P}/depth": "1", f"{P}/parent-id": root_uid}
    make_pod(core, ns, "coder-1", {**child, f"{P}/agent-type": "coder"}, {"nvidia.com/gpu": "1"},
             nodes[0], started)
    make_pod(core, ns, "coder-2", {**child, f"{P}/agent-type": "coder"}, {"nvidia.com/gpu": "2"},
             nodes[1], started)
    make_pod(core, ns, "bare", {}, {"nvidia.com/gpu": "1"}, nodes[2], started)
    make_pod(core, ns, "odd", {f"{P}/client": "umbrella"}, {"example.com/gpu-share": "1"}, nodes[2], started)
    wait_for_no_foreign_pods(env["plane"], [ns])  # the asset lists every pod of the cluster
    watches_before = pod_watches(env["plane"])
    failures: list[BaseException] = []

    def during_watch() -> None:
        try:  # once the asset's watch is open (one more pod watch on the API server)
            wait_until("the asset's pod watch", lambda: pod_watches(env["plane"]) > watches_before, 60, 0.1)
            make_pod(core, ns, "browser-1", {**child, f"{P}/agent-type": "browser"},
                     {"nvidia.com/mig-1g.10gb": "1"}, nodes[3], datetime.now(UTC).replace(microsecond=0))
            core.delete_namespaced_pod("coder-1", ns)
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    worker = threading.Thread(target=during_watch)
    worker.start()
    result = materialize(env, site, watch_seconds=6)
    worker.join()
    assert failures == []
    assert result.success
    pod_meta = asset_metadata(result)
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
        nodes_row = cur.execute("SELECT count(*) AS n, sum(gpu_count) AS gpus, min(gpu_model) AS model "
                                "FROM raw.k8s_node_snapshots WHERE source = %s", (cluster,)).fetchone()
        assert nodes_row == {"n": 32, "gpus": 256, "model": "NVIDIA-H100-80GB-HBM3"}
        status = cur.execute("SELECT device, status, rows_landed FROM ops.collection_status ORDER BY device").fetchall()
        assert [(s["device"], s["status"]) for s in status] == [("gone", "unreachable"), (cluster, "ok")]
        usage = cur.execute("SELECT * FROM agents.tree_usage WHERE root_id = %s", (root,)).fetchone()
    assert usage is not None
    assert (usage["client"], usage["agent_type"]) == ("globex", "planner")
    assert (usage["pods_total"], usage["live_pods"]) == (4, 3)
    assert (usage["max_depth"], usage["max_fan_out"]) == (1, 3)
    assert usage["gpus_live"] == Decimal("3.142857143")  # planner 1 + coder-2 2 + browser 1g = 1/7
    assert usage["gpu_hours"] > Decimal("1.5")  # 30 min of 4 GPUs already, plus the watch
    # No rate cards in this database (dbt never seeded it): cost is unknown, never made up.
    assert usage["cost_usd"] is None and usage["burn_rate_usd_per_hour"] is None and usage["unpriced_pods"] == 4


def test_an_expired_watch_keeps_the_listed_rows_and_says_the_next_run_relists(
    env: dict[str, Any], faults: Any
) -> None:
    """The API server (here the fault proxy in front of it) answers the asset's watch with 410
    Gone: the rows of the list still land, and the cluster's status says the next run relists."""
    core = client.CoreV1Api(env["api"])
    ns, nodes = env["ns"], env["nodes"]
    site, cluster = site_file(env, Path(faults.kubeconfig))
    make_pod(core, ns, "solo", {f"{P}/client": "initech", f"{P}/root-id": "solo", f"{P}/depth": "0"},
             {"nvidia.com/gpu": "1"}, nodes[0], datetime.now(UTC).replace(microsecond=0))
    wait_for_no_foreign_pods(env["plane"], [ns])
    faults.set_faults([{"paths": ["/api/v1/pods"], "methods": ["GET"], "expire_watches_next": 1}])
    result = materialize(env, site, watch_seconds=30)  # the 410 ends the watch long before
    assert result.success
    assert asset_metadata(result)["clusters_by_status"].data == {"ok": 1, "unreachable": 1}
    with env["wh"].connect() as conn:
        rows = conn.execute("SELECT name, event FROM raw.k8s_pod_snapshots WHERE namespace = %s", (ns,)).fetchall()
        status = conn.execute("SELECT status, detail FROM ops.collection_status WHERE device = %s",
                              (cluster,)).fetchall()  # fmt: skip
    assert rows == [("solo", "list")]
    assert status == [("ok", "watch expired: the next run relists")]
