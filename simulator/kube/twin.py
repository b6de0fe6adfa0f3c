"""Start the Kubernetes API twin for a ground truth (``sim up``) and talk to its admin endpoints.

``start(truth, workdir)`` renders the Nodes for the truth into ``workdir/kube-seed.json``, starts
``python -m simulator.kube serve`` detached (own session, so ``sim down`` can stop it by pid and
a Ctrl-C in the parent's terminal does not), waits until it answers, and writes
``workdir/kubeconfig`` pointing at ``http://127.0.0.1:<port>`` with a fresh bearer token.

The server binds port 0 itself and reports the port through a file: choosing a free port in the
parent and passing it down would race with other twins starting at the same time.

The token reaches the child through the environment (never argv, which ``ps`` shows); the
kubeconfig holds it because that is how every Kubernetes client is told about credentials.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from simulator.generator import GroundTruth
from simulator.kube.populate import node_objects
from simulator.twin import TwinRun, spawn

ROOT = Path(__file__).resolve().parents[2]
TOKEN_ENV = "GPUFABRIC_KUBE_TWIN_TOKEN"
CONTEXT = "gpufabric-sim"
SEED_FILE = "kube-seed.json"
CONFIG_FILE = "kube-twin.json"
PORT_FILE = "kube-twin.port"
LOG_FILE = "kube-twin.log"
KUBECONFIG_FILE = "kubeconfig"


def write_kubeconfig(path: Path, url: str, token: str, context: str = CONTEXT) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": url}}],
        "users": [{"name": f"{context}-admin", "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": f"{context}-admin",
                                                    "namespace": "default"}}],
        "current-context": context,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path


def start(truth: GroundTruth, workdir: Path, *, faults: list[dict[str, Any]] | None = None,
          timeout_s: float = 30.0) -> TwinRun:
    """Start the twin detached for ``truth``; the returned run names its kubeconfig and pid."""
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    nodes = node_objects(truth)
    (workdir / SEED_FILE).write_text(json.dumps(nodes))
    (workdir / CONFIG_FILE).write_text(json.dumps({"seed": SEED_FILE, "faults": faults or [],
                                                   "fault_seed": truth.spec.seed}))
    port_file = workdir / PORT_FILE
    port_file.unlink(missing_ok=True)
    token = secrets.token_urlsafe(32)
    env = {**os.environ, TOKEN_ENV: token,
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    with (workdir / LOG_FILE).open("ab") as log:
        proc = spawn("kubernetes", [sys.executable, "-m", "simulator.kube", "serve", "--workdir", str(workdir)],
                     log=log, env=env)
    try:
        port = _wait_for_port(proc, port_file, timeout_s)
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, deadline=time.monotonic() + timeout_s)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    kubeconfig = write_kubeconfig(workdir / KUBECONFIG_FILE, url, token)
    return TwinRun(
        name="kubernetes",
        sources={
            "kubernetes": [{"name": "sim", "kubeconfig": str(kubeconfig)}],
            # NVLink domains come from the GFD clique labels this twin serves on its nodes.
            "nvlink": [{"name": "sim-gfd", "kind": "kubernetes", "cluster": "sim"}],
        },
        pids=[proc.pid],
        summary=f"Kubernetes API {url} ({len(nodes)} nodes)",
        extra={"url": url, "port": port, "kubeconfig": str(kubeconfig)},
    )


def _wait_for_port(proc: subprocess.Popen[bytes], port_file: Path, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = (port_file.parent / LOG_FILE).read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the Kubernetes twin exited with {proc.returncode}:\n{log}")
        if port_file.exists():
            text = port_file.read_text().strip()
            if text.isdigit():
                return int(text)
        time.sleep(0.05)
    raise TimeoutError(f"the Kubernetes twin did not report its port within {timeout_s:.0f}s")


def _wait_healthy(url: str, deadline: float) -> None:
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Kubernetes twin at {url} did not become healthy")
        time.sleep(0.05)


def serve(workdir: Path) -> None:
    """The child process: load the seed, bind 127.0.0.1:0, report the port, serve until SIGTERM."""
    import uvicorn

    from simulator.kube.faults import Faults
    from simulator.kube.server import KubeApp
    from simulator.kube.store import Store

    config = json.loads((workdir / CONFIG_FILE).read_text())
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        raise SystemExit(f"{TOKEN_ENV} is not set: refusing to serve without authentication")
    store = Store()
    store.seed(json.loads((workdir / config["seed"]).read_text()))
    faults = Faults(seed=int(config.get("fault_seed", 0)))
    if config.get("faults"):
        faults.configure(config["faults"])
    app = KubeApp(store, token, faults)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    tmp = workdir / (PORT_FILE + ".tmp")
    tmp.write_text(str(sock.getsockname()[1]))
    tmp.replace(workdir / PORT_FILE)  # atomic: the parent never reads a half-written port
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2,
                                           access_log=False))
    server.run(sockets=[sock])


@dataclass
class KubeTwinAdmin:
    """The twin's ``/_twin/`` admin API, for tests and benchmarks (faults, reset, compaction)."""

    url: str
    token: str

    @classmethod
    def from_kubeconfig(cls, path: str | Path) -> KubeTwinAdmin:
        doc = yaml.safe_load(Path(path).read_text())
        return cls(doc["clusters"][0]["cluster"]["server"], doc["users"][0]["user"]["token"])

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        response = httpx.request(method, f"{self.url}/_twin/{path}", json=body, timeout=10.0,
                                 headers={"Authorization": f"Bearer {self.token}"})
        response.raise_for_status()
        return response.json()

    def set_faults(self, *rules: dict[str, Any]) -> dict[str, Any]:
        """Replace the fault rules (see :class:`simulator.kube.faults.FaultSpec`)."""
        result: dict[str, Any] = self._call("POST", "faults", {"rules": list(rules)})
        return result

    def clear_faults(self) -> None:
        self._call("DELETE", "faults")

    def faults(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "faults")
        return result

    def reset(self) -> None:
        self._call("POST", "reset")

    def compact(self) -> int:
        return int(self._call("POST", "compact")["floor"])

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "state")
        return result
