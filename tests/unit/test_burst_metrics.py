"""The burst benchmark's reading of the components' own metrics (bench/burst_metrics.py): series cut
to the labels kept and summed, hostile bodies refused by name, and the per-phase figures (gauge
peak, counter increase across a restart, a histogram's own window and its quantile)."""

from __future__ import annotations

import math

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.burst_metrics import (
    KEEP,
    ROWS,
    TARGET,
    MetricsError,
    Phase,
    Snapshot,
    Target,
    buckets,
    cell,
    counter_increase,
    gauge_peak,
    histogram_window,
    parse_metrics,
    phase_table,
    quantile,
    queue_moves,
    scrape,
    total,
    work_queues,
)

SCHEDULER = """\
# HELP scheduler_pending_pods [STABLE] Number of pending pods, by the queue type.
# TYPE scheduler_pending_pods gauge
scheduler_pending_pods{queue="active"} 3
scheduler_pending_pods{queue="backoff"} 0
scheduler_pending_pods{queue="unschedulable"} 41
scheduler_pending_pods{queue="gated"} 7
# TYPE scheduler_schedule_attempts_total counter
scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 120
scheduler_schedule_attempts_total{profile="other",result="scheduled"} 5
scheduler_schedule_attempts_total{profile="default-scheduler",result="unschedulable"} 60
# TYPE go_goroutines gauge
go_goroutines 9
"""

APISERVER = """\
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{component="apiserver",verb="POST",resource="pods",subresource="",le="0.1"} 8
apiserver_request_duration_seconds_bucket{component="apiserver",verb="POST",resource="pods",subresource="",le="+Inf"} 10
apiserver_request_duration_seconds_sum{component="apiserver",verb="POST",resource="pods",subresource=""} 1.5
apiserver_request_duration_seconds_count{component="apiserver",verb="POST",resource="pods",subresource=""} 10
apiserver_request_duration_seconds_bucket{component="",verb="POST",resource="pods",subresource="",le="0.1"} 2
apiserver_request_duration_seconds_bucket{component="",verb="POST",resource="pods",subresource="",le="+Inf"} 2
"""


def test_kept_labels_only_and_other_labels_summed() -> None:
    values = parse_metrics(SCHEDULER + APISERVER, "test")
    # profile is not kept: the two "scheduled" series add up; unknown families are skipped
    assert total(values, "scheduler_schedule_attempts_total", result="scheduled") == 125
    assert total(values, "scheduler_pending_pods", queue="unschedulable") == 41
    assert total(values, "go_goroutines") is None
    # component is not kept: buckets of both components summed per bound
    assert buckets(values, "apiserver_request_duration_seconds", verb="POST") == {0.1: 10.0, math.inf: 12.0}
    assert total(values, "apiserver_request_duration_seconds_count", resource="pods") == 10


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('scheduler_pending_pods{queue="active"} 1\x00\n', "kube-scheduler: NUL byte"),
        ('scheduler_pending_pods{queue="active" 1\n', "kube-scheduler: not the Prometheus text format"),
        ('scheduler_pending_pods{queue="active"} one\n', "kube-scheduler: not the Prometheus text format"),
    ],
)
def test_hostile_bodies_are_refused_by_name(body: str, message: str) -> None:
    with pytest.raises(MetricsError, match=message):
        parse_metrics(body, "kube-scheduler")


def test_truncated_body_keeps_what_was_whole() -> None:
    cut = SCHEDULER[: SCHEDULER.index('scheduler_pending_pods{queue="gated"}')]
    values = parse_metrics(cut, "kube-scheduler")
    assert total(values, "scheduler_pending_pods", queue="unschedulable") == 41
    assert total(values, "scheduler_pending_pods", queue="gated") is None


def snap(at: float, **series: float) -> Snapshot:
    return Snapshot(at, {(name, ()): value for name, value in series.items()})


def test_gauge_peak_and_counter_increase_per_phase() -> None:
    snaps = [snap(0, g=1, c=10), snap(5, g=9, c=15), snap(10, g=2, c=40), snap(15, g=0, c=41)]
    burst, drain = Phase("burst", 0, 10), Phase("drain", 10, 15)
    assert gauge_peak(snaps, burst, "g") == 9  # the scrape at the boundary belongs to the phase it ends
    assert counter_increase(snaps, burst, "c") == 30  # from the last scrape at or before the start
    assert counter_increase(snaps, drain, "c") == 1
    assert cell(snaps, burst, "rate", "c", {}) == 3.0
    assert math.isnan(gauge_peak(snaps, Phase("later", 20, 30), "g"))


