"""``python -m controllers topology-webhook`` and ``python -m controllers reaper`` as users run
them: real processes against the real control plane (``kube_cluster``: h100-1su's nodes under
names of the test's own; and, for the reaper, a fresh database on the test server), watched doing
their work, then stopped by a signal.

Every process is stopped by SIGTERM or SIGINT, with default signal handling and with SIGINT
inherited as ignored (how a background job of a non-interactive shell, nohup, or many CI runners
start it): each must exit 0, without a traceback. The deadlines below guard against a hang; none
is a claim about speed.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import yaml
from kubernetes import client

from connectors.kube import ClusterTarget, api_client
from connectors.kube.agents import Orchestrator, Spawn
from controllers.tls import self_signed_cert
from simulator.agents.plane import gpu_nodes, spec_nodes, wait_for_no_foreign_pods
from simulator.controlplane.identity import install_rbac, service_account_kubeconfig

pytestmark = pytest.mark.integration
P = "gpufabric.io"
BLOCK = "fabric.gpufabric.io/block"
REQ = "kueue.x-k8s.io/podset-required-topology"
HANG_GUARD_S = 60.0



def wait_for(what: str, check: Callable[[], bool], deadline_s: float = HANG_GUARD_S) -> None:
    """Poll until ``check()``; the deadline only guards against a hang, it is not a timing claim."""
    deadline = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {deadline_s:.0f}s waiting for: {what}")
        time.sleep(0.05)


def job(parallelism: int, gpus: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
            "spec": {"parallelism": parallelism, "template": {"metadata": {"annotations": annotations or {}},
                     "spec": {"containers": [{"name": "m", "image": "x",
                                              "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}  # fmt: skip


def review(obj: Any) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()), "operation": "CREATE", "object": obj}}  # fmt: skip


@dataclass
class Cluster:
    plane: Any
    api: client.ApiClient

    @property
    def kubeconfig(self) -> Path:
        return Path(self.plane.kubeconfig)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def as_deployed(self, service_account: str) -> Path:
        """A kubeconfig of ``deploy/``'s ServiceAccount, bound only by ``deploy/``'s RBAC: the
        controllers run with exactly the permissions they ship with."""
        install_rbac(self.plane)
        return service_account_kubeconfig(self.plane, service_account)

    def pod_names(self, namespace: str) -> set[str]:
        return {str(p.metadata.name) for p in self.core.list_namespaced_pod(namespace).items if p.metadata}

    def all_running(self, namespace: str) -> bool:
        return all(p.status.phase == "Running" for p in self.core.list_namespaced_pod(namespace).items)


def _cluster(plane: Any) -> Iterator[Cluster]:
    api = api_client(ClusterTarget(kubeconfig=plane.kubeconfig))
    try:
        yield Cluster(plane, api)
    finally:
        api.close()


@pytest.fixture
def fresh(kube_cluster: Any) -> Iterator[Cluster]:
    """The plane emptied of earlier tests' nodes: a test registers its own."""
    yield from _cluster(kube_cluster)


@pytest.fixture
def shared(control_plane: Any) -> Iterator[Cluster]:
    """The plane as it is: for processes that only need an API server to talk to."""
    yield from _cluster(control_plane)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_cert(tmp_path_factory.mktemp("processes-tls"))


