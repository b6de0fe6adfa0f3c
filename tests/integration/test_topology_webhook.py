"""The topology admission webhook over HTTPS (self-signed cert, AdmissionReview v1), with the
4-SU fabric's published labels as its index: 4 blocks of 32 nodes x 8 GPUs; and its node index
kept current by a watch on the Kubernetes twin, through 410 Gone, 5xx and a dropped connection.
(The webhook as a process: test_controllers_processes.py.)"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from connectors.kube import ClusterTarget, api_client
from controllers.tls import self_signed_cert
from controllers.topology_webhook import IndexHolder, NodeIndexer, Server
from core.publish import LabelScheme, node_labels
from core.publish.admission import TopologyIndex
from core.topology import derive
from simulator.generator import generate
from simulator.kube import KubeTwinAdmin, start
from simulator.kube.twin import write_kubeconfig
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from simulator.up import stop_pids
from tests.unit.test_topology_support import observe, truth_with

pytestmark = pytest.mark.integration
BLOCK = "fabric.gpufabric.io/block"
REQ = "kueue.x-k8s.io/podset-required-topology"


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    tmp = tmp_path_factory.mktemp("webhook")
    model = derive(observe(truth_with("h100-4su"), tmp))
    scheme = LabelScheme()
    plans = node_labels(model, scheme)
    nodes = [({**p.labels, "kubernetes.io/hostname": name}, 8) for name, p in plans.items()]
    holder = IndexHolder(TopologyIndex.from_nodes(scheme.topology_levels(), nodes))
    cert, key = self_signed_cert(tmp / "tls")
    server = Server(holder, cert, key).start()
    ctx = ssl.create_default_context(cafile=str(cert))
    with httpx.Client(base_url=f"https://127.0.0.1:{server.port}", verify=ctx, timeout=10) as http:
        yield http
    server.stop()


def job(parallelism: int, gpus: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
            "spec": {"parallelism": parallelism, "template": {"metadata": {"annotations": annotations or {}},
                     "spec": {"containers": [{"name": "m", "image": "x",
                                              "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}  # fmt: skip


def review(obj: Any, uid: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid or str(uuid.uuid4()), "operation": "CREATE", "object": obj}}  # fmt: skip


def answer(http: httpx.Client, body: Any) -> dict[str, Any]:
    r = http.post("/validate", json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()["response"]
    return out


def test_fits_in_a_block_is_allowed(webhook: httpx.Client) -> None:
    out = answer(webhook, review(job(32, 8, {REQ: BLOCK}), uid="u-1"))
    assert out == {"uid": "u-1", "allowed": True}


def test_more_than_the_largest_block_is_denied_with_its_capacity(webhook: httpx.Client) -> None:
    out = answer(webhook, review(job(40, 8, {REQ: BLOCK})))
    assert out["allowed"] is False and out["status"]["code"] == 403
    assert out["status"]["message"] == (
        "the workload requires 40 pods x 8 GPUs in one fabric.gpufabric.io/block domain, but the largest "
        "fabric.gpufabric.io/block domain (ib-leaf-su01-r0-7) has 256 GPUs on 32 nodes and holds 32 pods of 8 GPUs")
    # pods of 3 GPUs: 2 per node fit, so a block holds 64 of them
    assert answer(webhook, review(job(64, 3, {REQ: BLOCK})))["allowed"] is True
    assert answer(webhook, review(job(65, 3, {REQ: BLOCK})))["allowed"] is False
    # a 9-GPU pod fits on no node at all
    out = answer(webhook, review(job(1, 9, {REQ: "kubernetes.io/hostname"})))
    assert out["allowed"] is False and "holds 0 pods of 9 GPUs" in out["status"]["message"]


def test_slices_preferred_and_missing_annotations(webhook: httpx.Client) -> None:
    sliced = {"kueue.x-k8s.io/podset-slice-required-topology": BLOCK, "kueue.x-k8s.io/podset-slice-size": "32"}
    assert answer(webhook, review(job(128, 8, sliced)))["allowed"] is True
    out = answer(webhook, review(job(128, 8, {**sliced, "kueue.x-k8s.io/podset-slice-size": "64"})))
    assert out["allowed"] is False and "slices of 64 pods" in out["status"]["message"]
    out = answer(webhook, review(job(128, 8, {**sliced, "kueue.x-k8s.io/podset-slice-size": "three"})))
    assert out["allowed"] is False and "must be a whole number" in out["status"]["message"]
    out = answer(webhook, review(job(40, 8, {"kueue.x-k8s.io/podset-preferred-topology": BLOCK})))
    assert out["allowed"] is True and "it will be spread" in out["warnings"][0]
    out = answer(webhook, review(job(2, 8)))
    assert out["allowed"] is True
    assert out["warnings"] == [
        "the workload needs 16 GPUs (more than one node) but has no topology annotation; set "
        "kueue.x-k8s.io/podset-required-topology or kueue.x-k8s.io/podset-preferred-topology to one of: "
        "fabric.gpufabric.io/pod, fabric.gpufabric.io/spine-group, fabric.gpufabric.io/block, "
        "accelerator.gpufabric.io/domain, accelerator.gpufabric.io/sub-domain, kubernetes.io/hostname"]
    assert "warnings" not in answer(webhook, review(job(1, 8)))
    out = answer(webhook, review(job(1, 8, {REQ: "rack"})))
    assert out["allowed"] is False and "'rack' is not a level" in out["status"]["message"]


def test_bad_input_is_a_clear_error_never_a_500(webhook: httpx.Client) -> None:
    cases: list[tuple[bytes, int, str]] = [
        (b"{not json", 400, "not JSON"),
        (b"[]", 400, "expected kind AdmissionReview"),
        (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1"}).encode(), 400,
         "unsupported apiVersion"),
        (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}).encode(), 400,
         "request.uid is missing"),
        (b"\xff\xfe", 400, "not JSON"),
        (b"x" * (2 * 1024 * 1024), 413, "over 1048576 bytes"),
    ]  # fmt: skip
    for body, status, text in cases:
        r = webhook.post("/validate", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == status and text in r.json()["message"], (body[:40], r.text)
    bad_objects = [
        (None, "request.object is missing"),
        ({"kind": "Job", "spec": {"parallelism": "many", "template": {}}}, "spec.parallelism must be"),
        ({"kind": "Job", "spec": {"template": {"spec": {"containers": [
            {"resources": {"limits": {"nvidia.com/gpu": "lots"}}}]}}}}, "must be a whole number"),
        ({"kind": "JobSet", "spec": {"replicatedJobs": "x"}}, "spec.replicatedJobs must be a list"),
        ({"kind": "Pod", "metadata": {"annotations": {"a": 1}}}, "annotations must map strings"),
        ({"kind": "Job", "spec": []}, "spec must be an object"),
    ]  # fmt: skip
    for obj, text in bad_objects:
        out = answer(webhook, review(obj))
        assert out["allowed"] is False and out["status"]["code"] == 400 and text in out["status"]["message"], obj
    jobset = {"kind": "JobSet", "spec": {"replicatedJobs": [{"name": "w", "replicas": 5, "template": {"spec": {
        "parallelism": 8, "template": {"metadata": {"annotations": {REQ: BLOCK}}, "spec": {"containers": [
            {"resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}}]}}  # fmt: skip
    out = answer(webhook, review(jobset))
    assert out["allowed"] is False and "requires 40 pods" in out["status"]["message"]
    huge = job(1, 8, {f"k{i}": "v" * 100 for i in range(5000)})
    r = webhook.post("/validate", json=review(huge))
    assert r.status_code == 200 and r.json()["response"]["allowed"] is True


def test_the_production_app_has_no_benchmark_route(webhook: httpx.Client) -> None:
    # the no-op peer lives in bench/bench_topology_webhook.py; production answers only /validate
    assert webhook.post("/allow", json=review(job(1, 8))).status_code == 404
    assert webhook.get("/healthz").text == "ok"


# -- the index follows the cluster: a node watch on the Kubernetes twin ------------------------------



@dataclass
class KubeTwin:
    url: str
    kubeconfig: Path
    admin: KubeTwinAdmin
    core: client.CoreV1Api

    def node_names(self) -> list[str]:
        return sorted(str(n.metadata.name) for n in self.core.list_node().items)

    def label(self, nodes: list[str], key: str, value: str | None) -> None:
        for name in nodes:
            self.core.patch_node(name, {"metadata": {"labels": {key: value}}})


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeTwin]:
    """A Kubernetes twin of the 1-SU cluster (32 nodes x 8 GPUs, no topology labels yet)."""
    run = start(generate(load_spec(resolve_spec_path("h100-1su"))), tmp_path_factory.mktemp("topology-kube"))
    kubeconfig = Path(run.extra["kubeconfig"])
    api = api_client(ClusterTarget(kubeconfig=kubeconfig))
    try:
        yield KubeTwin(str(run.extra["url"]), kubeconfig, KubeTwinAdmin.from_kubeconfig(kubeconfig),
                       client.CoreV1Api(api))
    finally:
        api.close()
        stop_pids(run.pids)


def wait_for(what: str, check: Callable[[], bool], deadline_s: float = 60.0) -> None:
    """Poll until ``check()``; the deadline only guards against a hang, it is not a timing claim."""
    deadline = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {deadline_s:.0f}s waiting for: {what}")
        time.sleep(0.05)


class Proxy:
    """A TCP forwarder in front of the twin whose connections the test can cut (a dropped watch:
    a load balancer or an API server restart does this to a long-lived stream)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()

    def start(self) -> Proxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream)
            with self.lock:
                self.open += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def sever(self) -> int:
        """Cut every open connection mid-stream; new ones are accepted as before."""
        with self.lock:
            cut, self.open = self.open, []
        for s in cut:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        return len(cut) // 2

    def close(self) -> None:
        self.listener.close()
        self.sever()


