"""The pure parts of FOCUS export and conformance: the column mapping and the 1.2 rule evaluator.

The evaluator runs on the pinned requirements model (tests/fixtures/focus/model-1.2.0.1.json,
from focus-validator 2.2.1) and on rows made by :func:`core.finops.focus.focus_row` from cost-fact
lines shaped as the dbt model writes them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from core.finops.focus import (
    COLUMNS,
    CRITERIA,
    ExportOptions,
    FocusExportError,
    billing_period,
    csv_cell,
    focus_row,
)
from core.finops.focus_rules import FocusModelError, RuleModel, RulesReport, evaluate, load_model

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "focus"
MODEL = load_model((FIXTURES / "model-1.2.0.1.json").read_text())
CURRENCIES = frozenset(line.split(",")[1].strip() for line in
                       (FIXTURES / "currency_codes.csv").read_text().splitlines()[1:] if line.strip())

WORKLOAD: dict[str, Any] = {
    "ChargePeriodStart": datetime(2026, 11, 3, 5, tzinfo=UTC), "ChargePeriodEnd": datetime(2026, 11, 3, 6, tzinfo=UTC),
    "BillingCurrency": "USD", "ChargeCategory": "Usage", "ChargeDescription": "GPU time of pod ns/p on n1",
    "ProviderName": "gpufabric", "ServiceName": "GPU compute", "ServiceCategory": "Compute",
    "ResourceId": "6f1c2a8e-uid", "ResourceName": "ns/p", "ResourceType": "Kubernetes Pod (GPU)",
    "ConsumedQuantity": Decimal("0.083333333"), "ConsumedUnit": "GPU-Hours",
    "PricingQuantity": Decimal("0.083333333333333333"), "PricingUnit": "GPU-Hours",
    "ListUnitPrice": Decimal("4.0000"), "ContractedUnitPrice": Decimal("3.5000"),
    "ListCost": Decimal("0.333333333"), "EffectiveCost": Decimal("0.291666667"),
    "SubAccountId": "acme", "SubAccountName": "Acme Research", "Tags": {"client": "acme", "depth": 1, "tier": None},
    "x_CostBasis": "allocation", "x_LineType": "workload", "x_Cluster": "c1", "x_Node": "n1",
    "x_GpuModel": "NVIDIA-H100-80GB-HBM3", "x_Tier": "interactive", "x_Depth": 1, "x_ActivityMeasured": True,
}
IDLE: dict[str, Any] = {
    **WORKLOAD, "ResourceId": "c1/n1", "ResourceName": "n1", "ResourceType": "Idle GPU capacity",
    "ConsumedQuantity": Decimal("7.916666667"), "PricingQuantity": Decimal("7.916666667"),
    "ContractedUnitPrice": Decimal("4.0000"), "ListCost": Decimal("31.666666668"),
    "EffectiveCost": Decimal("31.666666668"), "SubAccountId": None, "SubAccountName": None,
    "Tags": {"cluster": "c1", "node": "n1"}, "x_LineType": "idle", "x_Tier": None, "x_Depth": None,
}


def rows(*facts: dict[str, Any], version: str = "1.2") -> list[dict[str, Any]]:
    return [focus_row(f, ExportOptions(version=version)) for f in facts]


def run(data: list[dict[str, Any]], columns: tuple[str, ...] = COLUMNS["1.2"], model: RuleModel = MODEL) -> RulesReport:
    return evaluate(model, CRITERIA, columns, iter(data), CURRENCIES)


def failed(report: RulesReport) -> dict[str, Any]:
    return {o.rule_id: o for o in report.failures}


# --- the model fixture ---------------------------------------------------------------------------

def test_pinned_model_is_the_focus_1_2_requirements_model() -> None:
    assert (MODEL.model_version, MODEL.focus_version) == ("1.2.0.1", "1.2")
    assert len(MODEL.rules) == 621
    assert sum(1 for r in MODEL.rules.values() if r.rule_type == "Static") == 420
    assert {"USD", "EUR", "JPY"} <= CURRENCIES and "US$" not in CURRENCIES and len(CURRENCIES) == 180


@pytest.mark.parametrize(("text", "error"), [
    ("{not json", "not JSON"),
    ("[]", "no ModelRules object"),
    ('{"ModelRules": {"X": 1}}', "X: no ValidationCriteria"),
    ('{"ModelRules": {"X": {"ValidationCriteria": {}, "ApplicabilityCriteria": "A"}}}', "not a list of names"),
    ('{"ModelRules": {"X": {"ValidationCriteria": {"Requirement": []}}}}', "Requirement/Condition is not an object"),
    ('{"ModelRules": {}}', "no root rule CostAndUsage-D-000-M"),
])
def test_a_model_not_shaped_like_one_is_refused_with_the_reason(text: str, error: str) -> None:
    with pytest.raises(FocusModelError, match=error):
        load_model(text)


# --- clean data passes; what is and is not evaluated ---------------------------------------------

def test_clean_rows_pass_and_the_rules_that_apply_are_evaluated() -> None:
    report = run(rows(WORKLOAD, IDLE))
    assert report.passed and report.rows == 2
    evaluated = {o.rule_id for o in report.outcomes}
    assert len(evaluated) == 178
    assert {"BilledCost-C-003-M", "BillingCurrency-C-006-M", "ConsumedUnit-C-003-O", "ListCost-C-009-C",
            "ContractedUnitPrice-C-011-C", "SkuPriceId-C-008-M", "ServiceName-C-005-C"} <= evaluated
    assert [o.rule_id for o in report.warnings] == ["CostAndUsage-D-033-O"]  # InvoiceId: no invoices
    reasons = report.not_evaluated
    assert reasons["CommitmentDiscountId-C-000-C"] == "not applicable: needs COMMITMENT_DISCOUNT_SUPPORTED"
    assert reasons["CommitmentDiscountId-C-001-M"].startswith("not applicable: below a composite")
    assert reasons["ListUnitPrice-C-009-M"] == "Dynamic: a prose requirement the model gives no check for"
    assert reasons["ListUnitPrice-C-006-O"] == "MAY keyword: a permission, nothing to check"
    assert reasons["InvoiceId-C-001-M"] == "column absent: InvoiceId"
    assert reasons["ColumnHandling-A-000-M"] == "not reachable from the dataset's rules"
    assert set(reasons) | {o.rule_id for o in report.outcomes} | _composites_walked() == set(MODEL.rules)


def _composites_walked() -> set[str]:
    return {k for k, r in MODEL.rules.items() if r.function == "Composite"}


def test_the_1_0_column_set_misses_1_2_columns_and_the_model_says_so() -> None:
    report = run(rows(WORKLOAD, version="1.0"), columns=COLUMNS["1.0"])
    bad = failed(report)
    assert set(bad) == {"CostAndUsage-D-059-C", "CostAndUsage-D-061-C"}  # SkuMeter, SkuPriceDetails
    assert bad["CostAndUsage-D-059-C"].message == (
        "SkuMeter MUST be present in a FOCUS dataset when the provider supports unit pricing concepts "
        "and publishes price lists, publicly or as part of contracting.")
    assert {o.rule_id for o in report.warnings} == {"CostAndUsage-D-033-O", "CostAndUsage-D-042-O"}


# --- each kind of breakage fails with the model's own message ------------------------------------

@pytest.mark.parametrize(("column", "value", "rules"), [
    ("BillingCurrency", "US$", {"BillingCurrency-C-003-M", "BillingCurrency-C-006-M"}),
    ("BillingCurrency", "XYZ", {"BillingCurrency-C-006-M"}),  # three capitals, but not ISO 4217
    ("BillingCurrency", None, {"BillingCurrency-C-004-M"}),
    ("ListUnitPrice", Decimal("-4.0000"), {"ListUnitPrice-C-008-M", "ListCost-C-009-C", "ListUnitPrice-C-010-C"}),
    ("ListCost", Decimal("-0.333333333"), {"ListCost-C-009-C", "ListUnitPrice-C-010-C"}),
    ("ContractedUnitPrice", Decimal("-3.5"), {"ContractedUnitPrice-C-009-C", "ContractedUnitPrice-C-011-C"}),
    # ...and a non-usage line must carry no ConsumedQuantity
    ("ChargeCategory", "Refund", {"ChargeCategory-C-003-M", "ConsumedQuantity-C-004-C"}),
    # NULL is unknown for the allowed values (not a second violation of C-003), and not "Usage"
    ("ChargeCategory", None, {"ChargeCategory-C-002-M", "ConsumedQuantity-C-004-C"}),
    ("ServiceSubcategory", "Virtual Machines!", {"ServiceSubcategory-C-003-M", "ServiceSubcategory-C-004-M"}),
    ("ServiceSubcategory", "Generative AI", {"ServiceSubcategory-C-004-M"}),  # an AI subcategory under Compute
    ("ChargePeriodStart", "2026-11-03 05:00:00", {"ChargePeriodStart-C-001-M", "ChargePeriodStart-C-002-M"}),
    ("ChargePeriodStart", datetime(2026, 11, 3, 5), {"ChargePeriodStart-C-002-M"}),  # no timezone
    ("EffectiveCost", None, {"EffectiveCost-C-003-M", "EffectiveCost-C-004-M"}),
    ("ConsumedQuantity", "lots", {"ConsumedQuantity-C-001-M", "ConsumedQuantity-C-002-M"}),
    ("BillingAccountId", 12345, {"BillingAccountId-C-002-M"}),  # an id read as a number by a CSV loader
    ("ResourceName", "pod-ü", {"ResourceName-C-002-M"}),  # StringHandling: ASCII
    ("SubAccountName", None, {"SubAccountName-C-005-C"}),
    ("Tags", '{"a": {"nested": 1}}', {"Tags-C-001-M"}),
    ("Tags", "[1, 2]", {"Tags-C-001-M"}),
    ("Tags", "not json\x00", {"Tags-C-001-M"}),
    ("SkuId", None, {"SkuId-C-005-C", "SkuPriceId-C-005-C", "SkuMeter-C-004-C", "SkuPriceDetails-C-004-C"}),
    ("ConsumedUnit", None, {"ConsumedUnit-C-006-C"}),
])
def test_a_broken_value_fails_the_rules_that_forbid_it(column: str, value: Any, rules: set[str]) -> None:
    row = rows(WORKLOAD)[0]
    row[column] = value
    if column == "SkuId":  # SkuPriceId keeps naming the SKU, SkuMeter/SkuPriceDetails stay set
        row["SkuPriceId"] = None
    report = run([rows(IDLE)[0], row])
    bad = failed(report)
    assert set(bad) == rules
    for rule_id in rules:
        assert bad[rule_id].message == MODEL.rules[rule_id].must_satisfy
        assert bad[rule_id].example_rows in ((2,), ())


def test_a_missing_mandatory_column_fails_its_presence_rule_and_skips_its_other_rules() -> None:
    data = rows(WORKLOAD, IDLE)
    for r in data:
        del r["BilledCost"]
    report = run(data, columns=tuple(c for c in COLUMNS["1.2"] if c != "BilledCost"))
    bad = failed(report)
    assert set(bad) == {"CostAndUsage-D-006-M"}
    assert bad["CostAndUsage-D-006-M"].message == "BilledCost MUST be present in a FOCUS dataset."
    assert report.not_evaluated["BilledCost-C-003-M"] == "column absent: BilledCost"


def test_a_sku_price_with_two_skus_fails_the_distinct_count_rule() -> None:
    other = dict(WORKLOAD, x_GpuModel="NVIDIA-B200")
    data = rows(WORKLOAD, other)
    data[1]["SkuPriceId"] = data[0]["SkuPriceId"]
    bad = failed(run(data))
    assert set(bad) == {"SkuPriceId-C-008-M"}
    assert bad["SkuPriceId-C-008-M"].violations == 1  # one SkuPriceId with two parents


def test_product_rule_allows_the_validators_1e9_and_no_more() -> None:
    # 4 x 0.083333333333333333 = 0.333333333333333332: 3.3e-10 from the once-rounded cost passes
    within = rows(WORKLOAD)[0]
    beyond = dict(within, ListCost=Decimal("0.333333335"))
    assert run([within]).passed
    assert set(failed(run([beyond]))) == {"ListCost-C-009-C", "ListUnitPrice-C-010-C"}
    # with quantities at 9 decimals (what the fact had before): 4 x 0.083333333 misses the list cost
    # by exactly 1e-9 (passes, at the edge), 3.5 x 0.083333333 the contracted cost by 1.5e-9
    nine = dict(within, PricingQuantity=Decimal("0.083333333"))
    assert set(failed(run([nine]))) == {"ContractedUnitPrice-C-011-C"}


def test_should_rules_warn_and_do_not_fail() -> None:
    row = rows(WORKLOAD)[0]
    row["ConsumedUnit"] = row["PricingUnit"] = "GPU hours!"
    report = run([row])
    assert report.passed
    assert {o.rule_id for o in report.warnings} == {"CostAndUsage-D-033-O", "ConsumedUnit-C-003-O",
                                                   "PricingUnit-C-003-O"}


def test_a_malformed_check_in_the_model_is_reported_not_run() -> None:
    raw = json.loads((FIXTURES / "model-1.2.0.1.json").read_text())
    raw["ModelRules"]["BillingCurrency-C-004-M"]["ValidationCriteria"]["Requirement"] = {
        "CheckFunction": "CheckNotValue", "ColumnName": "BillingCurrency"}
    raw["ModelRules"]["BillingCurrency-C-001-M"]["ValidationCriteria"]["Requirement"] = {
        "CheckFunction": "CheckTheMoon", "ColumnName": "BillingCurrency"}
    model = load_model(json.dumps(raw))
    report = run(rows(WORKLOAD), model=model)
    assert report.not_evaluated["BillingCurrency-C-004-M"] == (
        "malformed check in the model: CheckNotValue without Value")
    assert report.not_evaluated["BillingCurrency-C-001-M"] == (
        "malformed check in the model: unknown check function 'CheckTheMoon'")


def test_hostile_values_are_judged_not_crashed_on() -> None:
    row = rows(WORKLOAD)[0]
    row.update(ListCost=b"\x00\xff", ConsumedQuantity=[1], ChargeDescription=object(), ResourceId=float("nan"))
    bad = failed(run([row]))
    assert {"ListCost-C-001-M", "ListCost-C-002-M", "ConsumedQuantity-C-001-M", "ChargeDescription-C-001-M",
            "ResourceId-C-001-M"} <= set(bad)


# --- the column mapping --------------------------------------------------------------------------

def test_focus_row_fills_the_billing_side_columns() -> None:
    work, idle = rows(WORKLOAD, IDLE)
    assert (work["BilledCost"], work["ContractedCost"]) == (Decimal("0.291666667"), Decimal("0.291666667"))
    assert (work["BillingPeriodStart"], work["BillingPeriodEnd"]) == (
        datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    assert work["SkuPriceId"] == "GPU-Hour:NVIDIA-H100-80GB-HBM3:interactive"
    assert idle["SkuPriceId"] == "GPU-Hour:NVIDIA-H100-80GB-HBM3:list"
    assert idle["SubAccountName"] is None and idle["ServiceSubcategory"] == "Containers"
    orphan = rows(dict(WORKLOAD, SubAccountName=None))[0]
    assert orphan["SubAccountName"] == "acme"  # a client missing from the seed goes by its id
    unknown = rows(dict(WORKLOAD, x_GpuModel=None))[0]
    assert unknown["SkuId"] is None and unknown["SkuPriceDetails"] is None
    assert list(work) == list(COLUMNS["1.2"])
    assert list(rows(WORKLOAD, version="1.0")[0]) == list(COLUMNS["1.0"])


def test_billing_period_rolls_over_the_year() -> None:
    assert billing_period(datetime(2026, 12, 31, 23, tzinfo=UTC)) == (
        datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize(("value", "text"), [
    (None, ""), (True, "true"), (Decimal("1E-9"), "0.000000001"), (Decimal("-0.5"), "-0.5"),
    (datetime(2026, 11, 3, 5, tzinfo=UTC), "2026-11-03T05:00:00Z"), ({"b": 1, "a": None}, '{"a":null,"b":1}'),
    ({"k": "é"}, '{"k":"\\u00e9"}'), (7, "7"),
])
def test_csv_cells(value: Any, text: str) -> None:
    assert csv_cell(value) == text


def test_bad_options_and_bad_lines_are_refused() -> None:
    with pytest.raises(FocusExportError, match=r"FOCUS version '1\.3' is not one we export: 1\.0, 1\.2"):
        ExportOptions(version="1.3")
    with pytest.raises(FocusExportError, match="cost basis 'both' is not one of allocation, usage"):
        ExportOptions(basis="both")
    with pytest.raises(FocusExportError, match="without a timezone-aware ChargePeriodStart"):
        focus_row(dict(WORKLOAD, ChargePeriodStart=datetime(2026, 11, 3, 5)), ExportOptions())
    with pytest.raises(FocusExportError, match="without a timezone-aware ChargePeriodStart: None"):
        focus_row({}, ExportOptions())
