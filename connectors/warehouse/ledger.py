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
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from core.budget import EMPTY_VIEW, Decision, Envelope, Node, PodRequest, TreeEnvelope, TreeView, decide, q
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


def _node(r: list[Any]) -> Node:
    live = r[3] == "reserved"
    return Node(r[0], r[1], r[2], live, Decimal(r[4] if live else r[5]), None if r[6] is None else Decimal(r[6]))


# The admission hot path: the root's envelope and the TreeView of the request, read after the
# envelope row is locked (see read_view). Each part is an index lookup, by (root_id, agent_id) or
# (root_id, parent_id). The walks follow parent links strictly up or down in depth (admission
# makes depth = parent + 1), so stored cycles cannot loop them. Descendants are summed only under
# ancestors that carry a subtree cap.
_SELECT_VIEW = """
WITH RECURSIVE up AS (
    SELECT l.agent_id, l.parent_id, l.depth, l.subtree_cap_gpu_hours AS cap
      FROM agents.ledger l WHERE l.root_id = %(root)s AND l.agent_id = %(parent)s
    UNION ALL
    SELECT l.agent_id, l.parent_id, l.depth, l.subtree_cap_gpu_hours
      FROM up JOIN agents.ledger l ON l.root_id = %(root)s AND l.agent_id = up.parent_id AND l.depth < up.depth
), down AS (
    SELECT up.agent_id AS ancestor, l.agent_id, l.depth,
           CASE WHEN l.state = 'reserved' THEN l.reserved_gpu_hours ELSE l.settled_gpu_hours END AS hours
      FROM up JOIN agents.ledger l ON l.root_id = %(root)s AND l.parent_id = up.agent_id AND l.depth > up.depth
     WHERE up.cap IS NOT NULL
    UNION ALL
    SELECT down.ancestor, l.agent_id, l.depth,
           CASE WHEN l.state = 'reserved' THEN l.reserved_gpu_hours ELSE l.settled_gpu_hours END
      FROM down JOIN agents.ledger l ON l.root_id = %(root)s AND l.parent_id = down.agent_id AND l.depth > down.depth
), capped AS (
    SELECT up.agent_id, up.depth,
           up.cap - coalesce((SELECT sum(down.hours) FROM down WHERE down.ancestor = up.agent_id), 0) AS left_h
      FROM up WHERE up.cap IS NOT NULL
)
SELECT e.root_id, e.namespace, e.client, e.tier, e.gpu_hours, e.cost_usd, e.max_live_pods, e.max_depth,
       e.max_fan_out, e.deadline, e.reserved_gpu_hours, e.reserved_cost_usd, e.spent_gpu_hours, e.spent_cost_usd,
       e.observed_gpu_hours, e.observed_cost_usd, e.state,
       (SELECT count(*) FROM agents.ledger l WHERE l.root_id = e.root_id AND l.state = 'reserved'),
       EXISTS (SELECT 1 FROM agents.ledger l WHERE l.root_id = e.root_id AND l.agent_id = %(agent)s),
       (SELECT json_build_array(l.agent_id, l.parent_id, l.depth, l.state, l.reserved_gpu_hours::text,
               l.settled_gpu_hours::text, l.subtree_cap_gpu_hours::text)
          FROM agents.ledger l WHERE l.root_id = e.root_id AND l.agent_id = %(parent)s),
       (SELECT count(*) FROM agents.ledger l
         WHERE l.root_id = e.root_id AND l.parent_id = %(parent)s AND l.state = 'reserved'),
       (SELECT json_build_array(c.agent_id, c.left_h::text) FROM capped c ORDER BY c.left_h, c.depth DESC LIMIT 1)
  FROM agents.envelopes e WHERE e.root_id = %(root)s
"""


def read_view(conn: psycopg.Connection, req: PodRequest) -> tuple[TreeEnvelope | None, TreeView]:
    """The envelope of ``req``'s tree, locked until the transaction ends, and the request's
    :class:`TreeView`: what admission decides on, without reading the whole tree.

    The lock is its own statement on purpose. A ``SELECT ... FOR UPDATE`` that waits for the lock
    re-reads the locked row but evaluates its subqueries with the snapshot it started with, so
    ledger rows committed by the admission it waited for would be missed (the live-pod and
    fan-out counts came out short under 200 concurrent admissions). Under READ COMMITTED the
    next statement takes a new snapshot, which sees them."""
    conn.execute("SELECT 1 FROM agents.envelopes WHERE root_id = %s FOR UPDATE", (req.root_id,))
    row = conn.execute(
        _SELECT_VIEW, {"root": req.root_id, "parent": req.parent_id or "", "agent": req.agent_id}
    ).fetchone()
    if row is None:
        return None, EMPTY_VIEW
    tightest = row[21]
    return _tree(row), TreeView(
        live_pods=row[17],
        agent_exists=row[18],
        parent=None if row[19] is None else _node(row[19]),
        parent_live_children=row[20],
        tightest_cap=None if tightest is None else (tightest[0], Decimal(tightest[1])),
    )


def read_tree(conn: psycopg.Connection, root_id: str) -> tuple[TreeEnvelope | None, list[Node]]:
    """The envelope and every ledger row of one tree (the CLI, the reconciler, tests); admission
    reads only its :class:`TreeView` (:func:`read_view`)."""
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
        tree, view = read_view(conn, req)
        decision = decide(req, tree, view, now)
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
    the lock). Transactions are explicit (``conn.transaction()``), so autocommit is safe. Last
    in, first out: the connection used last is handed out next, so a lightly loaded caller keeps
    using the one whose prepared statements and server-side caches are warm (round-robin over
    16 connections made every one of them plan the admission queries cold)."""

    url: str
    size: int = 8

    def __post_init__(self) -> None:
        self._q: queue.LifoQueue[psycopg.Connection] = queue.LifoQueue()
        for _ in range(self.size):
            self._q.put(self._connect())

    def _connect(self) -> psycopg.Connection:
        # Admission statements are prepared per connection (psycopg, after 5 uses). Left to
        # itself Postgres re-plans them on every call while it judges a custom plan cheaper, and
        # planning the view query costs more than running it: generic plans halved the server's
        # CPU per admission. A generic plan made while the ledger was small (a new cluster, a fresh
        # database) seq-scans the ledger and keeps doing so as it grows (in the benchmark, latency
        # climbed without bound within 10 s); every admission read has an index, so seq scans are
        # off for these connections.
        params = conninfo_to_dict(self.url)
        extra = "-c plan_cache_mode=force_generic_plan -c enable_seqscan=off"
        params["options"] = f"{params.get('options') or ''} {extra}".strip()
        return psycopg.connect(make_conninfo(**params), autocommit=True)  # type: ignore[arg-type]

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        conn = self._q.get()
        try:
            if conn.closed or conn.broken:
                conn = self._connect()
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
