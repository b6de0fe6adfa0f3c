"""Check a FOCUS dataset against the column rules of a FOCUS requirements model (model-1.2.0.1.json).

Why our own evaluator: the FinOps Foundation's validator for FOCUS 1.2 (focus-validator 2.x)
needs Python 3.12; its rule model is data (MIT) and ships in the 2.2.1 sdist, pinned in
``tests/fixtures/focus/``. This module reads that model and evaluates, in one streaming pass, every
rule that (a) is reachable from the dataset's root composite through composites whose
``ApplicabilityCriteria`` the caller declares, (b) is ``Static`` (has a machine-readable
``Requirement``) and (c) has a keyword that obliges (MUST, MUST NOT fail; SHOULD, SHOULD NOT,
RECOMMENDED warn). Everything else is listed in :attr:`RulesReport.not_evaluated` with the reason.

Semantics follow the 2.2.1 validator's SQL: SQL three-valued logic (a NULL operand makes a
comparison unknown, and an unknown requirement is not a violation; an unknown condition does not
apply) -- except that NULL "is not" any value (``CheckNotValue``), as the model's prose means and
its SQL does not -- a column absent from the dataset reads as NULL in conditions, a requirement on an absent
column is not evaluated (its presence rule reports the absence), ``A x B = R`` within
``1e-9 x max(|R|, 1)``, and a composite's ``Condition`` applies to every rule below it.

Values are typed by the reader: ``str``, ``Decimal``/``int``/``float``, timezone-aware
``datetime``, ``bool``, ``dict`` (a key-value column already parsed) or ``None``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

ROOT_RULE = "CostAndUsage-D-000-M"
FAILING = frozenset({"MUST", "MUST NOT"})
WARNING = frozenset({"SHOULD", "SHOULD NOT", "RECOMMENDED"})
EXAMPLES = 5  # row numbers kept per rule
TOLERANCE = Decimal("1e-9")  # focus-validator 2.2.1 ColumnByColumnEqualsColumnValue

# FOCUS NumericFormat, as focus-validator 2.2.1 checks it (FormatNumericGenerator).
NUMERIC = re.compile(r"^[+-]?([0-9]*[.])?[0-9]+([eE][+-]?[0-9]+)?$")
ISO_UTC = re.compile(r"^[0-9]{4}-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9]Z$")
CURRENCY = re.compile(r"^[A-Z]{3}$")


def _unit_format() -> re.Pattern[str]:
    """FOCUS UnitFormat, the five shapes focus-validator 2.2.1 accepts (FormatUnitGenerator)."""
    data = "b|Kb|Mb|Gb|Tb|Pb|Eb|B|KB|MB|GB|TB|PB|EB|Kib|Mib|Gib|Tib|Pib|Eib|KiB|MiB|GiB|TiB|PiB|EiB"
    one = "Year|Month|Day|Hour|Minute|Second"
    many = "Years|Months|Days|Hours|Minutes|Seconds"
    count = r"[A-Za-z][A-Za-z0-9]*(?:\s+[A-Za-z][A-Za-z0-9]*)*"
    shapes = [
        rf"^({data}|{one}|{many}|{count})$",
        rf"^({data}|{count})-({many})$",
        rf"^({data}|{count}|{many})/({one})$",
        rf"^[0-9]+ ({data}|{one}|{many}|{count})$",
        rf"^({data}|{count}|{many})/[0-9]+ ({many})$",
    ]
    return re.compile("|".join(f"({s})" for s in shapes))


UNIT = _unit_format()


class FocusModelError(ValueError):
    """The requirements model is not shaped as model-1.2.0.1.json is."""


@dataclass(frozen=True)
class ModelRule:
    rule_id: str
    function: str
    entity_type: str
    rule_type: str  # Static | Dynamic
    keyword: str
    must_satisfy: str
    applicability: tuple[str, ...]
    requirement: Mapping[str, Any]
    condition: Mapping[str, Any]


@dataclass(frozen=True)
class RuleModel:
    model_version: str
    focus_version: str
    rules: Mapping[str, ModelRule]


def load_model(text: str) -> RuleModel:
    """Parse a requirements model; :class:`FocusModelError` on anything not shaped like one."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FocusModelError(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("ModelRules"), dict):
        raise FocusModelError("no ModelRules object")
    details = data["Details"] if isinstance(data.get("Details"), dict) else {}
    rules: dict[str, ModelRule] = {}
    for rule_id, raw in data["ModelRules"].items():
        if not isinstance(raw, dict) or not isinstance(raw.get("ValidationCriteria"), dict):
            raise FocusModelError(f"{rule_id}: no ValidationCriteria")
        vc = raw["ValidationCriteria"]
        applicability = raw.get("ApplicabilityCriteria") or []
        if not isinstance(applicability, list) or not all(isinstance(a, str) for a in applicability):
            raise FocusModelError(f"{rule_id}: ApplicabilityCriteria is not a list of names")
        requirement = {} if vc.get("Requirement") is None else vc["Requirement"]
        condition = {} if vc.get("Condition") is None else vc["Condition"]
        if not isinstance(requirement, dict) or not isinstance(condition, dict):
            raise FocusModelError(f"{rule_id}: Requirement/Condition is not an object")
        rules[str(rule_id)] = ModelRule(
            rule_id=str(rule_id), function=str(raw.get("Function", "")), entity_type=str(raw.get("EntityType", "")),
            rule_type=str(raw.get("Type", "")), keyword=str(vc.get("Keyword", "")),
            must_satisfy=str(vc.get("MustSatisfy", "")), applicability=tuple(applicability),
            requirement=requirement, condition=condition,
        )
    if ROOT_RULE not in rules:
        raise FocusModelError(f"no root rule {ROOT_RULE}")
    return RuleModel(str(details.get("ModelVersion", "")), str(details.get("FOCUSVersion", "")), rules)


