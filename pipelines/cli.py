"""``gpufabric``: the command line. Heavy imports (Dagster, the simulator) stay inside commands,
so ``gpufabric db url`` answers in a fraction of a second.

Every expected failure (bad config, bad spec, unreachable database, bad selection) ends as one
red line and exit code 1 or 2, never a traceback.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from pipelines.cli_budget import app as budget_app
from pipelines.cli_finops import app as finops_app
from pipelines.cli_ib import app as ingest_app
from pipelines.cli_mig import app as mig_app
from pipelines.cli_orphans import app as orphans_app
from pipelines.cli_placement import app as placement_app
from pipelines.cli_publish import app as publish_app
from pipelines.cli_publish import kueue_app
from pipelines.cli_topology import app as topology_app
from pipelines.cli_topology import slurm_app

app = typer.Typer(
    help="gpufabric: GPU fabric topology, Kueue publishing and agent-tree cost attribution.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="The Postgres warehouse.", no_args_is_help=True)
sim_app = typer.Typer(help="Twins of the external systems, built from a cluster spec.", no_args_is_help=True)
spec_app = typer.Typer(help="Cluster specs.", no_args_is_help=True)
config_app = typer.Typer(help="The site file, gpufabric.yaml.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(sim_app, name="sim")
sim_app.add_typer(spec_app, name="spec")
app.add_typer(config_app, name="config")
app.add_typer(ingest_app, name="ingest")
app.add_typer(topology_app, name="topology")
app.add_typer(slurm_app, name="slurm")
app.add_typer(finops_app, name="finops")
app.add_typer(orphans_app, name="orphans")
app.add_typer(budget_app, name="budget")
app.add_typer(publish_app, name="publish")
app.add_typer(kueue_app, name="kueue")
app.add_typer(mig_app, name="mig")
app.add_typer(placement_app, name="placement")

out = Console()
err = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])


def _expected_errors() -> tuple[type[BaseException], ...]:
    from connectors.warehouse import WarehouseError
    from connectors.warehouse.embedded import EmbeddedPostgresError
    from pipelines.runner import SelectionError
    from settings import SettingsError
    from simulator.budget_webhook import WebhookError
    from simulator.spec import SpecError

    return (WarehouseError, EmbeddedPostgresError, SelectionError, SettingsError, SpecError, WebhookError,
            FileNotFoundError)  # fmt: skip


def clear_errors(fn: F) -> F:
    """Turn the errors a user can fix into one message and exit 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _expected_errors() as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------- db


@db_app.command("url")
@clear_errors
def db_url(show_password: Annotated[bool, typer.Option(help="print the password too")] = False) -> None:
    """Print the warehouse URL (libpq form), starting the embedded server if needed."""
    from connectors.warehouse import open_warehouse

    wh = open_warehouse()
    print(wh.libpq_url if show_password else wh.display_url)


@db_app.command("psql")
@clear_errors
def db_psql(args: Annotated[list[str] | None, typer.Argument(help="extra psql arguments")] = None) -> None:
    """Open psql on the warehouse (the embedded server's own psql if none is installed)."""
    from connectors.warehouse import open_warehouse

    wh = open_warehouse()
    psql = shutil.which("psql") or (str(wh.embedded.bin_dir / "psql") if wh.embedded else None)
    if psql is None:
        raise FileNotFoundError("psql is not installed (Debian: apt-get install postgresql-client)")
    os.execv(psql, [psql, wh.libpq_url, *(args or [])])


