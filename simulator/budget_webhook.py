"""The budget webhook deployed on the simulated cluster, for as long as a block runs (the demo's agents).

What ``deploy/budget/`` does on a real cluster, on loopback: the process is ours, unmodified
(``python -m controllers budget-webhook``, envelopes from the site file's ``budget:`` section, the
ledger in the warehouse), serving a certificate of the plane's CA; the registration is the
``ValidatingWebhookConfiguration`` we ship with its ``service:`` swapped for a loopback ``url:`` and
the plane's CA as ``caBundle`` (``webhooks_at_url``), everything else (rules, selectors,
``failurePolicy: Fail``) as shipped. Its namespace carries the label the shipped selector wants, so
kube-apiserver itself asks the webhook about every pod created there and the ledger gets a
reservation per admitted agent, which settlement later replaces with measured cost.

The registration goes when the block ends (with ``failurePolicy: Fail`` a registration whose
webhook is gone would refuse every later pod in that namespace), then the process.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from simulator.controlplane import ControlPlane
from simulator.controlplane.api import ApiError
from simulator.controlplane.cluster import webhooks_at_url

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "deploy" / "budget" / "budget-controller.yaml"
GOVERNED_LABEL = ("gpufabric.io/budget", "governed")  # what the shipped namespaceSelector selects
REGISTRATIONS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
START_GUARD_S = 90.0  # hang guards: a loaded 2-core machine starts the process slowly
IN_FORCE_GUARD_S = 60.0


class WebhookError(RuntimeError):
    """The webhook did not come up or its registration never took effect (the message says which)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _shipped_registration() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    (config,) = [d for d in docs if d.get("kind") == "ValidatingWebhookConfiguration"]
    return dict(config)


def governed_namespace(plane: ControlPlane, name: str) -> None:
    """Create ``name`` (or label it, if it exists) so the shipped namespaceSelector selects it."""
    key, value = GOVERNED_LABEL
    api = plane.api()
    try:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {key: value}}}
        try:
            api.post("/api/v1/namespaces", body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            api.patch(f"/api/v1/namespaces/{name}", {"metadata": {"labels": {key: value}}})
    finally:
        api.close()


def _wait_healthy(proc: subprocess.Popen[bytes], port: int, ca: Path, log: Path) -> None:
    ctx = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + START_GUARD_S
    while True:
        try:
            if httpx.get(f"https://127.0.0.1:{port}/healthz", verify=ctx, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise WebhookError(f"the budget webhook did not come up (log {log}): {tail}")
        time.sleep(0.2)


def _wait_in_force(plane: ControlPlane, namespace: str) -> None:
    """The API server's webhook plugin picks a registration up from a watch, a moment after it is
    written: in force once a server-side dry run of an unlabelled pod is refused by it."""
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "budget-probe", "namespace": namespace},
             "spec": {"containers": [{"name": "c", "image": "probe"}]}}  # fmt: skip
    api = plane.api()
    deadline = time.monotonic() + IN_FORCE_GUARD_S
    try:
        while True:
            try:
                api.post(f"/api/v1/namespaces/{namespace}/pods", probe, dryRun="All")
            except ApiError as exc:
                if "budget.gpufabric.io" in exc.message:
                    return
            if time.monotonic() > deadline:
                raise WebhookError(f"the budget webhook's registration took no effect in {IN_FORCE_GUARD_S:.0f} s")
            time.sleep(0.2)
    finally:
        api.close()


@contextmanager
def budget_webhook(plane: ControlPlane, *, site_config: Path, database_url: str, namespace: str,
                   log: Path) -> Iterator[str]:  # fmt: skip
    """Run and register the budget webhook for ``namespace`` (created or labelled governed) while
    the block runs; yields the namespace. ``log`` gets the process's output."""
    governed_namespace(plane, namespace)
    cert, key = plane.serving_cert("budget-webhook", ("localhost", "127.0.0.1"))
    port = _free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "controllers", "budget-webhook", "--cert", str(cert), "--key", str(key),
             "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--config", str(site_config)],
            cwd=ROOT, env={**os.environ, "GPUFABRIC_DATABASE_URL": database_url}, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    config = webhooks_at_url(_shipped_registration(), f"https://127.0.0.1:{port}", plane.ca_bundle)
    name = f"{config['metadata']['name']}-sim"
    config["metadata"] = {"name": name}
    api = plane.api()
    try:
        _wait_healthy(proc, port, plane.ca_file, log)
        api.request("DELETE", f"{REGISTRATIONS}/{name}", ok=(404,))  # one an interrupted run left
        api.post(REGISTRATIONS, config)
        _wait_in_force(plane, namespace)
        yield namespace
    finally:
        try:
            api.request("DELETE", f"{REGISTRATIONS}/{name}", ok=(404,))
        finally:
            api.close()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