@dataclass(frozen=True)
class RuleOutcome:
    rule_id: str
    keyword: str
    status: str  # pass | fail | warn
    message: str  # the model's own MustSatisfy text
    violations: int
    example_rows: tuple[int, ...]  # 1-based data row numbers (dataset-level rules: none)


@dataclass(frozen=True)
class RulesReport:
    model_version: str
    focus_version: str
    rows: int
    outcomes: tuple[RuleOutcome, ...]
    not_evaluated: Mapping[str, str]  # rule id -> why

    @property
    def failures(self) -> tuple[RuleOutcome, ...]:
        return tuple(o for o in self.outcomes if o.status == "fail")

    @property
    def warnings(self) -> tuple[RuleOutcome, ...]:
        return tuple(o for o in self.outcomes if o.status == "warn")

    @property
    def passed(self) -> bool:
        return not self.failures


class _Malformed(Exception):
    """A check node the evaluator cannot read (e.g. the model's ResourceId-C-006-C condition
    names its column under ``CheckCondition`` instead of ``ColumnName``)."""


_COLUMN_KEYS = ("ColumnName", "ColumnAName", "ColumnBName", "ResultColumnName")
_ROW_FUNCTIONS = frozenset({
    "AND", "OR", "CheckValue", "CheckNotValue", "CheckSameValue", "CheckNotSameValue", "TypeString",
    "TypeDecimal", "TypeDateTime", "FormatString", "FormatNumeric", "FormatDateTime", "FormatCurrency",
    "CheckNationalCurrency", "FormatUnit", "FormatKeyValue", "CheckGreaterOrEqualThanValue",
    "ColumnByColumnEqualsColumnValue", "CheckDecimalValue",
})


def _columns(node: Mapping[str, Any]) -> set[str]:
    out: set[str] = set()
    for key in _COLUMN_KEYS:
        if isinstance(node.get(key), str):
            out.add(node[key])
    for item in node.get("Items") or []:
        if isinstance(item, Mapping):
            out |= _columns(item)
    return out


