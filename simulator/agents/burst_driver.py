"""Replay a burst plan (:mod:`simulator.agents.burst`) against a real API server (issue 20, part 1).

The driver does what the cluster and the orchestrators would: it registers the plan's fake GPU
nodes (the node agent of ``simulator/controlplane`` keeps them Ready and runs what lands on them),
creates the tenants' namespaces, binds the background pods to their nodes so the cluster starts
``busy_fraction`` busy, and then creates the burst's pods at their planned instants, one API call
per pod, each with its ancestry labels, the way agent orchestrators spawn their children.

Why a thread pool of :data:`DEFAULT_WORKERS`: each agent tree's orchestrator is its own process
creating one pod at a time, so at the peak hundreds of creates are in flight; 64 concurrent calls
keep the driver ahead of the plan at the default 10,000 pods in 120 s (about 85 creates a second)
while leaving the API server, not the driver, as what limits the rate. The Python client has no
client-side rate limiter (client-go's default is 5 QPS per client), like the Python orchestrators
that create these pods. A child is sent only after its parent's create returned: an orchestrator
spawns children once its own pod exists. Throttling (429) and 5xx answers are retried with
backoff, honouring ``Retry-After``, as client-go does; anything else is a failure with the
server's reason (a webhook's denial, for instance), reported, never dropped.

Run it against ``gpufabric sim up``'s plane::

    python -m simulator.agents.burst_driver --kubeconfig "$(gpufabric sim kubeconfig)" \\
        --nodes 64 --trees 100 --pods 500 --window 60 --queues

This module talks to a cluster only through the official ``kubernetes`` client and never
imports our connectors (the simulator imports only ``core``).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from core.burst import GATE
from simulator.agents.burst import ROLE_LABEL, BurstPlan, BurstPod, plan_burst
from simulator.controlplane.nodes import normalise_node

DEFAULT_WORKERS = 64
MAX_ATTEMPTS = 5
MAX_RETRY_AFTER_S = 10.0
PARENT_WAIT_S = 120.0  # a child waits at most this long for its parent's create to return
TTL_S = 3600.0  # the <p>/expires-at the reaper reads: an hour after creation
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"

Progress = Callable[[str], None]


def kube_client(kubeconfig: str | Path, *, pool: int = DEFAULT_WORKERS) -> client.ApiClient:
    """An ``ApiClient`` for a kubeconfig with a connection pool as large as the thread pool (the
    default, 5 per CPU, would make threads wait for a connection instead of the server)."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration, persist_config=False)
    configuration.connection_pool_maxsize = max(pool, 4)
    return client.ApiClient(configuration)


# ------------------------------------------------------------------------------------------------ reports


@dataclass(frozen=True)
class Created:
    """One pod the API server accepted: its uid, when we sent it and how late against the plan."""

    name: str
    namespace: str
    uid: str
    created_at: str  # metadata.creationTimestamp as the server stamped it
    sent_at: datetime
    late_s: float
    attempts: int


@dataclass
class ReplayReport:
    planned: int
    created: dict[str, Created] = field(default_factory=dict)  # "<namespace>/<name>" -> Created
    failures: dict[str, str] = field(default_factory=dict)  # "<namespace>/<name>" -> the reason
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures and len(self.created) == self.planned

    @property
    def max_late_s(self) -> float:
        return max((c.late_s for c in self.created.values()), default=0.0)

    @property
    def retried(self) -> int:
        return sum(1 for c in self.created.values() if c.attempts > 1)

    def summary(self) -> str:
        return (f"{len(self.created):,}/{self.planned:,} pods created, {len(self.failures):,} failed, "
                f"{self.retried:,} retried, at most {self.max_late_s:.1f} s behind plan, "
                f"in {self.elapsed_s:.1f} s")  # fmt: skip


class Refused(Exception):
    """The API server refused a create for good (not a throttle, not a transient 5xx)."""


def _describe(exc: ApiException) -> str:
    try:
        message = json.loads(exc.body or "{}").get("message") or ""
    except (ValueError, AttributeError):
        message = str(exc.body or "")[:300]
    return f"HTTP {exc.status} {exc.reason or ''}".strip() + (f": {message}" if message else "")


def _retry_after(exc: ApiException, attempt: int, rng: random.Random) -> float | None:
    """Seconds to wait before the next attempt, or None when the answer is final (client-go's
    rule: 429, or a 5xx, is worth retrying)."""
    if exc.status != 429 and not 500 <= (exc.status or 0) <= 599:
        return None
    header = (exc.headers or {}).get("Retry-After")
    try:
        if header is not None:
            return min(max(float(header), 0.0), MAX_RETRY_AFTER_S)
    except ValueError:
        pass
    return min(MAX_RETRY_AFTER_S, 0.25 * 2 ** (attempt - 1)) * rng.uniform(0.5, 1.0)


