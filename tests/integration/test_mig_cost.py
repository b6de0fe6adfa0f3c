"""MIG slice cost and stranded slices in the FOCUS cost fact (issue 21, part 5).

One scratch database, three hours of a small cluster landed through the collector's own path
(``connectors.kube.pods`` node and pod parsing, ``assets.finops.land_pod_snapshots``), one
``dbt build`` of the cost fact with a site idle owner, then the lines are checked exactly:

* ``mig-a`` (2 x H100, owner label ``acme``): GPU 0 split 3g.40gb + 3g.40gb (1 compute slice no
  instance covers), GPU 1 4g.40gb + 2g.20gb + 1g.10gb. Pods hold both 3g instances and the 4g for
  two hours, the 2g for half an hour; the 1g stays free. At 12:10 the node is re-laid 7g.80gb x 2.
* ``gpu-plain`` (1 H100, no owner label, no MIG): idle goes to the site's idle owner.
* ``mig-bad`` / ``mig-over``: an unreadable layout and one covering more slices than the node has:
  no stranded line, the reason in the idle line's Tags.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from psycopg.rows import dict_row

from connectors.kube.pods import node_snapshot, parse_pods
from connectors.prometheus.storage import land_samples
from connectors.warehouse import Warehouse, open_warehouse
from core.finops.focus import CRITERIA, ExportOptions
from core.finops.focus_rules import evaluate, load_model
from core.finops.money import round_line
from core.mig.demand import SliceRequest, TenantDemand
from core.mig.sizing import SizingPolicy
from core.telemetry import parse_matrix
from services.finops_export import export_focus, load_currency_codes, read_focus
from services.mig import MigConfig
from services.mig.history import history_demands, read_history, with_history
from services.pod_snapshots import land_pod_snapshots
from services.price_book import load_price_book, run_dbt
from settings import load_settings

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
PRICE_FILE = ROOT / "tests" / "fixtures" / "finops" / "rate_cards.yaml"
FOCUS_FIXTURES = ROOT / "tests" / "fixtures" / "focus"
H100 = "NVIDIA-H100-80GB-HBM3"
H100_LIST = Decimal("4.00")  # the "*" card: idle and stranded lines are priced at list
CLUSTER = "migc"
T0 = datetime(2026, 5, 4, 10, tzinfo=UTC)
FIRST, SECOND = T0 + timedelta(minutes=5), T0 + timedelta(hours=2, minutes=10)
LAYOUT_A = {"nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-4g.40gb": "1", "nvidia.com/mig-2g.20gb": "1",
            "nvidia.com/mig-1g.10gb": "1"}
LAYOUT_B = {"nvidia.com/mig-7g.80gb": "2"}


def node(name: str, gpus: int, allocatable: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    gfd = {"nvidia.com/gpu.product": H100, "nvidia.com/gpu.count": str(gpus), "nvidia.com/mig.capable": "true"}
    if any(k.startswith("nvidia.com/mig-") for k in allocatable):
        gfd["nvidia.com/mig.strategy"] = "mixed"
    return {"metadata": {"name": name, "labels": {**gfd, **(labels or {})}},
            "status": {"allocatable": {"cpu": "96", **allocatable}}}


def nodes(layout_a: dict[str, str]) -> list[dict[str, Any]]:
    return [
        node("mig-a", 2, {**layout_a, "nvidia.com/gpu": "0"}, {"gpufabric.io/owner": "acme"}),
        node("gpu-plain", 1, {"nvidia.com/gpu": "1"}),
        node("mig-bad", 2, {"nvidia.com/mig-3g.40gb": "two", "nvidia.com/mig-9g.1tb": "1"},
             {"gpufabric.io/owner": "Not A Label!"}),
        node("mig-over", 2, {"nvidia.com/mig-7g.80gb": "3", "nvidia.com/gpu": "0"}),
    ]


def pod(name: str, node_name: str, resource: str, end: datetime | None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running", "startTime": T0.isoformat()}
    if end is not None:
        status = {"phase": "Succeeded", "startTime": T0.isoformat(), "containerStatuses": [
            {"state": {"terminated": {"finishedAt": end.isoformat()}}}]}
    agent_type = "evaluator" if resource == "nvidia.com/gpu" else "inference"
    labels = {"gpufabric.io/client": "initech", "gpufabric.io/task": "serve", "gpufabric.io/agent-type": agent_type,
              "gpufabric.io/tier": "standard", "gpufabric.io/root-id": name, "gpufabric.io/depth": "0"}
    return {"metadata": {"name": name, "namespace": "inf", "uid": f"uid-{name}", "labels": labels},
            "spec": {"nodeName": node_name, "containers": [{"resources": {"requests": {resource: "1"}}}]},
            "status": status}


PODS = [  # name, node, resource, end
    ("p3a", "mig-a", "nvidia.com/mig-3g.40gb", T0 + timedelta(hours=2)),
    ("p3b", "mig-a", "nvidia.com/mig-3g.40gb", T0 + timedelta(hours=2)),
    ("p4", "mig-a", "nvidia.com/mig-4g.40gb", T0 + timedelta(hours=2)),
    ("p2", "mig-a", "nvidia.com/mig-2g.20gb", T0 + timedelta(minutes=30)),
    ("whole", "gpu-plain", "nvidia.com/gpu", T0 + timedelta(minutes=45)),
]


@pytest.fixture(scope="module")
def built(warehouse: Warehouse, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[tuple[list[dict[str, Any]], Warehouse]]:
    with warehouse.scratch_database("t_migcost") as url:
        wh = open_warehouse(url)
        try:
            with wh.connect() as conn:
                load_price_book(conn, load_settings(PRICE_FILE).rate_cards, str(PRICE_FILE))
                running = parse_pods([pod(n, nd, r, None) for n, nd, r, _ in PODS], cluster=CLUSTER,
                                     collected_at=FIRST)
                done = parse_pods([pod(n, nd, r, e) for n, nd, r, e in PODS], cluster=CLUSTER, collected_at=SECOND)
                for at, pods, layout in ((FIRST, running, LAYOUT_A), (SECOND, done, LAYOUT_B)):
                    land_pod_snapshots(conn, run_id=f"migc-{uuid.uuid4().hex[:8]}", cluster=CLUSTER, pods=pods,
                                       nodes=[node_snapshot(n, cluster=CLUSTER, collected_at=at)
                                              for n in nodes(layout)], started_at=at)
                conn.commit()
            run_dbt(wh, ["build", "--select", "+gpu_cost_hourly int_finops_reconciliation"],
                    target_dir=tmp_path_factory.mktemp("dbt-migcost"), dbt_vars={"finops_idle_owner": "platform"})
            with wh.connect() as conn:
                # after the build, so the cost fact is what it would be without them: framebuffer
                # peaks of the 3g pods (MiB), one sample each way off the window's end
                land_samples(conn, parse_matrix(fb_matrix()), run_id="migc-fb", device="sim-migc", started_at=T0)
                conn.commit()
            with wh.connect() as conn, conn.cursor(row_factory=dict_row) as cur:
                cost = cur.execute('SELECT * FROM finops.gpu_cost_hourly ORDER BY "ChargePeriodStart", "ResourceId", '
                                   '"x_CostBasis"').fetchall()
            yield cost, wh
        finally:
            wh.dispose()


def fb_matrix() -> list[dict[str, Any]]:
    out = []
    for name, instance, peaks in (("p3a", "1", (20_000.0, 30_720.0)), ("p3b", "2", (10_240.0,)),
                                  ("p4", "1", (12_000.0,))):
        labels = {"__name__": "DCGM_FI_DEV_FB_USED", "gpu": "0", "UUID": f"GPU-{name}", "Hostname": "mig-a",
                  "modelName": "NVIDIA H100 80GB HBM3", "GPU_I_ID": instance, "GPU_I_PROFILE": "3g.40gb",
                  "namespace": "inf", "pod": name, "container": "main"}
        values = [[(T0 + timedelta(minutes=10 * (i + 1))).timestamp(), repr(v)] for i, v in enumerate(peaks)]
        values.append([(T0 + timedelta(hours=30)).timestamp(), "70000.0"])  # outside the window: not read
        out.append({"metric": labels, "values": values})
    return out


@pytest.fixture(scope="module")
def fact(built: tuple[list[dict[str, Any]], Warehouse]) -> list[dict[str, Any]]:
    return built[0]


def lines(fact: list[dict[str, Any]], node_name: str, hour: int, basis: str = "allocation") -> list[dict[str, Any]]:
    return [r for r in fact if r["x_Node"] == node_name and r["ChargePeriodStart"] == T0 + timedelta(hours=hour)
            and r["x_CostBasis"] == basis]


def test_stranded_slice_and_free_instance_on_the_owners_idle_lines(fact: list[dict[str, Any]]) -> None:
    hour = lines(fact, "mig-a", 0)
    work = {r["ResourceName"]: r["ConsumedQuantity"] for r in hour if r["x_LineType"] == "workload"}
    assert work == {"inf/p3a": round_line(Fraction(3, 7)), "inf/p3b": round_line(Fraction(3, 7)),
                    "inf/p4": round_line(Fraction(4, 7)), "inf/p2": round_line(Fraction(2, 7) / 2)}
    idle = {r["x_IdleReason"]: r for r in hour if r["x_LineType"] == "idle"}
    assert set(idle) == {"unallocated", "stranded-mig"}
    stranded, free = idle["stranded-mig"], idle["unallocated"]
    # 14 compute slices on two MIG GPUs, 13 covered by instances: one slice, 1/7 GPU-hour
    assert stranded["ConsumedQuantity"] == round_line(Fraction(1, 7)) == Decimal("0.142857143")
    assert stranded["x_GpuUnits"] == Decimal("0.142857143")
    assert stranded["ResourceId"] == f"{CLUSTER}/mig-a/stranded-mig"
    assert stranded["ResourceType"] == "Stranded MIG slices" and stranded["ChargeCategory"] == "Usage"
    assert stranded["x_MigWeightPolicy"] == "compute-slices-over-7/v1"
    # idle lines are priced at list from their rounded quantity (ListUnitPrice x PricingQuantity = ListCost)
    assert stranded["ListCost"] == stranded["EffectiveCost"] == round_line(Fraction(Decimal("0.142857143")) * 4)
    assert stranded["x_CapacityGpuHours"] is None and free["x_CapacityGpuHours"] == 2
    # the free 1g instance all hour (1/7) and the 2g after its pod ended (2/7 x 1/2)
    assert free["ConsumedQuantity"] == 2 - sum(work.values()) - stranded["ConsumedQuantity"] == Decimal("0.285714285")
    for line in (stranded, free):
        assert (line["SubAccountId"], line["SubAccountName"]) == ("acme", "Acme Research (pretraining)")
        assert line["Tags"]["mig-layout"] == "1g.10gb x1, 2g.20gb x1, 3g.40gb x2, 4g.40gb x1"
        assert line["ListUnitPrice"] == H100_LIST
    assert all(r["x_IdleReason"] is None for r in hour if r["x_LineType"] == "workload")


def test_every_node_hour_sums_to_the_gpu_hours_bought(fact: list[dict[str, Any]]) -> None:
    totals: dict[tuple[str, datetime, str], Decimal] = {}
    capacity: dict[tuple[str, datetime, str], Decimal] = {}
    for r in fact:
        key = (r["x_Node"], r["ChargePeriodStart"], r["x_CostBasis"])
        totals[key] = totals.get(key, Decimal(0)) + r["ConsumedQuantity"]
        if r["x_CapacityGpuHours"] is not None:
            assert key not in capacity  # capacity is carried once per node-hour
            capacity[key] = r["x_CapacityGpuHours"]
        assert r["ConsumedQuantity"] >= 0
    expected = {"mig-a": 2, "gpu-plain": 1, "mig-bad": 2, "mig-over": 2}
    assert len(totals) == 4 * 3 * 2  # four nodes, hours 10-12, two bases
    assert totals == {k: Decimal(expected[k[0]]) for k in totals} == capacity


def test_a_relaid_node_strands_nothing_in_the_hour_of_its_new_layout(fact: list[dict[str, Any]]) -> None:
    second = lines(fact, "mig-a", 1)
    assert [r["x_IdleReason"] for r in second if r["x_LineType"] == "idle"] == ["unallocated", "stranded-mig"]
    assert {r["x_IdleReason"]: r["ConsumedQuantity"] for r in second if r["x_LineType"] == "idle"} == {
        "unallocated": 2 - 2 * round_line(Fraction(3, 7)) - round_line(Fraction(4, 7)) - round_line(Fraction(1, 7)),
        "stranded-mig": round_line(Fraction(1, 7))}
    third = lines(fact, "mig-a", 2)  # 7g.80gb x 2 from 12:10: every slice covered, no pod
    assert [(r["x_IdleReason"], r["ConsumedQuantity"]) for r in third] == [("unallocated", 2)]
    assert third[0]["Tags"]["mig-layout"] == "7g.80gb x2"


def test_usage_basis_strands_the_same_slices(fact: list[dict[str, Any]]) -> None:
    usage = {r["x_IdleReason"]: r["ConsumedQuantity"] for r in lines(fact, "mig-a", 0, "usage")
             if r["x_LineType"] == "idle"}
    assert usage["stranded-mig"] == round_line(Fraction(1, 7))


def test_nodes_without_an_owner_go_to_the_site_idle_owner(fact: list[dict[str, Any]]) -> None:
    plain = lines(fact, "gpu-plain", 0)
    idle = [r for r in plain if r["x_LineType"] == "idle"]
    assert [(r["x_IdleReason"], r["SubAccountId"], r["ConsumedQuantity"]) for r in idle] == [
        ("unallocated", "platform", Decimal("0.250000000"))]
    assert idle[0]["Tags"] == {"cluster": CLUSTER, "node": "gpu-plain"}  # no MIG: no layout keys


def test_unreadable_or_impossible_layouts_strand_nothing_and_say_why(fact: list[dict[str, Any]]) -> None:
    bad = lines(fact, "mig-bad", 0)
    assert [(r["x_IdleReason"], r["ConsumedQuantity"]) for r in bad] == [("unallocated", 2)]
    issue = bad[0]["Tags"]["mig-layout-issue"]
    assert issue.startswith("unreadable MIG resources: ") and "nvidia.com/mig-3g.40gb=two" in issue
    assert "nvidia.com/mig-9g.1tb=1" in issue
    assert bad[0]["SubAccountId"] == "platform"  # the owner label is not a label value: site owner
    over = lines(fact, "mig-over", 0)
    assert [(r["x_IdleReason"], r["ConsumedQuantity"]) for r in over] == [("unallocated", 2)]
    assert over[0]["Tags"]["mig-layout-issue"] == (
        "MIG instances cover more compute slices than the node's MIG GPUs have")


def test_history_sizes_slices_from_rates_and_framebuffer(built: tuple[list[dict[str, Any]], Warehouse]) -> None:
    wh = built[1]
    since, until = T0, T0 + timedelta(hours=24)
    with wh.connect() as conn:
        history = {(h.tenant, h.agent_type, h.model): h for h in read_history(conn, since=since, until=until)}
        site = (TenantDemand("initech", "dedicated", ()), TenantDemand("acme", "mig", (SliceRequest("H100-80GB", 1,
                                                                                                    "1g.10gb"),)))
        demands, sized = history_demands(conn, site, since=since, until=until, policy=SizingPolicy(
            concurrency_quantile=1.0, min_memory_samples=2))
    inference = history[("initech", "inference", H100)]
    # hour 10: 3 pods all hour + p2 half an hour; hour 11: 3 pods (p3a, p3b, p4)
    assert inference.hours == 24 and inference.pods == 4 and inference.hourly_pods == (3.5, 3.0)
    assert sorted(inference.fb_used_mib) == [10_240.0, 12_000.0, 30_720.0]  # p2 unmeasured; late sample not read
    assert inference.profile == "3g.40gb" and inference.gpus_per_pod == 0
    evaluator = history[("initech", "evaluator", H100)]
    assert (evaluator.pods, evaluator.hourly_pods, evaluator.fb_used_mib, evaluator.gpus_per_pod) == (1, (0.75,), (), 1)
    assert set(history) == {("initech", "inference", H100), ("initech", "evaluator", H100)}
    # initech: listed without slices -> its history under its site class; acme keeps its own slices
    by_tenant = {d.tenant: d for d in demands}
    assert by_tenant["acme"].requests == (SliceRequest("H100-80GB", 1, "1g.10gb"),)
    assert by_tenant["initech"].isolation == "dedicated"
    # 4 pods at the peak hour, sized by the p99 of 30 GiB x 1.2 = 36 GiB; the whole-GPU pod as asked
    assert set(by_tenant["initech"].requests) == {
        SliceRequest("H100-80GB", 4, memory_gib=36.0), SliceRequest("H100-80GB", 1, whole_gpu=True)}
    assert sized.skipped == []
    # What mig/plan and `gpufabric mig plan` do with mig.history_hours: the config's demand completed
    # from the window ending now (24 h after T0 here), unchanged without it.
    cfg = MigConfig(demands=site, max_per_window=3)
    with wh.connect() as conn:
        same, none = with_history(cfg, conn, hours=None, now=until)
        planned, from_history = with_history(cfg, conn, hours=24, now=until)
        expected, _ = history_demands(conn, site, since=since, until=until)  # the default sizing policy
    assert same is cfg and none is None
    assert from_history is not None and planned.max_per_window == 3
    assert planned.demands == expected and planned.demands != site


def test_owned_and_stranded_idle_lines_pass_the_focus_1_2_rules(built: tuple[list[dict[str, Any]], Warehouse],
                                                               tmp_path: Path) -> None:
    path = tmp_path / "focus-mig.csv"
    with built[1].connect() as conn:
        export_focus(conn, path, ExportOptions(version="1.2"))
    columns, rows = read_focus(path)
    exported = list(rows())
    assert any(r["ResourceId"] == f"{CLUSTER}/mig-a/stranded-mig"
               and r["SubAccountName"] == "Acme Research (pretraining)" for r in exported)
    assert any(r["SubAccountId"] == "platform" and r["SubAccountName"] == "platform" for r in exported)
    model = load_model((FOCUS_FIXTURES / "model-1.2.0.1.json").read_text())
    report = evaluate(model, CRITERIA, columns, iter(exported),
                      load_currency_codes(FOCUS_FIXTURES / "currency_codes.csv"))
    assert report.passed, [(o.rule_id, o.message, o.violations) for o in report.failures]
    # allocation basis: 12 node-hours' unallocated lines, 2 stranded lines, 8 pod-hour lines
    assert report.rows == len(exported) == 12 + 2 + 8
