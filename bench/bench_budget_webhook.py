"""Admission latency of the budget webhook at a fixed request rate, against a no-op webhook.

Why: the webhook sits in the API server's pod-create path with ``failurePolicy: Fail``, so its
tail latency is every agent spawn's tail latency. Target: p99 under 25 ms at 500 requests/s on
the embedded Postgres.

Both servers are the same stack — uvicorn + Starlette over HTTPS (self-signed cert from
``cryptography``), one worker process each, started in turn on loopback — and get the same
AdmissionReviews at the same open-loop rate (requests are sent on schedule whether or not earlier
ones answered, so a slow server cannot slow the load down and hide its queueing). The peer answers
``allowed: true`` after decoding the JSON; ours parses the pod, locks the root's envelope row,
decides and reserves. Requests spread over ``--trees`` roots (one lock per tree). Every answer is
checked: a request ours denies or that fails makes the run fail loudly.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import socket
import ssl
import statistics
import sys
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH_DATA_DIR = ROOT / ".data" / "bench"
P = "gpufabric.io"


def _cert(workdir: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    c, k = workdir / "tls.crt", workdir / "tls.key"
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return c, k


def _config() -> Any:
    from core.budget import BudgetConfig, Envelope

    return BudgetConfig(
        defaults={"*": Envelope(Decimal(10**9), Decimal(10**9), 10**6, 5, 10**6)},
        rates_usd_per_gpu_hour={"*": Decimal(3)},
    )


def _serve(kind: str, fd: int, cert: str, key: str, url: str) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    if kind == "budget":
        from connectors.warehouse.ledger import ConnectionPool
        from controllers.budget_webhook import make_app

        app = make_app(_config(), ConnectionPool(url, size=16))
    else:

        async def noop(request: Request) -> JSONResponse:
            body = json.loads(await request.body())
            return JSONResponse(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": {"uid": body["request"]["uid"], "allowed": True},
                }
            )

        app = Starlette(routes=[Route("/validate", noop, methods=["POST"])])
    sock = socket.socket(fileno=fd)
    uvicorn.Server(uvicorn.Config(app, ssl_certfile=cert, ssl_keyfile=key, log_level="warning", lifespan="off")).run(
        sockets=[sock]
    )


def _review(root: str, agent: str | None) -> bytes:
    labels = {
        f"{P}/root-id": root,
        f"{P}/agent-id": agent or root,
        f"{P}/depth": "1" if agent else "0",
        f"{P}/client": "bench",
        f"{P}/tier": "standard",
        f"{P}/agent-type": "worker",
    }
    if agent:
        labels[f"{P}/parent-id"] = root
    obj = {
        "metadata": {"name": agent or root, "labels": labels},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "operation": "CREATE",
                "namespace": "bench",
                "object": obj,
            },
        }
    ).encode()


def _load(url: str, cert: Path, bodies: list[bytes], rate: float, workers: int = 32) -> list[float]:
    """Open loop: request i is due at ``start + i / rate``; its latency is measured from when it
    was due (not when a worker got to it), so client-side queueing behind a slow server counts
    against the server instead of being hidden (no coordinated omission). Sync clients in threads:
    httpx's async pool costs more client CPU per request than the server under test."""
    import threading

    import httpx

    ctx = ssl.create_default_context(cafile=str(cert))
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    warm = bodies[:workers]
    timed = bodies[workers:]
    start = 0.0
    ready = threading.Barrier(workers + 1)

    def worker(k: int) -> None:
        with httpx.Client(verify=ctx, timeout=30) as client:
            client.post(url, content=warm[k], headers={"content-type": "application/json"})
            ready.wait()
            for i in range(k, len(timed), workers):
                due = start + i / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                r = client.post(url, content=timed[i], headers={"content-type": "application/json"})
                took = time.perf_counter() - due
                ok = r.status_code == 200 and r.json()["response"]["allowed"]
                with lock:
                    latencies.append(took)
                    if not ok:
                        errors.append(f"{r.status_code} {r.text[:300]}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(workers)]
    for t in threads:
        t.start()
    start = time.perf_counter() + 0.2
    ready.wait()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} requests not admitted, first: {errors[0]}")
    return latencies


