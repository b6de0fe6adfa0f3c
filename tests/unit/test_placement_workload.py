"""The simulated week of training jobs (core/placement/workload.py): seeded, shaped as specified,
priced from MFU, and a schedule every placer replays that never oversubscribes the nodes."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.placement import synthetic_fabric
from core.placement.workload import (
    JOB_SIZES,
    PEAK_BF16_FLOPS,
    Job,
    WorkloadError,
    WorkloadSpec,
    background_hosts,
    crossing_flows,
    generate_jobs,
    job_shape,
    schedule,
)


def test_the_week_is_seeded_sized_and_weighted_to_small_jobs() -> None:
    spec = WorkloadSpec(nodes_total=512, days=28, median_hours=2.0, sigma=0.5)
    jobs = generate_jobs(spec)
    assert jobs == generate_jobs(spec)
    other = generate_jobs(WorkloadSpec(512, days=28, seed=23, median_hours=2.0, sigma=0.5))
    assert [j.arrival_h for j in jobs] != [j.arrival_h for j in other]
    assert all(0 < j.arrival_h < 28 * 24 and 0 < j.duration_h <= spec.max_hours for j in jobs)
    assert [j.arrival_h for j in jobs] == sorted(j.arrival_h for j in jobs)
    sizes = Counter(j.nodes for j in jobs)
    assert set(sizes) == set(JOB_SIZES)
    assert sizes[2] > sizes[4] > sizes[8] > sizes[16] > sizes[32]
    # A Poisson count: within 4 standard deviations of rate x horizon.
    expected = spec.arrivals_per_hour * 28 * 24
    assert abs(len(jobs) - expected) < 4 * math.sqrt(expected), (len(jobs), expected)


def test_a_job_never_exceeds_a_small_cluster() -> None:
    jobs = generate_jobs(WorkloadSpec(nodes_total=8))
    assert jobs and {j.nodes for j in jobs} <= {2, 4, 8}


def test_compute_comes_from_mfu_and_the_gradients_all_reduce_in_buckets() -> None:
    spec = WorkloadSpec(nodes_total=128, gpu="H100", mfu=0.5, tokens_per_gpu=1000, bucket_bytes=2**30)
    params, compute_s, collectives = job_shape(4, spec)
    assert params == 13e9
    assert compute_s == pytest.approx(6 * 13e9 * 1000 / (989e12 * 0.5))
    assert sum(c.size_bytes * c.count for c in collectives) == 26e9  # bf16 gradients
    assert {c.op for c in collectives} == {"all_reduce"} and max(c.size_bytes for c in collectives) == 2**30
    _, b200, _ = job_shape(4, WorkloadSpec(nodes_total=128, gpu="B200", mfu=0.5, tokens_per_gpu=1000))
    assert b200 == pytest.approx(compute_s * PEAK_BF16_FLOPS["H100"] / PEAK_BF16_FLOPS["B200"])


def test_step_time_adds_only_the_communication_compute_cannot_hide() -> None:
    (job,) = [j for j in generate_jobs(WorkloadSpec(nodes_total=64, overlap=0.5)) if j.nodes == 2][:1]
    calls: list[tuple[str, int, tuple[str, ...]]] = []

    def each(op: str, size: int, hosts: object) -> float:
        calls.append((op, size, tuple(hosts)))  # type: ignore[arg-type]
        return 0.01

    comm = job.comm_seconds(["a", "b"], each)
    assert comm == pytest.approx(0.01 * sum(c.count for c in job.collectives))
    assert {c[2] for c in calls} == {("a", "b")}
    assert job.step_seconds(["a", "b"], each) == pytest.approx(job.compute_s + comm * 0.5)
    slow = job.step_seconds(["a", "b"], lambda *_: 1000.0)  # overlap hides at most the compute time
    assert slow == pytest.approx(job.compute_s + 1000.0 * sum(c.count for c in job.collectives) - job.compute_s)
    with pytest.raises(WorkloadError, match="needs 2 hosts, got 3"):
        job.step_seconds(["a", "b", "c"], each)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"nodes_total": 0}, "nodes_total must be positive"),
        ({"gpu": "K80"}, "gpu 'K80' has no peak"),
        ({"days": float("nan")}, "days must be a positive finite number"),
        ({"target_load": 1.5}, r"target_load must be within \[0, 1\]"),
        ({"target_load": 0.8, "background_share": 0.3}, "must not exceed 1"),
        ({"mix": {3: 1.0}}, "mix keys must be job sizes"),
        ({"mix": {2: -1.0}}, "non-negative with a positive sum"),
        ({"tokens_per_gpu": 0}, "tokens_per_gpu and bucket_bytes must be positive"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_field(change: dict[str, object], message: str) -> None:
    spec = WorkloadSpec(**{"nodes_total": 64, **change})  # type: ignore[arg-type]
    with pytest.raises(WorkloadError, match=message):
        generate_jobs(spec)


def test_background_is_a_seeded_share_of_the_hosts() -> None:
    hosts = [f"n{i:03d}" for i in range(100)]
    bg = background_hosts(hosts, WorkloadSpec(nodes_total=100, background_share=0.3))
    assert len(bg) == 30 and set(bg) <= set(hosts) and bg == sorted(bg)
    assert bg == background_hosts(list(reversed(hosts)), WorkloadSpec(nodes_total=100, background_share=0.3))
    assert bg != background_hosts(hosts, WorkloadSpec(nodes_total=100, background_share=0.3, seed=1))


def _job(i: int, arrival: float, hours: float, nodes: int) -> Job:
    return Job(f"j{i:03d}", arrival, hours, nodes, 1e9, 1.0, (), 0.0)


def test_a_small_job_backfills_past_a_big_one_waiting() -> None:
    jobs = [_job(0, 0.0, 10.0, 6), _job(1, 1.0, 5.0, 8), _job(2, 2.0, 1.0, 2), _job(3, 3.0, 1.0, 9)]
    events = schedule(jobs, 8)
    starts = {e.job.id: e.at_h for e in events if e.kind == "start"}
    assert starts == {"j000": 0.0, "j002": 2.0, "j001": 10.0}  # j003 (9 nodes) can never start
    # At 10.0 the end of j000 comes before the start of j001.
    assert [(e.at_h, e.kind, e.job.id) for e in events if e.at_h == 10.0] == [(10.0, "end", "j000"),
                                                                             (10.0, "start", "j001")]  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 50), st.floats(0.1, 20), st.sampled_from(JOB_SIZES)), max_size=25),
    st.integers(0, 40),
)
def test_the_schedule_never_oversubscribes_and_starts_every_job_that_fits(
    rows: list[tuple[float, float, int]], free: int
) -> None:
    jobs = [_job(i, a, d, n) for i, (a, d, n) in enumerate(rows)]
    events = schedule(jobs, free)
    in_use = 0
    started: dict[str, float] = {}
    for e in events:
        if e.kind == "start":
            assert e.at_h >= e.job.arrival_h and e.job.id not in started
            started[e.job.id] = e.at_h
            in_use += e.job.nodes
        else:
            assert e.at_h == pytest.approx(started[e.job.id] + e.job.duration_h)
            in_use -= e.job.nodes
        assert 0 <= in_use <= free
    assert set(started) == {j.id for j in jobs if j.nodes <= free}
    assert sum(1 for e in events if e.kind == "end") == len(started)


def test_other_jobs_crossing_leaves_put_flows_on_those_leaves_only() -> None:
    fabric = synthetic_fabric(leaf_groups=2, nodes_per_group=2)
    a0, a1, b0, b1 = "g00n000", "g00n001", "g01n000", "g01n001"
    assert crossing_flows(fabric, [[a0, a1], [b0]]) == {}  # one leaf block; a single node
    pair = crossing_flows(fabric, [[a0, b0]])  # both ring edges cross, on all 8 rails
    assert pair == {f"leaf-g0{g}-r{r}": 2.0 for g in (0, 1) for r in range(8)}
    alternating = crossing_flows(fabric, [[a0, b0, a1, b1], [a0, b0]])
    assert alternating == {f"leaf-g0{g}-r{r}": 6.0 for g in (0, 1) for r in range(8)}
