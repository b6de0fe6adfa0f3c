"""``gpufabric budget show ROOT``: an agent tree with its spend, envelope and state.

The integrator mounts :data:`app` as ``budget`` on the main CLI. Reads the ledger only
(``agents.envelopes`` and ``agents.ledger``); the tree is drawn from the ledger's parent links, so
it shows exactly what admission saw.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

import typer
from rich.console import Console
from rich.tree import Tree

app = typer.Typer(help="Agent-tree budgets: envelopes, reservations, spend.", no_args_is_help=True)
out = Console()
err = Console(stderr=True)


def _fmt(value: Decimal) -> str:
    from core.budget import fmt

    return fmt(value)


@app.callback()
def _main() -> None:
    """Agent-tree budgets."""


@app.command()
def show(
    root: Annotated[str, typer.Argument(help="the root task's agent id (<prefix>/root-id)")],
    database_url: Annotated[str | None, typer.Option(help="Postgres URL (default: the warehouse)")] = None,
) -> None:
    """Print ROOT's tree: per agent its reservation or settled usage, and the envelope with what is left."""
    import psycopg

    from connectors.warehouse import open_warehouse
    from connectors.warehouse.ledger import read_tree

    url = database_url or open_warehouse().libpq_url
    with psycopg.connect(url, autocommit=True) as conn:
        tree, nodes = read_tree(conn, root)
        extra = {
            r[0]: (r[1], r[2])
            for r in conn.execute("SELECT agent_id, pod, agent_type FROM agents.ledger WHERE root_id = %s", (root,))
        }
    if tree is None:
        err.print(f"no envelope for root {root!r}")
        raise typer.Exit(1)
    env = tree.envelope
    live = sum(1 for n in nodes if n.live)
    out.print(
        f"root {root}  namespace {tree.namespace}  client {tree.client}  tier {tree.tier}  "
        f"state [bold]{tree.state}[/bold]"
    )
    out.print(f"  {env.describe()}")
    out.print(
        f"  GPU-h: reserved {_fmt(tree.reserved_gpu_hours)} + spent {_fmt(tree.spent_gpu_hours)} "
        f"(observed {_fmt(tree.observed_gpu_hours)}) of {_fmt(env.gpu_hours)}, "
        f"left {_fmt(env.gpu_hours - tree.committed_gpu_hours)}"
    )
    out.print(
        f"  cost: ${_fmt(tree.committed_cost_usd)} of ${_fmt(env.cost_usd)}, "
        f"left ${_fmt(env.cost_usd - tree.committed_cost_usd)}"
    )
    out.print(f"  live pods {live} of {env.max_live_pods}")
    children: dict[str | None, list[str]] = {}
    by_id = {n.agent_id: n for n in nodes}
    for n in sorted(nodes, key=lambda n: (n.depth, n.agent_id)):
        children.setdefault(n.parent_id, []).append(n.agent_id)

    def label(agent: str) -> str:
        n = by_id[agent]
        pod, kind = extra.get(agent, ("?", "?"))
        state = "reserved" if n.live else "settled"
        return f"{agent} ({kind}) pod {pod}: {state} {_fmt(n.gpu_hours)} GPU-h"

    top = Tree(label(root) if root in by_id else root, highlight=False)
    stack: list[tuple[str, Tree, frozenset[str]]] = [(root, top, frozenset({root}))]
    while stack:
        agent, branch, seen = stack.pop()
        for child in children.get(agent, []):
            if child in seen:  # never loop on a stored cycle
                continue
            stack.append((child, branch.add(label(child)), seen | {child}))
    out.print(top)
