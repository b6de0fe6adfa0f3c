"""Start and stop the real control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, the Kueue manager and the node agent, all on 127.0.0.1.

Why it is shaped this way:

- **Detached, recorded, stoppable.** Every process runs in its own session (so a Ctrl-C in the
  caller's terminal or a test runner's signal handling never reaches it) with the default
  handling of SIGINT/SIGTERM/SIGHUP restored (``env --default-signal``; Go keeps a signal ignored
  if it started ignored). Its log is ``<workdir>/logs/<name>.log``; its PID and kernel start time
  are written to ``<workdir>/state.json`` the moment it starts, so ``down`` stops exactly the
  processes we started, including those a killed test run left behind, and never a stranger that
  reused a PID.
- **Free ports, loopback only.** Every listener binds 127.0.0.1 on a port the kernel handed out, so
  parallel workdirs never collide.
- **Real security.** TLS everywhere the API server talks or is talked to; every component
  authenticates with a client certificate of our CA (``pki.py``); ``--authorization-mode=Node,RBAC``;
  the admission chain includes NodeRestriction and both admission-webhook plugins; the
  controller-manager runs each controller as its own ServiceAccount
  (``--use-service-account-credentials``), as kubeadm sets it up.
- **Kueue as released.** The release's own CRDs, and its own webhook configurations with each
  ``service:`` reference rewritten to ``url: https://127.0.0.1:<port>/<path>`` and our CA bundle,
  limited to the webhooks of what we enable (Kueue's objects, ``batch/job``, ``pod``); Kueue serves
  them with a certificate we issue (its internal cert management off).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import ipaddress
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from simulator.controlplane.api import Api, ApiError, ensure_namespace, tls_context
from simulator.controlplane.build import Binaries, build
from simulator.controlplane.nodes import register_nodes
from simulator.controlplane.pki import Authority, service_account_keys
from simulator.twin import alive, reap_child, spawn, start_ticks

Progress = Callable[[str], None]

STATE_FILE = "state.json"
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
KUEUE_NAMESPACE = "kueue-system"
# Node-lifecycle grace period: kubelet's default is 50 s with 10 s renewals; the agent stretches
# renewals to 25 s for ~1,000 nodes, so allow three missed renewals at that interval.
NODE_MONITOR_GRACE = "90s"

# Order of start; `down` stops in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue", "node-agent")
_BINARY_COMPONENTS = {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue"}

# Webhooks of the Kueue release we register: Kueue's own objects plus the integrations we enable.
_KUEUE_WEBHOOK_GROUPS = {"kueue.x-k8s.io", "batch", ""}
_SYSTEM_NAMESPACES = ["kube-system", KUEUE_NAMESPACE]


# A port chosen as free can be taken by another process before the component binds it; `up`
# then starts again on new ports.
_START_ATTEMPTS = 3
_PORT_TAKEN = "address already in use"


class ControlPlaneError(RuntimeError):
    """A component did not come up; the message quotes the tail of its log."""


@dataclass(frozen=True)
class ControlPlane:
    """A running control plane, as recorded in ``<workdir>/state.json``."""

    workdir: Path
    server: str
    kubeconfig: Path
    ca_file: Path
    admin_cert: Path
    admin_key: Path
    bin_dir: Path
    kubernetes_version: str
    kueue_version: str
    etcd_version: str
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    reused: bool = field(default=False, compare=False)

    @property
    def kubectl_path(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def kueue_webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['kueue-webhook']}"

    def log_file(self, component: str) -> Path:
        return self.workdir / "logs" / f"{component}.log"

    def api(self, **kwargs: Any) -> Api:
        """A pooled REST client authenticated as the admin (group ``system:masters``)."""
        return Api(self.server, self.ca_file, self.admin_cert, self.admin_key, **kwargs)

    def kube_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` on the admin kubeconfig (imported lazily)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl against this control plane as the admin."""
        proc = subprocess.run(
            [str(self.kubectl_path), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def register_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> list[str]:
        """Create fake Nodes (see :func:`simulator.controlplane.nodes.register_nodes`)."""
        api = self.api()
        try:
            return register_nodes(api, nodes)
        finally:
            api.close()

    def client_config(self, name: str, *, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig for user ``name`` in ``groups``, with a client certificate of our CA.

        For tests that run a controller as a particular user (RBAC then decides what it may do).
        ``system:serviceaccount:<ns>:<sa>`` plus group ``system:serviceaccounts`` impersonates a
        ServiceAccount as far as RBAC is concerned.
        """
        authority = Authority(self.workdir / "pki")
        safe = "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in name)
        pair = authority.issue(f"user-{safe}", name, organisations=tuple(groups), client=True)
        path = self.workdir / "kubeconfigs" / f"user-{safe}.kubeconfig"
        _write_kubeconfig(path, self.server, self.ca_file, pair.cert, pair.key, user=safe)
        return path

    def serving_cert(self, name: str, hosts: Sequence[str] = ("localhost", "127.0.0.1")) -> tuple[Path, Path]:
        """A server certificate of the plane's CA for ``hosts`` (DNS names and IP addresses):
        what a webhook serves so the API server, given :attr:`ca_bundle`, trusts it."""
        ips = tuple(h for h in hosts if _is_ip(h))
        dns = tuple(h for h in hosts if not _is_ip(h))
        safe = "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in name)
        pair = Authority(self.workdir / "pki").issue(f"serving-{safe}", name, dns_names=dns, ips=ips, server=True)
        return pair.cert, pair.key

    @property
    def ca_bundle(self) -> str:
        """The plane's CA certificate, base64 PEM: a webhook configuration's ``caBundle``."""
        return base64.b64encode(self.ca_file.read_bytes()).decode()

    def to_state(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "ca_file": str(self.ca_file),
            "admin_cert": str(self.admin_cert),
            "admin_key": str(self.admin_key),
            "bin_dir": str(self.bin_dir),
            "kubernetes_version": self.kubernetes_version,
            "kueue_version": self.kueue_version,
            "etcd_version": self.etcd_version,
            "ports": self.ports,
        }


# --------------------------------------------------------------------------------------------- public API


def up(
    workdir: str | Path,
    *,
    nodes: Iterable[Mapping[str, Any]] = (),
    binaries: Binaries | None = None,
    progress: Progress | None = None,
    ready_timeout: float = 180.0,
    scheduler_qps: int | None = None,
) -> ControlPlane:
    """Start the control plane in ``workdir`` (or reuse the one running there) and register ``nodes``.

    ``scheduler_qps`` gives kube-scheduler's API client that many queries a second (burst twice
    that) through a KubeSchedulerConfiguration file; None keeps its defaults (50 QPS, 100 burst),
    which is what a site runs unless it tuned them (docs/burst.md: the limit that binds first in
    a large burst).

    A second ``up`` on a workdir whose processes are all alive and whose API server is ready
    returns that control plane (``reused=True``); concurrent callers (parallel test workers) are
    serialised by a lock file in the workdir, so one starts it and the others reuse it. Anything
    else recorded there (a half-started or crashed plane) is stopped first, and etcd starts from
    an empty data directory. If a component fails to come up, everything started is stopped and
    the :class:`ControlPlaneError` quotes the tail of that component's log.
    """
    say = progress or _print
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    with _workdir_lock(workdir):
        existing = status(workdir)
        if existing is not None:
            say(f"controlplane: reusing the control plane in {workdir} ({existing.server})")
            plane = existing
        else:
            down(workdir, progress=lambda _m: None)
            binaries = binaries or build(progress=say)
            for attempt in range(1, _START_ATTEMPTS + 1):
                try:
                    plane = _start(workdir, binaries, say, ready_timeout, scheduler_qps)
                    break
                except BaseException as exc:
                    # Leave nothing half-started behind; the logs stay in the workdir.
                    down(workdir, progress=lambda _m: None)
                    if attempt < _START_ATTEMPTS and _PORT_TAKEN in str(exc):
                        say(f"controlplane: a port was taken before a component could bind it; retrying ({exc})"[:300])
                        continue
                    raise
    nodes = list(nodes)
    if nodes:
        started = time.monotonic()
        names = plane.register_nodes(nodes)
        say(f"controlplane: registered {len(names)} nodes in {time.monotonic() - started:.1f}s")
    return plane


@contextlib.contextmanager
def _workdir_lock(workdir: Path) -> Iterator[None]:
    with open(workdir / ".lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def down(workdir: str | Path, *, grace: float = 15.0, progress: Progress | None = None) -> list[str]:
    """Stop every process of the control plane in ``workdir``; returns what was stopped.

    Finds them from ``state.json`` (PID and start time must both match) and, for processes a
    killed run started before it could record them, from ``/proc``: our binaries (or the node
    agent) with this workdir on their command line. SIGTERM, ``grace`` seconds, then SIGKILL.
    """
    say = progress or _print
    workdir = Path(workdir).resolve()
    targets: dict[int, str] = {}
    state = _read_state(workdir)
    for name, entry in (state.get("processes") or {}).items():
        pid, start = int(entry["pid"]), entry.get("start")
        if start_ticks(pid) == start and alive(pid):
            targets[pid] = name
    for pid, name in _stray_processes(workdir).items():
        targets.setdefault(pid, name)
    # Clients first, then the API server, then etcd: an API server whose etcd is gone spends its
    # whole grace period retrying the storage calls of its shutdown.
    waves: list[list[int]] = [[], [], []]
    for pid, name in targets.items():
        waves[{"kube-apiserver": 1, "etcd": 2}.get(name, 0)].append(pid)
    for wave in waves:
        _terminate(wave, targets, grace, say)
    if state:
        state["processes"] = {}
        _write_state(workdir, state)
    stopped = sorted(targets.values(), key=lambda n: COMPONENTS.index(n) if n in COMPONENTS else 99)
    if stopped:
        say(f"controlplane: stopped {', '.join(stopped)}")
    return stopped


def _terminate(pids: list[int], names: dict[int, str], grace: float, say: Progress) -> None:
    """SIGTERM ``pids``, wait up to ``grace`` seconds, SIGKILL what is left, reap our children."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        for pid in pids:
            reap_child(pid)
        time.sleep(0.05)
    for pid in pids:
        if alive(pid):
            say(f"controlplane: {names[pid]} (pid {pid}) ignored SIGTERM for {grace:.0f}s; killing it")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for pid in pids:
        for _ in range(50):
            reap_child(pid)
            if not alive(pid):
                break
            time.sleep(0.1)


def status(workdir: str | Path) -> ControlPlane | None:
    """The control plane running in ``workdir`` if every recorded process is alive and it is ready."""
    workdir = Path(workdir).resolve()
    state = _read_state(workdir)
    processes = state.get("processes") or {}
    if not state.get("server") or set(processes) != set(COMPONENTS):
        return None
    for entry in processes.values():
        if start_ticks(int(entry["pid"])) != entry.get("start") or not alive(int(entry["pid"])):
            return None
    plane = _plane_from_state(workdir, state, reused=True)
    try:
        with httpx.Client(verify=tls_context(plane.ca_file, plane.admin_cert, plane.admin_key), timeout=5) as c:
            if c.get(f"{plane.server}/readyz").status_code != 200:
                return None
    except httpx.HTTPError:
        return None
    return plane


def kubeconfig_path(workdir: str | Path) -> Path:
    """Where ``up`` writes the admin kubeconfig of ``workdir`` (whether or not it is running)."""
    return Path(workdir).resolve() / "kubeconfigs" / "admin.kubeconfig"


def wait_for_default_service_account(plane: ControlPlane, namespace: str, timeout: float = 60.0) -> None:
    """Block until the ServiceAccount controller made ``default`` in ``namespace``.

    The ServiceAccount admission plugin refuses a pod in a namespace that has no ``default``
    ServiceAccount yet, as in any real cluster; tests that create a namespace and then a pod at
    once wait here first.
    """
    api = plane.api()
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                api.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
                return
            except ApiError as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)
    finally:
        api.close()


# --------------------------------------------------------------------------------------------- start


def _print(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports that bind on 127.0.0.1 now, from below the kernel's ephemeral range.

    Ports the kernel hands out for ``bind(0)`` come from the same range as the source ports of
    every outgoing connection on the machine, so one can be taken between our check and the
    component's bind. Choosing below that range makes the race rare; ``up`` retries on the rest.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    top = max(low, 12000)
    rng = random.SystemRandom()
    chosen: list[int] = []
    while len(chosen) < count:
        port = rng.randrange(10000, top)
        if port in chosen:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        chosen.append(port)
    return chosen


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, *, user: str, credentials: Mapping[str, str],
                     ca: Path | None = None) -> Path:
    """A self-contained kubeconfig for one user (``credentials``: embedded client certificate and
    key, a token, or nothing for a plain-HTTP proxy), readable only by the owner, written whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cluster: dict[str, str] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = _b64(ca)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gpufabric-sim", "cluster": cluster}],
        "users": [{"name": user, "user": dict(credentials)}],
        "contexts": [{"name": f"{user}@gpufabric-sim", "context": {"cluster": "gpufabric-sim", "user": user}}],
        "current-context": f"{user}@gpufabric-sim",
        "preferences": {},
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.chmod(0o600)
    os.replace(tmp, path)
    return path


def _write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, *, user: str) -> None:
    """A client-certificate kubeconfig (the plane's components and :meth:`ControlPlane.client_config`)."""
    write_kubeconfig(path, server, user=user, ca=ca,
                     credentials={"client-certificate-data": _b64(cert), "client-key-data": _b64(key)})


def _start(workdir: Path, binaries: Binaries, say: Progress, ready_timeout: float,
           scheduler_qps: int | None = None) -> ControlPlane:  # fmt: skip
    started = time.monotonic()
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    pki = workdir / "pki"
    authority = Authority(pki)
    sa = service_account_keys(pki)
    names = (
        "etcd",
        "etcd-peer",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kueue-webhook",
        "kueue-health",
        "kueue-metrics",
    )
    ports = dict(zip(names, _free_ports(len(names)), strict=True))
    server = f"https://127.0.0.1:{ports['kube-apiserver']}"
    apiserver_pair = authority.issue(
        "kube-apiserver",
        "kube-apiserver",
        dns_names=(
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        ips=("127.0.0.1", SERVICE_IP),
        server=True,
    )
    kueue_serving = authority.issue(
        "kueue-webhook", "kueue-webhook", dns_names=("localhost",), ips=("127.0.0.1",), server=True
    )
    # The aggregation layer's front proxy: its own CA, as kubeadm does, so the API server (and the
    # delegated authentication of the controller-manager and scheduler) have a request-header CA.
    front_proxy = Authority(pki / "front-proxy", name="gpufabric-front-proxy-ca")
    proxy_client = front_proxy.issue("front-proxy-client", "front-proxy-client", client=True)
    admin = authority.issue("admin", "gpufabric-admin", organisations=("system:masters",), client=True)
    kcm = authority.issue("kube-controller-manager", "system:kube-controller-manager", client=True)
    sched = authority.issue("kube-scheduler", "system:kube-scheduler", client=True)
    # Kueue runs as a cluster admin: its release RBAC is kustomize input, and least privilege of
    # Kueue itself is not what these tests prove (ours is, see docs/controlplane.md).
    kueue_client = authority.issue("kueue", "kueue-controller-manager", organisations=("system:masters",), client=True)
    apiserver_client = authority.issue(
        "kube-apiserver-client", "kube-apiserver-kubelet-client", organisations=("system:masters",), client=True
    )
    kubeconfigs = workdir / "kubeconfigs"
    admin_kc = kubeconfig_path(workdir)
    _write_kubeconfig(admin_kc, server, authority.pair.cert, admin.cert, admin.key, user="admin")
    kcm_kc = kubeconfigs / "kube-controller-manager.kubeconfig"
    _write_kubeconfig(kcm_kc, server, authority.pair.cert, kcm.cert, kcm.key, user="kube-controller-manager")
    sched_kc = kubeconfigs / "kube-scheduler.kubeconfig"
    _write_kubeconfig(sched_kc, server, authority.pair.cert, sched.cert, sched.key, user="kube-scheduler")
    kueue_kc = kubeconfigs / "kueue.kubeconfig"
    _write_kubeconfig(kueue_kc, server, authority.pair.cert, kueue_client.cert, kueue_client.key, user="kueue")

    plane = ControlPlane(
        workdir=workdir,
        server=server,
        kubeconfig=admin_kc,
        ca_file=authority.pair.cert,
        admin_cert=admin.cert,
        admin_key=admin.key,
        bin_dir=binaries.bin_dir,
        kubernetes_version=binaries.versions.kubernetes,
        kueue_version=binaries.versions.kueue,
        etcd_version=binaries.versions.etcd,
        ports=ports,
    )
    state: dict[str, Any] = {**plane.to_state(), "processes": {}}
    _write_state(workdir, state)
    launcher = _Launcher(workdir, state)
    deadline = lambda: time.monotonic() + ready_timeout  # noqa: E731

    # etcd: a fresh member every start (a restarted plane must not inherit a half-torn-down cluster).
    etcd_data = workdir / "etcd"
    shutil.rmtree(etcd_data, ignore_errors=True)
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
    say(f"controlplane: starting etcd {binaries.versions.etcd} on {etcd_url}")
    launcher.start(
        "etcd",
        [
            str(binaries.etcd),
            "--name=gpufabric",
            f"--data-dir={etcd_data}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=gpufabric={peer_url}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync",  # test data: durability across a power cut is not needed, speed is
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ],
    )
    _wait(launcher, "etcd", deadline(), lambda: _http_ok(f"{etcd_url}/health"))

    say(f"controlplane: starting kube-apiserver {binaries.versions.kubernetes} on {server}")
    launcher.start(
        "kube-apiserver",
        [
            str(binaries.kube_apiserver),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['kube-apiserver']}",
            f"--tls-cert-file={apiserver_pair.cert}",
            f"--tls-private-key-file={apiserver_pair.key}",
            f"--client-ca-file={authority.pair.cert}",
            f"--requestheader-client-ca-file={front_proxy.pair.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={proxy_client.cert}",
            f"--proxy-client-key-file={proxy_client.key}",
            f"--kubelet-client-certificate={apiserver_client.cert}",
            f"--kubelet-client-key={apiserver_client.key}",
            f"--service-account-key-file={sa.cert}",
            f"--service-account-signing-key-file={sa.key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
            "ValidatingAdmissionPolicy,ResourceQuota,ServiceAccount,Priority,DefaultTolerationSeconds",
            "--allow-privileged=true",
            "--max-requests-inflight=800",
            "--max-mutating-requests-inflight=400",
            "--event-ttl=1h",
            # The `kubernetes` Service's endpoint would be 127.0.0.1, which Endpoints validation
            # refuses (loopback); nothing in this cluster routes to it, so do not reconcile it.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            f"--cert-dir={workdir / 'kube-apiserver-certs'}",
            "--v=1",
        ],
    )
    admin_ctx = tls_context(authority.pair.cert, admin.cert, admin.key)
    _wait(launcher, "kube-apiserver", deadline(), lambda: _http_ok(f"{server}/readyz", verify=admin_ctx))

    api = plane.api()
    try:
        say("controlplane: starting kube-controller-manager and kube-scheduler")
        launcher.start(
            "kube-controller-manager",
            [
                str(binaries.kube_controller_manager),
                f"--kubeconfig={kcm_kc}",
                f"--authentication-kubeconfig={kcm_kc}",
                f"--authorization-kubeconfig={kcm_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['kube-controller-manager']}",
                f"--cert-dir={workdir / 'kube-controller-manager-certs'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa.key}",
                f"--root-ca-file={authority.pair.cert}",
                f"--cluster-signing-cert-file={authority.pair.cert}",
                f"--cluster-signing-key-file={authority.pair.key}",
                # Every default controller: job, garbage-collector, namespace, serviceaccount(-token),
                # node-lifecycle, replicaset, ttl-after-finished, ...
                "--controllers=*",
                f"--node-monitor-grace-period={NODE_MONITOR_GRACE}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--v=1",
            ],
        )
        launcher.start(
            "kube-scheduler",
            [
                str(binaries.kube_scheduler),
                f"--kubeconfig={sched_kc}",
                f"--authentication-kubeconfig={sched_kc}",
                f"--authorization-kubeconfig={sched_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['kube-scheduler']}",
                f"--cert-dir={workdir / 'kube-scheduler-certs'}",
                "--leader-elect=false",
                "--v=1",
                *_scheduler_config(workdir, sched_kc, scheduler_qps),
            ],
        )
        for name in ("kube-controller-manager", "kube-scheduler"):
            url = f"https://127.0.0.1:{ports[name]}/healthz"
            _wait(launcher, name, deadline(), lambda url=url: _http_ok(url, verify=False))  # type: ignore[misc]

        say(f"controlplane: installing the Kueue {binaries.versions.kueue} CRDs")
        ensure_namespace(api, KUEUE_NAMESPACE)
        crd_names = _install_crds(api, binaries.kueue_crd_dir)
        _wait(
            launcher,
            "kube-apiserver",
            deadline(),
            lambda: _crds_established(api, crd_names),
            what="the Kueue CRDs to be Established",
        )

        cert_dir = workdir / "kueue-certs"
        cert_dir.mkdir(exist_ok=True)
        shutil.copyfile(kueue_serving.cert, cert_dir / "tls.crt")
        shutil.copyfile(kueue_serving.key, cert_dir / "tls.key")
        config_path = workdir / "kueue-config.yaml"
        config = _kueue_config(ports, cert_dir, _kueue_concurrency(binaries.kueue_config_sample))
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        say(f"controlplane: starting Kueue {binaries.versions.kueue} (webhooks on 127.0.0.1:{ports['kueue-webhook']})")
        launcher.start(
            "kueue",
            [str(binaries.kueue), f"--config={config_path}", "--zap-log-level=info"],
            # KUEUE_METRICS_CERT_DIR: read by our build's one-line overlay of cmd/kueue (see build.py);
            # the metrics server presents the same loopback certificate as the webhooks.
            env={"KUBECONFIG": str(kueue_kc), "KUEUE_METRICS_CERT_DIR": str(cert_dir)},
        )
        ready_url = f"http://127.0.0.1:{ports['kueue-health']}/readyz"
        _wait(launcher, "kueue", deadline(), lambda: _http_ok(ready_url))
        webhook_ctx = ssl.create_default_context(cafile=str(authority.pair.cert))
        _wait(
            launcher,
            "kueue",
            deadline(),
            lambda: _tls_answers("127.0.0.1", ports["kueue-webhook"], webhook_ctx),
            what="the Kueue webhook server",
        )
        _register_kueue_webhooks(api, binaries.kueue_webhook_manifest, plane.kueue_webhook_url, authority.pem)
        # End to end: a server-side dry-run create goes through Kueue's ResourceFlavor webhooks.
        _wait(
            launcher,
            "kueue",
            deadline(),
            lambda: _kueue_webhook_admits(api),
            what="Kueue's webhooks to admit a request",
        )

        say("controlplane: starting the node agent")
        launcher.start(
            "node-agent",
            [sys.executable, "-m", "simulator.controlplane", "agent", "--workdir", str(workdir)],
            env={"PYTHONPATH": _project_root()},
        )
        _wait(
            launcher,
            "kube-controller-manager",
            deadline(),
            lambda: _default_sa(api),
            what="the ServiceAccount controller to create default/default",
        )
    finally:
        api.close()
    say(f"controlplane: ready in {time.monotonic() - started:.1f}s; kubeconfig {admin_kc}")
    return _plane_from_state(workdir, _read_state(workdir), reused=False)


def _project_root() -> str:
    root = str(Path(__file__).resolve().parents[2])
    existing = os.environ.get("PYTHONPATH")
    return f"{root}{os.pathsep}{existing}" if existing else root


def _scheduler_config(workdir: Path, kubeconfig: Path, qps: int | None) -> list[str]:
    """``--config`` for kube-scheduler when its client's QPS is set (flags cannot set it); with a
    config file its deprecated flags (--kubeconfig, --leader-elect) are ignored, so both are in it."""
    if qps is None:
        return []
    if not 1 <= qps <= 100_000:
        raise ControlPlaneError(f"scheduler_qps must be between 1 and 100000, not {qps}")
    path = workdir / "kube-scheduler-config.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": 2 * qps},
        "leaderElection": {"leaderElect": False},
    }, sort_keys=False))  # fmt: skip
    return [f"--config={path}"]


