"""Publishing to a real API server: ours against ``kubectl apply --server-side`` of the same objects.

What is published: the labels, extended resources and Kueue objects of ``b200-16su`` (512 nodes;
``--quick``: ``h100-4su``, 128), rendered once from the derived topology, on a control plane of
the bench's own (``simulator.controlplane.up`` in a temporary directory: kube-apiserver, etcd,
Kueue with its webhooks, the node agent renewing 512 Leases beside the publish).

* ours: ``connectors.kube.publish`` ``plan`` + ``execute``, what ``gpufabric publish`` runs
  against a cluster: list the nodes and read what our field manager owns from managedFields,
  a server-side dry run of every Kueue object for the diff, then a server-side apply of each
  Kueue object, each node's labels and each node's status (extended resources);
* peer: the pinned ``kubectl`` (the plane's own build) ``apply --server-side --force-conflicts
  --field-manager=gpufabric`` of the same objects as manifest files (``write_gitops``): one
  invocation for the Kueue objects and the Node labels, one with ``--subresource=status`` for
  the extended resources. Its discovery cache is warmed first, as on an operator's machine.

Every contender starts from the same cluster: nodes as kubelet and GPU Feature Discovery
registered them, none of our labels or resources, no Kueue objects, the tenants' namespaces
present (kubectl does not create them). Between contenders, untimed, the publish is undone
(Kueue objects deleted and waited for; an empty apply of our manager on every node removes what
it owned). After each contender the cluster is checked (every node carries the labels and
resources, every Kueue object exists), so a side that got faster by doing less fails loudly.

Reported: both times (median and spread over interleaved rounds), the per-round ratio, and the
requests each side sends the API server, counted in one extra untimed pass per side through
the fault proxy (``simulator.kube.proxy``) in front of the plane; the timed rounds go straight
to the API server, so the proxy's own cost is in no timing.
"""

from __future__ import annotations

import concurrent.futures as cf
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common import Spread, ratio_line, rotation, spec_arguments
from connectors.kube import ClusterTarget, api_client, list_nodes
from connectors.kube.publish import execute, node_facts, plan
from core.publish import DesiredState, KueuePolicy, LabelScheme, TenantSpec, desired_state
from core.publish.kueue import API_VERSION, MANAGED_BY
from core.topology import derive
from services.publish import write_gitops
from simulator.controlplane import build, down, nodes_from_spec, up
from simulator.controlplane.api import APPLY_PATCH, Api
from simulator.generator import generate
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path

MANAGER = "gpufabric"


