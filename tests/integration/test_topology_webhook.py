"""The topology admission webhook over HTTPS (self-signed cert, AdmissionReview v1), with the
4-SU fabric's published labels as its index: 4 blocks of 32 nodes x 8 GPUs; and its node index
kept current by a watch on the real API server, through 410 Gone, 5xx and a dropped connection
(the fault proxy). (The webhook as a process: test_controllers_processes.py; registered on the
API server, which calls it: test_admission_registration.py and test_kueue_admits.py.)"""

from __future__ import annotations

import json
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
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


def test_an_update_is_judged_only_when_it_changes_what_we_judge(webhook: httpx.Client) -> None:
    """Kueue suspends and unsuspends the Jobs it manages (an UPDATE each), also after the fabric
    shrank under an admitted Job: such an update must pass, or Kueue cannot evict or start it."""

    def update(obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        body = review(obj)
        body["request"].update({"operation": "UPDATE", "oldObject": old})
        return body

    big = job(40, 8, {REQ: BLOCK})  # no block holds it (test above)
    suspended = {**big, "spec": {**big["spec"], "suspend": True}}
    out = answer(webhook, update(suspended, big))
    assert out["allowed"] is True and "status" not in out and "warnings" not in out
    # what we judge changed: judged again
    out = answer(webhook, update(big, job(32, 8, {REQ: BLOCK})))
    assert out["allowed"] is False and "requires 40 pods x 8 GPUs" in out["status"]["message"]
    out = answer(webhook, update(job(32, 8, {REQ: "kubernetes.io/hostname"}), job(32, 8, {REQ: BLOCK})))
    assert out["allowed"] is False and "in one kubernetes.io/hostname domain" in out["status"]["message"]
    # no readable old object: judged like a create
    assert answer(webhook, update(big, None))["allowed"] is False
    assert answer(webhook, update(big, {"kind": "Job", "spec": []}))["allowed"] is False


def test_the_production_app_has_no_benchmark_route(webhook: httpx.Client) -> None:
    # the no-op peer lives in bench/bench_topology_webhook.py; production answers only /validate
    assert webhook.post("/allow", json=review(job(1, 8))).status_code == 404
    assert webhook.get("/healthz").text == "ok"


# -- the index follows the cluster: a node watch on the real API server, through the fault proxy ------


def wait_for(what: str, check: Callable[[], bool], deadline_s: float = 60.0) -> None:
    """Poll until ``check()``; the deadline only guards against a hang, it is not a timing claim."""
    deadline = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {deadline_s:.0f}s waiting for: {what}")
        time.sleep(0.05)


def blocks(holder: IndexHolder) -> dict[str, int]:
    """Block -> node count in the index the webhook answers from now."""
    index = holder.index
    return {} if index is None else {d.value: len(d.node_gpus) for d in index.domains[BLOCK]}


def test_the_index_follows_relabels_through_410_5xx_and_a_dropped_watch(kube_cluster: Any, faults: Any) -> None:
    """The webhook's node index (``NodeIndexer``, as ``python -m controllers topology-webhook``
    runs it) with its client pointed at the fault proxy's kubeconfig; the relabels go straight to
    the API server, as a publish or an operator would write them."""
    # 16 nodes x 8 GPUs, registered with their block labels: blk-a and blk-b, 8 nodes each
    nodes = kube_cluster.register_nodes([
        {"name": f"idx-{i:02d}", "labels": {BLOCK: "blk-a" if i < 8 else "blk-b"}, "capacity": {"nvidia.com/gpu": "8"}}
        for i in range(16)])  # fmt: skip
    admin = api_client(ClusterTarget(kubeconfig=kube_cluster.kubeconfig))
    core = client.CoreV1Api(admin)

    def label(names: list[str], value: str | None) -> None:
        for name in names:
            core.patch_node(name, {"metadata": {"labels": {BLOCK: value}}})

    api = api_client(ClusterTarget(kubeconfig=faults.kubeconfig))
    holder = IndexHolder()
    # Short backoffs keep the test quick (production: 0.5 s doubling to 30 s). The server ends
    # each watch after 2 s (production: 300 s) and the index resumes it from where it was: that
    # resumed request is the one the 410 below answers, as after a compaction.
    indexer = NodeIndexer(holder, api, LabelScheme().topology_levels(), backoff_initial_s=0.05, backoff_max_s=0.5,
                          watch_timeout_s=2)  # fmt: skip
    stats = indexer.watch.stats
    try:
        indexer.start()
        wait_for("the first list", lambda: holder.index is not None)
        assert blocks(holder) == {"blk-a": 8, "blk-b": 8}
        assert holder.index is not None and holder.index.max_node_gpus == 8
        assert stats.lists == 1

        # A relabel arrives as a watch event: no second list.
        label(nodes[8:10], "blk-a")
        wait_for("2 nodes moving to blk-a", lambda: blocks(holder) == {"blk-a": 10, "blk-b": 6})
        core.delete_node(nodes[15])
        label(nodes[14:15], None)  # unlabelled: in no block
        wait_for("a deleted and an unlabelled node", lambda: blocks(holder) == {"blk-a": 10, "blk-b": 4})
        assert stats.lists == 1 and stats.events >= 4 and stats.failures == 0

        # 410 Gone on the next watch (the history it resumes from was compacted away), then the
        # next two lists answer 500. One answer per request: the watch takes the 410, the lists
        # the 500s.
        faults.set_faults([
            {"paths": ["/api/v1/nodes"], "methods": ["GET"], "expire_watches_next": 1},
            {"paths": ["/api/v1/nodes"], "methods": ["GET"], "status_5xx_next": 2},
        ])  # fmt: skip
        wait_for("the 410 and the two failed lists", lambda: stats.lists == 2)
        label(nodes[10:12], "blk-a")
        wait_for("the relabel after a 410 and two failed lists", lambda: blocks(holder) == {"blk-a": 12, "blk-b": 2})
        assert faults.fired["expired"] == 1 and faults.fired["5xx"] == 2
        assert stats.expired == 1 and stats.failures == 2 and stats.last_error.startswith("HTTP 500")
        faults.clear_faults()

        # A connection dropped mid-watch (cut without its last chunk): back off, re-list, watch again.
        wait_for("an open watch to cut", lambda: indexer.watch.watching and faults.drop_watches("/api/v1/nodes") >= 1)
        label(nodes[:4], "blk-c")
        wait_for("the relabel after the watch was cut", lambda: blocks(holder) == {"blk-a": 8, "blk-b": 2, "blk-c": 4})
        assert stats.failures == 3 and stats.lists == 3 and stats.expired == 1
    finally:
        indexer.stop()
        api.close()
        admin.close()
    assert not indexer.watch.watching  # stop() closed the open watch