@db_app.command("status")
@clear_errors
def db_status() -> None:
    """Server, schema version, and row counts of the tables gpufabric writes."""
    from connectors.warehouse import open_warehouse
    from connectors.warehouse.migrate import current_revision, head_revision

    wh = open_warehouse()
    table = Table(title=f"warehouse {wh.display_url}", show_header=True)
    table.add_column("table")
    table.add_column("rows", justify="right")
    with wh.connect() as conn:
        version = conn.execute("SHOW server_version").fetchone()
        rows = conn.execute(
            """
            SELECT n.nspname || '.' || c.relname, c.reltuples::bigint
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p') AND n.nspname IN
                  ('raw','ops','topology','telemetry','agents','staging','finops','efficiency')
            ORDER BY 1
            """
        ).fetchall()
        for name, _estimate in rows:
            schema, _, rel = name.partition(".")
            from psycopg import sql

            count = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, rel))).fetchone()
            table.add_row(name, str(count[0] if count else 0))
    mode = f"embedded ({wh.embedded.data_dir})" if wh.embedded else "external (GPUFABRIC_DATABASE_URL)"
    out.print(f"PostgreSQL {version[0] if version else '?'}, {mode}")
    out.print(f"schema revision {current_revision(wh.engine)} (head {head_revision()})")
    out.print(table)


@db_app.command("stop")
@clear_errors
def db_stop() -> None:
    """Stop the embedded server (data stays under the data dir)."""
    from connectors.warehouse import data_dir
    from connectors.warehouse.embedded import stop_server

    stopped = stop_server(data_dir() / "postgres")
    out.print("embedded Postgres stopped" if stopped else "embedded Postgres was not running")


# --------------------------------------------------------------------------------------- sim


@spec_app.command("validate")
@clear_errors
def spec_validate(file: Annotated[Path, typer.Argument(help="a cluster spec YAML, or a shipped spec name")]) -> None:
    """Validate a cluster spec and print what it describes."""
    from simulator.generator import generate

    spec = _load_spec(str(file))
    truth = generate(spec)
    out.print(f"[green]ok[/] {spec.name}: " + _truth_summary(truth))


def _load_spec(name_or_path: str) -> Any:
    from simulator.spec import load_spec
    from simulator.specs import resolve_spec_path

    return load_spec(resolve_spec_path(name_or_path))


def _say(message: str) -> None:
    """Progress lines of the control plane (build, start) on stderr, as written."""
    err.print(message, highlight=False, markup=False, soft_wrap=True)


def _sim_up(spec: str) -> Any:
    """Start (or reuse) the twins and the control plane of this data dir; a control plane that
    cannot be built or started is one clear error (its message quotes the failing log)."""
    from rich.markup import escape

    from connectors.warehouse import data_dir
    from simulator.controlplane import BuildError, ControlPlaneError
    from simulator.up import sim_up

    loaded = _load_spec(spec)
    try:
        # One live line for the wait (twins starting, the plane coming up); the control plane's own
        # lines (a build, each component) stay on screen as they come.
        with err.status("starting the twins and the control plane") as status:

            def say(message: str) -> None:
                status.update(message)
                if message.startswith("controlplane"):
                    _say(message)

            return sim_up(loaded, data_dir() / "sim", progress=say)
    except (BuildError, ControlPlaneError) as exc:
        # escape: the message quotes a component's log, whose brackets are not markup
        err.print(f"[bold red]error:[/] the Kubernetes control plane: {escape(str(exc))}", highlight=False,
                  markup=True, soft_wrap=True)  # fmt: skip
        raise typer.Exit(1) from None


def _truth_summary(truth: Any) -> str:
    from core.models import LinkKind, Tier

    ib = [s for s in truth.switches(fabric=LinkKind.IB)]
    eth = truth.switches(fabric=LinkKind.ETH)
    tiers = {t: len([s for s in ib if truth.tiers.get(s.id) == t]) for t in Tier}
    return (
        f"{len(truth.hosts())} nodes, {len(truth.gpus())} GPUs, IB switches {len(ib)} "
        f"(leaf {tiers[Tier.LEAF]}, spine {tiers[Tier.SPINE]}, core {tiers[Tier.CORE]}), "
        f"Ethernet switches {len(eth)}, links {len(truth.links)}, injected defects {len(truth.defects)}"
    )