def _run(kind: str, url_db: str, workdir: Path, bodies: list[bytes], rate: float) -> list[float]:
    cert, key = _cert(workdir)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_serve, args=(kind, sock.fileno(), str(cert), str(key), url_db), daemon=True)
    proc.start()
    try:
        import httpx

        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(
                    f"https://localhost:{port}/validate", verify=ssl.create_default_context(cafile=str(cert)), timeout=1
                )
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        return _load(f"https://localhost:{port}/validate", cert, bodies, rate)
    finally:
        proc.terminate()
        proc.join(10)
        sock.close()


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))] * 1000


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench_budget_webhook", description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=500.0, help="requests per second (open loop)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--trees", type=int, default=50, help="roots the requests spread over")
    ap.add_argument("--quick", action="store_true", help="3 seconds")
    args = ap.parse_args(argv)
    os.environ.setdefault("GPUFABRIC_DATA_DIR", str(BENCH_DATA_DIR))
    os.environ.setdefault("GPUFABRIC_PG_PORT", "54349")
    from connectors.warehouse import open_warehouse
    from connectors.warehouse.ledger import admit
    from core.budget import PodRequest, parse_pod

    seconds = 3.0 if args.quick else args.seconds
    n = int(args.rate * seconds) + 32  # 32 warm-up requests, one per client thread
    wh = open_warehouse()
    run = uuid.uuid4().hex[:8]
    roots = [f"bench-{run}-{t}" for t in range(args.trees)]
    import psycopg

    with psycopg.connect(wh.libpq_url, autocommit=True) as conn:
        for r in roots:  # roots are admitted up front: the timed requests are children, the common case
            req = parse_pod(json.loads(_review(r, None))["request"]["object"], "bench", _config())
            assert isinstance(req, PodRequest)
            assert admit(conn, req, dt.datetime.now(dt.UTC)).allowed
    bodies = [_review(roots[i % len(roots)], f"{roots[i % len(roots)]}-c{i}") for i in range(n)]
    BENCH_DATA_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="budget-webhook-", dir=BENCH_DATA_DIR) as tmp:
        peer = _run("noop", wh.libpq_url, Path(tmp), bodies, args.rate)
        ours = _run("budget", wh.libpq_url, Path(tmp), bodies, args.rate)
    with psycopg.connect(wh.libpq_url, autocommit=True) as conn:
        got = conn.execute("SELECT count(*) FROM agents.ledger WHERE root_id LIKE %s", (f"bench-{run}-%",)).fetchone()
        conn.execute("DELETE FROM agents.envelopes WHERE root_id LIKE %s", (f"bench-{run}-%",))
    if got is None or got[0] != n + len(roots):
        print(f"ledger holds {got} reservations, expected {n + len(roots)}", file=sys.stderr)
        return 1
    rows = {"noop webhook (peer)": peer, "budget webhook": ours}
    print(f"budget webhook: {args.rate:.0f} req/s open loop for {seconds:.0f} s, {args.trees} trees, HTTPS loopback")
    for name, lat in rows.items():
        print(
            f"  {name:22s} n={len(lat):5d} p50={_pct(lat, 50):7.2f} ms  p99={_pct(lat, 99):7.2f} ms  "
            f"mean={statistics.mean(lat) * 1000:7.2f} ms"
        )
    ratio = _pct(ours, 99) / _pct(peer, 99)
    print(
        f"  ratio p99 budget/noop = {ratio:.2f}x   p50 ratio = {_pct(ours, 50) / _pct(peer, 50):.2f}x   "
        f"target p99 < 25 ms: {'met' if _pct(ours, 99) < 25 else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
