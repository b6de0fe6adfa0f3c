"""The MIG planner (part 2 of issue 21): per-GPU layouts from tenant demand, isolation and the
current layouts, with a bound on how many GPUs one window may reconfigure.

Per GPU model, in this order:

1. **Training GPUs are frozen**: never reconfigured, never given demand.
2. **Whole GPUs** go first to GPUs already MIG-disabled (the tenant's own, then idle ones).
3. **Keep what already serves.** Each isolation group (one per dedicated tenant, then the pool of
   mig + shared tenants) keeps GPUs whose current instances all match its remaining demand, as
   long as keeping them needs no more GPUs than packing from scratch (checked with the packer).
4. **Pack the rest** (:class:`core.mig.packing.Packer`: LP rounding or the greedy over maximal
   multisets, whichever needs fewer GPUs, then the least-filled GPUs re-solved exactly),
   preferring multisets some GPU already has.
5. **Reuse identical layouts**: a packed multiset lands, unchanged, on a GPU whose current
   multiset is the same (mig-parted compares counts, so such a GPU is not touched).
6. **Reconfigure within the bound**: the remaining multisets need a change each; at most
   ``max_per_window x windows`` GPUs may change. If more are needed, GPUs whose current instances
   serve part of the remaining demand are kept after all (their unused instances stranded) and the
   rest is re-packed; what still does not fit is :class:`~core.mig.demand.Unmet` with the reason.
   GPUs to reconfigure are taken idle first (no owner, then no instances), then node by node, so
   few nodes are touched.
7. **Drain order**: the reconfigured GPUs in that same order, cut into windows of at most
   ``max_per_window``. GPUs kept as they are but given to tenants other than their current owner
   are listed apart (``handovers``): nothing to reconfigure, but the owner's pods must leave first.

A plan that leaves anything unmet is not a success: ``PlanResult.complete`` is false and
:meth:`PlanResult.raise_if_incomplete` raises with the list.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.mig.demand import Gpu, Group, Need, Prepared, TenantDemand, Unmet, prepare
from core.mig.layout import Counts, Layout, Placement, counts_of, layout_space, validate_layout
from core.mig.packing import Packer, meet, sub, total
from core.mig.profiles import GpuModel, UnknownModelError, model_named


@dataclass(frozen=True)
class Assignment:
    """One instance of a planned layout and whom it serves (``owners`` empty: a spare instance)."""

    placement: Placement
    owners: tuple[str, ...]
    requested_gib: float | None = None


@dataclass(frozen=True)
class GpuPlan:
    """What one GPU becomes. ``role``: training | kept | unchanged | reconfigured | unused | unmodelled."""

    gpu: Gpu
    mig_enabled: bool
    instances: tuple[Assignment, ...]
    whole_owner: str | None  # MIG disabled, the whole GPU to this tenant
    role: str
    changed: bool

    @property
    def layout(self) -> Layout:
        return tuple(a.placement for a in self.instances)

    @property
    def tenants(self) -> frozenset[str]:
        owners = {o for a in self.instances for o in a.owners}
        if self.whole_owner is not None:
            owners.add(self.whole_owner)
        return frozenset(owners)

    @property
    def used(self) -> bool:
        return self.role != "training" and bool(self.tenants)


class IncompletePlanError(RuntimeError):
    """A plan that leaves demand unmet was about to be treated as a success."""

    def __init__(self, unmet: Sequence[Unmet]) -> None:
        self.unmet = tuple(unmet)
        lines = "\n  ".join(str(u) for u in unmet)
        super().__init__(f"the MIG plan leaves {len(unmet)} demand line(s) unmet:\n  {lines}")


@dataclass(frozen=True)
class PlanResult:
    gpus: tuple[GpuPlan, ...]
    unmet: tuple[Unmet, ...]
    windows: tuple[tuple[str, ...], ...]  # GPU ids to drain and reconfigure, window by window, in order
    max_per_window: int
    notes: tuple[str, ...]  # e.g. current layouts that break the rules
    # GPUs left as they are but handed from their current owner to other tenants: not a
    # reconfiguration (not counted against the bound), but the old owner's pods must be drained
    # before the new tenants' land, or isolation is broken in between
    handovers: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.unmet

    def raise_if_incomplete(self) -> None:
        if self.unmet:
            raise IncompletePlanError(self.unmet)

    @property
    def gpus_used(self) -> int:
        return sum(1 for g in self.gpus if g.used)

    @property
    def reconfigured(self) -> int:
        return sum(1 for g in self.gpus if g.changed)

    def stranded(self) -> tuple[int, int]:
        """(compute, memory) slices on used MIG GPUs that serve nobody."""
        compute = memory = 0
        for g in self.gpus:
            if not g.used or not g.mig_enabled:
                continue
            model = model_named(g.gpu.model)
            served = [a for a in g.instances if a.owners]
            compute += model.compute_slices - sum(model.profile(a.placement.profile).compute_slices for a in served)
            memory += model.memory_slices - sum(model.profile(a.placement.profile).memory_slices for a in served)
        return compute, memory

    def drain_order(self) -> tuple[str, ...]:
        return tuple(gpu_id for window in self.windows for gpu_id in window)


@dataclass
class _Target:
    gpu: Gpu
    group: Group | None  # None: whole GPU
    counts: Counts | None  # None: MIG disabled
    changed: bool
    role: str
    whole_need: Need | None = None


def _state(gpu: Gpu, model: GpuModel) -> tuple[bool, Counts | None]:
    """(current layout valid, its multiset); MIG-disabled GPUs are valid with no multiset."""
    if gpu.layout is None:
        return True, None
    if validate_layout(model, gpu.layout):
        return False, None
    return True, counts_of(model, gpu.layout)


def plan(
    gpus: Sequence[Gpu],
    demands: Iterable[TenantDemand],
    *,
    max_per_window: int,
    windows: int = 1,
) -> PlanResult:
    """Plan MIG layouts for ``gpus`` serving ``demands``, reconfiguring at most
    ``max_per_window`` GPUs in each of ``windows`` windows (one planning run = one window by default)."""
    if isinstance(max_per_window, bool) or not isinstance(max_per_window, int) or max_per_window < 0:
        raise ValueError(f"max_per_window must be a non-negative integer, not {max_per_window!r}")
    if isinstance(windows, bool) or not isinstance(windows, int) or windows < 1:
        raise ValueError(f"windows must be a positive integer, not {windows!r}")
    prepared = prepare(demands, gpus)
    unmet = list(prepared.unmet)
    notes: list[str] = []
    plans: list[GpuPlan] = []
    budget = max_per_window * windows
    by_model: dict[str, list[Gpu]] = defaultdict(list)
    for gpu in gpus:
        try:
            by_model[model_named(gpu.model).name].append(gpu)
        except UnknownModelError:
            plans.append(_unchanged(gpu, "unmodelled"))
            notes.append(f"{gpu.id} ({gpu.node}/{gpu.index}): GPU model {gpu.model!r} is not modelled; left as it is")
    for name in sorted(by_model):
        model = model_named(name)
        model_plans, model_unmet, budget = _plan_model(model, by_model[name], prepared, budget, notes)
        plans += model_plans
        unmet += model_unmet
    order = {gpu.id: i for i, gpu in enumerate(gpus)}
    plans.sort(key=lambda p: order[p.gpu.id])
    changed = [p.gpu for p in plans if p.changed]
    drain = sorted(changed, key=_disruption)
    cut = max(max_per_window, 1)
    windows_out = tuple(tuple(g.id for g in drain[i : i + cut]) for i in range(0, len(drain), cut))
    handovers = tuple(
        p.gpu.id for p in plans if p.used and not p.changed and p.gpu.owner is not None and p.gpu.owner not in p.tenants
    )
    return PlanResult(tuple(plans), tuple(unmet), windows_out, max_per_window, tuple(notes), handovers)


def _disruption(gpu: Gpu) -> tuple[bool, bool, str, int]:
    """Which GPUs to reconfigure (and drain) first: nobody's before someone's, no instances to tear
    down before some, then node by node so few nodes are touched."""
    return gpu.owner is not None, bool(gpu.layout), gpu.node, gpu.index


def _unchanged(gpu: Gpu, role: str) -> GpuPlan:
    instances = tuple(Assignment(p, ()) for p in gpu.layout or ())
    return GpuPlan(gpu, gpu.layout is not None, instances, None, role, False)


def _owner_rank(gpu: Gpu, tenant: str | None) -> int:
    """Which free GPU a group or a whole-GPU tenant takes first: its own, then idle, then others'."""
    if gpu.owner is not None and gpu.owner == tenant:
        return 0
    return 1 if gpu.owner is None else 2


