"""The burst (issue 20, part 5, quick form): stock placement against the burst admission controller.

The same planned burst (``simulator.agents.burst.plan_burst``, one seed) replayed on the bench's own
real control plane (``simulator.controlplane.up``: etcd, kube-apiserver, kube-scheduler, Kueue and
the node agent), emptied before each run, by three contenders:

* ``kueue``: the stock path as gpufabric publishes it, every pod in its tenant's LocalQueue
  (Kueue's pod integration gates it until its Workload is admitted, then kube-scheduler places it);
* ``scheduler``: no queue, no gate, every pod straight to kube-scheduler (its defaults);
* ``gpufabric``: every pod created with the ``gpufabric.io/burst-admission`` gate, no queue, and
  ``controllers.burst_admission`` (in-process, Lease-elected) releasing what fits;
* ``kueue-flat`` (only when named in ``--contenders``): the queues as published but the
  ResourceFlavor without its ``topologyName`` (no topology-aware placement: Kueue reserves quota
  and kube-scheduler picks the node), to tell Kueue's quota path from its placement path;
* ``gpufabric-headroom`` (only when named): ``gpufabric`` plus warm headroom
  (``controllers/burst_headroom.py``): placeholder pods sized by the forecast
  (``core/burst_headroom.py``) over a **modelled** history, last week's bursts (the same plan
  with seeds seed+1 .. seed+7, one a day), capped at 5% of the GPUs, created before the burst and
  preempted by it. Printed: GPUs held, their cost a day from the rate cards, placeholders preempted.

Every run meets the same cluster: the fake nodes and the bound background (``Stage``) are set up
once per bench and kept, and a run's clean-up deletes only its own tenants' namespaces and
ClusterQueues and waits for them to go (at 1,024 nodes the background is 5,493 bound pods; setting
it up again per run, and deleting it with the burst, cost minutes per run and loaded the API
server beside the next run). One observer measures them the same way: the lag watch
(``connectors.kube.lag.watch_lag``: the API server's own stamps, whole seconds) from creation to
Running per pod, over the whole run. A run ends when every burst pod has run, or ``--settle``
seconds after the last create (the pods left are reported as never running). Rounds rotate the
contenders' order (``bench.common``).

Printed per contender: p50/p99/max creation-to-Running lag (and p50/p99 per tier), time from the
first create until the last pod runs, pods never running; GPUs held as headroom, their cost a day
and the placeholders preempted; and ratios against each stock row from the same rounds. With
``--metrics`` (the default), per run also the causes' evidence: kube-scheduler's, Kueue's and
kube-apiserver's own metrics per phase (setup, burst, drain; ``bench.burst_metrics``) and the
Events in the burst's namespaces by reason.
``--sizes 1000,5000`` runs each burst size in turn and prints the lag-growth table.
"""

from __future__ import annotations

import argparse
import copy
import math
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from bench.burst_metrics import Scraper, Target, event_reasons, phase_table, plane_targets
from bench.common import Spread, ratio_line, rotation, usd_per_gpu_hour
from core import quantiles

P = "gpufabric.io"
CONTENDERS = ("kueue", "scheduler", "gpufabric")
OPTIONAL = ("kueue-flat", "gpufabric-headroom")
GATED = ("gpufabric", "gpufabric-headroom")
QUEUED = ("kueue", "kueue-flat")
TIERS = ("interactive", "standard", "batch")


@dataclass
class Outcome:
    lags: list[float] = field(default_factory=list)  # creation -> Running, seconds, pods that ran
    by_tier: dict[str, list[float]] = field(default_factory=dict)
    last_running_s: float = math.nan  # first create -> last pod Running
    never: int = 0  # burst pods that never ran
    planned: int = 0
    released: int = 0  # gates removed by the controller (gpufabric only)
    scheduled: list[float] = field(default_factory=list)  # creation -> PodScheduled, pods that got there
    admitted: list[float] = field(default_factory=list)  # creation -> Kueue Admitted (kueue only)
    replay: str = ""  # the driver's report: created, retried, how far behind the plan
    headroom_gpus: float = 0.0  # GPUs the placeholders held when the burst started
    headroom_usd_day: float = 0.0  # what holding them costs a day at the rate cards
    preempted: int = 0  # placeholders kube-scheduler preempted for burst pods
    metrics: list[str] = field(default_factory=list)  # the per-phase table of the components' metrics
    events: dict[tuple[str, str], int] = field(default_factory=dict)  # (component, reason) -> repeats

    def pct(self, q: float, tier: str | None = None) -> float:
        """The nearest-rank percentile (the value of a pod that ran, never interpolated)."""
        return nearest_rank(self.lags if tier is None else self.by_tier.get(tier, []), q)