# What Kueue v0.19.2's release configuration sets (its controller_manager_config.yaml), for a
# cache built before the sample was kept. Without it controller-runtime runs one worker per
# controller: the pod integration then fell 96 s behind (p99 queue wait) at a 1,000-pod burst.
KUEUE_RELEASE_CONCURRENCY = {"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10, "LocalQueue.kueue.x-k8s.io": 5,
                             "Cohort.kueue.x-k8s.io": 1, "ClusterQueue.kueue.x-k8s.io": 5,
                             "ResourceFlavor.kueue.x-k8s.io": 1}  # fmt: skip


def _kueue_concurrency(sample: Path) -> dict[str, int]:
    """The workers per controller Kueue's release configuration sets (``controller.groupKindConcurrency``
    of the sample the build keeps), so the plane runs Kueue as it ships."""
    if not sample.is_file():
        return dict(KUEUE_RELEASE_CONCURRENCY)
    doc = yaml.safe_load(sample.read_text()) or {}
    found = (doc.get("controller") or {}).get("groupKindConcurrency") or {}
    if not found or not all(isinstance(v, int) and v > 0 for v in found.values()):
        raise ControlPlaneError(f"{sample}: controller.groupKindConcurrency is missing or not positive counts")
    return {str(k): int(v) for k, v in found.items()}


