"""Admission latency of the budget webhook at a fixed request rate, against a no-op webhook.

Why: the webhook sits in the API server's pod-create path with ``failurePolicy: Fail``, so its
tail latency is every agent spawn's tail latency. Target: p99 under 25 ms at 500 requests/s on
the embedded Postgres.

Both servers are the same stack — uvicorn + Starlette over HTTPS (self-signed cert from
``cryptography``), one worker process each, started in turn on loopback — and get the same
AdmissionReviews at the same open-loop rate (requests are sent on schedule whether or not earlier
ones answered, so a slow server cannot slow the load down and hide its queueing). Each round
runs both, the one that goes first alternating over the rounds; the p99s are printed with their
spread and the ratio is taken per round. The peer answers
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

from bench.common import Spread, ratio_line, rotation
from bench.loadgen import LoadResult, LoadSpec, open_loop
from controllers.tls import self_signed_cert

ROOT = Path(__file__).resolve().parents[1]
BENCH_DATA_DIR = ROOT / ".data" / "bench"
P = "gpufabric.io"
# The API server's pool of keep-alive connections to the webhook, all opened (TLS handshake done)
# before the clock starts; a request due while all are busy waits, and the wait counts.
CONNECTIONS = 64


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

        app = make_app(_config(), ConnectionPool(url, size=2))  # as app_from_environment: one admission at a time
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


def _run(kind: str, url_db: str, workdir: Path, bodies: list[bytes], rate: float, workers: int) -> LoadResult:
    cert, key = self_signed_cert(workdir)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    ctx = multiprocessing.get_context("fork")
    # Several worker processes accept on one listening socket, as uvicorn --workers does.
    procs = [
        ctx.Process(target=_serve, args=(kind, sock.fileno(), str(cert), str(key), url_db), daemon=True)
        for _ in range(workers)
    ]
    for proc in procs:
        proc.start()
    try:
        _wait_ready(port, cert)
        spec = LoadSpec(
            "127.0.0.1", port, "/validate", str(cert), rate, bodies,
            warm=CONNECTIONS, max_connections=CONNECTIONS, expect=b'"allowed":true',
        )  # fmt: skip
        before = sum(_cpu_s(p.pid) for p in procs if p.pid)
        result = open_loop(spec)
        result.server_cpu_s = sum(_cpu_s(p.pid) for p in procs if p.pid) - before
        return result
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(10)
        sock.close()


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_ready(port: int, cert: Path) -> None:
    ctx = ssl.create_default_context(cafile=str(cert))
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                    tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    tls.recv(100)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _round(url: str, args: argparse.Namespace, seconds: float, k: int) -> tuple[LoadResult, LoadResult]:
    """Round ``k``: fresh roots, the no-op peer and ours on the same requests, the one that goes
    first alternating from round to round; raises when a request failed or the ledger does not
    hold exactly one reservation per admission."""
    import psycopg

    from connectors.warehouse.ledger import admit
    from core.budget import PodRequest, parse_pod

    n = int(args.rate * seconds) + CONNECTIONS  # one warm-up request per client connection
    run = uuid.uuid4().hex[:8]
    roots = [f"bench-{run}-{t}" for t in range(args.trees)]
    with psycopg.connect(url, autocommit=True) as conn:
        # Start from a vacuumed ledger: dead rows left by an earlier round's clean-up would
        # otherwise wake autovacuum in the middle of this one, and the figures would measure it.
        conn.execute("VACUUM (ANALYZE) agents.ledger, agents.envelopes")
        for r in roots:  # roots are admitted up front: the timed requests are children, the common case
            req = parse_pod(json.loads(_review(r, None))["request"]["object"], "bench", _config())
            assert isinstance(req, PodRequest)
            assert admit(conn, req, dt.datetime.now(dt.UTC)).allowed
    bodies = [_review(roots[i % len(roots)], f"{roots[i % len(roots)]}-c{i}") for i in range(n)]
    BENCH_DATA_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="budget-webhook-", dir=BENCH_DATA_DIR) as tmp:
        results = {kind: _run(kind, url, Path(tmp), bodies, args.rate, args.workers)
                   for kind in rotation(["noop", "budget"], k)}  # fmt: skip
    peer, ours = results["noop"], results["budget"]
    with psycopg.connect(url, autocommit=True) as conn:
        got = conn.execute("SELECT count(*) FROM agents.ledger WHERE root_id LIKE %s", (f"bench-{run}-%",)).fetchone()
        conn.execute("DELETE FROM agents.envelopes WHERE root_id LIKE %s", (f"bench-{run}-%",))
        conn.execute("VACUUM agents.ledger, agents.envelopes")
    if got is None or got[0] != n + len(roots):
        raise RuntimeError(f"ledger holds {got} reservations, expected {n + len(roots)}")
    for result in (peer, ours):
        if result.errors:
            raise RuntimeError(f"{len(result.errors)} requests failed or were denied, first: {result.errors[0]}")
    return peer, ours


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench_budget_webhook", description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=500.0, help="requests per second (open loop)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--trees", type=int, default=50, help="roots the requests spread over")
    ap.add_argument("--workers", type=int, default=2, help="server worker processes (as uvicorn --workers)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the verdict is on the median p99")
    ap.add_argument("--quick", action="store_true", help="two rounds (one each way round) of 3 seconds")
    args = ap.parse_args(argv)
    os.environ.setdefault("GPUFABRIC_DATA_DIR", str(BENCH_DATA_DIR))
    os.environ.setdefault("GPUFABRIC_PG_PORT", "54349")
    from connectors.warehouse import open_warehouse

    seconds, repeat = (3.0, 2) if args.quick else (args.seconds, args.repeat)
    url = open_warehouse().libpq_url
    print(
        f"budget webhook: {args.rate:.0f} req/s open loop for {seconds:.0f} s x {repeat} rounds (which server goes "
        f"first alternates), {args.trees} trees, {args.workers} server worker(s), {CONNECTIONS} keep-alive HTTPS "
        "connections on loopback"
    )
    p99s: dict[str, list[float]] = {"noop webhook (peer)": [], "budget webhook": []}
    for k in range(repeat):
        try:
            peer, ours = _round(url, args, seconds, k)
        except RuntimeError as err:
            print(f"round {k + 1}: {err}", file=sys.stderr)
            return 1
        first = rotation(["noop", "budget"], k)[0]
        for name, result in zip(p99s, (peer, ours), strict=True):
            lat = result.latencies_s
            p99s[name].append(result.pct_ms(99))
            print(
                f"  round {k + 1} ({first} first) {name:20s} n={len(lat):5d} p50={result.pct_ms(50):6.2f} ms  "
                f"p99={result.pct_ms(99):7.2f} ms  mean={statistics.mean(lat) * 1000:6.2f} ms  "
                f"CPU/request: server {result.server_cpu_s / len(lat) * 1e3:.2f} ms, "
                f"load generator {result.client_cpu_s / len(lat) * 1e3:.2f} ms"
            )
    peer_p99s, ours_p99s = p99s.values()
    ours_p99 = statistics.median(ours_p99s)
    print(f"  p99 budget webhook: {Spread.of(ours_p99s).fmt('.2f', ' ms')}")
    print(f"  p99 noop webhook:   {Spread.of(peer_p99s).fmt('.2f', ' ms')}")
    print(f"  {ratio_line('p99 budget / noop', ours_p99s, peer_p99s)}   "
          f"target median p99 < 25 ms: {'met' if ours_p99 < 25 else 'MISSED'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
