"""Settle-on-finish: replace finished agents' reservations with what their pods actually held.

Reads three things and lets :func:`core.budget.settlement` decide per ledger row:

* ``agents.ledger`` rows still ``reserved``;
* ``raw.k8s_pod_snapshots`` of the agent's pod(s), found by the ``<p>/agent-id`` label kept in
  the snapshot's ``labels`` (the ledger's ``pod`` may be a ``generateName`` prefix, and agent
  ids are unique within a tree, which admission enforces), plus ``ops.collection_status`` for
  when each cluster was last listed completely (evidence that a pod no longer exists, or never
  existed — judged only in a cluster where the same tree's pods were seen);
* ``finops.gpu_cost_hourly``, the FinOps cost fact: the workload lines of those pod uids on the
  allocation basis (requested GPU units x time, the quantity a reservation estimates) with their
  ``EffectiveCost`` (the tier's price, as admission's estimate is).

Each settlement goes through :func:`connectors.warehouse.ledger.settle` (row lock on the root,
idempotent); the settlements that are not plain measurement also write an ``agents.budget_audit``
row in the same transaction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg

from connectors.warehouse.ledger import audit, settle
from core.budget import CostLines, PodLife, Reservation, Settlement, SettlementPolicy, settlement

FINISHED_PHASES = ("Succeeded", "Failed")
KUBE_SOURCE = "kubernetes"  # ops.collection_status.source of the pod snapshot asset (connectors.kube.pods.SOURCE)

_RESERVED = (
    "SELECT root_id, agent_id, namespace, pod, gpu_units, reserved_gpu_hours, reserved_cost_usd, reserved_at "
    "FROM agents.ledger WHERE state = 'reserved' AND (%(roots)s::text[] IS NULL OR root_id = ANY(%(roots)s)) "
    "ORDER BY root_id, agent_id"
)

# One row per pod uid of every reserved agent: its life as the snapshots saw it. ``listed_at`` is
# when the latest complete ('ok') list of its cluster started: a pod last seen before that was
# not in that list, so it is gone (deleted between two runs, without the watch seeing it).
_PODS = """
WITH res AS (
    SELECT root_id, agent_id, namespace FROM agents.ledger
    WHERE state = 'reserved' AND (%(roots)s::text[] IS NULL OR root_id = ANY(%(roots)s))
), snaps AS (
    SELECT r.root_id, r.agent_id, s.source, s.uid, s.collected_at, s.event, s.phase, s.start_time, s.end_time
    FROM res r
    JOIN raw.k8s_pod_snapshots s
      ON s.root_id = r.root_id AND s.namespace = r.namespace AND s.labels ->> %(agent_key)s = r.agent_id
), per_uid AS (
    SELECT root_id, agent_id, source, uid, min(start_time) AS start_time, max(end_time) AS end_time,
           max(collected_at) AS last_seen
    FROM snaps GROUP BY 1, 2, 3, 4
), latest AS (
    SELECT DISTINCT ON (source, uid) source, uid, phase
    FROM snaps ORDER BY source, uid, collected_at DESC, (event = 'DELETED') DESC
), listed AS (
    SELECT device AS source, max(started_at) AS listed_at
    FROM ops.collection_status WHERE source = %(kube)s AND status = 'ok' GROUP BY device
)
SELECT p.root_id, p.agent_id, p.source, p.uid, p.start_time, p.end_time, p.last_seen, l.phase, li.listed_at,
       -- the same span int_finops_pod_intervals prices: start to end, or to the last time seen
       CASE WHEN p.start_time IS NULL THEN 0
            ELSE greatest(extract(epoch FROM coalesce(p.end_time, p.last_seen) - p.start_time), 0) END AS held_seconds
FROM per_uid p
JOIN latest l ON l.source = p.source AND l.uid = p.uid
LEFT JOIN listed li ON li.source = p.source
"""

# Per root: the clusters its pods were seen in, and when each was last listed completely.
_TREE_LISTED = """
WITH clusters AS (
    SELECT DISTINCT root_id, source FROM raw.k8s_pod_snapshots WHERE root_id = ANY(%(roots)s)
), listed AS (
    SELECT device AS source, max(started_at) AS listed_at
    FROM ops.collection_status WHERE source = %(kube)s AND status = 'ok' GROUP BY device
)
SELECT c.root_id, bool_and(l.listed_at IS NOT NULL), min(l.listed_at)
FROM clusters c LEFT JOIN listed l ON l.source = c.source
GROUP BY c.root_id
"""

# Quoted names: the cost fact's FOCUS columns are PascalCase (dbt/models/marts/finops).
_COST = """
SELECT "x_Cluster", "ResourceId", count(*), coalesce(sum("x_Seconds"), 0), coalesce(sum("ConsumedQuantity"), 0),
       coalesce(sum("EffectiveCost"), 0), coalesce(sum("ConsumedQuantity") FILTER (WHERE "EffectiveCost" IS NULL), 0)
