"""Cost allocation math: hours, GPU-hours and money, exactly.

Why exact: the cost fact must reconcile to the cent (and below) with an independent accounting,
and ``allocated + idle = capacity`` must hold for every node-hour. Floats drift; so quantities are
rational (``Fraction``) until one rounding per cost line, half away from zero to
:data:`SCALE` decimal places -- the same rule the dbt models implement with integer ``div``.

A line's quantity is ``seconds x slice_units / (denominator x 3600)`` GPU-hours: ``slice_units``
is the pod's GPU units times the MIG policy's denominator (an integer), so nothing is rounded
before the line is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

SCALE = 9  # decimal places of ConsumedQuantity, ListCost and EffectiveCost on every line
HOUR = timedelta(hours=1)
DEFAULT_TIER = "*"  # a rate card row for every tier of a GPU model


def round_line(value: Fraction | int | Decimal, places: int = SCALE) -> Decimal:
    """Half away from zero at ``places`` decimals, from an exact value."""
    q = Fraction(value) * 10**places
    sign = -1 if q < 0 else 1
    n = (2 * abs(q).numerator + abs(q).denominator) // (2 * abs(q).denominator)
    return Decimal(sign * n).scaleb(-places)


def hour_floor(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def split_hours(start: datetime, end: datetime) -> Iterator[tuple[datetime, Fraction]]:
    """(hour, seconds inside that hour) for the interval [start, end); nothing when end <= start."""
    if end <= start:
        return
    hour = hour_floor(start)
    while hour < end:
        lo, hi = max(start, hour), min(end, hour + HOUR)
        delta = hi - lo
        yield hour, Fraction(delta.days * 86400 + delta.seconds) + Fraction(delta.microseconds, 10**6)
        hour += HOUR


def gpu_hours(seconds: Fraction, slice_units: int, denominator: int) -> Fraction:
    return seconds * slice_units / (denominator * 3600)


@dataclass(frozen=True)
class RateCard:
    """Price of one GPU-hour of ``gpu_model`` in ``tier`` from ``effective_from`` on.
    ``list_usd_per_gpu_hour`` is the undiscounted price (FOCUS ListCost), ``usd_per_gpu_hour``
    what the tier pays (EffectiveCost)."""

    gpu_model: str
    tier: str
    usd_per_gpu_hour: Decimal
    list_usd_per_gpu_hour: Decimal
    effective_from: date
    effective_to: date | None = None  # exclusive; None: until the next card (core/finops/price_book.py)


def find_rate(cards: list[RateCard], gpu_model: str | None, tier: str, when: date) -> RateCard | None:
    """The card in force on ``when`` for (model, tier), else the model's ``*`` card; None if unpriced."""
    if gpu_model is None:
        return None
    best: RateCard | None = None
    for exact in (True, False):
        for card in cards:
            if card.gpu_model != gpu_model or card.effective_from > when:
                continue
            if card.effective_to is not None and when >= card.effective_to:
                continue
            if (card.tier == tier) if exact else (card.tier == DEFAULT_TIER):
                if best is None or card.effective_from > best.effective_from:
                    best = card
        if best is not None:
            return best
    return None
