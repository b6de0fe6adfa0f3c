"""Materialize assets in-process, recorded in the Dagster instance, with live progress.

Used by ``gpufabric run`` and ``gpufabric demo``. Runs land in the same run history the UI
shows. Progress comes from the instance's event log, polled while the run executes in a
worker thread, so the CLI shows each step as it finishes.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field

import dagster as dg
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from connectors.warehouse import open_warehouse
from pipelines.instance import prepare_dagster_env


class SelectionError(ValueError):
    """The --select expression matches nothing or does not parse."""


@dataclass
class RunOutcome:
    run_id: str
    success: bool
    materialized: list[str] = field(default_factory=list)
    failed_steps: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # partitioned assets left out of an unpartitioned run
    metadata: dict[str, dict[str, object]] = field(default_factory=dict)


def resolve_selection(defs: dg.Definitions, select: str | None) -> list[dg.AssetKey]:
    """Materializable assets matching ``select`` (all of them when empty); external sources
    (tables written elsewhere that dbt reads) are never part of a run."""
    graph = defs.resolve_asset_graph()
    materializable = {k for k in graph.get_all_asset_keys() if graph.get(k).is_materializable}
    if not select or select.strip() in ("*", "all"):
        return sorted(materializable, key=lambda k: k.to_user_string())
    try:
        keys = dg.AssetSelection.from_string(select).resolve(graph)
    except Exception as err:  # dagster raises a variety of parse errors
        raise SelectionError(f"cannot parse selection {select!r}: {err}") from None
    if not keys:
        known = ", ".join(sorted(k.to_user_string() for k in graph.get_all_asset_keys()))
        raise SelectionError(f"selection {select!r} matches no asset; known assets: {known}")
    return sorted(set(keys) & materializable, key=lambda k: k.to_user_string())


def split_partitioned(defs: dg.Definitions, keys: list[dg.AssetKey]) -> tuple[list[dg.AssetKey], list[dg.AssetKey]]:
    """(unpartitioned, partitioned) keys: a run has one partition key, so partitioned assets run
    only when one is given (``--partition``), as a separate run from the rest."""
    graph = defs.resolve_asset_graph()
    partitioned = [k for k in keys if graph.get(k).partitions_def is not None]
    return [k for k in keys if k not in partitioned], partitioned


def run_assets(select: str | None = None, console: Console | None = None, partition: str | None = None) -> RunOutcome:
    """Materialize the selection; returns what happened. Never raises for a failed step.

    Without ``partition`` the partitioned assets of the selection are left out (and listed in
    ``skipped``); with it, only they run, for that partition.
    """
    console = console or Console(stderr=True)
    wh = open_warehouse()
    prepare_dagster_env(wh)
    from pipelines.definitions import defs  # after DAGSTER_HOME is set

    plain, partitioned = split_partitioned(defs, resolve_selection(defs, select))
    keys, skipped = (partitioned, plain) if partition else (plain, partitioned)
    if not keys:
        hint = "give --partition KEY" if not partition else "leave out --partition"
        raise SelectionError(f"nothing to run: the selection is all {'un' if partition else ''}partitioned; {hint}")
    job = defs.resolve_implicit_global_asset_job_def()
    run_id = str(uuid.uuid4())
    with dg.DagsterInstance.get() as instance:
        box: dict[str, object] = {}

        def execute() -> None:
            try:
                box["result"] = job.execute_in_process(
                    instance=instance,
                    asset_selection=keys,
                    run_id=run_id,
                    raise_on_error=False,
                    # The progress bar is the CLI's view; Dagster's per-event console log is in the UI.
                    run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
                    tags={"gpufabric/launched-by": "cli"},
                )
            except BaseException as err:  # surfaced below, after the progress bar closes
                box["error"] = err

        worker = threading.Thread(target=execute, name="gpufabric-run", daemon=True)
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task(f"materializing {len(keys)} asset(s)", total=len(keys))
            worker.start()
            seen: set[str] = set()
            while worker.is_alive():
                worker.join(0.25)
                for key in _finished_assets(instance, run_id) - seen:
                    seen.add(key)
                    progress.update(task, advance=1, description=f"done: {key}")
            progress.update(task, completed=len(keys), description="finished")
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        result = box["result"]
        assert isinstance(result, dg.ExecuteInProcessResult)
        outcome = RunOutcome(run_id=run_id, success=result.success, skipped=[k.to_user_string() for k in skipped])
        for event in result.get_asset_materialization_events():
            mat = event.step_materialization_data.materialization
            key = mat.asset_key.to_user_string()
            outcome.materialized.append(key)
            outcome.metadata[key] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
        outcome.failed_steps = [e.step_key or "?" for e in result.all_events if e.is_step_failure]
        return outcome


def _finished_assets(instance: dg.DagsterInstance, run_id: str) -> set[str]:
    try:
        records = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
    except Exception:
        return set()
    return {
        r.dagster_event.asset_key.to_user_string()
        for r in records
        if r.dagster_event is not None and r.dagster_event.asset_key is not None
    }
