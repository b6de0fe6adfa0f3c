"""Landing pod and node snapshots, and the agent-tree usage they imply (shared loader).

One transaction per cluster: pod rows, quarantined pods and status (``land_collection``), node rows,
and the ``agents.tree_usage`` rows of every tree touched, so the budget controller never sees usage
that disagrees with the snapshots. The ``raw/k8s_pod_snapshots`` asset lands what it listed and
watched through it; the demo's simulated agent history and the tests' simulated week go through
the very same loader.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

import psycopg

from connectors.kube.pods import SOURCE
from connectors.warehouse import copy_rows, land_collection, replace_rows
from core.finops.gpu import GpuRequests
from core.finops.money import RateCard, find_rate
from core.finops.records import NODE_COLUMNS, POD_COLUMNS, NodeSnapshot, PodSnapshot, node_row, pod_row
from core.finops.trees import TreePod, tree_usage
from core.quality import CollectionStatus, Parsed

TREE_COLUMNS = (
    "root_id", "client", "task", "agent_type", "tier", "clusters", "pods_total", "live_pods", "max_depth",
    "max_fan_out", "gpus_live", "gpu_hours", "cost_usd", "burn_rate_usd_per_hour", "unpriced_pods", "first_start",
    "as_of",
)


def issue_kind(issue: str) -> str:
    """Group an issue text into a metadata counter name."""
    if issue.endswith(": missing"):
        return "labels_missing"
    if "gpu request" in issue:
        return "gpu_requests_unknown"
    if "end_time before start_time" in issue:
        return "end_before_start"
    return "labels_invalid"


@dataclass
class Landed:
    pods: int = 0
    quarantined: int = 0
    nodes: int = 0
    trees: int = 0
    node_changes: int = 0
    issues: Counter[str] = field(default_factory=Counter)
    pods_with_issues: int = 0


def _node_changes(conn: psycopg.Connection, cluster: str, records: Sequence[PodSnapshot]) -> int:
    """Pods observed on a node other than the one they were on before (earlier runs or this batch)."""
    uids = sorted({r.uid for r in records if r.node})
    previous: dict[str, str] = dict(
        conn.execute(
            """
            SELECT DISTINCT ON (uid) uid, node FROM raw.k8s_pod_snapshots
            WHERE source = %s AND uid = ANY(%s) AND node IS NOT NULL
            ORDER BY uid, collected_at DESC
            """,
            (cluster, uids),
        ).fetchall()
    )
    moved: set[str] = set()
    for r in sorted((r for r in records if r.node), key=lambda r: r.collected_at):
        before = previous.get(r.uid)
        if before is not None and before != r.node:
            moved.add(r.uid)
        previous[r.uid] = r.node  # type: ignore[assignment]
    return len(moved)


def load_rate_cards(conn: psycopg.Connection) -> list[RateCard]:
    """The price book (``finops.price_book``, loaded from the site file's rate_cards)."""
    rows = conn.execute(
        "SELECT gpu_model, tier, unit_price, list_unit_price, effective_from, effective_to FROM finops.price_book"
    ).fetchall()
    return [RateCard(m, t, Decimal(p), Decimal(lp), f, to) for m, t, p, lp, f, to in rows]


def refresh_tree_usage(conn: psycopg.Connection, roots: Sequence[str], as_of: datetime) -> int:
    """Recompute ``agents.tree_usage`` for ``roots`` from every snapshot of their pods."""
    if not roots:
        return 0
    rows = conn.execute(
        """
        WITH snaps AS (
            SELECT * FROM raw.k8s_pod_snapshots WHERE root_id = ANY(%s)
        ), agg AS (
            SELECT source, uid, min(start_time) AS start_time, max(end_time) AS end_time,
                   max(collected_at) AS last_seen
            FROM snaps GROUP BY 1, 2
        ), latest AS (
            SELECT DISTINCT ON (source, uid) *
            FROM snaps
            ORDER BY source, uid, collected_at DESC, (event = 'DELETED') DESC
        ), models AS (
            SELECT DISTINCT ON (source, node) source, node, gpu_model
            FROM raw.k8s_node_snapshots ORDER BY source, node, collected_at DESC
        )
        SELECT l.source, l.uid, l.root_id, l.parent_id, l.depth, l.client, l.task, l.agent_type, l.tier, l.node,
               l.phase, a.start_time, a.end_time, a.last_seen, l.gpus, l.mig, m.gpu_model
        FROM latest l
        JOIN agg a ON a.source = l.source AND a.uid = l.uid
        LEFT JOIN models m ON m.source = l.source AND m.node = l.node
        """,
        (list(roots),),
    ).fetchall()
    cards = load_rate_cards(conn)
    models: dict[str, str | None] = {}
    pods: list[TreePod] = []
    for (cluster, uid, root, parent, depth, client, task, agent_type, tier, node, phase, start, end, last_seen, gpus,
         mig, gpu_model) in rows:
        units = GpuRequests(gpus=gpus, mig=dict(mig or {})).units()
        models[uid] = gpu_model
        pods.append(TreePod(uid, cluster, root, parent, depth, client, task, agent_type, tier, node, phase, start, end,
                            last_seen, units))

    def rate(p: TreePod) -> Decimal | None:
        card = find_rate(cards, models.get(p.uid), p.tier, as_of.date())
        return None if card is None else card.usd_per_gpu_hour

    usage = tree_usage(pods, as_of, rate)
    conn.execute("DELETE FROM agents.tree_usage WHERE root_id = ANY(%s)", (list(roots),))
    copy_rows(conn, "agents.tree_usage", TREE_COLUMNS, (
        (u.root_id, u.client, u.task, u.agent_type, u.tier, u.clusters, u.pods_total, u.live_pods, u.max_depth,
         u.max_fan_out, u.gpus_live, u.gpu_hours, u.cost_usd, u.burn_rate_usd_per_hour, u.unpriced_pods,
         u.first_start, u.as_of)
        for u in usage
    ))
    return len(usage)


def land_pod_snapshots(
    conn: psycopg.Connection,
    *,
    run_id: str,
    cluster: str,
    pods: Parsed[PodSnapshot],
    nodes: Sequence[NodeSnapshot],
    started_at: datetime,
    status: CollectionStatus | None = None,
    detail: str | None = None,
) -> Landed:
    """Land one cluster's snapshots atomically (replacing this run's earlier attempt) and refresh
    the usage of every agent tree they touch."""
    out = Landed()
    # One row per (uid, instant, event): a watch can replay an event the list already showed.
    unique: dict[tuple[str, datetime, str], PodSnapshot] = {}
    for r in pods.records:
        unique[(r.uid, r.collected_at, r.event)] = r
    records = list(unique.values())
    with conn.transaction():
        out.node_changes = _node_changes(conn, cluster, records)
        out.pods, out.quarantined = land_collection(
            conn, run_id=run_id, source=SOURCE, device=cluster, table="raw.k8s_pod_snapshots", columns=POD_COLUMNS,
            rows=(pod_row(run_id, r) for r in records), quarantined=pods.quarantined,
            status=status or pods.status, started_at=started_at, detail=detail,
        )
        _, out.nodes = replace_rows(conn, "raw.k8s_node_snapshots", {"run_id": run_id, "source": cluster},
                                    NODE_COLUMNS, (node_row(run_id, n) for n in nodes))
        roots = sorted({r.attribution.root_id for r in records} - {"unattributed"})
        as_of = max((r.collected_at for r in records), default=started_at)
        out.trees = refresh_tree_usage(conn, roots, as_of)
    per_pod: dict[str, set[str]] = {}
    for r in records:
        per_pod.setdefault(r.uid, set()).update(issue_kind(i) for i in r.issues)
    for kinds in per_pod.values():
        out.issues.update(kinds)
    out.pods_with_issues = sum(1 for kinds in per_pod.values() if kinds)
    return out
