"""``gpufabric mig plan|apply|status``: MIG layouts from tenant demand onto a cluster (issue 21).

``plan`` prints the plan from what the nodes carry now (per node the layout, windows, stranded
slices; exit 1 when demand is unmet, listing it); ``apply --dry-run`` prints the label and
ConfigMap diff of the next window (the server's dry run: nothing is written); ``apply`` publishes
window after window, waiting for mig-manager's ``success`` between them and stopping at a node
failed or stuck; ``apply --rollback`` puts back the labels from before the last window; ``status``
prints ``nvidia.com/mig.config`` and its state per node. The integrator mounts :data:`app` as ``mig``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

app = typer.Typer(help="MIG layouts: plan from tenant demand, apply through mig-manager, read progress.",
                  no_args_is_help=True)  # fmt: skip
out = Console()
err = Console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option(help="site file (default $GPUFABRIC_CONFIG)")]
ClusterOpt = Annotated[str | None, typer.Option(help="a sources.kubernetes name (default: the first)")]


def _say(line: str) -> None:
    out.print(line, highlight=False, markup=False)


def _fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    raise typer.Exit(1)


def _expected() -> tuple[type[BaseException], ...]:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    from services.mig import MigRefused
    from settings import SettingsError

    return (MigRefused, SettingsError, ConfigException, ApiException, HTTPError, ValueError, OSError)


def _context(config: Path | None, cluster: str | None) -> tuple[Any, Any]:
    """The cluster source and the MIG config; with ``mig.history_hours`` set, its demand completed
    by the warehouse's history (as the ``mig/plan`` asset does)."""
    from datetime import UTC, datetime

    from pipelines.cli_publish import _settings, _source
    from services.mig import config_from_settings, with_history

    settings = _settings(config)
    source, cfg = _source(settings, cluster), config_from_settings(settings)
    if settings.mig.history_hours is not None:
        from connectors.warehouse import open_warehouse

        with open_warehouse().connect() as conn:
            cfg, sized = with_history(cfg, conn, hours=settings.mig.history_hours, now=datetime.now(UTC),
                                      cluster=source.name)  # fmt: skip
        for line in (sized.skipped if sized else []):
            _say(f"note: history: {line}")
    return source, cfg


def describe_plan(result: Any, *, show_all: bool = False) -> list[str]:
    """The plan as lines: per node its GPUs' layouts and tenants, the windows, stranded slices.
    GPUs the plan neither uses nor changes are one count line unless ``show_all`` (on a site of
    a thousand GPUs they would bury the dozen lines that matter)."""
    lines: list[str] = []
    by_node: dict[str, list[Any]] = {}
    idle: set[tuple[str, int]] = set()
    for g in result.gpus:
        if not show_all and g.role == "unused" and not g.changed and not g.mig_enabled and not g.tenants:
            idle.add((g.gpu.node, g.gpu.index))
            continue
        by_node.setdefault(g.gpu.node, []).append(g)
    for node in sorted(by_node):
        for g in sorted(by_node[node], key=lambda p: p.gpu.index):
            if g.mig_enabled:
                counts = Counter(a.placement.profile for a in g.instances)
                what = " + ".join(f"{n}x{p}" for p, n in sorted(counts.items())) or "MIG enabled, no instances"
            else:
                what = "whole GPU" if g.whole_owner else "MIG disabled"
            tenants = ",".join(sorted(g.tenants)) or "-"
            lines.append(f"{node} gpu{g.gpu.index}: {what} [{tenants}] {g.role}{' *' if g.changed else ''}")
    if idle:
        nodes = len({node for node, _ in idle})
        lines.append(f"{len(idle)} GPUs on {nodes} nodes unused and unchanged (MIG disabled; --all lists them)")
    for i, window in enumerate(result.windows, 1):
        lines.append(f"window {i}: {', '.join(window)}")
    compute, memory = result.stranded()
    lines.append(f"{result.gpus_used} GPUs used, {result.reconfigured} reconfigured (*) in {len(result.windows)}"
                 f" window(s); stranded: {compute} compute / {memory} memory slices")  # fmt: skip
    lines += [f"note: {n}" for n in result.notes]
    lines += [f"unmet: {u}" for u in result.unmet]
    return lines


@app.command("plan")
def plan_cmd(
    config: ConfigOpt = None,
    cluster: ClusterOpt = None,
    show_all: Annotated[bool, typer.Option("--all", help="also list GPUs the plan neither uses nor changes")] = False,
) -> None:
    """Print the plan from the nodes' current layouts and the site's demand (exit 1 if unmet)."""
    from connectors.kube import api_client
    from services.mig import plan_cluster

    try:
        source, cfg = _context(config, cluster)
        with api_client(source) as api:
            result, view = plan_cluster(api, cfg)
    except _expected() as exc:
        _fail(str(exc))
        return
    for line in view.notes:
        _say(f"note: {line}")
    for line in describe_plan(result, show_all=show_all):
        _say(line)
    if not result.complete:
        _fail(f"the plan leaves {len(result.unmet)} demand line(s) unmet (listed above)")


@app.command("apply")
def apply_cmd(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the next window's diff, change nothing")] = False,
    force: Annotated[bool, typer.Option("--force", help="override the blast-radius guard")] = False,
    rollback: Annotated[bool, typer.Option("--rollback", help="restore the labels of before the last window")] = False,
    windows: Annotated[int | None, typer.Option(min=1, help="apply at most this many windows")] = None,
    config: ConfigOpt = None,
    cluster: ClusterOpt = None,
) -> None:
    """Apply the plan window by window (guarded; see --dry-run), waiting for mig-manager."""
    from connectors.kube import api_client
    from services import mig

    try:
        source, cfg = _context(config, cluster)
        with api_client(source) as api:
            if rollback:
                outcome = mig.rollback(api, cfg, dry_run=dry_run, force=force)
                for line in outcome.diff:
                    _say(line)
                if not dry_run and outcome.wanted:
                    progress = mig.wait_window(api, outcome.wanted, cfg.timeout_s,
                                               stale_success=frozenset(outcome.wanted))  # fmt: skip
                    _report(progress)
                return
            if dry_run:
                outcome = mig.apply_window(api, cfg, dry_run=True, force=force)
                for line in outcome.diff:
                    _say(line)
                return
            outcomes = mig.apply(api, cfg, force=force, max_windows=windows, say=_say)
    except _expected() as exc:
        _fail(str(exc))
        return
    for i, o in enumerate(outcomes, 1):
        if not o.wanted:
            _say(o.diff[-1])
            continue
        _say(f"window {i}: {len(o.wanted)} node(s)")
        if o.progress is not None:
            _report(o.progress)


def _report(progress: Any) -> None:
    for node in progress.done:
        _say(f"  {node}: success")
    for finding in progress.findings:
        err.print(f"  [bold red]{finding}[/]", highlight=False)
    if progress.findings:
        raise typer.Exit(1)


@app.command("status")
def status_cmd(config: ConfigOpt = None, cluster: ClusterOpt = None) -> None:
    """Per GPU node: the MIG config its label names and mig-manager's state."""
    from connectors.kube import api_client
    from services.mig import status

    try:
        source, cfg = _context(config, cluster)
        with api_client(source) as api:
            rows = status(api, cfg)
    except _expected() as exc:
        _fail(str(exc))
        return
    for r in rows:
        _say(f"{r.node} {r.config or '-'} {r.state or '-'}{'' if r.ours or r.config is None else ' (not ours)'}")
    counts = Counter(r.state or "unset" for r in rows)
    _say(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no GPU nodes")
