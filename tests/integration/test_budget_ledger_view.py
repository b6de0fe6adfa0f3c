"""Admission reads a bounded view of a tree in SQL (``ledger.read_view``); the policy's own
``view_of`` derives the same view from every node. On random trees — deep and wide, settled and
live rows, subtree caps at several levels, exhausted caps — the two must agree for every kind of
request: a child of any node, an unknown parent, an agent id already in the tree."""

from __future__ import annotations

import datetime as dt
import random
import uuid
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from connectors.warehouse.ledger import ConnectionPool, _call, read_tree, read_view
from core.budget import PodRequest, view_of

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)
NOW = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)


def _request(root: str, agent: str, parent: str | None, depth: int) -> PodRequest:
    return PodRequest(
        namespace="ns",
        name=agent,
        agent_id=agent,
        root_id=root,
        parent_id=parent,
        depth=depth,
        client="c",
        tier="t",
        agent_type="worker",
        gpu_units=Decimal(1),
        expected_hours=Decimal(1),
        gpu_hours=Decimal(1),
        cost_usd=Decimal(1),
        envelope=None,
        envelope_source="",
        subtree_cap=None,
    )


def _random_tree(conn: psycopg.Connection, rng: random.Random, size: int) -> tuple[str, list[tuple[str, int]]]:
    """Insert a random tree straight into the ledger (arbitrary caps and states admission would
    not produce in this order); returns the root id and every (agent, depth)."""
    root = f"view-{uuid.uuid4().hex[:10]}"
    conn.execute(
        "INSERT INTO agents.envelopes (root_id, namespace, client, tier, source, gpu_hours, cost_usd, "
        "max_live_pods, max_depth, max_fan_out, created_at, updated_at) "
        "VALUES (%s,'ns','c','t','config',1000,1000,1000,50,1000,%s,%s)",
        (root, NOW, NOW),
    )
    agents: list[tuple[str, int]] = [(root, 0)]
    rows: list[tuple[Any, ...]] = [(root, root, None, 0)]
    for i in range(size):
        # prefer recent agents as parents sometimes, so trees get deep as well as wide
        parent, depth = agents[-1] if rng.random() < 0.3 else rng.choice(agents)
        agent = f"{root}-{i}"
        agents.append((agent, depth + 1))
        rows.append((root, agent, parent, depth + 1))
    with conn.cursor() as cur:
        for root_id, agent, parent, depth in rows:
            live = rng.random() < 0.6
            # few distinct values: equal remainders at several ancestors happen, and the nearest must win
            hours = rng.choice((Decimal(0), Decimal(0), Decimal(1), Decimal("2.5")))
            cap = rng.choice((Decimal(0), Decimal(3), Decimal(8))) if rng.random() < 0.25 else None
            cur.execute(
                "INSERT INTO agents.ledger (root_id, agent_id, parent_id, depth, namespace, pod, agent_type, "
                "gpu_units, subtree_cap_gpu_hours, reserved_gpu_hours, reserved_cost_usd, settled_gpu_hours, "
                "settled_cost_usd, state, reserved_at, settled_at) "
                "VALUES (%s,%s,%s,%s,'ns',%s,'worker',1,%s,%s,%s,%s,%s,%s,%s,%s)",
                (
                    root_id,
                    agent,
                    parent,
                    depth,
                    agent,
                    cap,
                    hours,
                    hours,
                    None if live else hours / 2,
                    None if live else hours / 2,
                    "reserved" if live else "settled",
                    NOW,
                    None if live else NOW,
                ),
            )
    return root, agents


def test_sql_view_equals_the_policy_view_on_random_trees(warehouse: Any) -> None:
    rng = random.Random(20261202)
    checked = capped = 0
    with psycopg.connect(warehouse.libpq_url, autocommit=True) as conn:
        for size in (0, 1, 5, 30, 120, 400):
            root, agents = _random_tree(conn, rng, size)
            tree, nodes = read_tree(conn, root)
            assert tree is not None and len(nodes) == size + 1
            requests = [
                _request(root, f"{root}-new-{k}", a, d + 1)
                for k, (a, d) in enumerate(rng.sample(agents, min(25, len(agents))))
            ]
            requests.append(_request(root, f"{root}-orphan", "no-such-parent", 3))
            requests.append(_request(root, agents[-1][0], agents[0][0], 1))  # agent id already present
            for req in requests:
                with conn.transaction():
                    got_tree, got = read_view(conn, req)
                assert got_tree == tree
                assert got == view_of(req, nodes), (size, req.parent_id)
                checked += 1
                capped += got.tightest_cap is not None
    # 25 sampled parents (fewer in small trees) + an unknown parent + a duplicate id, per tree;
    # both the capped and the uncapped paths were exercised, many times each
    assert checked == 3 + 4 + 8 + 27 + 27 + 27
    assert 10 < capped < checked - 10, capped


HOSTILE = [
    "",
    "plain",
    "it's",
    "''; DROP TABLE agents.ledger; --",
    "back\\slash\\'",
    "$$dollar$$",
    "E'\\x41'",
    "line\nbreak\ttab\r",
    "ünïcödé ✓ 😀",
    "a" * 10_000,
]


def test_literals_reach_postgres_unchanged(warehouse: Any) -> None:
    """Admission sends its values as literals (two statements per round trip need the simple
    protocol): whatever a pod manifest carries must arrive as that text and nothing else."""
    pool = ConnectionPool(warehouse.libpq_url, size=1)
    try:
        with pool.connection() as conn:
            for text in HOSTILE:
                got = conn.execute(
                    _call("SELECT {}::text, {}::numeric, {}::timestamptz, {}", text, Decimal("-1.5"), NOW, None)
                ).fetchone()
                assert got == (text, Decimal("-1.5"), NOW, None), text
            # the DROP TABLE inside a literal ran as text, not as a statement: the ledger is still there
            # (a count(*) returns a row whatever happened, so ask the catalogue instead)
            assert conn.execute("SELECT to_regclass('agents.ledger')::text").fetchone() == ("agents.ledger",)
    finally:
        pool.close()
    with pytest.raises(ValueError, match="NUL"):
        _call("SELECT {}", "nul\x00byte")