def nearest_rank(values: list[float], q: float) -> float:
    """``core.quantiles.nearest_rank``, NaN for no values (a contender none of whose pods ran)."""
    return quantiles.nearest_rank(values, q) if values else math.nan


@dataclass(frozen=True)
class Stage:
    """The cluster every run of one bench shares: the plan's fake nodes (``node_prefix``) and the
    bound background in namespaces of its own, set up once and kept between runs."""

    node_prefix: str
    nodes: int
    background: int
    seconds: float
    namespaces: frozenset[str] = frozenset()  # the background's: kept by every clean-up


def set_stage(args: argparse.Namespace, plane: Any) -> Stage:
    """Register the nodes and bind the background (``plan_burst`` draws both from the seed before
    anything else, so every run's plan names the same nodes and the same bound pods)."""
    from simulator.agents.burst import plan_burst
    from simulator.agents.burst_driver import ensure_namespaces, kube_client, prefill, register_nodes

    tag = uuid.uuid4().hex[:5]
    plan = plan_burst(seed=args.seed, trees=1, pods=1, nodes=args.nodes, busy_fraction=args.busy,
                      tenant_suffix=f"-bg{tag}", node_prefix=f"b{tag}")  # fmt: skip
    api = kube_client(plane.kubeconfig, pool=32)
    started = time.monotonic()
    try:
        register_nodes(api, plan)
        ensure_namespaces(api, plan)
        background = prefill(api, plan, workers=32)
        if not background.ok:
            raise RuntimeError(f"background: {background.summary()}")
    finally:
        api.close()
    stage = Stage(f"b{tag}", len(plan.nodes), len(plan.background), time.monotonic() - started,
                  frozenset(plan.namespaces()))
    print(f"stage: {stage.nodes:,} nodes and {stage.background:,} bound background pods set up in "
          f"{stage.seconds:.0f} s, kept for every run", flush=True)  # fmt: skip
    return stage


def clear_run(api: Any, plan: Any, extra_namespaces: Sequence[str] = ()) -> None:
    """Start deleting one run's tenants: their namespaces (so its burst pods) and ClusterQueues.
    The next run waits for them to go (:func:`wait_cleared`); the last run's go with the plane."""
    import urllib3
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from simulator.agents.burst_driver import KUEUE_GROUP, KUEUE_VERSION

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for namespace in [*plan.namespaces(), *extra_namespaces]:
        try:
            core.delete_namespace(namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise
        # One delete-collection each for its Workloads and pods: the namespace controller took
        # over 15 minutes for 10,000 of each here; these take seconds. A timeout only means the
        # server is still at it (the next run waits for the namespace to go).
        for delete in (partial(custom.delete_collection_namespaced_custom_object, KUEUE_GROUP, KUEUE_VERSION,
                               namespace, "workloads"),
                       partial(core.delete_collection_namespaced_pod, namespace, grace_period_seconds=0)):  # fmt: skip
            try:
                delete(_request_timeout=120, _preload_content=False)
            except ApiException as exc:
                if exc.status not in (404, 500, 504):
                    raise
            except urllib3.exceptions.HTTPError as exc:
                print(f"    clean-up of {namespace}: {exc}", flush=True)
    for obj in plan.kueue_objects():
        if obj["kind"] == "ClusterQueue":
            try:
                name = obj["metadata"]["name"]
                custom.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def wait_cleared(api: Any, keep: set[str], timeout_s: float = 900.0) -> float:
    """Wait until every namespace but the plane's and ``keep`` (the stage's) and every ClusterQueue
    is gone; seconds waited. Thousands of pods being deleted beside a run would load the API server
    and the scheduler's informers during it. Finalizers are lifted as an operator tearing a test
    cluster down would: Kueue's on its pods and Workloads (its controllers take many minutes for
    10,000 of them) and on ClusterQueues (it keeps them while it still counts workloads)."""
    import concurrent.futures as cf

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from simulator.agents.burst_driver import KUEUE_GROUP, KUEUE_VERSION
    from simulator.controlplane.reset import SYSTEM_NAMESPACES

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    started = time.monotonic()

    def unblock(call: Any) -> None:
        try:
            call()
        except ApiException as exc:
            if exc.status not in (404, 409, 422):
                raise

    with cf.ThreadPoolExecutor(max_workers=16) as pool:
        while True:
            left = [ns.metadata.name for ns in core.list_namespace().items
                    if ns.metadata.name not in SYSTEM_NAMESPACES | keep]  # fmt: skip
            queues = custom.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues")["items"]
            if not left and not queues:
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"clean-up: namespaces {sorted(left)[:4]} and {len(queues)} ClusterQueues still "
                                   f"there after {timeout_s:.0f} s")  # fmt: skip
            stuck = [(p.metadata.name, p.metadata.namespace) for ns in left
                     for p in core.list_namespaced_pod(ns).items
                     if p.metadata.deletion_timestamp and p.metadata.finalizers]  # fmt: skip
            lift = {"metadata": {"finalizers": None}}
            calls: list[Callable[[], Any]] = [
                partial(core.patch_namespaced_pod, name, namespace, lift, _preload_content=False)
                for name, namespace in stuck
            ]
            workloads = custom.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "workloads")["items"]
            calls += [partial(custom.patch_namespaced_custom_object, KUEUE_GROUP, KUEUE_VERSION,
                              w["metadata"]["namespace"], "workloads", w["metadata"]["name"], lift)
                      for w in workloads if w["metadata"]["namespace"] in left and w["metadata"].get("finalizers")]
            calls += [partial(custom.patch_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, "clusterqueues",
                              q["metadata"]["name"], lift)
                      for q in queues if q["metadata"].get("deletionTimestamp") and not left]  # fmt: skip
            list(pool.map(unblock, calls))
            time.sleep(1.0)


