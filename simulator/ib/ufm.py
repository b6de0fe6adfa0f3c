"""The UFM REST twin: serves a ground truth's InfiniBand fabric the way UFM Enterprise does.

HTTPS only, as UFM: the server certificate is signed by a CA made for this run
(``simulator.ib.tls``; its ``ca.crt`` is what the site file's ``ca_file`` names), with SANs
127.0.0.1 and localhost. Credentials are always required: ``/ufmRest/...`` takes HTTP basic auth,
``/ufmRestV3/...`` ``Authorization: Basic <token>``; anything else answers 401, as UFM does.

Routes: ``/ufmRest/resources/{systems,ports,links}`` and the same under ``/ufmRestV3``;
``page_number`` + ``rpp`` return one page wrapped as ``{"data": [...], "page_number", "rpp",
"pages_number", "total_rows"}``; an unknown resource id answers ``200 {}`` as UFM does. Links
carry width but no speed (ports have ``active_speed``), as in UFM.

Fault switches, set over HTTP so a test flips them on the live server
(``POST /_twin/faults {"mode": ..., "times": N, "delay_s": S}``, with the basic credentials, so
no other local user flips a ``sim up`` twin's faults): ``500`` (HTTP 500), ``slow``
(answer after ``delay_s``), ``auth`` (401 whatever the credentials), ``truncated`` (the JSON body cut
in half), ``empty`` (``200 {}``), ``body`` (``200`` with the bytes given as ``"body_b64"``: any
answer a broken or hostile UFM could send). ``times`` counts the requests the fault applies to
(-1: all).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import secrets
import socket
import ssl
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from core.models import DeviceKind, LinkKind
from simulator.generator import GroundTruth, generate
from simulator.ib.ibnetdiscover import SPEED_NAME
from simulator.ib.tls import TwinTls, Validity, issue_twin_tls
from simulator.spec import ClusterSpec
from simulator.twin import TwinRun, spawn

FAULTS = ("500", "slow", "auth", "truncated", "empty", "body")
ROOTS = ("ufmRest", "ufmRestV3")  # basic auth / token auth


def _hex(guid: str) -> str:
    return guid.removeprefix("0x")


def ufm_rows(truth: GroundTruth) -> dict[str, list[dict[str, Any]]]:
    """systems, ports and links as UFM lists them (GUIDs without 0x, as UFM writes them)."""
    speed = SPEED_NAME[truth.spec.link_speed_gbps]
    devices = {d.id: d for d in truth.devices}
    systems: list[dict[str, Any]] = []
    for d in truth.devices:
        if d.kind is DeviceKind.SWITCH and d.attributes.get("fabric") == LinkKind.IB:
            systems.append(
                {
                    "system_name": d.name,
                    "guid": _hex(d.id),
                    "type": "switch",
                    "model": d.attributes["model"],
                    "vendor": "NVIDIA",
                    "description": f"MF0;{d.name}:{d.attributes['model']}/U1",
                    "ports_count": d.attributes["radix"],
                    "state": "active",
                }
            )
        elif d.kind is DeviceKind.HCA:
            systems.append(
                {
                    "system_name": d.parent_id,
                    "guid": _hex(d.id),
                    "type": "host",
                    "model": d.attributes.get("model"),
                    "vendor": "NVIDIA",
                    "description": d.attributes.get("node_description", d.name),
                    "ports_count": 1,
                    "state": "active",
                }
            )
    ports: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    for lk in truth.links:
        if lk.kind is not LinkKind.IB:
            continue
        for end, peer in ((lk.a, lk.b), (lk.b, lk.a)):
            dev = devices[end.device_id]
            ports.append(
                {
                    "name": f"{_hex(end.device_id)}_{end.port}",
                    "guid": _hex(end.device_id),
                    "systemID": _hex(end.device_id),
                    "system_name": dev.parent_id or dev.name,
                    "number": int(end.port),
                    "dname": end.port,
                    "node_description": dev.attributes.get("node_description", dev.name),
                    "physical_state": "LinkUp",
                    "logical_state": "Active",
                    "active_speed": speed,
                    "active_width": "4x",
                    "peer": f"{_hex(peer.device_id)}_{peer.port}",
                }
            )
        links.append(
            {
                "name": f"{_hex(lk.a.device_id)}_{lk.a.port}:{_hex(lk.b.device_id)}_{lk.b.port}",
                "source_guid": _hex(lk.a.device_id),
                "source_port": lk.a.port,
                "destination_guid": _hex(lk.b.device_id),
                "destination_port": lk.b.port,
                "width": "IB_4x",
                "severity": "Info",
                "source_port_node_description": devices[lk.a.device_id].name,
                "destination_port_node_description": devices[lk.b.device_id].name,
            }
        )
    return {"systems": systems, "ports": ports, "links": links}


@dataclass
class FaultState:
    mode: str | None = None
    times: int = 0
    delay_s: float = 0.0
    body: bytes = b""
    hits: int = 0

    def take(self) -> str | None:
        if self.mode is None or self.times == 0:
            return None
        if self.times > 0:
            self.times -= 1
        self.hits += 1
        return self.mode


def make_app(truth: GroundTruth, *, username: str, password: str, token: str) -> Starlette:
    data = ufm_rows(truth)
    faults = FaultState()
    expected = {
        "ufmRest": "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode(),
        "ufmRestV3": f"Basic {token}",  # UFM's token spelling: the word Basic, then the token
    }
    stats = {"requests": 0}

    def refused(request: Request, root: str) -> Response | None:
        """401 unless the request carries this root's credentials (compared in constant time)."""
        given = request.headers.get("authorization", "")
        if secrets.compare_digest(given.encode(), expected[root].encode()):
            return None
        # RFC 9110 asks a 401 to carry a challenge; the realm name is the twin's own.
        challenge = {"WWW-Authenticate": 'Basic realm="UFM twin"'} if root == "ufmRest" else None
        return JSONResponse({"detail": "Unauthorized"}, status_code=401, headers=challenge)

    async def resource(request: Request) -> Response:
        stats["requests"] += 1
        root, name = request.url.path.split("/")[1], request.path_params["name"]
        fault = faults.take()
        if fault == "auth":
            return JSONResponse({"detail": "Unauthorized"}, status_code=401)
        if (denied := refused(request, root)) is not None:
            return denied
        if fault == "500":
            return JSONResponse({"error": "Internal Server Error"}, status_code=500)
        if fault == "slow":
            await asyncio.sleep(faults.delay_s)
        if fault == "empty":
            return JSONResponse({})
        if fault == "body":
            return Response(faults.body, media_type="application/json")
        if name not in data:
            return JSONResponse({})  # UFM: unknown resource is 200 {}
        rows = data[name]
        body: Any = rows
        if "page_number" in request.query_params and "rpp" in request.query_params:
            try:
                page, rpp = int(request.query_params["page_number"]), int(request.query_params["rpp"])
            except ValueError:
                return JSONResponse({"error": "bad paging"}, status_code=400)
            if page < 1 or rpp < 1:
                return JSONResponse({"error": "bad paging"}, status_code=400)
            pages = max(1, -(-len(rows) // rpp))
            body = {
                "data": rows[(page - 1) * rpp : page * rpp],
                "page_number": page,
                "rpp": rpp,
                "pages_number": pages,
                "total_rows": len(rows),
            }
        text = json.dumps(body).encode()
        if fault == "truncated":
            text = text[: len(text) // 2]
        return Response(text, media_type="application/json")

    async def one(request: Request) -> Response:
        # GET .../resources/systems/<guid>: UFM answers 200 {} when there is no such system.
        if (denied := refused(request, request.url.path.split("/")[1])) is not None:
            return denied
        name, ident = request.path_params["name"], request.path_params["ident"]
        for row in data.get(name, []):
            if row.get("guid") == ident or row.get("name") == ident:
                return JSONResponse([row])
        return JSONResponse({})

    async def set_faults(request: Request) -> Response:
        if (denied := refused(request, "ufmRest")) is not None:
            return denied
        body = await request.json()
        mode = body.get("mode")
        if mode is not None and mode not in FAULTS:
            return JSONResponse({"error": f"mode must be one of {FAULTS} or null"}, status_code=400)
        faults.mode = mode
        faults.times = int(body.get("times", -1))
        faults.delay_s = float(body.get("delay_s", 0.0))
        faults.body = base64.b64decode(body.get("body_b64", ""))
        faults.hits = 0
        return JSONResponse({"mode": faults.mode, "times": faults.times})

    async def get_stats(request: Request) -> Response:
        if (denied := refused(request, "ufmRest")) is not None:
            return denied
        return JSONResponse({**stats, "fault_hits": faults.hits})

    return Starlette(
        routes=[
            *(Route(f"/{root}/resources/{{name}}", resource, name=f"{root}-list") for root in ROOTS),
            *(Route(f"/{root}/resources/{{name}}/{{ident}}", one, name=f"{root}-one") for root in ROOTS),
            Route("/_twin/faults", set_faults, methods=["POST"]),
            Route("/_twin/stats", get_stats),
        ]
    )


class UfmTwinThread:
    """The twin on 127.0.0.1 in a background thread of this process (tests): a real TLS socket.

    ``tls_validity`` serves a server certificate that has ``expired`` or is ``not_yet_valid``;
    ``workdir`` keeps the TLS files (default: a temporary directory removed on exit).
    """

    def __init__(
        self,
        truth: GroundTruth,
        *,
        username: str = "admin",
        password: str = "",
        token: str = "",
        tls_validity: Validity = "valid",
        workdir: Path | None = None,
    ) -> None:
        self.username = username
        self.password = password or secrets.token_urlsafe(12)
        self.token = token or secrets.token_hex(16)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ufm-twin-")
            workdir = Path(self._tmp.name)
        self.tls: TwinTls = issue_twin_tls(workdir, validity=tls_validity)
        app = make_app(truth, username=self.username, password=self.password, token=self.token)
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", ssl_certfile=str(self.tls.cert), ssl_keyfile=str(self.tls.key)
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The CA that signed this run's server certificate (what a site file's ``ca_file`` names)."""
        return self.tls.ca_cert

    def set_fault(self, mode: str | None, times: int = -1, delay_s: float = 0.0, body: bytes = b"") -> None:
        """Flip the live server's fault switch (``None``: no fault) over its HTTPS control route;
        ``body`` is what mode ``body`` answers."""
        fault = {"mode": mode, "times": times, "delay_s": delay_s, "body_b64": base64.b64encode(body).decode()}
        with httpx.Client(verify=ssl.create_default_context(cafile=self.ca_file), timeout=10) as http:
            r = http.post(f"{self.url}/_twin/faults", json=fault, auth=(self.username, self.password))
        if r.status_code != 200:
            raise RuntimeError(f"UFM twin refused fault {mode!r}: HTTP {r.status_code} {r.text}")

    def __enter__(self) -> UfmTwinThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("UFM twin did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
        if self._tmp is not None:
            self._tmp.cleanup()


# --- detached process for `gpufabric sim up` -----------------------------------------------------


def start(truth: GroundTruth, workdir: Path) -> TwinRun:
    """Twin entry for ``simulator.up.TWINS``: starts the HTTPS twin detached on a free port, with a
    new CA whose certificate the site file's ``ca_file`` names."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_file = workdir / "spec.json"
    spec_file.write_text(json.dumps(truth.spec.model_dump(mode="json")))
    password, token = secrets.token_urlsafe(12), secrets.token_hex(16)
    (workdir / "password").write_text(password)
    (workdir / "token").write_text(token)
    os.chmod(workdir / "password", 0o600)
    os.chmod(workdir / "token", 0o600)
    tls = issue_twin_tls(workdir / "tls")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (workdir / "ufm.log").open("ab")
    proc = spawn("ufm", [sys.executable, "-m", "simulator.ib.ufm", "--spec-json", str(spec_file), "--port", str(port),
                         "--password-file", str(workdir / "password"), "--token-file", str(workdir / "token"),
                         "--cert-file", str(tls.cert), "--key-file", str(tls.key)],
                 log=log)  # fmt: skip
    log.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"UFM twin exited: see {workdir / 'ufm.log'}") from None
            time.sleep(0.05)
    url = f"https://127.0.0.1:{port}"
    return TwinRun(
        name="ufm",
        sources={
            "fabric_managers": [
                {
                    "name": "ufm",
                    "kind": "ufm",
                    "url": url,
                    "auth": "basic",
                    "username": "admin",
                    "password": {"file": str((workdir / "password").resolve())},
                    "verify_tls": True,
                    "ca_file": str(tls.ca_cert.resolve()),  # this run's CA: the twin's certificate is checked
                }
            ]
        },
        pids=[proc.pid],
        summary=f"UFM REST twin {url}",
        extra={"url": url, "port": port, "ca_file": str(tls.ca_cert.resolve())},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="UFM REST twin")
    parser.add_argument("--spec-json", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--password-file", required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--cert-file", required=True)
    parser.add_argument("--key-file", required=True)
    ns = parser.parse_args(argv)
    spec = ClusterSpec.model_validate(json.loads(Path(ns.spec_json).read_text()))
    app = make_app(
        generate(spec),
        username="admin",
        password=Path(ns.password_file).read_text().strip(),
        token=Path(ns.token_file).read_text().strip(),
    )
    uvicorn.run(
        app, host="127.0.0.1", port=ns.port, log_level="warning", lifespan="off",
        ssl_certfile=ns.cert_file, ssl_keyfile=ns.key_file,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
