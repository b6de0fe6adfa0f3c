"""The fault proxy (``simulator.kube.proxy``) in front of the session's real API server.

Every answer here comes from the real kube-apiserver except the ones a fault rule injects. The
official ``kubernetes`` client (and kubectl, as a subprocess) talks to the proxy; the admin client
talks to the API server directly to check what really happened there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from simulator.controlplane import ControlPlane
from simulator.controlplane.api import Api
from simulator.kube.faults import InvalidFaultRule
from simulator.kube.proxy import FaultProxy, start_proxy

pytestmark = pytest.mark.integration

APPLY = "application/apply-patch+yaml"


@pytest.fixture(scope="module")
def proxied(fault_proxy: FaultProxy) -> Iterator[client.ApiClient]:
    """The official client on the proxy's kubeconfig."""
    api = config.new_client_from_config(config_file=str(fault_proxy.kubeconfig))
    yield api
    api.close()


@pytest.fixture(scope="module")
def direct(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    """The official client straight to the API server, as the admin: what really happened."""
    api = control_plane.kube_client()
    yield api
    api.close()


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    assert body["kind"] == "Status" and body["code"] == exc.status
    return body


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def configmap(name: str, data: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, **({"labels": labels} if labels else {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data or {}}


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll until ``check`` is truthy (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"gave up waiting for {what}")


class Watcher:
    """A ``kubernetes`` watch on a thread: its events go to a queue; how the stream ended is kept."""

    def __init__(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.ended: BaseException | None = None
        self.done = threading.Event()
        self.watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(func, args, kwargs), daemon=True)
        self._thread.start()

    def _run(self, func: Callable[..., Any], args: Any, kwargs: Any) -> None:
        try:
            for event in self.watch.stream(func, *args, **kwargs):
                self.events.put(event)
        except BaseException as exc:
            self.ended = exc
        finally:
            self.done.set()

    def next_event(self, predicate: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=0.1)
            except queue.Empty:
                if self.done.is_set() and self.events.empty():
                    pytest.fail(f"the watch ended ({self.ended!r}) before {what}")
                continue
            if predicate(event):
                return event
        pytest.fail(f"gave up waiting for {what}")

    def join(self) -> BaseException | None:
        assert self.done.wait(60), "the watch did not end"
        self._thread.join()
        return self.ended


def named(name: str, type_: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e["type"] == type_ and e["raw_object"]["metadata"]["name"] == name


def watching(proxy: FaultProxy, path: str, count: int = 1) -> None:
    """Wait until the API server has accepted ``count`` watches on ``path`` through the proxy."""
    wait_for(lambda: proxy.open_watches().count(path) >= count, f"a watch on {path} through the proxy")


# --- forwarding ---------------------------------------------------------------------------------


def test_forwards_every_verb_query_and_content_type_unchanged(
    faults: FaultProxy, proxied: client.ApiClient, direct: client.ApiClient, kube_namespace: str
) -> None:
    core, ns, name = client.CoreV1Api(proxied), kube_namespace, unique("cm")
    before = len(faults.requests)
    created = core.create_namespaced_config_map(ns, configmap(name, {"a": "1"}, {"tier": "x"}))
    core.patch_namespaced_config_map(name, ns, {"data": {"b": "2"}}, _content_type="application/merge-patch+json")
    core.patch_namespaced_config_map(name, ns, {"data": {"c": "3"}},
                                     _content_type="application/strategic-merge-patch+json")
    core.patch_namespaced_config_map(name, ns, [{"op": "add", "path": "/data/d", "value": "4"}],
                                     _content_type="application/json-patch+json")
    current = core.read_namespaced_config_map(name, ns)
    assert current.data == {"a": "1", "b": "2", "c": "3", "d": "4"}
    # A selector with spaces, parentheses and '!' reaches the API server as the client encoded it.
    selector = "tier in (x,z),tier!=q"
    assert [c.metadata.name for c in core.list_namespaced_config_map(ns, label_selector=selector).items] == [name]
    current.data = {"e": "5"}
    replaced = core.replace_namespaced_config_map(name, ns, current)
    assert replaced.metadata.uid == created.metadata.uid and replaced.data == {"e": "5"}
    # A stale resourceVersion: the real server's own 409 comes back through the proxy unchanged.
    current.data = {"f": "6"}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map(name, ns, current)
    assert err.value.status == 409 and status_of(err.value)["reason"] == "Conflict"
    assert status_of(err.value)["details"] == {"name": name, "kind": "configmaps"}
    core.delete_namespaced_config_map(name, ns)
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map(name, ns)
    assert err.value.status == 404 and status_of(err.value)["message"] == f'configmaps "{name}" not found'
    assert err.value.headers["Content-Type"] == "application/json"
    assert name not in {c.metadata.name for c in client.CoreV1Api(direct).list_namespaced_config_map(ns).items}

    base = f"/api/v1/namespaces/{ns}/configmaps"
    sent = [r for r in faults.requests[before:] if r.path.startswith(base)]
    assert [(r.method, r.path) for r in sent] == [
        ("POST", base), ("PATCH", f"{base}/{name}"), ("PATCH", f"{base}/{name}"), ("PATCH", f"{base}/{name}"),
        ("GET", f"{base}/{name}"), ("GET", base), ("PUT", f"{base}/{name}"), ("PUT", f"{base}/{name}"),
        ("DELETE", f"{base}/{name}"), ("GET", f"{base}/{name}"),
    ]
    assert parse_qs(sent[5].query) == {"labelSelector": [selector]}
    assert faults.request_counts()[("PATCH", f"{base}/{name}")] == 3
    assert faults.fired == {"5xx": 0, "conflict": 0, "delayed": 0, "expired": 0}


def test_server_side_apply_and_dry_run_through_the_proxy(
    faults: FaultProxy, proxied: client.ApiClient, direct: client.ApiClient, kube_namespace: str
) -> None:
    core, ns, name = client.CoreV1Api(proxied), kube_namespace, unique("ssa")
    applied = core.patch_namespaced_config_map(name, ns, configmap(name, {"owner": "one"}),
                                               field_manager="proxy-one", _content_type=APPLY)
    managers = {(m.manager, m.operation) for m in applied.metadata.managed_fields}
    assert managers == {("proxy-one", "Apply")}
    # Another manager taking the same field: the real server's apply conflict, then a forced apply.
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map(name, ns, configmap(name, {"owner": "two"}),
                                         field_manager="proxy-two", _content_type=APPLY)
    assert err.value.status == 409 and status_of(err.value)["reason"] == "Conflict"
    assert status_of(err.value)["message"] == 'Apply failed with 1 conflict: conflict with "proxy-one": .data.owner'
    core.patch_namespaced_config_map(name, ns, configmap(name, {"owner": "two"}), field_manager="proxy-two",
                                     force=True, _content_type=APPLY)
    truth = client.CoreV1Api(direct).read_namespaced_config_map(name, ns)
    assert truth.data == {"owner": "two"}
    assert {m.manager for m in truth.metadata.managed_fields} == {"proxy-two"}

    # Server-side dry run through the proxy: answered as if done, nothing written.
    dry = unique("dry")
    answer = core.create_namespaced_config_map(ns, configmap(dry, {"k": "v"}), dry_run="All")
    assert answer.metadata.name == dry and answer.data == {"k": "v"}
    core.patch_namespaced_config_map(name, ns, {"data": {"owner": "three"}}, dry_run="All")
    core.delete_namespaced_config_map(name, ns, dry_run="All")
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(direct).read_namespaced_config_map(dry, ns)
    assert err.value.status == 404
    assert client.CoreV1Api(direct).read_namespaced_config_map(name, ns).data == {"owner": "two"}
    dry_runs = [r for r in faults.requests if r.path.startswith(f"/api/v1/namespaces/{ns}/") and "dryRun" in r.query]
    assert [r.method for r in dry_runs] == ["POST", "PATCH", "DELETE"]


def test_kubectl_in_a_subprocess_uses_the_proxy_kubeconfig(
    faults: FaultProxy, control_plane: ControlPlane, kube_namespace: str
) -> None:
    name = unique("kubectl")
    manifest = json.dumps({**configmap(name, {"via": "kubectl"}),
                           "metadata": {"name": name, "namespace": kube_namespace}})
    before = len(faults.requests)
    kubectl = [str(control_plane.kubectl_path), "--kubeconfig", str(faults.kubeconfig)]
    applied = subprocess.run([*kubectl, "apply", "--server-side", "--field-manager=kubectl-proxy", "-f", "-"],
                             input=manifest, capture_output=True, text=True, timeout=120)
    assert applied.returncode == 0, applied.stderr
    got = subprocess.run([*kubectl, "get", "configmap", name, "-n", kube_namespace, "-o", "json"],
                         capture_output=True, text=True, timeout=120)
    assert json.loads(got.stdout)["data"] == {"via": "kubectl"}
    assert ("PATCH", f"/api/v1/namespaces/{kube_namespace}/configmaps/{name}") in {
        (r.method, r.path) for r in faults.requests[before:]}


# --- injected errors ----------------------------------------------------------------------------


def test_5xx_by_count_with_retry_after_then_normal(
    faults: FaultProxy, proxied: client.ApiClient, kube_cluster: ControlPlane
) -> None:
    node = unique("fp-node")
    kube_cluster.register_nodes([{"name": node, "capacity": {"cpu": "4", "memory": "8Gi", "pods": "10"}}])
    core = client.CoreV1Api(proxied)
    faults.set_faults({"paths": ["/api/v1/nodes/*"], "status_5xx_next": 2, "retry_after_s": 1})
    before = len(faults.requests)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core.read_node(node)
        body = status_of(err.value)
        assert (err.value.status, body["reason"]) == (500, "InternalError")
        assert body["details"] == {"retryAfterSeconds": 1}
        assert err.value.headers["Retry-After"] == "1"
    assert faults.requests[before:] == []  # injected answers never reached the API server
    assert core.read_node(node).metadata.name == node
    assert core.list_node(limit=1).items  # the collection path never matched the rule
    assert faults.fired["5xx"] == 2

    # 503 and 429 carry the reasons the API server gives them; the method filter spares reads.
    faults.set_faults([{"paths": ["/api/v1/nodes/*"], "methods": ["PATCH"], "status_5xx_next": 1,
                        "status_code": 503},
                       {"paths": ["/api/v1/nodes"], "status_5xx_next": 1, "status_code": 429}])
    assert core.read_node(node).metadata.name == node
    with pytest.raises(ApiException) as err:
        core.patch_node(node, {"metadata": {"labels": {"fp": "1"}}})
    assert (err.value.status, status_of(err.value)["reason"]) == (503, "ServiceUnavailable")
    assert "Retry-After" not in err.value.headers
    with pytest.raises(ApiException) as err:
        core.list_node()
    assert (err.value.status, status_of(err.value)["reason"]) == (429, "TooManyRequests")
    assert core.patch_node(node, {"metadata": {"labels": {"fp": "1"}}}).metadata.labels["fp"] == "1"
    assert faults.fired["5xx"] == 4
    # A 429 with Retry-After on a GET is retried by urllib3 itself (its default Retry honours the
    # header for 413/429/503): the caller sees only the answer, the proxy saw the refusal.
    faults.set_faults({"paths": ["/api/v1/nodes"], "status_5xx_next": 1, "status_code": 429, "retry_after_s": 0})
    before = len(faults.requests)
    assert node in {n.metadata.name for n in core.list_node().items}
    assert faults.fired["5xx"] == 5
    assert [r.path for r in faults.requests[before:]] == ["/api/v1/nodes"]


def test_delay_applies_only_to_matching_method_and_path(
    faults: FaultProxy, proxied: client.ApiClient, kube_namespace: str
) -> None:
    # Which requests were delayed is read from the proxy's counter, not from a clock.
    core, ns = client.CoreV1Api(proxied), kube_namespace
    faults.set_faults({"paths": ["/api/v1/namespaces/*/configmaps"], "methods": ["GET"], "delay_ms": 3000})
    # A 0.5 s client timeout against a 3 s delay: urllib3 retries the read 3 times (its default
    # Retry(3)), every attempt is delayed, then it gives up with the read timeout as the reason.
    with pytest.raises(urllib3.exceptions.MaxRetryError) as err:
        core.list_namespaced_config_map(ns, _request_timeout=0.5)
    assert isinstance(err.value.reason, urllib3.exceptions.ReadTimeoutError)
    assert err.value.url == f"/api/v1/namespaces/{ns}/configmaps"
    wait_for(lambda: faults.fired["delayed"] == 4, "four delayed attempts")  # the last may still be in flight
    # The same path with another method, and another path with the same method: not delayed.
    created = core.create_namespaced_config_map(ns, configmap("p"))
    assert core.read_namespaced_config_map("p", ns).metadata.uid == created.metadata.uid
    assert faults.fired["delayed"] == 4
    # A delayed answer is the API server's own, once the delay is over.
    faults.set_faults({"paths": ["/api/v1/namespaces/*/configmaps"], "methods": ["GET"], "delay_ms": 300})
    started = time.monotonic()
    assert [c.metadata.name for c in core.list_namespaced_config_map(ns).items if c.metadata.name == "p"] == ["p"]
    assert time.monotonic() - started >= 0.3  # a lower bound: it cannot come sooner than the delay
    assert faults.fired["delayed"] == 5


def test_conflicts_on_writes_only_then_normal(
    faults: FaultProxy, proxied: client.ApiClient, direct: client.ApiClient, kube_namespace: str
) -> None:
    ns = kube_namespace
    leases = client.CoordinationV1Api(proxied)
    leases.create_namespaced_lease(ns, {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}})
    faults.set_faults({"paths": [f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/*"], "conflict_next": 1})
    assert leases.read_namespaced_lease("l", ns).spec.holder_identity == "a"  # reads are not affected
    with pytest.raises(ApiException) as err:
        leases.patch_namespaced_lease("l", ns, {"spec": {"holderIdentity": "b"}})
    body = status_of(err.value)
    assert (err.value.status, body["reason"]) == (409, "Conflict")
    assert body["message"] == ('Operation cannot be fulfilled on leases.coordination.k8s.io "l": the object has been '
                               "modified; please apply your changes to the latest version and try again")
    assert body["details"] == {"name": "l", "group": "coordination.k8s.io", "kind": "leases"}
    # The refused write never reached the API server.
    assert client.CoordinationV1Api(direct).read_namespaced_lease("l", ns).spec.holder_identity == "a"
    leases.patch_namespaced_lease("l", ns, {"spec": {"holderIdentity": "b"}})
    assert client.CoordinationV1Api(direct).read_namespaced_lease("l", ns).spec.holder_identity == "b"
    assert faults.fired["conflict"] == 1


def test_invalid_fault_rules_are_refused_naming_the_field(faults: FaultProxy) -> None:
    faults.set_faults({"paths": ["/api/v1/nodes"], "status_5xx_next": 1})
    cases = [
        ({"status_5xx_next": -1}, r"status_5xx_next: Input should be greater than or equal to 0"),
        ({"status_5xx": 1}, r"status_5xx: Extra inputs are not permitted"),
        ({"status_code": 404}, r"status_code: Value error, 404 is not a server error"),
        ({"methods": ["FETCH"]}, r"methods: Value error, unknown HTTP method\(s\) \['FETCH'\]"),
        ({"paths": ["api/v1/nodes"]}, r"paths: Value error, 'api/v1/nodes' is not a URL path glob"),
        ([{"delay_ms": 1}, {"expire_watches_next": "x"}], r"rule 1: expire_watches_next: Input should be a valid"),
    ]
    for rule, message in cases:
        with pytest.raises(InvalidFaultRule, match=message):
            faults.set_faults(rule)
    # A refused set leaves the rules that were in place.
    assert [r["paths"] for r in faults.describe_faults()["rules"]] == [["/api/v1/nodes"]]
    assert issubclass(InvalidFaultRule, ValueError)


# --- watches ------------------------------------------------------------------------------------


def test_watch_through_the_proxy_sees_a_label_change_as_it_happens(
    faults: FaultProxy, proxied: client.ApiClient, direct: client.ApiClient, kube_namespace: str
) -> None:
    ns, name = kube_namespace, unique("w")
    core = client.CoreV1Api(proxied)
    core.create_namespaced_config_map(ns, configmap(name))
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    watcher = Watcher(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=300)
    watching(faults, f"/api/v1/namespaces/{ns}/configmaps")
    client.CoreV1Api(direct).patch_namespaced_config_map(name, ns, {"metadata": {"labels": {"colour": "blue"}}})
    event = watcher.next_event(named(name, "MODIFIED"), "the label change")
    assert event["object"].metadata.labels == {"colour": "blue"}
    # Seen while the watch is still open (300 s): the proxy relays chunks, it does not buffer.
    assert not watcher.done.is_set()
    assert faults.drop_watches(f"/api/v1/namespaces/{ns}/*") == 1
    watcher.join()


def test_dropped_watch_ends_the_stream_and_resumes_from_the_last_version(
    faults: FaultProxy, proxied: client.ApiClient, direct: client.ApiClient, kube_namespace: str
) -> None:
    ns = kube_namespace
    core, truth = client.CoreV1Api(proxied), client.CoreV1Api(direct)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    watcher = Watcher(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=300)
    watching(faults, path)
    truth.create_namespaced_config_map(ns, configmap("first"))
    first = watcher.next_event(named("first", "ADDED"), "the first ConfigMap")
    last_rv = first["object"].metadata.resource_version
    assert faults.drop_watches("/api/v1/namespaces/other/*") == 0
    assert faults.drop_watches(path) == 1
    ended = watcher.join()
    # Cut mid-body, as a broken connection: urllib3 sees the chunked body end early.
    assert isinstance(ended, urllib3.exceptions.ProtocolError), repr(ended)
    assert faults.open_watches() == []
    truth.create_namespaced_config_map(ns, configmap("second"))  # while nobody watches
    resumed = Watcher(core.list_namespaced_config_map, ns, resource_version=last_rv, timeout_seconds=300)
    event = resumed.next_event(lambda e: e["type"] == "ADDED", "the next event after resuming")
    assert event["object"].metadata.name == "second"  # nothing missed, nothing repeated
    assert faults.drop_watches(path) == 1
    resumed.join()


def test_our_api_watch_through_the_proxy_ends_on_a_drop_and_the_proxy_ends_abandoned_watches(
    faults: FaultProxy, control_plane: ControlPlane, kube_namespace: str
) -> None:
    path = f"/api/v1/namespaces/{kube_namespace}/configmaps"
    api = Api(faults.url, control_plane.ca_file, control_plane.admin_cert, control_plane.admin_key)
    seen: queue.Queue[Any] = queue.Queue()

    def consume(rv: str, stop_after_first: bool) -> None:
        try:
            for event in api.watch(path, rv):
                if event["type"] == "ADDED":
                    seen.put(event)
                    if stop_after_first:
                        return  # leaves the generator: httpx closes the stream
        except httpx.HTTPError as exc:
            seen.put(exc)

    try:
        _, rv = api.list_all(path)
        reader = threading.Thread(target=consume, args=(rv, False), daemon=True)
        reader.start()
        watching(faults, path)
        api.post(path, configmap("x"))
        added = seen.get(timeout=60)
        assert added["object"]["metadata"]["name"] == "x"
        assert faults.drop_watches(path) == 1
        ended = seen.get(timeout=60)
        assert isinstance(ended, httpx.RemoteProtocolError)
        assert "incomplete chunked read" in str(ended)
        reader.join()
        # A client that hangs up: the proxy ends the watch it relayed (and its upstream request).
        reader = threading.Thread(target=consume, args=(added["object"]["metadata"]["resourceVersion"], True),
                                  daemon=True)
        reader.start()
        watching(faults, path)
        api.post(path, configmap("y"))
        assert seen.get(timeout=60)["object"]["metadata"]["name"] == "y"
        reader.join()
        wait_for(lambda: path not in faults.open_watches(), "the abandoned watch to be closed")
    finally:
        api.close()


def test_expired_watch_gets_the_410_error_event_once(
    faults: FaultProxy, proxied: client.ApiClient, kube_namespace: str
) -> None:
    ns = kube_namespace
    core = client.CoreV1Api(proxied)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    faults.set_faults({"paths": [path], "expire_watches_next": 1})
    listed = core.list_namespaced_config_map(ns)  # a list is not a watch: not expired, not counted
    rv = listed.metadata.resource_version
    assert faults.fired["expired"] == 0
    # With timeout_seconds the client does not retry by itself: it raises the ERROR event's Status.
    stream = watch.Watch().stream(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=5)
    with pytest.raises(ApiException) as err:
        next(stream)
    assert err.value.status == 410
    assert err.value.reason == f"Expired: too old resource version: {rv} (injected by the fault proxy)"
    assert faults.fired["expired"] == 1
    # The raw answer is what the API server sends for a too-old version: 200, one ERROR event, closed.
    faults.set_faults({"paths": [path], "expire_watches_next": 1})
    answer = httpx.get(f"{faults.url}{path}", params={"watch": "1", "resourceVersion": rv}, timeout=30)
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    lines = answer.text.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["type"] == "ERROR"
    assert {k: v for k, v in json.loads(lines[0])["object"].items() if k != "message"} == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Expired", "code": 410}
    # The count is spent: the next watch is the API server's own.
    watcher = Watcher(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=300)
    watching(faults, path)
    client.CoreV1Api(proxied).create_namespaced_config_map(ns, configmap("after"))
    assert watcher.next_event(named("after", "ADDED"), "an event after the expiry")["type"] == "ADDED"
    assert faults.fired["expired"] == 2
    faults.drop_watches(path)
    watcher.join()


# --- identity -----------------------------------------------------------------------------------


def test_impersonation_passes_through_and_rbac_judges_it(faults: FaultProxy, proxied: client.ApiClient) -> None:
    nobody = config.new_client_from_config(config_file=str(faults.kubeconfig))
    nobody.set_default_header("Impersonate-User", "fp-nobody")
    try:
        with pytest.raises(ApiException) as err:
            client.CoreV1Api(nobody).list_node()
        assert (err.value.status, status_of(err.value)["reason"]) == (403, "Forbidden")
        assert status_of(err.value)["message"] == ('nodes is forbidden: User "fp-nobody" cannot list resource '
                                                   '"nodes" in API group "" at the cluster scope')
        # The same user in system:masters (an Impersonate-Group header) may.
        nobody.set_default_header("Impersonate-Group", "system:masters")
        assert client.CoreV1Api(nobody).list_node(limit=1).kind == "NodeList"
    finally:
        nobody.close()
    # Without the headers the proxy is the admin.
    review = client.AuthenticationV1Api(proxied).create_self_subject_review({"apiVersion": "authentication.k8s.io/v1",
                                                                              "kind": "SelfSubjectReview"})
    assert review.status.user_info.username == "gpufabric-admin"


def open_sockets() -> int:
    """Sockets this process holds (Linux)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


# --- failure and shutdown -----------------------------------------------------------------------


def test_upstream_down_gives_502_with_a_status(control_plane: ControlPlane) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    proxy = start_proxy(dataclasses.replace(control_plane, server=f"https://127.0.0.1:{dead}"))
    try:
        api = config.new_client_from_config(config_file=str(proxy.kubeconfig))
        try:
            with pytest.raises(ApiException) as err:
                client.CoreV1Api(api).list_node()
        finally:
            api.close()
        body = status_of(err.value)
        assert err.value.status == 502
        assert body["message"].startswith(f"the fault proxy could not reach the API server at "
                                          f"https://127.0.0.1:{dead}: ConnectError:")
    finally:
        proxy.stop()


def test_stop_closes_watches_and_leaves_no_thread_or_socket(control_plane: ControlPlane, kube_namespace: str) -> None:
    threads_before, sockets_before = set(threading.enumerate()), open_sockets()
    proxy = start_proxy(control_plane)
    api = config.new_client_from_config(config_file=str(proxy.kubeconfig))
    try:
        core = client.CoreV1Api(api)
        rv = core.list_namespaced_config_map(kube_namespace).metadata.resource_version
        watcher = Watcher(core.list_namespaced_config_map, kube_namespace, resource_version=rv, timeout_seconds=300)
        watching(proxy, f"/api/v1/namespaces/{kube_namespace}/configmaps")
        # A request held by a long delay is answered, not left hanging, when the proxy stops.
        proxy.set_faults({"paths": ["/version"], "delay_ms": 120_000})
        held: queue.Queue[httpx.Response] = queue.Queue()
        asker = threading.Thread(target=lambda: held.put(httpx.get(f"{proxy.url}/version", timeout=300)))
        asker.start()
        wait_for(lambda: proxy.fired["delayed"] == 1, "the request to be held")
        assert f"fault-proxy-{proxy.port}" in {t.name for t in threading.enumerate()}
        proxy.stop()
        assert isinstance(watcher.join(), urllib3.exceptions.ProtocolError)  # the open watch was cut
        asker.join()
        answer = held.get_nowait()
        assert answer.status_code == 503
        assert answer.json()["message"] == "the fault proxy is shutting down"
    finally:
        api.close()
    assert set(threading.enumerate()) - threads_before == set()
    assert open_sockets() <= sockets_before  # listener, client and upstream connections all closed
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{proxy.url}/version", timeout=5)
    assert not proxy.kubeconfig.exists()
    with pytest.raises(RuntimeError, match="the fault proxy is stopped"):
        proxy.drop_watches()
    proxy.stop()  # a second stop is harmless
