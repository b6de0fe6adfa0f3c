"""``gpufabric placement report``: what placement costs on the derived fabric (issue 22, part 4).

The same figures as the ``placement/what_if`` asset, on the command line: a simulated week of
training jobs placed by a topology-unaware scheduler, by Kueue TAS and by gpufabric's advisor
(``core.placement.what_if``), per job size the step-time ratio to the ideal (one healthy leaf
block), the share of jobs crossing leaf blocks and spine groups, and GPU-hours (and dollars, with
``--usd-per-gpu-hour``) lost per week. The fabric is the warehouse's latest topology version, a
stored one (``--version``), or a topology JSON file (``gpufabric topology show --json``).
``--png FILE`` writes the slowdown chart (leaf blocks crossed at 1:1, 2:1, 4:1 and degraded).
Expected failures are one red line and exit 1. The integrator mounts :data:`app` as ``placement``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="Placement: what topology-blind placement costs, and the advisor's gain.",
                  no_args_is_help=True)  # fmt: skip
out = Console()
err = Console(stderr=True)


@app.callback()
def _group() -> None:
    """Placement: what topology-blind placement costs, and the advisor's gain."""


def _fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    raise typer.Exit(1)


def _model(version: int | None, topology_json: Path | None) -> tuple[Any, Any]:
    """(model, its version or file name)."""
    from connectors.warehouse import WarehouseError, open_warehouse
    from core.topology.model import model_from_json
    from services.topology import load_model

    if topology_json is not None:
        try:
            doc = json.loads(topology_json.read_text())
            return model_from_json(doc), topology_json.name
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _fail(f"{topology_json}: not a topology JSON document ({type(exc).__name__}: {exc})")
    try:
        with open_warehouse().connect() as conn:
            doc = load_model(conn, version)
    except WarehouseError as exc:
        _fail(str(exc))
    if doc is None:
        first = "run `gpufabric topology show` or the topology/fabric_model asset first"
        _fail(f"no topology version {version}" if version is not None else f"no topology version yet: {first}")
    return model_from_json(doc), f"version {doc.get('version')}"


@app.command("report")
def report(
    version: Annotated[int | None, typer.Option(help="a stored topology version (default: the latest)")] = None,
    topology_json: Annotated[Path | None, typer.Option(
        "--topology-json", dir_okay=False, help="a topology JSON file instead of the warehouse")] = None,
    gpu_model: Annotated[str, typer.Option(help="the hosts' GPU (the topology does not carry it)")] = "H100-SXM5-80GB",
    days: Annotated[float, typer.Option(min=0.1, max=28.0, help="simulated days")] = 7.0,
    seed: Annotated[int, typer.Option(help="workload seed")] = 22,
    usd_per_gpu_hour: Annotated[float | None, typer.Option(help="price for the dollar column")] = None,
    png: Annotated[Path | None, typer.Option(dir_okay=False, help="also write the slowdown chart here")] = None,
) -> None:  # fmt: skip
    """Per job size and placer: step time against ideal, crossings, GPU-hours lost per week."""
    from core.placement.what_if import what_if

    model, where = _model(version, topology_json)
    try:
        result = what_if(model, gpu_model, days=days, seed=seed)
    except ValueError as exc:
        _fail(f"{where}: {exc}")
    out.print(f"topology {where}: {result.hosts} hosts ({result.background} held by background), {result.jobs} jobs "
              f"over {days:g} days; {result.degraded_blocks} degraded leaf blocks, {result.miscabled_hosts} "
              f"miscabled hosts", highlight=False, soft_wrap=True)  # fmt: skip
    table = Table(title="step time / ideal (one healthy leaf block); GPU-hours lost per week")
    table.add_column("placer", no_wrap=True)  # "kueue-required" whole: it is the row's name
    for col in ("nodes", "jobs", "median", "p90", "crossed leaves", "crossed spines", "GPU-h lost"):
        table.add_column(col, justify="right")
    if usd_per_gpu_hour is not None:
        table.add_column("$ lost", justify="right")
    for r in result.rows:
        cells = [r.placer, str(r.nodes or "all"), str(r.jobs), f"{r.median_ratio:.3f}", f"{r.p90_ratio:.3f}",
                 f"{100 * r.crossed_leaves:.1f}%", f"{100 * r.crossed_spine_groups:.1f}%",
                 f"{r.lost_gpu_hours:,.1f}"]  # fmt: skip
        if usd_per_gpu_hour is not None:
            cells.append(f"{usd_per_gpu_hour * r.lost_gpu_hours:,.0f}")
        table.add_row(*cells)
    out.print(table)
    if png is not None:
        from core.placement import seed_claim_sweep
        from services.placement_chart import slowdown_png

        try:
            png.write_bytes(slowdown_png(seed_claim_sweep()))
        except OSError as exc:
            _fail(f"{png}: {exc.strerror or exc}")
        out.print(f"chart written to {png}", highlight=False, soft_wrap=True)
