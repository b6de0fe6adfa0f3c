"""The price book from the site file's rate_cards (core/finops/price_book.py): ranges, list prices,
and every kind of bad card refused with a message that names it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from core.finops.money import RateCard, find_rate
from core.finops.price_book import ISO_4217, PriceBookError, PriceBookRow, build_price_book, price_changes
from settings import SettingsError, load_settings, parse_settings

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "finops" / "rate_cards.yaml"
CURRENCIES = Path(__file__).resolve().parents[1] / "fixtures" / "focus" / "currency_codes.csv"


@dataclass(frozen=True)
class Card:
    gpu_model: str
    tier: str
    usd_per_gpu_hour: Decimal
    effective_from: date | None = None
    effective_to: date | None = None
    list_usd_per_gpu_hour: Decimal | None = None
    currency: str = "USD"


def d(text: str) -> date:
    return date.fromisoformat(text)


def test_fixture_site_file_makes_the_book_with_list_prices_from_the_star_card() -> None:
    book = build_price_book(load_settings(FIXTURE).rate_cards)
    assert len(book) == 13
    batch = next(r for r in book if (r.gpu_model, r.tier) == ("NVIDIA-H100-80GB-HBM3", "batch"))
    assert (batch.unit_price, batch.list_unit_price, batch.currency) == (Decimal("2.50"), Decimal("4.00"), "USD")
    assert (batch.effective_from, batch.effective_to) == (d("2025-01-01"), None)


def test_iso_codes_are_the_validators_list() -> None:
    lines = CURRENCIES.read_text().splitlines()[1:]
    assert frozenset(line.split(",")[1] for line in lines) == ISO_4217


def test_successive_cards_close_the_earlier_range() -> None:
    book = build_price_book([Card("H100", "*", Decimal("4"), d("2026-01-01")),
                             Card("H100", "*", Decimal("3"), d("2026-06-01")),
                             Card("H100", "*", Decimal("2"), None, d("2026-01-01"))])
    assert [(r.effective_from, r.effective_to, r.unit_price) for r in book] == [
        (d("1970-01-01"), d("2026-01-01"), Decimal("2")),
        (d("2026-01-01"), d("2026-06-01"), Decimal("4")),
        (d("2026-06-01"), None, Decimal("3")),
    ]


def test_overlapping_ranges_are_refused_naming_both_cards() -> None:
    with pytest.raises(PriceBookError, match=r"rate_cards\[0\] \(H100, tier prod, from 2026-01-01\) runs to "
                                             r"2026-08-01, overlapping rate_cards\[1\] \(H100, tier prod, from "
                                             r"2026-06-01\)"):
        build_price_book([Card("H100", "prod", Decimal("4"), d("2026-01-01"), d("2026-08-01")),
                          Card("H100", "prod", Decimal("3"), d("2026-06-01"))])


def test_unknown_currency_and_mixed_currencies_are_refused() -> None:
    with pytest.raises(PriceBookError, match=r"unknown currency code 'ABC'"):
        build_price_book([Card("H100", "*", Decimal("4"), currency="ABC")])
    with pytest.raises(PriceBookError, match=r"rate cards mix currencies EUR, USD"):
        build_price_book([Card("H100", "*", Decimal("4")), Card("B200", "*", Decimal("6"), currency="EUR")])
    # and a lower-case or long code never gets past the site file
    with pytest.raises(SettingsError, match=r"gpufabric.yaml:3: rate_cards\[0\].currency"):
        parse_settings("version: 1\nrate_cards:\n  - {gpu_model: H100, tier: '*', usd_per_gpu_hour: 4, "
                       "currency: usd}\n", "gpufabric.yaml")


def test_negative_zero_and_too_precise_prices_are_refused() -> None:
    with pytest.raises(SettingsError, match=r"rate_cards\[0\].usd_per_gpu_hour"):
        parse_settings("version: 1\nrate_cards:\n  - {gpu_model: H100, tier: '*', usd_per_gpu_hour: -1}\n",
                       "gpufabric.yaml")
    with pytest.raises(PriceBookError, match=r"usd_per_gpu_hour must be > 0, got -1"):
        build_price_book([Card("H100", "*", Decimal("-1"))])
    with pytest.raises(PriceBookError, match=r"usd_per_gpu_hour 1.23456 has more than 4 decimals"):
        build_price_book([Card("H100", "*", Decimal("1.23456"))])
    with pytest.raises(PriceBookError, match=r"list_usd_per_gpu_hour 2 is below the price 3"):
        build_price_book([Card("H100", "*", Decimal("3"), list_usd_per_gpu_hour=Decimal("2"))])
    with pytest.raises(PriceBookError, match=r"effective_to 2026-01-01 is not after effective_from"):
        build_price_book([Card("H100", "*", Decimal("3"), d("2026-01-01"), d("2026-01-01"))])


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(PriceBookError) as info:
        build_price_book([Card("H100", "*", Decimal("-1"), currency="QQQ"), Card("B200", "*", Decimal("0"))])
    assert str(info.value).count("\n  ") == 4  # two bad prices, one bad code, mixed currencies


def test_star_tier_is_accepted_by_the_site_file_but_other_junk_is_not() -> None:
    ok = parse_settings("version: 1\nrate_cards:\n  - {gpu_model: H100, tier: '*', usd_per_gpu_hour: 4}\n")
    assert ok.rate_cards[0].tier == "*" and ok.rate_cards[0].currency == "USD"
    with pytest.raises(SettingsError, match=r"rate_cards\[0\].tier: '\*\*' is not a valid Kubernetes label value"):
        parse_settings("version: 1\nrate_cards:\n  - {gpu_model: H100, tier: '**', usd_per_gpu_hour: 4}\n")


def test_price_changes_finds_the_first_day_priced_differently() -> None:
    old = [PriceBookRow("H100", "*", d("2025-01-01"), None, "USD", Decimal("4"), Decimal("4"))]
    split_same = [PriceBookRow("H100", "*", d("2025-01-01"), d("2026-01-01"), "USD", Decimal("4"), Decimal("4")),
                  PriceBookRow("H100", "*", d("2026-01-01"), None, "USD", Decimal("4"), Decimal("4"))]
    cheaper = [PriceBookRow("H100", "*", d("2025-01-01"), d("2026-03-01"), "USD", Decimal("4"), Decimal("4")),
               PriceBookRow("H100", "*", d("2026-03-01"), None, "USD", Decimal("3"), Decimal("4"))]
    assert price_changes(old, split_same) is None
    assert price_changes(old, cheaper) == d("2026-03-01")
    assert price_changes([], old) == d("2025-01-01")


def test_find_rate_respects_the_end_of_a_range() -> None:
    cards = [RateCard("H100", "*", Decimal("4"), Decimal("4"), d("2025-01-01"), d("2026-01-01"))]
    assert find_rate(cards, "H100", "prod", d("2025-12-31")) == cards[0]
    assert find_rate(cards, "H100", "prod", d("2026-01-01")) is None