FROM finops.gpu_cost_hourly
WHERE "x_CostBasis" = 'allocation' AND "x_LineType" = 'workload' AND "ResourceId" = ANY(%s)
GROUP BY 1, 2
"""


@dataclass
class SettlementReport:
    """What one settlement pass saw and did (the asset's metadata)."""

    reserved: int = 0
    by_rule: Counter[str] = field(default_factory=Counter)
    settled: int = 0
    already_settled: int = 0  # settled by someone else between our read and our write
    released_gpu_hours: Decimal = Decimal(0)  # reservations replaced
    spent_gpu_hours: Decimal = Decimal(0)  # measured usage that replaced them
    spent_cost_usd: Decimal = Decimal(0)
    decisions: list[tuple[Reservation, Settlement]] = field(default_factory=list, repr=False)


def read_reservations(conn: psycopg.Connection, roots: Sequence[str] | None = None) -> list[Reservation]:
    rows = conn.execute(_RESERVED, {"roots": list(roots) if roots is not None else None}).fetchall()
    return [Reservation(r[0], r[1], r[2], r[3], Decimal(r[4]), Decimal(r[5]), Decimal(r[6]), r[7]) for r in rows]


def read_pod_lives(
    conn: psycopg.Connection, prefix: str, roots: Sequence[str] | None = None
) -> tuple[dict[tuple[str, str], PodLife], dict[tuple[str, str], list[tuple[str, str]]]]:
    """Per (root, agent): its pods' life, and its pods as (cluster, uid) for the cost lookup."""
    rows = conn.execute(
        _PODS,
        {"roots": list(roots) if roots is not None else None, "agent_key": f"{prefix}/agent-id", "kube": KUBE_SOURCE},
    ).fetchall()
    grouped: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for row in rows:
        grouped.setdefault((row[0], row[1]), []).append(row)
    lives: dict[tuple[str, str], PodLife] = {}
    uids: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for key, pods in grouped.items():
        finished = True
        ends: list[datetime] = []
        held = Decimal(0)
        for _root, _agent, _source, _uid, _start, end, last_seen, phase, listed_at, seconds in pods:
            vanished = listed_at is not None and last_seen < listed_at
            finished = finished and (end is not None or phase in FINISHED_PHASES or vanished)
            ends.append(end if end is not None else last_seen)
            held += Decimal(seconds)
        lives[key] = PodLife(True, finished, max(ends) if finished else None, held)
        uids[key] = [(p[2], p[3]) for p in pods]
    return lives, uids


def read_cost_lines(conn: psycopg.Connection, pods: Sequence[tuple[str, str]]) -> dict[tuple[str, str], CostLines]:
    """Per (cluster, uid): its workload lines in the cost fact (none when dbt has not built it)."""
    if not pods or conn.execute("SELECT to_regclass('finops.gpu_cost_hourly')").fetchone() == (None,):
        return {}
    wanted = set(pods)
    out: dict[tuple[str, str], CostLines] = {}
    for cluster, uid, lines, seconds, hours, cost, unpriced in conn.execute(_COST, (sorted({u for _, u in pods}),)):
        if (cluster, uid) in wanted:
            out[(cluster, uid)] = CostLines(lines, Decimal(seconds), Decimal(hours), Decimal(cost), Decimal(unpriced))
    return out


def tree_listed_at(conn: psycopg.Connection, roots: Sequence[str]) -> dict[str, datetime]:
    """Per root: the oldest latest complete list among the clusters its pods were seen in. Roots
    none of whose pods were seen, or seen in a cluster never listed completely, are absent."""
    rows = conn.execute(_TREE_LISTED, {"roots": sorted(set(roots)), "kube": KUBE_SOURCE}).fetchall()
    return {root: listed for root, all_listed, listed in rows if all_listed}


def _sum(lines: Sequence[CostLines]) -> CostLines:
    return CostLines(
        sum(c.lines for c in lines),
        sum((c.seconds for c in lines), Decimal(0)),
        sum((c.gpu_hours for c in lines), Decimal(0)),
        sum((c.cost_usd for c in lines), Decimal(0)),
        sum((c.unpriced_gpu_hours for c in lines), Decimal(0)),
    )


def settle_finished(
    conn: psycopg.Connection,
    policy: SettlementPolicy,
    now: datetime,
    *,
    prefix: str,
    roots: Sequence[str] | None = None,
    controller: str = "settlement",
) -> SettlementReport:
    """One pass: every reserved ledger row (of ``roots``, or all) whose pod finished is settled
    with its measured usage. Safe to run concurrently and repeatedly: a settled row is skipped."""
    report = SettlementReport()
    reservations = read_reservations(conn, roots)
    report.reserved = len(reservations)
    if not reservations:
        return report
    lives, pods = read_pod_lives(conn, prefix, roots)
    costs = read_cost_lines(conn, [p for key, ps in pods.items() if lives[key].finished for p in ps])
    listed = tree_listed_at(conn, [r.root_id for r in reservations])
    for res in reservations:
        key = (res.root_id, res.agent_id)
        life = lives.get(key, PodLife(seen=False))
        cost = _sum([costs[p] for p in pods.get(key, []) if p in costs])
        decision = settlement(res, life, cost, now, policy, tree_listed_at=listed.get(res.root_id))
        report.by_rule[decision.rule.value] += 1
        report.decisions.append((res, decision))
        if not decision.settles:
            continue
        with conn.transaction():
            done = settle(conn, res.root_id, res.agent_id, decision.gpu_hours, decision.cost_usd, now)
            if done and decision.audited:
                audit(
                    conn,
                    at=now,
                    controller=controller,
                    action="settled",
                    root_id=res.root_id,
                    namespace=res.namespace,
                    pod=res.pod,
                    limit=decision.rule.value,
                    reason=decision.reason,
                )
        if not done:
            report.already_settled += 1
            continue
        report.settled += 1
        report.released_gpu_hours += res.reserved_gpu_hours
        report.spent_gpu_hours += decision.gpu_hours
        report.spent_cost_usd += decision.cost_usd
    return report
