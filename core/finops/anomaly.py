"""Cost anomalies per (client, agent type, tier): a seasonal baseline and a robust score.

* **Baseline.** The same hour of the week in earlier weeks (weekly seasonality: agents follow
  office hours, batch jobs follow weekends). With fewer than ``min_weeks`` such hours, the same
  hour of the day on earlier days; with fewer than ``min_days`` of those, the series is in *cold
  start*. Hours after a series' first cost and without a line count as zero spend.
* **Score.** ``(actual - median) / (1.4826 x MAD)``, the robust z-score (1.4826 makes the MAD
  estimate a standard deviation under normality). The MAD is floored at a share of the median and
  an absolute amount, so a perfectly flat history does not make every cent an anomaly.
* **Anomaly** only when all three hold: score ≥ ``min_score``, absolute impact ≥
  ``min_impact_usd`` and relative impact ≥ ``min_relative_impact``. Either alone is noisy: small
  series jump by large factors for pennies, large series move by large amounts within their
  normal range.
* **Cold start.** No baseline: the client's budget burn rate. An hour spending at least
  ``burn_factor`` times the budget's even hourly rate (monthly budget / 730 h) is an anomaly if
  its impact also clears the absolute threshold; score = actual / allowed.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

SeriesKey = tuple[str, str, str]  # (client, agent_type, tier)
MAD_TO_SIGMA = 1.4826
HOURS_PER_MONTH = 730


@dataclass(frozen=True)
class Thresholds:
    min_score: float = 4.0
    min_impact_usd: float = 25.0
    min_relative_impact: float = 0.5
    mad_floor_fraction: float = 0.05
    mad_floor_usd: float = 1.0
    history_weeks: int = 4
    min_weeks: int = 2
    history_days: int = 7
    min_days: int = 3
    burn_factor: float = 10.0


@dataclass(frozen=True)
class Baseline:
    method: str  # seasonal_hour_of_week | seasonal_hour_of_day
    median: float
    mad: float
    samples: int


@dataclass(frozen=True)
class Anomaly:
    client: str
    agent_type: str
    tier: str
    hour: datetime
    method: str
    expected_usd: Decimal
    actual_usd: Decimal
    impact_usd: Decimal
    relative_impact: float | None
    score: float
    baseline_samples: int
    detail: dict[str, object] = field(default_factory=dict)

    @property
    def anomaly_id(self) -> str:
        return anomaly_id((self.client, self.agent_type, self.tier), self.hour)


def anomaly_id(key: SeriesKey, hour: datetime) -> str:
    """Stable per (series, hour): re-running detection never creates a second anomaly or alert."""
    text = "\x1f".join((*key, hour.isoformat()))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _values(history: Mapping[datetime, Decimal], hours: Sequence[datetime]) -> list[float]:
    return [float(history.get(h, Decimal(0))) for h in hours]


def baseline(
    history: Mapping[datetime, Decimal], hour: datetime, first_seen: datetime | None, thr: Thresholds = Thresholds()
) -> Baseline | None:
    """The seasonal baseline for ``hour`` from earlier hours only, or None (cold start)."""
    if first_seen is None:
        return None
    weekly = [hour - timedelta(weeks=k) for k in range(1, thr.history_weeks + 1)]
    weekly = [h for h in weekly if h >= first_seen]
    if len(weekly) >= thr.min_weeks:
        method, hours = "seasonal_hour_of_week", weekly
    else:
        daily = [hour - timedelta(days=k) for k in range(1, thr.history_days + 1)]
        daily = [h for h in daily if h >= first_seen]
        if len(daily) < thr.min_days:
            return None
        method, hours = "seasonal_hour_of_day", daily
    values = _values(history, hours)
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    return Baseline(method, median, mad, len(values))


def robust_score(actual: float, base: Baseline, thr: Thresholds = Thresholds()) -> float:
    scale = MAD_TO_SIGMA * max(base.mad, thr.mad_floor_fraction * abs(base.median), thr.mad_floor_usd)
    return (actual - base.median) / scale


def _money(value: float | Decimal) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.000001"))


def evaluate(
    key: SeriesKey,
    hour: datetime,
    history: Mapping[datetime, Decimal],
    first_seen: datetime | None,
    monthly_budget_usd: Decimal | None,
    thr: Thresholds = Thresholds(),
) -> tuple[Anomaly | None, str]:
    """Judge one series at one hour. Returns the anomaly (or None) and the method used
    (``seasonal_*``, ``burn_rate``, or ``cold_start_no_budget`` when nothing could judge it)."""
    actual = float(history.get(hour, Decimal(0)))
    base = baseline(history, hour, first_seen, thr)
    client, agent_type, tier = key
    if base is not None:
        score = robust_score(actual, base, thr)
        impact = actual - base.median
        relative = impact / base.median if base.median > 0 else None
        relative_ok = (relative is None and impact > 0) or (
            relative is not None and relative >= thr.min_relative_impact)
        if score >= thr.min_score and impact >= thr.min_impact_usd and relative_ok:
            return (
                Anomaly(client, agent_type, tier, hour, base.method, _money(base.median), _money(actual),
                        _money(impact), relative, round(score, 6), base.samples,
                        {"mad": base.mad, "thresholds": _thr_detail(thr)}),
                base.method,
            )
        return None, base.method
    if monthly_budget_usd is None or monthly_budget_usd <= 0:
        return None, "cold_start_no_budget"
    allowed = float(monthly_budget_usd) / HOURS_PER_MONTH
    impact = actual - allowed
    if actual >= thr.burn_factor * allowed and impact >= thr.min_impact_usd:
        return (
            Anomaly(client, agent_type, tier, hour, "burn_rate", _money(allowed), _money(actual), _money(impact),
                    impact / allowed, round(actual / allowed, 6), 0,
                    {"monthly_budget_usd": str(monthly_budget_usd), "burn_factor": thr.burn_factor}),
            "burn_rate",
        )
    return None, "burn_rate"


def _thr_detail(thr: Thresholds) -> dict[str, float]:
    return {"min_score": thr.min_score, "min_impact_usd": thr.min_impact_usd,
            "min_relative_impact": thr.min_relative_impact}


def detect(
    series: Mapping[SeriesKey, Mapping[datetime, Decimal]],
    hours: Sequence[datetime],
    budgets: Mapping[str, Decimal | None],
    thr: Thresholds = Thresholds(),
) -> tuple[list[Anomaly], dict[str, int]]:
    """Every anomaly among ``series`` at ``hours``, and how many series-hours each method judged.
    A series' first hour with cost is its first-seen; zero hours before it are not history."""
    found: list[Anomaly] = []
    methods: dict[str, int] = {}
    for key, history in sorted(series.items()):
        first_seen = min((h for h, v in history.items() if v > 0), default=None)
        for hour in hours:
            anomaly, method = evaluate(key, hour, history, first_seen, budgets.get(key[0]), thr)
            methods[method] = methods.get(method, 0) + 1
            if anomaly is not None:
                found.append(anomaly)
    return found, methods