@sim_app.command("up")
@clear_errors
def sim_up(
    spec: Annotated[str, typer.Option(help="shipped spec name (h100-4su, ...) or a spec file")] = "h100-4su",
) -> None:
    """Start every twin for a spec and the real Kubernetes control plane with one Node per host
    (built first if not cached), and write the matching gpufabric.yaml."""
    result = _sim_up(spec)
    out.print(f"[green]simulated[/] {result.spec_name}: {result.summary}", soft_wrap=True)
    out.print(f"site config: {result.config_path}", soft_wrap=True)
    out.print(f"kubeconfig:  {result.kubeconfig}", soft_wrap=True, highlight=False)
    out.print(f"kubectl:     {result.kubectl} --kubeconfig \"$(gpufabric sim kubeconfig)\" get nodes",
              soft_wrap=True, highlight=False, markup=False)  # fmt: skip


@sim_app.command("kubeconfig")
@clear_errors
def sim_kubeconfig() -> None:
    """Print the admin kubeconfig path of the control plane `sim up` started (exit 1 if none runs)."""
    from connectors.warehouse import data_dir
    from simulator.controlplane import status
    from simulator.up import plane_workdir

    workdir = plane_workdir(data_dir() / "sim")
    plane = status(workdir)
    if plane is None:
        err.print(f"[bold red]error:[/] no Kubernetes control plane is running in {workdir}: start one with "
                  "`gpufabric sim up`", highlight=False, markup=True, soft_wrap=True)  # fmt: skip
        raise typer.Exit(1)
    # Plain print: `$(gpufabric sim kubeconfig)` must be exactly the path, never wrapped.
    print(plane.kubeconfig)


@sim_app.command("down")
@clear_errors
def sim_down() -> None:
    """Stop every twin of this data dir and its Kubernetes control plane: what `sim up` started
    and any other recorded twin (a killed test run's, a crashed command's)."""
    from connectors.warehouse import data_dir
    from simulator.twin import reap
    from simulator.up import sim_down as _down

    # The plane first, in order (clients, API server, etcd); then whatever else is recorded.
    stopped = _down(data_dir() / "sim", progress=_say) + reap(data_dir(), only_orphaned=False)
    out.print(f"stopped {stopped} twin process(es)" if stopped else "no twins were running")


# ------------------------------------------------------------------------------------ config


@config_app.command("validate")
@clear_errors
def config_validate(
    file: Annotated[Path | None, typer.Argument(help="default: $GPUFABRIC_CONFIG or ./gpufabric.yaml")] = None,
) -> None:
    """Validate a site file; every problem is listed as file:line: field: reason."""
    from settings import default_settings_path, load_settings

    path = file or default_settings_path()
    settings = load_settings(path)
    s = settings.sources
    out.print(
        f"[green]ok[/] {path}: {len(s.switches)} switches, {len(s.dcim)} DCIM exports, "
        f"{len(s.fabric_managers)} fabric managers, {len(settings.tenants)} tenants, "
        f"{len(settings.rate_cards)} rate cards"
    )


# --------------------------------------------------------------------------------------- run


@app.command("run")
@clear_errors
def run(
    select: Annotated[
        str | None, typer.Option(help="Dagster asset selection, e.g. 'group:inventory' or 'key:raw/dcim_inventory'")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="site file (default $GPUFABRIC_CONFIG or ./gpufabric.yaml)")
    ] = None,
) -> None:
    """Materialize assets in-process; the run is recorded in the Dagster instance the UI shows."""
    from pipelines.runner import run_assets
    from services.processes import install_stop_handlers

    install_stop_handlers()
    if config:
        os.environ["GPUFABRIC_CONFIG"] = str(config.resolve())
    outcome = run_assets(select, console=err)
    _print_outcome(outcome)
    if not outcome.success:
        raise typer.Exit(1)


def _print_outcome(outcome: Any) -> None:
    table = Table(title=f"run {outcome.run_id}")
    table.add_column("asset")
    table.add_column("metadata")
    for key in outcome.materialized:
        meta = outcome.metadata.get(key, {})
        table.add_row(key, ", ".join(f"{k}={v}" for k, v in meta.items()))
    out.print(table)
    if outcome.skipped:
        out.print(f"partitioned, not run without --partition: {', '.join(outcome.skipped)}")
    if outcome.failed_steps:
        err.print(
            f"[bold red]failed steps:[/] {', '.join(outcome.failed_steps)} (details: make ui → Runs; "
            f"what the steps printed, dbt's log among it: {outcome.output_log})",
            soft_wrap=True,
        )


