"""Both admission webhooks under hostile AdmissionReview bodies, over HTTPS on a real socket (the
servers the controllers run: uvicorn with a self-signed certificate).

Bodies: not JSON, invalid UTF-8, JSON nested 100,000 deep, numbers beyond float, the wrong
apiVersion or kind, no request or uid, a uid that is no string, objects of every wrong shape,
near-valid Jobs, JobSets and Pods with any value at the leaves, and bodies past each webhook's
size limit. The contract (both modules' docstrings): every answer is an AdmissionReview with the
request's uid, or, for a request that is not one, a clear error: the topology webhook a 4xx JSON
``Status``, the budget webhook a denied review with a 400 status (the API server expects HTTP
200). Never a 500, never a traceback, never the webhook's own "failed internally" fallback (which
would mean a bug the input reached), and for the budget webhook never an admit of a pod it could
not read in a governed namespace.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from connectors.warehouse.ledger import ConnectionPool
from controllers import budget_webhook, topology_webhook
from controllers.tls import self_signed_cert
from core.budget import BudgetConfig, Envelope, PodRequest, parse_pod
from core.publish.admission import TopologyIndex
from tests.unit.fuzz_inputs import Mutated

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)
P = "gpufabric.io"
BLOCK = "fabric.gpufabric.io/block"
HOST = "kubernetes.io/hostname"
API = "admission.k8s.io/v1"


class Served:
    def __init__(self, url: str, client: httpx.Client, cert: Path) -> None:
        self.url, self.client, self.cert = url, client, cert


def _serve(app: Any, tmp: Path) -> Iterator[Served]:
    cert, key = self_signed_cert(tmp)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, ssl_certfile=str(cert), ssl_keyfile=str(key), log_level="critical", lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    ctx = ssl.create_default_context(cafile=str(cert))
    with httpx.Client(base_url=f"https://localhost:{port}", verify=ctx, timeout=30) as client:
        yield Served(f"https://localhost:{port}/validate", client, cert)
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    nodes = [({BLOCK: f"b{i // 4}", HOST: f"n{i}"}, 8) for i in range(16)]
    holder = topology_webhook.IndexHolder(TopologyIndex.from_nodes([BLOCK, HOST], nodes))
    yield from _serve(topology_webhook.make_app(holder), tmp_path_factory.mktemp("topology-tls"))


CONFIG = BudgetConfig(
    defaults={"*": Envelope(Decimal(50), Decimal(1000), 500, 5, 500)},
    rates_usd_per_gpu_hour={"*": Decimal("2.50")},
    expected_hours={"worker": Decimal(1)},
    governed_namespaces=frozenset({"agents"}),
)


@pytest.fixture(scope="module")
def budget(warehouse: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    pool = ConnectionPool(warehouse.libpq_url, size=2)
    yield from _serve(budget_webhook.make_app(CONFIG, pool), tmp_path_factory.mktemp("budget-tls"))
    pool.close()


# --- hostile bodies ---------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=10)
    | st.sampled_from(["", "\x00", "\ud800", "Pod", "CREATE", "agents", "8", "-1", "1e999"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)  # fmt: skip
_odd = json_values | st.sampled_from([0, 1, 8, 64, 10**30, "8", "1.5", "2Gi"])
_labels = st.dictionaries(
    st.sampled_from([f"{P}/agent-id", f"{P}/root-id", f"{P}/parent-id", f"{P}/depth", f"{P}/client", f"{P}/tier",
                     f"{P}/agent-type", "kueue.x-k8s.io/queue-name"]),
    st.sampled_from(["a", "r", "0", "1", "99", "-1", "acme", "standard", "worker", "", "x" * 70, "a b", "\x00"])
    | json_values,
    max_size=6,
)  # fmt: skip
_annotations = st.dictionaries(
    st.sampled_from(["kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-slice-size",
                     "kueue.x-k8s.io/podset-slice-required-topology", f"{P}/envelope"]),
    st.sampled_from([BLOCK, HOST, "no/such", "2", '{"gpu_hours": "1"}', "{", '{"gpu_hours": "-1"}']) | json_values,
    max_size=2,
)  # fmt: skip
_meta = st.fixed_dictionaries({"name": st.text(max_size=8) | json_values, "labels": _labels | json_values,
                               "annotations": _annotations | json_values})  # fmt: skip
_container = st.fixed_dictionaries(
    {"resources": st.fixed_dictionaries({"limits": st.dictionaries(
        st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "cpu"]), _odd, max_size=2)}) | json_values}
)  # fmt: skip
_pod_spec = st.fixed_dictionaries({"containers": st.lists(_container | json_values, max_size=3) | json_values})
_template = st.fixed_dictionaries({"metadata": _meta | json_values, "spec": _pod_spec | json_values})
_job_spec = st.fixed_dictionaries({"parallelism": _odd, "template": _template | json_values})
_objects = st.one_of(
    st.fixed_dictionaries({"kind": st.just("Pod"), "metadata": _meta, "spec": _pod_spec}),
    st.fixed_dictionaries({"kind": st.just("Job"), "spec": _job_spec}),
    st.fixed_dictionaries({"kind": st.just("JobSet"), "spec": st.fixed_dictionaries({"replicatedJobs": st.lists(
        st.fixed_dictionaries({"name": st.text(max_size=4), "replicas": _odd,
                               "template": st.fixed_dictionaries({"spec": _job_spec})}) | json_values,
        max_size=3) | json_values})}),
    json_values,
)  # fmt: skip
_requests = st.fixed_dictionaries(
    {},
    optional={
        "uid": st.sampled_from(["u-1", ""]) | json_values,
        "operation": st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]) | json_values,
        "kind": st.sampled_from([{"group": "", "version": "v1", "kind": "Pod"}, {"kind": "Job"}]) | json_values,
        "namespace": st.sampled_from(["agents", "default", ""]) | json_values,
        "subResource": st.sampled_from(["status", ""]) | json_values,
        "dryRun": st.booleans() | json_values,
        "object": _objects,
        "oldObject": _objects,
    },
)
_reviews = st.one_of(
    st.fixed_dictionaries({"apiVersion": st.just(API), "kind": st.just("AdmissionReview"), "request": _requests}),
    st.fixed_dictionaries({"apiVersion": st.sampled_from([API, "admission.k8s.io/v1beta1", "v1"]) | json_values,
                           "kind": st.sampled_from(["AdmissionReview", "Pod"]) | json_values},
                          optional={"request": _requests | json_values}),
    json_values,
)  # fmt: skip


def _encode(review: Any) -> bytes:
    # surrogatepass: a lone surrogate in a string is sent as the (invalid) UTF-8 bytes a hostile
    # client would send, not refused by our own encoder
    return json.dumps(review, ensure_ascii=False).encode("utf-8", "surrogatepass")


# what a hostile client sends that no JSON encoder would produce; Mutated prints as its name
_RAW = st.sampled_from(
    [
        Mutated(b"", ["empty"]),
        Mutated(b"not json", ["not json"]),
        Mutated(b"\xff\xfe{}", ["not UTF-8"]),
        Mutated(b"[" * 100_000 + b"]" * 100_000, ["lists nested 100,000 deep"]),
        Mutated(b'{"a":' * 50_000 + b"1" + b"}" * 50_000, ["objects nested 50,000 deep"]),
        Mutated(
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u-1", '
            b'"operation": "CREATE", "object": {"kind": "Job", "spec": {"parallelism": 1e400}}}}',
            ["parallelism 1e400"],
        ),
        Mutated(
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u-1", '
            b'"object": {"kind": "Job", "spec": {"parallelism": ' + b"9" * 5000 + b"}}}}",
            ["parallelism of 5,000 digits"],
        ),
        Mutated(
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u-1", '
            b'"object": {"kind": "Job", "spec": {"parallelism": NaN}}}}',
            ["parallelism NaN"],
        ),
    ]
)
_bodies = st.one_of(_reviews.map(lambda r: Mutated(_encode(r), [repr(r)[:300]])), _RAW)


def _uid(body: bytes) -> str | None:
    """The request's uid as the webhook must echo it (None: the body carries none)."""
    try:
        review = json.loads(body)
    except (ValueError, RecursionError):
        return None
    req = review.get("request") if isinstance(review, dict) else None
    uid = req.get("uid") if isinstance(req, dict) else None
    return uid if isinstance(uid, str) and uid else None


