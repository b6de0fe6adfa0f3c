"""Packing MIG instances onto as few GPUs as the placement rules allow (the heuristic core).

A GPU's instances form a feasible multiset (``LayoutSpace.feasible``); the feasible set is closed
under removing instances, so any packing can be described by choosing, per GPU, the part of a
*maximal* multiset that demand uses. On the GA100/GH100 geometry there are 44 maximal multisets,
which is what makes the following cheap (:meth:`Packer.pack`):

1. **LP rounding** (Gilmore-Gomory): the linear relaxation "cover the demand with fractional
   copies of maximal multisets" has one row per profile (7); its solution is found by a small
   simplex on the dual (:func:`_cover_lp`), rounded down, and the few instances left over are
   packed exactly. The relaxation's value, rounded up, is also a lower bound no packing beats.
2. **Greedy over patterns** (:meth:`Packer.greedy`): repeatedly the maximal multiset whose part
   used by the remaining demand fills the most of a GPU (compute/7 + memory/8), repeated while
   demand lasts; it prefers multisets GPUs already have, which the planner then leaves untouched.
3. The fewer of the two, then **exact re-solving** of its least-filled GPUs (:meth:`Packer.exact`:
   depth-first over the maximal multisets holding the largest remaining instance, memoised on the
   remaining demand, cut at a node budget) while that saves a GPU and the LP bound is not reached.

Stranded capacity follows from the count: stranded compute slices = 7 x GPUs - compute demanded,
so fewer GPUs is also fewer stranded slices.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from core.mig.layout import Counts, LayoutSpace

TAIL_SIZES = (24, 12, 6)  # least-filled GPUs re-solved exactly, largest neighbourhood first
EXACT_BUDGET = 4_000  # search nodes per exact attempt
EPS = 1e-9


class _OverBudget(Exception):
    pass


def sub(a: Sequence[int], b: Sequence[int]) -> Counts:
    return tuple(x - y for x, y in zip(a, b, strict=True))


def meet(a: Sequence[int], b: Sequence[int]) -> Counts:
    return tuple(min(x, y) for x, y in zip(a, b, strict=True))


def total(vectors: Iterable[Sequence[int]], width: int) -> Counts:
    out = [0] * width
    for v in vectors:
        for i, x in enumerate(v):
            out[i] += x
    return tuple(out)


def _cover_lp(patterns: Sequence[Counts], demand: Sequence[int]) -> tuple[float, list[float]]:
    """min sum(x) s.t. sum_j x_j * patterns[j] >= demand, x >= 0, solved through its dual
    max demand.y s.t. patterns[j].y <= 1, y >= 0 (feasible at y = 0, so no phase one), by the
    tableau simplex with Bland's rule (no cycling). Returns (value, x): x_j are the dual prices
    of the dual's rows, read off the slack columns of the final objective row."""
    m, n = len(patterns), len(demand)
    # rows: pattern j . y + s_j = 1 ; columns: y_0..y_{n-1}, s_0..s_{m-1}, rhs
    rows = [
        [float(p[i]) for i in range(n)] + [1.0 if k == j else 0.0 for k in range(m)] + [1.0]
        for j, p in enumerate(patterns)
    ]
    z = [-float(d) for d in demand] + [0.0] * m + [0.0]
    basis = [n + j for j in range(m)]
    width = n + m + 1
    for _ in range(10_000):  # Bland's rule terminates; the cap only guards against float trouble
        entering = next((c for c in range(n + m) if z[c] < -EPS), None)
        if entering is None:
            break
        best_row, best_ratio = -1, math.inf
        for r, row in enumerate(rows):
            a = row[entering]
            if a > EPS:
                ratio = row[-1] / a
                if ratio < best_ratio - EPS or (abs(ratio - best_ratio) <= EPS and basis[r] < basis[best_row]):
                    best_row, best_ratio = r, ratio
        if best_row < 0:  # unbounded dual: some demanded profile fits no pattern (cannot happen)
            raise ValueError("a demanded profile is in no maximal multiset")
        pivot = rows[best_row]
        scale = pivot[entering]
        for c in range(width):
            pivot[c] /= scale
        for row in (*rows, z):
            if row is pivot:
                continue
            factor = row[entering]
            if abs(factor) > EPS:
                for c in range(width):
                    row[c] -= factor * pivot[c]
        basis[best_row] = entering
    else:
        raise RuntimeError("the cover LP did not converge")
    x = [max(0.0, z[n + j]) for j in range(m)]
    return z[-1], x


