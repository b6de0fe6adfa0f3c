"""Topology admission webhook: AdmissionReview v1 over HTTPS (``python -m controllers
topology-webhook``). Thin: parse and bound the request, call ``core.publish.admission``.

Every answer is an AdmissionReview or, for a request that is not one, a JSON error with a
4xx status: never a 500 with a traceback. The API server calls us with ``failurePolicy:
Ignore`` (deploy/webhook), so an outage of this webhook never blocks submissions.

The topology index (domains per level with their GPUs) comes from the cluster's nodes, kept
current by a node watch (:mod:`connectors.kube.watch`): a relabelled node counts within a second,
not at the next poll. Bursts of events (a publish relabels every node) are coalesced: the watch
only marks the index stale and one thread rebuilds it from the latest copy of the nodes. While
the watch is broken the last index stays in use. Until the first list succeeds ``/healthz``
answers 503 (the readiness probe keeps us out of the Service) and ``/validate`` admits with a
warning, as ``failurePolicy: Ignore`` would.

An UPDATE is judged only when it changes what we judge (pod counts, GPUs per pod, topology
annotations). Kueue itself updates the Jobs it manages (unsuspends them with the assigned node
selectors, suspends them to evict or preempt), and the fabric may have shrunk since a Job was
admitted: refusing those updates would leave Kueue unable to start or evict it (seen on the real
control plane: tests/integration/test_kueue_admits.py).

The process stops on SIGTERM and SIGINT with exit code 0 however it was started (SIGINT ignored
included, as a background job of a non-interactive shell has it): uvicorn runs on a thread and
the main thread owns the signals. Run in the main thread, uvicorn would install its own handlers
and re-raise the signal after shutting down (exit -15 on SIGTERM, a KeyboardInterrupt traceback on
SIGINT).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from core.publish.admission import (
    PREFERRED,
    REQUIRED,
    SLICE_REQUIRED,
    SLICE_SIZE,
    UNCONSTRAINED,
    BadWorkload,
    TopologyIndex,
    evaluate,
    pod_sets,
)

log = logging.getLogger(__name__)
MAX_BODY = 1024 * 1024  # the API server sends at most ~3 MiB objects; our workloads are small
API_VERSION = "admission.k8s.io/v1"


class IndexHolder:
    """The current index, swapped atomically (a reader takes one reference, never a lock).

    ``None`` until the first list of the nodes: the webhook then admits with a warning.
    """

    def __init__(self, index: TopologyIndex | None = None) -> None:
        self.index = index


def index_from_nodes(nodes: Iterable[Mapping[str, Any]], levels: Sequence[str]) -> TopologyIndex:
    """Domains from the nodes' labels and allocatable GPUs (API JSON), as Kueue sees them."""
    rows = []
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        try:
            gpus = int(str(allocatable.get("nvidia.com/gpu", "0")))
        except ValueError:
            gpus = 0  # not a whole number: the device plugin never publishes that, count none
        rows.append((labels, gpus))
    return TopologyIndex.from_nodes(levels, rows)


