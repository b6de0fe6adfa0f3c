"""Tenant demand, isolation classes and the GPU inventory the planner reads (part 1 of issue 21).

A tenant asks, per GPU model, for MIG instances -- by profile name, or by memory (GiB) and
compute slices, which :func:`resolve_profile` turns into the smallest profile that serves it --
or for whole GPUs. Its isolation class says whom it may share a physical GPU with:

* ``dedicated``: nobody. Its instances go on GPUs that hold only its own instances.
* ``mig``: other ``mig`` / ``shared`` tenants, but only through MIG instances: an instance of
  its own is never shared.
* ``shared``: time-slicing allowed. Its requests are pooled with other ``shared`` tenants'
  requests into common instances (first fit decreasing by memory), so several shared tenants'
  pods may run on one instance.

Bad policy is never dropped: :func:`prepare` returns every request it cannot serve as an
:class:`Unmet` with the reason (unknown model or profile, a size no profile of that GPU serves,
more dedicated tenants than GPUs, ...), and the planner carries them into its result, whose
``complete`` is then false.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from core.mig.layout import Counts, Layout
from core.mig.profiles import GpuModel, Profile, UnknownModelError, model_named

MAX_COUNT = 1_000_000  # instances of one request: far beyond any cluster, small enough to never hang a loop


class Isolation(StrEnum):
    DEDICATED = "dedicated"
    MIG = "mig"
    SHARED = "shared"


@dataclass(frozen=True)
class SliceRequest:
    """``count`` instances on GPUs of ``model``: a ``profile``, or ``memory_gib`` + ``compute_slices``
    (``media`` asks for the +me profile), or ``whole_gpu`` (MIG disabled, the GPU to the tenant)."""

    model: str
    count: int = 1
    profile: str | None = None
    memory_gib: float | None = None
    compute_slices: int = 1
    media: bool = False
    whole_gpu: bool = False

    def describe(self) -> str:
        if self.whole_gpu:
            return "whole GPU"
        if self.profile is not None:
            return self.profile
        return f"{self.memory_gib} GiB / {self.compute_slices} compute slice(s){' +me' if self.media else ''}"


@dataclass(frozen=True)
class TenantDemand:
    tenant: str
    isolation: Isolation | str
    requests: tuple[SliceRequest, ...]


@dataclass(frozen=True)
class Gpu:
    """One physical GPU as the warehouse sees it now."""

    id: str  # stable identity (UUID)
    node: str  # Kubernetes node name
    index: int  # device index on the node (mig-parted's ``devices: [i]``)
    model: str
    layout: Layout | None = None  # current instances; None: MIG disabled
    training: bool = False  # pods of a training job run on it: never touched
    owner: str | None = None  # the tenant whose pods run on it now, if one does


@dataclass(frozen=True)
class Unmet:
    """Demand a plan does not serve, and why."""

    tenant: str
    model: str
    what: str  # "1g.10gb", "whole GPU", "90 GiB / 1 compute slice(s)"
    count: int
    reason: str

    def __str__(self) -> str:
        return f"{self.tenant}: {self.count} x {self.what} on {self.model}: {self.reason}"


@dataclass(frozen=True)
class Need:
    """One MIG instance to place (``profile``) or one whole GPU (``profile`` None)."""

    owners: tuple[str, ...]  # one tenant; several only for a pooled shared instance
    isolation: Isolation
    profile: str | None
    requested_gib: float | None  # memory the owners asked for, where they asked by memory


@dataclass
class Group:
    """Instances that may share GPUs: one dedicated tenant's, or the pool of mig + shared tenants."""

    model: GpuModel
    dedicated_tenant: str | None
    needs: list[Need] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"dedicated:{self.dedicated_tenant}" if self.dedicated_tenant is not None else "pool"

    def counts(self) -> Counts:
        vector = [0] * len(self.model.profiles)
        for need in self.needs:
            assert need.profile is not None
            vector[self.model.index(need.profile)] += 1
        return tuple(vector)


@dataclass
class Prepared:
    """Demand resolved per model: groups of instances, whole-GPU needs, and what cannot be served."""

    groups: dict[str, list[Group]]  # model name -> dedicated groups (by tenant), then the pool
    whole: dict[str, list[Need]]  # model name -> whole GPUs wanted
    unmet: list[Unmet]
    pods: dict[str, int]  # model name -> requests (pods) asked for: the whole-GPU-per-pod peer's count


class PlanInputError(ValueError):
    """The inventory itself is inconsistent (a caller's bug, not a tenant's bad policy)."""


