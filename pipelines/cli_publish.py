"""``gpufabric publish`` and ``gpufabric kueue render``: the fabric onto a cluster, or to files.

The integrator mounts :data:`app` as ``publish`` and :data:`kueue_app` as ``kueue``.
``publish`` derives nothing: it publishes the latest stored topology version (or ``--version``),
with the site's guards: ``--dry-run`` prints the diff and writes nothing to the cluster,
the blast-radius guard refuses a large relabel without ``--force``, ``--gitops DIR`` writes
manifests instead of applying, ``--rollback VERSION`` re-applies what was published for an
earlier topology version. Every attempt is a ``publish.runs`` row. Expected failures are one
red line and exit 1.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

app = typer.Typer(help="Publish the fabric: node labels, extended resources, Kueue objects.",
                  invoke_without_command=True)  # fmt: skip
kueue_app = typer.Typer(help="Kueue objects rendered from the fabric and the tenants.", no_args_is_help=True)
out = Console()
err = Console(stderr=True)


def _settings(config: Path | None) -> Any:
    from settings import default_settings_path, load_settings

    return load_settings(config or default_settings_path())


def _source(settings: Any, cluster: str | None) -> Any:
    sources = settings.sources.kubernetes
    if not sources:
        raise ValueError("the site file names no cluster (sources.kubernetes)")
    if cluster is None:
        return sources[0]
    for s in sources:
        if s.name == cluster:
            return s
    raise ValueError(f"no cluster {cluster!r} in sources.kubernetes ({', '.join(s.name for s in sources)})")


def _expected() -> tuple[type[BaseException], ...]:
    """Errors an operator can act on: one red line each, never a traceback."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    from connectors.warehouse import WarehouseError
    from core.publish import RenderError
    from services.publish import PublishRefused
    from settings import SettingsError

    return (PublishRefused, RenderError, SettingsError, WarehouseError, ConfigException, ApiException, HTTPError,
            ValueError, OSError)  # fmt: skip


def _fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    raise typer.Exit(1)


@app.callback()
def publish(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the diff, change nothing")] = False,
    force: Annotated[bool, typer.Option("--force", help="override the blast-radius guard")] = False,
    gitops: Annotated[Path | None, typer.Option("--gitops", help="write manifests to DIR instead of applying")] = None,
    rollback: Annotated[int | None, typer.Option("--rollback", help="re-apply the publish of topology VERSION")] = None,
    version: Annotated[int | None, typer.Option("--version", help="publish this topology version")] = None,
    cluster: Annotated[str | None, typer.Option(help="a sources.kubernetes name (default: the first)")] = None,
    config: Annotated[Path | None, typer.Option(help="site file (default $GPUFABRIC_CONFIG)")] = None,
) -> None:
    """Publish the latest topology version to the cluster (guarded; see --dry-run)."""
    if ctx.invoked_subcommand is not None:
        return
    from connectors.kube import api_client
    from connectors.warehouse import open_warehouse
    from services.publish import config_from_settings, publish_fabric

    try:
        settings = _settings(config)
        source = _source(settings, cluster)
        cfg = config_from_settings(settings, source.name)
        with api_client(source) as api, open_warehouse().connect() as conn:
            outcome = publish_fabric(
                conn, api, cfg, version=version, dry_run=dry_run or settings.publish.dry_run, force=force,
                gitops_dir=gitops, rollback_version=rollback,
            )  # fmt: skip
    except _expected() as exc:
        _fail(str(exc))
        return
    for line in outcome.diff:
        out.print(line, highlight=False, markup=False)
    out.print(f"{outcome.mode} of topology version {outcome.topology_version}: {outcome.status} (run {outcome.run_id})")


@app.command("history")
def history(
    limit: Annotated[int, typer.Option(help="rows")] = 20,
) -> None:
    """The latest publishes: mode, status, topology version, counts."""
    from connectors.warehouse import WarehouseError, open_warehouse
    from services.publish import history as rows

    try:
        with open_warehouse().connect() as conn:
            for r in rows(conn, limit):
                out.print(f"{r['id']:>5} {r['started_at']:%Y-%m-%d %H:%M:%S} {r['cluster']} v{r['topology_version']} "
                          f"{r['mode']} {r['status']} {r['counts']}", highlight=False)  # fmt: skip
    except WarehouseError as exc:
        _fail(str(exc))


@kueue_app.callback()
def kueue() -> None:
    """Kueue objects rendered from the fabric and the tenants."""


@kueue_app.command("render")
def kueue_render(
    version: Annotated[int | None, typer.Option("--version", help="a stored topology version")] = None,
    cluster: Annotated[str | None, typer.Option(help="a sources.kubernetes name: its nodes make the GPU pools")] = None,
    config: Annotated[Path | None, typer.Option(help="site file (default $GPUFABRIC_CONFIG)")] = None,
) -> None:
    """Print the Kueue objects (YAML, one document each) without writing anything."""
    import yaml

    from connectors.kube import api_client
    from connectors.warehouse import open_warehouse
    from services.publish import config_from_settings, desired_state_for

    try:
        settings = _settings(config)
        source = _source(settings, cluster)
        cfg = config_from_settings(settings, source.name)
        with api_client(source) as api, open_warehouse().connect() as conn:
            _, state = desired_state_for(conn, api, cfg, version)
    except _expected() as exc:
        _fail(str(exc))
        return
    sys.stdout.write(yaml.safe_dump_all(state.objects, sort_keys=False))
