"""The price book: the site file's rate cards checked and shaped into rows of ``finops.price_book``.

One place for prices (issue 25, part 2): rates, currency, the commitment discount (a tier's
contracted price below the GPU model's list price) and effective date ranges come from
``rate_cards`` in the site file only; dbt prices the cost fact from the table this builds.

Effective ranges are UTC dates, half open: a card applies to hours whose UTC date d has
``effective_from <= d < effective_to``; no ``effective_from`` means from the beginning, no
``effective_to`` means until the next card of the same (model, tier) starts. Two cards of one
(model, tier) whose ranges overlap are an error: which price wins would be a guess.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Protocol

from core.finops.money import RateCard

DEFAULT_TIER = "*"
PRICE_PLACES = 4
BEGINNING = date(1970, 1, 1)  # "always": the cost fact has no hour before the Unix epoch

# ISO 4217 codes as the FinOps Foundation's focus-validator 2.2.1 accepts them for FOCUS
# BillingCurrency (focus_validator/rules/currency_codes.csv, pinned in tests/fixtures/focus/).
ISO_4217 = frozenset("""
    AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV BRL BSD BTN BWP BYN
    BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD
    FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR
    KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV
    MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG
    SEK SGD SHP SLE SLL SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD USN
    UYI UYU UYW UZS VED VES VND VUV WST XAF XAG XAU XBA XBB XBC XBD XCD XDR XOF XPD XPF XPT XSU XTS XUA
    XXX YER ZAR ZMW ZWL
""".split())


class PriceBookError(ValueError):
    """Rate cards that cannot make one price book; the message names every offending card."""


class RateCardLike(Protocol):
    """What the site file's ``settings.models.RateCard`` carries (core never imports settings)."""

    @property
    def gpu_model(self) -> str: ...
    @property
    def tier(self) -> str: ...
    @property
    def usd_per_gpu_hour(self) -> Decimal: ...
    @property
    def list_usd_per_gpu_hour(self) -> Decimal | None: ...
    @property
    def currency(self) -> str: ...
    @property
    def effective_from(self) -> date | None: ...
    @property
    def effective_to(self) -> date | None: ...


@dataclass(frozen=True, order=True)
class PriceBookRow:
    """One row of ``finops.price_book``: ``unit_price`` is what the tier pays per GPU-hour
    (FOCUS ContractedUnitPrice / EffectiveCost), ``list_unit_price`` the undiscounted price."""

    gpu_model: str
    tier: str
    effective_from: date
    effective_to: date | None
    currency: str
    unit_price: Decimal
    list_unit_price: Decimal


def _where(index: int, card: RateCardLike) -> str:
    since = card.effective_from.isoformat() if card.effective_from else "always"
    return f"rate_cards[{index}] ({card.gpu_model}, tier {card.tier}, from {since})"


