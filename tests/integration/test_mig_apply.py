"""MIG layouts applied on the real control plane (issue 21, parts 3 and 4).

Eight fake H100 nodes; the node agent plays mig-manager. A dry run writes nothing; an apply
publishes the ConfigMap and the labels window by window, every node ends ``success`` with the
``mixed`` strategy's extended resources in allocatable (counts from the plan), and the dcgm-exporter
twin serves the instances; a config name the ConfigMap does not hold ends ``failed`` and is a
finding; the blast-radius guard refuses a change of too many nodes; a rollback puts the labels back.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any

import pytest
from kubernetes import client

from connectors.kube.client import apply as ssa
from core.mig import apply as mig
from core.mig.demand import SliceRequest, TenantDemand
from core.mig.migparted import MigPartedConfig, load_config
from services.mig import MigConfig, MigRefused, apply, apply_window, rollback, status, wait_window
from simulator.dcgm import workloads as wl
from simulator.dcgm.exposition import NodeInfo, load_mig_layouts, render_node

pytestmark = pytest.mark.integration

H100 = "H100-80GB"
NODES = [f"mig-n{i}" for i in range(8)]
DEMANDS = (
    TenantDemand("regulated", "dedicated", (SliceRequest(H100, 2, profile="3g.40gb"),)),
    TenantDemand("inference", "mig", (SliceRequest(H100, 14, profile="1g.10gb"),)),
    TenantDemand("research", "shared", (SliceRequest(H100, 4, memory_gib=16, compute_slices=2),)),
)
CFG = MigConfig(demands=DEMANDS, max_per_window=2, windows=4, max_fraction=0.5, timeout_s=60.0)


def gpu_node(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {mig.GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3", mig.GFD_COUNT: "8"},
        "capacity": {"nvidia.com/gpu": "8"},
    }


@pytest.fixture
def plane(kube_cluster):  # type: ignore[no-untyped-def]
    kube_cluster.register_nodes([gpu_node(n) for n in NODES])
    api = kube_cluster.kube_client()
    core = client.CoreV1Api(api)
    try:
        core.delete_namespaced_config_map(CFG.ref.name, CFG.ref.namespace)
    except client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise
    # reset() deletes the namespaces publishes created, ours included: wait until it is gone
    deadline = time.monotonic() + 60
    while any(n.metadata.name == CFG.ref.namespace for n in core.list_namespace().items):
        assert time.monotonic() < deadline, f"namespace {CFG.ref.namespace} still terminating"
        time.sleep(0.2)
    return kube_cluster, api


def config_now(api: client.ApiClient) -> MigPartedConfig:
    cm: Any = client.CoreV1Api(api).read_namespaced_config_map(CFG.ref.name, CFG.ref.namespace)
    return load_config(cm.data[CFG.ref.key])


def our_marks(api: client.ApiClient) -> dict[str, tuple[str | None, bool]]:
    """Per node: its mig.config label and whether our field manager owns anything on it. (Not the
    resourceVersion: the node agent's own status posts move that.)"""
    return {
        name: (dict(n.metadata.labels).get(mig.MIG_CONFIG_LABEL),
               any(e.manager == CFG.field_manager for e in n.metadata.managed_fields or ()))
        for name, n in nodes_now(api).items()
    }  # fmt: skip


def nodes_now(api: client.ApiClient) -> dict[str, Any]:
    items: list[Any] = client.CoreV1Api(api).list_node().items
    return {n.metadata.name: n for n in items if n.metadata.name in NODES}


def test_dry_run_writes_nothing_then_apply_reaches_every_node_and_the_twin(plane) -> None:  # type: ignore[no-untyped-def]
    cp, api = plane
    dry = apply_window(api, CFG, dry_run=True)
    assert dry.wanted and not dry.applied
    assert any(f"+ {mig.MIG_CONFIG_LABEL}=" in line for line in dry.diff), dry.diff
    assert our_marks(api) == {n: (None, False) for n in NODES}
    with pytest.raises(client.exceptions.ApiException, match="Not Found"):
        client.CoreV1Api(api).read_namespaced_config_map(CFG.ref.name, CFG.ref.namespace)

    outcomes = apply(api, CFG)
    assert all(o.progress is None or o.progress.ok for o in outcomes), [o.progress for o in outcomes]
    assert len([o for o in outcomes if o.wanted]) >= 2  # the bound of 2 GPUs a window made several windows
    assert not outcomes[-1].wanted  # the last pass found nothing left to reconfigure
    first = outcomes[0].plan
    assert first is not None and first.complete

    # every node labelled by us is at success, with the resources of the config its label names
    config = config_now(api)
    states = {s.node: s for s in status(api, CFG)}
    labelled = [n for n, s in states.items() if s.ours]
    assert labelled and all(states[n].state == "success" for n in labelled)
    totals: Counter[str] = Counter()
    for name, node in nodes_now(api).items():
        alloc = node.status.allocatable
        if name not in labelled:
            assert not any(k.startswith(mig.MIG_RESOURCE_PREFIX) for k in alloc)
            continue
        expected = mig.mig_resources(config, states[name].config or "", 8)
        assert {k: v for k, v in alloc.items() if k.startswith("nvidia.com/")} == expected
        totals.update({k: int(v) for k, v in expected.items() if k.startswith(mig.MIG_RESOURCE_PREFIX)})
    # the demand is served: 14 x 1g.10gb, 2 x 3g.40gb, and the pooled research instances
    assert totals["nvidia.com/mig-1g.10gb"] >= 14 and totals["nvidia.com/mig-3g.40gb"] >= 2

    # the dcgm-exporter twin serves the applied instances with dcgm-exporter's MIG labels
    layouts = load_mig_layouts(cp.workdir / "mig-layouts.json")
    node = labelled[0]
    assert node in layouts
    info = NodeInfo(node, 0, tuple(f"GPU-{node}-{g}" for g in range(8)), wl.H100, mig_layout=layouts[node])
    body = render_node(info, 1_760_000_000.0)
    lines = [ln for ln in body.splitlines() if ln.startswith("DCGM_FI_DEV_FB_USED{") and "GPU_I_PROFILE" in ln]
    served = {(ln.split('GPU_I_PROFILE="')[1].split('"')[0], ln.split('GPU_I_ID="')[1].split('"')[0]) for ln in lines}
    want = {(p, str(gi)) for parts in layouts[node].values() for p, gi in parts}
    assert served == want and served
    profiles = {p for p, _ in served}
    assert profiles <= {"1g.10gb", "2g.20gb", "3g.40gb", "1g.20gb", "4g.40gb", "7g.80gb", "1g.10gb+me"}

    # a second apply finds nothing to do and writes nothing
    marks = our_marks(api)
    again = apply_window(api, CFG)
    assert not again.wanted and again.publish is None and our_marks(api) == marks

    # rollback: the last window's nodes go back to the config of their layout before it, and
    # mig-manager takes the MIG resources away again on those it had partitioned
    last = next(o for o in reversed(outcomes) if o.wanted)
    back = rollback(api, CFG)
    assert set(back.wanted) == set(last.wanted), back.diff
    progress = wait_window(api, back.wanted, 60.0, stale_success=frozenset(back.wanted))
    assert progress.ok, progress
    for name in back.wanted:
        layout = mig.node_layout(config_now(api), back.wanted[name], 8)
        alloc = nodes_now(api)[name].status.allocatable
        mig_gpus = sum(1 for c in layout.values() if c is not None)
        assert alloc["nvidia.com/gpu"] == str(8 - mig_gpus)


def test_unknown_config_fails_and_is_a_finding(plane) -> None:  # type: ignore[no-untyped-def]
    _, api = plane
    ssa(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CFG.ref.namespace}},
        field_manager=CFG.field_manager)  # fmt: skip
    text = "version: v1\nmig-configs:\n  all-off:\n    - devices: all\n      mig-enabled: false\n"
    ssa(api, mig.configmap_object(text, CFG.ref, CFG.field_manager), field_manager=CFG.field_manager, force=True)
    node = NODES[-1]
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {mig.MIG_CONFIG_LABEL: "nope"}}}
    ssa(api, body, field_manager=CFG.field_manager, force=True)
    progress = wait_window(api, {node: "nope"}, 30.0)
    assert [(f.node, f.kind) for f in progress.findings] == [(node, "failed")]
    assert not progress.ok


