"""Topology admission webhook: AdmissionReview v1 over HTTPS (``python -m controllers`` mounts
it, or ``serve`` here). Thin: parse and bound the request, call ``core.publish.admission``.

Every answer is an AdmissionReview or, for a request that is not one, a JSON error with a
4xx status: never a 500 with a traceback. The API server calls us with ``failurePolicy:
Ignore`` (deploy/webhook), so an outage of this webhook never blocks submissions.
The topology index (domains per level with their GPUs) comes from the cluster's nodes, reloaded
every ``refresh_s`` in a background thread; a failed reload keeps the previous index.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from core.publish.admission import BadWorkload, TopologyIndex, evaluate

log = logging.getLogger(__name__)
MAX_BODY = 1024 * 1024  # the API server sends at most ~3 MiB objects; our workloads are small
API_VERSION = "admission.k8s.io/v1"


class IndexHolder:
    """The current index, swapped atomically; ``loader`` rebuilds it from the cluster."""

    def __init__(self, index: TopologyIndex, loader: Callable[[], TopologyIndex] | None = None) -> None:
        self.index = index
        self.loader = loader
        self._stop = threading.Event()

    def refresh(self) -> bool:
        if self.loader is None:
            return False
        try:
            self.index = self.loader()
            return True
        except Exception:
            log.warning("topology index reload failed; keeping the previous one", exc_info=True)
            return False

    def run_every(self, seconds: float) -> threading.Thread:
        def loop() -> None:
            while not self._stop.wait(seconds):
                self.refresh()

        thread = threading.Thread(target=loop, name="topology-index", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                         "message": message}, status_code=status)  # fmt: skip


def _review(uid: str, allowed: bool, message: str = "", warnings: Sequence[str] = (), code: int = 403
            ) -> JSONResponse:  # fmt: skip
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": code, "message": message, "reason": "Forbidden" if code == 403 else "Invalid"}
    if warnings:
        # the API server shows each warning to kubectl; it caps them at 120 characters... per
        # upstream guidance we keep them short but complete, at most 10
        response["warnings"] = list(warnings)[:10]
    return JSONResponse({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response})


def make_app(holder: IndexHolder) -> Starlette:
    async def validate(request: Request) -> Response:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return _error(413, f"request body over {MAX_BODY} bytes")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return _error(413, f"request body over {MAX_BODY} bytes")
        try:
            review = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return _error(400, "body is not JSON: expected an admission.k8s.io/v1 AdmissionReview")
        if not isinstance(review, dict) or review.get("kind") != "AdmissionReview":
            return _error(400, "expected kind AdmissionReview")
        if review.get("apiVersion") != API_VERSION:
            return _error(400, f"unsupported apiVersion {review.get('apiVersion')!r}: only {API_VERSION}")
        req = review.get("request")
        if not isinstance(req, dict) or not isinstance(req.get("uid"), str) or not req["uid"]:
            return _error(400, "AdmissionReview.request.uid is missing")
        uid = req["uid"]
        if req.get("operation", "CREATE") not in ("CREATE", "UPDATE"):
            return _review(uid, True)
        obj = req.get("object")
        if not isinstance(obj, dict):
            return _review(uid, False, "AdmissionReview.request.object is missing or not an object", code=400)
        try:
            verdict = evaluate(obj, holder.index)
        except BadWorkload as exc:
            return _review(uid, False, f"cannot read the workload: {exc}", code=400)
        except Exception:
            log.exception("topology webhook failed on uid %s", uid)
            return _review(uid, True, warnings=["gpufabric topology check failed internally; not checked"])
        return _review(uid, verdict.allowed, verdict.message, verdict.warnings)

    async def healthz(_: Request) -> Response:
        return Response("ok")

    async def allow_all(request: Request) -> Response:
        """The benchmark's peer: same TLS, server and parse, no policy."""
        review = json.loads(await request.body())
        return _review(review["request"]["uid"], True)

    return Starlette(routes=[Route("/validate", validate, methods=["POST"]), Route("/healthz", healthz),
                             Route("/allow", allow_all, methods=["POST"])])  # fmt: skip


def index_from_cluster(api: Any, levels: Sequence[str]) -> TopologyIndex:
    """Domains from the nodes' labels and allocatable GPUs, as Kueue sees them."""
    from connectors.kube import list_nodes

    nodes = []
    for n in list_nodes(api):
        alloc = (n.status.allocatable or {}) if n.status else {}
        try:
            gpus = int(str(alloc.get("nvidia.com/gpu", "0")))
        except ValueError:
            gpus = 0
        meta: Any = n.metadata
        nodes.append((meta.labels or {}, gpus))
    return TopologyIndex.from_nodes(levels, nodes)


class Server:
    """uvicorn on a thread (tests, bench) or the main thread (``serve``), HTTPS only."""

    def __init__(self, holder: IndexHolder, cert: Path, key: Path, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        config = uvicorn.Config(make_app(holder), host=host, port=port, ssl_certfile=str(cert), ssl_keyfile=str(key),
                                log_level="warning", access_log=False)  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    def start(self, timeout_s: float = 10.0) -> Server:
        import time

        self.thread = threading.Thread(target=self.server.run, name="topology-webhook", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the topology webhook did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=10)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m controllers.topology_webhook``: serve until SIGTERM."""
    import argparse

    from connectors.kube import api_client
    from core.publish import LabelScheme

    parser = argparse.ArgumentParser(prog="topology-webhook")
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--in-cluster", action="store_true")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--scheme", choices=("gpufabric", "topograph"), default="gpufabric")
    parser.add_argument("--prefix", default="gpufabric.io")
    parser.add_argument("--refresh-s", type=float, default=60.0)
    args = parser.parse_args(argv)

    class _Source:
        kubeconfig = args.kubeconfig
        context = None
        in_cluster = args.in_cluster
        api_url = None

    api = api_client(_Source())
    levels = LabelScheme(args.scheme, args.prefix).topology_levels()
    holder = IndexHolder(index_from_cluster(api, levels), lambda: index_from_cluster(api, levels))
    holder.run_every(args.refresh_s)
    server = Server(holder, args.cert, args.key, args.host, args.port)
    server.server.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
