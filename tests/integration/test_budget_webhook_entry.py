"""``python -m controllers budget-webhook`` as deployed: a real process with worker processes,
its envelopes from the site file's ``budget:`` section, the ledger in Postgres, serving a
certificate of the control plane's CA. Registered on the real API server with the
ValidatingWebhookConfiguration we ship (``deploy/budget/``, pointed at loopback), it judges the
pods users create with kubectl: admits with the reservation as a warning, denies with the root
and the limit named, judges a server-side dry run without recording it. It stops on SIGTERM, and
a bad site file is one clear error. (The policy cases, a webhook that is down or hangs and the
selectors, are in ``test_admission_registration.py``.)"""

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from connectors.warehouse.ledger import ConnectionPool, read_tree
from controllers.tls import self_signed_cert
from simulator.twin import alive
from tests.integration.test_admission_registration import (
    BUDGET_MANIFEST,
    GOVERNED,
    Registration,
    kubectl_apply,
    namespace,
    refused,
    registered_config,
    wait_for,
)
from tests.integration.test_budget_webhook import pod, post, review

pytestmark = pytest.mark.integration

SITE = """\
version: 1
budget:
  governed_namespaces: [agents, GOVERNED_NS, PLAIN_NS]
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


@dataclass
class Served:
    url: str
    ca: Path
    proc: subprocess.Popen[str]
    plane: Any
    governed: str  # labelled gpufabric.io/budget=governed: the API server sends its pods
    plain: str  # governed in the site file, but without the label: never sent

    def owned(self, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
        return {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}


@pytest.fixture(scope="module")
def webhook(warehouse: Any, control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("budget-entry")
    governed, plain = namespace(control_plane, GOVERNED), namespace(control_plane)
    site = tmp / "gpufabric.yaml"
    site.write_text(SITE.replace("GOVERNED_NS", governed).replace("PLAIN_NS", plain))
    cert, key = control_plane.serving_cert("budget-webhook", ("localhost", "127.0.0.1"))
    port = _free_port()
    args = ["--cert", str(cert), "--key", str(key), "--host", "127.0.0.1", "--port", str(port)]
    proc = _start([*args, "--workers", "2", "--config", str(site)], warehouse)
    ctx = ssl.create_default_context(cafile=str(control_plane.ca_file))
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
    yield Served(f"https://localhost:{port}/validate", control_plane.ca_file, proc, control_plane, governed, plain)
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def registered(webhook: Served) -> Iterator[Served]:
    """The shipped ValidatingWebhookConfiguration on the API server, calling this process."""
    base = webhook.url.removesuffix("/validate").replace("localhost", "127.0.0.1")
    registration = Registration(webhook.plane, registered_config(
        webhook.plane, BUDGET_MANIFEST, base, [webhook.governed, webhook.plain])).create()  # fmt: skip
    try:
        # in force once a pod without ancestry labels is refused (the plugin picks it up by a watch)
        probe = webhook.owned(pod_without_labels("probe"), webhook.governed)
        wait_for("the budget webhook registration", refused(webhook.plane, probe, "has no ancestry labels"))
        yield webhook
    finally:
        registration.delete()


def pod_without_labels(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}  # fmt: skip


def tree_of(warehouse: Any, root: str) -> list[str] | None:
    """The agents the ledger holds for ``root``, or None if it has no envelope."""
    pool = ConnectionPool(warehouse.libpq_url, size=1)
    try:
        with pool.connection() as conn:
            tree, nodes = read_tree(conn, root)
    finally:
        pool.close()
    return None if tree is None else sorted(n.agent_id for n in nodes)


def test_serves_with_workers_and_the_site_files_envelopes(webhook: Served) -> None:
    url, cert, proc = webhook.url, webhook.ca, webhook.proc
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


def test_the_api_server_calls_it_for_pods_created_in_governed_namespaces(registered: Served, warehouse: Any) -> None:
    plane, ns = registered.plane, registered.governed
    root = f"api-{uuid.uuid4().hex[:8]}"

    def create(name: str, parent: str | None, depth: int) -> Any:
        obj = pod(name, root=root, agent=name, parent=parent, depth=depth, client="entry-client")
        return kubectl_apply(plane, registered.owned(obj, ns))

    out = create(root, None, 0)
    envelope = "envelope gpu_hours=3 cost_usd=100 live_pods=10 depth=3 fan_out=10 deadline=none"
    # admitted, and kubectl shows the webhook's account of the reservation as a warning
    assert (out.returncode, out.stdout.strip()) == (0, f"pod/{root} created"), out.stderr
    assert out.stderr.strip() == f"Warning: admitted root {root}: {envelope}"
    first = create(f"{root}-a", root, 1)
    assert first.returncode == 0 and first.stderr.strip() == (
        f"Warning: admitted into root {root}: reserves 1 GPU-h / $2, left 1 GPU-h")
    assert create(f"{root}-b", root, 1).returncode == 0
    # 3 GPU-h at 1 h per pod: the root and two children; the third child is refused with the reason
    out = create(f"{root}-c", root, 1)
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f'Error from server (Forbidden): error when creating "STDIN": admission webhook "budget.gpufabric.io" '
        f"denied the request: denied: root {root} ({ns}), limit gpu_hours: needs 1 GPU-h, 0 left; {envelope}")
    assert tree_of(warehouse, root) == sorted([root, f"{root}-a", f"{root}-b"])

    # A pod without ancestry labels: refused in the governed namespace; in one without the
    # namespace label it is never sent (the site file governs that namespace too, so the webhook
    # would have refused it), and is created.
    out = kubectl_apply(plane, registered.owned(pod_without_labels("stray"), ns))
    assert out.returncode == 1 and out.stderr.strip() == (
        f'Error from server (BadRequest): error when creating "STDIN": admission webhook "budget.gpufabric.io" '
        f"denied the request: pod {ns}/stray has no ancestry labels (gpufabric.io/root-id) in governed "
        f"namespace {ns}")
    out = kubectl_apply(plane, registered.owned(pod_without_labels("stray"), registered.plain))
    assert (out.returncode, out.stdout.strip()) == (0, "pod/stray created")


def test_a_server_side_dry_run_is_judged_and_recorded_nowhere(registered: Served, warehouse: Any) -> None:
    """sideEffects NoneOnDryRun: the API server calls the webhook for a dry run (with dryRun
    true), and the webhook decides without reserving."""
    plane, ns = registered.plane, registered.governed
    root = f"dry-{uuid.uuid4().hex[:8]}"
    root_pod = registered.owned(pod(root, root=root, agent=root, parent=None, depth=0, client="entry-client"), ns)
    out = kubectl_apply(plane, root_pod, "--dry-run=server")
    assert (out.returncode, out.stdout.strip()) == (0, f"pod/{root} created (server dry run)")
    assert out.stderr.startswith(f"Warning: admitted root {root}: ")  # it was judged ...
    assert tree_of(warehouse, root) is None  # ... and nothing was reserved
    # judged, not waved through: a child of the root that was only dry-run has no envelope to join
    child = registered.owned(pod(f"{root}-a", root=root, agent=f"{root}-a", parent=root, depth=1,
                                 client="entry-client"), ns)  # fmt: skip
    out = kubectl_apply(plane, child, "--dry-run=server")
    assert out.returncode == 1 and out.stderr.strip().endswith(
        f"denied the request: denied: root {root} ({ns}) not found: no envelope for this root")
    # the real create records it
    assert kubectl_apply(plane, root_pod).returncode == 0
    assert tree_of(warehouse, root) == [root]
    assert kubectl_apply(plane, child, "--dry-run=server").returncode == 0
    assert tree_of(warehouse, root) == [root]


def test_sigterm_stops_every_worker_cleanly(webhook: Served) -> None:
    proc = webhook.proc
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
