"""``connectors.kube.client.send`` and ``apply`` against a local HTTP server: the request they build
(URL, query, bearer token, body) and how they fold any answer into one ``Response``, on whichever
kubernetes client is installed (36.x raises on a non-2xx answer, 37.x returns it). The real API
server judges the same calls in tests/integration/test_publish_kube.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from connectors.kube import client as kube
from connectors.kube.client import apply, send


class _Server:
    """Answers each request with the next queued (status, headers, body) and records what came in."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, str], bytes]] = []
        self.seen: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                outer.seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                   "body": self.rfile.read(length) if length else b""})  # fmt: skip
                status, headers, body = outer.answers.pop(0)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PATCH = _answer  # http.server finds handlers by these names

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture()
def server() -> Iterator[_Server]:
    srv = _Server()
    thread = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def _api(url: str, token: str | None = "s3cret") -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = url
    if token is not None:
        configuration.api_key = {"BearerToken": token}  # as load_kube_config stores a token
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
    return client.ApiClient(configuration)


def test_apply_sends_a_server_side_apply_with_the_clients_token(server: _Server) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-001", "labels": {"a": "b"}}}
    server.answers.append((200, {"Content-Type": "application/json"}, json.dumps(node).encode()))
    answered = apply(_api(server.url), node, field_manager="gpufabric-test", force=True, dry_run=True)
    assert answered == node
    [request] = server.seen
    assert request["method"] == "PATCH"
    assert request["path"] == "/api/v1/nodes/gpu-001?fieldManager=gpufabric-test&force=true&dryRun=All"
    assert request["headers"]["Content-Type"] == "application/apply-patch+yaml"
    assert request["headers"]["authorization"] == "Bearer s3cret"
    assert json.loads(request["body"]) == node


def test_an_error_answer_comes_back_folded_not_raised(server: _Server) -> None:
    status = {"kind": "Status", "message": 'nodes "x" not found', "code": 404}
    server.answers.append((404, {"Content-Type": "application/json", "X-Trace": "t1"}, json.dumps(status).encode()))
    response = send(_api(server.url, token=None), "GET", "/api/v1/nodes/x")
    assert (response.status, response.ok, response.header("x-trace")) == (404, False, "t1")
    assert "authorization" not in {k.lower() for k in server.seen[0]["headers"]}  # no token, none sent
    exc = response.error()
    assert isinstance(exc, ApiException) and exc.status == 404
    assert json.loads(exc.body)["message"] == 'nodes "x" not found'  # text on 36 and 37 alike


def test_apply_retries_a_throttled_answer_then_reports_a_final_refusal(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    monkeypatch.setattr(kube.time, "sleep", waits.append)
    refused = {"kind": "Status", "message": "field is immutable", "code": 422}
    server.answers += [
        (429, {"Retry-After": "2"}, b""),
        (500, {"Retry-After": "0.5"}, b""),
        (422, {"Content-Type": "application/json"}, json.dumps(refused).encode()),
    ]
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-002"}}
    with pytest.raises(ApiException, match=r"\(422\)") as caught:
        apply(_api(server.url), node)
    assert waits == [2.0, 0.5]
    assert len(server.seen) == 3
    assert json.loads(caught.value.body)["message"] == "field is immutable"
