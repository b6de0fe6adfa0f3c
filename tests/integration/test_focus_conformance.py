"""FOCUS conformance of ``gpufabric finops export --focus``, judged by the FinOps Foundation's rules.

Its own fresh database: the simulated week (the same production path as test_finops_week: pods
and DCGM samples landed by our loaders, one ``dbt build``), exported through the CLI. FOCUS 1.0:
the Foundation's focus-validator 1.0.0 in its tool venv (built on first use, then reused). FOCUS
1.2: the requirements model shipped with focus-validator 2.2.1 (tests/fixtures/focus), evaluated
by core/finops/focus_rules.py. Each also gets a deliberately broken copy of the export and must
fail it with its own messages.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from connectors.warehouse import Warehouse, open_warehouse
from core.finops.focus import COLUMNS, CRITERIA, ExportOptions
from core.finops.focus_rules import RulesReport, evaluate, load_model
from services.finops_export import export_focus, fact_summary, load_currency_codes, read_focus
from services.focus_validator import validate
from simulator.agents import simulate_week
from tests.integration.test_finops_week import dbt_build, land_week

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "focus"


@pytest.fixture(scope="module")
def focus_db(warehouse: Warehouse, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A warehouse whose cost fact holds the simulated week, and its FOCUS exports made by the CLI."""
    out = tmp_path_factory.mktemp("focus")
    with warehouse.scratch_database("t_focus") as url:
        wh = open_warehouse(url)
        week = simulate_week("sim-focus", namespace_suffix="-fc")
        land_week(wh, week, week.pods, with_nodes=True)
        dbt_build(wh, out)
        files = {}
        for version in ("1.0", "1.2"):
            files[version] = out / f"focus-{version}.csv"
            result = subprocess.run(
                [sys.executable, "-c", "from pipelines.cli_finops import app; app()", "export", "--focus",
                 "--version", version, str(files[version])],
                capture_output=True, text=True, timeout=600, cwd=ROOT, check=False,
                env={**os.environ, "GPUFABRIC_DATABASE_URL": url, "COLUMNS": "200"})
            assert result.returncode == 0, result.stdout + result.stderr
            files[f"{version}-stdout"] = result.stdout
        with wh.connect() as conn:
            summary = fact_summary(conn, "allocation")
        yield {"wh": wh, "files": files, "summary": summary, "out": out}
        wh.dispose()


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    return rows[0], rows[1:]


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows([header, *rows])
    return path


def broken_copy(src: Path, dst: Path) -> Path:
    """The export with BilledCost dropped, a bad currency code on line 1, negative costs on line 2."""
    header, rows = read_csv(src)
    rows = [list(r) for r in rows]
    rows[0][header.index("BillingCurrency")] = "US$"
    for column in ("ListCost", "EffectiveCost", "ContractedCost", "ListUnitPrice", "ContractedUnitPrice"):
        cell = rows[1][header.index(column)]
        rows[1][header.index(column)] = str(-Decimal(cell))
    keep = [i for i, c in enumerate(header) if c != "BilledCost"]
    return write_csv(dst, [header[i] for i in keep], [[r[i] for i in keep] for r in rows])


def rules_report(path: Path) -> RulesReport:
    model = load_model((FIXTURES / "model-1.2.0.1.json").read_text())
    columns, rows = read_focus(path)
    return evaluate(model, CRITERIA, columns, rows(), load_currency_codes(FIXTURES / "currency_codes.csv"))


def test_export_holds_every_line_of_the_basis_with_the_version_columns(focus_db: dict[str, Any]) -> None:
    summary = focus_db["summary"]
    assert summary["rows"] > 1000  # a week of a cluster: idle and workload lines
    for version in ("1.0", "1.2"):
        header, rows = read_csv(focus_db["files"][version])
        assert tuple(header) == COLUMNS[version]
        assert len(rows) == summary["rows"]
        assert sum(Decimal(r[header.index("EffectiveCost")]) for r in rows) == summary["effective"]
        assert {r[header.index("x_CostBasis")] for r in rows} == {"allocation"}
        assert f"wrote {summary['rows']:,} lines of FOCUS {version}" in focus_db["files"][f"{version}-stdout"]
    header, rows = read_csv(focus_db["files"]["1.0"])
    assert "ServiceSubcategory" not in header and "CommitmentDiscountId" in header
    billed, effective = header.index("BilledCost"), header.index("EffectiveCost")
    assert all(r[billed] == r[effective] for r in rows)


def test_focus_1_0_export_passes_the_foundation_validator(focus_db: dict[str, Any]) -> None:
    report = validate(focus_db["files"]["1.0"], "1.0")
    assert report.passed, report.messages()
    assert len(report.checks) == 133  # every rule of its FOCUS 1.0 set ran
    assert {c.status for c in report.checks} == {"passed"}