def test_counter_that_restarted_counts_from_zero() -> None:
    snaps = [snap(0, c=500), snap(5, c=7)]
    assert counter_increase(snaps, Phase("p", 0, 5), "c") == 7


def hist(at: float, le01: float, inf: float, summed: float) -> Snapshot:
    return Snapshot(at, {
        ("h_bucket", (("le", "0.1"),)): le01, ("h_bucket", (("le", "1"),)): inf,
        ("h_bucket", (("le", "+Inf"),)): inf, ("h_sum", ()): summed, ("h_count", ()): inf,
    })  # fmt: skip


def test_histogram_window_is_the_phase_own_observations() -> None:
    snaps = [hist(0, 100, 100, 5.0), hist(10, 100, 200, 65.0)]
    count, summed, cumulative = histogram_window(snaps, Phase("p", 0, 10), "h")
    assert (count, summed) == (100, 60.0)
    assert cumulative == {0.1: 0.0, 1.0: 100.0, math.inf: 100.0}
    assert cell(snaps, Phase("p", 0, 10), "mean_ms", "h", {}) == pytest.approx(600.0)
    # every observation of the window is in (0.1, 1]: p99 interpolates inside that bucket
    assert cell(snaps, Phase("p", 0, 10), "p99_ms", "h", {}) == pytest.approx(1000 * (0.1 + 0.9 * 0.99))


def test_quantile_edges() -> None:
    assert math.isnan(quantile(0.99, {}))
    assert math.isnan(quantile(0.5, {1.0: 0.0, math.inf: 0.0}))
    assert quantile(0.99, {1.0: 1.0, math.inf: 100.0}) == 1.0  # in +Inf: the highest finite bound


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=6), st.floats(0.01, 1.0))
def test_quantile_stays_within_the_bucket_holding_the_rank(counts: list[int], q: float) -> None:
    bounds = [0.5 * (i + 1) for i in range(len(counts))]
    cumulative: dict[float, float] = {}
    running = 0
    for bound, n in zip(bounds, counts, strict=True):
        running += n
        cumulative[bound] = running
    cumulative[math.inf] = running
    value = quantile(q, cumulative)
    if running == 0:
        assert math.isnan(value)
        return
    rank = q * running
    holder = next(b for b in bounds if cumulative[b] >= rank)
    lower = max([b for b in bounds if b < holder], default=0.0)
    assert lower <= value <= holder


def test_phase_table_lists_rows_with_figures_and_scrape_errors() -> None:
    values = parse_metrics(SCHEDULER, "kube-scheduler")
    snaps = [Snapshot(0, values), Snapshot(3, values, {"kueue": "HTTP 401: Unauthorized"})]
    lines = phase_table(snaps, [Phase("burst", 0, 3)])
    text = "\n".join(lines)
    assert "sched pending unschedulable (peak)" in text and "41" in text
    assert "kueue pending active" not in text  # no Kueue figure at all: no row
    assert "scrape errors (1 distinct): kueue: HTTP 401: Unauthorized" in text


def test_every_row_reads_a_kept_family_by_kept_labels() -> None:
    # A row naming a family or label that parsing drops would print nothing, silently.
    for label, kind, metric, match in ROWS:
        assert metric in KEEP, label
        assert set(match) <= {*KEEP[metric], TARGET}, label
        if kind in ("mean_ms", "p99_ms", "count"):
            assert "le" in KEEP[metric], label


THROTTLE = """\
# TYPE rest_client_rate_limiter_duration_seconds histogram
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:6443",verb="POST",le="0.005"} {low}
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:6443",verb="POST",le="+Inf"} {all}
rest_client_rate_limiter_duration_seconds_sum{host="127.0.0.1:6443",verb="POST"} 0.5
rest_client_rate_limiter_duration_seconds_count{host="127.0.0.1:6443",verb="POST"} {all}
"""


