"""Our admission webhooks registered on the real API server, so the API server itself calls them.

The configurations registered are the ones we ship (``deploy/webhook/topology-webhook.yaml``,
``deploy/budget/budget-controller.yaml``) with only two changes: ``clientConfig.service`` becomes
``url: https://127.0.0.1:<port>/...`` with the plane's CA as ``caBundle`` (no Service on
loopback), and each webhook's ``namespaceSelector`` gains one more expression naming the test's
own namespaces, so a registration can never reach another test's objects. The topology webhook
runs as a real process (``python -m controllers topology-webhook``) serving a certificate of the
plane's CA, its node index from the API server. Every verdict is seen as a user sees it: what
``kubectl apply`` prints.

Shown here: a denial with the webhook's reason, a warning, objectSelector scoping; a webhook that
hangs (a stopped process) under ``timeoutSeconds`` with ``failurePolicy`` Fail and Ignore; a
webhook that is down under both policies; the budget webhook's namespaceSelector. The budget
webhook's own verdicts through the API server, and its dry-run handling, are in
``test_budget_webhook_entry.py`` (beside its process). What a user sees in each case:
``docs/webhooks.md``.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from simulator.controlplane import wait_for_default_service_account
from simulator.controlplane.api import ApiError
from simulator.controlplane.cluster import webhooks_at_url
from simulator.controlplane.reset import reset, unique_namespace

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY_MANIFEST = ROOT / "deploy" / "webhook" / "topology-webhook.yaml"
BUDGET_MANIFEST = ROOT / "deploy" / "budget" / "budget-controller.yaml"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
JSON_PATCH = "application/json-patch+json"
BLOCK = "fabric.gpufabric.io/block"
REQ = "kueue.x-k8s.io/podset-required-topology"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GOVERNED = {"gpufabric.io/budget": "governed"}
HANG_GUARD_S = 60.0


def wait_for(what: str, check: Callable[[], bool], deadline_s: float = HANG_GUARD_S) -> None:
    """Poll until ``check()``; the deadline only guards against a hang, it is not a timing claim."""
    deadline = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {deadline_s:.0f}s waiting for: {what}")
        time.sleep(0.1)


# -- the shipped configurations, pointed at loopback ----------------------------------------------------


def shipped(manifest: Path, kind: str = "ValidatingWebhookConfiguration") -> dict[str, Any]:
    (config,) = [d for d in yaml.safe_load_all(manifest.read_text()) if d and d.get("kind") == kind]
    return dict(config)


def registered_config(plane: Any, manifest: Path, url: str, namespaces: Sequence[str]) -> dict[str, Any]:
    """The shipped configuration of ``manifest`` calling ``url``, limited to ``namespaces``."""
    config = webhooks_at_url(shipped(manifest), url, plane.ca_bundle)
    config["metadata"] = {"name": f"{config['metadata']['name']}-{namespaces[0]}"}
    for hook in config["webhooks"]:
        selector = hook.setdefault("namespaceSelector", {})
        selector.setdefault("matchExpressions", []).append(
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(namespaces)})  # fmt: skip
    return config


@dataclass
class Registration:
    """A webhook configuration on the API server, removed again by :meth:`delete`."""

    plane: Any
    config: dict[str, Any]

    @property
    def path(self) -> str:
        plural = "validatingwebhookconfigurations" if self.config["kind"].startswith("Validating") else \
            "mutatingwebhookconfigurations"  # fmt: skip
        return f"{ADMISSION}/{plural}/{self.config['metadata']['name']}"

    def create(self) -> Registration:
        api = self.plane.api()
        try:
            api.post(self.path.rsplit("/", 1)[0], self.config)
        finally:
            api.close()
        return self

    def set(self, field: str, value: Any) -> None:
        """Change one field of every webhook of the configuration (``failurePolicy``, ...)."""
        patch = [{"op": "replace", "path": f"/webhooks/{i}/{field}", "value": value}
                 for i in range(len(self.config["webhooks"]))]  # fmt: skip
        api = self.plane.api()
        try:
            api.patch(self.path, patch, JSON_PATCH)
        finally:
            api.close()

    def delete(self) -> None:
        api = self.plane.api()
        try:
            api.delete(self.path)
        finally:
            api.close()


@pytest.fixture
def registrations(control_plane: Any) -> Iterator[Callable[[dict[str, Any]], Registration]]:
    made: list[Registration] = []

    def register(config: dict[str, Any]) -> Registration:
        made.append(Registration(control_plane, config).create())
        return made[-1]

    yield register
    for registration in made:
        registration.delete()


# -- objects as a user writes them ----------------------------------------------------------------------


def job(name: str, namespace: str, parallelism: int, gpus: int, *, queue: str | None = "team",
        annotations: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """A suspended batch/v1 Job (nothing runs: these tests are about admission only)."""
    labels = {QUEUE_LABEL: queue} if queue else {}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"parallelism": parallelism, "completions": parallelism, "suspend": True,
                     "template": {"metadata": {"annotations": annotations or {}},
                                  "spec": {"restartPolicy": "Never", "containers": [{
                                      "name": "main", "image": "train:1",
                                      "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}  # fmt: skip


def pod(name: str, namespace: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
                                                            "labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": "agent:1",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip


def kubectl_apply(plane: Any, obj: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    """``kubectl apply -f -`` (or ``create``, with ``extra``) as a user runs it; never raises."""
    verb = "create" if extra else "apply"
    return plane.kubectl(verb, *extra, "-f", "-", input=json.dumps(obj), check=False)


def created(plane: Any, obj: dict[str, Any]) -> bool:
    """Whether the API server stored ``obj`` (a denied create stores nothing)."""
    kind = "job" if obj["kind"] == "Job" else "pod"
    meta = obj["metadata"]
    return plane.kubectl("get", kind, meta["name"], "-n", meta["namespace"], check=False).returncode == 0


def server_dry_run(plane: Any, obj: dict[str, Any]) -> ApiError | None:
    """A server-side dry-run create of ``obj`` (it passes every admission webhook, stores nothing);
    the refusal, if any."""
    group = "/apis/batch/v1" if obj["kind"] == "Job" else "/api/v1"
    plural = "jobs" if obj["kind"] == "Job" else "pods"
    api = plane.api()
    try:
        api.post(f"{group}/namespaces/{obj['metadata']['namespace']}/{plural}", obj, dryRun="All")
        return None
    except ApiError as exc:
        return exc
    finally:
        api.close()


def denied_request(prefix: str) -> str:
    return f'Error from server (Forbidden): error when creating "STDIN": {prefix}'


def failed_call(webhook: str, url: str, timeout_s: int, cause: str) -> str:
    """What kubectl prints when the API server could not get an answer from a webhook (Fail)."""
    return (f'Error from server (InternalError): error when creating "STDIN": Internal error occurred: '
            f'failed calling webhook "{webhook}": failed to call webhook: '
            f'Post "{url}?timeout={timeout_s}s": {cause}')


def dead_url() -> str:
    """An https URL on loopback where nothing listens: a webhook that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"https://127.0.0.1:{port}"


