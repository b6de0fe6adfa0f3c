"""``gpufabric orphans list|reap``: pods left behind by crashed agent orchestrators.

The integrator mounts :data:`app` as ``orphans`` on the main CLI. Both commands run the same rule
as the reaper controller and the Dagster sensor (:mod:`core.orphans` through
:func:`connectors.kube.agents.reap_once`). ``reap`` is a dry run unless ``--no-dry-run`` is given,
and every decision of a reap (would-delete included) is written to ``agents.reaper_audit``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="Pods orphaned by crashed agent orchestrators.", no_args_is_help=True)
out = Console()
err = Console(stderr=True)

KubeconfigOpt = Annotated[Path | None, typer.Option(help="kubeconfig (default: the site's sources.kubernetes)")]
ClusterOpt = Annotated[str | None, typer.Option(help="sources.kubernetes name (default: the first)")]
NamespaceOpt = Annotated[str | None, typer.Option(help="one namespace (default: all)")]
GraceOpt = Annotated[float, typer.Option(help="seconds after a Lease expires before its subtree is orphaned")]


def _connect(kubeconfig: Path | None, cluster: str | None) -> tuple[Any, str]:
    """An ApiClient and the label prefix, from a kubeconfig or the site file."""
    from connectors.kube import api_client
    from settings import SettingsError, default_settings_path, load_settings

    if kubeconfig is not None:
        from dataclasses import dataclass

        @dataclass
        class Source:
            kubeconfig: Path | None
            context: str | None = None
            in_cluster: bool = False
            api_url: str | None = None

        prefix = "gpufabric.io"
        try:
            prefix = load_settings(default_settings_path()).label_prefix
        except (SettingsError, FileNotFoundError):
            pass  # a bare kubeconfig works without a site file
        return api_client(Source(kubeconfig)), prefix
    try:
        settings = load_settings(default_settings_path())
    except (SettingsError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    sources = [s for s in settings.sources.kubernetes if cluster is None or s.name == cluster]
    if not sources:
        err.print(f"[red]error:[/red] no sources.kubernetes entry{f' named {cluster!r}' if cluster else ''}")
        raise typer.Exit(1)
    return api_client(sources[0]), settings.label_prefix


def _summary(findings: list[Any]) -> Table:
    from core.orphans import GpuState, summarize

    table = Table(title="agent pods by verdict and GPU state")
    for col in ("verdict", *(s.value for s in GpuState), "GPUs held"):
        table.add_column(col, justify="right" if col != "verdict" else "left")
    for verdict, row in sorted(summarize(findings).items()):
        table.add_row(verdict, *(str(row[s.value]) for s in GpuState), str(row["gpus_held"]))
    return table


@app.command("list")
def list_orphans(
    kubeconfig: KubeconfigOpt = None, cluster: ClusterOpt = None, namespace: NamespaceOpt = None,
    grace: GraceOpt = 30.0,
    show_all: Annotated[bool, typer.Option("--all", help="list healthy pods too")] = False,
) -> None:
    """Classify every agent pod (healthy, orphaned, invalid) without changing anything."""
    from datetime import UTC, datetime

    from connectors.kube.agents import read_agents
    from core.orphans import OrphanPolicy, Verdict, classify, root_states_from_pods

    api, prefix = _connect(kubeconfig, cluster)
    policy = OrphanPolicy(prefix=prefix, grace_s=grace)
    try:
        pods, leases = read_agents(api, namespace)
    except Exception as exc:
        err.print(f"[red]error:[/red] could not read the cluster: {type(exc).__name__}: {str(exc)[:200]}")
        raise typer.Exit(1) from None
    finally:
        api.close()
    findings = classify(pods, leases, root_states_from_pods(pods, policy), datetime.now(UTC), policy)
    table = Table(title="agent pods" if show_all else "orphaned and invalid agent pods")
    for col in ("namespace", "pod", "verdict", "state", "GPUs", "depth", "rule", "orphan root", "reason"):
        table.add_column(col)
    for f in sorted(findings, key=lambda f: (str(f.verdict), f.pod.namespace, -(f.depth or 0), f.pod.name)):
        if show_all or f.verdict is not Verdict.HEALTHY:
            table.add_row(f.pod.namespace, f.pod.name, str(f.verdict), str(f.state), str(f.pod.gpus),
                          "" if f.depth is None else str(f.depth), str(f.rule or ""), f.orphan_root or "", f.reason)
    out.print(table)
    out.print(_summary(findings))


@app.command("reap")
def reap(
    dry_run: Annotated[bool, typer.Option("--dry-run/--no-dry-run", help="audit 'would delete' only")] = True,
    kubeconfig: KubeconfigOpt = None, cluster: ClusterOpt = None, namespace: NamespaceOpt = None,
    grace: GraceOpt = 30.0,
    cap: Annotated[int, typer.Option(help="at most this many deletions")] = 200,
    delete_grace: Annotated[int, typer.Option(help="gracePeriodSeconds for each delete")] = 30,
    force: Annotated[bool, typer.Option(help="override the blast-radius guard")] = False,
) -> None:
    """One reaper pass: orphaned subtrees bottom-up, capped, audited (dry run by default)."""
    from connectors.kube.agents import reap_once
    from connectors.warehouse import WarehouseError, copy_rows, open_warehouse
    from core.orphans import AUDIT_COLUMNS, AUDIT_TABLE, OrphanPolicy, audit_rows

    api, prefix = _connect(kubeconfig, cluster)
    policy = OrphanPolicy(prefix=prefix, grace_s=grace, max_deletes_per_pass=cap, delete_grace_s=delete_grace)
    try:
        report = reap_once(api, policy, dry_run=dry_run, force=force, namespace=namespace)
    except Exception as exc:
        err.print(f"[red]error:[/red] could not read the cluster, nothing deleted: {type(exc).__name__}: "
                  f"{str(exc)[:200]}")
        raise typer.Exit(1) from None
    finally:
        api.close()
    try:
        wh = open_warehouse()
        with wh.connect() as conn, conn.transaction():
            copy_rows(conn, AUDIT_TABLE, AUDIT_COLUMNS,
                      audit_rows(report.decisions, pass_id=report.pass_id, controller="cli", dry_run=dry_run))
    except WarehouseError as exc:
        err.print(f"[yellow]warning:[/yellow] audit not written: {exc}")
    table = Table(title=f"pass {report.pass_id}{' (dry run)' if dry_run else ''}")
    for col in ("namespace", "pod", "action", "state", "GPUs", "rule", "orphan root", "reason"):
        table.add_column(col)
    for d in report.decisions:
        f = d.finding
        table.add_row(f.pod.namespace, f.pod.name, str(d.action), str(f.state), str(f.pod.gpus), str(f.rule or ""),
                      f.orphan_root or "", d.reason)
    out.print(table)
    out.print(_summary(report.findings))
    counts = {a: report.count(a) for a in ("deleted", "would_delete", "deferred", "failed", "skipped", "refused")}
    out.print(", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items()))
    if report.refused:
        err.print(f"[yellow]{report.refused}[/yellow]")
    if counts["failed"]:
        raise typer.Exit(1)