@app.command("demo")
@clear_errors
def demo(spec: Annotated[str, typer.Option(help="shipped spec name or spec file")] = "h100-4su") -> None:
    """Simulate a cluster (twins and a real Kubernetes control plane), run every asset on the
    embedded defaults, and say what was found."""
    from connectors.warehouse import open_warehouse
    from pipelines import demo as story
    from pipelines.runner import run_assets
    from services.processes import install_stop_handlers

    install_stop_handlers()
    result = _sim_up(spec)
    out.print(f"[bold]1. simulated[/] {result.spec_name}: {result.summary}", soft_wrap=True)
    os.environ["GPUFABRIC_CONFIG"] = str(result.config_path)
    os.environ.setdefault("GPUFABRIC_FINOPS_WATCH_SECONDS", "2")  # one list and a short watch
    os.environ.setdefault("GPUFABRIC_BURST_WATCH_SECONDS", "2")  # the lag asset too
    wh = open_warehouse()
    out.print(f"[bold]2. warehouse[/] {wh.display_url}")
    out.print(f"[bold]3. agents[/] {story.start_agents(result, wh, err)}", soft_wrap=True)
    with err.status("landing a simulated week of agent history"):
        history = story.land_agent_history(wh)
    out.print(f"   history: {history}", highlight=False, soft_wrap=True)
    outcome = run_assets(None, console=err)
    out.print("[bold]4. materialized[/]")
    _print_outcome(outcome)
    story.print_findings(wh, outcome.run_id, out)
    story.print_money(wh, cluster="sim", settlement=outcome.metadata.get("agents/budget_settlement", {}), out=out)
    out.print(
        "\n[bold]where things are[/]\n"
        f"  site config      {result.config_path}\n"
        f"  warehouse        {wh.display_url}   (gpufabric db psql)\n"
        "  raw tables       raw.dcim_inventory, raw.lldp_neighbor_observations, raw.ib_nodes/ports/links,\n"
        "                   raw.nvlink_domains, telemetry.dcgm_samples\n"
        "  derived          topology.versions (gpufabric topology show), efficiency.gpu/pod/job_efficiency_hourly,\n"
        "                   finops.gpu_cost_hourly (gpufabric finops report), agents.tree_usage\n"
        "  published        node labels + Kueue objects on the simulated cluster (gpufabric publish history)\n"
        f"  kubernetes       {result.kubectl} --kubeconfig {result.kubeconfig} get nodes,clusterqueues\n"
        "  bad input        ops.collection_status, ops.quarantine\n"
        "  Dagster UI       make ui  →  http://127.0.0.1:3000",
        soft_wrap=True,
    )
    if not outcome.success:
        raise typer.Exit(1)


@app.command("ui")
@clear_errors
def ui(port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 3000) -> None:
    """Serve the Dagster UI on 127.0.0.1 against the same warehouse and run history."""
    from connectors.warehouse import open_warehouse
    from connectors.warehouse.warehouse import PROJECT_ROOT
    from pipelines.instance import prepare_dagster_env
    from services.processes import run_child

    home = prepare_dagster_env(open_warehouse())
    out.print(f"Dagster UI on http://127.0.0.1:{port} (DAGSTER_HOME={home}); Ctrl-C stops it")
    # A supervised child, not exec: `dagster dev` needs a Ctrl-C to stop its webserver and daemon,
    # and started as a background job it inherits an ignored SIGINT (services.processes says why).
    code = run_child([sys.executable, "-m", "dagster", "dev", "-h", "127.0.0.1", "-p", str(port)], cwd=PROJECT_ROOT)
    raise typer.Exit(code)


if __name__ == "__main__":
    app()