def test_scrape_keeps_components_apart_and_records_failures() -> None:
    bodies = {
        "apiserver.test": (200, THROTTLE.replace("{low}", "7").replace("{all}", "9")),
        "scheduler.test": (200, THROTTLE.replace("{low}", "40").replace("{all}", "100")),
        "kueue.test": (401, "Unauthorized"),
        "broken.test": (200, 'scheduler_pending_pods{queue="active" 1\n'),
    }

    def serve(request: httpx.Request) -> httpx.Response:
        assert request.headers["accept"].startswith("text/plain")  # never protobuf or OpenMetrics
        status, text = bodies[request.url.host]
        return httpx.Response(status, text=text)

    components = {"kube-apiserver": "apiserver.test", "kube-scheduler": "scheduler.test", "kueue": "kueue.test",
                  "other": "broken.test"}  # fmt: skip
    targets = [Target(c, f"https://{host}/metrics", True) for c, host in components.items()]
    clients = {c: httpx.Client(transport=httpx.MockTransport(serve)) for c in components}
    try:
        snapshot = scrape(targets, clients=clients)
    finally:
        for c in clients.values():
            c.close()
    family = "rest_client_rate_limiter_duration_seconds"
    assert buckets(snapshot.values, family, **{TARGET: "kube-scheduler"}) == {0.005: 40.0, math.inf: 100.0}
    assert buckets(snapshot.values, family, **{TARGET: "kube-apiserver"}) == {0.005: 7.0, math.inf: 9.0}
    assert buckets(snapshot.values, family) == {0.005: 47.0, math.inf: 109.0}
    assert snapshot.errors["kueue"].startswith("HTTP 401")
    assert "other: not the Prometheus text format" in snapshot.errors["other"]
    assert set(snapshot.errors) == {"kueue", "other"}


# Excerpts of real scrapes (kube-scheduler and kube-apiserver v1.36.5, Kueue v0.19.2, the bench's plane,
# 2026-12-05, the kueue contender of `python -m bench --only burst --quick` mid-burst), lines verbatim.
SCHEDULER_REAL = """\
# HELP scheduler_pending_pods [STABLE] Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated.
# TYPE scheduler_pending_pods gauge
scheduler_pending_pods{queue="active"} 0
scheduler_pending_pods{queue="backoff"} 0
scheduler_pending_pods{queue="gated"} 161
scheduler_pending_pods{queue="unschedulable"} 0
# HELP scheduler_queue_incoming_pods_total [STABLE] Number of pods added to scheduling queues by event and queue type.
# TYPE scheduler_queue_incoming_pods_total counter
scheduler_queue_incoming_pods_total{event="UnschedulablePodAdd",queue="unschedulable"} 200
scheduler_queue_incoming_pods_total{event="UnschedulablePodUpdatePodSchedulingGatesEliminated",queue="active"} 39
# HELP scheduler_schedule_attempts_total [STABLE] Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.
# TYPE scheduler_schedule_attempts_total counter
scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 39
# HELP scheduler_unschedulable_pods [BETA] The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for all plugins that caused it to not schedule and so this metric have meaning only when broken down by plugin.
# TYPE scheduler_unschedulable_pods gauge
scheduler_unschedulable_pods{plugin="SchedulingGates",profile="default-scheduler"} 161
"""  # noqa: E501
KUEUE_REAL = """\
# HELP kueue_admission_attempts_total The total number of attempts to admit workloads.\\nEach admission attempt might try to admit more than one workload.\\nThe label 'result' can have the following values:\\n- 'success' means that at least one workload was admitted.,\\n- 'inadmissible' means that no workload was admitted.
# TYPE kueue_admission_attempts_total counter
kueue_admission_attempts_total{replica_role="standalone",result="inadmissible"} 39
kueue_admission_attempts_total{replica_role="standalone",result="success"} 36
# HELP kueue_pending_workloads The number of pending workloads, per 'cluster_queue' and 'status'.\\n'status' can have the following values:\\n- "active" means that the workloads are in the admission queue.\\n- "inadmissible" means there was a failed admission attempt for these workloads and they won't be retried until cluster conditions, which could make this workload admissible, change
# TYPE kueue_pending_workloads gauge
kueue_pending_workloads{cluster_queue="acme-6b125",replica_role="standalone",status="active"} 0
kueue_pending_workloads{cluster_queue="acme-6b125",replica_role="standalone",status="inadmissible"} 24
kueue_pending_workloads{cluster_queue="globex-6b125",replica_role="standalone",status="active"} 0
kueue_pending_workloads{cluster_queue="globex-6b125",replica_role="standalone",status="inadmissible"} 62
kueue_pending_workloads{cluster_queue="initech-6b125",replica_role="standalone",status="active"} 0
kueue_pending_workloads{cluster_queue="initech-6b125",replica_role="standalone",status="inadmissible"} 35
kueue_pending_workloads{cluster_queue="umbrella-6b125",replica_role="standalone",status="active"} 0
kueue_pending_workloads{cluster_queue="umbrella-6b125",replica_role="standalone",status="inadmissible"} 39
"""  # noqa: E501
APISERVER_REAL = """\
# HELP apiserver_request_duration_seconds [STABLE] Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="0.005"} 1
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="0.025"} 189
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="0.05"} 207
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="0.1"} 235
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="0.2"} 285
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="+Inf"} 285
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 11.068513601000005
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 285
# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 100
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 13
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 91
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 285
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 4
"""  # noqa: E501