def _tenants(facts: dict[str, dict[str, str]]) -> list[TenantSpec]:
    """Three tenants sharing the fleet's GPUs (half, a quarter, an eighth), whatever the spec's GPU."""
    product = next(iter(facts.values()))["nvidia.com/gpu.product"]
    gpus = sum(int(labels["nvidia.com/gpu.count"]) for labels in facts.values())
    return [
        TenantSpec("research", "Research", ["prod", "preemptible"], cohort="science", gpu_quota={product: gpus // 2}),
        TenantSpec("vision", "Vision", ["prod"], cohort="science", gpu_quota={product: gpus // 4}),
        TenantSpec("inference", "Inference", ["prod", "batch"], gpu_quota={product: gpus // 8}),
    ]
# Kueue collections, referrers first (the order a delete must take).
KUEUE_PLURALS = ("localqueues", "clusterqueues", "workloadpriorityclasses", "cohorts", "resourceflavors", "topologies")


def _ours(kubeconfig: Path, state: DesiredState) -> Callable[[], None]:
    def run() -> None:
        with api_client(ClusterTarget(kubeconfig=kubeconfig)) as api:
            p = plan(api, state.labels, state.resources, state.objects, field_manager=MANAGER, max_fraction=1.0)
            execute(api, p, state.labels, state.resources, field_manager=MANAGER)

    return run


def _kubectl(kubectl: Path, kubeconfig: Path, cache: Path, manifests: Path) -> Callable[[], None]:
    base = [str(kubectl), "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), "apply", "--server-side",
            "--force-conflicts", f"--field-manager={MANAGER}"]  # fmt: skip
    root = manifests / "gpufabric"

    def run() -> None:
        for extra in (["-f", str(root / "kueue"), "-f", str(root / "nodes")],
                      ["--subresource=status", "-f", str(root / "nodes-status")]):  # fmt: skip
            proc = subprocess.run([*base, *extra], capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if proc.returncode != 0:
                raise RuntimeError(f"kubectl apply exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")

    return run


def _unpublish(api: Api, nodes: Sequence[str]) -> None:
    """Back to the registered state: no Kueue objects of ours, nothing our manager owns on a node."""
    for plural in KUEUE_PLURALS:
        items, _ = api.list_all(f"/apis/{API_VERSION}/{plural}", labelSelector=f"{MANAGED_BY}={MANAGER}")
        for item in items:
            meta = item["metadata"]
            ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
            api.delete(f"/apis/{API_VERSION}{ns}/{plural}/{meta['name']}")
    for plural in KUEUE_PLURALS:  # Kueue lifts its in-use finalizers once the referrers are gone
        deadline = time.monotonic() + 120
        while api.list_all(f"/apis/{API_VERSION}/{plural}")[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{plural} still present 120 s after deletion")
            time.sleep(0.1)

    def clear(name: str) -> None:
        # An apply that omits what this manager applied before removes it (fields nobody else owns).
        api.patch(f"/api/v1/nodes/{name}", {"apiVersion": "v1", "kind": "Node",
                                            "metadata": {"name": name, "labels": {}}},
                  APPLY_PATCH, fieldManager=MANAGER, force="true")  # fmt: skip
        api.patch(f"/api/v1/nodes/{name}/status", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                                                   "status": {"capacity": {}, "allocatable": {}}},
                  APPLY_PATCH, fieldManager=MANAGER, force="true")  # fmt: skip

    with cf.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(clear, nodes))
    _check(api, None)


def _check(api: Api, state: DesiredState | None) -> None:
    """The cluster holds exactly ``state`` (None: nothing of ours), or the run is wrong."""
    nodes, _ = api.list_all("/api/v1/nodes")
    for node in nodes:
        name = node["metadata"]["name"]
        labels, capacity = node["metadata"].get("labels", {}), node["status"].get("capacity", {})
        want_labels = state.labels.get(name, {}) if state else {}
        want_res = state.resources.get(name, {}) if state else {}
        have_labels = {k: v for k, v in labels.items() if "gpufabric.io" in k}
        have_res = {k: v for k, v in capacity.items() if k.startswith("gpufabric.io/")}
        if have_labels != want_labels or have_res != want_res:
            raise RuntimeError(f"node {name}: labels {have_labels} / resources {have_res}, expected {want_labels} "
                               f"/ {want_res}")  # fmt: skip
    kueue = sum(len(api.list_all(f"/apis/{API_VERSION}/{plural}")[0]) for plural in KUEUE_PLURALS)
    if kueue != (len(state.objects) if state else 0):
        raise RuntimeError(f"{kueue} Kueue objects in the cluster, expected {len(state.objects) if state else 0}")


def _counted(proxy: Any, run: Callable[[], None]) -> Counter[str]:
    """Requests one run sends, by method, as the proxy forwarded them."""
    before = len(proxy.requests)
    run()
    return Counter(str(method) for method, _ in list(proxy.requests)[before:])


def main(argv: Sequence[str]) -> int:
    spec_name, runs = spec_arguments("bench_kube_publish", __doc__.splitlines()[0], argv)
    from simulator.kube.proxy import start_proxy

    # The test helpers build observations through the real parsers and row adapters.
    from tests.unit.test_topology_support import observe

    binaries = build()
    truth = generate(load_spec(resolve_spec_path(spec_name)))
    with tempfile.TemporaryDirectory(prefix="bench-kube-publish-") as tmp_dir:
        tmp = Path(tmp_dir)
        model = derive(observe(truth, tmp))
        plane = up(tmp / "plane", binaries=binaries)
        proxy = None
        api = plane.api()
        try:
            t0 = time.perf_counter()
            names = plane.register_nodes(nodes_from_spec(spec_name))
            print(f"  {len(names)} nodes registered in {time.perf_counter() - t0:.1f} s")
            with api_client(ClusterTarget(kubeconfig=plane.kubeconfig)) as client_api:
                facts = node_facts(list_nodes(client_api))
            state = desired_state(model, LabelScheme(), facts, _tenants(facts), KueuePolicy(manager=MANAGER))
            for ns in sorted({o["metadata"]["namespace"] for o in state.objects if o["metadata"].get("namespace")}):
                api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            manifests = tmp / "manifests"
            files = write_gitops(manifests, state)
            cache = tmp / "kubectl-cache"
            plane.kubectl("--cache-dir", str(cache), "api-resources")  # discovery cached, as on a workstation
            contenders = {
                "ours": _ours(plane.kubeconfig, state),
                "kubectl": _kubectl(binaries.kubectl, plane.kubeconfig, cache, manifests),
            }
            # Counted first (it also warms both sides up), through the proxy; then the timed rounds.
            proxy = start_proxy(plane)
            counts: dict[str, Counter[str]] = {}
            through_proxy = {"ours": _ours(proxy.kubeconfig, state),
                             "kubectl": _kubectl(binaries.kubectl, proxy.kubeconfig, cache, manifests)}  # fmt: skip
            for name, run in through_proxy.items():
                _unpublish(api, names)
                counts[name] = _counted(proxy, run)
                _check(api, state)
            print("  requests counted: " + ", ".join(f"{n} {sum(c.values()):,}" for n, c in counts.items()), flush=True)
            proxy.stop()
            proxy = None
            times: dict[str, list[float]] = {name: [] for name in contenders}
            for k in range(runs):
                for name in rotation(list(contenders), k):
                    _unpublish(api, names)
                    start = time.perf_counter()
                    contenders[name]()
                    times[name].append(time.perf_counter() - start)
                    _check(api, state)
                print(f"  round {k + 1}/{runs}: " + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in contenders),
                      flush=True)  # fmt: skip
        finally:
            if proxy is not None:
                proxy.stop()
            api.close()
            down(tmp / "plane")

    labels = sum(len(v) for v in state.labels.values())
    resources = sum(len(v) for v in state.resources.values())
    print(f"kube publish: {spec_name}, {len(state.labels)} nodes, {labels:,} labels, {resources:,} extended "
          f"resources, {len(state.objects)} Kueue objects ({len(files)} manifest files); kube-apiserver "
          f"{plane.kubernetes_version}, Kueue {plane.kueue_version}; {runs} interleaved rounds")  # fmt: skip
    for name, label in (("ours", "ours (plan + diff + server dry run + apply)"),
                        ("kubectl", "kubectl apply --server-side (peer)")):  # fmt: skip
        c = counts[name]
        print(f"  {label:<44} {Spread.of(times[name]).fmt(unit=' s')}; {sum(c.values()):,} API requests "
              f"({', '.join(f'{m} {n:,}' for m, n in sorted(c.items()))})")  # fmt: skip
    print(f"  {ratio_line('ours / kubectl', times['ours'], times['kubectl'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
