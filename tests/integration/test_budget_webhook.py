"""The budget webhook over HTTPS (self-signed cert from ``cryptography``) on the embedded warehouse.

Each test uses its own root ids (uuid), so the shared session database needs no cleanup.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from connectors.warehouse.ledger import ConnectionPool, read_tree, settle
from controllers.budget_webhook import make_app
from controllers.tls import self_signed_cert
from core.budget import BudgetConfig, Envelope, Unlabeled

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)
P = "gpufabric.io"
NOW = dt.datetime(2026, 12, 31, 12, 0, tzinfo=dt.UTC)


@dataclass
class Served:
    url: str
    cert: Path
    pool: ConnectionPool
    clock: list[dt.datetime]

    def client(self) -> httpx.Client:
        return httpx.Client(verify=ssl.create_default_context(cafile=str(self.cert)), timeout=30)


@dataclass
class Serving:
    """``workers`` uvicorn servers, each on its own thread and event loop, accepting on one
    socket: as ``--workers`` processes do in production, admissions really race in Postgres."""

    servers: list[uvicorn.Server]
    threads: list[threading.Thread]

    def stop(self) -> None:
        for server in self.servers:
            server.should_exit = True
        for thread in self.threads:
            thread.join(10)


def serve_https(app: Any, workdir: Path, workers: int = 1) -> tuple[Serving, str, Path]:
    cert, key = self_signed_cert(workdir)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    servers = [
        uvicorn.Server(
            uvicorn.Config(app, ssl_certfile=str(cert), ssl_keyfile=str(key), log_level="warning", lifespan="off")
        )
        for _ in range(workers)
    ]
    threads = [threading.Thread(target=s.run, kwargs={"sockets": [sock]}, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while not all(s.started for s in servers) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(s.started for s in servers)
    return Serving(servers, threads), f"https://localhost:{port}/validate", cert


CONFIG = BudgetConfig(
    defaults={
        "*": Envelope(Decimal(50), Decimal(1000), 500, 5, 500),
        "acme/gold": Envelope(Decimal(10), Decimal(40), 4, 2, 2),
    },
    rates_usd_per_gpu_hour={"*": Decimal("2.50")},
    expected_hours={"worker": Decimal(1)},
    governed_namespaces=frozenset({"agents", "agents-default"}),
)


@pytest.fixture(scope="module")
def served(warehouse: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    pool = ConnectionPool(warehouse.libpq_url, size=16)
    clock = [NOW]
    app = make_app(CONFIG, pool, clock=lambda: clock[0])
    serving, url, cert = serve_https(app, tmp_path_factory.mktemp("budget-tls"), workers=4)
    yield Served(url, cert, pool, clock)
    serving.stop()
    pool.close()


def pod(
    name: str,
    *,
    root: str,
    agent: str,
    parent: str | None,
    depth: int,
    client: str = "acme",
    tier: str = "standard",
    gpus: int = 1,
    agent_type: str = "worker",
    annotations: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = {
        f"{P}/agent-id": agent,
        f"{P}/root-id": root,
        f"{P}/depth": str(depth),
        f"{P}/client": client,
        f"{P}/tier": tier,
        f"{P}/agent-type": agent_type,
        f"{P}/task": "t",
    }
    if parent:
        labels[f"{P}/parent-id"] = parent
    labels.update(extra or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }


def review(obj: Any, *, namespace: str = "agents", dry_run: bool = False, uid: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": namespace,
            "object": obj,
            "dryRun": dry_run,
        },
    }


def post(c: httpx.Client, url: str, body: Any) -> dict[str, Any]:
    r = c.post(
        url, content=body if isinstance(body, bytes) else json.dumps(body), headers={"content-type": "application/json"}
    )
    assert r.status_code == 200, r.text
    return r.json()["response"]


def rid() -> str:
    return f"r{uuid.uuid4().hex[:12]}"


def admit_200_concurrently(served: Served, envelope: dict[str, Any]) -> tuple[str, list[bool]]:
    """A root with ``envelope`` (JSON annotation), then 200 one-GPU children posted from 64
    threads at once; returns the root and which children were admitted."""
    root = rid()
    env = json.dumps({"cost_usd": "1000", "max_depth": 3, **envelope})
    with served.client() as c:
        r = post(
            c,
            served.url,
            review(pod(root, root=root, agent=root, parent=None, depth=0, annotations={f"{P}/envelope": env})),
        )
        assert r["allowed"] is True, r
    reviews = [review(pod(f"{root}-{i}", root=root, agent=f"{root}-{i}", parent=root, depth=1)) for i in range(200)]

    def one(body: dict[str, Any]) -> bool:
        with served.client() as c:
            return bool(post(c, served.url, body)["allowed"])

    with ThreadPoolExecutor(64) as ex:
        return root, list(ex.map(one, reviews))


def test_200_concurrent_admissions_with_room_for_50_admit_exactly_50(served: Served) -> None:
    # the root holds 1 GPU-h: exactly 50 one-GPU-hour children fit.
    root, results = admit_200_concurrently(served, {"gpu_hours": "51", "max_live_pods": 1000, "max_fan_out": 1000})
    assert results.count(True) == 50
    with served.pool.connection() as conn:
        tree, nodes = read_tree(conn, root)
        assert tree is not None
        assert tree.reserved_gpu_hours == Decimal(51)
        assert len(nodes) == 51
        denied = conn.execute(
            "SELECT count(*), min(reason) FROM agents.budget_audit WHERE root_id = %s", (root,)
        ).fetchone()
    assert denied is not None and denied[0] == 150
    assert f"root {root}" in denied[1] and "limit gpu_hours" in denied[1] and "0 left" in denied[1]


@pytest.mark.parametrize(
    ("limit", "envelope"),
    [
        # Limits counted from ledger rows, not from the envelope row's running totals: rows that
        # another admission committed while this one waited for the lock must be counted.
        ("live_pods", {"max_live_pods": 51, "max_fan_out": 1000}),  # the root is live too
        ("fan_out", {"max_live_pods": 1000, "max_fan_out": 50}),
    ],
)
def test_concurrent_admissions_respect_counted_limits(served: Served, limit: str, envelope: dict[str, int]) -> None:
    root, results = admit_200_concurrently(served, {"gpu_hours": "100000", "cost_usd": "1000000", **envelope})
    assert results.count(True) == 50, limit
    with served.pool.connection() as conn:
        _, nodes = read_tree(conn, root)
        reasons = conn.execute(
            "SELECT DISTINCT lim FROM agents.budget_audit WHERE root_id = %s AND action = 'denied'", (root,)
        ).fetchall()
    assert len(nodes) == 51
    assert reasons == [(limit,)]


def test_dry_run_reserves_nothing_and_settle_frees_room(served: Served) -> None:
    root = rid()
    env = json.dumps({"gpu_hours": "2", "cost_usd": "100", "max_live_pods": 10, "max_depth": 3, "max_fan_out": 10})
    with served.client() as c:
        assert post(
            c,
            served.url,
            review(pod(root, root=root, agent=root, parent=None, depth=0, annotations={f"{P}/envelope": env})),
        )["allowed"]
        child = pod("c1", root=root, agent="c1", parent=root, depth=1)
        for _ in range(3):
            assert post(c, served.url, review(child, dry_run=True))["allowed"]
        assert post(c, served.url, review(child))["allowed"]
        r = post(c, served.url, review(pod("c2", root=root, agent="c2", parent=root, depth=1)))
        assert r["allowed"] is False
        assert r["status"]["message"].startswith(
            f"denied: root {root} (agents), limit gpu_hours: needs 1 GPU-h, 0 left"
        )
        with served.pool.connection() as conn:
            assert settle(conn, root, "c1", Decimal("0.25"), Decimal("0.625"), NOW)
            assert not settle(conn, root, "c1", Decimal("0.25"), Decimal("0.625"), NOW)  # twice never double-counts
            tree, _ = read_tree(conn, root)
        assert tree is not None and tree.committed_gpu_hours == Decimal("1.25")
        assert post(
            c,
            served.url,
            review(pod("c3", root=root, agent="c3", parent=root, depth=1, annotations={f"{P}/expected-hours": "0.75"})),
        )["allowed"]


def test_limits_depth_fan_out_live_pods_deadline(served: Served) -> None:
    root = rid()
    with served.client() as c:  # acme/gold default: 10 GPU-h, 4 live pods, depth 2, fan-out 2
        assert post(c, served.url, review(pod(root, root=root, agent=root, parent=None, depth=0, tier="gold")))[
            "allowed"
        ]
        for a in ("a", "b"):
            assert post(c, served.url, review(pod(a, root=root, agent=a, parent=root, depth=1, tier="gold")))["allowed"]
        r = post(c, served.url, review(pod("x", root=root, agent="x", parent=root, depth=1, tier="gold")))
        assert (
            not r["allowed"]
            and "limit fan_out: parent " + root + " has 2 live children, max 2" in r["status"]["message"]
        )
        assert post(c, served.url, review(pod("a1", root=root, agent="a1", parent="a", depth=2, tier="gold")))[
            "allowed"
        ]
        r = post(c, served.url, review(pod("a11", root=root, agent="a11", parent="a1", depth=3, tier="gold")))
        assert not r["allowed"] and "limit depth: depth 3 > max 2" in r["status"]["message"]
        r = post(c, served.url, review(pod("b1", root=root, agent="b1", parent="b", depth=2, tier="gold")))
        assert not r["allowed"] and "limit live_pods: 4 live pods, max 4" in r["status"]["message"]
    root2 = rid()
    env = json.dumps({"deadline": "2026-12-31T12:30:00Z"})
    with served.client() as c:
        assert post(
            c,
            served.url,
            review(pod(root2, root=root2, agent=root2, parent=None, depth=0, annotations={f"{P}/envelope": env})),
        )["allowed"]
        served.clock[0] = NOW + dt.timedelta(minutes=30)
        try:
            r = post(c, served.url, review(pod("late", root=root2, agent="late", parent=root2, depth=1)))
        finally:
            served.clock[0] = NOW
        assert (
            not r["allowed"] and "limit deadline: deadline 2026-12-31T12:30:00+00:00 passed" in r["status"]["message"]
        )


def test_bad_input_is_denied_with_a_reason(served: Served) -> None:
    root = rid()
    other = rid()
    with served.client() as c:
        assert post(c, served.url, review(pod(root, root=root, agent=root, parent=None, depth=0)))["allowed"]
        assert post(c, served.url, review(pod(other, root=other, agent=other, parent=None, depth=0, client="globex")))[
            "allowed"
        ]
        cases: list[tuple[Any, str]] = [
            (b"{not json", "body is not JSON"),
            ({"kind": "AdmissionReview"}, "need apiVersion admission.k8s.io/v1"),
            (
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"operation": "CREATE"}},
                "missing request or request.uid",
            ),
            (review("a string"), "object is not a Pod manifest"),
            (review({"metadata": {"labels": ["x"]}}), "labels/annotations malformed"),
            # forged: a globex pod claiming an acme root
            (
                review(pod("f", root=root, agent="f", parent=root, depth=1, client="globex")),
                f"denied: root {root} (agents), limit ancestry: pod claims client 'globex' but root belongs to 'acme'",
            ),
            (
                review(pod("m", root="nosuchroot", agent="m", parent="nosuchroot", depth=1)),
                "denied: root nosuchroot (agents) not found",
            ),
            (review(pod("cy", root=root, agent="cy", parent="cy", depth=1)), "cycle or self-parent"),
            (review(pod("cz", root=root, agent="cz", parent=root, depth=0)), "cycle or self-parent"),
            (review(pod("dp", root=root, agent="dp", parent=root, depth=2)), f"depth 2 but parent {root} has depth 0"),
            (
                review(pod("orph", root=root, agent="orph", parent="ghost", depth=2)),
                "parent ghost not found in the tree",
            ),
            (review(pod(root, root=root, agent=root, parent=None, depth=0)), f"root {root} already exists"),
            (
                review(pod("bad", root=root, agent="bad", parent=root, depth=1, extra={f"{P}/depth": "one"})),
                "is not a non-negative integer",
            ),
            (review(pod("r2", root="r2x", agent="r2", parent=None, depth=0)), "a root has depth 0 and is its own root"),
            (
                review({"metadata": {"name": "plain"}, "spec": {"containers": [{"name": "c"}]}}),
                "has no ancestry labels",
            ),
            (
                review(
                    pod(
                        "e",
                        root="e",
                        agent="e",
                        parent=None,
                        depth=0,
                        annotations={f"{P}/envelope": '{"gpu_hours": "lots"}'},
                    )
                ),
                "gpu_hours: 'lots' is not a number",
            ),
            (
                review(
                    pod("u", root=root, agent="u", parent=root, depth=1)
                    | {"spec": {"containers": [{"name": "c", "resources": {"limits": {"amd.com/gpu": "1"}}}]}}
                ),
                "cannot price GPU requests ['amd.com/gpu']",
            ),
        ]
        for body, expected in cases:
            r = post(c, served.url, body)
            assert r["allowed"] is False, (body, r)
            assert expected in r["status"]["message"], (expected, r["status"]["message"])
        # Not governed / not ours: admitted untouched.
        assert post(
            c, served.url, review({"metadata": {"name": "p"}, "spec": {"containers": []}}, namespace="default")
        )["allowed"]
    with served.pool.connection() as conn:
        _, nodes = read_tree(conn, root)
    assert [n.agent_id for n in nodes] == [root]


def test_unlabeled_pods_defaulted_when_configured(warehouse: Any, tmp_path: Path) -> None:
    pool = ConnectionPool(warehouse.libpq_url, size=2)
    config = BudgetConfig(
        defaults=CONFIG.defaults, rates_usd_per_gpu_hour=CONFIG.rates_usd_per_gpu_hour, unlabeled=Unlabeled.DEFAULT
    )
    serving, url, cert = serve_https(make_app(config, pool, clock=lambda: NOW), tmp_path)
    try:
        name = f"plain-{uuid.uuid4().hex[:8]}"
        with httpx.Client(verify=ssl.create_default_context(cafile=str(cert))) as c:
            r = post(
                c,
                url,
                review({"metadata": {"name": name}, "spec": {"containers": [{"name": "c"}]}}, namespace="team-a"),
            )
        assert r["allowed"] is True
        with pool.connection() as conn:
            tree, nodes = read_tree(conn, name)
        assert tree is not None and tree.client == "team-a" and [n.agent_id for n in nodes] == [name]
    finally:
        serving.stop()
        pool.close()