class Packer:
    """Packs count vectors of one model's profiles into feasible per-GPU multisets."""

    def __init__(self, space: LayoutSpace) -> None:
        self.space = space
        profiles = space.model.profiles
        self.width = len(profiles)
        self.compute = tuple(p.compute_slices for p in profiles)
        self.memory = tuple(p.memory_slices for p in profiles)
        self.limits = tuple(p.max_instances for p in profiles)
        self.cap_c = space.model.compute_slices
        self.cap_m = space.model.memory_slices
        self.patterns = space.maximal_counts
        # largest instance first: the one a search must place before anything else
        self.order = sorted(range(self.width), key=lambda i: (-self.memory[i], -self.compute[i], i))
        self.containing = {i: [p for p in self.patterns if p[i] > 0] for i in range(self.width)}

    def fill(self, counts: Sequence[int]) -> float:
        """How much of one GPU a multiset fills: compute share + memory share (0..2)."""
        c = sum(n * k for n, k in zip(counts, self.compute, strict=True))
        m = sum(n * k for n, k in zip(counts, self.memory, strict=True))
        return c / self.cap_c + m / self.cap_m

    def lower_bound(self, demand: Sequence[int]) -> int:
        """No packing needs fewer GPUs: compute, memory, and each profile's instance limit."""
        if not any(demand):
            return 0
        c = sum(n * k for n, k in zip(demand, self.compute, strict=True))
        m = sum(n * k for n, k in zip(demand, self.memory, strict=True))
        per_profile = max(math.ceil(n / lim) for n, lim in zip(demand, self.limits, strict=True))
        return max(math.ceil(c / self.cap_c), math.ceil(m / self.cap_m), per_profile)

    def relaxation(self, demand: Sequence[int]) -> tuple[float, dict[Counts, float]]:
        """The cover LP over the maximal multisets restricted to the demanded profiles (fewer,
        smaller patterns: a restricted pattern dominated by another is dropped)."""
        keep = [i for i, x in enumerate(demand) if x]
        restricted = {tuple(p[i] for i in keep) for p in self.patterns}
        patterns = [
            p
            for p in restricted
            if not any(q != p and all(a <= b for a, b in zip(p, q, strict=True)) for q in restricted)
        ]
        patterns.sort(reverse=True)
        value, x = _cover_lp(patterns, [demand[i] for i in keep])
        out: dict[Counts, float] = {}
        for p, v in zip(patterns, x, strict=True):
            if v > EPS:
                full = [0] * self.width
                for i, k in zip(keep, p, strict=True):
                    full[i] = k
                out[tuple(full)] = v
        return value, out

    def lp_round(self, demand: Sequence[int]) -> tuple[list[Counts], int]:
        """Round the relaxation down, pack what is left (exactly if the search allows): the GPUs,
        and the relaxation's lower bound."""
        value, x = self.relaxation(demand)
        d = tuple(demand)
        bins: list[Counts] = []
        for pattern, v in sorted(x.items(), key=lambda kv: (-kv[1], kv[0])):
            for _ in range(math.floor(v + EPS)):
                used = meet(pattern, d)
                if not any(used):
                    break
                bins.append(used)
                d = sub(d, used)
        rest = self.exact(d) if any(d) else []
        bins += rest if rest is not None else self.greedy(d)
        return bins, math.ceil(value - 1e-6)

    def greedy(self, demand: Sequence[int], prefer: frozenset[Counts] = frozenset()) -> list[Counts]:
        """Per-GPU multisets covering ``demand``; ``prefer`` (multisets GPUs already have) wins ties."""
        d = tuple(demand)
        if any(x < 0 for x in d):
            raise ValueError(f"negative demand {d}")
        out: list[Counts] = []
        while any(d):
            best: Counts | None = None
            best_key: tuple[float, bool, int] | None = None
            for pattern in self.patterns:
                used = meet(pattern, d)
                if not any(used):
                    continue
                key = (round(self.fill(used), 9), used in prefer, -sum(used))
                if best_key is None or key > best_key:
                    best, best_key = used, key
            assert best is not None  # every single instance fits some maximal multiset
            times = min(x // u for x, u in zip(d, best, strict=True) if u)
            out += [best] * times
            d = sub(d, tuple(u * times for u in best))
        return out

    def exact(self, demand: Sequence[int], budget: int = EXACT_BUDGET) -> list[Counts] | None:
        """A minimum-GPU packing of (small) ``demand``, or None if the search outgrows ``budget``."""
        memo: dict[Counts, tuple[int, Counts | None]] = {}
        nodes = 0

        def solve(d: Counts) -> int:
            nonlocal nodes
            if not any(d):
                return 0
            hit = memo.get(d)
            if hit is not None:
                return hit[0]
            nodes += 1
            if nodes > budget:
                raise _OverBudget
            first = next(i for i in self.order if d[i])
            bound = self.lower_bound(d)
            best, choice = math.inf, None
            tried: set[Counts] = set()
            for pattern in self.containing[first]:
                used = meet(pattern, d)
                if used in tried:
                    continue
                tried.add(used)
                n = 1 + solve(sub(d, used))
                if n < best:
                    best, choice = n, used
                    if best <= bound:
                        break
            memo[d] = (int(best), choice)
            return int(best)

        try:
            solve(tuple(demand))
        except _OverBudget:
            return None
        out: list[Counts] = []
        d = tuple(demand)
        while any(d):
            step = memo[d][1]
            assert step is not None
            out.append(step)
            d = sub(d, step)
        return out

    def pack(self, demand: Sequence[int], prefer: frozenset[Counts] = frozenset()) -> list[Counts]:
        """The fewer of LP rounding and the greedy (the greedy on a tie: it keeps current
        multisets), then its least-filled GPUs re-solved exactly while that saves a GPU. A tail
        solved exactly without saving one means no part of it can either, so the loop stops."""
        if not any(demand):
            return []
        rounded, bound = self.lp_round(demand)
        bins = self.greedy(demand, prefer)
        if len(rounded) < len(bins):
            bins = rounded
        bound = max(bound, self.lower_bound(demand))
        improved = True
        while improved and len(bins) > bound:
            improved = False
            bins.sort(key=self.fill, reverse=True)
            for size in TAIL_SIZES:
                tail = min(size, len(bins))
                better = self.exact(total(bins[-tail:], self.width))
                if better is None:
                    continue
                if len(better) < tail:
                    bins = bins[:-tail] + better
                    improved = True
                break
        return bins

    def first_fit_decreasing(self, demand: Sequence[int]) -> list[Counts]:
        """The obvious peer: instances largest first (memory, then compute slices), each into the
        first GPU whose multiset stays feasible, else a new GPU."""
        feasible = self.space.feasible
        bins: list[list[int]] = []
        for i in self.order:
            # A GPU that refuses one more instance of profile i refuses it for good (it only fills
            # up), so the first-fit scan for profile i resumes where the last one stopped.
            ptr = 0
            for _ in range(demand[i]):
                while ptr < len(bins):
                    vector = bins[ptr]
                    vector[i] += 1
                    if tuple(vector) in feasible:
                        break
                    vector[i] -= 1
                    ptr += 1
                else:
                    bins.append([int(j == i) for j in range(self.width)])
        return [tuple(b) for b in bins]