# -- the topology webhook as a process ------------------------------------------------------------------


@dataclass
class WebhookProcess:
    popen: subprocess.Popen[bytes]
    log: Path
    url: str
    ca: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def healthy(self) -> bool:
        try:
            ctx = ssl.create_default_context(cafile=str(self.ca))
            return httpx.get(f"{self.url}/healthz", verify=ctx, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        """SIGKILL: a clean stop on SIGTERM is tested in test_controllers_processes.py; here it
        would only wait out the API server's idle keep-alive connections (up to 5 s)."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()


def start_topology_webhook(plane: Any, kubeconfig: Path, log: Path) -> WebhookProcess:
    """``python -m controllers topology-webhook`` with a serving certificate of the plane's CA,
    its node index listed and watched through ``kubeconfig``; returns once ``/healthz`` is 200
    (the index is loaded)."""
    cert, key = plane.serving_cert("topology-webhook")
    with log.open("wb") as out:
        # port 0: the webhook binds a free port and logs it (no race with parallel tests)
        popen = subprocess.Popen([sys.executable, "-m", "controllers", "topology-webhook", "--kubeconfig",
                                  str(kubeconfig), "--cert", str(cert), "--key", str(key), "--host", "127.0.0.1",
                                  "--port", "0"], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 cwd=ROOT)  # fmt: skip
    proc = WebhookProcess(popen, log, "", plane.ca_file)

    def serving() -> bool:
        if popen.poll() is not None:
            pytest.fail(f"topology-webhook exited with {popen.returncode}:\n{proc.output()[-3000:]}")
        return "topology webhook serving on https://127.0.0.1:" in proc.output()

    try:
        wait_for("the topology webhook to serve", serving)
        port = re.search(r"serving on https://127\.0\.0\.1:(\d+)", proc.output())
        assert port is not None, proc.output()
        proc.url = f"https://127.0.0.1:{port.group(1)}"
        wait_for("the topology webhook's index (/healthz 200)", proc.healthy)
    except BaseException:
        proc.kill()
        raise
    return proc


@dataclass
class Cluster:
    plane: Any
    webhook: WebhookProcess


@pytest.fixture(scope="module")
def cluster(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The plane emptied once for the module (what ``kube_cluster`` does per test), four 8-GPU
    nodes in two blocks (blk-a, blk-b: 2 nodes each), and the topology webhook watching them."""
    reset(control_plane)
    control_plane.register_nodes([
        {"name": f"adm-{block}{i}", "labels": {BLOCK: f"blk-{block}"},
         "capacity": {"nvidia.com/gpu": "8"}} for block in "ab" for i in (1, 2)])  # fmt: skip
    hook = start_topology_webhook(control_plane, control_plane.kubeconfig,
                                  tmp_path_factory.mktemp("admission") / "topology-webhook.log")  # fmt: skip
    try:
        yield Cluster(control_plane, hook)
    finally:
        hook.kill()


def namespace(plane: Any, labels: dict[str, str] | None = None) -> str:
    name = unique_namespace(plane)
    if labels:
        plane.kubectl("label", "namespace", name, *(f"{k}={v}" for k, v in labels.items()))
    wait_for_default_service_account(plane, name)
    return name


def refused(plane: Any, obj: dict[str, Any], text: str) -> Callable[[], bool]:
    """A probe for "the registration is in force": the API server's webhook plugin picks
    configurations up from a watch, a moment after they are written."""

    def check() -> bool:
        err = server_dry_run(plane, obj)
        return err is not None and text in err.message

    return check


# -- the tests ------------------------------------------------------------------------------------------


def test_kubectl_shows_the_topology_webhooks_denial_and_warning(
    cluster: Cluster, registrations: Callable[[dict[str, Any]], Registration]
) -> None:
    plane = cluster.plane
    ns = namespace(plane)
    registrations(registered_config(plane, TOPOLOGY_MANIFEST, cluster.webhook.url, [ns]))
    too_big = job("too-big", ns, 3, 8, annotations={REQ: BLOCK})
    wait_for("the topology webhook registration", refused(plane, too_big, "denied the request"))

    out = kubectl_apply(plane, too_big)
    assert out.returncode == 1
    assert out.stderr.strip() == denied_request(
        'admission webhook "topology.gpufabric.io" denied the request: the workload requires 3 pods x 8 GPUs in one '
        "fabric.gpufabric.io/block domain, but the largest fabric.gpufabric.io/block domain (blk-a) has 16 GPUs on "
        "2 nodes and holds 2 pods of 8 GPUs")  # fmt: skip
    assert not created(plane, too_big)

    fits = job("fits", ns, 2, 8, annotations={REQ: BLOCK})
    out = kubectl_apply(plane, fits)
    assert (out.returncode, out.stdout.strip(), out.stderr) == (0, "job.batch/fits created", "")
    # no topology annotation on a multi-node job: admitted, with a warning kubectl prints
    unannotated = kubectl_apply(plane, job("unannotated", ns, 2, 8))
    assert unannotated.returncode == 0 and unannotated.stdout.strip() == "job.batch/unannotated created"
    assert unannotated.stderr.strip() == (
        "Warning: the workload needs 16 GPUs (more than one node) but has no topology annotation; set "
        "kueue.x-k8s.io/podset-required-topology or kueue.x-k8s.io/podset-preferred-topology to one of: "
        "fabric.gpufabric.io/pod, fabric.gpufabric.io/spine-group, fabric.gpufabric.io/block, "
        "accelerator.gpufabric.io/domain, accelerator.gpufabric.io/sub-domain, kubernetes.io/hostname")
    # objectSelector: a Job no Kueue queue manages is never sent, however big
    unqueued = job("unqueued", ns, 3, 8, queue=None, annotations={REQ: BLOCK})
    assert kubectl_apply(plane, unqueued).returncode == 0 and created(plane, unqueued)

    # sideEffects None: a server-side dry run is judged like the real request, and stores nothing
    dry = kubectl_apply(plane, job("dry-big", ns, 3, 8, annotations={REQ: BLOCK}), "--dry-run=server")
    assert dry.returncode == 1 and 'webhook "topology.gpufabric.io" denied the request' in dry.stderr
    dry = kubectl_apply(plane, job("dry-fits", ns, 2, 8, annotations={REQ: BLOCK}), "--dry-run=server")
    assert dry.returncode == 0 and dry.stdout.strip() == "job.batch/dry-fits created (server dry run)"
    assert not created(plane, job("dry-fits", ns, 2, 8))

    # The verdicts follow the cluster: a third node joins blk-a, and 3 pods fit there now.
    plane.register_nodes([{"name": "adm-a3", "labels": {BLOCK: "blk-a"}, "capacity": {"nvidia.com/gpu": "8"}}])
    try:
        wait_for("the webhook to count adm-a3", lambda: server_dry_run(plane, too_big) is None)
        out = kubectl_apply(plane, too_big)
        assert (out.returncode, out.stdout.strip()) == (0, "job.batch/too-big created")
    finally:
        plane.kubectl("delete", "node", "adm-a3", "--wait=false")


def test_a_webhook_that_hangs_is_cut_off_at_timeout_seconds_then_failure_policy_decides(
    cluster: Cluster, registrations: Callable[[dict[str, Any]], Registration]
) -> None:
    plane, hook = cluster.plane, cluster.webhook
    ns = namespace(plane)
    config = registered_config(plane, TOPOLOGY_MANIFEST, hook.url, [ns])
    for webhook in config["webhooks"]:
        webhook["failurePolicy"], webhook["timeoutSeconds"] = "Fail", 1
    registration = registrations(config)
    probe = job("probe", ns, 1, 8, annotations={REQ: BLOCK})
    deadline_exceeded = failed_call("topology.gpufabric.io", f"{hook.url}/validate", 1, "context deadline exceeded")

    # A stopped process: the kernel still accepts the connection, nothing ever answers: a hung
    # webhook (a deadlock, a stuck dependency), not one that is down.
    hook.popen.send_signal(signal.SIGSTOP)
    try:
        wait_for("the registration (Fail) to be in force", refused(plane, probe, "context deadline exceeded"))
        out = kubectl_apply(plane, job("hung-fail", ns, 1, 8, annotations={REQ: BLOCK}))
        assert out.returncode == 1 and out.stderr.strip() == deadline_exceeded
        assert not created(plane, job("hung-fail", ns, 1, 8))

        registration.set("failurePolicy", "Ignore")
        wait_for("the registration (Ignore) to be in force", lambda: server_dry_run(plane, probe) is None)
        out = kubectl_apply(plane, job("hung-ignore", ns, 1, 8, annotations={REQ: BLOCK}))
        # Admitted unchecked, and the user is not told: only the API server's log says it failed open.
        assert (out.returncode, out.stdout.strip(), out.stderr) == (0, "job.batch/hung-ignore created", "")
    finally:
        hook.popen.send_signal(signal.SIGCONT)
    wait_for("the webhook to answer again", hook.healthy)


def test_a_webhook_that_is_down_fails_closed_or_open_as_its_policy_says_and_selectors_scope_it(
    cluster: Cluster, registrations: Callable[[dict[str, Any]], Registration]
) -> None:
    plane = cluster.plane
    governed, plain = namespace(plane, GOVERNED), namespace(plane)
    url = dead_url()

    # The budget webhook, as shipped (failurePolicy Fail), down: pod creation in a governed
    # namespace stops, with the reason; a namespace without the label is never sent.
    registrations(registered_config(plane, BUDGET_MANIFEST, url, [governed, plain]))
    probe = pod("probe", governed)
    wait_for("the budget registration", refused(plane, probe, "connection refused"))
    out = kubectl_apply(plane, pod("worker", governed))
    refused_connection = f"dial tcp {url.removeprefix('https://')}: connect: connection refused"
    assert out.returncode == 1
    assert out.stderr.strip() == failed_call("budget.gpufabric.io", f"{url}/validate", 5, refused_connection)
    elsewhere = pod("worker", plain)
    assert kubectl_apply(plane, elsewhere).returncode == 0 and created(plane, elsewhere)

    # The topology webhook, down, first under Fail: a Job for a Kueue queue is refused, one
    # without a queue name never reaches it (objectSelector) ...
    topology = registered_config(plane, TOPOLOGY_MANIFEST, url, [governed, plain])
    for webhook in topology["webhooks"]:
        webhook["failurePolicy"] = "Fail"
    registration = registrations(topology)
    queued = job("probe", plain, 1, 8, annotations={REQ: BLOCK})
    wait_for("the topology registration (Fail)", refused(plane, queued, "connection refused"))
    out = kubectl_apply(plane, job("queued", plain, 1, 8))
    assert out.returncode == 1
    assert out.stderr.strip() == failed_call("topology.gpufabric.io", f"{url}/validate", 5, refused_connection)
    unqueued = job("unqueued", plain, 1, 8, queue=None)
    assert kubectl_apply(plane, unqueued).returncode == 0 and created(plane, unqueued)
    # ... then as shipped (Ignore): admitted unchecked.
    assert shipped(TOPOLOGY_MANIFEST)["webhooks"][0]["failurePolicy"] == "Ignore"
    registration.set("failurePolicy", "Ignore")
    wait_for("the topology registration (Ignore)", lambda: server_dry_run(plane, queued) is None)
    out = kubectl_apply(plane, job("queued", plain, 1, 8))
    assert (out.returncode, out.stdout.strip(), out.stderr) == (0, "job.batch/queued created", "")
