"""The placement what-if (core/placement/what_if.py), its chart and ``gpufabric placement report``
from a topology JSON file: the three placers' computed choices on one schedule, summarised the
way the bench summarises the real schedulers' choices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.placement import SweepRow
from core.placement.advisor import FabricView, Request, kueue_best_fit
from core.placement.what_if import JobResult, ideal_hosts, simulate, summarise, what_if
from core.placement.workload import Job, WorkloadSpec, background_hosts, generate_jobs, schedule
from pipelines.cli_placement import app
from services.placement_chart import slowdown_figure, slowdown_png
from tests.unit.test_placement_advisor import three_blocks_of_four

PNG = b"\x89PNG\r\n\x1a\n"


def test_summaries_are_nearest_rank_shares_and_weekly_gpu_hours() -> None:
    rows = [JobResult(f"j{i}", "kueue", 2, ratio, blocks, 1, 10.0)
            for i, (ratio, blocks) in enumerate([(1.0, 1), (1.1, 2), (1.2, 2), (1.5, 3)])]  # fmt: skip
    rows.append(JobResult("j9", "kueue", 8, 1.0, 1, 1, 80.0))
    by = {(r.placer, r.nodes): r for r in summarise(rows, per_week=2.0)}
    two = by[("kueue", 2)]
    assert (two.jobs, two.median_ratio, two.p90_ratio, two.crossed_leaves) == (4, pytest.approx(1.15), 1.5, 0.75)
    assert two.lost_gpu_hours == pytest.approx(2.0 * 10.0 * (0.1 + 0.2 + 0.5))
    assert by[("kueue", 0)].jobs == 5 and by[("kueue", 0)].lost_gpu_hours == pytest.approx(two.lost_gpu_hours)


def test_each_placer_chooses_as_it_would_on_the_same_schedule() -> None:
    model = three_blocks_of_four()
    view = FabricView.from_model(model)
    assert ideal_hosts(view)[:4] == ["dgx009", "dgx010", "dgx011", "dgx012"]  # the unaffected block first
    spec = WorkloadSpec(nodes_total=12, days=3, mix={2: 1.0, 4: 1.0, 8: 0.5})
    jobs = generate_jobs(spec)
    background = background_hosts(sorted(view.hosts), spec)
    events = schedule(jobs, 12 - len(background))

    def flat(job: Job, others: object) -> object:
        return lambda hosts: 1.0

    for placer in ("unaware", "kueue-required", "advisor"):
        placed = simulate(view, events, placer, flat, background)  # type: ignore[arg-type]
        assert [j.id for j, _, _ in placed] == [e.job.id for e in events if e.kind == "start"]
        for job, hosts, others in placed:
            taken = set(background) | {h for hs in others for h in hs}
            assert len(set(hosts)) == job.nodes and not taken & set(hosts)
            if placer == "kueue-required":
                free = {h: 0 if h in taken else 8 for h in view.hosts}
                level = "block" if job.nodes <= 4 and any(
                    sum(1 for h in view.hosts if free[h] and view.value(h, "block") == b) >= job.nodes
                    for b in {view.value(h, "block") for h in view.hosts}) else "spine_group"  # fmt: skip
                assert list(hosts) == kueue_best_fit(view, free, Request(job.nodes, 8, level))
            if placer == "advisor":  # on equal cost it never takes more miscabled hosts than Kueue would
                free = {h: 0 if h in taken else 8 for h in view.hosts}
                level = "block" if job.nodes <= 4 and any(
                    sum(1 for h in view.hosts if free[h] and view.value(h, "block") == b) >= job.nodes
                    for b in {view.value(h, "block") for h in view.hosts}) else "spine_group"  # fmt: skip
                own = kueue_best_fit(view, free, Request(job.nodes, 8, level)) or []
                assert len(set(hosts) & set(view.miscabled)) <= len(set(own) & set(view.miscabled))
    with pytest.raises(ValueError, match="unknown placer 'random'; one of unaware, kueue-required, advisor"):
        simulate(view, events, "random", flat, background)  # type: ignore[arg-type]


def test_the_week_on_a_faulty_fabric_costs_the_blind_placer_most() -> None:
    result = what_if(three_blocks_of_four(), "H100-SXM5-80GB", days=7)
    assert (result.hosts, result.degraded_blocks, result.miscabled_hosts) == (12, 1, 2)
    assert {r.nodes for r in result.results} <= {2, 4, 8} and result.jobs >= len(result.results) // 3
    assert all(r.ratio >= 1 - 1e-9 for r in result.results)  # nothing beats one unaffected leaf block
    total = {r.placer: r for r in result.rows if r.nodes == 0}
    assert set(total) == {"unaware", "kueue-required", "advisor"}
    # Each advice is never worse than Kueue's own choice at that moment (test_placement_advisor);
    # over a week the states part ways, so only the blind placer's loss is ordered here.
    placed_by_topology = max(total["advisor"].lost_gpu_hours, total["kueue-required"].lost_gpu_hours)
    assert total["unaware"].lost_gpu_hours > placed_by_topology
    assert total["unaware"].crossed_leaves > total["kueue-required"].crossed_leaves
    with pytest.raises(ValueError, match="no peak FLOP/s for GPU model 'A100-SXM4-80GB'"):
        what_if(three_blocks_of_four(), "A100-SXM4-80GB")


def _sweep() -> list[SweepRow]:
    rows = []
    for case, per_leaf in (("1:1", 0.0), ("4:1", 0.2)):
        for load in (0.0, 1.0):
            for leaves in (1, 2, 4):
                slow = per_leaf * load * (leaves > 1)
                rows.append(SweepRow(case, load, leaves, 1 << 30, 0.3, 1.0, 1.0 + slow, 0.1, "uplink"))
    return rows


def test_the_chart_has_a_panel_per_load_and_a_line_per_oversubscription() -> None:
    fig = slowdown_figure(_sweep())
    panels = fig.get_axes()
    assert [ax.get_title(loc="left") for ax in panels] == ["other jobs at 0% of NIC rate",
                                                          "other jobs at 100% of NIC rate"]  # fmt: skip
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in panels[1].get_lines()}
    assert lines == {"1:1": [0.0, 0.0, 0.0], "4:1": [0.0, pytest.approx(20.0), pytest.approx(20.0)]}
    assert slowdown_png(_sweep()).startswith(PNG)
    with pytest.raises(ValueError, match="no sweep rows for 1024 bytes"):
        slowdown_figure(_sweep(), size_bytes=1024)


def test_report_from_a_topology_file(tmp_path: Path) -> None:
    doc = tmp_path / "topology.json"
    doc.write_text(json.dumps(three_blocks_of_four().to_json(version=3), default=str))
    chart = tmp_path / "chart.png"
    out = CliRunner().invoke(app, ["report", "--topology-json", str(doc), "--days", "2", "--usd-per-gpu-hour", "4",
                                   "--png", str(chart)], env={"COLUMNS": "200"})  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "topology topology.json: 12 hosts" in out.output
    assert "1 degraded leaf blocks, 2 miscabled hosts" in out.output
    for placer in ("unaware", "kueue-required", "advisor"):
        assert placer in out.output
    assert chart.read_bytes().startswith(PNG) and f"chart written to {chart}" in out.output
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    failed = CliRunner().invoke(app, ["report", "--topology-json", str(bad)], env={"COLUMNS": "300"})
    assert failed.exit_code == 1 and "bad.json: not a topology JSON document (JSONDecodeError" in failed.output