def resolve_profile(model: GpuModel, memory_gib: float, compute_slices: int = 1, media: bool = False) -> Profile | None:
    """The smallest profile (memory slices, then compute slices) with at least ``memory_gib`` usable
    GiB and ``compute_slices``; +me profiles only when ``media`` is asked for. None if none serves."""
    fits = [
        p
        for p in model.profiles
        if p.memory_gib >= memory_gib and p.compute_slices >= compute_slices and p.media_extensions == media
    ]
    return min(fits, key=lambda p: (p.memory_slices, p.compute_slices), default=None)


def check_inventory(gpus: Sequence[Gpu]) -> None:
    """Duplicate GPU ids or (node, index) pairs make every later step ambiguous: refuse them."""
    ids: set[str] = set()
    slots: set[tuple[str, int]] = set()
    for gpu in gpus:
        if gpu.id in ids:
            raise PlanInputError(f"GPU {gpu.id!r} is listed twice")
        if (gpu.node, gpu.index) in slots:
            raise PlanInputError(f"two GPUs claim index {gpu.index} on node {gpu.node!r}")
        if isinstance(gpu.index, bool) or not isinstance(gpu.index, int) or gpu.index < 0:
            raise PlanInputError(f"GPU {gpu.id!r}: device index {gpu.index!r} is not a non-negative integer")
        ids.add(gpu.id)
        slots.add((gpu.node, gpu.index))