def create_pod(core: client.CoreV1Api, body: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], int]:
    """Create one pod with retries; returns (the pod as created, attempts). A 409 on a retry means
    an earlier attempt landed (its answer was lost): that pod is ours if it carries our labels."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            # A plain dict, serialised as is, and the raw answer: no model round trip per pod.
            response: Any = core.create_namespaced_pod(namespace, body, _preload_content=False)
            created: dict[str, Any] = json.loads(response.data)
            return created, attempt
        except ApiException as exc:
            if exc.status == 409 and attempt > 1:
                raw: Any = core.read_namespaced_pod(name, namespace, _preload_content=False)
                existing: dict[str, Any] = json.loads(raw.data)
                if (existing["metadata"].get("labels") or {}) == body["metadata"]["labels"]:
                    return existing, attempt
            wait = _retry_after(exc, attempt, rng)
            if wait is None or attempt == MAX_ATTEMPTS:
                raise Refused(_describe(exc)) from None
            time.sleep(wait)
        except (HTTPError, OSError) as exc:  # a dropped connection: the create may or may not have landed
            if attempt == MAX_ATTEMPTS:
                raise Refused(f"{type(exc).__name__}: {exc}"[:300]) from None
            time.sleep(min(MAX_RETRY_AFTER_S, 0.25 * 2 ** (attempt - 1)))
    raise AssertionError("unreachable")  # the loop returns or raises


# ------------------------------------------------------------------------------------------------ set-up


def register_nodes(api: client.ApiClient, plan: BurstPlan, *, workers: int = 16) -> list[str]:
    """Create the plan's Nodes with Ready conditions (the shape ``simulator.controlplane`` gives
    its fake nodes); the node agent keeps their Leases and runs what is bound to them."""
    core = client.CoreV1Api(api)

    def one(description: dict[str, Any]) -> str:
        obj, status, _ = normalise_node(description)
        name = str(obj["metadata"]["name"])
        try:
            core.create_node(obj, field_manager="kubelet", _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:
                raise
            core.patch_node(name, {"metadata": obj["metadata"]}, _content_type=STRATEGIC_PATCH,
                            _preload_content=False)  # fmt: skip
        core.patch_node_status(name, {"status": status}, field_manager="kubelet", _content_type=STRATEGIC_PATCH,
                               _preload_content=False)  # fmt: skip
        return name

    with cf.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, [n.description() for n in plan.nodes]))


def ensure_namespaces(api: client.ApiClient, plan: BurstPlan, *, timeout_s: float = 60.0) -> list[str]:
    """Create the tenants' namespaces if missing and wait for their ``default`` ServiceAccount
    (the ServiceAccount admission plugin refuses pods until it exists)."""
    core = client.CoreV1Api(api)
    names = plan.namespaces()
    for name in names:
        try:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            core.create_namespace(body, _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:
                raise
    deadline = time.monotonic() + timeout_s
    for name in names:
        while True:
            try:
                core.read_namespaced_service_account("default", name, _preload_content=False)
                break
            except ApiException as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    return names


def _plural(kind: str) -> str:
    """Kueue's resource names: lower-case kind, English plural (Topology -> topologies)."""
    lower = kind.lower()
    return lower[:-1] + "ies" if lower.endswith("y") else lower + ("es" if lower.endswith("s") else "s")


def apply_kueue_objects(api: client.ApiClient, plan: BurstPlan, *, field_manager: str = "gpufabric",
                        objects: Sequence[dict[str, Any]] | None = None) -> int:  # fmt: skip
    """Server-side apply the queues ``gpufabric publish`` would render for the plan's nodes and
    tenants (:meth:`BurstPlan.kueue_objects`), or ``objects`` (a variant of them), as its field
    manager. For a plane without a site pipeline; a test that has one publishes through the
    publisher itself."""
    custom = client.CustomObjectsApi(api)
    objects = plan.kueue_objects() if objects is None else objects
    for obj in objects:
        meta = obj["metadata"]
        plural = _plural(obj["kind"])
        options: dict[str, Any] = {"field_manager": field_manager, "force": True, "_content_type": APPLY_PATCH}
        if meta.get("namespace"):
            custom.patch_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, meta["namespace"], plural,
                                                  meta["name"], obj, **options)  # fmt: skip
        else:
            custom.patch_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, meta["name"], obj, **options)
    return len(objects)


