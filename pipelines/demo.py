"""What `gpufabric demo` does besides running the assets: agents on the simulated cluster, a week of
agent history, and the closing summary (issue 24, part 3: the demo tells a story, with money).

Entry-point code (it drives the twins and prints): ``pipelines.cli`` calls it; the tests land their
simulated week through :func:`land_week`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.table import Table

HISTORY_CLUSTER = "agents-week"


def land_agent_history(wh: Any) -> str:
    """A simulated week of agent and training work (``simulator.agents.week``: 8 GPU nodes, agent
    trees of every tier, a runaway tree in its last hour) landed as cluster ``agents-week`` by
    :func:`land_week`, so the cost fact has a baseline and the anomaly detector a runaway to find.
    The week ends with the current hour, where the detector looks. Landed once per warehouse;
    returns the line the demo prints."""
    from simulator.agents import runaway_tree, simulate_week

    with wh.connect() as conn:
        row = conn.execute(
            "SELECT min(collected_at) FROM raw.k8s_pod_snapshots WHERE source = %s", (HISTORY_CLUSTER,)
        ).fetchone()
    if row and row[0] is not None:
        return f"a simulated week of agent history (cluster {HISTORY_CLUSTER}) from {row[0]:%Y-%m-%d}, landed earlier"
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    week = simulate_week(HISTORY_CLUSTER, start=hour - timedelta(hours=167), namespace_suffix="-history")
    runaway = runaway_tree(week)  # its hour (167) is the current one
    with wh.connect() as conn:
        landed, _ = land_week(conn, week, week.pods, run_id=f"demo-history-{hour:%Y%m%d%H}", with_nodes=True)
        conn.commit()
    return (
        f"a simulated week of agent history (simulator/agents/week.py, cluster {HISTORY_CLUSTER}): "
        f"{landed.pods} pods in {landed.trees} agent trees on {len(week.node_manifests())} GPU nodes, with a "
        f"runaway tree of {len(runaway)} pods in the current hour"
    )


def land_week(conn: Any, week: Any, pods: Any, *, run_id: str, with_nodes: bool) -> tuple[Any, Any]:
    """Land ``pods`` of a simulated week (``simulator.agents.SimWeek``) through the loaders the
    collectors use: the pod manifests as a collector saw them (``parse_pods``,
    ``services.pod_snapshots``), with the week's nodes at its first and last observation when
    ``with_nodes``, and the DCGM samples Prometheus would return (``parse_matrix``,
    ``land_samples``). The caller commits. Returns (what landed, the parsed samples); the tests'
    simulated week goes through here too."""
    from connectors.kube.pods import node_snapshot, parse_pods
    from connectors.prometheus.storage import land_samples
    from core.telemetry import parse_matrix
    from services.pod_snapshots import land_pod_snapshots

    parsed = parse_pods(week.snapshot_events(pods), cluster=week.cluster, prefix=week.prefix)
    if with_nodes:
        first, last = week.node_observation_times()
        manifests = week.node_manifests()
        landed = land_pod_snapshots(
            conn, run_id=run_id, cluster=week.cluster, pods=parsed, started_at=week.start,
            nodes=[node_snapshot(n, cluster=week.cluster, collected_at=first) for n in manifests],
        )  # fmt: skip
        # The node snapshot table keys one row per node per run: the last observation is a run of its own.
        land_pod_snapshots(
            conn, run_id=run_id + "-end", cluster=week.cluster, pods=parse_pods([], cluster=week.cluster),
            started_at=last, nodes=[node_snapshot(n, cluster=week.cluster, collected_at=last) for n in manifests],
        )  # fmt: skip
    else:
        landed = land_pod_snapshots(conn, run_id=run_id, cluster=week.cluster, pods=parsed, nodes=[],
                                    started_at=week.start)  # fmt: skip
    telemetry = parse_matrix(week.telemetry_matrix(pods))
    land_samples(conn, telemetry, run_id=run_id, device=f"sim-{week.cluster}", started_at=week.start)
    return landed, telemetry


def start_agents(result: Any, wh: Any, err: Console) -> str:
    """A few agent trees created on the simulated cluster, one API call per pod as an orchestrator
    makes them (simulator/agents/live.py), in a namespace the budget webhook governs: the webhook
    (our process, registered as deploy/budget ships it) reserves each agent's budget in the ledger
    as the API server admits it. The demo waits for the sub-agents to finish, so settlement has
    finished agents to settle. Returns the line the demo prints."""
    from kubernetes import client, config

    from connectors.warehouse import data_dir
    from simulator.agents.live import plan_trees, start_trees, wait_finished
    from simulator.budget_webhook import budget_webhook
    from simulator.controlplane import status
    from simulator.up import SIM_BUDGET, plane_workdir

    plane = status(plane_workdir(data_dir() / "sim")) if result.kubeconfig is not None else None
    if plane is None:
        return "none (no Kubernetes in this simulation)"
    namespace = SIM_BUDGET["governed_namespaces"][0]
    pods = plan_trees([namespace])
    api = config.new_client_from_config(config_file=str(result.kubeconfig))
    core = client.CoreV1Api(api)
    log = data_dir() / "sim" / "budget-webhook.log"
    try:
        with err.status("starting the budget webhook and registering it with the API server") as live:
            with budget_webhook(plane, site_config=result.config_path, database_url=wh.libpq_url,
                                namespace=namespace, log=log):  # fmt: skip
                live.update(f"creating {len(pods)} agent pods in {namespace} (the webhook admits each)")
                created = start_trees(core, pods)
            live.update("waiting for the sub-agents to finish (the planners keep running)")
            wait_finished(core, [p for p in pods if p.parent_id is not None])
    finally:
        api.close()
    trees = len({p.root_id for p in pods})
    again = "" if created else " (already there from an earlier demo)"
    return (
        f"{len(pods)} pods in {trees} agent trees created in namespace {namespace}{again}, each admitted "
        "by the budget webhook with a reservation; the sub-agents have finished, the planners run on"
    )


def print_money(wh: Any, cluster: str, settlement: dict[str, Any], out: Console) -> None:
    """What the agents cost so far, per client and tier (finops.gpu_cost_hourly, allocation basis),
    their trees against the budget envelope (agents.tree_usage), the budget settlement of this run,
    and the anomalies judged."""
    with wh.connect() as conn:
        costs = {c: _cost_by_client(conn, c) for c in (cluster, HISTORY_CLUSTER)}
        trees = conn.execute(
            """SELECT root_id, client, pods_total, live_pods, gpu_hours, cost_usd FROM agents.tree_usage
               WHERE %s = ANY(clusters) ORDER BY cost_usd DESC NULLS LAST, root_id LIMIT 5""",
            (cluster,),
        ).fetchall()
        anomalies = conn.execute(
            """SELECT client, agent_type, tier, hour, actual_usd, expected_usd, method
               FROM finops.cost_anomalies ORDER BY impact_usd DESC, hour DESC LIMIT 3"""
        ).fetchall()
        anomaly_count = conn.execute("SELECT count(*) FROM finops.cost_anomalies").fetchone()
    for name, (by_client, idle) in costs.items():
        if not by_client and (idle is None or idle[0] is None):
            continue
        what = "the simulated week of history" if name == HISTORY_CLUSTER else "cost so far"
        table = Table(title=f"{what} on {name} (finops.gpu_cost_hourly, allocation basis)")
        for col in ("client", "tier", "cost (USD)", "GPU-hours"):
            table.add_column(col)
        for client_id, tier, cost, hours in by_client:
            table.add_row(client_id, tier, f"{cost or 0:.2f}", f"{hours or 0:.3f}")
        if idle and idle[0] is not None:
            table.add_row("idle capacity", "-", f"{idle[0]:.2f}", f"{idle[1] or 0:.3f}")
        out.print(table)
    if trees:
        budget = Table(title=f"agent trees against their budget envelope ({envelope()}; agents.tree_usage)")
        for col in ("root", "client", "pods", "live", "GPU-hours", "cost (USD)"):
            budget.add_column(col)
        for root_id, client_id, total, live, hours, cost in trees:
            budget.add_row(root_id[:13], client_id, str(total), str(live), f"{hours:.3f}",
                           "-" if cost is None else f"{cost:.2f}")  # fmt: skip
        out.print(budget)
    if settlement:
        out.print(
            f"budget settlement (agents/budget_settlement): {settlement.get('settled', 0)} finished agents' "
            f"reservations replaced by measured cost (${settlement.get('spent_cost_usd', 0):.2f}, "
            f"{settlement.get('spent_gpu_hours', 0):.3f} GPU-h; {settlement.get('released_gpu_hours', 0):.2f} "
            f"reserved GPU-h released), {settlement.get('reservations_open', 0) - settlement.get('settled', 0)} "
            "still reserved (agents still running)",
            highlight=False, soft_wrap=True,
        )  # fmt: skip
    count = anomaly_count[0] if anomaly_count else 0
    out.print(f"cost anomalies (finops.cost_anomalies): {count}", highlight=False)
    for client_id, agent_type, tier, hour, actual, expected, method in anomalies:
        out.print(f"  {hour:%Y-%m-%d %H:00} {client_id}/{agent_type}/{tier}: ${actual:.2f} against ${expected:.2f} "
                  f"expected ({method})", highlight=False, soft_wrap=True)  # fmt: skip


def _cost_by_client(conn: Any, cluster: str) -> tuple[list[Any], Any]:
    """(cost and GPU-hours per client and tier, idle cost and GPU-hours) of one cluster."""
    by_client = conn.execute(
        """SELECT coalesce("SubAccountId", '-'), coalesce("x_Tier", '-'), sum("EffectiveCost"),
                  sum("ConsumedQuantity")
           FROM finops.gpu_cost_hourly
           WHERE "x_Cluster" = %s AND "x_CostBasis" = 'allocation' AND "x_LineType" = 'workload'
           GROUP BY 1, 2 ORDER BY 3 DESC NULLS LAST""",
        (cluster,),
    ).fetchall()
    idle = conn.execute(
        """SELECT sum("EffectiveCost"), sum("ConsumedQuantity") FROM finops.gpu_cost_hourly
           WHERE "x_Cluster" = %s AND "x_CostBasis" = 'allocation' AND "x_LineType" = 'idle'""",
        (cluster,),
    ).fetchone()
    return by_client, idle


def envelope() -> str:
    from simulator.up import SIM_BUDGET

    default = SIM_BUDGET["envelopes"]["*"]
    return f"{default['gpu_hours']} GPU-h, ${default['cost_usd']}, {default['max_live_pods']} live pods per tree"


def print_findings(wh: Any, run_id: str, out: Console) -> None:
    """What the run collected, per source: targets by status, rows landed and held back."""
    with wh.connect() as conn:
        by_status = conn.execute(
            "SELECT source, status, count(*), sum(rows_landed), sum(rows_quarantined) "
            "FROM ops.collection_status WHERE run_id = %s GROUP BY source, status ORDER BY source, status",
            (run_id,),
        ).fetchall()
        current = conn.execute(
            "SELECT count(*), count(DISTINCT rack), sum(gpu_count) FROM staging.stg_dcim_inventory"
        ).fetchone()
        quarantine = conn.execute(
            "SELECT source, device, location, reason FROM ops.quarantine WHERE run_id = %s ORDER BY id LIMIT 8",
            (run_id,),
        ).fetchall()
    sources: dict[str, list[Any]] = {}
    for source, status, targets, landed, held in by_status:
        row = sources.setdefault(source, [0, [], 0, 0])
        row[0] += targets
        row[1].append(f"{targets} {status}")
        row[2] += landed
        row[3] += held
    table = Table(title="collected (ops.collection_status)")
    for col in ("source", "targets", "by status", "rows landed", "quarantined"):
        table.add_column(col)
    for source, (targets, statuses, landed, held) in sources.items():
        table.add_row(source, str(targets), ", ".join(statuses), str(landed), str(held))
    out.print(table)
    if current:
        out.print(
            f"current inventory (staging.stg_dcim_inventory): {current[0]} nodes in {current[1]} racks, "
            f"{current[2] or 0} GPUs"
        )
    if quarantine:
        out.print("first quarantined inputs (ops.quarantine):")
    for source, device, location, reason in quarantine:
        out.print(f"  {source} {device or ''} {location or ''}: {reason}", highlight=False, soft_wrap=True)