def _kueue_config(ports: dict[str, int], cert_dir: Path, concurrency: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['kueue-health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['kueue-metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["kueue-webhook"], "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 300, "burst": 500},  # the release configuration's, as shipped
        "controller": {"groupKindConcurrency": dict(concurrency or KUEUE_RELEASE_CONCURRENCY)},
        "integrations": {"frameworks": ["batch/job", "pod"]},
        # VisibilityOnDemand off: its API server writes a self-signed certificate to a fixed
        # /visibility directory (v0.19.2) and needs the aggregation layer, which we do not configure.
        "featureGates": {"TopologyAwareScheduling": True, "VisibilityOnDemand": False},
    }


# --------------------------------------------------------------------------------------------- Kueue objects


def _install_crds(api: Api, crd_dir: Path) -> list[str]:
    names = []
    for path in sorted(crd_dir.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            name = doc["metadata"]["name"]
            api.patch(
                f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
                doc,
                "application/apply-patch+yaml",
                fieldManager="gpufabric-controlplane",
                force="true",
            )
            names.append(name)
    return names


def _crds_established(api: Api, names: list[str]) -> bool:
    for name in names:
        crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
        if conditions.get("Established") != "True":
            return False
    return True


def kueue_webhook_configurations(manifest: Path, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The release's webhook configurations, rewritten for a Kueue on loopback.

    Keeps only the webhooks for Kueue's own objects, Jobs and Pods (a webhook for a kind whose
    integration is off would point at a path Kueue does not serve and fail every request for that
    kind); adds the namespace selector the release's kustomization patches in (Pods and Jobs in
    kube-system and kueue-system are left alone); points each at ``base_url`` + its path.
    """
    bundle = base64.b64encode(ca_pem).decode()
    selector = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(_SYSTEM_NAMESPACES)}
        ]
    }
    out = []
    for doc in yaml.safe_load_all(manifest.read_text()):
        if not doc:
            continue
        kept = []
        for hook in doc.get("webhooks") or []:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if not groups or not groups <= _KUEUE_WEBHOOK_GROUPS:
                continue
            service = hook["clientConfig"].get("service") or {}
            hook["clientConfig"] = {"url": f"{base_url}{service.get('path', '/')}", "caBundle": bundle}
            if groups & {"batch", ""}:
                hook["namespaceSelector"] = selector
            hook.setdefault("timeoutSeconds", 10)
            kept.append(hook)
        doc["webhooks"] = kept
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}", "labels": {"app.kubernetes.io/name": "kueue"}}
        out.append(doc)
    return out


def webhooks_at_url(config: Mapping[str, Any], base_url: str, ca_bundle: str) -> dict[str, Any]:
    """A copy of a Validating/MutatingWebhookConfiguration whose webhooks call ``base_url``.

    Each ``clientConfig.service`` (how a manifest for a real cluster names the webhook's Service)
    becomes ``url: <base_url><service.path>`` with ``caBundle`` set: on loopback there is no
    Service to route through. Everything else (rules, selectors, failurePolicy, timeoutSeconds,
    sideEffects) is left exactly as the manifest says, so a test registers what we ship.
    """
    if config.get("kind") not in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        raise ValueError(f"not a webhook configuration: kind {config.get('kind')!r}")
    out = json.loads(json.dumps(config))  # a deep copy that is plain JSON
    for hook in out.get("webhooks") or []:
        client_config = hook.get("clientConfig") or {}
        path = (client_config.get("service") or {}).get("path") or "/"
        if "url" in client_config and "service" not in client_config:
            path = "/" + client_config["url"].split("://", 1)[-1].partition("/")[2]
        hook["clientConfig"] = {"url": f"{base_url.rstrip('/')}{path}", "caBundle": ca_bundle}
    return out


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _register_kueue_webhooks(api: Api, manifest: Path, base_url: str, ca_pem: bytes) -> None:
    for doc in kueue_webhook_configurations(manifest, base_url, ca_pem):
        plural = (
            "validatingwebhookconfigurations"
            if doc["kind"].startswith("Validating")
            else "mutatingwebhookconfigurations"
        )
        api.patch(
            f"/apis/admissionregistration.k8s.io/v1/{plural}/{doc['metadata']['name']}",
            doc,
            "application/apply-patch+yaml",
            fieldManager="gpufabric-controlplane",
            force="true",
        )


def _kueue_webhook_admits(api: Api) -> bool:
    probe = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "controlplane-probe"},
    }
    try:
        api.post("/apis/kueue.x-k8s.io/v1beta2/resourceflavors", probe, dryRun="All")
    except ApiError as exc:
        if exc.status == 409:  # exists already: the webhooks admitted it once
            return True
        if exc.status >= 500:  # "failed calling webhook": not serving yet
            return False
        raise
    return True


def _default_sa(api: Api) -> bool:
    try:
        api.get("/api/v1/namespaces/default/serviceaccounts/default")
        return True
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise


# --------------------------------------------------------------------------------------------- processes


class _Launcher:
    """Starts detached processes and records each in state.json as soon as it exists."""

    def __init__(self, workdir: Path, state: dict[str, Any]) -> None:
        self.workdir = workdir
        self.state = state

    def start(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> int:
        log_path = self.workdir / "logs" / f"{name}.log"
        prefix = _default_signals_prefix()
        with open(log_path, "ab") as log:
            log.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
            log.flush()
            # Recorded in the twin registry too: `gpufabric sim down` and the next test session
            # find it even if this state file is lost with a killed run.
            proc = spawn(name, [*prefix, *argv], log=log, cwd=self.workdir, env={**os.environ, **(env or {})})
        start = start_ticks(proc.pid)
        self.state.setdefault("processes", {})[name] = {"pid": proc.pid, "start": start, "log": str(log_path)}
        _write_state(self.workdir, self.state)
        return proc.pid

    def pid(self, name: str) -> int:
        return int(self.state["processes"][name]["pid"])


_SIGNALS_PREFIX: list[str] | None = None


def _default_signals_prefix() -> list[str]:
    """``env --default-signal=...``: the child starts with default signal handling even if ours ignores some."""
    global _SIGNALS_PREFIX
    if _SIGNALS_PREFIX is None:
        env = shutil.which("env")
        ok = False
        if env:
            probe = subprocess.run([env, "--default-signal=INT,TERM,HUP,QUIT", "true"], capture_output=True)
            ok = probe.returncode == 0
        _SIGNALS_PREFIX = [env, "--default-signal=INT,TERM,HUP,QUIT"] if ok and env else []
    return _SIGNALS_PREFIX


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _wait(
    launcher: _Launcher, name: str, deadline: float, ready: Callable[[], bool], *, what: str | None = None
) -> None:
    """Poll ``ready`` until true; fail fast if ``name`` exited, with the tail of its log."""
    what = what or f"{name} to become ready"
    last_error = ""
    while True:
        try:
            if ready():
                return
        except Exception as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        pid = launcher.pid(name)
        log_path = launcher.workdir / "logs" / f"{name}.log"
        if not alive(pid):
            reap_child(pid)
            raise ControlPlaneError(
                f"{name} exited while waiting for {what}; last lines of {log_path}:\n{_tail(log_path)}"
            )
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise ControlPlaneError(
                f"timed out waiting for {what}{detail}; last lines of {log_path}:\n{_tail(log_path)}"
            )
        time.sleep(0.25)


def _http_ok(url: str, verify: Any = True) -> bool:
    try:
        response = httpx.get(url, verify=verify, timeout=3)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def _tls_answers(host: str, port: int, ctx: ssl.SSLContext) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2) as raw, ctx.wrap_socket(raw, server_hostname=host):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------------------------- state


def _read_state(workdir: Path) -> dict[str, Any]:
    try:
        data = json.loads((workdir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_state(workdir: Path, state: dict[str, Any]) -> None:
    tmp = workdir / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, workdir / STATE_FILE)


def _plane_from_state(workdir: Path, state: dict[str, Any], *, reused: bool) -> ControlPlane:
    return ControlPlane(
        workdir=workdir,
        server=state["server"],
        kubeconfig=Path(state["kubeconfig"]),
        ca_file=Path(state["ca_file"]),
        admin_cert=Path(state["admin_cert"]),
        admin_key=Path(state["admin_key"]),
        bin_dir=Path(state["bin_dir"]),
        kubernetes_version=state["kubernetes_version"],
        kueue_version=state["kueue_version"],
        etcd_version=state["etcd_version"],
        ports={k: int(v) for k, v in state.get("ports", {}).items()},
        pids={k: int(v["pid"]) for k, v in (state.get("processes") or {}).items()},
        reused=reused,
    )


def _stray_processes(workdir: Path) -> dict[int, str]:
    """Our processes for ``workdir`` that state.json may not name (a run killed mid-start)."""
    marker = str(workdir)
    found: dict[int, str] = {}
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        # The workdir itself or a path inside it (".../plane0/" must not match ".../plane01/").
        if not args or not any(a == marker or a.endswith("=" + marker) or marker + os.sep in a for a in args[1:]):
            continue
        # Skip an `env --default-signal` wrapper (it execs, so this is rare) to the real program.
        program = args[0]
        rest = args[1:]
        if os.path.basename(program) == "env":
            rest = [a for a in rest if not a.startswith("--default-signal")]
            program, rest = (rest[0], rest[1:]) if rest else (program, rest)
        base = os.path.basename(program)
        if base in _BINARY_COMPONENTS:
            found[int(entry.name)] = base
        elif "simulator.controlplane" in rest and "agent" in rest:
            found[int(entry.name)] = "node-agent"
    return found