def delete_burst(api: client.ApiClient, plan: BurstPlan) -> None:
    """Remove what a replay made: the burst's and the background's pods (grace period 0, one
    delete-collection per namespace) and the plan's nodes."""
    core = client.CoreV1Api(api)
    for namespace in plan.namespaces():
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                core.delete_collection_namespaced_pod(namespace, label_selector=ROLE_LABEL, grace_period_seconds=0,
                                                      _preload_content=False)  # fmt: skip
                break
            except ApiException as exc:
                if exc.status == 404:
                    break
                # 504 after the server's 60 s: thousands of pods in one namespace (seen at 1,000 burst
                # pods beside 5,493 background ones); what was deleted stays deleted, so go again.
                if not 500 <= (exc.status or 0) <= 599 or attempt == MAX_ATTEMPTS:
                    raise
                time.sleep(min(MAX_RETRY_AFTER_S, 0.25 * 2 ** (attempt - 1)))  # a 500/503 may clear
    for node in plan.nodes:
        try:
            core.delete_node(node.name, _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise


# ------------------------------------------------------------------------------------------------ load


def prefill(api: client.ApiClient, plan: BurstPlan, *, workers: int = DEFAULT_WORKERS,
            progress: Progress | None = None) -> ReplayReport:  # fmt: skip
    """Bind the background pods to their nodes, as fast as the pool goes (they were there before
    the burst: kube-scheduler counts a bound pod's requests against its node at once)."""
    core = client.CoreV1Api(api)
    report = ReplayReport(planned=len(plan.background))
    started = time.monotonic()
    lock = threading.Lock()
    rng = random.Random(plan.seed)

    def one(body: dict[str, Any]) -> None:
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        sent = datetime.now(UTC)
        try:
            pod, attempts = create_pod(core, body, rng)
        except Refused as exc:
            with lock:
                report.failures[key] = str(exc)
            return
        with lock:
            report.created[key] = Created(body["metadata"]["name"], body["metadata"]["namespace"],
                                          pod["metadata"]["uid"], pod["metadata"].get("creationTimestamp", ""),
                                          sent, 0.0, attempts)  # fmt: skip

    with cf.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(one, p.manifest(plan.prefix)) for p in plan.background]
        _drain(futures, report, started, progress, "background")
    report.elapsed_s = time.monotonic() - started
    return report


def replay(
    api: client.ApiClient,
    plan: BurstPlan,
    *,
    workers: int = DEFAULT_WORKERS,
    queues: bool = True,
    time_scale: float = 1.0,
    progress: Progress | None = None,
    progress_every_s: float = 5.0,
    pods: Sequence[BurstPod] | None = None,
    gate: str | None = None,
) -> ReplayReport:
    """Create the burst's pods at their planned instants (``offset_s`` x ``time_scale`` after the
    start), one create per pod from a pool of ``workers`` threads. ``queues`` puts each pod in its
    tenant's Kueue LocalQueue (with the tier's priority class); without it kube-scheduler alone
    places them. ``pods`` replays a subset (default: the whole plan). ``gate`` creates each pod with
    that scheduling gate (:data:`core.burst.GATE`: the burst admission controller releases it;
    use it with ``queues=False``, the controller replaces the queue)."""
    if time_scale <= 0:
        raise ValueError(f"time_scale must be positive, not {time_scale}")
    core = client.CoreV1Api(api)
    todo = sorted(plan.pods if pods is None else pods, key=lambda p: (p.offset_s, p.tree, p.depth))
    report = ReplayReport(planned=len(todo))
    lock = threading.Lock()
    done: dict[str, threading.Event] = {p.agent_id: threading.Event() for p in todo}
    landed: set[str] = set()
    by_id = {p.agent_id: p for p in todo}
    rng = random.Random(plan.seed)

    def one(pod: BurstPod, due: float) -> None:
        key = f"{pod.namespace}/{pod.name}"
        try:
            if pod.parent_id is not None and pod.parent_id in done:
                parent = by_id[pod.parent_id]
                if not done[pod.parent_id].wait(PARENT_WAIT_S):
                    raise Refused(f"parent {parent.name} not created after {PARENT_WAIT_S:.0f} s")
                if pod.parent_id not in landed:
                    raise Refused(f"parent {parent.name} was not created")
            sent_mono, sent = time.monotonic(), datetime.now(UTC)
            expires = (sent + timedelta(seconds=TTL_S)).strftime("%Y-%m-%dT%H:%M:%SZ")
            body = pod.manifest(plan.prefix, expires_at=expires, queues=queues)
            if gate is not None:
                body["spec"]["schedulingGates"] = [{"name": gate}]
            created, attempts = create_pod(core, body, rng)
            with lock:
                landed.add(pod.agent_id)
                report.created[key] = Created(pod.name, pod.namespace, created["metadata"]["uid"],
                                              created["metadata"].get("creationTimestamp", ""), sent,
                                              max(0.0, sent_mono - due), attempts)  # fmt: skip
        except Refused as exc:
            with lock:
                report.failures[key] = str(exc)
        finally:
            done[pod.agent_id].set()

    started = time.monotonic()
    report.started_at = datetime.now(UTC)
    last_report = started
    futures: list[cf.Future[None]] = []
    with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="orchestrator") as pool:
        for pod in todo:
            due = started + pod.offset_s * time_scale
            while (wait := due - time.monotonic()) > 0:
                time.sleep(min(wait, progress_every_s))
                last_report = _maybe_progress(report, lock, started, last_report, progress, progress_every_s,
                                              plan.window_s * time_scale)  # fmt: skip
            futures.append(pool.submit(one, pod, due))
            last_report = _maybe_progress(report, lock, started, last_report, progress, progress_every_s,
                                          plan.window_s * time_scale)  # fmt: skip
        _drain(futures, report, started, progress, "burst", progress_every_s)
    report.elapsed_s = time.monotonic() - started
    if progress is not None:
        progress(f"burst: {report.summary()}")
    return report


