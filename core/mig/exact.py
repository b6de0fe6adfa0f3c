"""The exact yardstick: the fewest GPUs a demand needs, from a MIP solver (HiGHS, ``highspy``).

Pattern formulation (Gilmore-Gomory): one integer variable per maximal feasible multiset P of the
model, x_P = how many GPUs are laid out as (a part of) P; cover every profile's demand,
``sum_P x_P * P[i] >= d[i]``; minimise ``sum_P x_P``. It is exact because the feasible multisets
are closed under removing instances: any packing's GPUs each use part of some maximal multiset.
With 44 maximal multisets on the GA100/GH100 geometry the model stays tiny whatever the demand,
so the optimum is found in milliseconds even for a thousand GPUs.

Used by the tests and ``bench/bench_mig.py`` to measure the planner; the planner never calls it
(``highspy`` is imported here only when a yardstick is asked for).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.mig.demand import Prepared
from core.mig.layout import Counts, LayoutSpace, layout_space


@dataclass(frozen=True)
class Optimum:
    gpus: int
    proven: bool  # False: the time limit struck first; ``gpus`` is then the best found
    patterns: tuple[tuple[Counts, int], ...]  # (maximal multiset, GPUs laid out as it)


def min_gpus(space: LayoutSpace, demand: Sequence[int], time_limit_s: float = 30.0) -> Optimum:
    """The fewest GPUs of ``space.model`` that can hold ``demand`` (instances per profile)."""
    import highspy

    demand = tuple(int(x) for x in demand)
    if len(demand) != len(space.model.profiles) or any(x < 0 for x in demand):
        raise ValueError(f"demand {demand} is not a count per profile of {space.model.name}")
    if not any(demand):
        return Optimum(0, True, ())
    patterns = space.maximal_counts
    h = highspy.Highs()
    h.silent()
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", 0.0)
    upper = sum(demand)
    xs = [h.addIntegral(lb=0, ub=upper) for _ in patterns]
    for i, need in enumerate(demand):
        if need:
            h.addConstr(sum(p[i] * x for p, x in zip(patterns, xs, strict=True) if p[i]) >= need)
    h.minimize(sum(xs))
    status = h.modelStatusToString(h.getModelStatus())
    values = [round(h.val(x)) for x in xs]
    if status not in ("Optimal", "Time limit reached") or not any(values):
        raise RuntimeError(f"HiGHS found no packing ({status}) for demand {demand} on {space.model.name}")
    chosen = tuple((p, v) for p, v in zip(patterns, values, strict=True) if v)
    return Optimum(sum(values), status == "Optimal", chosen)


def min_gpus_prepared(prepared: Prepared, time_limit_s: float = 30.0) -> tuple[int, bool]:
    """The fewest GPUs the whole prepared demand needs when supply is unlimited: each isolation
    group packed on its own (a dedicated tenant's GPUs hold nothing else), plus one GPU per
    whole-GPU need. Returns (GPUs, every group proven optimal)."""
    gpus = sum(len(needs) for needs in prepared.whole.values())
    proven = True
    for name, groups in prepared.groups.items():
        space = layout_space(name)
        for group in groups:
            best = min_gpus(space, group.counts(), time_limit_s)
            gpus += best.gpus
            proven &= best.proven
    return gpus, proven
