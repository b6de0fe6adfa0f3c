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
        row[0], row[1], row[2], row[3], env, reserved_h, reserved_c, spent_h, spent_c, observed_h, observed_c,
        state=row[16],
    )  # fmt: skip


def _node(r: list[Any]) -> Node:
    live = r[3] == "reserved"
    return Node(r[0], r[1], r[2], live, Decimal(r[4] if live else r[5]), None if r[6] is None else Decimal(r[6]))


def _literal(value: Any) -> str:
    """``value`` as a SQL literal for the simple query protocol: NULL, or its text in single
    quotes with quotes doubled (``standard_conforming_strings`` is on for these connections, so
    a backslash is just a backslash); the functions' declared parameter types do the casting.
    psycopg's ``sql.Literal`` does the same through its adapters at a third of the webhook's CPU.
    NUL would end the query string in libpq, so it is refused."""
    if value is None:
        return "NULL"
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    if "\x00" in text:
        raise ValueError("a NUL character cannot be sent to Postgres")
    return "'" + text.replace("'", "''") + "'"


def _call(template: str, *values: Any) -> str:
    """``template``'s ``{}`` filled with literals: two statements in one round trip, which only
    the simple query protocol (no bound parameters) allows."""
    return template.format(*(_literal(v) for v in values))


def _view(row: tuple[Any, ...] | None) -> tuple[TreeEnvelope | None, TreeView]:
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


def _view_call(req: PodRequest) -> str:
    return _call("SELECT * FROM agents.admission_view({}, {}, {})", req.root_id, req.parent_id or "", req.agent_id)


def read_view(conn: psycopg.Connection, req: PodRequest) -> tuple[TreeEnvelope | None, TreeView]:
    """The envelope of ``req``'s tree, locked until the transaction ends, and the request's
    :class:`TreeView` (``agents.admission_view``, migration 0012): what admission decides on,
    without reading the whole tree. Call it inside a transaction; :func:`admit` sends the same
    call with its ``BEGIN``."""
    return _view(conn.execute(_view_call(req)).fetchone())


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
    """Decide and, when admitted and not a dry run, reserve — atomically per tree.

    ``conn`` must be in autocommit mode: the transaction is opened and closed here, in the same
    round trips as the work (``BEGIN`` with the locking read, the reservation with ``COMMIT``), so
    a child's admission is two round trips to Postgres instead of five; on 2 shared cores each
    round trip costs CPU on both sides that the webhook's latency target cannot spare."""
    if not conn.autocommit:
        raise ValueError("admit() needs an autocommit connection: it opens and commits its own transaction")
    try:
        cur = conn.execute("BEGIN; " + _view_call(req))
        cur.nextset()  # past BEGIN's result to the view's
        tree, view = _view(cur.fetchone())
        decision = decide(req, tree, view, now)
        if not decision.allowed or dry_run:
            conn.execute("ROLLBACK")
            return decision
        if req.is_root and not _insert_envelope(conn, req, now):
            conn.execute("ROLLBACK")
            return Decision(
                False, f"denied: root {req.root_id} ({req.namespace}), limit ancestry: root already exists", "ancestry"
            )
        conn.execute(
            _call(
                "SELECT agents.reserve({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}); COMMIT",
                req.root_id, req.agent_id, req.parent_id, req.depth, req.namespace, req.name, req.agent_type,
                req.gpu_units, req.subtree_cap, req.gpu_hours, req.cost_usd, now,
            )
        )  # fmt: skip
        return decision
    except BaseException:
        if not conn.broken:
            conn.rollback()
        raise


def _insert_envelope(conn: psycopg.Connection, req: PodRequest, now: datetime) -> bool:
    """A root's envelope row; False when a concurrent admission of the same root made it first."""
    env = req.envelope
    assert env is not None
    cur = conn.execute(
        "INSERT INTO agents.envelopes (root_id, namespace, client, tier, source, gpu_hours, cost_usd, "
        "max_live_pods, max_depth, max_fan_out, deadline, created_at, updated_at) "
        "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (root_id) DO NOTHING",
        (
            req.root_id, req.namespace, req.client, req.tier, req.envelope_source, env.gpu_hours, env.cost_usd,
            env.max_live_pods, env.max_depth, env.max_fan_out, env.deadline, now, now,
        ),
    )  # fmt: skip
    return cur.rowcount == 1


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
        # standard_conforming_strings: what _literal's quoting relies on, whatever the server's default.
        extra = "-c plan_cache_mode=force_generic_plan -c enable_seqscan=off -c standard_conforming_strings=on"
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
