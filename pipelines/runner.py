"""Materialize assets in-process, recorded in the Dagster instance, with live progress.

Used by ``gpufabric run`` and ``gpufabric demo``. Runs land in the same run history the UI
shows. Progress comes from the instance's event log, polled while the run executes in a
worker thread, so the CLI shows the steps running now and each asset as it finishes.

What steps print on stdout while they run (dagster-dbt echoes every line of dbt's log there) goes
to a file per run under ``$DAGSTER_HOME/logs`` instead of the terminal: the progress line and the
closing table are the CLI's view, the step output is one path away when something fails, and the
same events are in the UI.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

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
    output_log: Path | None = None  # what the steps printed on stdout (dbt's log lines among them)


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
    from assets.lldp.partitions import PARTITION_SET

    graph = defs.resolve_asset_graph()

    def needs_key(key: dg.AssetKey) -> bool:
        # Switch groups split LLDP collection into runs for scale-out; a run without a group
        # collects every switch (assets/lldp/partitions.py), which is what `gpufabric run` wants.
        partitions = graph.get(key).partitions_def
        return partitions is not None and getattr(partitions, "name", None) != PARTITION_SET

    partitioned = [k for k in keys if needs_key(k)]
    return [k for k in keys if k not in partitioned], partitioned


def run_assets(select: str | None = None, console: Console | None = None, partition: str | None = None) -> RunOutcome:
    """Materialize the selection; returns what happened. Never raises for a failed step.

    Without ``partition`` the partitioned assets of the selection are left out (and listed in
    ``skipped``); with it, only they run, for that partition.
    """
    console = console or Console(stderr=True)
    wh = open_warehouse()
    home = prepare_dagster_env(wh)
    from pipelines.definitions import defs  # after DAGSTER_HOME is set

    selected = resolve_selection(defs, select)
    plain, partitioned = split_partitioned(defs, selected)
    if partition:  # every partitioned asset of the selection, switch groups included, for that key
        graph = defs.resolve_asset_graph()
        keys = [k for k in selected if graph.get(k).partitions_def is not None]
        skipped = [k for k in selected if k not in keys]
    else:
        keys, skipped = plain, partitioned
    if not keys:
        hint = "give --partition KEY" if not partition else "leave out --partition"
        raise SelectionError(f"nothing to run: the selection is all {'un' if partition else ''}partitioned; {hint}")
    job = defs.resolve_implicit_global_asset_job_def()
    run_id = str(uuid.uuid4())
    output_log = home / "logs" / f"run-{run_id}.log"
    output_log.parent.mkdir(parents=True, exist_ok=True)
    with dg.DagsterInstance.get() as instance, output_log.open("w") as step_output:
        box: dict[str, object] = {}

        def execute() -> None:
            try:
                box["result"] = job.execute_in_process(
                    instance=instance,
                    asset_selection=keys,
                    run_id=run_id,
                    partition_key=partition,
                    raise_on_error=False,
                    # The progress bar is the CLI's view; Dagster's per-event console log is in the UI.
                    run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
                    tags={"gpufabric/launched-by": "cli"},
                )
            except BaseException as err:  # surfaced below, after the progress bar closes
                box["error"] = err

        worker = threading.Thread(target=execute, name="gpufabric-run", daemon=True)
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with (
            Progress(*columns, console=console, transient=False) as progress,
            contextlib.redirect_stdout(step_output),
        ):
            task = progress.add_task(f"materializing {len(keys)} asset(s)", total=len(keys))
            worker.start()
            seen: set[str] = set()
            while worker.is_alive():
                worker.join(0.25)
                done = _finished_assets(instance, run_id)
                running = _running_steps(instance, run_id)
                progress.update(task, completed=len(done), description=_describe(running, done - seen))
                seen |= done
            progress.update(task, completed=len(keys), description="finished")
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        result = box["result"]
        assert isinstance(result, dg.ExecuteInProcessResult)
        outcome = RunOutcome(
            run_id=run_id,
            success=result.success,
            skipped=[k.to_user_string() for k in skipped],
            output_log=output_log,
        )
        for event in result.get_asset_materialization_events():
            mat = event.step_materialization_data.materialization
            key = mat.asset_key.to_user_string()
            outcome.materialized.append(key)
            outcome.metadata[key] = {k: _plain(v) for k, v in mat.metadata.items()}
        outcome.failed_steps = [e.step_key or "?" for e in result.all_events if e.is_step_failure]
        return outcome


def _plain(value: object) -> object:
    """A metadata value as the CLI's table shows it: pictures and tables are for the UI, so they
    are named rather than dumped (a base64 PNG is ~100 KB of text)."""
    if isinstance(value, dg.TableMetadataValue):
        return f"<table of {len(value.records)} rows: see the UI>"
    if isinstance(value, dg.MarkdownMetadataValue) and "data:image/" in (value.md_str or ""):
        return "<picture: see the UI>"
    return getattr(value, "value", value)


def _describe(running: list[str], just_done: set[str]) -> str:
    """The progress line's text: the steps running now (a dbt build or an SSH sweep can take a
    minute; the user should see which), else the asset that just finished."""
    if running:
        shown = ", ".join(running[:3]) + (f" +{len(running) - 3}" if len(running) > 3 else "")
        return f"running: {shown}"
    return f"done: {sorted(just_done)[-1]}" if just_done else "starting"


def _running_steps(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """Steps started and not yet ended, in start order."""
    ended = {dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.STEP_SKIPPED}
    try:
        records = instance.all_logs(run_id, of_type={dg.DagsterEventType.STEP_START, *ended})
    except Exception:  # the run's storage may not be there yet
        return []
    running: dict[str, None] = {}
    for r in records:
        event = r.dagster_event
        if event is None or event.step_key is None:
            continue
        if event.event_type == dg.DagsterEventType.STEP_START:
            running[event.step_key] = None
        else:
            running.pop(event.step_key, None)
    return list(running)


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
