"""Pieces the benchmarks share: interleaved rounds, the spread of a figure, and the spec-size arguments.

The rule every benchmark follows: each contender (ours and every peer) is measured in the same
run, once per round, and the order rotates from round to round (round k starts with the k-th
contender), so none of them always runs first (cold caches) or last (a warm machine, a neighbour's
burst). A ratio is taken within each round (ours and the peer measured back to back) and reported
as its median with the spread over the rounds; a single best-of figure hides how noisy a run was.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def rotation(items: Sequence[T], round_index: int) -> list[T]:
    """``items`` starting at position ``round_index`` (mod its length): the order of one round."""
    if not items:
        return []
    k = round_index % len(items)
    return [*items[k:], *items[:k]]


def interleaved(contenders: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Wall seconds of every contender, one call per round, the order rotating over the rounds.

    Returns each contender's times in round order (index k is round k for every contender, so
    per-round ratios pair measurements taken back to back).
    """
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for k in range(rounds):
        for name in rotation(list(contenders), k):
            t0 = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - t0)
    return times


@dataclass(frozen=True)
class Spread:
    """Min / median / max of a figure over the rounds."""

    low: float
    median: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("no values to summarise")
        return cls(min(values), statistics.median(values), max(values), len(values))

    def fmt(self, spec: str = ".3f", unit: str = "") -> str:
        """``median unit (min .. max over n rounds)``; a single round prints its one value."""
        if self.n == 1:
            return f"{self.median:{spec}}{unit} (1 round: no spread)"
        return f"{self.median:{spec}}{unit} (min {self.low:{spec}} .. max {self.high:{spec}} over {self.n} rounds)"


def ratios(ours: Sequence[float], peer: Sequence[float]) -> list[float]:
    """Per-round ratios ours/peer (each pair measured in the same round)."""
    if len(ours) != len(peer):
        raise ValueError(f"{len(ours)} rounds of ours against {len(peer)} of the peer")
    return [a / b for a, b in zip(ours, peer, strict=True)]


def ratio_line(label: str, ours: Sequence[float], peer: Sequence[float]) -> str:
    """``ratio <label>: median x (min .. max over n rounds)``, from per-round ratios."""
    return f"ratio {label}: {Spread.of(ratios(ours, peer)).fmt('.2f', 'x')}"


def spec_arguments(prog: str, description: str, argv: Sequence[str]) -> tuple[str, int]:
    """``--quick`` / ``--spec`` / ``--runs`` as the fabric benchmarks take them: (spec name, rounds).

    ``--quick`` still runs two rounds: one round could not show the order's effect or a spread.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--quick", action="store_true", help="h100-4su instead of b200-16su, two rounds")
    parser.add_argument("--spec", default=None, help="spec name (default b200-16su)")
    parser.add_argument("--runs", type=int, default=None, help="rounds (default 5; --quick 2)")
    args = parser.parse_args(list(argv))
    return args.spec or ("h100-4su" if args.quick else "b200-16su"), args.runs or (2 if args.quick else 5)


# The rate cards the benches price GPUs with (the tests' FinOps fixture: H100 and B200, per tier).
RATE_CARDS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "finops" / "rate_cards.yaml"


def usd_per_gpu_hour(product: str, tier: str = "*") -> Decimal:
    """The card in force today for ``product`` and ``tier`` (else its ``*`` card) in RATE_CARDS."""
    from datetime import UTC, datetime

    from core.finops.money import find_rate
    from core.finops.price_book import as_rate_cards, build_price_book
    from settings import load_settings

    cards = as_rate_cards(build_price_book(load_settings(RATE_CARDS).rate_cards))
    card = find_rate(cards, product, tier, datetime.now(UTC).date())
    if card is None:
        raise SystemExit(f"no rate card for {product} ({tier} or '*') in {RATE_CARDS}")
    return card.usd_per_gpu_hour
