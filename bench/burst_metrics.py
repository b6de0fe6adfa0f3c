"""The components' own metrics during a burst (issue 20, part 3): scrape, keep, summarise per phase.

What the burst benchmark reads, and from where (all on the bench plane's loopback ports):

- **kube-scheduler** ``/metrics`` on its secure port: pending pods per queue (active, backoff,
  unschedulable, gated), attempts by result, attempt duration, pods entering its queues by the
  cluster event that moved them, and client-go's own rate-limiter wait (the scheduler's API client
  runs at its default 50 QPS / 100 burst). It authenticates the admin's client certificate
  (delegated authentication) and authorises ``/metrics`` by SubjectAccessReview; its serving
  certificate is self-signed in its ``--cert-dir``, so the scrape does not verify it (loopback).
- **Kueue** ``/metrics`` (controller-runtime's secure metrics server): pending workloads by status,
  admission attempts by result and their duration, preemption skips, ClusterQueue status, quota
  reservations and admissions. Its filter takes **bearer tokens only** (TokenReview, then
  SubjectAccessReview for ``get /metrics``), so :func:`kueue_token` makes a ServiceAccount with
  exactly that non-resource permission and asks the API server for a token (TokenRequest).
- **kube-apiserver** ``/metrics``: request latency by verb and resource, answers by code (429 is
  throttling), API Priority and Fairness (on by default) queueing, waits and rejections.
- **work queues** (``workqueue_*``, served by Kueue's controller-runtime and kube-scheduler's
  client-go alike, told apart by ``target``): per queue the peak depth and the p99 time an item
  waited in the queue before a worker took it (:func:`work_queues`).

Every series is cut down to the labels :data:`KEEP` names (the rest summed) at parse time, so the
apiserver's tens of thousands of series cost a dict of a few hundred entries per scrape; a scrape
adds the label ``target`` (the component that served it: client-go's ``rest_client_*`` families
come from several). The phase summary (:func:`phase_table`) is pure: gauges as their peak in the
phase, counters as their increase (from the last scrape before the phase); a labelled series the
component has not created yet (it does so at its first use) is 0 where that component answered,
and no figure ("-") where it did not; histograms as mean and interpolated quantile of the
phase's own observations (Prometheus' ``histogram_quantile`` rule: a p99 inside the lowest
bucket reads as 99% of its bound, e.g. 4.95 ms for "all under 5 ms"); then which cluster events
moved pods into kube-scheduler's queues, and who got 429s.
"""

from __future__ import annotations

import json
import math
import ssl
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]
Series = tuple[str, Labels]  # (sample name, kept labels sorted)
TARGET = "target"  # the label :func:`scrape` adds to every series: the component that served it

# metric family -> the labels kept (others summed away). Histograms keep "le" to keep buckets.
KEEP: dict[str, tuple[str, ...]] = {
    "scheduler_pending_pods": ("queue",),
    "scheduler_schedule_attempts_total": ("result",),
    "scheduler_scheduling_attempt_duration_seconds": ("result", "le"),
    "scheduler_queue_incoming_pods_total": ("event", "queue"),
    "scheduler_unschedulable_pods": ("plugin",),
    "scheduler_pod_scheduling_sli_duration_seconds": ("le",),
    "rest_client_rate_limiter_duration_seconds": ("le",),
    "kueue_pending_workloads": ("status",),
    "kueue_admission_attempts_total": ("result",),
    "kueue_admission_attempt_duration_seconds": ("result", "le"),
    "kueue_cluster_queue_status": ("status",),
    "kueue_quota_reserved_workloads_total": (),
    "kueue_admitted_workloads_total": (),
    "kueue_admission_wait_time_seconds": ("le",),
    "apiserver_request_duration_seconds": ("verb", "resource", "subresource", "le"),
    "apiserver_request_total": ("code", "resource", "verb"),
    "apiserver_flowcontrol_rejected_requests_total": ("priority_level", "reason"),
    "apiserver_flowcontrol_current_inqueue_requests": ("priority_level",),
    "apiserver_flowcontrol_request_wait_duration_seconds": ("execute", "le"),
    "apiserver_current_inflight_requests": ("request_kind",),
    # controller-runtime's work queues (Kueue's controllers, one queue each, by controller name):
    # how far its pod integration (Workload creation, ungating) falls behind in a burst
    "process_cpu_seconds_total": (),  # each component's CPU: on a shared machine, who is starved or busy
    "workqueue_depth": ("name",),
    "workqueue_queue_duration_seconds": ("name", "le"),
}
_SUFFIXES = ("", "_bucket", "_sum", "_count")
_SAMPLE_TO_FAMILY = {family + suffix: family for family in KEEP for suffix in _SUFFIXES}
MAX_BODY_BYTES = 64 * 1024 * 1024
ACCEPT = "text/plain;version=0.0.4"


