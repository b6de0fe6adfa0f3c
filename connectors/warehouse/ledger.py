"""The budget ledger in Postgres: reserve on spawn, settle on finish, concurrency-safe.

Every admission for a tree runs in one transaction that first locks the root's envelope row
(``SELECT ... FOR UPDATE``); the pure policy (:func:`core.budget.decide`) then sees every
reservation committed before it, and the next admission for the same tree waits for this one to
commit. Different trees lock different rows, so they admit in parallel. A root's own admission
inserts the envelope row; a concurrent duplicate root loses on the primary key and is denied.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg

from core.budget import Decision, Envelope, Node, PodRequest, TreeEnvelope, decide, q
from core.orphans import RootState

_SELECT_ENVELOPE = (
    "SELECT root_id, namespace, client, tier, gpu_hours, cost_usd, max_live_pods, max_depth, max_fan_out, deadline, "
    "reserved_gpu_hours, reserved_cost_usd, spent_gpu_hours, spent_cost_usd, observed_gpu_hours, "
    "observed_cost_usd, state FROM agents.envelopes WHERE root_id = %s"
)


def _tree(row: tuple[Any, ...]) -> TreeEnvelope:
    env = Envelope(Decimal(row[4]), Decimal(row[5]), row[6], row[7], row[8], row[9])
    reserved_h, reserved_c, spent_h, spent_c, observed_h, observed_c = (Decimal(v) for v in row[10:16])
    return TreeEnvelope(
        row[0],
        row[1],
        row[2],
        row[3],
        env,
        reserved_h,
        reserved_c,
        spent_h,
        spent_c,
        observed_h,
        observed_c,
        state=row[16],
    )


_SELECT_TREE_LOCKED = (
    "SELECT e.root_id, e.namespace, e.client, e.tier, e.gpu_hours, e.cost_usd, e.max_live_pods, e.max_depth, "
    "e.max_fan_out, e.deadline, e.reserved_gpu_hours, e.reserved_cost_usd, e.spent_gpu_hours, e.spent_cost_usd, "
    "e.observed_gpu_hours, e.observed_cost_usd, e.state, "
    # numerics as text inside JSON: a JSON number would come back a float and lose exactness
    "(SELECT coalesce(json_agg(json_build_array(l.agent_id, l.parent_id, l.depth, l.state, "
    "l.reserved_gpu_hours::text, l.settled_gpu_hours::text, l.subtree_cap_gpu_hours::text)), '[]') "
    "FROM agents.ledger l WHERE l.root_id = e.root_id) "
    "FROM agents.envelopes e WHERE e.root_id = %s FOR UPDATE OF e"
)


def _node(r: list[Any]) -> Node:
    live = r[3] == "reserved"
    return Node(r[0], r[1], r[2], live, Decimal(r[4] if live else r[5]), None if r[6] is None else Decimal(r[6]))


def read_tree(conn: psycopg.Connection, root_id: str, *, lock: bool = False) -> tuple[TreeEnvelope | None, list[Node]]:
    """The envelope and every ledger row of one tree; ``lock`` takes the root's row lock and
    reads both in one round trip (the admission hot path)."""
    if lock:
        row = conn.execute(_SELECT_TREE_LOCKED, (root_id,)).fetchone()
        if row is None:
            return None, []
        return _tree(row), [_node(r) for r in row[17]]
    row = conn.execute(_SELECT_ENVELOPE, (root_id,)).fetchone()
    if row is None:
        return None, []
    rows = conn.execute(
        "SELECT agent_id, parent_id, depth, state, reserved_gpu_hours, settled_gpu_hours, subtree_cap_gpu_hours "
        "FROM agents.ledger WHERE root_id = %s",
        (root_id,),
    )
    return _tree(row), [_node(list(r)) for r in rows]


def admit(conn: psycopg.Connection, req: PodRequest, now: datetime, *, dry_run: bool = False) -> Decision:
    """Decide and, when admitted and not a dry run, reserve — atomically per tree."""
    with conn.transaction():
        tree, nodes = read_tree(conn, req.root_id, lock=True)
        decision = decide(req, tree, nodes, now)
        if not decision.allowed or dry_run:
            return decision
        if req.is_root:
            env = req.envelope
            assert env is not None
            cur = conn.execute(
                "INSERT INTO agents.envelopes (root_id, namespace, client, tier, source, gpu_hours, cost_usd, "
                "max_live_pods, max_depth, max_fan_out, deadline, created_at, updated_at) "
                "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (root_id) DO NOTHING",
                (
                    req.root_id,
                    req.namespace,
                    req.client,
                    req.tier,
                    req.envelope_source,
                    env.gpu_hours,
                    env.cost_usd,
                    env.max_live_pods,
                    env.max_depth,
                    env.max_fan_out,
                    env.deadline,
                    now,
                    now,
                ),
            )
            if cur.rowcount == 0:  # another admission created this root between our read and insert
                return Decision(
                    False,
                    f"denied: root {req.root_id} ({req.namespace}), limit ancestry: root already exists",
                    "ancestry",
                )
        # One round trip: the reservation row and the envelope's running total together.
        conn.execute(
            "WITH r AS (INSERT INTO agents.ledger (root_id, agent_id, parent_id, depth, namespace, pod, agent_type, "
            "gpu_units, subtree_cap_gpu_hours, reserved_gpu_hours, reserved_cost_usd, state, reserved_at) "
            "VALUES (%(root)s,%(agent)s,%(parent)s,%(depth)s,%(ns)s,%(pod)s,%(type)s,%(units)s,%(cap)s,%(h)s,%(c)s,"
            "'reserved',%(now)s)) "
            "UPDATE agents.envelopes SET reserved_gpu_hours = reserved_gpu_hours + %(h)s, "
            "reserved_cost_usd = reserved_cost_usd + %(c)s, updated_at = %(now)s WHERE root_id = %(root)s",
            {
                "root": req.root_id,
                "agent": req.agent_id,
                "parent": req.parent_id,
                "depth": req.depth,
                "ns": req.namespace,
                "pod": req.name,
                "type": req.agent_type,
                "units": req.gpu_units,
                "cap": req.subtree_cap,
                "h": req.gpu_hours,
                "c": req.cost_usd,
                "now": now,
            },
        )
        return decision


def settle(
    conn: psycopg.Connection, root_id: str, agent_id: str, gpu_hours: Decimal, cost_usd: Decimal, now: datetime
) -> bool:
    """Replace an agent's reservation with its measured usage. False if it was not reserved
    (unknown or already settled): settling twice never double-counts."""
    with conn.transaction():
        conn.execute("SELECT 1 FROM agents.envelopes WHERE root_id = %s FOR UPDATE", (root_id,))
        row = conn.execute(
            "UPDATE agents.ledger SET state = 'settled', settled_gpu_hours = %s, settled_cost_usd = %s, "
            "settled_at = %s WHERE root_id = %s AND agent_id = %s AND state = 'reserved' "
            "RETURNING reserved_gpu_hours, reserved_cost_usd",
            (q(gpu_hours), q(cost_usd), now, root_id, agent_id),
        ).fetchone()
        if row is None:
            return False
        conn.execute(
            "UPDATE agents.envelopes SET reserved_gpu_hours = reserved_gpu_hours - %s, "
            "reserved_cost_usd = reserved_cost_usd - %s, spent_gpu_hours = spent_gpu_hours + %s, "
            "spent_cost_usd = spent_cost_usd + %s, updated_at = %s WHERE root_id = %s",
            (row[0], row[1], q(gpu_hours), q(cost_usd), now, root_id),
        )
        return True


def sync_tree_usage(conn: psycopg.Connection, now: datetime) -> int:
    """Copy measured tree totals from ``agents.tree_usage`` (the snapshot asset's table) onto the
    envelopes: late telemetry then counts against the envelope even before pods settle."""
    with conn.transaction():
        cur = conn.execute(
            "UPDATE agents.envelopes e SET observed_gpu_hours = u.gpu_hours, "
            "observed_cost_usd = coalesce(u.cost_usd, 0), updated_at = %s "
            "FROM agents.tree_usage u WHERE u.root_id = e.root_id",
            (now,),
        )
        return cur.rowcount


def set_state(conn: psycopg.Connection, root_id: str, state: str, now: datetime) -> None:
    conn.execute("UPDATE agents.envelopes SET state = %s, updated_at = %s WHERE root_id = %s", (state, now, root_id))


def audit(
    conn: psycopg.Connection,
    *,
    at: datetime,
    controller: str,
    action: str,
    reason: str,
    root_id: str | None = None,
    namespace: str | None = None,
    pod: str | None = None,
    limit: str = "",
    alert_only: bool = False,
) -> None:
    conn.execute(
        "INSERT INTO agents.budget_audit (at, controller, root_id, namespace, pod, action, lim, reason, alert_only) "
        "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
        (at, controller, root_id, namespace, pod, action, limit, reason, alert_only),
    )


@dataclass
class ConnectionPool:
    """A fixed set of autocommit connections handed out one at a time (psycopg_pool is not in
    the lock). Transactions are explicit (``conn.transaction()``), so autocommit is safe."""

    url: str
    size: int = 8

    def __post_init__(self) -> None:
        self._q: queue.Queue[psycopg.Connection] = queue.Queue()
        for _ in range(self.size):
            self._q.put(psycopg.connect(self.url, autocommit=True))

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        conn = self._q.get()
        try:
            if conn.closed or conn.broken:
                conn = psycopg.connect(self.url, autocommit=True)
            yield conn
        finally:
            self._q.put(conn)

    def close(self) -> None:
        while not self._q.empty():
            self._q.get_nowait().close()


def envelope_root_states(warehouse: Any) -> Callable[[], dict[str, RootState]]:
    """The orphan reaper's ``RootStateSource`` from the budget ledger: roots the budget controller
    marked over budget, or closed (finished), are treated as such by the reaper, so a stopped
    tree's stragglers are reaped even when their orchestrator still renews its Lease."""
    by_state = {"over_budget": RootState.OVER_BUDGET, "closed": RootState.FINISHED}

    def read() -> dict[str, RootState]:
        with warehouse.connect() as conn:
            rows = conn.execute(
                "SELECT root_id, state FROM agents.envelopes WHERE state = ANY(%s)", (list(by_state),)
            ).fetchall()
        return {root: by_state[state] for root, state in rows}

    return read
