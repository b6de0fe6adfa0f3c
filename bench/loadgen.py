"""Open-loop HTTPS load for the webhook benchmarks, generated in its own process.

Why a process of its own: a load generator sharing the interpreter (and the GIL) with anything
else adds its own scheduling stalls to every latency it reports. At 500 requests/s the earlier
thread-per-client generator cost more CPU than the no-op server it measured. This one is a single
asyncio (uvloop when installed) loop writing pre-rendered HTTP/1.1 requests over keep-alive TLS
connections: tens of microseconds of client CPU per request.

Open loop: request ``i`` is due at ``start + i / rate`` and is sent then whether or not earlier
answers have come back; its latency is counted from when it was due, so a server that falls
behind cannot slow the load down and hide its queue (no coordinated omission). Requests go over
at most ``max_connections`` keep-alive connections, opened and warmed (one untimed request each)
before the clock starts, as the API server keeps a pool of connections to a webhook rather than
a handshake per call; a request due while all are busy waits for one, and that wait counts
in its latency.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import ssl
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection


@dataclass
class LoadResult:
    latencies_s: list[float]
    errors: list[str] = field(default_factory=list)
    connections: int = 0
    client_cpu_s: float = 0.0
    server_cpu_s: float = 0.0  # filled in by the caller, who knows the server's processes

    def pct_ms(self, p: float) -> float:
        s = sorted(self.latencies_s)
        return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))] * 1000


@dataclass(frozen=True)
class LoadSpec:
    host: str
    port: int
    path: str
    cafile: str
    rate: float
    bodies: list[bytes]  # the first ``warm`` are sent untimed, one per connection
    warm: int = 32  # also the number of connections opened before the clock starts
    max_connections: int = 64
    expect: bytes | None = None  # a response body must contain this (e.g. b'"allowed":true')
    server_name: str = "localhost"


def _request(spec: LoadSpec, body: bytes) -> bytes:
    head = (
        f"POST {spec.path} HTTP/1.1\r\nHost: {spec.server_name}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _exchange(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], request: bytes) -> tuple[int, bytes]:
    reader, writer = conn
    writer.write(request)
    status = await reader.readline()
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    body = await reader.readexactly(length)
    parts = status.split()
    return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0), body


async def _run(spec: LoadSpec) -> LoadResult:
    ctx = ssl.create_default_context(cafile=spec.cafile)
    requests = [_request(spec, b) for b in spec.bodies]
    warm, timed = requests[: spec.warm], requests[spec.warm :]
    idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    result = LoadResult([0.0] * len(timed))

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        result.connections += 1  # before the first await: concurrent callers see it at once
        return await asyncio.open_connection(spec.host, spec.port, ssl=ctx, server_hostname=spec.server_name)

    conns = await asyncio.gather(*(connect() for _ in range(spec.warm)))
    for status, body in await asyncio.gather(*(_exchange(c, r) for c, r in zip(conns, warm, strict=True))):
        if status != 200:
            result.errors.append(f"warm-up: HTTP {status} {body[:200]!r}")
    for conn in conns:
        idle.put_nowait(conn)

    start = time.perf_counter() + 0.05

    async def one(i: int, due: float) -> None:
        conn = await (connect() if idle.empty() and result.connections < spec.max_connections else idle.get())
        try:
            status, body = await _exchange(conn, timed[i])
        except (OSError, asyncio.IncompleteReadError, ValueError) as err:
            result.errors.append(f"request {i}: {type(err).__name__}: {err}")
            result.latencies_s[i] = time.perf_counter() - due
            return
        result.latencies_s[i] = time.perf_counter() - due
        if status != 200 or (spec.expect is not None and spec.expect not in body):
            result.errors.append(f"request {i}: HTTP {status} {body[:300]!r}")
        idle.put_nowait(conn)

    tasks = []
    for i in range(len(timed)):
        due = start + i / spec.rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, due)))
    await asyncio.gather(*tasks)
    while not idle.empty():
        idle.get_nowait()[1].close()
    return result


def _child(spec: LoadSpec, out: Connection) -> None:
    cpu = time.process_time()
    try:
        import uvloop
    except ImportError:  # plain asyncio costs more client CPU but measures the same thing
        result = asyncio.run(_run(spec))
    else:
        result = uvloop.run(_run(spec))
    result.client_cpu_s = time.process_time() - cpu
    out.send(result)
    out.close()


def open_loop(spec: LoadSpec, timeout_s: float = 600.0) -> LoadResult:
    """Run ``spec`` in a fresh process and return its latencies (seconds, in request order)."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(spec, send), daemon=True)
    proc.start()
    send.close()
    try:
        if not receive.poll(timeout_s):
            raise TimeoutError(f"load generator gave no result in {timeout_s:g}s")
        result: LoadResult = receive.recv()
    except EOFError:
        raise RuntimeError(f"load generator died (exit {proc.exitcode})") from None
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    return result
