"""The FinOps Foundation's focus-validator 1.0.0, run in a tool venv of its own, on a FOCUS file.

Why a Python module and not a shell script: the CLI, the tests and (later) an asset call it with
a file and want a parsed answer, a file lock keeps concurrent callers (pytest-xdist workers, a CLI
run beside the suite) from building the venv twice, and a failed pip run must surface as one
clear error with pip's own last lines.

Why its own venv: its pins (pandas 2 with numpy 1.26, pandera 0.17, pydantic, SQLAlchemy through
pandasql) clash with ours, and focus-validator 2.x (FOCUS 1.2 rules) needs Python 3.12. 1.0.0
is published as an sdist only, and so is pandasql; both are built from the pinned build tools
with ``--no-build-isolation``; everything else is a wheel. Every version is pinned in
``tools/focus-validator.constraints.txt``; the venv is rebuilt when that file changes.

Quirks of 1.0.0 handled here (upstream: github.com/finopsfoundation/focus_validator):

- its "1.0" rule set names four columns by their FOCUS 1.0 *display* names or a misspelling
  (Provider, Publisher, InvoiceIssuer, ResourceID) where FOCUS 1.0's column IDs are ProviderName,
  PublisherName, InvoiceIssuerName and ResourceId, and one rule (SkuPriceId_Nullable) reads
  ChargeType, FOCUS 0.5's name for ChargeCategory. We export the spec's IDs and hand the
  validator a copy with those columns duplicated under its names (:data:`VALIDATOR_ALIASES`), so
  it checks our values instead of failing on a name;
- its IsDecimal rules check for the pandas float64 dtype, which its CSV loader produces but a
  Parquet decimal column (exact, what we write) does not (it loads as Python Decimal objects);
  the validator's copy of a Parquet file has its decimal columns as float64, as from a CSV;
- it loads ISO 4217 codes from the relative path ``focus_validator/utils/currency_codes.csv``,
  so it only works with the package's parent directory as working directory;
- the CLI exits 0 whether or not the data passes; the verdict is in its JUnit XML output.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

VERSION = "1.0.0"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = PROJECT_ROOT / "tools" / "focus-validator.constraints.txt"
BUILD_TOOLS = ("poetry-core", "wheel", "PyYAML")  # build backends of the two sdists, pinned too
SDIST_ONLY = ("focus-validator", "pandasql")
PIP_TIMEOUT_S = 1800
RUN_TIMEOUT_S = 1800
TAIL_LINES = 25
ENV_TOOLS_DIR = "GPUFABRIC_TOOLS_DIR"

# FOCUS 1.0 column ID -> the name focus-validator 1.0.0's "1.0" rules use for it.
VALIDATOR_ALIASES = {
    "ProviderName": "Provider",
    "PublisherName": "Publisher",
    "InvoiceIssuerName": "InvoiceIssuer",
    "ResourceId": "ResourceID",
    # its SkuPriceId_Nullable rule tests ChargeType IN ('Purchase', 'Usage', 'Refund'), the 0.5 name
    # of what FOCUS 1.0 calls ChargeCategory; without the alias it fails with KeyError('ChargeType')
    "ChargeCategory": "ChargeType",
}

# Runs inside the tool venv: a copy of the data file with the alias columns added, cells kept
# byte for byte for CSV (no float round trip), columns appended (and decimals as float64) for Parquet.
_ALIAS_SCRIPT = r"""
import csv, json, sys
src, dst, aliases = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if src.endswith(".parquet"):
    import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
    table = pq.read_table(src)
    for i, f in enumerate(table.schema):
        if pa.types.is_decimal(f.type):
            table = table.set_column(i, f.name, pc.cast(table.column(i), pa.float64()))
    for spec, alias in aliases.items():
        if spec in table.column_names and alias not in table.column_names:
            table = table.append_column(alias, table.column(spec))
    pq.write_table(table, dst)
else:
    csv.field_size_limit(2**31 - 1)
    with open(src, newline="", encoding="utf-8") as fin, open(dst, "w", newline="", encoding="utf-8") as fout:
        reader, writer = csv.reader(fin), csv.writer(fout, lineterminator="\n")
        header = next(reader)
        pairs = [(header.index(s), a) for s, a in aliases.items() if s in header and a not in header]
        writer.writerow(header + [a for _, a in pairs])
        for row in reader:
            writer.writerow(row + [row[i] if i < len(row) else "" for i, _ in pairs])
"""


class FocusValidatorError(RuntimeError):
    """The tool venv could not be built, or the validator crashed (not: the data failed it)."""


@dataclass(frozen=True)
class ValidatorCheck:
    check: str  # the validator's rule id, e.g. BillingCurrency_IsCurrencyCode
    column: str
    message: str  # the validator's own message
    status: str  # passed | failed | skipped | errored


@dataclass(frozen=True)
class ValidatorReport:
    focus_version: str
    checks: tuple[ValidatorCheck, ...]

    @property
    def failures(self) -> tuple[ValidatorCheck, ...]:
        return tuple(c for c in self.checks if c.status in ("failed", "errored"))

    @property
    def passed(self) -> bool:
        return bool(self.checks) and not self.failures

    def messages(self) -> list[str]:
        return [f"{c.check}: {c.message}" for c in self.failures]


def _tool_env() -> dict[str, str]:
    """Our environment minus what would make the tool venv's Python import our packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}