def _plan_model(
    model: GpuModel, gpus: list[Gpu], prepared: Prepared, budget: int, notes: list[str]
) -> tuple[list[GpuPlan], list[Unmet], int]:
    """Plan one model's GPUs; returns the plans, what is unmet, and the reconfiguration budget left."""
    space = layout_space(model)
    packer = Packer(space)
    width = len(model.profiles)
    plans = [_unchanged(g, "training") for g in gpus if g.training]
    free: dict[str, Gpu] = {}
    current: dict[str, Counts | None] = {}  # None: MIG disabled, or a layout that breaks the rules
    for gpu in sorted((g for g in gpus if not g.training), key=lambda g: (g.node, g.index, g.id)):
        valid, counts = _state(gpu, model)
        if not valid:
            why = "; ".join(v.message for v in validate_layout(model, gpu.layout or ()))
            notes.append(f"{gpu.id} ({gpu.node}/{gpu.index}): current layout breaks the {model.name} rules: {why}")
        current[gpu.id] = counts
        free[gpu.id] = gpu
    targets: list[_Target] = []
    groups = prepared.groups.get(model.name, [])
    by_key = {grp.key: grp for grp in groups}
    remaining: dict[str, Counts] = {grp.key: grp.counts() for grp in groups}

    # 2. whole GPUs onto GPUs already MIG-disabled: the tenant's own, then idle ones
    pending_whole: list[Need] = []
    for need in prepared.whole.get(model.name, []):
        tenant = need.owners[0]
        spots = [g for g in free.values() if g.layout is None]
        if not spots:
            pending_whole.append(need)
            continue
        gpu = min(spots, key=lambda g: (_owner_rank(g, tenant), g.node, g.index))
        del free[gpu.id]
        targets.append(_Target(gpu, None, None, False, "unchanged", need))

    # 3. keep GPUs whose current instances all match remaining demand, if that costs no extra GPU
    for grp in groups:
        d = remaining[grp.key]
        if not any(d):
            continue
        allowed = len(packer.pack(d))
        classes: dict[Counts, list[Gpu]] = defaultdict(list)
        for gpu in free.values():
            counts = current[gpu.id]
            if counts is not None and any(counts):
                classes[counts].append(gpu)
        for counts in sorted(classes, key=lambda c: (-packer.fill(c), c)):
            members = sorted(classes[counts], key=lambda g: (_owner_rank(g, grp.dedicated_tenant), g.node, g.index))
            most = min((x // c for x, c in zip(d, counts, strict=True) if c), default=0)
            k = _largest_keep(packer, d, counts, min(most, len(members)), allowed)
            for gpu in members[:k]:
                del free[gpu.id]
                targets.append(_Target(gpu, grp, counts, False, "kept"))
            allowed -= k
            d = sub(d, tuple(c * k for c in counts))
        remaining[grp.key] = d

    # 4.-5. pack the rest; a packed multiset some free GPU already has lands there unchanged
    prefer = frozenset(c for c in current.values() if c is not None and any(c))
    left = _pack_and_reuse(packer, groups, remaining, free, current, targets, prefer)

    # 6. the bound is short: keep GPUs that serve part of the rest as they are, then re-pack
    if len(left) + len(pending_whole) > budget:
        for grp in groups:
            remaining[grp.key] = total((c for g, c in left if g is grp), width)
        for gpu in sorted(free.values(), key=lambda g: (g.owner is not None, g.node, g.index)):
            now = current[gpu.id]
            if now is None or not any(now) or not groups:
                continue
            has: Counts = now
            best = max(groups, key=lambda grp: (packer.fill(meet(has, remaining[grp.key])), grp.key))
            served = meet(has, remaining[best.key])
            if not any(served):
                continue
            remaining[best.key] = sub(remaining[best.key], served)
            del free[gpu.id]
            targets.append(_Target(gpu, best, has, False, "kept"))
        left = _pack_and_reuse(packer, groups, remaining, free, current, targets, prefer)

    # 7. reconfigure: whole GPUs first, then the fullest multisets; idle GPUs first, node by node
    spots = sorted(free.values(), key=_disruption)
    reason = ""
    dropped_whole: list[Need] = []
    work: list[tuple[Group | None, Counts | None, Need | None]] = [(None, None, n) for n in pending_whole]
    work += [(grp, c, None) for grp, c in sorted(left, key=lambda gc: -packer.fill(gc[1]))]
    for w_group, w_counts, w_need in work:
        if budget > 0 and spots:
            gpu = spots.pop(0)
            del free[gpu.id]
            budget -= 1
            targets.append(_Target(gpu, w_group, w_counts, True, "reconfigured", w_need))
            continue
        if not reason:
            reason = (
                "disruption bound: no more GPUs may be reconfigured in the window(s) allowed"
                if spots
                else f"not enough {model.name} GPUs free of training"
            )
        if w_need is not None:
            dropped_whole.append(w_need)

    plans += [_unchanged(g, "unused") for g in free.values()]
    assigned, unplaced = _assign(space.placement_of, targets, by_key)
    plans += assigned
    unmet = _tally_unmet(model, [*dropped_whole, *unplaced], reason)
    return plans, unmet, budget


def _largest_keep(packer: Packer, demand: Counts, counts: Counts, most: int, allowed: int) -> int:
    """The most GPUs (up to ``most``) laid out as ``counts`` that can be kept with the group still
    fitting ``allowed`` GPUs. Binary search: keeping more of one multiset only ever helps or hurts
    the rest of the packing by whole GPUs, and the check is the same packer the plan uses."""

    def fits(k: int) -> bool:
        rest = sub(demand, tuple(c * k for c in counts))
        return k + len(packer.pack(rest)) <= allowed

    if most <= 0:
        return 0
    if fits(most):
        return most
    low, high = 0, most  # fits(0) holds by construction of ``allowed``; fits(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


def _pack_and_reuse(
    packer: Packer,
    groups: list[Group],
    remaining: dict[str, Counts],
    free: dict[str, Gpu],
    current: dict[str, Counts | None],
    targets: list[_Target],
    prefer: frozenset[Counts],
) -> list[tuple[Group, Counts]]:
    """Pack each group's remaining demand; a multiset some free GPU already has lands on it
    unchanged. Returns the multisets that still need a GPU reconfigured."""
    by_counts: dict[Counts, list[Gpu]] = defaultdict(list)
    for gpu in free.values():
        counts = current[gpu.id]
        if counts is not None and any(counts):
            by_counts[counts].append(gpu)
    left: list[tuple[Group, Counts]] = []
    for grp in groups:
        d = remaining[grp.key]
        remaining[grp.key] = tuple(0 for _ in d)
        if not any(d):
            continue
        for counts in packer.pack(d, prefer):
            spots = [g for g in by_counts.get(counts, []) if g.id in free]
            if not spots:
                left.append((grp, counts))
                continue
            gpu = min(spots, key=lambda g: (_owner_rank(g, grp.dedicated_tenant), g.node, g.index))
            del free[gpu.id]
            targets.append(_Target(gpu, grp, counts, False, "unchanged"))
    return left


def _assign(
    placement_of: dict[Counts, Layout], targets: list[_Target], groups: dict[str, Group]
) -> tuple[list[GpuPlan], list[Need]]:
    """Give every group's instances to the slots of its GPUs (a tenant's instances together);
    returns the plans and the needs left without a slot."""
    plans: list[GpuPlan] = []
    layouts: dict[str, Layout] = {}
    slots: dict[str, dict[str, list[tuple[str, int]]]] = defaultdict(lambda: defaultdict(list))
    for t in targets:
        if t.counts is None:  # a whole GPU
            assert t.whole_need is not None
            plans.append(GpuPlan(t.gpu, False, (), t.whole_need.owners[0], t.role, t.changed))
            continue
        assert t.group is not None
        # an untouched GPU keeps the placements it has; a reconfigured one gets the canonical ones
        layout = tuple(sorted(t.gpu.layout or ())) if not t.changed else placement_of[t.counts]
        layouts[t.gpu.id] = layout
        for pos, placement in enumerate(layout):
            slots[t.group.key][placement.profile].append((t.gpu.id, pos))
    given: dict[tuple[str, int], Need] = {}
    unplaced: list[Need] = []
    for key, grp in groups.items():
        taken: dict[str, int] = defaultdict(int)
        for need in sorted(grp.needs, key=lambda n: (n.owners, n.profile or "")):
            assert need.profile is not None
            free_slots = slots[key][need.profile]
            if taken[need.profile] >= len(free_slots):
                unplaced.append(need)
                continue
            given[free_slots[taken[need.profile]]] = need
            taken[need.profile] += 1
    for t in targets:
        if t.counts is None:
            continue
        instances = []
        for pos, placement in enumerate(layouts[t.gpu.id]):
            taker = given.get((t.gpu.id, pos))
            instances.append(
                Assignment(placement, taker.owners, taker.requested_gib) if taker else Assignment(placement, ())
            )
        plans.append(GpuPlan(t.gpu, True, tuple(instances), None, t.role, t.changed))
    return plans, unplaced


def _tally_unmet(model: GpuModel, needs: Iterable[Need], reason: str) -> list[Unmet]:
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for need in needs:
        counts[(",".join(need.owners), need.profile or "whole GPU")] += 1
    return [Unmet(tenant, model.name, what, n, reason) for (tenant, what), n in sorted(counts.items())]