def _check_shape(node: Mapping[str, Any]) -> None:
    fn = node.get("CheckFunction")
    if fn in ("AND", "OR"):
        items = node.get("Items")
        if not isinstance(items, list) or not items or not all(isinstance(i, Mapping) for i in items):
            raise _Malformed(f"{fn} without Items")
        for item in items:
            _check_shape(item)
        return
    if fn not in _ROW_FUNCTIONS and fn not in ("ColumnPresent", "CheckDistinctCount"):
        raise _Malformed(f"unknown check function {fn!r}")
    needs = {
        "ColumnByColumnEqualsColumnValue": ("ColumnAName", "ColumnBName", "ResultColumnName"),
        "CheckSameValue": ("ColumnAName", "ColumnBName"), "CheckNotSameValue": ("ColumnAName", "ColumnBName"),
        "CheckDistinctCount": ("ColumnAName", "ColumnBName", "ExpectedCount"),
    }.get(str(fn), ("ColumnName",))
    missing = [k for k in needs if k not in node]
    if missing:
        raise _Malformed(f"{fn} without {', '.join(missing)}")
    if fn in ("CheckValue", "CheckNotValue", "CheckGreaterOrEqualThanValue") and "Value" not in node:
        raise _Malformed(f"{fn} without Value")


# --- three-valued row checks -------------------------------------------------------------------

def _is_number(v: Any) -> bool:
    return isinstance(v, Decimal | int | float) and not isinstance(v, bool)


def _dec(v: Any) -> Decimal | None:
    if _is_number(v):
        return Decimal(str(v)) if isinstance(v, float) else Decimal(v)
    if isinstance(v, str):
        try:
            return Decimal(v.strip())
        except InvalidOperation:
            return None
    return None


def _equals(v: Any, expected: Any) -> bool | None:
    if v is None:
        return None
    if _is_number(expected) or _is_number(v):
        a, b = _dec(v), _dec(expected)
        return None if a is None or b is None else a == b
    return str(v) == str(expected)


def _key_value(v: Any) -> bool:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except json.JSONDecodeError:
            return False
    return isinstance(v, dict) and all(isinstance(k, str) for k in v) and all(
        x is None or isinstance(x, str | int | float | bool) for x in v.values())


def _datetime_ok(v: Any) -> bool:
    if isinstance(v, datetime):
        return v.tzinfo is not None and v.utcoffset() == UTC.utcoffset(None)
    return isinstance(v, str) and bool(ISO_UTC.match(v))


