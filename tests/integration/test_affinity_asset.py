"""GPU-NIC affinity end to end (issue 23): the ``topology/gpu_affinity`` asset over the h100-4su
twins (the node agent's drop directory and the fabric model), checked against the ground truth;
``topology show`` carrying each host's GPU-to-rail map; and the label, annotation and DRA claim
template judged by the real API server (server-side dry run, strict field validation)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from typer.testing import CliRunner

from assets.affinity import gpu_affinity
from assets.affinity.assets import check_name
from connectors.warehouse import open_warehouse
from core.affinity import FINDING_KINDS
from core.affinity.fleet import derive_fleet
from core.affinity.render import node_patch, resource_claim_template
from core.topology import derive
from pipelines.cli_topology import app as topology_app
from pipelines.resources import SiteConfigResource, WarehouseResource
from services.topology import write_snapshot
from simulator.generator import generate
from simulator.gpu_topo import ExpectedFinding
from simulator.node_agent import FAULT_TRUNCATED
from tests.unit.test_topology_support import AT, observe, spec_of

pytestmark = pytest.mark.integration


def test_asset_on_h100_4su_reports_exactly_the_ground_truth(
    simulated: Any, fresh_database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sim = simulated("h100-4su")
    monkeypatch.setenv("GPUFABRIC_DATABASE_URL", fresh_database_url)
    wh = open_warehouse()
    with wh.connect() as conn:  # the fabric model the asset takes the NICs' rails from
        version = write_snapshot(
            conn, derive(observe(sim.truth, tmp_path)), run_id="fabric", created_at=AT, inputs={}
        ).version
    result = dg.materialize(
        [gpu_affinity],
        resources={"warehouse": WarehouseResource(), "site": SiteConfigResource(path=str(sim.config_path))},
    )
    assert result.success
    run_id = result.run_id
    with wh.connect() as conn:
        found = conn.execute(
            "SELECT kind, host, gpus FROM topology.gpu_affinity_findings WHERE run_id = %s", (run_id,)
        ).fetchall()
        rows = conn.execute(
            "SELECT host, gpu, best_nics, path_class, numa_node, rail, topology_version FROM topology.gpu_affinity"
            " WHERE run_id = %s ORDER BY host, gpu", (run_id,)
        ).fetchall()  # fmt: skip
        held = conn.execute(
            "SELECT device, reason FROM ops.quarantine WHERE run_id = %s AND source = 'gpu_topo'", (run_id,)
        ).fetchall()
    got = {
        ExpectedFinding(k, h, g[0] if len(g) == 1 and k != "matrix_differs_from_fleet" else None) for k, h, g in found
    }
    assert got == sim.truth.affinity_findings() and len(found) == 3
    assert len(rows) == 128 * 8
    assert rows[0] == ("dgx001", 0, ["mlx5_0"], "PIX", 0, "rail0", version)
    dgx042 = [r for r in rows if r[0] == "dgx042"]
    assert [(r[2], r[5]) for r in dgx042[:2]] == [(["mlx5_1"], "rail1"), (["mlx5_0"], "rail0")]
    # the node agent's truncated capture is quarantined with the parser's reason, not dropped
    assert [d for d, _ in held] == [FAULT_TRUNCATED] and "row" in held[0][1]
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    failing = {check_name("nic_across_socket"), check_name("matrix_differs_from_fleet")}
    assert checks == {check_name(k): check_name(k) not in failing for k in FINDING_KINDS}
    meta = result.asset_materializations_for_node("topology__gpu_affinity")[0].metadata
    matrices, kubelet = str(meta["matrices"].value), str(meta["kubelet_config"].value)
    assert "#### dgx007" in matrices and "| GPU3 | SYS | SYS |" in matrices
    assert "topologyManagerPolicy: best-effort" in kubelet
    # `topology show --json` carries each host's GPU-to-rail map from the latest derivation
    shown = CliRunner().invoke(topology_app, ["show", "--json", "--version", str(version)])
    assert shown.exit_code == 0, shown.output
    hosts = {h["name"]: h for h in json.loads(shown.stdout)["hosts"]}
    assert hosts["dgx042"]["gpus"][0] == {"gpu": 0, "best_nics": ["mlx5_1"], "path_class": "PIX", "numa_node": 0,
                                          "rail": "rail1"}  # fmt: skip
    text = CliRunner().invoke(topology_app, ["show", "--version", str(version)])
    assert text.exit_code == 0 and "dgx007" in text.stdout and "GPU3 SYS" in text.stdout, text.stdout


def _dry_run(plane: Any, obj: dict[str, Any]) -> Any:
    return plane.kubectl("apply", "--server-side", "--dry-run=server", "--validate=strict", "--field-manager",
                         "gpufabric", "-o", "json", "-f", "-", input=json.dumps(obj), check=False)  # fmt: skip


def test_label_annotation_and_claim_template_pass_the_real_api_server(kube_cluster: Any, kube_namespace: str) -> None:
    truth = generate(spec_of("h100-4su"))
    fleet = derive_fleet({h: truth.gpu_topo.matrices[h] for h in ("dgx001", "dgx007", "dgx042")}, min_fleet=3)
    kube_cluster.register_nodes([{"name": "aff-dgx007"}])
    patch = node_patch(fleet.node("dgx007"), "gpufabric.io", fleet.findings_of("dgx007"))
    patch["metadata"]["name"] = "aff-dgx007"
    proc = _dry_run(kube_cluster, patch)
    assert proc.returncode == 0, proc.stderr
    answered = json.loads(proc.stdout)["metadata"]
    assert answered["labels"]["topology.gpufabric.io/gpu-nic-affinity"] == "degraded"
    assert json.loads(answered["annotations"]["topology.gpufabric.io/gpu-nic-map"])["gpus"][3]["c"] == "SYS"
    claim = resource_claim_template("gpu-nic-pair", kube_namespace, pairs=2)
    proc = _dry_run(kube_cluster, claim)
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(proc.stdout)
    assert stored["apiVersion"] == "resource.k8s.io/v1"
    assert stored["spec"]["spec"]["devices"]["constraints"][1] == {
        "requests": ["gpu-1", "nic-1"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}  # fmt: skip
    # the dry run judges: a constraint naming a request the claim lacks is refused
    broken = yaml.safe_load(json.dumps(claim))
    broken["spec"]["spec"]["devices"]["constraints"][0]["requests"] = ["gpu-0", "nic-9"]
    proc = _dry_run(kube_cluster, broken)
    assert proc.returncode != 0 and "nic-9" in proc.stderr, proc.stderr