def test_blast_guard_refuses_too_many_nodes(plane) -> None:  # type: ignore[no-untyped-def]
    _, api = plane
    tight = MigConfig(demands=DEMANDS, max_per_window=8, windows=1, max_fraction=0.1)
    with pytest.raises(MigRefused, match=r"refusing to change \d+ of \d+ nodes"):
        apply_window(api, tight)
    assert our_marks(api) == {n: (None, False) for n in NODES}
    with pytest.raises(client.exceptions.ApiException, match="Not Found"):
        client.CoreV1Api(api).read_namespaced_config_map(CFG.ref.name, CFG.ref.namespace)


def test_cli_plan_dry_run_status_and_the_asset(plane, warehouse, kube_namespace, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import dagster as dg
    import yaml
    from typer.testing import CliRunner

    from assets.mig import mig_plan
    from pipelines.cli_mig import app
    from settings import load_settings

    cp, api = plane
    site: dict[str, Any] = {
        "version": 1,
        "sources": {"kubernetes": [{"name": "sim", "kubeconfig": str(cp.kubeconfig)}]},
        "mig": {"max_gpus_per_window": 2, "windows": 4, "max_node_change_fraction": 0.5},
    }
    config = tmp_path / "gpufabric.yaml"
    config.write_text(yaml.safe_dump(site))
    monkeypatch.setenv("GPUFABRIC_CONFIG", str(config))
    runner = CliRunner()
    # A training job's rank on mig-n7 (bound there, the node agent runs it): its GPUs keep their layout.
    rank = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "rank-0", "labels": {"gpufabric.io/workload": "training"}},
            "spec": {"nodeName": "mig-n7", "restartPolicy": "Never", "containers": [
                {"name": "trainer", "image": "train", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}  # fmt: skip
    client.CoreV1Api(api).create_namespaced_pod(kube_namespace, rank)

    shown = runner.invoke(app, ["plan"])
    assert "note: 1 node(s) run a training job's pods and keep their layout: mig-n7" in shown.output, shown.output
    on_training = [line for line in shown.output.splitlines() if line.startswith("mig-n7 gpu")]
    assert len(on_training) == 8 and all(line.endswith(" training") for line in on_training), on_training
    assert shown.exit_code == 0, shown.output
    assert "mig-n0 gpu0:" in shown.output and "window 1:" in shown.output and "stranded:" in shown.output
    assert "14x1g.10gb" not in shown.output  # 1g.10gb instances are 7 a GPU at most
    assert "7x1g.10gb [inference]" in shown.output
    # GPUs the plan neither uses nor changes are one count line; --all lists every GPU
    everything = runner.invoke(app, ["plan", "--all"])
    every_gpu = [line for line in everything.output.splitlines() if re.match(r"mig-n\d+ gpu\d+: ", line)]
    listed = [line for line in shown.output.splitlines() if re.match(r"mig-n\d+ gpu\d+: ", line)]
    hidden = re.search(r"^(\d+) GPUs on \d+ nodes unused and unchanged", shown.output, re.M)
    assert len(every_gpu) == 8 * len(NODES) == len(listed) + (int(hidden[1]) if hidden else 0), shown.output
    assert not [line for line in listed if line.endswith("MIG disabled [-] unused")]

    dry = runner.invoke(app, ["apply", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert f"+ {mig.MIG_CONFIG_LABEL}=gpufabric-" in dry.output
    assert "ConfigMap gpu-operator/custom-mig-config: created" in dry.output
    assert our_marks(api) == {n: (None, False) for n in NODES}

    listed = runner.invoke(app, ["status"])
    assert listed.exit_code == 0 and "8 unset" in listed.output, listed.output

    done = dg.materialize([mig_plan], resources={"site": load_settings(config), "warehouse": warehouse})
    meta: Any = done.asset_materializations_for_node("mig__plan")[0].metadata
    assert meta["gpus_used"].value > 0 and meta["windows"].value >= 2
    assert any("MIG disabled -> " in line for line in meta["diff"].value)

    # unmet demand fails the asset and the CLI, listing what is unmet
    site["mig"]["tenants"] = [{"tenant": "big", "slices": [{"model": "H100-80GB", "count": 500, "profile": "7g.80gb"}]}]
    config.write_text(yaml.safe_dump(site))
    failed = runner.invoke(app, ["plan"])
    assert failed.exit_code == 1 and "unmet: big:" in failed.output
    with pytest.raises(dg.Failure, match="demand line\\(s\\) unmet"):
        dg.materialize([mig_plan], resources={"site": load_settings(config), "warehouse": warehouse})