def without_topology(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The published Kueue objects with no topology-aware placement: no Topology, and each
    ResourceFlavor without ``topologyName`` under a name of its own (``-flat``; a flavor's
    topology cannot be taken away in place), the ClusterQueues pointing at it."""
    flat: list[dict[str, Any]] = []
    for obj in objects:
        obj = copy.deepcopy(obj)
        if obj["kind"] == "Topology":
            continue
        if obj["kind"] == "ResourceFlavor":
            obj["metadata"]["name"] += "-flat"
            obj["spec"].pop("topologyName", None)
        if obj["kind"] == "ClusterQueue":
            for group in obj["spec"]["resourceGroups"]:
                for flavor in group["flavors"]:
                    flavor["name"] += "-flat"
        flat.append(obj)
    return flat


def headroom_for(args: argparse.Namespace, plan: Any) -> dict[str, int]:
    """Placeholders to keep: the forecast over a modelled week of bursts (the same plan with seeds
    seed+1 .. seed+7, one a day at 09:00 UTC), capped at 5% of the plan's GPUs."""
    from core.burst_headroom import DemandSample, HeadroomPolicy, capped, forecast
    from simulator.agents.burst import plan_burst

    samples = []
    base = datetime(2026, 11, 23, 9, tzinfo=UTC)
    for day in range(7):
        past = plan_burst(seed=args.seed + 1 + day, trees=args.trees, pods=args.pods, window_s=args.window,
                          nodes=args.nodes, busy_fraction=args.busy)  # fmt: skip
        samples += [DemandSample(base + timedelta(days=day, seconds=p.offset_s), p.agent_type, p.tier,
                                 {r: int(n) for r, n in p.requests.items()}) for p in past.pods]  # fmt: skip
    whole, slices = plan.capacity()
    policy = HeadroomPolicy()
    week = forecast(samples, policy)
    desired = capped(week, whole + slices / 7, policy)
    print(f"    headroom: forecast over a modelled week {week.units()}, held {desired} "
          f"(at most {policy.max_fraction:.0%} of {whole + slices / 7:,.0f} GPUs)", flush=True)  # fmt: skip
    return desired


def warm_up(api: Any, headroom: Any, desired: dict[str, int], timeout_s: float = 300.0) -> None:
    """Wait until the placeholders stand (the controller creates them before any burst pod exists),
    creating the PriorityClass ``deploy/burst/burst-admission.yaml`` ships if the plane lacks it."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from simulator.controlplane.identity import manifest_documents

    priority = next(d for d in manifest_documents() if d["kind"] == "PriorityClass")
    try:
        client.SchedulingV1Api(api).create_priority_class(priority)
    except ApiException as exc:
        if exc.status != 409:
            raise
    client.CoreV1Api(api).create_namespace({"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": headroom.namespace}})  # fmt: skip
    deadline, started = time.monotonic() + timeout_s, time.monotonic()
    while sum(headroom.live.values()) < sum(desired.values()) and time.monotonic() < deadline:
        time.sleep(1.0)
    print(f"    headroom: {headroom.live} placeholders standing after {time.monotonic() - started:.0f} s "
          f"(desired {desired})", flush=True)  # fmt: skip


def run_once(contender: str, args: argparse.Namespace, plane: Any, stage: Stage,
             targets: list[Target] | None = None) -> Outcome:  # fmt: skip
    from kubernetes import client

    from connectors.kube.lag import watch_lag
    from controllers.burst_admission import BurstAdmission, LeaderElector
    from controllers.burst_headroom import Headroom
    from core.burst import GATE
    from core.burst_headroom import gpus_of
    from simulator.agents.burst import ROLE_LABEL, plan_burst
    from simulator.agents.burst_driver import apply_kueue_objects, ensure_namespaces, kube_client, replay
    from simulator.agents.week import H100

    tag = uuid.uuid4().hex[:5]
    plan = plan_burst(seed=args.seed, trees=args.trees, pods=args.pods, window_s=args.window, nodes=args.nodes,
                      busy_fraction=args.busy, duration_scale=args.duration_scale, tenant_suffix=f"-{tag}",
                      node_prefix=stage.node_prefix)  # fmt: skip
    api = kube_client(plane.kubeconfig, pool=32)
    waited = wait_cleared(api, set(stage.namespaces))
    if waited > 1:
        print(f"    (the previous run's tenants took {waited:.0f} s to go)", flush=True)
    loop: BurstAdmission | None = None
    thread: threading.Thread | None = None
    stop = threading.Event()
    out: dict[str, Any] = {}
    scraper = Scraper(targets, every_s=args.scrape_every).start() if targets else None
    try:
        if scraper is not None:
            scraper.mark("setup")
        ensure_namespaces(api, plan)
        if contender == "kueue":
            apply_kueue_objects(api, plan)
        elif contender == "kueue-flat":
            apply_kueue_objects(api, plan, objects=without_topology(plan.kueue_objects()))
        headroom: Headroom | None = None
        if contender == "gpufabric-headroom":
            desired = headroom_for(args, plan)
            headroom = Headroom(api, lambda _gpus: desired, namespace=f"headroom-{tag}")
        if contender in GATED:
            # its own client, as a controller of its own would have: the driver's 32 threads hold
            # the bench's connections during the burst
            own = kube_client(plane.kubeconfig, pool=72)
            elector = LeaderElector(own, "default", name=f"bench-burst-{tag}", lease_duration_s=5, renew_deadline_s=4)
            loop = BurstAdmission(own, elector, period_s=0.5, max_release=args.max_release, headroom=headroom,
                                  workers=64)  # fmt: skip
            thread = threading.Thread(target=loop.run, daemon=True)
            thread.start()
        if headroom is not None:
            warm_up(api, headroom, desired)
            held = headroom.live
            outcome_headroom = (float(gpus_of(held)), float(gpus_of(held)) * 24 * float(usd_per_gpu_hour(H100)))
        since = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        watcher = threading.Thread(target=lambda: out.setdefault("lag", watch_lag(
            api, cluster="bench", seconds=3600, since=since, prefix=P, stop=stop)), daemon=True)  # fmt: skip
        watcher.start()
        if scraper is not None:
            scraper.mark("burst")
        report = replay(api, plan, workers=32, queues=contender in QUEUED, time_scale=1.0,
                        gate=GATE if contender in GATED else None)  # fmt: skip
        if report.failures:
            raise RuntimeError(f"replay: {report.summary()}; e.g. {next(iter(report.failures.items()))}")
        if scraper is not None:
            scraper.mark("drain")
        core = client.CoreV1Api(api)
        deadline = time.monotonic() + args.settle

        def ran() -> int:
            count = 0
            for namespace in plan.namespaces():
                for pod in core.list_namespaced_pod(namespace, label_selector=f"{ROLE_LABEL}=burst").items:
                    if pod.status and pod.status.phase in ("Running", "Succeeded", "Failed"):
                        count += 1
            return count

        poll_s = max(1.0, len(plan.pods) / 2_000)  # a full list of the burst's pods costs the API server too
        count, progressed = ran(), time.monotonic()
        # Also ends when no pod has started for --idle seconds: agents end every few tens of seconds,
        # so a burst that stops progressing that long is stuck (Kueue's MIG pods: observation 1).
        while count < len(plan.pods) and time.monotonic() < deadline and time.monotonic() - progressed < args.idle:
            time.sleep(poll_s)
            now = ran()
            if now > count:
                count, progressed = now, time.monotonic()
        time.sleep(2.0)  # the watch's last events
        phases = scraper.stop() if scraper is not None else []
        stop.set()
        watcher.join(60)
        lag = out.get("lag")
        if lag is None:
            raise RuntimeError("the lag watch did not return")
        burst = [r for r in lag.pods.records if r.labels.get(ROLE_LABEL) == "burst"]
        if not burst:
            raise RuntimeError(f"the lag watch saw none of the {len(plan.pods)} burst pods the driver created")
        first = min(r.created_at for r in burst)
        ran_at = [r for r in burst if r.running_at is not None]
        outcome = Outcome(planned=len(plan.pods))
        outcome.lags = [(r.running_at - r.created_at).total_seconds() for r in ran_at]
        for r in ran_at:
            outcome.by_tier.setdefault(r.labels.get(f"{P}/tier", "?"), []).append(
                (r.running_at - r.created_at).total_seconds()
            )
        outcome.never = len(plan.pods) - len(ran_at)
        if ran_at:
            outcome.last_running_s = (max(r.running_at for r in ran_at) - first).total_seconds()
        outcome.released = loop.released_total if loop is not None else 0
        if headroom is not None:
            outcome.headroom_gpus, outcome.headroom_usd_day = outcome_headroom
            outcome.preempted = headroom.preempted
        outcome.scheduled = [(r.scheduled_at - r.created_at).total_seconds() for r in burst if r.scheduled_at]
        outcome.admitted = [(r.admitted_at - r.created_at).total_seconds() for r in burst if r.admitted_at]
        outcome.replay = report.summary()
        if scraper is not None:
            outcome.metrics = phase_table(scraper.snapshots, phases)
            outcome.events = event_reasons(api, plan.namespaces())
        return outcome
    finally:
        stop.set()
        if scraper is not None:
            scraper.stop()
        if loop is not None and thread is not None:
            loop.stop()
            thread.join(30)
            loop.api.close()
        try:
            clear_run(api, plan, extra_namespaces=[f"headroom-{tag}"] if contender == "gpufabric-headroom" else [])
        finally:
            api.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_burst")
    parser.add_argument("--quick", action="store_true", help="the small burst, 2 rounds")
    parser.add_argument("--rounds", type=int, default=None, help="default 2 (--quick) or 1 (at size)")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--trees", type=int, default=None, help="default: pods / 5")
    parser.add_argument("--pods", type=int, default=None)
    parser.add_argument(
        "--sizes",
        default=None,
        help="comma-separated burst sizes (pods), e.g. 1000,5000,10000: each size is a row of "
        "the lag-growth table; trees = pods / 5",
    )
    parser.add_argument("--window", type=float, default=None, help="seconds the creations are spread over")
    parser.add_argument("--busy", type=float, default=0.70, help="share of GPUs the background holds")
    parser.add_argument("--duration-scale", type=float, default=0.5, help="agents' run time x this")
    parser.add_argument("--settle", type=float, default=None, help="seconds after the last create to wait")
    parser.add_argument(
        "--idle",
        type=float,
        default=90.0,
        help="end a run when no further pod has started running for this many seconds",
    )
    parser.add_argument("--max-release", type=int, default=500)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument(
        "--metrics",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="scrape kube-scheduler, Kueue and kube-apiserver /metrics and print a table per phase",
    )
    parser.add_argument("--scrape-every", type=float, default=3.0, help="seconds between scrapes")
    parser.add_argument(
        "--scheduler-qps",
        type=int,
        default=None,
        help="kube-scheduler's API client QPS (burst twice that); default: its own 50 / 100",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    args.nodes = args.nodes or (16 if quick else 1_024)
    args.window = args.window or (15.0 if quick else 120.0)
    args.settle = args.settle or (120.0 if quick else 300.0)
    rounds = args.rounds or (2 if quick else 1)
    try:
        sizes = _sizes(args.sizes) if args.sizes is not None else [args.pods or (200 if quick else 10_000)]
    except ValueError as exc:
        print(f"--sizes: {exc}")
        return 2
    if args.sizes is not None and args.pods is not None:
        print("--pods and --sizes both name the burst size: give one")
        return 2
    if len(sizes) > 1 and args.trees is not None:
        print("--trees applies to one burst size; with several --sizes each size has pods / 5 trees")
        return 2
    contenders = [c for c in args.contenders.split(",") if c]
    unknown = set(contenders) - set(CONTENDERS) - set(OPTIONAL)
    if unknown:
        print(f"unknown contenders {sorted(unknown)}; known: {', '.join(CONTENDERS + OPTIONAL)}")
        return 2

    from simulator.agents.burst import plan_burst
    from simulator.controlplane import down, up

    workdir = Path(tempfile.mkdtemp(prefix="bench-burst-"))
    plane = up(workdir, scheduler_qps=args.scheduler_qps)
    if args.scheduler_qps is not None:
        print(f"kube-scheduler's client: {args.scheduler_qps} QPS, burst {2 * args.scheduler_qps} (not its default "
              "50 / 100)", flush=True)  # fmt: skip
    results: dict[int, dict[str, list[Outcome]]] = {}
    failed = False
    try:
        targets = plane_targets(plane) if args.metrics else None
        stage = set_stage(args, plane)
        for size in sizes:
            args.pods = size
            args.trees = args.trees if len(sizes) == 1 and args.trees else max(1, size // 5)
            sample = plan_burst(seed=args.seed, trees=args.trees, pods=args.pods, window_s=args.window,
                                nodes=args.nodes, busy_fraction=args.busy,
                                duration_scale=args.duration_scale)  # fmt: skip
            (free_whole, free_mig), (peak_whole, peak_mig) = sample.free(), sample.peak_demand()
            print(f"burst: {args.pods} pods in {args.trees} trees over {args.window:.0f} s on {args.nodes} fake 8-GPU "
                  f"nodes (every 4th MIG 1g.10gb), {args.busy:.0%} busy ({len(sample.background)} bound pods): free "
                  f"{free_whole} GPUs + {free_mig} slices, peak demand {peak_whole} + {peak_mig}; agents run "
                  f"x{args.duration_scale}; kube-apiserver {plane.kubernetes_version}, Kueue {plane.kueue_version}; "
                  f"{rounds} round(s), order rotating", flush=True)  # fmt: skip
            results[size] = {c: [] for c in contenders}
            for k in range(rounds):
                for contender in rotation(contenders, k):
                    o = run_once(contender, args, plane, stage, targets)
                    results[size][contender].append(o)
                    _print_run(k, contender, o)
                    failed |= contender in GATED and o.never > 0
            _print_summary(results[size], contenders)
            if len(sizes) > 1:  # after every size, so a run stopped at the next one keeps these rows
                _print_growth(results, contenders)
    finally:
        down(workdir)
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


def _sizes(text: str) -> list[int]:
    """``1000,5000`` -> [1000, 5000]; anything but positive whole numbers is refused by value."""
    sizes: list[int] = []
    for part in text.split(","):
        value = part.strip().replace("_", "")
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"burst sizes are positive whole numbers of pods, comma-separated; not {part.strip()!r}")
        sizes.append(int(value))
    return sizes


def med(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return statistics.median(finite) if finite else math.nan


def _print_run(k: int, contender: str, o: Outcome) -> None:
    print(f"  round {k + 1} {contender:18s}: lag p50 {o.pct(0.5):5.0f} s, p99 {o.pct(0.99):5.0f} s, "
          f"max {o.pct(1.0):5.0f} s; last pod running after {o.last_running_s:6.1f} s; "
          f"never running {o.never}/{o.planned}"
          + (f"; {o.released} gates removed" if contender in GATED else "")
          + (f"; headroom {o.headroom_gpus:,.1f} GPUs (${o.headroom_usd_day:,.0f}/day), {o.preempted} placeholders "
             "preempted" if contender == "gpufabric-headroom" else ""), flush=True)  # fmt: skip

    def three(values: list[float]) -> str:
        return "/".join(f"{nearest_rank(values, q):.0f}" for q in (0.5, 0.99, 1.0))

    print(
        f"    creation -> PodScheduled p50/p99/max {three(o.scheduled)} s over {len(o.scheduled)} pods"
        + (f"; -> Kueue Admitted {three(o.admitted)} s over {len(o.admitted)}" if o.admitted else ""),
        flush=True,
    )
    print(f"    driver: {o.replay}", flush=True)
    for line in o.metrics:
        print(line, flush=True)
    if o.events:
        top = sorted(o.events.items(), key=lambda kv: -kv[1])[:8]
        print("    events (component/reason x repeats): " + ", ".join(f"{c}/{r} x{n:,}" for (c, r), n in top),
              flush=True)  # fmt: skip


def _print_summary(results: dict[str, list[Outcome]], contenders: list[str]) -> None:
    print(f"  {'':18s}  {'p50 s':>6s} {'p99 s':>6s} {'max s':>6s} {'last running s':>15s} {'never running':>14s} "
          f"{'headroom GPUs':>14s} {'headroom $/day':>15s} {'preempted':>10s}")  # fmt: skip
    for c in contenders:
        rs = results[c]
        print(f"  {c:18s}  {med([o.pct(0.5) for o in rs]):6.0f} {med([o.pct(0.99) for o in rs]):6.0f} "
              f"{med([o.pct(1.0) for o in rs]):6.0f} {med([o.last_running_s for o in rs]):15.1f} "
              f"{statistics.median([o.never for o in rs]):14.0f} {med([o.headroom_gpus for o in rs]):14.1f} "
              f"{med([o.headroom_usd_day for o in rs]):15,.0f} {med([o.preempted for o in rs]):10.0f}")  # fmt: skip
    for tier in TIERS:
        cells = ", ".join(f"{c} {med([o.pct(0.5, tier) for o in results[c]]):.0f}/"
                          f"{med([o.pct(0.99, tier) for o in results[c]]):.0f}" for c in contenders)  # fmt: skip
        print(f"  {tier:11s} p50/p99 s: {cells}")
    print("  (medians over the rounds; lags in whole seconds as the API server stamps them; headroom: placeholder "
          "pods standing when the burst started, only gpufabric-headroom keeps any)")  # fmt: skip
    if "gpufabric" in results:
        ours = [o.last_running_s for o in results["gpufabric"]]
        finite = [v for v in ours if not math.isnan(v)]
        if finite:
            print(f"  gpufabric first create -> last pod running: {Spread.of(finite).fmt('.1f', ' s')}")
        for peer in (c for c in contenders if c != "gpufabric"):
            theirs = [o.last_running_s for o in results[peer]]
            if all(not math.isnan(v) for v in ours + theirs):
                print(f"  {ratio_line(f'gpufabric / {peer}, first create -> last pod running', ours, theirs)}")
            else:
                print(f"  ratio gpufabric / {peer}: not defined (a run had no pod running)")
            if any(o.never for o in results[peer]):  # the peer's figures cover only the pods that ran
                print(f"  ({peer}: {statistics.median([o.never for o in results[peer]]):.0f} pods never ran; its "
                      "lag and last-running figures are over the pods that did)")  # fmt: skip
            p99 = [o.pct(0.99) for o in results["gpufabric"]], [o.pct(0.99) for o in results[peer]]
            if all(v > 0 and not math.isnan(v) for v in p99[1]) and all(not math.isnan(v) for v in p99[0]):
                print(f"  {ratio_line(f'gpufabric / {peer}, p99 lag', *p99)}")


def _print_growth(results: dict[int, dict[str, list[Outcome]]], contenders: list[str]) -> None:
    """Lag against burst size: one row per size and contender (medians over the rounds)."""
    print("  lag growth with burst size (creation -> Running, medians over the rounds):")
    print(f"  {'pods':>7s} {'contender':18s} {'p50 s':>6s} {'p99 s':>6s} {'max s':>6s} {'last running s':>15s} "
          f"{'never running':>14s}")  # fmt: skip
    for size, by in results.items():
        for c in contenders:
            rs = by[c]
            print(f"  {size:7,d} {c:18s} {med([o.pct(0.5) for o in rs]):6.0f} {med([o.pct(0.99) for o in rs]):6.0f} "
                  f"{med([o.pct(1.0) for o in rs]):6.0f} {med([o.last_running_s for o in rs]):15.1f} "
                  f"{statistics.median([o.never for o in rs]):14.0f}")  # fmt: skip


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
