"""``gpufabric topology ...`` and ``gpufabric slurm ...``: the derived fabric model on the command line.

The integrator mounts :data:`app` as ``topology`` and :data:`slurm_app` as ``slurm``. ``show`` and
``slurm render`` derive from the warehouse's latest observations first (writing a new version only
when something changed), so ``gpufabric ingest ibnetdiscover FILE && gpufabric topology show`` works
with nothing else run; ``--version N`` shows a stored version instead; ``--svg FILE`` also writes
the diagram the topology asset shows in the Dagster UI. Expected failures (no
warehouse, unknown version, nothing observed) are one red line and exit 1, never a traceback.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from core.topology import TopologyModel

app = typer.Typer(help="The derived fabric topology (versioned).", no_args_is_help=True)
slurm_app = typer.Typer(help="Slurm topology.conf from the derived fabric.", no_args_is_help=True)
out = Console()
err = Console(stderr=True)


class _Fail(Exception):
    pass


def _current(version: int | None) -> tuple[TopologyModel, dict[str, Any], bool]:
    """(model, its JSON document, whether a new version was written)."""
    from connectors.warehouse import WarehouseError, open_warehouse
    from core.topology import derive
    from core.topology.model import model_from_json
    from services.topology import load_model, load_observations, write_snapshot

    try:
        wh = open_warehouse()
        with wh.connect() as conn:
            if version is not None:
                doc = load_model(conn, version)
                if doc is None:
                    raise _Fail(f"no topology version {version} (see `gpufabric topology versions`)")
                return model_from_json(doc), doc, False
            loaded = load_observations(conn)
            obs = loaded.observations
            if not (obs.ib_nodes or obs.lldp or obs.dcim):
                raise _Fail("nothing observed yet: run the collectors or `gpufabric ingest ibnetdiscover FILE` first")
            model = derive(obs)
            run_id = f"cli-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
            written = write_snapshot(
                conn, model, run_id=run_id, created_at=datetime.now(UTC),
                inputs={"runs": loaded.runs}, rejected=loaded.rejected,
            )  # fmt: skip
            doc = load_model(conn, written.version) or model.to_json(version=written.version)
            return model, doc, written.created
    except WarehouseError as exc:
        raise _Fail(str(exc)) from None


GPU_MAP_FIELDS = ("gpu", "best_nics", "path_class", "numa_node", "rail")


def _gpu_maps() -> dict[str, list[dict[str, Any]]]:
    """Host -> its GPUs' best NIC, path class, NUMA node and rail, from the latest affinity
    derivation (the ``topology/gpu_affinity`` asset); empty when none was stored yet."""
    from connectors.warehouse import WarehouseError, open_warehouse
    from services.gpu_topo import latest_affinity

    try:
        with open_warehouse().connect() as conn:
            stored = latest_affinity(conn)
    except WarehouseError as exc:
        raise _Fail(str(exc)) from None
    return stored.gpus if stored else {}


def _run(fn: Any) -> Any:
    try:
        return fn()
    except _Fail as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None


@app.command("show")
def show(
    as_json: Annotated[bool, typer.Option("--json", help="the JSON contract (docs/topology-json.md)")] = False,
    version: Annotated[int | None, typer.Option(help="a stored version instead of deriving now")] = None,
    svg: Annotated[Path | None, typer.Option(
        "--svg", dir_okay=False, help="also write the diagram (tiers, blocks, hosts per leaf, findings) as SVG",
    )] = None,
) -> None:
    """Derive the fabric model from the latest observations and show it (or a stored version)."""
    model, doc, created = _run(lambda: _current(version))
    if svg is not None:
        _run(lambda: _write_svg(model, doc, svg))
    gpus = _run(_gpu_maps)
    if as_json:
        for host in doc["hosts"]:  # issue 23: each host's GPU-to-rail map (docs/topology-json.md)
            host["gpus"] = [{k: g[k] for k in GPU_MAP_FIELDS} for g in gpus.get(host["name"], [])]
        print(json.dumps(doc, indent=2, default=str))
        return
    out.print(f"topology version {doc['version']} ({'new' if created else 'unchanged'}), hash {doc['content_hash']}")
    tiers = Counter(f"{s.fabric} {s.tier.value if s.tier else 'unclassified'}" for s in model.switches)
    roles = Counter(h.role for h in model.hosts)
    out.print("switches: " + ", ".join(f"{k} {v}" for k, v in sorted(tiers.items())))
    out.print("hosts: " + ", ".join(f"{k} {v}" for k, v in sorted(roles.items())))
    table = Table(title="domains")
    for col in ("level", "name", "id", "hosts", "design", "valid"):
        table.add_column(col)
    for d in model.domains:
        table.add_row(d.level, d.name, d.id, str(d.hosts), str(d.design_size or ""), "yes" if d.valid else d.reason)
    out.print(table)
    if gpus:
        out.print(f"GPU-to-rail map ({len(gpus)} hosts; per GPU: path class, best NIC(s), NUMA node, rail):")
        for host in sorted(gpus):
            cells = [f"GPU{g['gpu']} {g['path_class'] or '-'} {','.join(g['best_nics']) or '-'} "
                     f"numa{g['numa_node'] if g['numa_node'] is not None else '-'} {g['rail'] or '-'}"
                     for g in gpus[host]]  # fmt: skip
            out.print(f"  {host}: " + "; ".join(cells), highlight=False, markup=False, soft_wrap=True)
    if model.findings:
        ft = Table(title=f"findings ({len(model.findings)})")
        for col in ("severity", "kind", "message"):
            ft.add_column(col)
        for f in model.findings:
            ft.add_row(f.severity.value, f.kind, f.message)
        out.print(ft)
    else:
        out.print("no findings")


def _write_svg(model: TopologyModel, doc: dict[str, Any], path: Path) -> None:
    """The same diagram the topology asset shows in the Dagster UI (core.topology.diagram)."""
    from core.topology.diagram import layout
    from services.diagrams import topology_svg

    drawn = layout(model, title=f"topology version {doc['version']} ({doc['content_hash'][:12]})")
    try:
        path.write_bytes(topology_svg(drawn))
    except OSError as exc:
        raise _Fail(f"cannot write {path}: {exc.strerror or exc}") from None
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(drawn.findings_by_kind.items())) or "no findings"
    err.print(f"diagram written to {path} ({len(drawn.boxes)} boxes; {kinds})", highlight=False, markup=False,
              soft_wrap=True)


@app.command("versions")
def versions() -> None:
    """List the stored versions with their counts."""
    from connectors.warehouse import WarehouseError, open_warehouse
    from services.topology import list_versions

    try:
        with open_warehouse().connect() as conn:
            rows = list_versions(conn)
    except WarehouseError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None
    table = Table(title="topology versions")
    for col in ("version", "created", "run", "switches", "compute hosts", "links", "findings"):
        table.add_column(col)
    for v, at, run, counts in rows:
        table.add_row(str(v), at.isoformat(timespec="seconds"), run, *(
            str(counts.get(k, "")) for k in ("switches", "compute_hosts", "links", "findings")
        ))  # fmt: skip
    out.print(table)


@app.command("diff")
def diff(
    a: Annotated[int, typer.Argument(help="older version")],
    b: Annotated[int, typer.Argument(help="newer version")],
    as_json: Annotated[bool, typer.Option("--json", help="changes as JSON")] = False,
) -> None:
    """What moved between two stored versions: switches, hosts, domains, links, findings."""
    from core.topology import diff_models, summarise

    _, old, _ = _run(lambda: _current(a))
    _, new, _ = _run(lambda: _current(b))
    changes = diff_models(old, new)
    if as_json:
        print(json.dumps([c.__dict__ | {"fields": c.fields()} for c in changes], indent=2, default=str))
        return
    out.print(f"version {a} -> {b}: " + (", ".join(
        f"{s} " + "/".join(f"{n} {k}" for k, n in v.items() if n) for s, v in summarise(changes).items()
    ) or "no changes"))  # fmt: skip
    for c in changes:
        detail = ""
        if c.change == "changed":
            fields = c.fields()
            detail = "; ".join(f"{f}: {_short(c.before, f)} -> {_short(c.after, f)}" for f in fields)
        out.print(f"  {c.change:8} {c.section[:-1]:7} {c.key}  {detail}", highlight=False, markup=False)


def _short(doc: Any, field: str) -> str:
    text = json.dumps(doc.get(field), default=str) if doc else "null"
    return text if len(text) <= 80 else text[:77] + "..."


@slurm_app.callback()
def slurm() -> None:
    """Slurm topology.conf from the derived fabric."""  # a callback keeps `render` a subcommand


@slurm_app.command("render")
def render(
    plugin: Annotated[str, typer.Option(help="tree (topology/tree) or block (topology/block)")] = "tree",
    version: Annotated[int | None, typer.Option(help="a stored version instead of deriving now")] = None,
    block_sizes: Annotated[str | None, typer.Option(help="BlockSizes, e.g. 8,16,32 (default: derived)")] = None,
) -> None:
    """Print topology.conf for the plugin; invalid domains and hosts are left out."""
    from core.topology import render_block, render_tree

    if plugin not in ("tree", "block"):
        err.print(f"[bold red]error:[/] --plugin must be tree or block, not {plugin!r}", highlight=False)
        raise typer.Exit(2)
    sizes: list[int] | None = None
    if block_sizes:
        try:
            sizes = [int(s) for s in block_sizes.split(",")]
        except ValueError:
            err.print(f"[bold red]error:[/] --block-sizes must be integers, got {block_sizes!r}", highlight=False)
            raise typer.Exit(2) from None
    model, _, _ = _run(lambda: _current(version))
    text = render_tree(model) if plugin == "tree" else render_block(model, sizes)
    if not text:
        err.print("[yellow]nothing to render: no valid domains with compute hosts[/yellow]")
        raise typer.Exit(1)
    print(text, end="")
