"""Pieces the benchmarks share: best-of-N timing and the spec-size arguments."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence


def best_of(fn: Callable[[], object], runs: int) -> float:
    """Fastest wall time of ``runs`` calls: the least disturbed by the rest of the machine."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def spec_arguments(prog: str, description: str, argv: Sequence[str]) -> tuple[str, int]:
    """``--quick`` / ``--spec`` / ``--runs`` as the fabric benchmarks take them: (spec name, runs)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--quick", action="store_true", help="h100-4su instead of b200-16su, one run")
    parser.add_argument("--spec", default=None, help="spec name (default b200-16su)")
    parser.add_argument("--runs", type=int, default=None)
    args = parser.parse_args(list(argv))
    return args.spec or ("h100-4su" if args.quick else "b200-16su"), args.runs or (1 if args.quick else 3)