def _maybe_progress(report: ReplayReport, lock: threading.Lock, started: float, last: float,
                    progress: Progress | None, every_s: float, window_s: float) -> float:  # fmt: skip
    now = time.monotonic()
    if progress is None or now - last < every_s:
        return last
    with lock:
        created, failed = len(report.created), len(report.failures)
    progress(f"burst: {created:,}/{report.planned:,} pods created ({failed:,} failed), "
             f"{now - started:.0f} s into the {window_s:.0f} s window")  # fmt: skip
    return now


def _drain(futures: Sequence[cf.Future[None]], report: ReplayReport, started: float, progress: Progress | None,
           what: str, every_s: float = 5.0) -> None:  # fmt: skip
    pending = set(futures)
    while pending:
        finished, pending = cf.wait(pending, timeout=every_s)
        for future in finished:
            future.result()  # an unexpected exception in a worker is a bug: raise it here
        if pending and progress is not None:
            progress(f"{what}: {len(report.created):,}/{report.planned:,} created, {len(pending):,} in flight, "
                     f"{time.monotonic() - started:.0f} s")  # fmt: skip


# ------------------------------------------------------------------------------------------------ CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator.agents.burst_driver", description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True, help='e.g. "$(gpufabric sim kubeconfig)"')
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--trees", type=int, default=2_000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--window", type=float, default=120.0, help="seconds the creations are spread over")
    parser.add_argument("--nodes", type=int, default=1_024)
    parser.add_argument("--busy", type=float, default=0.70, help="share of GPUs held by the background")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument(
        "--queues",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="apply the queues publish renders and put each pod in its tenant's LocalQueue",
    )
    parser.add_argument(
        "--gate",
        action="store_true",
        help=f"create the pods with the scheduling gate {GATE} (for the burst admission "
        "controller; implies --no-queues)",
    )
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--node-prefix", default="burst")
    parser.add_argument("--tenant-suffix", default="", help="appended to every tenant id (and namespace)")
    parser.add_argument("--delete", action="store_true", help="remove a previous run's pods and nodes, then exit")
    args = parser.parse_args(argv)
    if args.gate:
        args.queues = False
    say = lambda message: print(message, flush=True)  # noqa: E731 - progress goes to stdout as it happens
    plan = plan_burst(seed=args.seed, trees=args.trees, pods=args.pods, window_s=args.window, nodes=args.nodes,
                      busy_fraction=args.busy, node_prefix=args.node_prefix,
                      tenant_suffix=args.tenant_suffix)  # fmt: skip
    api = kube_client(args.kubeconfig, pool=args.workers)
    try:
        if args.delete:
            delete_burst(api, plan)
            say(f"deleted the pods of {', '.join(plan.namespaces())} and {len(plan.nodes):,} nodes")
            return 0
        (free_whole, free_mig), (peak_whole, peak_mig) = plan.free(), plan.peak_demand()
        say(f"plan: {len(plan.pods):,} pods in {args.trees:,} trees over {plan.window_s:.0f} s on {len(plan.nodes):,} "
            f"nodes, {float(plan.busy_fraction()):.0%} busy; free {free_whole:,} GPUs + {free_mig:,} MIG slices, "
            f"peak demand {peak_whole:,} + {peak_mig:,}")  # fmt: skip
        say(f"nodes: {len(register_nodes(api, plan)):,} registered")
        ensure_namespaces(api, plan)
        if args.queues:
            say(f"queues: {apply_kueue_objects(api, plan)} Kueue objects applied")
        background = prefill(api, plan, workers=args.workers, progress=say)
        say(f"background: {background.summary()}")
        report = replay(api, plan, workers=args.workers, queues=args.queues, time_scale=args.time_scale, progress=say,
                        gate=GATE if args.gate else None)  # fmt: skip
        for key, reason in sorted(report.failures.items())[:20]:
            say(f"  failed {key}: {reason}")
        return 0 if report.ok and background.ok else 1
    finally:
        api.close()


if __name__ == "__main__":
    sys.exit(main())
