"""Nearest-rank quantiles: the value one of the observations had, never an interpolation.

Used where a figure must be something that happened (a job's step time, a pod's lag, a pod's peak
memory): the smallest value with at least ``q`` of the values at or below it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``values`` (``q`` in [0, 1]); no values is a ValueError."""
    if not values:
        raise ValueError("a quantile of no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
