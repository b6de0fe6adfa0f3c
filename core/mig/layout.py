"""Layouts of one MIG GPU: which placements are valid, and every valid layout of a model.

A layout is a set of placements ``(profile, start)``. :func:`validate_layout` lists every rule a
layout breaks (not just the first), so a plan or a hand-written config can be shown all that is
wrong with it. :func:`layout_space` enumerates every valid layout of a model once (2,318 with the
empty one on the GH100/GA100 geometry) and derives what the planner packs with: the feasible
profile multisets (count vectors, ordered as ``model.profiles``), the maximal ones (no instance can
be added), and one concrete placement for each multiset.

mig-parted itself takes counts, not placements: it creates the instances in every order until one
succeeds (``iteratePermutationsUntilSuccess`` in ``pkg/mig/config/config.go``), so a multiset is
appliable when some valid placement of it exists -- exactly the feasibility used here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache

from core.mig.profiles import GpuModel, Profile, model_named

Counts = tuple[int, ...]  # instances per profile, in the order of GpuModel.profiles


@dataclass(frozen=True, order=True)
class Placement:
    """One GPU instance: a profile at a start on the memory-slice axis."""

    profile: str
    start: int


Layout = tuple[Placement, ...]


@dataclass(frozen=True)
class Violation:
    """One rule a layout breaks: ``rule`` is a stable key, ``message`` says what and where."""

    rule: str  # unknown-profile | start-not-allowed | out-of-range | overlap | compute | max-instances | media
    message: str


def _as_placement(item: Placement | tuple[str, int]) -> Placement:
    if isinstance(item, Placement):
        return item
    profile, start = item
    return Placement(profile, start)


def validate_layout(model: GpuModel | str, layout: Iterable[Placement | tuple[str, int]]) -> list[Violation]:
    """Every placement rule ``layout`` breaks on ``model`` (empty: the layout is valid)."""
    gpu = model if isinstance(model, GpuModel) else model_named(model)
    placements = [_as_placement(p) for p in layout]
    out: list[Violation] = []
    known: list[tuple[Placement, Profile]] = []
    for p in placements:
        if not gpu.has_profile(p.profile):
            out.append(Violation("unknown-profile", f"{gpu.name} has no profile {p.profile!r}"))
            continue
        prof = gpu.profile(p.profile)
        if not isinstance(p.start, int) or isinstance(p.start, bool):
            out.append(Violation("start-not-allowed", f"{p.profile}: start {p.start!r} is not an integer"))
            continue
        if p.start not in prof.starts:
            out.append(
                Violation(
                    "start-not-allowed",
                    f"{p.profile} may start at {list(prof.starts)} on {gpu.name}, not at {p.start}",
                )
            )
        if p.start < 0 or p.start + prof.memory_slices > gpu.memory_slices:
            out.append(
                Violation(
                    "out-of-range",
                    f"{p.profile}@{p.start} covers memory slices {p.start}..{p.start + prof.memory_slices - 1}, "
                    f"outside 0..{gpu.memory_slices - 1}",
                )
            )
        known.append((p, prof))
    for i, (a, pa) in enumerate(known):
        for b, pb in known[i + 1 :]:
            if a.start < b.start + pb.memory_slices and b.start < a.start + pa.memory_slices:
                out.append(Violation("overlap", f"{a.profile}@{a.start} and {b.profile}@{b.start} share memory slices"))
    compute = sum(prof.compute_slices for _, prof in known)
    if compute > gpu.compute_slices:
        out.append(Violation("compute", f"{compute} compute slices placed, {gpu.name} has {gpu.compute_slices}"))
    counts = Counter(p.profile for p, _ in known)
    for name, n in sorted(counts.items()):
        limit = gpu.profile(name).max_instances
        if n > limit:
            out.append(Violation("max-instances", f"{n} x {name}, at most {limit} on {gpu.name}"))
    media = sum(1 for _, prof in known if prof.media_extensions)
    if media > gpu.max_media_instances:
        out.append(
            Violation("media", f"{media} media-extension (+me) instances, at most {gpu.max_media_instances} per GPU")
        )
    return out


def counts_of(model: GpuModel, layout: Iterable[Placement]) -> Counts:
    """The profile multiset of a layout as a count vector (profiles unknown to ``model`` raise)."""
    vector = [0] * len(model.profiles)
    for p in layout:
        vector[model.index(p.profile)] += 1
    return tuple(vector)


def counts_from_mapping(model: GpuModel, mapping: dict[str, int]) -> Counts:
    """``{"3g.40gb": 2}`` -> a count vector (profiles unknown to ``model`` raise)."""
    vector = [0] * len(model.profiles)
    for name, n in mapping.items():
        vector[model.index(name)] += n
    return tuple(vector)


def counts_to_mapping(model: GpuModel, counts: Counts) -> dict[str, int]:
    """A count vector -> ``{"3g.40gb": 2}`` (zeros left out), smallest profile first."""
    return {p.name: n for p, n in zip(model.profiles, counts, strict=True) if n}


@dataclass(frozen=True)
class LayoutSpace:
    """Everything valid on one model, enumerated once."""

    model: GpuModel
    layouts: tuple[Layout, ...]  # every valid layout, the empty one included
    maximal_layouts: tuple[Layout, ...]  # no placement can be added
    feasible: frozenset[Counts]  # every multiset some valid layout realises (downward closed)
    maximal_counts: tuple[Counts, ...]  # feasible multisets no feasible multiset strictly contains
    placement_of: dict[Counts, Layout]  # one valid layout per feasible multiset

    def is_feasible(self, counts: Sequence[int]) -> bool:
        return tuple(counts) in self.feasible

    def placement(self, counts: Sequence[int]) -> Layout:
        """A valid layout realising ``counts``; KeyError if none exists."""
        return self.placement_of[tuple(counts)]


def _enumerate(model: GpuModel) -> list[Layout]:
    """Every valid layout: walk the memory-slice axis left to right, at each slice either leave it
    free or start an instance there, so each non-overlapping set is produced exactly once."""
    out: list[Layout] = []
    counts = [0] * len(model.profiles)

    def walk(slot: int, compute: int, media: int, chosen: list[Placement]) -> None:
        if slot >= model.memory_slices:
            out.append(tuple(chosen))
            return
        walk(slot + 1, compute, media, chosen)
        for i, prof in enumerate(model.profiles):
            if slot not in prof.starts or slot + prof.memory_slices > model.memory_slices:
                continue
            if compute + prof.compute_slices > model.compute_slices or counts[i] >= prof.max_instances:
                continue
            if prof.media_extensions and media >= model.max_media_instances:
                continue
            counts[i] += 1
            chosen.append(Placement(prof.name, slot))
            walk(slot + prof.memory_slices, compute + prof.compute_slices, media + prof.media_extensions, chosen)
            chosen.pop()
            counts[i] -= 1

    walk(0, 0, 0, [])
    return out


def _can_add(model: GpuModel, layout: Layout) -> bool:
    """Whether one more placement fits beside a valid ``layout`` (the rules of validate_layout,
    on the occupancy bitmask: this runs for each of the ~2,300 layouts)."""
    used = 0
    compute = 0
    media = 0
    counts = Counter(p.profile for p in layout)
    for p in layout:
        prof = model.profile(p.profile)
        used |= ((1 << prof.memory_slices) - 1) << p.start
        compute += prof.compute_slices
        media += prof.media_extensions
    for prof in model.profiles:
        if compute + prof.compute_slices > model.compute_slices or counts[prof.name] >= prof.max_instances:
            continue
        if prof.media_extensions and media >= model.max_media_instances:
            continue
        for start in prof.starts:
            span = ((1 << prof.memory_slices) - 1) << start
            if start + prof.memory_slices <= model.memory_slices and not used & span:
                return True
    return False


@cache
def _space(model: GpuModel) -> LayoutSpace:
    layouts = _enumerate(model)
    placement_of: dict[Counts, Layout] = {}
    for layout in sorted(layouts):  # deterministic: the lexicographically first placement wins
        placement_of.setdefault(counts_of(model, layout), layout)
    feasible = frozenset(placement_of)
    maximal_counts = []
    for counts in sorted(feasible, reverse=True):
        bigger = any(tuple(c + (j == i) for j, c in enumerate(counts)) in feasible for i in range(len(model.profiles)))
        if not bigger:
            maximal_counts.append(counts)
    maximal_layouts = tuple(layout for layout in layouts if not _can_add(model, layout))
    return LayoutSpace(model, tuple(layouts), maximal_layouts, feasible, tuple(maximal_counts), placement_of)


def layout_space(model: GpuModel | str) -> LayoutSpace:
    """The enumerated layouts of a model (computed once per process)."""
    gpu = model if isinstance(model, GpuModel) else model_named(model)
    return _space(gpu)
