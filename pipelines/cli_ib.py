"""``gpufabric ingest ...``: load a saved output offline (operators often hand one over).

The integrator mounts :data:`app` as ``ingest`` on the main CLI, so this reads
``gpufabric ingest ibnetdiscover FILE``. The file is parsed (streamed), classified and landed in
the warehouse exactly like a configured source, under its own run id, with status and quarantine.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="Load saved collector output into the warehouse.", no_args_is_help=True)
out = Console()
err = Console(stderr=True)


@app.callback()
def ingest() -> None:
    """Load saved collector output into the warehouse."""  # a callback keeps `ibnetdiscover` a subcommand


@app.command("ibnetdiscover")
def ingest_ibnetdiscover(
    file: Annotated[Path, typer.Argument(help="saved `ibnetdiscover` output")],
    name: Annotated[str | None, typer.Option(help="source name in the warehouse (default: file name)")] = None,
    run_id: Annotated[str | None, typer.Option(help="run id (default: ingest-<time>-<random>)")] = None,
) -> None:
    """Parse a saved ibnetdiscover output and land nodes, ports and links in raw.ib_*."""
    from connectors.ibnetdiscover import IbnetdiscoverError, parse_file
    from connectors.warehouse import WarehouseError, open_warehouse
    from core.quality import CollectionStatus
    from services.infiniband import land_fabric

    source = name or file.name
    rid = run_id or f"ingest-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    started = datetime.now(UTC)
    try:
        fabric = parse_file(file, source)
    except IbnetdiscoverError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    try:
        wh = open_warehouse()
        with wh.connect() as conn:
            links, held = land_fabric(
                conn, run_id=rid, kind="ibnetdiscover", device=source, fabric=fabric, started_at=started
            )
    except WarehouseError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    table = Table(title=f"{file} -> run {rid}")
    for col in ("lines", "nodes", "switches", "ports", "links", "quarantined", "status"):
        table.add_column(col)
    table.add_row(
        str(fabric.lines), str(len(fabric.nodes)), str(len(fabric.switches)), str(len(fabric.ports)),
        str(links), str(held), str(fabric.status),
    )  # fmt: skip
    out.print(table)
    kinds: dict[str, int] = {}
    for f in fabric.findings:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    if kinds:
        out.print("findings: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    if fabric.problem:
        err.print(f"[yellow]{fabric.problem}[/yellow]")
    if fabric.status in (CollectionStatus.NO_DATA, CollectionStatus.INVALID):
        raise typer.Exit(1)


@app.command("lldp")
def ingest_lldp(
    file: Annotated[Path, typer.Argument(help="a saved LLDP capture (see --format)")],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="eos-json, nxos-json, junos-json, junos-xml, iosxr-xml, cumulus-json, lldpctl-json, "
            "snmprec (snmpsim) or snmpwalk (`snmpwalk -On` text)",
        ),
    ],
    host: Annotated[str | None, typer.Option(help="the device's name in the warehouse (default: file stem)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the landed neighbours as a JSON list")] = False,
    run_id: Annotated[str | None, typer.Option(help="run id (default: ingest-<time>-<random>)")] = None,
) -> None:
    """Parse a saved LLDP capture with the live collectors' parsers and land it in
    raw.lldp_neighbor_observations like a poll of that device (quarantine and status included)."""
    import json

    from connectors.lldp_capture import CaptureFormatError, check_format
    from connectors.warehouse import WarehouseError, open_warehouse
    from core.quality import CollectionStatus
    from services.lldp_ingest import ingest_capture, neighbour_json

    try:
        check_format(fmt)
    except CaptureFormatError as exc:
        err.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
        raise typer.Exit(2) from None
    try:
        data = file.read_bytes()
    except OSError as exc:
        err.print(f"[red]error:[/red] cannot read {file}: {exc.strerror or exc}", highlight=False)
        raise typer.Exit(1) from None
    device = host or file.stem
    rid = run_id or f"ingest-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    try:
        wh = open_warehouse()
        with wh.connect() as conn:
            done = ingest_capture(conn, data, fmt, device, rid)
    except WarehouseError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    c = done.capture
    if as_json:
        print(json.dumps(neighbour_json(c), indent=1))
    else:
        table = Table(title=f"{file} ({fmt}) -> {device}, run {rid}")
        for col in ("collector", "neighbours", "quarantined", "status"):
            table.add_column(col)
        table.add_row(c.collector, str(done.landed), str(done.quarantined), str(c.status))
        out.print(table)
    for q in c.quarantined[:10]:
        err.print(f"quarantined ({q.location}): {q.reason}", markup=False, highlight=False)
    if len(c.quarantined) > 10:
        err.print(f"... and {len(c.quarantined) - 10} more in ops.quarantine (run {rid})", markup=False)
    if c.status is CollectionStatus.INVALID:
        raise typer.Exit(1)


# --- one node's `nvidia-smi topo -m` (issue 23) ------------------------------------------------


@app.command("gpu-topo")
def ingest_gpu_topo(
    host: Annotated[str, typer.Argument(help="the node the capture is from (its Kubernetes node name)")],
    file: Annotated[Path, typer.Argument(help="saved `nvidia-smi topo -m` output")],
    as_json: Annotated[
        bool, typer.Option("--json", help="print each GPU's best NICs, path class and NUMA node as a JSON list")
    ] = False,
    run_id: Annotated[str | None, typer.Option(help="run id (default: ingest-<time>-<random>)")] = None,
    captured_at: Annotated[
        datetime | None, typer.Option(help="when the node printed it (default: the file's modification time)")
    ] = None,
) -> None:
    """Parse a saved `nvidia-smi topo -m` capture and land it in raw.gpu_topo_captures; a malformed
    one is quarantined with its reason (exit 1)."""
    import json

    from connectors.gpu_topo import MAX_BYTES
    from connectors.warehouse import WarehouseError, open_warehouse
    from core.affinity import derive_node
    from services.gpu_topo import land_gpu_topo

    try:
        with file.open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)  # the parser refuses more; never slurp a huge file
        when = captured_at or datetime.fromtimestamp(file.stat().st_mtime, UTC)
    except OSError as exc:
        err.print(f"[red]error:[/red] cannot read {file}: {exc.strerror or exc}", highlight=False)
        raise typer.Exit(1) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    rid = run_id or f"ingest-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    try:
        wh = open_warehouse()
        with wh.connect() as conn:
            done = land_gpu_topo(conn, rid, host, data, f"file:{file.name}", when)
    except WarehouseError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    if done.matrix is None:
        err.print(
            f"error: {file} is not a readable `nvidia-smi topo -m` matrix: {done.error}"
            f" (quarantined in ops.quarantine, run {rid})",
            markup=False,
            highlight=False,
            soft_wrap=True,  # one line, whatever the terminal's width: paths and reasons stay greppable
        )
        raise typer.Exit(1)
    affinity = derive_node(host, done.matrix)
    if as_json:
        print(json.dumps(affinity.to_json(), indent=1))
        return
    table = Table(title=f"{file} -> {host}, run {rid}")
    for col in ("GPU", "best NICs", "path", "NUMA", "CPUs"):
        table.add_column(col)
    for g in affinity.gpus:
        numa = "-" if g.numa_node is None else str(g.numa_node)
        table.add_row(str(g.gpu), ", ".join(g.best_nics) or "-", g.path_class or "-", numa, g.cpu_affinity or "-")
    out.print(table)
    for f in affinity.findings:
        out.print(f"{f.kind}: {f.detail}", markup=False, highlight=False)
