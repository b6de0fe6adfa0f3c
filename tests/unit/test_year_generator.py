"""The year generator (simulator/agents/year.py): deterministic, never overcommits a node, and
landing it in pieces ([start, T) then [T, end)) gives exactly the rows of landing it whole."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from itertools import pairwise

import pytest

from core.finops.records import NODE_COLUMNS, POD_COLUMNS
from simulator.agents.year import YearCounts, YearSpec, node_rows, pod_rows

SPEC = YearSpec(cluster="u", days=2, nodes=8, pods_per_day=400, run_id="u")
COL = {c: i for i, c in enumerate(POD_COLUMNS)}


def test_rows_match_the_table_columns_and_are_deterministic() -> None:
    rows = list(pod_rows(SPEC))
    assert rows == list(pod_rows(SPEC))
    assert {len(r) for r in rows} == {len(POD_COLUMNS)}
    assert {len(r) for r in node_rows(SPEC)} == {len(NODE_COLUMNS)}
    assert rows != list(pod_rows(YearSpec(cluster="u", days=2, nodes=8, pods_per_day=400, run_id="u", seed=1)))


def test_no_node_ever_holds_more_gpus_than_it_has() -> None:
    spans: dict[str, tuple[object, object, int, str, int]] = {}
    for r in pod_rows(SPEC):
        if r[COL["event"]] == "DELETED":
            whole = r[COL["gpus"]]
            spans[r[COL["uid"]]] = (r[COL["start_time"]], r[COL["end_time"]], whole or 1, r[COL["node"]], whole)
    events: dict[str, list[tuple[object, int]]] = defaultdict(list)
    for start, end, gpus, node, _ in spans.values():
        events[node] += [(start, gpus), (end, -gpus)]
    for node, changes in events.items():
        held = 0
        for _, delta in sorted(changes, key=lambda e: (e[0], e[1])):  # ends before starts at the same instant
            held += delta
            assert held <= SPEC.gpus_per_node, node
    assert len(spans) > 500


def test_landing_in_pieces_is_landing_whole() -> None:
    cut = SPEC.start + timedelta(hours=30, minutes=17)
    whole_counts, first, second = YearCounts(), YearCounts(), YearCounts()
    whole = list(pod_rows(SPEC, whole_counts))
    pieces = list(pod_rows(SPEC, first, until=cut)) + list(pod_rows(SPEC, second, since=cut))
    assert sorted(pieces, key=repr) == sorted(whole, key=repr)
    assert list(node_rows(SPEC, until=cut)) + list(node_rows(SPEC, since=cut)) == list(node_rows(SPEC))
    assert first.pod_rows + second.pod_rows == whole_counts.pod_rows
    # a pod is counted where all of its observations landed: never twice, some in neither piece
    assert first.pods + second.pods <= whole_counts.pods


def test_every_pod_is_seen_at_least_hourly_while_running() -> None:
    seen: dict[str, list[datetime]] = defaultdict(list)
    for r in pod_rows(SPEC):
        seen[r[COL["uid"]]].append(r[COL["collected_at"]])
    for times in seen.values():
        ordered = sorted(times)
        assert all(b - a <= timedelta(hours=1) for a, b in pairwise(ordered))


def test_too_few_nodes_for_the_pools_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"3 nodes: at least 4 needed, one per pod size \[1, 2, 4, 8\]"):
        list(node_rows(YearSpec(nodes=3, days=1)))