def blocks(holder: IndexHolder) -> dict[str, int]:
    """Block -> node count in the index the webhook answers from now."""
    index = holder.index
    return {} if index is None else {d.value: len(d.node_gpus) for d in index.domains[BLOCK]}


def test_the_index_follows_relabels_through_410_5xx_and_a_dropped_watch(kube: KubeTwin, tmp_path: Path) -> None:
    kube.admin.reset()
    nodes = kube.node_names()
    assert len(nodes) == 32
    kube.label(nodes[:16], BLOCK, "blk-a")
    kube.label(nodes[16:], BLOCK, "blk-b")
    proxy = Proxy(kube.url).start()
    # its own kubeconfig: with a token, the client re-applies the kubeconfig's server before every
    # request, so an api_url override does not stick
    api = api_client(ClusterTarget(kubeconfig=write_kubeconfig(tmp_path / "via-proxy", proxy.url, kube.admin.token)))
    holder = IndexHolder()
    # short backoffs keep the test quick; the defaults (0.5 s doubling to 30 s) suit production
    indexer = NodeIndexer(holder, api, LabelScheme().topology_levels(), backoff_initial_s=0.05, backoff_max_s=0.5)
    stats = indexer.watch.stats
    try:
        indexer.start()
        wait_for("the first list", lambda: holder.index is not None)
        assert blocks(holder) == {"blk-a": 16, "blk-b": 16}
        assert holder.index is not None and holder.index.max_node_gpus == 8
        assert stats.lists == 1

        # A relabel arrives as a watch event: no second list.
        kube.label(nodes[16:20], BLOCK, "blk-a")
        wait_for("4 nodes moving to blk-a", lambda: blocks(holder) == {"blk-a": 20, "blk-b": 12})
        kube.core.delete_node(nodes[31])
        kube.label(nodes[30:31], BLOCK, None)  # unlabelled: in no block
        wait_for("a deleted and an unlabelled node", lambda: blocks(holder) == {"blk-a": 20, "blk-b": 10})
        assert stats.lists == 1 and stats.events >= 6 and stats.failures == 0

        # 410 Gone: the history the watch stands on is compacted away (another write first, so the
        # watch's resourceVersion is below the new floor); the next two lists answer 500 (set first:
        # the open watch may see the 410 as soon as the compaction, before the relabel).
        kube.admin.set_faults({"paths": ["/api/v1/nodes"], "methods": ["GET"], "status_5xx_next": 2})
        kube.core.create_namespace({"metadata": {"name": f"w-{uuid.uuid4().hex[:6]}"}})
        kube.admin.compact()
        kube.label(nodes[20:24], BLOCK, "blk-a")
        wait_for("the relabel after a 410 and two failed lists", lambda: blocks(holder) == {"blk-a": 24, "blk-b": 6})
        assert stats.expired == 1 and stats.failures == 2 and stats.last_error.startswith("HTTP 500")
        assert stats.lists == 2
        kube.admin.clear_faults()

        # A dropped connection mid-watch: back off, re-list, watch again.
        wait_for("the watch to be open", lambda: indexer.watch.watching)
        assert proxy.sever() >= 1
        kube.label(nodes[:8], BLOCK, "blk-c")
        wait_for("the relabel after the watch was cut", lambda: blocks(holder) == {"blk-a": 16, "blk-b": 6, "blk-c": 8})
        assert stats.failures == 3 and stats.lists == 3
    finally:
        indexer.stop()
        proxy.close()
        api.close()
        kube.admin.clear_faults()
        kube.admin.reset()
    assert not indexer.watch.watching  # stop() closed the open watch