def tools_dir() -> Path:
    return Path(os.environ.get(ENV_TOOLS_DIR) or Path.home() / ".cache" / "gpufabric" / "tools")


def _tail(text: str) -> str:
    return "\n".join(text.strip().splitlines()[-TAIL_LINES:])


def _fingerprint() -> str:
    digest = hashlib.sha256(CONSTRAINTS.read_bytes())
    digest.update(f"{sys.version_info.major}.{sys.version_info.minor}".encode())
    return digest.hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # blocks until the other builder is done
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_pip(python: Path, args: Sequence[str]) -> None:
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
           "--only-binary=:all:", "-c", str(CONSTRAINTS), *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=_tool_env(), timeout=PIP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise FocusValidatorError(f"pip did not finish within {PIP_TIMEOUT_S} s: {' '.join(args)}") from None
    if done.returncode != 0:
        raise FocusValidatorError(f"pip install {' '.join(args)} failed (exit {done.returncode}):\n"
                                  f"{_tail(done.stderr or done.stdout)}")


def ensure_venv(base_python: str | None = None) -> Path:
    """The tool venv's Python, building the venv first if it is missing, partial or outdated.

    Built from the interpreter our own venv was made from (``base_python`` overrides it): the
    fingerprint records that Python's version, and 1.0.0 needs 3.11 (its 2.x needs 3.12).
    """
    base_python = base_python or getattr(sys, "_base_executable", None) or sys.executable
    venv = tools_dir() / f"focus-validator-{VERSION}"
    python = venv / "bin" / "python"
    marker = venv / ".gpufabric-installed"
    fingerprint = _fingerprint()
    with _locked(venv.with_name(venv.name + ".lock")):
        if marker.exists() and marker.read_text().strip() == fingerprint and python.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)  # a half-built venv from a killed run
        made = subprocess.run([base_python, "-m", "venv", str(venv)], capture_output=True, text=True, env=_tool_env(),
                              timeout=300, check=False)
        if made.returncode != 0:
            raise FocusValidatorError(f"{base_python} -m venv {venv} failed:\n{_tail(made.stderr)}")
        _run_pip(python, BUILD_TOOLS)
        _run_pip(python, ["--no-build-isolation", f"--no-binary={','.join(SDIST_ONLY)}", f"focus-validator=={VERSION}"])
        marker.write_text(fingerprint + "\n")
    return python


def _package_parent(python: Path) -> Path:
    done = subprocess.run(
        [str(python), "-c", "import pathlib, focus_validator as f; print(pathlib.Path(f.__file__).parents[1])"],
        capture_output=True, text=True, env=_tool_env(), timeout=300, check=False)
    if done.returncode != 0:
        raise FocusValidatorError(f"focus_validator does not import in {python}:\n{_tail(done.stderr)}")
    return Path(done.stdout.strip())


def parse_junit(xml_text: str, focus_version: str) -> ValidatorReport:
    """The validator's ``--output-type unittest`` report as checks with its own messages."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise FocusValidatorError(f"unreadable validator report: {exc}") from None
    checks = []
    for suite in root.iter("testsuite"):
        column = suite.get("name", "").rsplit("-", 1)[-1]
        for case in suite.iter("testcase"):
            name = case.get("name", "").split(" :: ", 1)[0]
            status, message = "passed", ""
            for tag, state in (("failure", "failed"), ("error", "errored"), ("skipped", "skipped")):
                element = case.find(tag)
                if element is not None:
                    status, message = state, element.get("message", "")
            checks.append(ValidatorCheck(name, column, message, status))
    return ValidatorReport(focus_version, tuple(checks))


def validate(data_file: Path, focus_version: str = "1.0") -> ValidatorReport:
    """Run ``focus-validator --validate-version`` on a FOCUS CSV or Parquet file."""
    data_file = data_file.resolve()
    if not data_file.is_file():
        raise FileNotFoundError(data_file)
    if data_file.suffix not in (".csv", ".parquet"):
        raise FocusValidatorError(f"{data_file.name}: focus-validator reads .csv or .parquet files only")
    python = ensure_venv()
    cli = python.with_name("focus-validator")
    with tempfile.TemporaryDirectory(prefix="focus-validator-") as tmp:
        work = Path(tmp) / f"data{data_file.suffix}"
        aliased = subprocess.run([str(python), "-c", _ALIAS_SCRIPT, str(data_file), str(work),
                                  json.dumps(VALIDATOR_ALIASES)],
                                 capture_output=True, text=True, env=_tool_env(), timeout=RUN_TIMEOUT_S, check=False)
        if aliased.returncode != 0:
            raise FocusValidatorError(f"could not prepare {data_file.name} for the validator:\n"
                                      f"{_tail(aliased.stderr)}")
        report = Path(tmp) / "report.xml"
        done = subprocess.run(
            [str(cli), "--data-file", str(work), "--validate-version", focus_version,
             "--output-type", "unittest", "--output-destination", str(report)],
            cwd=_package_parent(python), capture_output=True, text=True, env=_tool_env(), timeout=RUN_TIMEOUT_S,
            check=False)
        if done.returncode != 0 or not report.exists():
            raise FocusValidatorError(f"focus-validator crashed on {data_file.name} (exit {done.returncode}):\n"
                                      f"{_tail(done.stderr or done.stdout)}")
        return parse_junit(report.read_text(encoding="utf-8"), focus_version)