def test_real_scrapes_parse_to_what_the_components_reported() -> None:
    sched = parse_metrics(SCHEDULER_REAL, "kube-scheduler")
    assert total(sched, "scheduler_pending_pods", queue="gated") == 161
    assert total(sched, "scheduler_pending_pods", queue="unschedulable") == 0
    assert total(sched, "scheduler_unschedulable_pods", plugin="SchedulingGates") == 161
    kueue = parse_metrics(KUEUE_REAL, "kueue")
    # summed over the four ClusterQueues (cluster_queue and replica_role are not kept)
    assert total(kueue, "kueue_pending_workloads", status="inadmissible") == 24 + 62 + 35 + 39
    assert total(kueue, "kueue_pending_workloads", status="active") == 0
    assert total(kueue, "kueue_admission_attempts_total", result="success") == 36
    assert total(kueue, "kueue_admission_attempts_total", result="inadmissible") == 39
    api = parse_metrics(APISERVER_REAL, "kube-apiserver")
    post = {"verb": "POST", "resource": "pods", "subresource": ""}
    assert buckets(api, "apiserver_request_duration_seconds", **post) == {
        0.005: 1, 0.025: 189, 0.05: 207, 0.1: 235, 0.2: 285, math.inf: 285}  # fmt: skip
    # 285 creates, 11.07 s in all: a 38.8 ms mean; the 99th in the (0.1, 0.2] bucket
    snaps = [Snapshot(0, {}), Snapshot(5, api)]
    assert cell(snaps, Phase("burst", 0, 5), "mean_ms", "apiserver_request_duration_seconds", post) == (
        pytest.approx(1000 * 11.068513601000005 / 285)
    )
    assert cell(snaps, Phase("burst", 0, 5), "p99_ms", "apiserver_request_duration_seconds", post) == (
        pytest.approx(1000 * (0.1 + 0.1 * (0.99 * 285 - 235) / 50))
    )
    assert total(api, "apiserver_request_total", code="201") == 285
    assert total(api, "apiserver_request_total", code="429") is None


def serve_texts(texts: dict[str, str]) -> dict[str, httpx.Client]:
    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=texts[request.url.host])

    return {host: httpx.Client(transport=httpx.MockTransport(serve)) for host in texts}


def scrape_texts(texts: dict[str, str]) -> Snapshot:
    clients = serve_texts(texts)
    try:
        return scrape([Target(c, f"https://{c}/metrics", True) for c in texts], clients=clients)
    finally:
        for client in clients.values():
            client.close()


def test_phase_figures_from_two_real_scrapes() -> None:
    later = SCHEDULER_REAL.replace(
        'event="UnschedulablePodUpdatePodSchedulingGatesEliminated",queue="active"} 39',
        'event="UnschedulablePodUpdatePodSchedulingGatesEliminated",queue="active"} 139',
    ).replace('result="scheduled"} 39', 'result="scheduled"} 120')
    assert later.count("139") == 1 and later.count("120") == 1
    first = scrape_texts({"kube-scheduler": SCHEDULER_REAL, "kube-apiserver": APISERVER_REAL})
    second = scrape_texts({"kube-scheduler": later, "kube-apiserver": APISERVER_REAL})
    phase = Phase("drain", first.at, second.at)
    snaps = [first, second]
    # only the gate removals moved pods in the phase; the 200 UnschedulablePodAdd were before it
    assert queue_moves(snaps, phase) == [(("UnschedulablePodUpdatePodSchedulingGatesEliminated", "active"), 100.0)]
    assert cell(snaps, phase, "inc", "scheduler_schedule_attempts_total", {"result": "scheduled"}) == 81
    # no pod was ever unschedulable by NodeResourcesFit: the scheduler has no such series yet, and says 0
    assert total(second.values, "scheduler_unschedulable_pods", plugin="NodeResourcesFit") is None
    assert cell(snaps, phase, "peak", "scheduler_unschedulable_pods", {"plugin": "NodeResourcesFit"}) == 0
    assert cell(snaps, phase, "peak", "scheduler_unschedulable_pods", {"plugin": "SchedulingGates"}) == 161
    # the apiserver answered and never said 429: none, not "not measured"
    assert cell(snaps, phase, "inc", "apiserver_request_total", {"code": "429"}) == 0
    table = "\n".join(phase_table(snaps, [phase]))
    assert "UnschedulablePodUpdatePodSchedulingGatesEliminated -> active x100" in table
    # Kueue was not scraped: its counters are not measured, so no row
    assert math.isnan(cell(snaps, phase, "inc", "kueue_admission_attempts_total", {"result": "success"}))
    assert math.isnan(cell(snaps, phase, "peak", "kueue_pending_workloads", {"status": "active"}))
    assert "kueue attempts" not in table
    assert "api 429" not in table


