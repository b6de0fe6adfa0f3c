"""The ``budget:`` section of ``gpufabric.yaml`` as the budget controller's own config objects.

Controllers and assets never read the section's pydantic models directly: they call these
functions and get :class:`core.budget.BudgetConfig` / :class:`core.budget.SettlementPolicy`,
so the policy code stays free of settings types. The attribution label prefix is the site's
``label_prefix`` (not a second budget-only key): the FinOps collector reads agent pods' labels
with it, and settlement joins the ledger to those snapshots by ``<prefix>/agent-id``, so the two
must never disagree.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from core.budget import BudgetConfig, Envelope, SettlementPolicy, Unlabeled
from settings.loading import default_settings_path, load_settings
from settings.models import BudgetSettings, EnvelopeDefaults, Settings


def _envelope(d: EnvelopeDefaults) -> Envelope:
    return Envelope(d.gpu_hours, d.cost_usd, d.max_live_pods, d.max_depth, d.max_fan_out, d.deadline)


def rates_from_settings(settings: Settings) -> dict[str, Decimal]:
    """``budget.usd_per_gpu_hour`` when given; else per tier the highest price any rate card of
    that tier names, ``*`` the highest of all. Highest, because admission reserves an estimate:
    over-reserving only denies early, under-reserving lets a tree overrun its envelope."""
    if settings.budget.usd_per_gpu_hour:
        return dict(settings.budget.usd_per_gpu_hour)
    rates: dict[str, Decimal] = {}
    for card in settings.rate_cards:
        rates[card.tier] = max(rates.get(card.tier, card.usd_per_gpu_hour), card.usd_per_gpu_hour)
    if rates:
        rates["*"] = max(rates.values())
    return rates


def budget_config_from_settings(settings: Settings) -> BudgetConfig:
    """The admission and enforcement config (webhook and reconciler share it)."""
    budget: BudgetSettings = settings.budget
    expected = dict(budget.expected_hours)
    default_hours = expected.pop("*", Decimal(1))
    return BudgetConfig(
        defaults={key: _envelope(env) for key, env in budget.envelopes.items()},
        rates_usd_per_gpu_hour=rates_from_settings(settings),
        expected_hours=expected,
        default_expected_hours=default_hours,
        prefix=settings.label_prefix,
        governed_namespaces=frozenset(budget.governed_namespaces) if budget.governed_namespaces is not None else None,
        unlabeled=Unlabeled(budget.unlabeled_pods),
        alert_only=budget.reconciler.alert_only,
    )


def settlement_policy_from_settings(settings: Settings) -> SettlementPolicy:
    s = settings.budget.settlement
    return SettlementPolicy(cost_wait_s=s.cost_wait_s, unseen_after_s=s.unseen_after_s)


def load_budget_config(path: str | Path | None = None) -> tuple[Settings, BudgetConfig]:
    """Load the site file (``path``, else :func:`default_settings_path`) and build the budget
    config. Raises ``SettingsError`` (file:line: path: reason) on a bad file."""
    settings = load_settings(path if path is not None else default_settings_path())
    return settings, budget_config_from_settings(settings)