class MetricsError(ValueError):
    """A /metrics body that cannot be read as the Prometheus text format; the message says where."""


def parse_metrics(text: str, component: str = "") -> dict[Series, float]:
    """The samples of :data:`KEEP`'s families in ``text``, each cut to its kept labels (summed).

    Lines of other families are skipped before parsing (the apiserver serves megabytes). Raises
    :class:`MetricsError` on a body the Prometheus parser refuses, naming the component."""
    if "\x00" in text:
        raise MetricsError(f"{component or 'metrics'}: NUL byte in the body")
    wanted = [line for line in text.splitlines()
              if line and not line.startswith("#") and _family_of(line) is not None]  # fmt: skip
    out: dict[Series, float] = {}
    try:
        for family in text_string_to_metric_families("\n".join(wanted) + "\n"):
            for sample in family.samples:
                name = _SAMPLE_TO_FAMILY.get(sample.name)
                if name is None:
                    continue
                keep = KEEP[name]
                labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k in keep))
                key = (sample.name, labels)
                out[key] = out.get(key, 0.0) + float(sample.value)
    except (ValueError, IndexError, TypeError) as exc:
        raise MetricsError(f"{component or 'metrics'}: not the Prometheus text format: {exc}"[:300]) from None
    return out


def _family_of(line: str) -> str | None:
    end = len(line)
    for stop in ("{", " "):
        cut = line.find(stop)
        if 0 <= cut < end:
            end = cut
    return _SAMPLE_TO_FAMILY.get(line[:end])


# ------------------------------------------------------------------------------------------------ queries


@dataclass(frozen=True)
class Snapshot:
    at: float  # time.monotonic() when the answers arrived
    values: Mapping[Series, float]
    errors: Mapping[str, str] = field(default_factory=dict)  # component -> why it did not answer


def total(values: Mapping[Series, float], name: str, /, **match: str) -> float | None:
    """Sum of the series named ``name`` whose labels include ``match``; None when none exists."""
    found = [v for (n, labels), v in values.items() if n == name and all((k, w) in labels for k, w in match.items())]
    return sum(found) if found else None


def buckets(values: Mapping[Series, float], family: str, /, **match: str) -> dict[float, float]:
    """Cumulative bucket counts by upper bound (``le``) of ``family``, summed over the other labels."""
    out: dict[float, float] = {}
    for (n, labels), v in values.items():
        if n != f"{family}_bucket" or not all((k, w) in labels for k, w in match.items()):
            continue
        le = dict(labels).get("le")
        if le is not None:
            bound = math.inf if le == "+Inf" else float(le)
            out[bound] = out.get(bound, 0.0) + v
    return out