def _post(client: httpx.Client, body: bytes) -> httpx.Response:
    return client.post("/validate", content=body, headers={"content-type": "application/json"})


def check_topology(response: httpx.Response, body: bytes) -> None:
    assert response.status_code in (200, 400, 413), (response.status_code, response.text[:300])
    answer = response.json()
    if response.status_code != 200:
        assert answer["kind"] == "Status" and answer["code"] == response.status_code and answer["message"], answer
        return
    assert (answer["apiVersion"], answer["kind"]) == (API, "AdmissionReview")
    out = answer["response"]
    assert out["uid"] == _uid(body) and isinstance(out["allowed"], bool), out
    if not out["allowed"]:
        assert out["status"]["code"] in (400, 403) and out["status"]["message"], out
    assert "failed internally" not in json.dumps(out), out  # a bug the input reached, not a verdict


def check_budget(response: httpx.Response, body: bytes) -> None:
    assert response.status_code == 200, (response.status_code, response.text[:300])
    answer = response.json()
    assert (answer["apiVersion"], answer["kind"]) == (API, "AdmissionReview")
    out = answer["response"]
    uid = _uid(body)
    if out["uid"] != uid:
        # no uid to echo: only for a body it could not read as a review (strict JSON refuses NaN
        # and 1e400, which Python's json module, and so _uid, accepts)
        assert out["uid"] == "" and out["allowed"] is False and out["status"]["message"].startswith(
            "malformed AdmissionReview"), out  # fmt: skip
    assert isinstance(out["allowed"], bool)
    if not out["allowed"]:
        assert out["status"]["code"] in (400, 403) and out["status"]["message"], out
    assert "ledger unavailable" not in json.dumps(out), out  # the ledger is up: this was a bug, not a verdict
    review = json.loads(body) if uid else None
    req = review["request"] if review else {}
    kind = req.get("kind")
    if (
        out["allowed"]
        and req.get("operation") == "CREATE"
        and req.get("namespace") == "agents"
        and isinstance(kind, dict)
        and kind.get("kind") == "Pod"
        and not req.get("subResource")
    ):
        # never an accidental admit: a governed pod is admitted only if it reads as one
        assert isinstance(parse_pod(req.get("object"), "agents", CONFIG), PodRequest), req


