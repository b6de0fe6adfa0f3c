"""The planner against the exact optimum (HiGHS on the pattern formulation, ``core.mig.exact``).

Never fewer GPUs than the optimum: that would mean a bug in the planner (an invalid packing) or
in the yardstick (a missed pattern). The bound asserted is the issue's goal, 5 % (rounded down,
so on these small instances it demands the optimum itself). Measured on this machine while
building it (docs/mig.md): 0 GPUs over the optimum on 3,000 random skewed demand vectors of 5 to
1,000 instances and on ~1,000 random clusters with current layouts; first fit decreasing was up
to 4-5 % over on the same inputs.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.mig.demand import Gpu, Isolation, SliceRequest, TenantDemand, prepare
from core.mig.exact import min_gpus, min_gpus_prepared
from core.mig.layout import layout_space
from core.mig.packing import Packer
from core.mig.planner import plan
from core.mig.profiles import MODELS, model_named


def _within_goal(used: int, optimum: int) -> bool:
    return optimum <= used <= optimum + int(0.05 * optimum)


def test_known_optima() -> None:
    space = layout_space("H100-80GB")
    assert min_gpus(space, (7, 0, 0, 0, 0, 0, 0)).gpus == 1
    assert min_gpus(space, (8, 0, 0, 0, 0, 0, 0)).gpus == 2
    assert min_gpus(space, (0, 0, 0, 0, 0, 2, 0)).gpus == 2  # one 4g.40gb per GPU
    assert min_gpus(space, (0, 0, 0, 0, 3, 0, 0)).gpus == 2  # two 3g.40gb per GPU
    assert min_gpus(space, (0, 2, 0, 0, 0, 0, 0)).gpus == 2  # one +me per GPU
    assert min_gpus(space, (1, 0, 0, 1, 1, 0, 0)).gpus == 1  # 1g + 2g + 3g
    best = min_gpus(space, (0, 0, 0, 0, 1, 1, 0))  # 4g@0 + 3g@4: 7 compute, 8 memory slices
    assert best.gpus == 1 and best.proven and best.patterns == (((0, 0, 0, 0, 1, 1, 0), 1),)
    assert min_gpus(space, (0,) * 7).gpus == 0


@settings(max_examples=150, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    weights=st.lists(st.floats(0.0, 1.0), min_size=7, max_size=7),
    size=st.integers(1, 60),
    seed=st.integers(0, 2**16),
)
def test_packing_meets_the_optimum_goal(model, weights: list[float], size: int, seed: int) -> None:
    import random

    rng = random.Random(seed)
    demand = [0] * 7
    if sum(weights) == 0:
        weights = [1.0] * 7
    for _ in range(size):
        demand[rng.choices(range(7), weights=[w**3 + 1e-9 for w in weights])[0]] += 1
    space = layout_space(model)
    packer = Packer(space)
    optimum = min_gpus(space, demand)
    assert optimum.proven
    bins = packer.pack(demand)
    # a real packing: every GPU feasible, every instance placed
    assert all(space.is_feasible(b) for b in bins)
    assert [sum(b[i] for b in bins) for i in range(7)] == demand
    assert _within_goal(len(bins), optimum.gpus), (demand, len(bins), optimum.gpus)
    ffd = packer.first_fit_decreasing(demand)
    assert all(space.is_feasible(b) for b in ffd) and len(ffd) >= optimum.gpus
    assert packer.lower_bound(demand) <= optimum.gpus


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Gpu], list[TenantDemand]]:
    model = draw(st.sampled_from(MODELS))
    layouts = layout_space(model).layouts
    with_layouts = draw(st.booleans())
    gpus = [
        Gpu(f"g{n}-{i}", f"n{n}", i, model.name, draw(st.none() | st.sampled_from(layouts)) if with_layouts else None)
        for n in range(16)
        for i in range(8)
    ]
    demands = []
    for t in range(draw(st.integers(1, 5))):
        requests = []
        for _ in range(draw(st.integers(1, 3))):
            count = draw(st.integers(1, 6))
            if draw(st.booleans()):
                requests.append(SliceRequest(model.name, count, profile=draw(st.sampled_from(model.profile_names))))
            else:
                requests.append(
                    SliceRequest(model.name, count, memory_gib=draw(st.floats(0.5, model.profiles[-1].memory_gib)))
                )
        demands.append(TenantDemand(f"t{t}", draw(st.sampled_from(list(Isolation))), tuple(requests)))
    return gpus, demands


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_planner_meets_the_optimum_goal_on_small_clusters(scenario: tuple) -> None:
    gpus, demands = scenario
    result = plan(gpus, demands, max_per_window=len(gpus))
    assert result.complete, result.unmet
    optimum, proven = min_gpus_prepared(prepare(demands, gpus))
    assert proven
    assert _within_goal(result.gpus_used, optimum), (result.gpus_used, optimum)
    # fewer GPUs is fewer stranded compute slices: stranded = 7 x GPUs - compute asked for
    model = model_named(gpus[0].model)
    asked = sum(model.profile(a.placement.profile).compute_slices for p in result.gpus for a in p.instances if a.owners)
    whole = sum(1 for p in result.gpus if p.whole_owner is not None)
    assert result.stranded()[0] == 7 * (result.gpus_used - whole) - asked
