"""The dcgm-exporter twin process: one uvicorn server listening on one loopback port per node.

Why one process for every node: a real site has one exporter per node on port 9400; 128-512
processes would cost more memory than the rest of the simulator. One asyncio server can hold a
socket per node, and the port a request arrived on says which node it is for, so scrapers and
Prometheus still see one target per node, as in production.

Run as ``python -m simulator.dcgm.server CONFIG.json``; it writes ``ready.json`` (the ports) next
to the config once every socket listens. Time is injectable: the config's clock maps real time
to simulated time (``anchor + offset + (now - anchor) * scale``).

Fault switches per node (``fault`` in the config): ``http_500``, ``timeout`` (answers after 120
s), ``malformed`` (valid exposition plus broken lines), ``empty`` (200 with no body).

``mig_layout_file`` in the config (optional): the control plane's node agent writes the MIG
instances it applied there (``<control plane workdir>/mig-layouts.json``); a node's GPUs listed in
it are served as those instances from the next scrape on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import resource
import socket
import sys
import time
from pathlib import Path
from typing import Any

from simulator.dcgm import workloads as wl
from simulator.dcgm.exposition import NodeInfo, load_mig_layouts, render_node, render_workloads

MALFORMED_TAIL = (
    'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-broken" 1410\n'
    "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} not-a-number\n"
    "DCGM_FI_DEV_POWER_USAGE\n"
)


class Clock:
    def __init__(self, anchor: float, offset_s: float = 0.0, scale: float = 1.0) -> None:
        self.anchor, self.offset_s, self.scale = anchor, offset_s, scale

    def now(self) -> float:
        real = time.time()
        return self.anchor + self.offset_s + (real - self.anchor) * self.scale


def _nodes(config: dict[str, Any]) -> list[tuple[NodeInfo, str | None]]:
    out = []
    for n in config["nodes"]:
        info = NodeInfo(
            hostname=n["hostname"],
            index=n["index"],
            gpu_uuids=tuple(n["gpu_uuids"]),
            model=wl.model_info(n["gpu_model"]),
            blank_memory_temp=bool(n.get("blank_memory_temp")),
        )
        out.append((info, n.get("fault")))
    return out


class MigLayouts:
    """The node agent's MIG layout file (``config["mig_layout_file"]``), re-read when it changes."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None
        self._stamp: tuple[int, int] | None = None
        self._layouts: dict[str, dict[int, tuple[tuple[str, int], ...]]] = {}

    def of(self, hostname: str) -> dict[int, tuple[tuple[str, int], ...]] | None:
        if self.path is None:
            return None
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            try:
                self._layouts = load_mig_layouts(self.path)
            except ValueError as exc:  # keep serving the last good layouts; say why once per change
                print(f"dcgm twin: {exc}", file=sys.stderr)
            self._stamp = stamp
        return self._layouts.get(hostname)


def build_app(config: dict[str, Any], port_of_node: dict[int, tuple[NodeInfo, str | None]], workload_port: int) -> Any:
    clock = Clock(**config.get("clock", {"anchor": time.time()}))
    hostnames = [n["hostname"] for n in config["nodes"]]
    layouts = MigLayouts(config.get("mig_layout_file"))

    async def send_text(send: Any, status: int, body: bytes) -> None:
        await send({
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8"),
                        (b"content-length", str(len(body)).encode())],
        })
        await send({"type": "http.response.body", "body": body})

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        port = scope["server"][1]
        if scope["path"] != "/metrics":
            await send_text(send, 404, b"not found; try /metrics\n")
            return
        if port == workload_port:
            await send_text(send, 200, render_workloads(hostnames, clock.now()).encode())
            return
        entry = port_of_node.get(port)
        if entry is None:
            await send_text(send, 404, b"no node on this port\n")
            return
        node, fault = entry
        if fault == "http_500":
            await send_text(send, 500, b"simulated exporter failure\n")
            return
        if fault == "timeout":
            await asyncio.sleep(120)
        if fault == "empty":
            await send_text(send, 200, b"")
            return
        applied = layouts.of(node.hostname)
        body = render_node(dataclasses.replace(node, mig_layout=applied) if applied else node, clock.now())
        if fault == "malformed":
            body += MALFORMED_TAIL
        await send_text(send, 200, body.encode())

    return app


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


def _listen() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def main(argv: list[str]) -> int:
    import uvicorn

    config_path = Path(argv[0])
    config = json.loads(config_path.read_text())
    _raise_fd_limit()
    nodes = _nodes(config)
    sockets = [_listen() for _ in nodes]
    workload_sock = _listen()
    port_of_node = {s.getsockname()[1]: entry for s, entry in zip(sockets, nodes, strict=True)}
    workload_port = workload_sock.getsockname()[1]
    app = build_app(config, port_of_node, workload_port)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=30)
    )
    ready = {
        "pid": os.getpid(),
        "nodes": {node.hostname: s.getsockname()[1] for s, (node, _) in zip(sockets, nodes, strict=True)},
        "workloads": workload_port,
    }

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[*sockets, workload_sock]))
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        tmp = config_path.with_name("ready.json.tmp")
        tmp.write_text(json.dumps(ready))
        tmp.replace(config_path.with_name("ready.json"))
        await task

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