def _bad_number(value: object, low: float, integer: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    if integer and not isinstance(value, int):
        return True
    return not math.isfinite(value) or value < low


def _resolve(model: GpuModel, req: SliceRequest) -> tuple[Profile | None, str | None]:
    """(profile, None) or (None, why not); whole-GPU requests give (None, None)."""
    if req.whole_gpu:
        if req.profile is not None or req.memory_gib is not None:
            return None, "a whole-GPU request names no profile and no memory size"
        return None, None
    if req.profile is not None:
        if req.memory_gib is not None:
            return None, "name a profile or a memory size, not both"
        if not isinstance(req.profile, str) or not model.has_profile(req.profile):
            return None, f"unknown profile {req.profile!r} on {model.name} (it has: {', '.join(model.profile_names)})"
        return model.profile(req.profile), None
    if req.memory_gib is None:
        return None, "the request names neither a profile, a memory size nor a whole GPU"
    if _bad_number(req.memory_gib, 0.0, False) or req.memory_gib <= 0:
        return None, f"memory {req.memory_gib!r} GiB is not a positive number"
    if _bad_number(req.compute_slices, 1, True):
        return None, f"compute slices {req.compute_slices!r} is not a positive integer"
    profile = resolve_profile(model, float(req.memory_gib), req.compute_slices, bool(req.media))
    if profile is None:
        biggest = max(model.profiles, key=lambda p: p.memory_gib)
        return None, (
            f"no profile of {model.name} serves {req.memory_gib} GiB with {req.compute_slices} compute slice(s)"
            f"{' and media extensions' if req.media else ''} (largest: {biggest.name}, {biggest.memory_gib} GiB)"
        )
    return profile, None


def prepare(demands: Iterable[TenantDemand], gpus: Sequence[Gpu]) -> Prepared:
    """Validate and resolve demand against the models present; pool shared tenants' requests."""
    check_inventory(gpus)
    supply: dict[str, int] = defaultdict(int)
    for gpu in gpus:
        try:
            supply[model_named(gpu.model).name] += 0 if gpu.training else 1
        except UnknownModelError:
            continue
    unmet: list[Unmet] = []
    dedicated: dict[str, dict[str, Group]] = defaultdict(dict)
    pool: dict[str, Group] = {}
    whole: dict[str, list[Need]] = defaultdict(list)
    shared_units: dict[str, list[tuple[float, Profile, str]]] = defaultdict(list)
    pods: dict[str, int] = defaultdict(int)
    seen: set[str] = set()
    for demand in demands:
        tenant = demand.tenant
        requests = tuple(demand.requests)
        if not isinstance(tenant, str) or not tenant.strip():
            unmet += [Unmet(str(tenant), r.model, r.describe(), _count(r), "tenant has no name") for r in requests]
            continue
        if tenant in seen:
            unmet += [Unmet(tenant, r.model, r.describe(), _count(r), "tenant listed more than once") for r in requests]
            continue
        seen.add(tenant)
        try:
            isolation = Isolation(demand.isolation)
        except ValueError:
            why = f"unknown isolation class {demand.isolation!r} (dedicated, mig or shared)"
            unmet += [Unmet(tenant, r.model, r.describe(), _count(r), why) for r in requests]
            continue
        for req in requests:
            if _bad_number(req.count, 1, True) or req.count > MAX_COUNT:
                unmet.append(
                    Unmet(tenant, str(req.model), req.describe(), 0, f"count {req.count!r} is not 1..{MAX_COUNT}")
                )
                continue
            try:
                model = model_named(req.model)
            except UnknownModelError as exc:
                unmet.append(Unmet(tenant, str(req.model), req.describe(), req.count, str(exc)))
                continue
            if supply.get(model.name, 0) == 0:
                why = f"no {model.name} GPU free of training in the inventory"
                unmet.append(Unmet(tenant, model.name, req.describe(), req.count, why))
                continue
            profile, refusal = _resolve(model, req)
            if refusal is not None:
                unmet.append(Unmet(tenant, model.name, req.describe(), req.count, refusal))
                continue
            pods[model.name] += req.count
            requested = float(req.memory_gib) if req.memory_gib is not None else None
            if profile is None:  # whole GPUs: exclusive whatever the class
                whole[model.name] += [Need((tenant,), isolation, None, None)] * req.count
            elif isolation is Isolation.SHARED:
                gib = requested if requested is not None else profile.memory_gib
                shared_units[model.name] += [(gib, profile, tenant)] * req.count
            elif isolation is Isolation.DEDICATED:
                group = dedicated[model.name].setdefault(tenant, Group(model, tenant))
                group.needs += [Need((tenant,), isolation, profile.name, requested)] * req.count
            else:
                group = pool.setdefault(model.name, Group(model, None))
                group.needs += [Need((tenant,), isolation, profile.name, requested)] * req.count
    for name, units in shared_units.items():
        group = pool.setdefault(name, Group(model_named(name), None))
        group.needs += _pool_shared(units)
    # Each dedicated tenant needs GPUs of its own: more of them than GPUs cannot all be served.
    for name in sorted(set(dedicated) | set(whole)):
        tenants = dedicated[name]
        whole_dedicated = {n.owners[0] for n in whole.get(name, []) if n.isolation is Isolation.DEDICATED}
        wanting = sorted(set(tenants) | whole_dedicated)
        if len(wanting) <= supply[name]:
            continue
        why = f"more dedicated tenants ({len(wanting)}) than {name} GPUs free of training ({supply[name]})"
        for tenant in wanting[supply[name] :]:  # the first ones (by name) keep their chance
            refused = list(tenants.pop(tenant).needs) if tenant in tenants else []
            refused += [n for n in whole.get(name, []) if n.owners == (tenant,) and n.isolation is Isolation.DEDICATED]
            whole[name] = [
                n for n in whole.get(name, []) if not (n.owners == (tenant,) and n.isolation is Isolation.DEDICATED)
            ]
            for profile_name, n in sorted(_tally(refused).items()):
                unmet.append(Unmet(tenant, name, profile_name, n, why))
    groups: dict[str, list[Group]] = {}
    for name in sorted(set(dedicated) | set(pool)):
        groups[name] = [dedicated[name][t] for t in sorted(dedicated.get(name, {}))]
        if name in pool:
            groups[name].append(pool[name])
    return Prepared(groups, dict(whole), unmet, dict(pods))


def _count(req: SliceRequest) -> int:
    return req.count if isinstance(req.count, int) and not isinstance(req.count, bool) and req.count > 0 else 0


def _tally(needs: Iterable[Need]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for need in needs:
        out[need.profile or "whole GPU"] += 1
    return dict(out)


def _pool_shared(units: list[tuple[float, Profile, str]]) -> list[Need]:
    """Shared tenants' requests, first fit decreasing by memory into common instances: a request
    joins an open instance with room (its GiB free, at least its compute slices, same +me-ness),
    else opens the profile it resolved to."""
    open_: list[tuple[Profile, list[float], list[str]]] = []  # profile, [free GiB], owners
    for gib, profile, tenant in sorted(units, key=lambda u: (-u[0], u[1].name, u[2])):
        for inst_profile, free, owners in open_:
            fits = free[0] >= gib and inst_profile.compute_slices >= profile.compute_slices
            if fits and inst_profile.media_extensions == profile.media_extensions:
                free[0] -= gib
                owners.append(tenant)
                break
        else:
            open_.append((profile, [profile.memory_gib - gib], [tenant]))
    return [
        Need(tuple(sorted(set(owners))), Isolation.SHARED, p.name, round(p.memory_gib - free[0], 6))
        for p, free, owners in open_
    ]
