"""The cost fact as a FOCUS dataset: which columns each FOCUS version has, and their values.

``finops.gpu_cost_hourly`` already uses FOCUS names for what it measures; an export adds the
columns a FOCUS consumer expects that are constant or derived for an internal GPU platform
(billing account, billing period, provider/publisher/invoice issuer, SKU, charge frequency) and
drops what a given version does not define. Our own columns (``x_``) ride along, as FOCUS allows.

Column sets:

- ``1.0``: the FOCUS 1.0 column IDs, including the conditional ones focus-validator 1.0.0 asks to
  be present (commitment discounts, region) as all-NULL columns, since we support neither.
- ``1.2``: FOCUS 1.2 columns for the capabilities in :data:`CRITERIA` (the requirements model's
  ApplicabilityCriteria we declare), plus ServiceSubcategory, SkuMeter and SkuPriceDetails.

One cost basis per export (``x_CostBasis``): the fact holds two views of the same hours, and a
FOCUS consumer would sum both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

VERSIONS = ("1.0", "1.2")
BASES = ("allocation", "usage")

# What we declare to the FOCUS 1.2 requirements model (docs/focus.md says why each holds).
CRITERIA = frozenset({
    "ACCOUNT_NAMING_SUPPORTED",
    "BILLING_BASED_ON_PROVISIONED_RESOURCES_SUPPORTED",
    "NEGOTIATED_PRICING_SUPPORTED",
    "PUBLIC_PRICE_LIST_SUPPORTED",
    "RESOURCE_TYPE_ASSIGNMENT_SUPPORTED",
    "SUB_ACCOUNT_SUPPORTED",
    "TAGGING_SUPPORTED",
    "UNIT_PRICING_SUPPORTED",
    "USAGE_MEASUREMENT_SUPPORTED",
})

# The cost fact's columns an export reads, in this order.
FACT_COLUMNS = (
    "ChargePeriodStart", "ChargePeriodEnd", "BillingCurrency", "ChargeCategory", "ChargeDescription",
    "ProviderName", "ServiceName", "ServiceCategory", "ResourceId", "ResourceName", "ResourceType",
    "ConsumedQuantity", "ConsumedUnit", "PricingQuantity", "PricingUnit", "ListUnitPrice",
    "ContractedUnitPrice", "ListCost", "EffectiveCost", "SubAccountId", "SubAccountName", "Tags",
    "x_CostBasis", "x_LineType", "x_Cluster", "x_Namespace", "x_Node", "x_GpuModel", "x_Task",
    "x_AgentType", "x_Tier", "x_RootId", "x_ParentId", "x_Depth", "x_MigProfile", "x_MigWeightPolicy",
    "x_GpuUnits", "x_Seconds", "x_Efficiency", "x_ActivityMeasured", "x_CapacityGpuHours", "x_IdleReason",
)

EXTENSIONS = tuple(c for c in FACT_COLUMNS if c.startswith("x_"))

_COMMON = (
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency",
    "ChargePeriodEnd", "ChargePeriodStart", "ConsumedQuantity", "ConsumedUnit", "ContractedCost",
    "ContractedUnitPrice", "EffectiveCost", "InvoiceIssuerName", "ListCost", "ListUnitPrice",
    "PricingCategory", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "ResourceId",
    "ResourceName", "ResourceType", "ServiceCategory", "ServiceName", "SkuId", "SkuPriceId",
    "SubAccountId", "SubAccountName", "Tags",
)
COLUMNS: Mapping[str, tuple[str, ...]] = {
    "1.0": tuple(sorted((*_COMMON, "CommitmentDiscountCategory", "CommitmentDiscountId",
                         "CommitmentDiscountName", "CommitmentDiscountStatus", "CommitmentDiscountType",
                         "RegionId", "RegionName"))) + EXTENSIONS,
    "1.2": tuple(sorted((*_COMMON, "ServiceSubcategory", "SkuMeter", "SkuPriceDetails"))) + EXTENSIONS,
}

# Type of every column we may write; decimals carry (precision, scale) for Parquet.
DATETIME, STRING, KEY_VALUE, INTEGER, BOOLEAN = "datetime", "string", "key-value", "integer", "boolean"
DECIMAL_SCALE: Mapping[str, int] = {
    "BilledCost": 9, "ConsumedQuantity": 9, "ContractedCost": 9, "ContractedUnitPrice": 4, "EffectiveCost": 9,
    "ListCost": 9, "ListUnitPrice": 4, "PricingQuantity": 18, "x_GpuUnits": 9, "x_Seconds": 6,
    "x_Efficiency": 4, "x_CapacityGpuHours": 9,
}
TYPES: Mapping[str, str] = {
    **{c: STRING for c in (*COLUMNS["1.0"], *COLUMNS["1.2"])},
    **{c: "decimal" for c in DECIMAL_SCALE},
    **{c: DATETIME for c in ("BillingPeriodEnd", "BillingPeriodStart", "ChargePeriodEnd", "ChargePeriodStart")},
    "Tags": KEY_VALUE, "SkuPriceDetails": KEY_VALUE, "x_Depth": INTEGER, "x_ActivityMeasured": BOOLEAN,
}


class FocusExportError(ValueError):
    """An export cannot be written as asked (bad version, basis, file type, or a bad fact row)."""


@dataclass(frozen=True)
class ExportOptions:
    """The billing-side facts the cost fact does not hold: who bills whom.

    For an internal GPU platform the platform is provider, publisher and invoice issuer at once
    (so BilledCost is not zeroed as a third-party charge), and one billing account covers it."""

    version: str = "1.2"
    basis: str = "allocation"
    billing_account_id: str = "gpufabric"
    billing_account_name: str = "gpufabric GPU platform"
    invoice_issuer: str = "gpufabric"
    publisher: str = "gpufabric"

    def __post_init__(self) -> None:
        if self.version not in VERSIONS:
            raise FocusExportError(f"FOCUS version {self.version!r} is not one we export: {', '.join(VERSIONS)}")
        if self.basis not in BASES:
            raise FocusExportError(f"cost basis {self.basis!r} is not one of {', '.join(BASES)}")


def billing_period(ts: datetime) -> tuple[datetime, datetime]:
    """The calendar month (UTC) holding ``ts``: [first of month, first of next month)."""
    t = ts.astimezone(UTC)
    start = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start, end


def focus_row(fact: Mapping[str, Any], options: ExportOptions) -> dict[str, Any]:
    """One cost-fact line as a FOCUS row of ``options.version`` (typed values, ``None`` for null)."""
    start = fact.get("ChargePeriodStart")
    if not isinstance(start, datetime) or start.tzinfo is None:
        raise FocusExportError(f"cost line without a timezone-aware ChargePeriodStart: {start!r}")
    period_start, period_end = billing_period(start)
    model, tier = fact.get("x_GpuModel"), fact.get("x_Tier")
    sku = f"GPU-Hour:{model}" if model else None
    # Idle capacity is priced at list; a workload line at its tier's rate card row.
    price_point = "list" if fact.get("x_LineType") == "idle" or not tier else tier
    tags = fact.get("Tags")
    row: dict[str, Any] = {
        **{c: fact.get(c) for c in FACT_COLUMNS},
        "BilledCost": fact.get("EffectiveCost"),  # no commitments to amortise: billed = effective
        "ContractedCost": fact.get("EffectiveCost"),  # the tier's rate is the negotiated one
        "BillingAccountId": options.billing_account_id,
        "BillingAccountName": options.billing_account_name,
        "BillingPeriodStart": period_start,
        "BillingPeriodEnd": period_end,
        "ChargeClass": None,  # no corrections: the fact is rebuilt, not amended
        "ChargeFrequency": "Usage-Based",
        "InvoiceIssuerName": options.invoice_issuer,
        "PublisherName": options.publisher,
        "PricingCategory": "Standard",
        "SkuId": sku,
        "SkuPriceId": f"{sku}:{price_point}" if sku else None,
        "SkuMeter": "GPU Time" if sku else None,
        "SkuPriceDetails": {"x_GpuModel": model, "x_PricingTier": price_point} if sku else None,
        "ServiceSubcategory": "Containers",  # pods: FOCUS 1.2's Compute > Containers
        # FOCUS: SubAccountName MUST NOT be null when SubAccountId is not; a client missing from
        # the clients seed has no display name, so it goes by its id.
        "SubAccountName": fact.get("SubAccountName") or fact.get("SubAccountId"),
        "Tags": tags if isinstance(tags, dict) else (json.loads(tags) if isinstance(tags, str) else None),
        "CommitmentDiscountCategory": None, "CommitmentDiscountId": None, "CommitmentDiscountName": None,
        "CommitmentDiscountStatus": None, "CommitmentDiscountType": None, "RegionId": None, "RegionName": None,
    }
    return {c: row.get(c) for c in COLUMNS[options.version]}


def csv_cell(value: Any) -> str:
    """A typed value as FOCUS CSV text: ISO 8601 UTC with Z, plain decimals, JSON objects, '' for null."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return str(value)