def _row(node: Mapping[str, Any], row: Mapping[str, Any], currencies: frozenset[str]) -> bool | None:
    """One check on one row, in SQL's three-valued logic (None = unknown)."""
    fn = node["CheckFunction"]
    if fn == "AND":
        results = [_row(i, row, currencies) for i in node["Items"]]
        return False if False in results else (None if None in results else True)
    if fn == "OR":
        results = [_row(i, row, currencies) for i in node["Items"]]
        return True if True in results else (None if None in results else False)
    if fn in ("ColumnByColumnEqualsColumnValue", "CheckSameValue", "CheckNotSameValue"):
        a, b = row.get(node["ColumnAName"]), row.get(node["ColumnBName"])
        if fn == "CheckSameValue":
            return _equals(a, b) if b is not None else None
        if fn == "CheckNotSameValue":
            same = _equals(a, b) if b is not None else None
            return None if same is None else not same
        r = row.get(node["ResultColumnName"])
        da, db, dr = _dec(a), _dec(b), _dec(r)
        if da is None or db is None or dr is None:
            return None
        return abs(da * db - dr) <= TOLERANCE * max(abs(dr), Decimal(1))
    v = row.get(node["ColumnName"])
    if fn == "CheckValue":
        return (v is None) if node["Value"] is None else _equals(v, node["Value"])
    if fn == "CheckNotValue":
        if node["Value"] is None or v is None:
            # NULL "is not" any value: the model's conditions say 'ChargeClass is not "Correction"'
            # of regular charges, whose ChargeClass is NULL (2.2.1's SQL reads it as unknown and
            # so skips e.g. ListCost = ListUnitPrice x PricingQuantity on every regular row).
            return v is not None if node["Value"] is None else True
        same = _equals(v, node["Value"])
        return None if same is None else not same
    if v is None:
        return None  # every type/format/value check reads `col IS NOT NULL AND ...`
    if fn == "TypeString":
        return isinstance(v, str)
    if fn == "TypeDecimal":
        return _is_number(v)
    if fn == "TypeDateTime":
        return isinstance(v, datetime) or (isinstance(v, str) and bool(ISO_UTC.match(v)))
    if fn == "FormatString":
        return str(v).isascii()
    if fn == "FormatNumeric":
        text = format(v, "f") if isinstance(v, Decimal) else str(v)
        return bool(NUMERIC.match(text.strip()))
    if fn == "FormatDateTime":
        return _datetime_ok(v)
    if fn == "FormatCurrency":
        return bool(CURRENCY.match(str(v).strip()))
    if fn == "CheckNationalCurrency":
        return str(v).strip() in currencies
    if fn == "FormatUnit":
        return bool(UNIT.match(str(v)))
    if fn == "FormatKeyValue":
        return _key_value(v)
    if fn == "CheckGreaterOrEqualThanValue":
        d = _dec(v)
        return None if d is None else d >= Decimal(str(node["Value"]))
    if fn == "CheckDecimalValue":
        return _is_number(v) or _dec(v) is not None
    raise _Malformed(f"unknown check function {fn!r}")


# --- planning ----------------------------------------------------------------------------------

@dataclass
class _Planned:
    rule: ModelRule
    condition: tuple[Mapping[str, Any], ...]  # own condition and every composite's above it
    violations: int = 0
    examples: list[int] = field(default_factory=list)
    groups: dict[Any, set[Any]] = field(default_factory=dict)  # CheckDistinctCount


def _walk(model: RuleModel, criteria: frozenset[str],
          not_evaluated: dict[str, str]) -> list[tuple[ModelRule, tuple[Mapping[str, Any], ...]]]:
    """Leaf rules reachable from the root through applicable composites, with inherited conditions."""
    leaves: list[tuple[ModelRule, tuple[Mapping[str, Any], ...]]] = []
    seen: set[str] = set()
    queue: list[tuple[str, tuple[Mapping[str, Any], ...]]] = [(ROOT_RULE, ())]
    while queue:
        rule_id, inherited = queue.pop(0)
        if rule_id in seen:
            continue
        seen.add(rule_id)
        rule = model.rules.get(rule_id)
        if rule is None:
            not_evaluated[rule_id] = "referenced by a composite but not in the model"
            continue
        missing = [c for c in rule.applicability if c not in criteria]
        if missing:
            not_evaluated[rule_id] = f"not applicable: needs {', '.join(missing)}"
            continue
        conditions = (*inherited, rule.condition) if rule.condition else inherited
        if rule.function == "Composite":
            req = rule.requirement
            if req.get("CheckFunction") != "AND":
                # An OR composite is a choice between alternatives (e.g. InvoiceId's nullability);
                # its parts are not requirements on their own.
                not_evaluated[rule_id] = f"{req.get('CheckFunction')} composite of alternatives"
                continue
            for item in req.get("Items") or []:
                if isinstance(item, Mapping) and item.get("CheckFunction") == "CheckModelRule":
                    queue.append((str(item.get("ModelRuleId")), conditions))
            continue
        leaves.append((rule, conditions))
    below = _reachable(model) - seen
    for rule_id in model.rules:
        if rule_id in below:
            not_evaluated[rule_id] = "not applicable: below a composite whose ApplicabilityCriteria we do not declare"
        elif rule_id not in seen:
            # The model's Attribute rules (ColumnHandling, NullHandling, formats...) hang off no
            # dataset composite; all of them are Dynamic prose.
            not_evaluated[rule_id] = "not reachable from the dataset's rules"
    return leaves


