"""dbt models as Dagster assets through dagster-dbt.

dagster-dbt builds asset definitions from ``target/manifest.json``, which must exist before this
module is imported (../shared/ARCHITECTURE.md, known traps), so :func:`ensure_manifest` runs
``dbt parse`` when the manifest is missing or older than any file of the project. dbt sources
named ``raw.<table>`` map to our asset keys ``raw/<table>``, so lineage joins up by itself.
No ``from __future__ import annotations``: Dagster reads the context annotation at runtime.
"""

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
from dagster_dbt import DbtCliResource, DbtProject, dbt_assets

from assets.dbt.metadata import tidy_event
from connectors.warehouse import Warehouse
from settings import Settings

DBT_PROJECT_DIR = Path(__file__).resolve().parents[2] / "dbt"
_DBT_EXECUTABLE = Path(sys.executable).with_name("dbt")
_PROJECT_FILES = ("models", "macros", "seeds", "tests", "dbt_project.yml", "profiles.yml")


def _newest_source_mtime() -> float:
    newest = 0.0
    for name in _PROJECT_FILES:
        path = DBT_PROJECT_DIR / name
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()] if path.exists() else []
        newest = max([newest, *(f.stat().st_mtime for f in files)])
    return newest


def ensure_manifest() -> Path:
    """Parse the project when the manifest is missing or stale; parsing needs no database.

    Under a file lock: processes importing this at the same moment (two test workers, the UI and a
    run) would otherwise parse together, and one would read the manifest while another writes it.
    """
    manifest = DBT_PROJECT_DIR / "target" / "manifest.json"
    manifest.parent.mkdir(exist_ok=True)
    with (manifest.parent / ".parse.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        _parse_if_stale(manifest)
    return manifest


def _parse_if_stale(manifest: Path) -> None:
    if not manifest.exists() or manifest.stat().st_mtime < _newest_source_mtime():
        result = subprocess.run(
            [
                str(_DBT_EXECUTABLE),
                "parse",
                "--quiet",
                "--project-dir",
                str(DBT_PROJECT_DIR),
                "--profiles-dir",
                str(DBT_PROJECT_DIR),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"dbt parse failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
        manifest.touch()


dbt_project = DbtProject(project_dir=DBT_PROJECT_DIR, profiles_dir=DBT_PROJECT_DIR)
ensure_manifest()


@dbt_assets(manifest=dbt_project.manifest_path, project=dbt_project)
def gpufabric_dbt_models(  # type: ignore[no-untyped-def]
    context: dg.AssetExecutionContext,
    dbt: DbtCliResource,
    warehouse: dg.ResourceParam[Warehouse],
    site: dg.ResourceParam[Settings],
):
    """Build (run + test) the selected dbt models against the warehouse the pipeline uses, with
    the site's answers to the models' vars (the node owner label, the idle owner)."""
    os.environ.update(warehouse.libpq_env())  # dbt/profiles.yml reads these
    for event in dbt.cli(["build", "--vars", json.dumps(site.dbt_vars())], context=context).stream():
        yield tidy_event(event)  # dbt's per-event boilerplate as one table row (assets/dbt/metadata.py)


defs = dg.Definitions(
    assets=[gpufabric_dbt_models],
    resources={
        # The venv's dbt by path: `gpufabric` is often run as .venv/bin/gpufabric without an
        # activated venv, so `dbt` is not on PATH.
        "dbt": DbtCliResource(
            project_dir=dbt_project, profiles_dir=str(DBT_PROJECT_DIR), dbt_executable=str(_DBT_EXECUTABLE)
        )
    },
)