def test_broken_focus_1_0_export_fails_the_validator_with_its_messages(focus_db: dict[str, Any]) -> None:
    broken = broken_copy(focus_db["files"]["1.0"], focus_db["out"] / "broken-1.0.csv")
    report = validate(broken, "1.0")
    assert not report.passed
    failed = {c.check: c.message for c in report.failures}
    assert failed["BilledCost_Required"] == "BilledCost is a required column."
    assert failed["BillingCurrency_IsCurrencyCode"] == "Ensures that column is of currency-code type."
    # focus-validator 1.0.0 has no rule against negative amounts (FOCUS 1.0 allows them, for
    # credits): the negative costs on line 2 pass it. The FOCUS 1.2 model catches them (below).
    assert set(failed) == {"BilledCost_Required", "BillingCurrency_IsCurrencyCode"}


def test_focus_1_2_export_passes_the_1_2_rule_model(focus_db: dict[str, Any]) -> None:
    report = rules_report(focus_db["files"]["1.2"])
    assert report.passed, [(o.rule_id, o.message, o.violations) for o in report.failures]
    assert report.rows == focus_db["summary"]["rows"]
    evaluated = {o.rule_id for o in report.outcomes}
    assert len(evaluated) >= 170
    for rule in ("BillingCurrency-C-006-M", "ListUnitPrice-C-008-M", "ListCost-C-009-C", "ContractedUnitPrice-C-011-C",
                 "SkuPriceId-C-008-M", "ServiceSubcategory-C-004-M", "SubAccountName-C-005-C", "Tags-C-001-M"):
        assert rule in evaluated
    # the one recommendation we do not follow: we issue no invoices
    assert [o.rule_id for o in report.warnings] == ["CostAndUsage-D-033-O"]


def test_broken_focus_1_2_export_fails_the_rule_model_with_its_messages(focus_db: dict[str, Any]) -> None:
    broken = broken_copy(focus_db["files"]["1.2"], focus_db["out"] / "broken-1.2.csv")
    report = rules_report(broken)
    failed = {o.rule_id: o for o in report.failures}
    assert failed["CostAndUsage-D-006-M"].message == "BilledCost MUST be present in a FOCUS dataset."
    assert failed["BillingCurrency-C-003-M"].message == "BillingCurrency MUST conform to CurrencyFormat requirements."
    assert failed["BillingCurrency-C-006-M"].example_rows == (1,)
    assert failed["ListUnitPrice-C-008-M"].message == "ListUnitPrice MUST be a non-negative decimal value."
    assert failed["ListUnitPrice-C-008-M"].example_rows == (2,)
    assert failed["ContractedUnitPrice-C-009-C"].example_rows == (2,)
    assert set(failed) == {"CostAndUsage-D-006-M", "BillingCurrency-C-003-M", "BillingCurrency-C-006-M",
                           "ListUnitPrice-C-008-M", "ContractedUnitPrice-C-009-C"}
    assert report.not_evaluated["BilledCost-C-001-M"] == "column absent: BilledCost"


def test_negative_cost_alone_breaks_the_price_times_quantity_rules(focus_db: dict[str, Any]) -> None:
    header, rows = read_csv(focus_db["files"]["1.2"])
    rows[0][header.index("ListCost")] = str(-Decimal(rows[0][header.index("ListCost")]) - 1)
    rows[0][header.index("EffectiveCost")] = "-1"
    rows[0][header.index("ContractedCost")] = "-1"
    report = rules_report(write_csv(focus_db["out"] / "negative-cost.csv", header, rows))
    failed = {o.rule_id: o for o in report.failures}
    assert set(failed) == {"ListCost-C-009-C", "ListUnitPrice-C-010-C", "ContractedUnitPrice-C-011-C"}
    assert failed["ListCost-C-009-C"].message.startswith(
        "The product of ListUnitPrice and PricingQuantity MUST match the ListCost")
    assert failed["ListCost-C-009-C"].example_rows == (1,)


def test_parquet_exports_stream_in_batches_and_pass_both(focus_db: dict[str, Any]) -> None:
    out: Path = focus_db["out"]
    with focus_db["wh"].connect() as conn:
        seen: list[int] = []
        result = export_focus(conn, out / "focus-1.2.parquet", ExportOptions(version="1.2"), batch_rows=500,
                              on_batch=seen.append)
    assert result.rows == focus_db["summary"]["rows"] and result.file_format == "parquet"
    assert seen[:2] == [500, 1000] and seen[-1] == result.rows
    report = rules_report(out / "focus-1.2.parquet")
    assert report.passed, [(o.rule_id, o.violations) for o in report.failures]
    columns, rows = read_focus(out / "focus-1.2.parquet")
    assert columns == COLUMNS["1.2"]
    assert sum(r["EffectiveCost"] for r in rows()) == focus_db["summary"]["effective"]  # exact decimals
    with focus_db["wh"].connect() as conn:
        export_focus(conn, out / "focus-1.0.parquet", ExportOptions(version="1.0"))
    report_1_0 = validate(out / "focus-1.0.parquet", "1.0")
    assert report_1_0.passed and len(report_1_0.checks) == 133, report_1_0.messages()