class NodeIndexer:
    """Keeps ``holder.index`` in step with the cluster: a node watch marks it stale, this rebuilds.

    One rebuild covers every event that arrived before it started, so a publish that relabels 500
    nodes costs a handful of rebuilds, not 500. A rebuild that fails keeps the previous index.
    """

    def __init__(self, holder: IndexHolder, api: Any, levels: Sequence[str], **watch_options: Any) -> None:
        from connectors.kube.watch import node_labels_and_allocatable, watch_nodes

        self.holder = holder
        self.levels = tuple(levels)
        self.rebuilds = 0
        self._stale = threading.Event()
        self._stop = threading.Event()
        self.watch = watch_nodes(api, on_change=self._stale.set, transform=node_labels_and_allocatable,
                                 **watch_options)  # fmt: skip
        self._thread: threading.Thread | None = None

    def start(self) -> NodeIndexer:
        self.watch.start()
        self._thread = threading.Thread(target=self._run, name="topology-index", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._stale.set()
        self.watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            self._stale.wait()
            if self._stop.is_set():
                return
            self._stale.clear()
            nodes = self.watch.snapshot()
            try:
                self.holder.index = index_from_nodes(nodes, self.levels)
            except Exception:
                log.warning("topology index rebuild failed; keeping the previous one", exc_info=True)
                continue
            if self.rebuilds == 0:
                log.info("topology index loaded from %d nodes", len(nodes))
            self.rebuilds += 1


_JUDGED_ANNOTATIONS = (REQUIRED, PREFERRED, SLICE_REQUIRED, SLICE_SIZE, UNCONSTRAINED)


def _judged(obj: Any) -> list[tuple[str, int, int, tuple[tuple[str, str], ...]]] | None:
    """What a verdict depends on: per pod set its pods, GPUs per pod and topology annotations
    (None if the object cannot be read as a workload)."""
    if not isinstance(obj, Mapping):
        return None
    try:
        sets = pod_sets(obj)
    except BadWorkload:
        return None
    return [(ps.name, ps.pods, ps.gpus_per_pod, tuple(sorted((k, v) for k, v in ps.annotations.items()
                                                               if k in _JUDGED_ANNOTATIONS)))
            for ps in sets]  # fmt: skip


def unchanged_for_us(old: Any, new: Any) -> bool:
    """An UPDATE that leaves every judged field as it was (a readable old object is required)."""
    before = _judged(old)
    return before is not None and before == _judged(new)


class AsciiJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped. A request may carry text that is no valid UTF-8 once decoded
    (a lone surrogate such as ``"\\ud800"`` in its uid or object); echoed back by Starlette's
    JSONResponse, which encodes UTF-8, it raised and the API server saw a 500. Escaped, it is
    valid JSON the API server decodes."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _error(status: int, message: str) -> JSONResponse:
    return AsciiJSONResponse({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
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
    return AsciiJSONResponse({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response})


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
        except RecursionError:  # json's decoder recurses: "[" * 100_000 fits in MAX_BODY
            return _error(400, "body is JSON nested too deeply to be an AdmissionReview")
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
        if req.get("operation") == "UPDATE" and unchanged_for_us(req.get("oldObject"), obj):
            return _review(uid, True)  # judged when it was created; Kueue's own updates must pass
        index = holder.index
        if index is None:
            return _review(uid, True, warnings=["gpufabric topology index not loaded yet; not checked"])
        try:
            verdict = evaluate(obj, index)
        except BadWorkload as exc:
            return _review(uid, False, f"cannot read the workload: {exc}", code=400)
        except Exception:
            log.exception("topology webhook failed on uid %s", uid)
            return _review(uid, True, warnings=["gpufabric topology check failed internally; not checked"])
        return _review(uid, verdict.allowed, verdict.message, verdict.warnings)

    async def healthz(_: Request) -> Response:
        if holder.index is None:
            return Response("topology index not loaded yet", status_code=503)
        return Response("ok")

    return Starlette(routes=[Route("/validate", validate, methods=["POST"]), Route("/healthz", healthz)])


class Server:
    """uvicorn on a thread, HTTPS only: the webhook's app for an :class:`IndexHolder`, or any ASGI
    app (the benchmark's no-op peer runs on the same stack). On a thread uvicorn installs no
    signal handlers; whoever owns the main thread decides when to :meth:`stop`."""

    def __init__(self, holder: IndexHolder | Any, cert: Path, key: Path, host: str = "127.0.0.1", port: int = 0
                 ) -> None:  # fmt: skip
        import uvicorn

        app = make_app(holder) if isinstance(holder, IndexHolder) else holder
        # timeout_graceful_shutdown: a client holding a request open must not hold up a stop
        config = uvicorn.Config(app, host=host, port=port, ssl_certfile=str(cert), ssl_keyfile=str(key),
                                log_level="warning", access_log=False, timeout_graceful_shutdown=5)  # fmt: skip
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
    """``python -m controllers topology-webhook``: serve until SIGTERM or SIGINT, then exit 0."""
    import argparse

    from kubernetes.config import ConfigException

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
    args = parser.parse_args(argv)
    for path in (args.cert, args.key):
        if not path.is_file():
            parser.error(f"{path}: no such file")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    # First thing after the arguments: a signal during start-up must stop us, not kill us.
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("topology webhook stopping on %s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)  # also when inherited as ignored: a stop request is a stop request

    class _Source:
        kubeconfig = args.kubeconfig
        context = None
        in_cluster = args.in_cluster
        api_url = None

    try:
        api = api_client(_Source())
    except (ConfigException, OSError) as err:
        print(f"topology-webhook: cannot reach Kubernetes: {err}", file=sys.stderr)
        return 2
    levels = LabelScheme(args.scheme, args.prefix).topology_levels()
    holder = IndexHolder()
    indexer = NodeIndexer(holder, api, levels).start()
    server = Server(holder, args.cert, args.key, args.host, args.port)
    code = 0
    try:
        try:
            server.start()
        except RuntimeError as err:
            print(f"topology-webhook: {err} on {args.host}:{args.port} (see the log above)", file=sys.stderr)
            return 1
        log.info("topology webhook serving on https://%s:%d", args.host, server.port)
        while not stop.wait(0.5):
            if server.thread is None or not server.thread.is_alive():
                log.error("the HTTPS server stopped on its own")
                code = 1
                break
    finally:
        server.stop()
        indexer.stop()
        api.close()
    log.info("topology webhook stopped")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