def build_price_book(cards: Sequence[RateCardLike], currencies: Iterable[str] = ISO_4217) -> list[PriceBookRow]:
    """Check ``cards`` and return the price book rows, sorted; raise :class:`PriceBookError` listing
    every problem (negative or zero price, list price below the tier's, unknown currency, an empty
    or overlapping effective range, more than one billing currency)."""
    known = frozenset(currencies)
    problems: list[str] = []
    for i, c in enumerate(cards):
        where = _where(i, c)
        if not c.usd_per_gpu_hour > 0:
            problems.append(f"{where}: usd_per_gpu_hour must be > 0, got {c.usd_per_gpu_hour}")
        prices = (("usd_per_gpu_hour", c.usd_per_gpu_hour), ("list_usd_per_gpu_hour", c.list_usd_per_gpu_hour))
        for name, price in prices:
            if price is not None and price.is_finite() and price != price.quantize(Decimal(1).scaleb(-PRICE_PLACES)):
                problems.append(f"{where}: {name} {price} has more than {PRICE_PLACES} decimals (the cost fact "
                                f"carries unit prices as numeric(12,4))")
        if c.list_usd_per_gpu_hour is not None and c.list_usd_per_gpu_hour < c.usd_per_gpu_hour:
            problems.append(f"{where}: list_usd_per_gpu_hour {c.list_usd_per_gpu_hour} is below the price "
                            f"{c.usd_per_gpu_hour} (a commitment discount lowers the price, never the list)")
        if c.currency not in known:
            problems.append(f"{where}: unknown currency code {c.currency!r} (ISO 4217, e.g. USD, EUR)")
        if c.effective_to is not None and c.effective_to <= (c.effective_from or BEGINNING):
            problems.append(f"{where}: effective_to {c.effective_to} is not after effective_from")
    billing = sorted({c.currency for c in cards})
    if len(billing) > 1:
        problems.append(f"rate cards mix currencies {', '.join(billing)}: one billing currency per site")

    series: dict[tuple[str, str], list[tuple[int, RateCardLike]]] = defaultdict(list)
    for i, c in enumerate(cards):
        series[(c.gpu_model, c.tier)].append((i, c))
    rows: list[PriceBookRow] = []
    for (model, tier), entries in sorted(series.items()):
        entries.sort(key=lambda e: e[1].effective_from or BEGINNING)
        for n, (i, c) in enumerate(entries):
            start = c.effective_from or BEGINNING
            following = entries[n + 1] if n + 1 < len(entries) else None
            end = c.effective_to
            if following is not None:
                next_start = following[1].effective_from or BEGINNING
                if next_start == start:
                    problems.append(f"{_where(i, c)} and {_where(following[0], following[1])}: same start")
                elif end is not None and end > next_start:
                    problems.append(f"{_where(i, c)} runs to {end}, overlapping {_where(following[0], following[1])}")
                end = next_start if end is None else min(end, next_start)
            rows.append(PriceBookRow(model, tier, start, end, c.currency, c.usd_per_gpu_hour,
                                     c.list_usd_per_gpu_hour if c.list_usd_per_gpu_hour is not None
                                     else _list_price(cards, c)))
    if problems:
        raise PriceBookError("rate cards do not make a price book:\n  " + "\n  ".join(problems))
    return sorted(rows)


def _list_price(cards: Sequence[RateCardLike], card: RateCardLike) -> Decimal:
    """No list price given: the model's ``*`` card in force on the card's start, else its own price
    (no discount). The list price must be known where the card is, not found later by dbt."""
    start = card.effective_from or BEGINNING
    best: RateCardLike | None = None
    for c in cards:
        if c.gpu_model != card.gpu_model or c.tier != DEFAULT_TIER or (c.effective_from or BEGINNING) > start:
            continue
        if c.effective_to is not None and c.effective_to <= start:
            continue
        if best is None or (c.effective_from or BEGINNING) > (best.effective_from or BEGINNING):
            best = c
    if best is None or card.tier == DEFAULT_TIER:
        return card.list_usd_per_gpu_hour or card.usd_per_gpu_hour
    return best.list_usd_per_gpu_hour or best.usd_per_gpu_hour


def price_changes(old: Sequence[PriceBookRow], new: Sequence[PriceBookRow]) -> date | None:
    """The first UTC date on which ``new`` prices anything differently from ``old``, or None.

    Compared per (model, tier) over the union of both books' range boundaries, so a split range
    with the same price is no change."""
    def at(book: Sequence[PriceBookRow], model: str, tier: str, day: date) -> tuple[str, Decimal, Decimal] | None:
        for r in book:
            if r.gpu_model == model and r.tier == tier and r.effective_from <= day and (
                    r.effective_to is None or day < r.effective_to):
                return (r.currency, r.unit_price, r.list_unit_price)
        return None

    first: date | None = None
    keys = {(r.gpu_model, r.tier) for r in (*old, *new)}
    for model, tier in keys:
        days = sorted({d for r in (*old, *new) if (r.gpu_model, r.tier) == (model, tier)
                       for d in (r.effective_from, r.effective_to) if d is not None})
        for day in days:
            if at(old, model, tier, day) != at(new, model, tier, day):
                first = day if first is None else min(first, day)
                break
    return first


__all__ = ["BEGINNING", "ISO_4217", "PriceBookError", "PriceBookRow", "RateCardLike", "build_price_book",
           "price_changes"]


def as_rate_cards(rows: Iterable[PriceBookRow]) -> list[RateCard]:
    """The price book's rows as the rate cards pricing reads (``core.finops.money.find_rate``)."""
    return [RateCard(r.gpu_model, r.tier, r.unit_price, r.list_unit_price, r.effective_from, r.effective_to)
            for r in rows]  # fmt: skip
