"""The MIG planner: properties that must hold for any cluster and any demand (hypothesis), and
the bad policies it must refuse with what is unmet.

Every property is checked against the plan's own data with rules written here, not by asking
the planner: each planned layout is valid (``validate_layout``, itself checked against an
independent implementation in test_mig_layout.py), isolation holds instance by instance, training
GPUs are exactly as they were, no more GPUs change than the bound allows, every window respects it,
and every instance asked for is either placed or listed as unmet.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.mig.demand import Gpu, Isolation, PlanInputError, SliceRequest, TenantDemand, resolve_profile
from core.mig.layout import Placement, counts_of, layout_space, validate_layout
from core.mig.planner import IncompletePlanError, PlanResult, plan
from core.mig.profiles import MODELS, model_named

H100 = "H100-80GB"


def _cluster(model: str, nodes: int, per_node: int = 8, **kw: object) -> list[Gpu]:
    return [Gpu(f"{model}-{n}-{i}", f"node-{n}", i, model, **kw) for n in range(nodes) for i in range(per_node)]  # type: ignore[arg-type]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Gpu], list[TenantDemand], int, int]:
    models = draw(st.lists(st.sampled_from(MODELS), min_size=1, max_size=2, unique_by=lambda m: m.name))
    tenants = [f"t{k}" for k in range(draw(st.integers(1, 5)))]
    gpus: list[Gpu] = []
    for node in range(draw(st.integers(1, 4))):
        model = draw(st.sampled_from(models))
        layouts = layout_space(model).layouts
        for index in range(draw(st.integers(1, 8))):
            layout = draw(st.none() | st.sampled_from(layouts))
            training = draw(st.booleans().map(lambda b: b and draw(st.integers(0, 5)) == 0))
            owner = draw(st.none() | st.sampled_from(tenants))
            gpus.append(Gpu(f"gpu-{node}-{index}", f"node-{node}", index, model.name, layout, training, owner))
    demands = []
    for tenant in tenants:
        requests = []
        for _ in range(draw(st.integers(0, 3))):
            model = draw(st.sampled_from(models))
            count = draw(st.integers(1, 6))
            kind = draw(st.sampled_from(["profile", "memory", "whole", "bad"]))
            if kind == "profile":
                requests.append(SliceRequest(model.name, count, profile=draw(st.sampled_from(model.profile_names))))
            elif kind == "memory":
                gib = draw(st.floats(0.5, 150.0, allow_nan=False))
                requests.append(SliceRequest(model.name, count, memory_gib=gib, compute_slices=draw(st.integers(1, 7))))
            elif kind == "whole":
                requests.append(SliceRequest(model.name, min(count, 2), whole_gpu=True))
            else:
                requests.append(SliceRequest(draw(st.sampled_from([model.name, "B200"])), count, profile="9g.1tb"))
        demands.append(TenantDemand(tenant, draw(st.sampled_from(list(Isolation))), tuple(requests)))
    return gpus, demands, draw(st.integers(0, 6)), draw(st.integers(1, 3))


def _check_plan(
    result: PlanResult, gpus: list[Gpu], demands: list[TenantDemand], per_window: int, windows: int
) -> None:
    isolation = {d.tenant: Isolation(d.isolation) for d in demands}
    by_id = {g.id: g for g in gpus}
    assert sorted(p.gpu.id for p in result.gpus) == sorted(by_id)
    for p in result.gpus:
        gpu = p.gpu
        # layouts valid under the model's placement rules; MIG off means no instance
        if p.mig_enabled:
            assert validate_layout(gpu.model, p.layout) == [], (gpu.id, p.layout)
        else:
            assert p.instances == ()
        # training GPUs exactly as they were, serving nobody
        if gpu.training:
            assert p.role == "training" and not p.changed and not p.tenants
            assert p.layout == (gpu.layout or ()) and p.mig_enabled == (gpu.layout is not None)
        # "unchanged" means what mig-parted compares: MIG mode and the multiset
        same = p.mig_enabled == (gpu.layout is not None) and (
            not p.mig_enabled or Counter(x.profile for x in p.layout) == Counter(x.profile for x in gpu.layout or ())
        )
        assert p.changed == (not same), (gpu.id, p.role)
        # isolation
        tenants = p.tenants
        for tenant in tenants:
            if isolation[tenant] is Isolation.DEDICATED:
                assert tenants == {tenant}, f"dedicated {tenant} shares {gpu.id} with {tenants - {tenant}}"
        for a in p.instances:
            if len(a.owners) > 1:
                assert all(isolation[o] is Isolation.SHARED for o in a.owners), (gpu.id, a)
        if p.whole_owner is not None:
            assert not p.mig_enabled and tenants == {p.whole_owner}
    # the disruption bound, and the drain order covering exactly the changed GPUs
    changed = {p.gpu.id for p in result.gpus if p.changed}
    assert len(changed) <= per_window * windows
    assert all(len(w) <= max(per_window, 1) for w in result.windows)
    assert sorted(result.drain_order()) == sorted(changed)
    assert all(not by_id[g].training for g in result.drain_order())
    handed = {p.gpu.id for p in result.gpus if p.used and not p.changed and p.gpu.owner not in (None, *p.tenants)}
    assert set(result.handovers) == handed and not handed & changed
    # a partial plan is never a success
    assert result.complete == (not result.unmet)
    if result.unmet:
        with pytest.raises(IncompletePlanError, match=r"leaves \d+ demand line\(s\) unmet"):
            result.raise_if_incomplete()
    else:
        result.raise_if_incomplete()


def _accounting(result: PlanResult, demands: list[TenantDemand]) -> None:
    """Instances asked for by mig and dedicated tenants = instances placed + unmet, profile by
    profile (a memory-sized request refused before it was resolved is unmet under its description)."""
    placed: Counter[tuple[str, str, str]] = Counter()
    for p in result.gpus:
        for a in p.instances:
            if len(a.owners) == 1:
                placed[(a.owners[0], model_named(p.gpu.model).name, a.placement.profile)] += 1
        if p.whole_owner is not None:
            placed[(p.whole_owner, model_named(p.gpu.model).name, "whole GPU")] += 1
    unmet: Counter[tuple[str, str, str]] = Counter()
    for u in result.unmet:
        unmet[(u.tenant, u.model, u.what)] += u.count
    for d in demands:
        if Isolation(d.isolation) is Isolation.SHARED:
            continue
        asked: Counter[tuple[str, str, str]] = Counter()
        for r in d.requests:
            try:
                model = model_named(r.model)
            except ValueError:
                continue
            if r.whole_gpu:
                asked[(d.tenant, model.name, "whole GPU")] += r.count
            elif r.profile is not None and model.has_profile(r.profile):
                asked[(d.tenant, model.name, r.profile)] += r.count
            elif r.memory_gib is not None and not unmet[(d.tenant, model.name, r.describe())]:
                prof = resolve_profile(model, r.memory_gib, r.compute_slices, r.media)
                assert prof is not None, r  # else it is unmet under its description
                asked[(d.tenant, model.name, prof.name)] += r.count
        for key, n in asked.items():
            assert placed[key] + unmet[key] == n, (key, placed[key], unmet[key], n)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_any_plan_is_valid_isolated_bounded_and_accounted(scenario: tuple) -> None:
    gpus, demands, per_window, windows = scenario
    result = plan(gpus, demands, max_per_window=per_window, windows=windows)
    _check_plan(result, gpus, demands, per_window, windows)
    _accounting(result, demands)


# --- bad policies ----------------------------------------------------------------------------


def _one(result: PlanResult, tenant: str) -> list[str]:
    return [u.reason for u in result.unmet if u.tenant == tenant]


def test_unknown_profile_model_and_unservable_size_are_unmet_with_the_reason() -> None:
    gpus = _cluster(H100, 1)
    demands = [
        TenantDemand("ok", "mig", (SliceRequest(H100, 2, profile="3g.40gb"),)),
        TenantDemand("typo", "mig", (SliceRequest(H100, 1, profile="1g.5gb"),)),
        TenantDemand("huge", "mig", (SliceRequest(H100, 1, memory_gib=100),)),
        TenantDemand("wide", "mig", (SliceRequest(H100, 1, memory_gib=5, compute_slices=8),)),
        TenantDemand("elsewhere", "mig", (SliceRequest("H200-141GB", 1, profile="1g.18gb"),)),
        TenantDemand("alien", "mig", (SliceRequest("TPUv5", 1, profile="1g.10gb"),)),
        TenantDemand("odd", "exclusive", (SliceRequest(H100, 1, profile="1g.10gb"),)),
        TenantDemand("zero", "mig", (SliceRequest(H100, 0, profile="1g.10gb"),)),
        TenantDemand("nan", "mig", (SliceRequest(H100, 1, memory_gib=float("nan")),)),
        TenantDemand("empty", "mig", (SliceRequest(H100, 1),)),
        TenantDemand("both", "mig", (SliceRequest(H100, 1, profile="1g.10gb", memory_gib=5),)),
        TenantDemand("ok", "mig", (SliceRequest(H100, 1, profile="1g.10gb"),)),
    ]
    result = plan(gpus, demands, max_per_window=8)
    assert not result.complete
    assert _one(result, "typo") == [
        "unknown profile '1g.5gb' on H100-80GB (it has: 1g.10gb, 1g.10gb+me, 1g.20gb, "
        "2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)"
    ]
    assert _one(result, "huge") == [
        "no profile of H100-80GB serves 100 GiB with 1 compute slice(s) (largest: 7g.80gb, 79.25 GiB)"
    ]
    assert _one(result, "wide")[0].startswith("no profile of H100-80GB serves 5 GiB with 8 compute slice(s)")
    assert _one(result, "elsewhere") == ["no H200-141GB GPU free of training in the inventory"]
    assert _one(result, "alien")[0].startswith("unknown GPU model 'TPUv5'")
    assert _one(result, "odd") == ["unknown isolation class 'exclusive' (dedicated, mig or shared)"]
    assert _one(result, "zero") == ["count 0 is not 1..1000000"]
    assert _one(result, "nan") == ["memory nan GiB is not a positive number"]
    assert _one(result, "empty") == ["the request names neither a profile, a memory size nor a whole GPU"]
    assert _one(result, "both") == ["name a profile or a memory size, not both"]
    assert _one(result, "ok") == ["tenant listed more than once"]  # the second listing, not the first
    placed = [a for p in result.gpus for a in p.instances if a.owners == ("ok",)]
    assert [a.placement.profile for a in placed] == ["3g.40gb", "3g.40gb"]
    with pytest.raises(IncompletePlanError, match=r"typo: 1 x 1g\.5gb on H100-80GB: unknown profile"):
        result.raise_if_incomplete()


def test_more_dedicated_tenants_than_gpus_is_refused_for_the_ones_left_over() -> None:
    gpus = [*_cluster(H100, 1, per_node=3), Gpu("train", "node-9", 0, H100, training=True)]
    demands = [TenantDemand(f"bank{k}", "dedicated", (SliceRequest(H100, 1, profile="1g.10gb"),)) for k in range(5)]
    result = plan(gpus, demands, max_per_window=8)
    why = "more dedicated tenants (5) than H100-80GB GPUs free of training (3)"
    assert [(u.tenant, u.what, u.count, u.reason) for u in result.unmet] == [
        ("bank3", "1g.10gb", 1, why),
        ("bank4", "1g.10gb", 1, why),
    ]
    served = {p.gpu.id: p.tenants for p in result.gpus if p.used}
    assert sorted(t for ts in served.values() for t in ts) == ["bank0", "bank1", "bank2"]
    assert all(len(ts) == 1 for ts in served.values())  # each bank alone on its GPU


def test_not_enough_gpus_and_the_disruption_bound_are_reasons_too() -> None:
    gpus = _cluster(H100, 1, per_node=2)
    short = plan(gpus, [TenantDemand("a", "mig", (SliceRequest(H100, 3, profile="7g.80gb"),))], max_per_window=8)
    assert [(u.count, u.reason) for u in short.unmet] == [(1, "not enough H100-80GB GPUs free of training")]
    bound = plan(gpus, [TenantDemand("a", "mig", (SliceRequest(H100, 2, profile="7g.80gb"),))], max_per_window=1)
    assert [(u.count, u.reason) for u in bound.unmet] == [
        (1, "disruption bound: no more GPUs may be reconfigured in the window(s) allowed")
    ]
    assert bound.reconfigured == 1
    two_windows = plan(
        gpus, [TenantDemand("a", "mig", (SliceRequest(H100, 2, profile="7g.80gb"),))], max_per_window=1, windows=2
    )
    assert two_windows.complete and len(two_windows.windows) == 2


def test_inventory_errors_are_the_callers_bug() -> None:
    gpu = Gpu("a", "n", 0, H100)
    with pytest.raises(PlanInputError, match="GPU 'a' is listed twice"):
        plan([gpu, gpu], [], max_per_window=1)
    with pytest.raises(PlanInputError, match="two GPUs claim index 0 on node 'n'"):
        plan([gpu, Gpu("b", "n", 0, H100)], [], max_per_window=1)
    with pytest.raises(ValueError, match="max_per_window must be a non-negative integer, not -1"):
        plan([gpu], [], max_per_window=-1)


# --- change minimisation, training GPUs, drain order ----------------------------------------


def test_gpus_whose_layout_already_serves_demand_are_kept() -> None:
    two_3g = (Placement("3g.40gb", 0), Placement("3g.40gb", 4))
    sevens = tuple(Placement("1g.10gb", k) for k in range(7))
    gpus = [Gpu(f"g{i}", "n0", i, H100, two_3g if i < 3 else sevens, owner="acme") for i in range(6)]
    gpus += [Gpu(f"g{i}", "n1", i, H100) for i in range(6, 8)]
    demands = [
        TenantDemand("acme", "mig", (SliceRequest(H100, 6, profile="3g.40gb"), SliceRequest(H100, 14, memory_gib=9)))
    ]
    result = plan(gpus, demands, max_per_window=0)  # nothing may change, and nothing needs to
    assert result.complete and result.reconfigured == 0 and result.windows == ()
    assert result.gpus_used == 5
    roles = Counter(p.role for p in result.gpus)
    assert roles == {"kept": 5, "unused": 3}
    # 3g+3g leaves one compute slice per GPU; 7 x 1g.10gb leaves memory slice 7
    assert result.stranded() == (3, 2)


def test_training_gpus_are_never_touched_even_when_they_are_the_best_fit() -> None:
    sevens = tuple(Placement("1g.10gb", k) for k in range(7))
    gpus = [Gpu("train", "n0", 0, H100, sevens, training=True, owner="trainer"), Gpu("idle", "n0", 1, H100)]
    result = plan(gpus, [TenantDemand("a", "mig", (SliceRequest(H100, 7, profile="1g.10gb"),))], max_per_window=4)
    by_id = {p.gpu.id: p for p in result.gpus}
    assert by_id["train"].role == "training" and by_id["train"].layout == sevens and not by_id["train"].tenants
    assert by_id["idle"].changed and Counter(a.placement.profile for a in by_id["idle"].instances) == {"1g.10gb": 7}


def test_drain_order_takes_idle_gpus_first_and_windows_respect_the_bound() -> None:
    gpus = [Gpu(f"busy{i}", "n0", i, H100, owner="old") for i in range(3)]
    gpus += [Gpu(f"idle{i}", "n1", i, H100) for i in range(3)]
    demands = [TenantDemand("a", "mig", (SliceRequest(H100, 5, profile="7g.80gb"),))]
    result = plan(gpus, demands, max_per_window=2, windows=3)
    assert result.complete
    assert [len(w) for w in result.windows] == [2, 2, 1]
    assert result.drain_order() == ("idle0", "idle1", "idle2", "busy0", "busy1")


def test_a_gpu_kept_for_another_tenant_is_a_handover() -> None:
    two_3g = (Placement("3g.40gb", 0), Placement("3g.40gb", 4))
    gpus = [Gpu("old", "n0", 0, H100, two_3g, owner="leaving")]
    result = plan(
        gpus, [TenantDemand("new", "dedicated", (SliceRequest(H100, 2, profile="3g.40gb"),))], max_per_window=0
    )
    assert result.complete and result.reconfigured == 0
    assert result.handovers == ("old",) and result.drain_order() == ()


def test_whole_gpus_prefer_gpus_already_without_mig() -> None:
    gpus = [Gpu("mig", "n0", 0, H100, (Placement("7g.80gb", 0),)), Gpu("plain", "n0", 1, H100)]
    result = plan(gpus, [TenantDemand("a", "mig", (SliceRequest(H100, 1, whole_gpu=True),))], max_per_window=0)
    by_id = {p.gpu.id: p for p in result.gpus}
    assert result.complete and by_id["plain"].whole_owner == "a" and not by_id["plain"].changed
    assert by_id["mig"].role == "unused"


def test_shared_tenants_pool_into_common_instances_and_mig_tenants_never_do() -> None:
    gpus = _cluster(H100, 1, per_node=2)
    demands = [
        TenantDemand("s1", "shared", (SliceRequest(H100, 1, memory_gib=4),)),
        TenantDemand("s2", "shared", (SliceRequest(H100, 1, memory_gib=4),)),
        TenantDemand("s3", "shared", (SliceRequest(H100, 1, memory_gib=6),)),
        TenantDemand("m1", "mig", (SliceRequest(H100, 2, memory_gib=4),)),
    ]
    result = plan(gpus, demands, max_per_window=2)
    owners = sorted(a.owners for p in result.gpus for a in p.instances if a.owners)
    # largest first into 1g.10gb (9.75 GiB): s3's 6 GiB alone, then s1 + s2 (8 GiB) together;
    # m1's two 4 GiB requests get an instance each
    assert owners == [("m1",), ("m1",), ("s1", "s2"), ("s3",)]
    shared = [a for p in result.gpus for a in p.instances if a.owners == ("s1", "s2")]
    assert [a.requested_gib for a in shared] == [8.0]
    assert result.gpus_used == 1


def test_invalid_current_layouts_are_noted_and_never_kept() -> None:
    bad = (Placement("3g.40gb", 0), Placement("2g.20gb", 2))  # overlapping memory slices
    demand = TenantDemand("a", "mig", (SliceRequest(H100, 1, profile="3g.40gb"),))
    result = plan([Gpu("g", "n", 0, H100, bad)], [demand], max_per_window=1)
    assert result.notes == (
        "g (n/0): current layout breaks the H100-80GB rules: 3g.40gb@0 and 2g.20gb@2 share memory slices",
    )
    (p,) = result.gpus
    assert p.changed and counts_of(model_named(H100), p.layout) == (0, 0, 0, 0, 1, 0, 0)
