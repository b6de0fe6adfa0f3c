"""``gpufabric sim up`` on the real control plane, as issue 26 says it is done:

``gpufabric sim up --spec h100-1su``; ``kubectl --kubeconfig "$(gpufabric sim kubeconfig)" version``
names the real server version and ``kubectl get nodes`` lists the spec's nodes; after
``gpufabric publish`` they carry our labels and ``kubectl get clusterqueues,resourceflavors,topologies``
lists ours. Then a ``sim up`` for another spec reuses the plane and swaps its nodes, and
``gpufabric sim down`` leaves none of its processes alive.

Everything is the CLI as a subprocess and the pinned kubectl, in a data directory of this test's
own (so ``sim down``, which stops every twin recorded in its data directory, cannot reach the
session's shared plane and twins) and a fresh database on the session's server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from core.publish.kueue import MANAGED_BY
from simulator.controlplane import Binaries, Versions, status
from simulator.generator import generate
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from simulator.twin import alive, reap
from simulator.up import plane_workdir, sim_down

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def ours(labels: dict[str, str]) -> dict[str, str]:
    """The labels under our prefixes (``fabric.gpufabric.io``, ``accelerator.gpufabric.io``, ``gpufabric.io``)."""
    return {k: v for k, v in labels.items() if k.split("/")[0].endswith("gpufabric.io")}


@pytest.fixture
def site(tmp_path: Path, fresh_database_url: str) -> Iterator[dict[str, str]]:
    """The environment of a CLI with a data directory and database of its own; whatever the test
    leaves running there is stopped at the end, pass or fail."""
    data = tmp_path / "data"
    env = {"GPUFABRIC_DATA_DIR": str(data), "GPUFABRIC_DATABASE_URL": fresh_database_url}
    try:
        yield env
    finally:
        sim_down(data / "sim")
        reap(data, only_orphaned=False)


def cli(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **env},
    )  # fmt: skip


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def kubectl(binaries: Binaries, kubeconfig: str, *args: str) -> Any:
    result = subprocess.run([str(binaries.kubectl), "--kubeconfig", kubeconfig, *args, "-o", "json"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_sim_up_runs_the_real_plane_publish_reaches_it_and_sim_down_stops_it(
    site: dict[str, str], kube_binaries: Binaries, fresh_database_url: str, tmp_path: Path
) -> None:
    truth = generate(load_spec(resolve_spec_path("h100-1su")))
    hosts = {h.id for h in truth.hosts()}
    plane_dir = plane_workdir(Path(site["GPUFABRIC_DATA_DIR"]) / "sim")

    up = ok(cli(site, "sim", "up", "--spec", "h100-1su"))
    assert "simulated h100-1su: 32 nodes, 256 GPUs" in up
    kubeconfig = ok(cli(site, "sim", "kubeconfig")).strip()
    assert kubeconfig == str(plane_dir / "kubeconfigs" / "admin.kubeconfig")
    assert f"kubeconfig:  {kubeconfig}" in up

    # A real API server, the pinned release on both sides.
    version = kubectl(kube_binaries, kubeconfig, "version")
    pinned = Versions.load().kubernetes
    assert version["serverVersion"]["gitVersion"] == pinned == version["clientVersion"]["gitVersion"]

    nodes = kubectl(kube_binaries, kubeconfig, "get", "nodes")["items"]
    assert {n["metadata"]["name"] for n in nodes} == hosts
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3" and labels["nvidia.com/gpu.count"] == "8"
        assert ours(labels) == {}, "nothing is published yet"
        assert node["spec"]["providerID"] == f"gpufabric-sim://h100-1su/{node['metadata']['name']}"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    # The site file names the plane: the cluster our publisher writes to and the GFD NVLink source.
    config = Path(up.split("site config: ")[1].split()[0])
    site_text = config.read_text()
    assert f"kubeconfig: {kubeconfig}" in site_text and "kind: kubernetes" in site_text

    # A topology version from the twins (NVLink domains read from the plane's GFD labels), then publish.
    # raw/ib_ports comes with ib_nodes and ib_links (one multi-asset, not subsettable).
    ok(cli(site, "run", "--select", '+key:"topology/fabric_model" or key:"raw/ib_ports"'))
    published = ok(cli(site, "publish"))
    assert "32 of 32 nodes change" in published and ": applied (run 1)" in published, published
    with psycopg.connect(fresh_database_url) as conn:
        row = conn.execute("SELECT cluster, status, desired FROM publish.runs WHERE id = 1").fetchone()
    assert row is not None and row[:2] == ("sim", "applied")
    desired = row[2]

    nodes = kubectl(kube_binaries, kubeconfig, "get", "nodes", "--show-managed-fields")["items"]
    assert {n["metadata"]["name"] for n in nodes} == hosts
    for node in nodes:
        name, labels = node["metadata"]["name"], node["metadata"]["labels"]
        assert ours(labels) == desired["labels"][name] != {}, name
        # HGX: each node is its own NVLink domain, read back through the plane's GFD labels.
        assert labels["accelerator.gpufabric.io/domain"] == f"nvl-{name}"
        managers = {(m["manager"], m["operation"], m.get("subresource", "")) for m in node["metadata"]["managedFields"]}
        assert {("gpufabric", "Apply", ""), ("gpufabric", "Apply", "status")} <= managers
        for key, value in desired["resources"][name].items():
            assert node["status"]["capacity"][key] == value == node["status"]["allocatable"][key]
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"  # the device plugin's, untouched

    kueue = kubectl(kube_binaries, kubeconfig, "get", "clusterqueues,resourceflavors,topologies")["items"]
    by_kind: dict[str, set[str]] = {}
    for obj in kueue:
        assert obj["metadata"]["labels"][MANAGED_BY] == "gpufabric"
        by_kind.setdefault(obj["kind"], set()).add(obj["metadata"]["name"])
    expected: dict[str, set[str]] = {}
    for obj in desired["objects"]:
        if obj["kind"] in ("ClusterQueue", "ResourceFlavor", "Topology"):
            expected.setdefault(obj["kind"], set()).add(obj["metadata"]["name"])
    assert by_kind == expected
    assert by_kind["ClusterQueue"] == {"research", "inference"}  # the simulated site's two teams

    # Kueue itself took them up: its controller marks both ClusterQueues Active (flavors, topology
    # and cohorts all exist). Polled: Kueue reconciles after the apply returns.
    def inactive() -> dict[str, Any]:
        queues = kubectl(kube_binaries, kubeconfig, "get", "clusterqueues")["items"]
        states = {q["metadata"]["name"]: {c["type"]: c for c in q.get("status", {}).get("conditions", [])}
                  for q in queues}  # fmt: skip
        return {name: c.get("Active") for name, c in states.items() if c.get("Active", {}).get("status") != "True"}

    deadline = time.monotonic() + 120
    while inactive() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert inactive() == {}

    # Re-runnable: the same publish again changes nothing and is not refused.
    again = ok(cli(site, "publish"))
    assert "0 of 32 nodes change" in again and ": applied (run 2)" in again, again

    # Another spec on the running plane: the same plane, only that spec's nodes, none of the old labels.
    before = status(plane_dir)
    assert before is not None
    half = tmp_path / "h100-half.yaml"
    half.write_text(
        (ROOT / "simulator/specs/h100-1su.yaml").read_text()
        .replace("name: h100-1su", "name: h100-half").replace("nodes_per_su: 32", "nodes_per_su: 16")
        .replace("dgx[001-032]", "dgx[001-016]").replace("r[01-08]", "r[01-04]")
    )  # fmt: skip
    switched = ok(cli(site, "sim", "up", "--spec", str(half)))
    # All 32 go: dgx001-016 of h100-half are other machines than h100-1su's (providerID says so).
    assert "32 nodes of another spec removed" in switched, switched
    after = status(plane_dir)
    assert after is not None and after.pids == before.pids and after.server == before.server
    nodes = kubectl(kube_binaries, kubeconfig, "get", "nodes")["items"]
    assert {n["metadata"]["name"] for n in nodes} == {f"dgx{i:03d}" for i in range(1, 17)}
    for node in nodes:
        assert node["spec"]["providerID"] == f"gpufabric-sim://h100-half/{node['metadata']['name']}"
        assert ours(node["metadata"]["labels"]) == {}, "a node of the new spec is a new machine"

    twin_pids = [p for run in json.loads((plane_dir.parent / "state.json").read_text())["runs"] for p in run["pids"]]
    assert twin_pids and all(alive(p) for p in twin_pids)
    down = ok(cli(site, "sim", "down"))
    assert "stopped" in down
    assert [p for p in [*after.pids.values(), *twin_pids] if alive(p)] == []
    assert status(plane_dir) is None
    gone = cli(site, "sim", "kubeconfig")
    assert gone.returncode == 1 and gone.stdout == ""
    assert gone.stderr.startswith("error: no Kubernetes control plane is running in ")
    assert "gpufabric sim up" in gone.stderr and "Traceback" not in gone.stderr
