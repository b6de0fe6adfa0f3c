"""The topology admission webhook over HTTPS (self-signed cert, AdmissionReview v1), with the
4-SU fabric's published labels as its index: 4 blocks of 32 nodes x 8 GPUs."""

from __future__ import annotations

import json
import ssl
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from controllers.tls import self_signed_cert
from controllers.topology_webhook import IndexHolder, Server
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
