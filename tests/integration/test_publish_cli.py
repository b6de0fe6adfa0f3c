"""`gpufabric publish` end to end: a real Postgres (fresh database), the real control plane
(kube-apiserver and Kueue, the 1-SU spec's nodes registered), the CLI through typer. Dry run is
the server's and writes nothing; a publish is recorded with its topology version; the blast
guard refuses naming what it compared against; a rollback re-applies an earlier version;
--gitops writes manifests; `kueue render` prints valid YAML; bad input is one red line."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from kubernetes import client
from typer.testing import CliRunner

from connectors.kube import ClusterTarget, api_client, list_nodes
from connectors.warehouse import open_warehouse
from core.topology import TopologyModel, derive
from pipelines.cli_publish import app, kueue_app
from services.topology import write_snapshot
from simulator.controlplane import nodes_from_spec
from simulator.controlplane.identity import install_rbac, service_account_kubeconfig
from tests.unit.test_topology_support import observe, truth_with

pytestmark = pytest.mark.integration
runner = CliRunner()


@pytest.fixture
def site(
    kube_cluster: Any, tmp_path: Path, fresh_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, Path]]:
    monkeypatch.setenv("GPUFABRIC_DATABASE_URL", fresh_database_url)
    kube_cluster.register_nodes(nodes_from_spec("h100-1su"))
    kubeconfig = Path(kube_cluster.kubeconfig)
    # gpufabric publishes as deploy/pipeline's ServiceAccount, bound only by the RBAC shipped there.
    install_rbac(kube_cluster)
    as_deployed = service_account_kubeconfig(kube_cluster, "gpufabric-pipeline")
    config = tmp_path / "gpufabric.yaml"
    config.write_text(yaml.safe_dump({
        "version": 1,
        "sources": {"kubernetes": [{"name": "sim", "kubeconfig": str(as_deployed)}]},
        "tenants": [{"id": "research", "name": "Research", "cohort": "science", "tiers": ["prod"],
                     "gpu_quota": {"H100": 128}}],
        "publish": {"max_node_change_fraction": 0.2},
    }))  # fmt: skip
    monkeypatch.setenv("GPUFABRIC_CONFIG", str(config))
    yield config, kubeconfig


def _store(model: TopologyModel) -> int:
    with open_warehouse().connect() as conn:
        return write_snapshot(conn, model, run_id="t", created_at=datetime.now(UTC), inputs={}).version


def _blocks(kubeconfig: Path) -> dict[str, str | None]:
    api = api_client(ClusterTarget(kubeconfig=kubeconfig))
    try:
        return {n.metadata.name: (n.metadata.labels or {}).get("fabric.gpufabric.io/block") for n in list_nodes(api)}
    finally:
        api.close()


def _queues(kubeconfig: Path) -> list[str]:
    api = api_client(ClusterTarget(kubeconfig=kubeconfig))
    try:
        found = client.CustomObjectsApi(api).list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues")
        return sorted(cq["metadata"]["name"] for cq in found["items"])
    finally:
        api.close()


def test_dry_run_publish_history_rollback_gitops(site: tuple[Path, Path], tmp_path: Path) -> None:
    _, kubeconfig = site
    nothing = runner.invoke(app, [])
    assert nothing.exit_code == 1 and "no topology version yet" in nothing.output
    model = derive(observe(truth_with("h100-1su"), tmp_path))
    assert _store(model) == 1

    dry = runner.invoke(app, ["--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "node dgx001: + fabric.gpufabric.io/block=ib-leaf-su01-r0-7" in dry.stdout
    assert "ClusterQueue research: created" in dry.stdout
    assert "32 of 32 nodes change (+192 ~0 -0 labels, 64 resources)" in dry.stdout
    assert "dry_run of topology version 1: planned" in dry.stdout
    assert set(_blocks(kubeconfig).values()) == {None}
    assert _queues(kubeconfig) == []

    first = runner.invoke(app, [])
    assert first.exit_code == 0, first.output
    # (rich wraps long lines at the runner's 80 columns)
    assert "objects: 7 created, 0 changed, 0 deleted; 1 namespace(s) created" in " ".join(first.stdout.split())
    assert set(_blocks(kubeconfig).values()) == {"ib-leaf-su01-r0-7"}
    assert _queues(kubeconfig) == ["research"]

    # version 2 moves every host's block (a re-derived fabric); the guard refuses, --force applies
    hosts = tuple(dataclasses.replace(h, block="blk-moved") if h.role == "compute" else h for h in model.hosts)
    domains = tuple(dataclasses.replace(d, id="blk-moved", name="ib-leaf-su09-r[0-7]") if d.level == "block"
                    else d for d in model.domains)  # fmt: skip
    assert _store(dataclasses.replace(model, hosts=hosts, domains=domains)) == 2
    # A dry run is not refused, but says what the guard would do.
    dry2 = runner.invoke(app, ["--dry-run"])
    assert dry2.exit_code == 0, dry2.output
    assert ("the blast-radius guard would refuse this: 32 of 32 nodes change what we published (> 20% allowed);"
            " applying needs --force") in " ".join(dry2.stdout.split())
    refused = runner.invoke(app, [])
    assert refused.exit_code == 1 and "refusing to change 32 of 32 nodes (100% > 20% allowed)" in refused.output
    # The refusal says what it compared against: this cluster's own state and the publish behind it.
    assert "Compared with what cluster sim itself carries under our field manager" in refused.output
    assert "our last applied publish to sim was run " in refused.output
    assert "(topology version 1, " in refused.output
    forced = runner.invoke(app, ["--force"])
    assert forced.exit_code == 0, forced.output
    assert set(_blocks(kubeconfig).values()) == {"ib-leaf-su09-r0-7"}

    never = runner.invoke(app, ["--rollback", "7"])
    assert never.exit_code == 1 and "topology version 7 was never published to sim" in never.output
    back = runner.invoke(app, ["--rollback", "1", "--force"])
    assert back.exit_code == 0, back.output
    assert "rollback of topology version 1: applied" in back.stdout
    assert set(_blocks(kubeconfig).values()) == {"ib-leaf-su01-r0-7"}

    with psycopg.connect(os.environ["GPUFABRIC_DATABASE_URL"]) as conn:
        runs = conn.execute("SELECT topology_version, mode, status, forced, rollback_of FROM publish.runs ORDER BY id"
                            ).fetchall()  # fmt: skip
        assert runs == [(1, "dry_run", "planned", False, None), (1, "apply", "applied", False, None),
                        (2, "dry_run", "planned", False, None), (2, "apply", "refused", False, None),
                        (2, "apply", "applied", True, None), (1, "rollback", "applied", True, 2)]  # fmt: skip
        changes = conn.execute("SELECT change, count(*) FROM publish.label_changes l JOIN publish.runs r"
                               " ON r.id = l.run_id WHERE r.status = 'applied' AND r.topology_version = 2"
                               " GROUP BY change").fetchall()  # fmt: skip
        assert changes == [("changed", 32)]
        readable = conn.execute("SELECT readable FROM publish.label_values WHERE run_id = 2 AND"
                                " key = 'fabric.gpufabric.io/block'").fetchall()  # fmt: skip
        assert readable == [("ib-leaf-su01-r[0-7]",)]
    hist = runner.invoke(app, ["history"])
    assert hist.exit_code == 0 and "rollback applied" in hist.stdout

    out_dir = tmp_path / "gitops"
    written = runner.invoke(app, ["--gitops", str(out_dir)])
    assert written.exit_code == 0, written.output
    files = sorted(p.relative_to(out_dir / "gpufabric").as_posix() for p in out_dir.rglob("*.yaml"))
    assert len(files) == 1 + 1 + 2 + 1 + 1 + 1 + 32 + 32
    assert "kueue/clusterqueue-research.yaml" in files and "nodes/dgx001.yaml" in files
    node = yaml.safe_load((out_dir / "gpufabric" / "nodes" / "dgx001.yaml").read_text())
    assert node["metadata"]["labels"]["fabric.gpufabric.io/block"] == "ib-leaf-su09-r0-7"

    rendered = runner.invoke(kueue_app, ["render"])
    assert rendered.exit_code == 0, rendered.output
    kinds = [d["kind"] for d in yaml.safe_load_all(rendered.stdout)]
    assert kinds == ["Topology", "ResourceFlavor", "Cohort", "Cohort", "WorkloadPriorityClass", "ClusterQueue",
                     "LocalQueue"]  # fmt: skip
    missing = runner.invoke(kueue_app, ["render", "--cluster", "nope"])
    assert missing.exit_code == 1 and "no cluster 'nope'" in missing.output


def test_asset_publishes_every_cluster_and_fails_clearly_when_refused(site: tuple[Path, Path], tmp_path: Path) -> None:
    import dagster as dg

    from assets.publish import cluster_state
    from pipelines.resources import SiteConfigResource, WarehouseResource

    config, kubeconfig = site
    model = derive(observe(truth_with("h100-1su"), tmp_path))
    _store(model)
    resources = {"warehouse": WarehouseResource(url=os.environ["GPUFABRIC_DATABASE_URL"]),
                 "site": SiteConfigResource(path=str(config))}  # fmt: skip
    result = dg.materialize([cluster_state], resources=resources, raise_on_error=True)
    meta = result.asset_materializations_for_node("publish__cluster_state")[0].metadata
    sim = meta["clusters"].value["sim"]  # type: ignore[index]
    assert (sim["status"], sim["topology_version"], sim["nodes_changed"], sim["objects_created"]) == (
        "applied", 1, 32, 7)
    assert set(_blocks(kubeconfig).values()) == {"ib-leaf-su01-r0-7"}
    hosts = tuple(dataclasses.replace(h, block="blk-x") if h.role == "compute" else h for h in model.hosts)
    domains = tuple(dataclasses.replace(d, id="blk-x", name="x") if d.level == "block" else d for d in model.domains)
    _store(dataclasses.replace(model, hosts=hosts, domains=domains))
    refused = dg.materialize([cluster_state], resources=resources, raise_on_error=False)
    assert not refused.success
    failure = next(e for e in refused.all_events if e.event_type_value == "STEP_FAILURE")
    assert "sim: refusing to change 32 of 32 nodes" in str(failure.event_specific_data)
