"""Imports only ever point down (docs/architecture.md, "Layers").

entry points (``pipelines``: CLI, Dagster definitions; ``controllers``) → ``assets`` →
``services`` → ``settings`` → ``connectors`` → ``core``; ``simulator`` → ``core``. Nothing below
the entry points imports ``pipelines``; the CLI imports no asset; only entry points may start
the simulator (``gpufabric sim up``, the demo). Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Higher imports lower; equal ranks may not import each other unless they are the same package.
RANK = {"core": 0, "connectors": 1, "settings": 2, "services": 3, "assets": 4, "controllers": 5, "pipelines": 5}
OURS = {*RANK, "simulator"}
CLI_MODULES = "pipelines/cli"  # pipelines/cli.py and pipelines/cli_*.py


def violation(module_path: str, imported: str) -> str | None:
    """Why ``module_path`` (a repo-relative file) may not import ``imported``, or None."""
    source, target = module_path.split("/")[0], imported.split(".")[0]
    if target not in OURS or source == target:
        return None
    if source == "simulator":
        return None if target == "core" else "the simulator imports only core (a twin says what a device says)"
    if target == "simulator":
        return None if source == "pipelines" else "only entry points start the simulator"
    if source == "pipelines":
        if module_path.startswith(CLI_MODULES) and target == "assets":
            return "the CLI calls services, not assets"
        return None
    if target == "pipelines":
        return "nothing outside pipelines imports pipelines"
    if source == "controllers" and target == "assets":
        return "controllers call services, not assets"
    if RANK[target] >= RANK[source]:
        return f"{source} may not import {target} (imports point down)"
    return None


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_every_import_points_down() -> None:
    problems = []
    for top in sorted(OURS):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, name in _imports(path):
                why = violation(rel, name)
                if why:
                    problems.append(f"{rel}:{line}: imports {name}: {why}")
    assert problems == []


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        ("assets/lldp/assets.py", "pipelines.settings"),  # an asset reaching up for the site file
        ("assets/topology/assets.py", "pipelines.resources"),
        ("pipelines/cli_publish.py", "assets.publish.service"),  # the CLI calling an asset's helper
        ("pipelines/cli.py", "assets.topology.store"),
        ("simulator/ssh/twin.py", "connectors.ssh.platforms"),  # a twin importing our client
        ("simulator/agents_crash.py", "connectors.kube.agents"),
        ("controllers/budget_webhook.py", "pipelines.settings"),
        ("controllers/reaper.py", "assets.agents"),
        ("services/publish/service.py", "assets.topology"),
        ("connectors/kube/client.py", "settings"),
        ("core/budget.py", "connectors.warehouse"),
        ("settings/loading.py", "services.publish"),
        ("assets/publish/assets.py", "simulator.up"),
    ],
)
def test_the_patterns_issue_18_removed_are_caught(module: str, imported: str) -> None:
    assert violation(module, imported) is not None


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        ("pipelines/definitions.py", "assets.lldp"),
        ("pipelines/cli.py", "simulator.up"),
        ("pipelines/cli.py", "pipelines.runner"),
        ("controllers/budget_webhook.py", "settings"),
        ("assets/publish/assets.py", "services.publish"),
        ("services/publish/service.py", "connectors.kube"),
        ("settings/loading.py", "connectors.warehouse"),
        ("simulator/ssh/render.py", "core.models"),
        ("assets/lldp/assets.py", "assets.lldp.resources"),
        ("core/topology/derive.py", "core.models"),
        ("assets/lldp/assets.py", "dagster"),
    ],
)
def test_imports_that_point_down_are_allowed(module: str, imported: str) -> None:
    assert violation(module, imported) is None