def test_throttled_requests_by_verb_and_resource() -> None:
    created = 'code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",'
    assert created in APISERVER_REAL
    throttled = APISERVER_REAL + (
        f'apiserver_request_total{{{created.replace("201", "429")}verb="POST",version="v1"}} 17\n'
    )
    first = scrape_texts({"kube-apiserver": APISERVER_REAL})
    second = scrape_texts({"kube-apiserver": throttled})
    phase = Phase("burst", first.at, second.at)
    assert cell([first, second], phase, "inc", "apiserver_request_total", {"code": "429"}) == 17
    assert "api 429 in burst (verb resource x answers): POST pods x17" in "\n".join(
        phase_table([first, second], [phase])
    )


def test_a_component_that_failed_the_last_scrape_has_no_counter_figure() -> None:
    first = scrape_texts({"kube-apiserver": APISERVER_REAL})
    failed = Snapshot(first.at + 3, {}, {"kube-apiserver": "HTTP 503: unavailable"})
    phase = Phase("burst", first.at, failed.at)
    assert math.isnan(cell([first, failed], phase, "inc", "apiserver_request_total", {"code": "429"}))


def queues(at: float, depth: float, waited_01: float, waited_inf: float, other_depth: float) -> Snapshot:
    """Kueue's pod queue and an always-empty one, and kube-scheduler's queue of the same name."""
    kueue, sched = (TARGET, "kueue"), (TARGET, "kube-scheduler")
    return Snapshot(at, {
        ("workqueue_depth", (("name", "v1_pod"), kueue)): depth,
        ("workqueue_depth", (("name", "idle"), kueue)): 0.0,
        ("workqueue_depth", (("name", "v1_pod"), sched)): other_depth,
        ("workqueue_queue_duration_seconds_bucket", (("le", "0.1"), ("name", "v1_pod"), kueue)): waited_01,
        ("workqueue_queue_duration_seconds_bucket", (("le", "10"), ("name", "v1_pod"), kueue)): waited_inf,
        ("workqueue_queue_duration_seconds_bucket", (("le", "+Inf"), ("name", "v1_pod"), kueue)): waited_inf,
        ("workqueue_queue_duration_seconds_count", (("name", "v1_pod"), kueue)): waited_inf,
        ("workqueue_queue_duration_seconds_sum", (("name", "v1_pod"), kueue)): 0.0,
    })  # fmt: skip


def test_work_queues_of_one_component_with_peak_depth_and_wait() -> None:
    snaps = [queues(0, 0, 0, 0, 500), queues(5, 340, 10, 110, 900), queues(10, 12, 10, 210, 0)]
    rows = work_queues(snaps, Phase("burst", 0, 10), "kueue")
    assert [(name, depth) for name, depth, _ in rows] == [("v1_pod", 340.0)]  # the empty queue and the scheduler's not
    # 210 items waited, 10 under 0.1 s and 200 in (0.1, 10]: the p99 lies in the upper bucket
    assert rows[0][2] == pytest.approx(1000 * (0.1 + 9.9 * (0.99 * 210 - 10) / 200))
    assert work_queues(snaps, Phase("burst", 0, 10), "kube-scheduler")[0][1] == 900.0
    assert work_queues(snaps, Phase("later", 20, 30), "kueue") == []
    assert any(line.startswith("    kueue work queues in burst (queue: peak depth, p99 wait): v1_pod: 340,")
               for line in phase_table(snaps, [Phase("burst", 0, 10)]))  # fmt: skip