def quantile(q: float, cumulative: Mapping[float, float]) -> float:
    """``histogram_quantile``: linear within the bucket that holds rank q x count; the highest
    finite bound when the rank falls in +Inf; NaN with no observations."""
    bounds = sorted(cumulative)
    if not bounds or cumulative[bounds[-1]] <= 0:
        return math.nan
    rank = q * cumulative[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


@dataclass(frozen=True)
class Phase:
    name: str
    start: float  # monotonic
    end: float


def _within(snapshots: Sequence[Snapshot], phase: Phase) -> tuple[Snapshot | None, list[Snapshot]]:
    """The last scrape at or before the phase's start (the counters' baseline) and its own scrapes."""
    before = [s for s in snapshots if s.at <= phase.start]
    inside = [s for s in snapshots if phase.start < s.at <= phase.end]
    return (before[-1] if before else None), inside


OWNERS = (("scheduler_", "kube-scheduler"), ("kueue_", "kueue"), ("apiserver_", "kube-apiserver"))


def owner_of(name: str) -> str | None:
    """The component that serves a family, by its prefix (client-go's rest_client_* are everyone's)."""
    return next((component for prefix, component in OWNERS if name.startswith(prefix)), None)


def served(snapshot: Snapshot, component: str) -> bool:
    """Whether ``component`` answered this scrape with at least one kept series."""
    return component not in snapshot.errors and any((TARGET, component) in labels for _, labels in snapshot.values)


def gauge_peak(snapshots: Sequence[Snapshot], phase: Phase, name: str, /, **match: str) -> float:
    """The highest value in the phase's scrapes; a labelled gauge a component has not created yet
    (no pod ever unschedulable by that plugin) is 0 in the scrapes where that component answered."""
    _, inside = _within(snapshots, phase)
    owner = match.get(TARGET) or owner_of(name)
    seen = [
        v if v is not None else 0.0
        for s in inside
        if (v := total(s.values, name, **match)) is not None or (owner is not None and served(s, owner))
    ]
    return max(seen) if seen else math.nan


def counter_increase(snapshots: Sequence[Snapshot], phase: Phase, name: str, /, **match: str) -> float:
    """Increase over the phase; a counter that went down (the component restarted) counts from 0."""
    base, inside = _within(snapshots, phase)
    if not inside:
        return math.nan
    end = total(inside[-1].values, name, **match)
    if end is None:
        # Counters with labels appear at their first increment: a component that answered without
        # the series has counted none (no 429 yet), which is 0, not "not measured".
        owner = match.get(TARGET) or owner_of(name)
        if owner is None or not served(inside[-1], owner):
            return math.nan
        end = 0.0
    start = (total(base.values, name, **match) if base is not None else None) or 0.0
    return end - start if end >= start else end


def histogram_window(snapshots: Sequence[Snapshot], phase: Phase, family: str, /,
                     **match: str) -> tuple[float, float, dict[float, float]]:  # fmt: skip
    """(observations, their sum, cumulative buckets) of the phase alone."""
    base, inside = _within(snapshots, phase)
    if not inside:
        return 0.0, 0.0, {}
    end = inside[-1].values
    start: Mapping[Series, float] = base.values if base is not None else {}
    count = (total(end, f"{family}_count", **match) or 0.0) - (total(start, f"{family}_count", **match) or 0.0)
    summed = (total(end, f"{family}_sum", **match) or 0.0) - (total(start, f"{family}_sum", **match) or 0.0)
    later, earlier = buckets(end, family, **match), buckets(start, family, **match)
    if count < 0:  # restarted: the end values are the phase's
        return total(end, f"{family}_count", **match) or 0.0, total(end, f"{family}_sum", **match) or 0.0, later
    return count, summed, {b: v - earlier.get(b, 0.0) for b, v in later.items()}


# A row of the phase table: (label, kind, metric, match); kinds: peak (gauge), inc (counter),
# rate (counter per second), mean_ms / p99_ms (histogram in seconds, shown in ms), count (histogram).
ROWS: tuple[tuple[str, str, str, dict[str, str]], ...] = (
    ("sched pending active (peak)", "peak", "scheduler_pending_pods", {"queue": "active"}),
    ("sched pending backoff (peak)", "peak", "scheduler_pending_pods", {"queue": "backoff"}),
    ("sched pending unschedulable (peak)", "peak", "scheduler_pending_pods", {"queue": "unschedulable"}),
    ("sched pending gated (peak)", "peak", "scheduler_pending_pods", {"queue": "gated"}),
    ("sched unschedulable by fit (peak)", "peak", "scheduler_unschedulable_pods", {"plugin": "NodeResourcesFit"}),
    ("sched unschedulable by gates (peak)", "peak", "scheduler_unschedulable_pods", {"plugin": "SchedulingGates"}),
    ("sched attempts scheduled", "inc", "scheduler_schedule_attempts_total", {"result": "scheduled"}),
    ("sched attempts unschedulable", "inc", "scheduler_schedule_attempts_total", {"result": "unschedulable"}),
    ("sched attempts error", "inc", "scheduler_schedule_attempts_total", {"result": "error"}),
    ("sched scheduled per s", "rate", "scheduler_schedule_attempts_total", {"result": "scheduled"}),
    ("sched attempt mean ms", "mean_ms", "scheduler_scheduling_attempt_duration_seconds", {}),
    ("sched attempt p99 ms", "p99_ms", "scheduler_scheduling_attempt_duration_seconds", {}),
    ("sched pod SLI p99 ms", "p99_ms", "scheduler_pod_scheduling_sli_duration_seconds", {}),
    ("sched client throttle p99 ms", "p99_ms", "rest_client_rate_limiter_duration_seconds", {TARGET: "kube-scheduler"}),
    (
        "sched client throttle mean ms",
        "mean_ms",
        "rest_client_rate_limiter_duration_seconds",
        {TARGET: "kube-scheduler"},
    ),
    ("kueue pending active (peak)", "peak", "kueue_pending_workloads", {"status": "active"}),
    ("kueue pending inadmissible (peak)", "peak", "kueue_pending_workloads", {"status": "inadmissible"}),
    ("kueue attempts success", "inc", "kueue_admission_attempts_total", {"result": "success"}),
    ("kueue attempts inadmissible", "inc", "kueue_admission_attempts_total", {"result": "inadmissible"}),
    ("kueue attempt mean ms", "mean_ms", "kueue_admission_attempt_duration_seconds", {}),
    ("kueue quota reserved per s", "rate", "kueue_quota_reserved_workloads_total", {}),
    ("kueue admitted", "inc", "kueue_admitted_workloads_total", {}),
    ("kueue admission wait p99 ms", "p99_ms", "kueue_admission_wait_time_seconds", {}),
    ("kueue CQs pending status (peak)", "peak", "kueue_cluster_queue_status", {"status": "pending"}),
    (
        "api POST pods mean ms",
        "mean_ms",
        "apiserver_request_duration_seconds",
        {"verb": "POST", "resource": "pods", "subresource": ""},
    ),
    (
        "api POST pods p99 ms",
        "p99_ms",
        "apiserver_request_duration_seconds",
        {"verb": "POST", "resource": "pods", "subresource": ""},
    ),
    (
        "api POST pods/binding",
        "count",
        "apiserver_request_duration_seconds",
        {"verb": "POST", "resource": "pods", "subresource": "binding"},
    ),
    (
        "api pods/status writes",
        "count",
        "apiserver_request_duration_seconds",
        {"resource": "pods", "subresource": "status"},
    ),
    (
        "api workloads writes p99 ms",
        "p99_ms",
        "apiserver_request_duration_seconds",
        {"verb": "PUT", "resource": "workloads"},
    ),
    ("api answers 429", "inc", "apiserver_request_total", {"code": "429"}),
    ("api APF rejected", "inc", "apiserver_flowcontrol_rejected_requests_total", {}),
    ("api APF in queue (peak)", "peak", "apiserver_flowcontrol_current_inqueue_requests", {}),
    ("api APF wait p99 ms", "p99_ms", "apiserver_flowcontrol_request_wait_duration_seconds", {"execute": "true"}),
    ("api inflight mutating (peak)", "peak", "apiserver_current_inflight_requests", {"request_kind": "mutating"}),
    ("cpu cores kube-scheduler", "rate", "process_cpu_seconds_total", {TARGET: "kube-scheduler"}),
    ("cpu cores kueue", "rate", "process_cpu_seconds_total", {TARGET: "kueue"}),
    ("cpu cores kube-apiserver", "rate", "process_cpu_seconds_total", {TARGET: "kube-apiserver"}),
)


def cell(snapshots: Sequence[Snapshot], phase: Phase, kind: str, metric: str, match: Mapping[str, str]) -> float:
    """One figure of the table (NaN where the component served nothing for it)."""
    if kind == "peak":
        return gauge_peak(snapshots, phase, metric, **match)
    if kind == "inc":
        return counter_increase(snapshots, phase, metric, **match)
    if kind == "rate":
        span = phase.end - phase.start
        return counter_increase(snapshots, phase, metric, **match) / span if span > 0 else math.nan
    count, summed, cumulative = histogram_window(snapshots, phase, metric, **match)
    if kind == "count":
        return count if cumulative or count else math.nan
    if kind == "mean_ms":
        return 1000.0 * summed / count if count > 0 else math.nan
    if kind == "p99_ms":
        return 1000.0 * quantile(0.99, cumulative)
    raise ValueError(f"unknown row kind {kind!r}")


def phase_table(snapshots: Sequence[Snapshot], phases: Sequence[Phase]) -> list[str]:
    """The compact per-phase table, one line per row of :data:`ROWS` that any phase has a figure
    for (a contender without Kueue objects shows no Kueue rows worth reading, but they stay when
    Kueue answered, as zeros)."""
    width = max(len(r[0]) for r in ROWS)
    head = f"    {'metric':{width}s} " + " ".join(f"{p.name + f' {p.end - p.start:.0f}s':>13s}" for p in phases)
    lines = [head]
    for label, kind, metric, match in ROWS:
        figures = [cell(snapshots, p, kind, metric, match) for p in phases]
        if all(math.isnan(f) for f in figures):
            continue
        lines.append(f"    {label:{width}s} " + " ".join(_fmt(f) for f in figures))
    for phase in phases:
        moves = queue_moves(snapshots, phase)
        if moves:
            lines.append(f"    sched queue moves in {phase.name} (event -> queue x pods): "
                         + ", ".join(f"{event} -> {queue} x{n:,.0f}" for (event, queue), n in moves[:5]))  # fmt: skip
        queues = work_queues(snapshots, phase, "kueue")
        if queues:
            lines.append(f"    kueue work queues in {phase.name} (queue: peak depth, p99 wait): "
                         + ", ".join(f"{name}: {depth:,.0f}, {_fmt(wait).strip()} ms"
                                     for name, depth, wait in queues[:5]))  # fmt: skip
        answers = throttled(snapshots, phase)
        if answers:
            top = ", ".join(f"{verb} {resource} x{n:,.0f}" for (verb, resource), n in answers[:5])
            lines.append(f"    api 429 in {phase.name} (verb resource x answers): {top}")
    errors = sorted({f"{c}: {e}" for s in snapshots for c, e in s.errors.items()})
    if errors:
        lines.append(f"    scrape errors ({len(errors)} distinct): " + "; ".join(errors[:3]))
    return lines


def work_queues(snapshots: Sequence[Snapshot], phase: Phase, target: str) -> list[tuple[str, float, float]]:
    """``(queue, peak depth, p99 wait in ms)`` of each work queue ``target`` served that held
    anything in the phase, deepest first (a queue that stayed empty is not news)."""
    names = {dict(labels).get("name", "") for s in snapshots for name, labels in s.values
             if name == "workqueue_depth" and (TARGET, target) in labels}  # fmt: skip
    out = []
    for queue in sorted(names - {""}):
        depth = gauge_peak(snapshots, phase, "workqueue_depth", name=queue, **{TARGET: target})
        if math.isnan(depth) or depth <= 0:
            continue
        _, _, cumulative = histogram_window(snapshots, phase, "workqueue_queue_duration_seconds", name=queue,
                                            **{TARGET: target})  # fmt: skip
        out.append((queue, depth, 1000.0 * quantile(0.99, cumulative) if cumulative else math.nan))
    return sorted(out, key=lambda row: (-row[1], row[0]))


def increases_by(snapshots: Sequence[Snapshot], phase: Phase, family: str, keys: tuple[str, ...],
                 **match: str) -> list[tuple[tuple[str, ...], float]]:  # fmt: skip
    """A counter family's increase over the phase per value of ``keys`` (among its series matching
    ``match``), most first, increases only; a series that went down (restart) counts from 0."""
    base, inside = _within(snapshots, phase)
    if not inside:
        return []

    def by_key(values: Mapping[Series, float]) -> dict[tuple[str, ...], float]:
        out: dict[tuple[str, ...], float] = {}
        for (name, labels), value in values.items():
            if name == family and all((k, w) in labels for k, w in match.items()):
                kept = dict(labels)
                key = tuple(kept.get(k, "?") for k in keys)
                out[key] = out.get(key, 0.0) + value
        return out

    end, start = by_key(inside[-1].values), by_key(base.values) if base is not None else {}
    moved = {key: (v - start.get(key, 0.0) if v >= start.get(key, 0.0) else v) for key, v in end.items()}
    return sorted(((k, v) for k, v in moved.items() if v > 0), key=lambda kv: (-kv[1], kv[0]))


def queue_moves(snapshots: Sequence[Snapshot], phase: Phase) -> list[tuple[tuple[str, ...], float]]:
    """Pods kube-scheduler moved into a queue during the phase, by (cluster event, queue), most first:
    which events re-queued unschedulable pods (its QueueingHints) and how often."""
    return increases_by(snapshots, phase, "scheduler_queue_incoming_pods_total", ("event", "queue"))


def throttled(snapshots: Sequence[Snapshot], phase: Phase) -> list[tuple[tuple[str, ...], float]]:
    """kube-apiserver's 429 answers in the phase by (verb, resource): who was throttled."""
    return increases_by(snapshots, phase, "apiserver_request_total", ("verb", "resource"), code="429")


def _fmt(value: float) -> str:
    if math.isnan(value):
        return f"{'-':>13s}"
    if abs(value) >= 100 or value == int(value):
        return f"{value:13,.0f}"
    return f"{value:13.2f}"


# ------------------------------------------------------------------------------------------------ scraping


@dataclass(frozen=True)
class Target:
    component: str
    url: str
    verify: ssl.SSLContext | bool
    headers: Mapping[str, str] = field(default_factory=dict)


def scrape(targets: Iterable[Target], *, timeout_s: float = 10.0,
           clients: Mapping[str, httpx.Client] | None = None) -> Snapshot:  # fmt: skip
    """One scrape of every target; a target that fails is recorded in ``errors``, never raised."""
    values: dict[Series, float] = {}
    errors: dict[str, str] = {}
    for target in targets:
        client = (clients or {}).get(target.component)
        try:
            if client is not None:
                response = client.get(target.url, headers={"Accept": ACCEPT, **target.headers})
            else:
                response = httpx.get(target.url, headers={"Accept": ACCEPT, **target.headers},
                                     verify=target.verify, timeout=timeout_s)  # fmt: skip
            if response.status_code != 200:
                errors[target.component] = f"HTTP {response.status_code}: {response.text[:120]}"
                continue
            if len(response.content) > MAX_BODY_BYTES:
                errors[target.component] = f"body over {MAX_BODY_BYTES} bytes"
                continue
            # Each series carries the component that served it: kube-apiserver and kube-scheduler
            # both serve client-go's rest_client_* families, and a merged dict would keep only one.
            for (name, labels), value in parse_metrics(response.text, target.component).items():
                values[(name, tuple(sorted((*labels, (TARGET, target.component)))))] = value
        except (httpx.HTTPError, MetricsError) as exc:
            errors[target.component] = f"{type(exc).__name__}: {exc}"[:200]
    return Snapshot(time.monotonic(), values, errors)


class Scraper:
    """Scrapes ``targets`` every ``every_s`` in a thread; :meth:`mark` stamps phase boundaries."""

    def __init__(self, targets: Sequence[Target], every_s: float = 3.0) -> None:
        self.targets = list(targets)
        self.every_s = every_s
        self.snapshots: list[Snapshot] = []
        self.marks: list[tuple[str, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._phases: list[Phase] | None = None
        self._clients = {t.component: httpx.Client(verify=t.verify, timeout=10.0) for t in self.targets}

    def start(self) -> Scraper:
        self.snapshots.append(scrape(self.targets, clients=self._clients))
        self._thread = threading.Thread(target=self._run, name="burst-metrics", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.snapshots.append(scrape(self.targets, clients=self._clients))

    def mark(self, name: str) -> None:
        """A phase called ``name`` starts now (the previous one ends); scraped at once."""
        self.snapshots.append(scrape(self.targets, clients=self._clients))
        self.marks.append((name, time.monotonic()))

    def stop(self) -> list[Phase]:
        """Stop, take a last scrape, and return the phases between the marks (again on a second call)."""
        if self._phases is None:
            self._stop.set()
            if self._thread is not None:
                self._thread.join(30)
            self.snapshots.append(scrape(self.targets, clients=self._clients))
            for client in self._clients.values():
                client.close()
            end = self.snapshots[-1].at
            bounds = [*(at for _, at in self.marks[1:]), end]
            self._phases = [Phase(name, at, stop) for (name, at), stop in zip(self.marks, bounds, strict=True)]
        return self._phases


# ------------------------------------------------------------------------------------------------ the plane

READER = "gpufabric-bench-metrics-reader"


def kueue_token(api: Any, namespace: str = "kueue-system") -> str:
    """A ServiceAccount allowed ``get`` on the non-resource URL ``/metrics`` and nothing else, and
    a one-hour token for it: what Kueue's metrics filter authenticates (TokenReview) and
    authorises (SubjectAccessReview). ``api`` is the plane's admin client
    (``simulator.controlplane.api.Api``); objects left by an earlier run (409) are kept."""
    from simulator.controlplane.api import ApiError

    rbac = "/apis/rbac.authorization.k8s.io/v1"
    objects = [
        (f"/api/v1/namespaces/{namespace}/serviceaccounts",
         {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": READER, "namespace": namespace}}),
        (f"{rbac}/clusterroles",
         {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": READER},
          "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
        (f"{rbac}/clusterrolebindings",
         {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": READER},
          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER},
          "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": namespace}]}),
    ]  # fmt: skip
    for path, body in objects:
        try:
            api.post(path, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
    answer = api.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{READER}/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"expirationSeconds": 3600}})  # fmt: skip
    return str(answer["status"]["token"])


def plane_targets(plane: Any) -> list[Target]:
    """kube-apiserver, kube-scheduler and Kueue ``/metrics`` of a ``simulator.controlplane`` plane."""
    from simulator.controlplane.api import tls_context

    admin = tls_context(plane.ca_file, plane.admin_cert, plane.admin_key)
    # kube-scheduler's serving certificate is self-signed in its --cert-dir: present the admin's
    # client certificate, do not verify the server (loopback, a port we chose).
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    unverified.load_cert_chain(str(plane.admin_cert), str(plane.admin_key))
    api = plane.api()
    try:
        token = kueue_token(api)
    finally:
        api.close()
    return [
        Target("kube-apiserver", f"{plane.server}/metrics", admin),
        Target("kube-scheduler", f"https://127.0.0.1:{plane.ports['kube-scheduler']}/metrics", unverified),
        Target("kueue", f"https://127.0.0.1:{plane.ports['kueue-metrics']}/metrics",
               ssl.create_default_context(cafile=str(plane.ca_file)), {"Authorization": f"Bearer {token}"}),
    ]  # fmt: skip


def event_reasons(api: Any, namespaces: Iterable[str]) -> dict[tuple[str, str], int]:
    """Events in ``namespaces`` by (reporting component, reason), counting each event's repeats
    (``count``, or its series): how often kube-scheduler said FailedScheduling, Kueue Pending."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    out: dict[tuple[str, str], int] = {}
    for namespace in namespaces:
        cont: str | None = None
        while True:
            raw = core.list_namespaced_event(namespace, limit=1000, _continue=cont, _preload_content=False)
            page = json.loads(raw.data)
            for event in page.get("items") or []:
                source = (event.get("source") or {}).get("component") or event.get("reportingComponent") or "?"
                repeats = event.get("count") or ((event.get("series") or {}).get("count")) or 1
                key = (str(source), str(event.get("reason") or "?"))
                out[key] = out.get(key, 0) + int(repeats)
            cont = (page.get("metadata") or {}).get("continue") or None
            if not cont:
                break
    return out
