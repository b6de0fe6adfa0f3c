"""``python -m controllers budget-webhook`` as deployed: a real process with worker processes,
its envelopes from the site file's ``budget:`` section, the ledger in Postgres; it admits, denies
with the root and the limit named, and stops on SIGTERM. A bad site file is one clear error."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from controllers.tls import self_signed_cert
from simulator.twin import alive
from tests.integration.test_budget_webhook import pod, post, review

pytestmark = pytest.mark.integration

SITE = """\
version: 1
budget:
  governed_namespaces: [agents]
  envelopes:
    "entry-client": {gpu_hours: 3, cost_usd: 100, max_live_pods: 10, max_depth: 3, max_fan_out: 10}
  expected_hours: {"*": 1}
  usd_per_gpu_hour: {"*": 2}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _start(args: list[str], warehouse: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "GPUFABRIC_DATABASE_URL": warehouse.libpq_url}
    return subprocess.Popen(
        [sys.executable, "-m", "controllers", "budget-webhook", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Started as a background job of a non-interactive shell is: SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )


@pytest.fixture(scope="module")
def webhook(warehouse: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Any]]:
    tmp = tmp_path_factory.mktemp("budget-entry")
    site = tmp / "gpufabric.yaml"
    site.write_text(SITE)
    cert, key = self_signed_cert(tmp / "tls")
    port = _free_port()
    args = ["--cert", str(cert), "--key", str(key), "--host", "127.0.0.1", "--port", str(port)]
    proc = _start([*args, "--workers", "2", "--config", str(site)], warehouse)
    ctx = ssl.create_default_context(cafile=str(cert))
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"https://localhost:{port}/healthz", verify=ctx, timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"budget-webhook did not come up: {proc.communicate()[0][-3000:]}")
        time.sleep(0.2)
    yield f"https://localhost:{port}/validate", cert, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def test_serves_with_workers_and_the_site_files_envelopes(webhook: tuple[str, Path, Any]) -> None:
    url, cert, proc = webhook
    pid = proc.pid
    assert len(_children(pid)) >= 2  # uvicorn's worker processes (plus, at most, its resource tracker)
    root = f"entry-{uuid.uuid4().hex[:8]}"
    with httpx.Client(verify=ssl.create_default_context(cafile=str(cert)), timeout=30) as c:
        r = post(
            c,
            url,
            review(pod(root, root=root, agent=root, parent=None, depth=0, client="entry-client")),
        )
        assert r["allowed"] is True, r
        # the site's default envelope for entry-client is 3 GPU-h at 1 h per pod: the root and two children
        children = [
            post(c, url, review(pod(f"{root}-{i}", root=root, agent=f"{root}-{i}", parent=root, depth=1,
                                    client="entry-client")))
            for i in range(3)
        ]  # fmt: skip
        malformed = post(c, url, b"{not json")
    assert [ch["allowed"] for ch in children] == [True, True, False]
    message = children[2]["status"]["message"]
    assert f"root {root}" in message and "limit gpu_hours" in message and "gpu_hours=3" in message
    assert malformed["allowed"] is False and "not JSON" in malformed["status"]["message"]


def test_sigterm_stops_every_worker_cleanly(webhook: tuple[str, Path, Any]) -> None:
    _, _, proc = webhook
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)  # hang guard
    assert proc.returncode == 0, output[-3000:]
    assert "Traceback" not in output
    deadline = time.monotonic() + 20  # hang guard: uvicorn's workers and resource tracker follow it out
    while [w for w in workers if alive(w)]:
        assert time.monotonic() < deadline, "a budget-webhook worker outlived it by 20 s"
        time.sleep(0.1)




def test_a_bad_site_file_is_one_clear_error(warehouse: Any, tmp_path: Path) -> None:
    site = tmp_path / "gpufabric.yaml"
    site.write_text("version: 1\nbudget:\n  envelopes:\n    '*': {gpu_hours: many}\n")
    cert, key = self_signed_cert(tmp_path / "tls")
    proc = _start(["--cert", str(cert), "--key", str(key), "--port", "0", "--config", str(site)], warehouse)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out
    assert "Traceback" not in out
    assert f"{site}:4: budget.envelopes.*.gpu_hours" in out
    proc = _start(["--cert", str(tmp_path / "none.crt"), "--key", str(key)], warehouse)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "none.crt: no such file" in out and "Traceback" not in out