# --- the tests --------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])  # fmt: skip
@given(_bodies)
@example(Mutated(b"[" * 100_000 + b"]" * 100_000, ["nested"]))  # was: RecursionError out of json.loads, a 500
# was: the lone surrogate echoed in the answer failed Starlette's UTF-8 encoding, a 500 (found in CI)
@example(Mutated(b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "\\ud800"}}',
                 ["lone surrogate uid"]))
def test_topology_webhook_answers_every_body(topology: Served, body: Mutated) -> None:
    check_topology(_post(topology.client, body.data), body.data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])  # fmt: skip
@given(_bodies)
def test_budget_webhook_answers_every_body(budget: Served, body: Mutated) -> None:
    check_budget(_post(budget.client, body.data), body.data)


def _governed_pod(name: str) -> dict[str, Any]:
    root = f"r{uuid.uuid4().hex[:12]}"
    labels = {f"{P}/agent-id": root, f"{P}/root-id": root, f"{P}/depth": "0", f"{P}/client": "acme",
              f"{P}/tier": "standard", f"{P}/agent-type": "worker"}  # fmt: skip
    spec = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    request = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
               "namespace": "agents", "object": {"kind": "Pod", "metadata": {"name": name, "labels": labels},
                                                 "spec": spec}}  # fmt: skip
    return {"apiVersion": API, "kind": "AdmissionReview", "request": request}


@pytest.mark.parametrize("name", ["a\x00b", "\ud800"], ids=["nul", "lone-surrogate"])
def test_budget_pod_name_postgres_cannot_hold_is_a_clear_denial(budget: Served, name: str) -> None:
    # was: the ledger refused the text, and the answer said "budget ledger unavailable"
    body = _encode(_governed_pod(name))
    response = _post(budget.client, body)
    check_budget(response, body)
    out = response.json()["response"]
    assert out["allowed"] is False and out["status"]["code"] == 400


@pytest.mark.parametrize("which", ["topology", "budget"])
def test_bodies_past_the_limit_are_refused(which: str, topology: Served, budget: Served) -> None:
    served = topology if which == "topology" else budget
    limit = topology_webhook.MAX_BODY if which == "topology" else budget_webhook.MAX_BODY
    body = b'{"pad": "' + b"x" * limit + b'"}'

    def chunks() -> Iterator[bytes]:  # no content-length: the limit must hold while streaming
        for i in range(0, len(body), 65536):
            yield body[i : i + 65536]

    for r in (_post(served.client, body), served.client.post("/validate", content=chunks())):
        if which == "topology":
            assert (r.status_code, r.json()["message"]) == (413, f"request body over {limit} bytes")
        else:
            assert r.status_code == 200
            assert r.json()["response"] == {"uid": "", "allowed": False, "status": {
                "code": 400, "reason": "BadRequest", "message": "AdmissionReview over 3 MiB"}}  # fmt: skip


@pytest.mark.parametrize("which", ["topology", "budget"])
def test_a_declared_gigabyte_is_refused_before_any_of_it_is_sent(which: str, topology: Served, budget: Served) -> None:
    # The request promises 1 GB and sends none of it: the answer must come at once, from the header
    # (the budget webhook read the whole body first; this waited for a gigabyte that never came).
    served = topology if which == "topology" else budget
    port = httpx.URL(served.url).port
    ctx = ssl.create_default_context(cafile=str(served.cert))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=20) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 1000000000\r\n\r\n")  # fmt: skip
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = tls.recv(65536)  # a socket.timeout here is the hang this test exists for
            if not chunk:
                break
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if which == "topology":
        assert (status, json.loads(payload)["code"]) == (413, 413)
    else:
        assert (status, json.loads(payload)["response"]["status"]["message"]) == (200, "AdmissionReview over 3 MiB")
