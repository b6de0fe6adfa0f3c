"""`python -m controllers` reaches every controller: the entry point the deploy manifests name."""

from __future__ import annotations

import subprocess
import sys


def _help(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controllers", *args, "--help"], capture_output=True, text=True, timeout=60
    )


def test_topology_webhook_and_reaper_are_reachable() -> None:
    webhook = _help("topology-webhook")
    assert webhook.returncode == 0 and "--cert" in webhook.stdout and "--key" in webhook.stdout
    reaper = _help("reaper")
    assert reaper.returncode == 0 and "--no-dry-run" in reaper.stdout
