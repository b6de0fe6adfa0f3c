"""The incremental pod intervals and pod hours (issue 25, part 3): one new hour touches only the
pods seen in the lookback, and those come out exactly as a rebuild from every snapshot would.

One fresh database and four hand-written pods (lookback: the default 3 hours), every expected
second worked out here from the snapshots, not read back from dbt:

* build 1 lands snapshots up to 06:00 and builds from scratch; the watermark is then 06:00, so
  the next build recomputes pods seen from 03:00 on;
* build 2 lands later snapshots: pod ``edge`` (started 00:20, before the lookback) ends at 08:30
  and must keep its first hours; pod ``late`` gets a DELETED at 05:30 that lands after its 06:00
  list was folded in (inside the lookback: it must end at 05:30); pod ``relabel`` moves to
  another client and tier (every one of its hours follows the latest labels); pod ``settled``
  (ended 01:40) gets a DELETED collected at 01:50, later than the lookback. Its rows, marked
  before the build, must come out untouched: the build did not recompute it;
  Pod ``gap`` (seen at 00:10 and 02:10 only, so far held to 02:10) gets a DELETED collected at
  02:40 saying it ended at 01:30, also later than the lookback;
* build 3 is a restatement over 01:00-02:00 (``restate_from``/``restate_to``): ``settled`` is
  recomputed with its late snapshot and the mark is gone; ``gap``, which has no snapshot
  collected in the range but held GPUs in it, is recomputed too (its 02:00 hour goes).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from connectors.warehouse import Warehouse, copy_rows, open_warehouse
from core.finops.records import POD_COLUMNS
from services.price_book import run_dbt

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)

T0 = datetime(2026, 5, 1, tzinfo=UTC)
CLUSTER = "inc"
MODELS = ["int_finops_pod_intervals", "int_finops_pod_hours"]
Key = tuple[str, datetime, str]  # uid, hour, node


def at(hour: int, minute: int = 0) -> datetime:
    return T0 + timedelta(hours=hour, minutes=minute)


def snap(uid: str, collected: datetime, event: str, node: str, start: datetime, *, end: datetime | None = None,
         gpus: int = 1, client: str = "globex", tier: str = "batch") -> tuple[Any, ...]:
    return ("run-inc", CLUSTER, collected, event, uid, "agents", f"pod-{uid}", node,
            "Succeeded" if end else "Running", start, end, gpus, {}, {"nvidia.com/gpu": str(gpus)}, {},
            uid, uid, 0, client, "review", "coder", tier, {}, [])


def running(uid: str, node: str, start: datetime, hours: range, **kw: Any) -> list[tuple[Any, ...]]:
    return [snap(uid, at(h), "list", node, start, **kw) for h in hours]


BUILD1 = [
    snap("edge", at(0, 20), "ADDED", "n1", at(0, 20)), *running("edge", "n1", at(0, 20), range(1, 7)),
    snap("late", at(4, 10), "ADDED", "n1", at(4, 10), gpus=2), *running("late", "n1", at(4, 10), range(5, 7), gpus=2),
    snap("relabel", at(1, 30), "ADDED", "n2", at(1, 30)), *running("relabel", "n2", at(1, 30), range(2, 7)),
    snap("settled", at(0, 5), "ADDED", "n2", at(0, 5)),
    snap("settled", at(1, 40), "DELETED", "n2", at(0, 5), end=at(1, 40)),
    snap("gap", at(0, 10), "ADDED", "n2", at(0, 10)), snap("gap", at(2, 10), "list", "n2", at(0, 10)),
]
BUILD2 = [
    *running("edge", "n1", at(0, 20), range(7, 9)), snap("edge", at(8, 30), "DELETED", "n1", at(0, 20), end=at(8, 30)),
    snap("late", at(5, 30), "DELETED", "n1", at(4, 10), end=at(5, 30), gpus=2),
    snap("relabel", at(7), "list", "n2", at(1, 30), client="initech", tier="standard"),
    snap("settled", at(1, 50), "DELETED", "n2", at(0, 5), end=at(1, 50)),
    snap("gap", at(2, 40), "DELETED", "n2", at(0, 10), end=at(1, 30)),
]


def hours(uid: str, node: str, spans: dict[int, int]) -> dict[Key, Decimal]:
    """Expected seconds per hour: {hour offset: seconds held in it}."""
    return {(uid, at(h), node): Decimal(s) for h, s in spans.items()}


EDGE = hours("edge", "n1", {0: 40 * 60, **dict.fromkeys(range(1, 8), 3600), 8: 30 * 60})
LATE_BEFORE = hours("late", "n1", {4: 50 * 60, 5: 3600})
LATE = hours("late", "n1", {4: 50 * 60, 5: 30 * 60})
RELABEL = hours("relabel", "n2", {1: 30 * 60, **dict.fromkeys(range(2, 7), 3600)})
SETTLED = hours("settled", "n2", {0: 55 * 60, 1: 40 * 60})
SETTLED_RESTATED = hours("settled", "n2", {0: 55 * 60, 1: 50 * 60})
GAP = hours("gap", "n2", {0: 50 * 60, 1: 3600, 2: 10 * 60})
GAP_RESTATED = hours("gap", "n2", {0: 50 * 60, 1: 30 * 60})


def land(wh: Warehouse, rows: list[tuple[Any, ...]]) -> None:
    with wh.connect() as conn, conn.transaction():
        copy_rows(conn, "raw.k8s_pod_snapshots", POD_COLUMNS, rows)


def pod_hours(wh: Warehouse) -> dict[Key, tuple[Decimal, str, str, int]]:
    with wh.connect() as conn:
        rows = conn.execute("SELECT uid, hour, node, seconds, client, tier, slice_units "
                            "FROM staging.int_finops_pod_hours").fetchall()
    return {(r[0], r[1], r[2]): (r[3], r[4], r[5], r[6]) for r in rows}


def seconds(table: dict[Key, tuple[Decimal, str, str, int]], uid: str) -> dict[Key, Decimal]:
    return {k: v[0] for k, v in table.items() if k[0] == uid}


@pytest.fixture(scope="module")
def builds(warehouse: Warehouse, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp: Path = tmp_path_factory.mktemp("finops-incremental")
    with warehouse.scratch_database("t_finops_inc") as url:
        wh = open_warehouse(url)
        try:
            land(wh, BUILD1)
            run_dbt(wh, ["build", "--select", "+int_finops_pod_hours"], target_dir=tmp)
            state: dict[str, Any] = {"first": pod_hours(wh)}
            # The mark: a settled pod's rows changed by hand. Only a build that recomputes the pod
            # (from its snapshots) can take it away.
            with wh.connect() as conn:
                conn.execute("UPDATE staging.int_finops_pod_hours SET seconds = seconds + 0.5 WHERE uid = 'settled'")
                conn.commit()
            land(wh, BUILD2)
            run_dbt(wh, ["run", "--select", *MODELS], target_dir=tmp)
            state["second"] = pod_hours(wh)
            with wh.connect() as conn:
                state["segments"] = conn.execute(
                    "SELECT uid, count(*), min(seg_start), max(seg_end), max(last_seen) "
                    "FROM staging.int_finops_pod_intervals GROUP BY uid ORDER BY uid").fetchall()
            run_dbt(wh, ["run", "--select", *MODELS], target_dir=tmp,
                    dbt_vars={"restate_from": at(1).isoformat(), "restate_to": at(2).isoformat()})
            state["restated"] = pod_hours(wh)
            yield state
        finally:
            wh.dispose()


def test_the_first_build_splits_every_pod_into_hours(builds: dict[str, Any]) -> None:
    first = builds["first"]
    assert seconds(first, "edge") == {k: v for k, v in EDGE.items() if k[1] < at(6)}
    assert seconds(first, "late") == LATE_BEFORE
    assert seconds(first, "settled") == SETTLED
    assert {v[3] for k, v in first.items() if k[0] == "late"} == {2 * 7}  # 2 GPUs in 1/7 units


def test_a_pod_across_the_lookback_edge_keeps_its_first_hours(builds: dict[str, Any]) -> None:
    assert seconds(builds["second"], "edge") == EDGE
    edge = next(r for r in builds["segments"] if r[0] == "edge")
    assert edge[1:] == (1, at(0, 20), at(8, 30), at(8, 30))


def test_a_late_snapshot_inside_the_lookback_is_folded_in(builds: dict[str, Any]) -> None:
    assert seconds(builds["second"], "late") == LATE


def test_a_label_change_reaches_every_hour_of_the_pod(builds: dict[str, Any]) -> None:
    second = builds["second"]
    assert seconds(second, "relabel") == RELABEL
    assert {(v[1], v[2]) for k, v in second.items() if k[0] == "relabel"} == {("initech", "standard")}
    assert {(v[1], v[2]) for k, v in builds["first"].items() if k[0] == "relabel"} == {("globex", "batch")}


def test_a_pod_outside_the_lookback_is_not_recomputed(builds: dict[str, Any]) -> None:
    # still the marked rows of build 1: the late 01:50 snapshot was not read and nothing rewrote them
    assert seconds(builds["second"], "settled") == {k: v + Decimal("0.5") for k, v in SETTLED.items()}
    assert seconds(builds["first"], "gap") == seconds(builds["second"], "gap") == GAP  # its 02:40 end not read


def test_a_restatement_folds_in_snapshots_older_than_the_lookback(builds: dict[str, Any]) -> None:
    restated = builds["restated"]
    assert seconds(restated, "settled") == SETTLED_RESTATED
    # no snapshot of gap was collected in the range, but it held GPUs there: recomputed, whole
    assert seconds(restated, "gap") == GAP_RESTATED
    # the other pods as build 2 left them
    assert {k: v for k, v in restated.items() if k[0] not in ("settled", "gap")} == {
        k: v for k, v in builds["second"].items() if k[0] not in ("settled", "gap")}