def _reachable(model: RuleModel) -> set[str]:
    seen: set[str] = set()
    stack = [ROOT_RULE]
    while stack:
        rule_id = stack.pop()
        if rule_id in seen or rule_id not in model.rules:
            continue
        seen.add(rule_id)
        for item in model.rules[rule_id].requirement.get("Items") or []:
            if isinstance(item, Mapping) and item.get("CheckFunction") == "CheckModelRule":
                stack.append(str(item.get("ModelRuleId")))
    return seen


def evaluate(model: RuleModel, criteria: Iterable[str], columns: Sequence[str],
             rows: Iterable[Mapping[str, Any]], currencies: Iterable[str]) -> RulesReport:
    """Evaluate ``model`` on a dataset with ``columns`` whose provider supports ``criteria``.

    ``rows`` is consumed once (stream a file through it); ``currencies`` are the ISO 4217 codes
    that CheckNationalCurrency accepts.
    """
    criteria = frozenset(criteria)
    present = frozenset(columns)
    currency_codes = frozenset(currencies)
    not_evaluated: dict[str, str] = {}
    dataset: list[RuleOutcome] = []
    planned: list[_Planned] = []
    for rule, conditions in _walk(model, criteria, not_evaluated):
        if rule.keyword not in FAILING | WARNING:
            not_evaluated[rule.rule_id] = f"{rule.keyword or 'no'} keyword: a permission, nothing to check"
            continue
        if rule.rule_type != "Static" or not rule.requirement:
            not_evaluated[rule.rule_id] = "Dynamic: a prose requirement the model gives no check for"
            continue
        try:
            _check_shape(rule.requirement)
            for cond in conditions:
                _check_shape(cond)
        except _Malformed as exc:
            not_evaluated[rule.rule_id] = f"malformed check in the model: {exc}"
            continue
        fn = rule.requirement["CheckFunction"]
        if fn == "ColumnPresent":
            ok = rule.requirement["ColumnName"] in present
            dataset.append(_outcome(rule, 0 if ok else 1, ()))
            continue
        absent = sorted(_columns(rule.requirement) - present)
        if absent:
            not_evaluated[rule.rule_id] = f"column absent: {', '.join(absent)}"
            continue
        planned.append(_Planned(rule, conditions))
    count = 0
    for count, row in enumerate(rows, start=1):
        for p in planned:
            if any(_row(c, row, currency_codes) is not True for c in p.condition):
                continue
            req = p.rule.requirement
            if req["CheckFunction"] == "CheckDistinctCount":
                a = row.get(req["ColumnAName"])
                if a is not None:
                    p.groups.setdefault(a, set()).add(row.get(req["ColumnBName"]))
                continue
            if _row(req, row, currency_codes) is False:
                p.violations += 1
                if len(p.examples) < EXAMPLES:
                    p.examples.append(count)
    outcomes = list(dataset)
    for p in planned:
        req = p.rule.requirement
        if req["CheckFunction"] == "CheckDistinctCount":
            expected = int(req["ExpectedCount"])
            p.violations = sum(1 for values in p.groups.values() if len(values) != expected)
        outcomes.append(_outcome(p.rule, p.violations, tuple(p.examples)))
    outcomes.sort(key=lambda o: o.rule_id)
    return RulesReport(model.model_version, model.focus_version, count, tuple(outcomes), not_evaluated)


def _outcome(rule: ModelRule, violations: int, examples: tuple[int, ...]) -> RuleOutcome:
    if violations == 0:
        status = "pass"
    else:
        status = "fail" if rule.keyword in FAILING else "warn"
    return RuleOutcome(rule.rule_id, rule.keyword, status, rule.must_satisfy, violations, examples)
