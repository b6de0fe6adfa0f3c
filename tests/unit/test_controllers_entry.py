"""`python -m controllers` reaches every controller: the entry point the deploy manifests name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "controllers", *args], capture_output=True, text=True, timeout=60)


def _help(*args: str) -> subprocess.CompletedProcess[str]:
    return _run(*args, "--help")


def test_topology_webhook_and_reaper_are_reachable() -> None:
    webhook = _help("topology-webhook")
    assert webhook.returncode == 0 and "--cert" in webhook.stdout and "--key" in webhook.stdout
    reaper = _help("reaper")
    assert reaper.returncode == 0 and "--no-dry-run" in reaper.stdout
    budget = _help("budget-webhook")
    assert budget.returncode == 0 and "--workers" in budget.stdout and "--config" in budget.stdout
    assert "budget-webhook" in _help().stdout


def test_budget_reconciler_is_reachable_and_dry_run_by_default() -> None:
    budget = _help("budget-reconciler")
    assert budget.returncode == 0
    for flag in ("--config", "--kubeconfig", "--in-cluster", "--no-dry-run", "--alert-only", "--period", "--once"):
        assert flag in budget.stdout
    assert "dry run" in budget.stdout
    assert "budget-reconciler" in _help().stdout


def test_budget_reconciler_bad_arguments_are_one_line_errors() -> None:
    for args, expected in (
        (["--period", "-1"], "argument --period: '-1' must be a positive number"),
        (["--period", "soon"], "argument --period: 'soon' is not a number"),
        (["--stop-deadline", "0"], "argument --stop-deadline: '0' must be a positive whole number"),
        (["--dry"], "unrecognized arguments: --dry"),
    ):
        result = _run("budget-reconciler", *args)
        assert result.returncode == 2 and expected in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_budget_reconciler_refuses_a_bad_site_file_without_a_traceback(tmp_path: Path) -> None:
    site = tmp_path / "gpufabric.yaml"
    site.write_text("version: 1\nbudget:\n  unlabeled_pods: allow\n  envelopes:\n    '*': {gpu_hours: -1}\n")
    result = _run("budget-reconciler", "--config", str(site))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"{site}:3: budget.unlabeled_pods: 'allow' is not one of: deny, default" in result.stderr
    assert f"{site}:5: budget.envelopes.*.gpu_hours: must be at least 0" in result.stderr
    missing = _run("budget-reconciler", "--config", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "nope.yaml: file not found" in missing.stderr


def test_burst_admission_headroom_arguments_are_checked_before_anything_starts() -> None:
    helped = _help("burst-admission")
    assert helped.returncode == 0
    for flag in ("--headroom", "--headroom-max-fraction", "--headroom-quantile", "--headroom-lead", "--headroom-days"):
        assert flag in helped.stdout
    for args, expected in (
        (["--headroom-quantile", "0"], "--headroom: quantile must be in (0, 1], not 0.0"),
        (["--headroom-max-fraction", "1.5"], "--headroom: max_fraction must be in [0, 1], not 1.5"),
        (["--headroom-lead", "0.5"], "--headroom: lead_s must be between 1 and 86400 seconds, not 0.5"),
        (["--headroom-days", "0"], "--headroom-days >= 1"),
    ):
        result = _run("burst-admission", "--kubeconfig", "/nonexistent", *args)
        assert result.returncode == 2 and expected in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
