"""The headroom forecast's history: agent pods read back from ``raw.k8s_pod_lag`` in the warehouse.

A pod seen by several runs of the lag watch counts once; whole GPUs and MIG instances come back as
the device plugin's resource names; a MIG count that is not a positive whole number is not trusted
to hold room; one cluster's history is kept apart from another's. ``WarehouseForecast`` turns it
into placeholders to keep, capped to the cluster's GPUs.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from connectors.warehouse.burst_history import read_demand
from controllers.burst_headroom import WarehouseForecast
from core.burst_headroom import HeadroomPolicy

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)

COLUMNS = ("run_id", "source", "window_start", "window_end", "uid", "namespace", "name", "root_id", "parent_id",
           "client", "task", "agent_type", "tier", "gpus", "mig", "created_at")  # fmt: skip


def land(conn: Any, source: str, run: str, uid: str, created: datetime, agent_type: str, tier: str, gpus: int,
         mig: dict[str, Any]) -> None:  # fmt: skip
    values = (run, source, created, created + timedelta(minutes=1), uid, "ns", uid, "root", "", "acme", "task",
              agent_type, tier, gpus, json.dumps(mig), created)  # fmt: skip
    conn.execute(f"INSERT INTO raw.k8s_pod_lag ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * len(COLUMNS))})",
                 values)  # fmt: skip


def test_the_history_reads_each_pod_once_with_its_resources(warehouse: Any) -> None:
    source, other = f"c-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    now = datetime.now(UTC).replace(microsecond=0)
    with warehouse.connect() as conn:
        for run in ("r1", "r2"):  # two watches saw the same pods
            land(conn, source, run, "planner-1", now - timedelta(hours=1), "planner", "interactive", 1, {})
            land(conn, source, run, "coder-1", now - timedelta(hours=1), "coder", "batch", 0, {"1g.10gb": 2})
        land(conn, source, "r1", "odd", now - timedelta(hours=1), "coder", "batch", 0,
             {"1g.10gb": "2", "2g.20gb": -1, "3g.40gb": True, "7g.80gb": 1})  # only the last is a count
        land(conn, source, "r1", "old", now - timedelta(days=30), "planner", "interactive", 8, {})
        land(conn, other, "r1", "elsewhere", now - timedelta(hours=1), "planner", "interactive", 4, {})
        conn.commit()
    with warehouse.connect() as conn:
        samples = read_demand(conn, since=now - timedelta(days=14), source=source)
        everywhere = read_demand(conn, since=now - timedelta(days=14))
    got = sorted((s.agent_type, s.tier, sorted(s.requests.items())) for s in samples)
    assert got == [
        ("coder", "batch", [("nvidia.com/mig-1g.10gb", 2)]),
        ("coder", "batch", [("nvidia.com/mig-7g.80gb", 1)]),
        ("planner", "interactive", [("nvidia.com/gpu", 1)]),
    ]
    assert {s.created_at for s in samples} == {now - timedelta(hours=1)}
    assert len([s for s in everywhere if s.requests.get("nvidia.com/gpu") == 4]) == 1  # the other cluster's pod


def test_the_warehouse_forecast_is_capped_to_the_cluster(warehouse: Any) -> None:
    source = f"c-{uuid.uuid4().hex[:8]}"
    start = (datetime.now(UTC) - timedelta(hours=2)).replace(second=0, microsecond=0)  # one 60 s window
    with warehouse.connect() as conn:
        for k in range(40):  # 40 planners within 40 s: one peak of 40 GPUs
            land(conn, source, "r1", f"p{k}", start + timedelta(seconds=k), "planner", "interactive", 1, {})
        conn.commit()
    fc = WarehouseForecast(warehouse.libpq_url, HeadroomPolicy(quantile=1.0, max_fraction=0.05), source=source)
    assert fc(10_000) == {"nvidia.com/gpu": 40}  # 5% of 10,000 GPUs = 500: all of the forecast
    assert fc(200) == {"nvidia.com/gpu": 10}  # 5% of 200 GPUs
    assert fc.forecast.days == 1


def test_an_unreadable_history_keeps_the_last_forecast(warehouse: Any) -> None:
    fc = WarehouseForecast("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2", refresh_s=0.0)
    assert fc(1_000) == {}  # nothing known yet: no headroom, and no crash