# -- processes ----------------------------------------------------------------------------------------


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job of a non-interactive shell has it


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_log(self, text: str) -> None:
        def seen() -> bool:
            if self.popen.poll() is not None:
                pytest.fail(f"exited with {self.popen.returncode} before logging {text!r}:\n{self.output()[-3000:]}")
            return text in self.output()

        wait_for(f"{text!r} in the log", seen, HANG_GUARD_S)

    def stop(self, sig: signal.Signals) -> tuple[int, str]:
        """Send ``sig``; the exit code and everything the process wrote."""
        self.popen.send_signal(sig)
        try:
            code = self.popen.wait(HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            pytest.fail(f"still running {HANG_GUARD_S:.0f}s after {sig.name}:\n{self.output()[-3000:]}")
        return code, self.output()

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()


def _spawn(args: list[str], log: Path, *, sigint_ignored: bool = False, env: dict[str, str] | None = None) -> Proc:
    with log.open("wb") as out:
        popen = subprocess.Popen([sys.executable, "-m", "controllers", *args], stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                 preexec_fn=_ignore_sigint if sigint_ignored else None)  # fmt: skip
    return Proc(popen, log)


def _assert_clean_exit(code: int, out: str, stopped: str) -> None:
    """Exit 0, the process's own last words, no traceback."""
    assert code == 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert stopped in out, out[-3000:]


# -- the topology webhook -----------------------------------------------------------------------------


@dataclass
class Webhook:
    proc: Proc
    http: httpx.Client

    def answer(self, obj: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post("/validate", json=review(obj))
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()["response"]
        return out


def _start_webhook(twin: Cluster, tls: tuple[Path, Path], log: Path, *, sigint_ignored: bool = False) -> Webhook:
    cert, key = tls
    # port 0: the webhook binds a free port itself and logs it (no race with parallel tests)
    kubeconfig = twin.as_deployed("gpufabric-topology-webhook")
    proc = _spawn(["topology-webhook", "--kubeconfig", str(kubeconfig), "--cert", str(cert), "--key", str(key),
                   "--host", "127.0.0.1", "--port", "0"], log, sigint_ignored=sigint_ignored)  # fmt: skip
    try:
        proc.wait_for_log("topology webhook serving on https://127.0.0.1:")
    except BaseException:
        proc.kill()
        raise
    port = re.search(r"serving on https://127\.0\.0\.1:(\d+)", proc.output())
    assert port is not None and port.group(1) != "0", proc.output()
    http = httpx.Client(base_url=f"https://localhost:{port.group(1)}",
                        verify=ssl.create_default_context(cafile=str(cert)), timeout=10)  # fmt: skip

    def ready() -> bool:  # 200 only once the node index is loaded (503 before)
        if proc.popen.poll() is not None:
            pytest.fail(f"topology-webhook exited with {proc.popen.returncode}:\n{proc.output()[-3000:]}")
        try:
            return http.get("/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for("topology-webhook /healthz", ready, HANG_GUARD_S)
    except BaseException:
        proc.kill()
        http.close()
        raise
    return Webhook(proc, http)


def _label(twin: Cluster, nodes: list[str], value: str | None) -> None:
    for name in nodes:
        twin.core.patch_node(name, {"metadata": {"labels": {BLOCK: value}}})


def test_topology_webhook_answers_from_the_clusters_labels_and_follows_a_relabel(
    fresh: Cluster, tls: tuple[Path, Path], tmp_path: Path
) -> None:
    nodes = sorted(fresh.plane.register_nodes(spec_nodes("h100-1su", f"topo{uuid.uuid4().hex[:6]}")))
    assert len(nodes) == 32  # 8 GPUs each
    _label(fresh, nodes[:16], "blk-a")
    _label(fresh, nodes[16:], "blk-b")
    hook = _start_webhook(fresh, tls, tmp_path / "webhook.log")
    try:
        assert hook.answer(job(16, 8, {REQ: BLOCK}))["allowed"] is True
        denied = hook.answer(job(20, 8, {REQ: BLOCK}))
        assert denied["allowed"] is False and denied["status"]["message"] == (
            "the workload requires 20 pods x 8 GPUs in one fabric.gpufabric.io/block domain, but the largest "
            "fabric.gpufabric.io/block domain (blk-a) has 128 GPUs on 16 nodes and holds 16 pods of 8 GPUs")
        nine = hook.answer(job(1, 9, {REQ: "kubernetes.io/hostname"}))  # h100-1su's nodes have 8 GPUs
        assert nine["allowed"] is False and "holds 0 pods of 9 GPUs" in nine["status"]["message"]

        # Relabel 4 nodes while it runs: the next verdicts count them in blk-a (a watch, not a poll).
        _label(fresh, nodes[16:20], "blk-a")
        wait_for("the relabel to reach the webhook", lambda: hook.answer(job(20, 8, {REQ: BLOCK}))["allowed"])
        message = hook.answer(job(21, 8, {REQ: BLOCK}))["status"]["message"]
        assert "domain (blk-a) has 160 GPUs on 20 nodes and holds 20 pods" in message
        # ... and a node that loses its label leaves the block
        _label(fresh, nodes[:5], None)
        # The watch sees the five unlabels one by one: wait for the last (16 pods fit until all five left).
        wait_for("the unlabelled nodes to leave blk-a", lambda: not hook.answer(job(16, 8, {REQ: BLOCK}))["allowed"])
        message = hook.answer(job(16, 8, {REQ: BLOCK}))["status"]["message"]
        assert "the largest fabric.gpufabric.io/block domain (blk-a) has 120 GPUs on 15 nodes" in message

        code, out = hook.proc.stop(signal.SIGTERM)
    finally:
        hook.proc.kill()
        hook.http.close()
    _assert_clean_exit(code, out, "topology webhook stopped")
    assert "topology index loaded from 32 nodes" in out
    assert "/allow" not in out


# The other cases (SIGTERM with default handling for the webhook; SIGINT with SIGINT ignored and
# SIGTERM for the reaper) are in the tests above and below that watch each process work.
WEBHOOK_SIGNALS = [
    pytest.param(signal.SIGINT, False, id="SIGINT"),
    pytest.param(signal.SIGTERM, True, id="SIGTERM-sigint-ignored"),
    pytest.param(signal.SIGINT, True, id="SIGINT-sigint-ignored"),
]


@pytest.mark.parametrize(("sig", "sigint_ignored"), WEBHOOK_SIGNALS)
def test_topology_webhook_stops_cleanly_on_signals(
    shared: Cluster, tls: tuple[Path, Path], tmp_path: Path, sig: signal.Signals, sigint_ignored: bool
) -> None:
    hook = _start_webhook(shared, tls, tmp_path / "webhook.log", sigint_ignored=sigint_ignored)
    try:
        assert hook.answer(job(1, 8))["allowed"] is True  # serving from the loaded index
        # No idle keep-alive connection this time: the webhook waits up to 5 s for those (the
        # SIGTERM in the test above has one open, and shows that wait ends).
        hook.http.close()
        code, out = hook.proc.stop(sig)
        with pytest.raises(httpx.ConnectError):
            httpx.get(str(hook.http.base_url.join("/healthz")), verify=False)  # the port went with the process
    finally:
        hook.proc.kill()
    _assert_clean_exit(code, out, "topology webhook stopped")
    assert f"stopping on {sig.name}" in out


# -- the orphan reaper ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _reaper(kubeconfig: Path, database_url: str, log: Path, *extra: str, sigint_ignored: bool = False) -> Proc:
    return _spawn(["reaper", "--kubeconfig", str(kubeconfig), "--period", "0.5", "--grace", "1", *extra], log,
                  sigint_ignored=sigint_ignored, env={"GPUFABRIC_DATABASE_URL": database_url})  # fmt: skip


def _audit(database_url: str) -> list[tuple[str, str, str, str, bool]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT pod, action, rule, reason, dry_run FROM agents.reaper_audit "
                            "WHERE controller = 'reaper' ORDER BY id").fetchall()  # fmt: skip
    return [(str(a), str(b), str(c or ""), str(d or ""), bool(e)) for a, b, c, d, e in rows]


def _raw_pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {f"{P}/{k}": v for k, v in labels.items()}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip


def _trees(twin: Cluster, ns: str) -> dict[str, set[str]]:
    """Pods in namespace ``ns``, on two GPU nodes of their own and Running: a tree whose
    orchestrator stopped renewing its Lease 10 minutes ago, a pod whose parent never existed, two
    healthy trees, and a pod with partial labels."""
    twin.plane.register_nodes(gpu_nodes(f"{ns}-gpu", 2))
    past = datetime.now(UTC) - timedelta(minutes=10)
    crashed = Orchestrator(twin.api, namespace=ns, agent_id="crashed", lease_duration_s=10, clock=lambda: past)
    crashed.register()
    trees: dict[str, set[str]] = {"crashed": {crashed.holder}}
    for i in range(3):
        trees["crashed"].add(crashed.spawn(Spawn(gpus=1, agent_id=f"crashed-w{i}"))["metadata"]["name"])
    for root in ("alive", "alive2"):
        orch = Orchestrator(twin.api, namespace=ns, agent_id=root, lease_duration_s=3600)
        orch.register()
        trees[root] = {orch.holder} | {orch.spawn(Spawn(gpus=1, agent_id=f"{root}-w{i}"))["metadata"]["name"]
                                       for i in range(3)}  # fmt: skip
    twin.core.create_namespaced_pod(ns, _raw_pod("stray", {"agent-id": "stray", "root-id": "ghost",
                                                           "parent-id": "ghost", "depth": "1"}))  # fmt: skip
    twin.core.create_namespaced_pod(ns, _raw_pod("partial", {"agent-id": "p1", "parent-id": "alive"}))
    trees["stray"], trees["partial"] = {"stray"}, {"partial"}
    # Bound by kube-scheduler and started by the node agent before any reaper reads them.
    wait_for(f"the pods of {ns} to run", lambda: twin.all_running(ns))
    return trees


def test_reaper_process_dry_run_then_deleting_orphans_with_its_audit(
    fresh: Cluster, kube_namespace: str, fresh_database_url: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    trees = _trees(fresh, ns)
    everything = set().union(*trees.values())
    orphans = trees["crashed"] | trees["stray"]
    assert fresh.pod_names(ns) == everything
    wait_for_no_foreign_pods(fresh.plane, [ns])  # the reaper reads every namespace, as deployed

    # Dry run by default: the orphans are audited as would_delete, nothing is deleted. Started as
    # a background job is (SIGINT ignored) and stopped by SIGINT.
    as_deployed = fresh.as_deployed("gpufabric-reaper")
    health = _free_port()  # the probes deploy/reaper points the kubelet at (controllers/health.py)
    dry = _reaper(as_deployed, fresh_database_url, tmp_path / "dry.log", "--health-port", str(health),
                  sigint_ignored=True)  # fmt: skip
    try:
        dry.wait_for_log("orphan reaper started (dry run")
        wait_for("would_delete rows for every orphan",
                 lambda: {p for p, a, *_ in _audit(fresh_database_url) if a == "would_delete"} == orphans)
        # Passes have run: live (the loop ticks) and ready (the last pass worked).
        for probe in ("/healthz", "/readyz"):
            answer = httpx.get(f"http://127.0.0.1:{health}{probe}", timeout=10)
            assert answer.status_code == 200, (probe, answer.text)
        code, out = dry.stop(signal.SIGINT)
    finally:
        dry.kill()
    _assert_clean_exit(code, out, "orphan reaper stopped after")
    assert fresh.pod_names(ns) == everything
    rows = _audit(fresh_database_url)
    assert {a for _, a, *_ in rows} == {"would_delete", "skipped"} and all(r[4] for r in rows)
    # each decision is audited once per process, however many passes repeat it
    assert len(rows) == len({(p, a) for p, a, *_ in rows}) == len(orphans) + 1

    # Deleting: the orphans go, and only they; each deletion audited with its rule.
    live = _reaper(as_deployed, fresh_database_url, tmp_path / "live.log", "--no-dry-run")
    try:
        live.wait_for_log("orphan reaper started (deleting")
        wait_for("the orphans to be deleted", lambda: fresh.pod_names(ns) == everything - orphans)
        wait_for("the deletions to be audited",
                 lambda: {p for p, a, *_ in _audit(fresh_database_url) if a == "deleted"} == orphans)

        # While it runs: a healthy tree's orchestrator vanishes (pod and Lease): its workers are
        # orphaned now, and reaped; the other healthy tree stays.
        fresh.core.delete_namespaced_pod("agent-alive", ns)
        client.CoordinationV1Api(fresh.api).delete_namespaced_lease("agent-alive", ns)
        gone = trees["alive"] - {"agent-alive"}
        wait_for("the workers of the vanished orchestrator to be deleted",
                 lambda: fresh.pod_names(ns) == trees["alive2"] | trees["partial"])
        code, out = live.stop(signal.SIGTERM)
    finally:
        live.kill()
    _assert_clean_exit(code, out, "orphan reaper stopped after")
    deleted = {p: (rule, dry_run) for p, a, rule, _, dry_run in _audit(fresh_database_url) if a == "deleted"}
    assert deleted == {
        **{p: ("lease_expired", False) for p in trees["crashed"]},
        "stray": ("parent_missing", False),
        **{p: ("parent_missing", False) for p in gone},
    }
    skipped = [(p, reason) for p, a, _, reason, _ in _audit(fresh_database_url) if a == "skipped"]
    assert ("partial", "partial ancestry labels: missing root-id, depth") in skipped
    assert fresh.pod_names(ns) == trees["alive2"] | {"partial"}


@pytest.mark.parametrize(
    ("sig", "sigint_ignored"),
    [pytest.param(signal.SIGINT, False, id="SIGINT"), pytest.param(signal.SIGTERM, True, id="SIGTERM-sigint-ignored")],
)
def test_reaper_stops_cleanly_on_signals(
    shared: Cluster, warehouse: Any, tmp_path: Path, sig: signal.Signals, sigint_ignored: bool
) -> None:
    # Whatever the shared cluster holds: the reaper (dry run) passes until the signal.
    proc = _reaper(shared.kubeconfig, warehouse.libpq_url, tmp_path / "reaper.log", sigint_ignored=sigint_ignored)
    try:
        proc.wait_for_log("orphan reaper started")
        code, out = proc.stop(sig)
    finally:
        proc.kill()
    _assert_clean_exit(code, out, "orphan reaper stopped after")


def test_reaper_keeps_running_while_the_api_is_unreachable(warehouse: Any, tmp_path: Path) -> None:
    """A pass that cannot reach the API fails, is logged, and is retried; it never ends the loop."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dead",
        "clusters": [{"name": "dead", "cluster": {"server": dead}}],
        "users": [{"name": "dead", "user": {"token": uuid.uuid4().hex}}],
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "dead"}}],
    }))  # fmt: skip
    proc = _reaper(kubeconfig, warehouse.libpq_url, tmp_path / "reaper.log")
    try:
        proc.wait_for_log("orphan reaper started")
        proc.wait_for_log("reaper pass failed, retrying next tick: MaxRetryError")
        first = proc.output().count("reaper pass failed")
        wait_for("another failed pass", lambda: proc.output().count("reaper pass failed") > first)
        code, out = proc.stop(signal.SIGTERM)
    finally:
        proc.kill()
    _assert_clean_exit(code, out, "orphan reaper stopped after")
    stopped = re.search(r"orphan reaper stopped after (\d+) passes \((\d+) failed\)", out)
    assert stopped is not None and stopped.group(1) == "0" and int(stopped.group(2)) >= 2, out[-2000:]
