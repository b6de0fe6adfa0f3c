"""Validating admission webhook for pod CREATE: the tree's budget decides.

Thin: parse the AdmissionReview, :func:`core.budget.parse_pod`, then
:func:`connectors.warehouse.ledger.admit` (lock the root, :func:`core.budget.decide`, reserve).
Every answer is an AdmissionReview v1 with the request's uid; malformed input is a denial with a
reason (HTTP 200, as the API server expects), never a 500 and never an accidental admit.

Failure policy: register with ``failurePolicy: Fail`` and ``timeoutSeconds: 5`` for governed
namespaces (``namespaceSelector``). The point of the controller is that a runaway tree cannot
outgrow its envelope; ``Ignore`` would admit everything exactly when the ledger is unreachable,
which is how the 847-pod incident happened. The cost is that pod creation in governed namespaces
stops while the webhook or Postgres is down, so run 2+ replicas and exempt kube-system. The
reconciler is the backstop for anything admitted outside the webhook.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from connectors.warehouse.ledger import ConnectionPool, admit, audit
from core.budget import BudgetConfig, Decision, Denial, parse_pod

log = logging.getLogger(__name__)
MAX_BODY = 3 * 1024 * 1024  # the API server's own request limit


def _review(uid: str, allowed: bool, message: str, code: int = 200) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": code, "reason": "Forbidden" if code == 403 else "BadRequest", "message": message}
    elif message:
        response["warnings"] = [message[:250]]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def review_decision(body: Any, config: BudgetConfig, pool: ConnectionPool, now: datetime) -> tuple[str, Decision]:
    """(uid, decision) for one AdmissionReview body (already JSON-decoded)."""
    if (
        not isinstance(body, dict)
        or body.get("kind") != "AdmissionReview"
        or body.get("apiVersion") != "admission.k8s.io/v1"
    ):
        return "", Decision(
            False, "malformed AdmissionReview: need apiVersion admission.k8s.io/v1, kind AdmissionReview", "malformed"
        )
    req = body.get("request")
    if not isinstance(req, dict) or not isinstance(req.get("uid"), str) or not req["uid"]:
        return "", Decision(False, "malformed AdmissionReview: missing request or request.uid", "malformed")
    uid = req["uid"]
    kind = req.get("kind") or {}
    if not isinstance(kind, dict):
        return uid, Decision(False, "malformed AdmissionReview: request.kind", "malformed")
    if req.get("operation") != "CREATE" or kind.get("kind") != "Pod" or req.get("subResource"):
        # Registered for pod CREATE only; anything else reaching us is not ours to judge.
        return uid, Decision(True, "")
    namespace = req.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        return uid, Decision(False, "malformed AdmissionReview: pod CREATE without namespace", "malformed")
    if not config.governs(namespace):
        return uid, Decision(True, "")
    parsed = parse_pod(req.get("object"), namespace, config)
    if isinstance(parsed, Denial):
        return uid, Decision(False, parsed.reason, "malformed")
    unsendable = next((f.name for f in fields(parsed) if "\x00" in str(getattr(parsed, f.name))), None)
    if unsendable is not None:
        # No Kubernetes name or label holds a NUL, and the ledger refuses one (libpq would cut the
        # query there): a clear denial, not the ledger's error passed off as an outage.
        return uid, Decision(False, f"malformed pod: {unsendable} holds a NUL character", "malformed")
    with pool.connection() as conn:
        decision = admit(conn, parsed, now, dry_run=bool(req.get("dryRun")))
        if not decision.allowed and not req.get("dryRun"):
            audit(
                conn,
                at=now,
                controller="webhook",
                action="denied",
                reason=decision.reason,
                root_id=parsed.root_id,
                namespace=namespace,
                pod=parsed.name,
                limit=decision.limit,
            )
    return uid, decision


def _json(review: dict[str, Any]) -> Response:
    return Response(orjson.dumps(review), media_type="application/json")


def _too_big() -> Response:
    return _json(_review("", False, "AdmissionReview over 3 MiB", 400))


def make_app(
    config: BudgetConfig, pool: ConnectionPool, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> Starlette:
    """The webhook app. The admission runs on the event loop, not in a thread pool: one admission
    at a time per worker process, with concurrency from worker processes (``--workers``). Handing
    each request to a thread cost more CPU than the admission itself (GIL hand-offs; measured with
    ``bench/bench_budget_webhook.py``), and the blocking part is a few short round trips to
    Postgres that wait at most for one other admission of the same tree."""

    async def validate(request: Request) -> Response:
        # Refused by its declared length, or as soon as the stream passes the limit: a client
        # sending a gigabyte never has it held in memory (request.body() would read it all first).
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return _too_big()
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_BODY:
                return _too_big()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:  # also invalid UTF-8
            return _json(_review("", False, "malformed AdmissionReview: body is not JSON", 400))
        try:
            uid, decision = review_decision(body, config, pool, clock())
        except Exception:  # a bug or an unreachable ledger: deny (fail closed), never a traceback
            log.exception("budget admission failed")
            uid = (
                body.get("request", {}).get("uid", "")
                if isinstance(body, dict) and isinstance(body.get("request"), dict)
                else ""
            )
            return _json(_review(str(uid), False, "budget ledger unavailable: denied (fail closed)", 500))
        code = 400 if decision.limit == "malformed" else 403
        return _json(_review(uid, decision.allowed, decision.reason, code))

    async def healthz(_: Request) -> Response:
        return Response("ok")

    app = Starlette(routes=[Route("/validate", validate, methods=["POST"]), Route("/healthz", healthz)])
    # Everything allocated so far (modules, config, connections) lives as long as the process:
    # moved out of the collector's generations, a full collection no longer walks it, and the
    # admission path's tail loses those pauses.
    gc.collect()
    gc.freeze()
    return app


def app_from_environment() -> Starlette:
    """uvicorn's app factory, run in every worker process: the ``budget:`` section of the site file
    at ``$GPUFABRIC_CONFIG`` and the ledger at ``$GPUFABRIC_DATABASE_URL`` (:func:`main` sets both,
    so every worker sees the same file and database the parent checked)."""
    from connectors.warehouse.warehouse import ENV_DATABASE_URL
    from settings.budget import load_budget_config

    _, config = load_budget_config()
    # One admission at a time per worker: a second connection only stands by for a broken one.
    return make_app(config, ConnectionPool(os.environ[ENV_DATABASE_URL], size=2))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m controllers budget-webhook``: serve HTTPS until SIGTERM."""
    import argparse

    import uvicorn

    from connectors.warehouse import open_warehouse
    from connectors.warehouse.warehouse import ENV_DATABASE_URL
    from settings import SettingsError
    from settings.budget import load_budget_config
    from settings.loading import ENV_CONFIG, default_settings_path

    parser = argparse.ArgumentParser(
        prog="python -m controllers budget-webhook",
        description="Validating webhook for pod CREATE: deny pods that would take an agent tree past its envelope.",
    )
    parser.add_argument("--cert", type=Path, required=True, help="TLS certificate (PEM)")
    parser.add_argument("--key", type=Path, required=True, help="TLS private key (PEM)")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument(
        "--workers", type=int, default=2, help="worker processes; each admits one request at a time (default 2)"
    )
    parser.add_argument("--config", type=Path, help="site file (default $GPUFABRIC_CONFIG or ./gpufabric.yaml)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    for path in (args.cert, args.key):
        if not path.is_file():
            parser.error(f"{path}: no such file")
    config_path = args.config or default_settings_path()
    try:
        load_budget_config(config_path)  # fail here, once, with the file's line, not in every worker
    except (SettingsError, OSError) as err:
        print(f"budget-webhook: {err}", file=sys.stderr)
        return 2
    warehouse = open_warehouse()  # embedded by default; migrates the ledger's schema
    os.environ[ENV_CONFIG] = str(config_path.resolve())
    os.environ[ENV_DATABASE_URL] = warehouse.libpq_url
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    uvicorn.run(
        "controllers.budget_webhook:app_from_environment",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        ssl_certfile=str(args.cert),
        ssl_keyfile=str(args.key),
        log_level="info",
        access_log=False,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
