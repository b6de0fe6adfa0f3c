"""Switch groups (core/lldp/groups.py): the partitions LLDP collection runs as, and the size setting."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assets.lldp.partitions import SIZE_ENV, switches_per_group
from core.lldp.groups import (
    GroupError,
    describe,
    group_index,
    members,
    partition_changes,
    switch_groups,
)

names = st.lists(st.text(alphabet="abcrsu-0123456789", min_size=1, max_size=12), max_size=60)


@settings(max_examples=40, deadline=None)
@given(names=names, size=st.integers(min_value=1, max_value=9))
def test_every_switch_is_in_exactly_one_group_of_at_most_size(names: list[str], size: int) -> None:
    groups = switch_groups(names, size)
    flat = [n for members_ in groups.values() for n in members_]
    assert sorted(flat) == sorted(set(names))
    assert all(1 <= len(v) <= size for v in groups.values())
    assert list(groups) == [f"group-{i:03d}" for i in range(len(groups))]
    assert all(members(names, key, size) == v for key, v in groups.items())


def test_natural_order_keeps_a_racks_switches_together() -> None:
    names = ["leaf-su1-r10", "leaf-su2-r1", "leaf-su1-r2", "leaf-su1-r1", "spine-01", "leaf-su2-r2"]
    groups = switch_groups(names, 3)
    assert groups == {
        "group-000": ["leaf-su1-r1", "leaf-su1-r2", "leaf-su1-r10"],
        "group-001": ["leaf-su2-r1", "leaf-su2-r2", "spine-01"],
    }
    assert describe(groups)[1] == ("group-001", 3, "leaf-su2-r1", "spine-01")
    assert members(names, "group-007", 3) == []  # a leftover partition collects nothing


def test_partition_changes_add_missing_and_drop_only_stale_group_keys() -> None:
    add, stale = partition_changes(["group-000", "group-001"], ["group-001", "group-002", "by-hand"])
    assert (add, stale) == (["group-000"], ["group-002"])


@pytest.mark.parametrize("key", ["group-1", "grp-001", "", "group-001 ", None])
def test_a_malformed_group_key_is_refused(key: object) -> None:
    with pytest.raises(GroupError, match="not a switch group key"):
        group_index(key)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, -1, 4097, True, 2.5, "8"])
def test_a_bad_group_size_is_refused(size: object) -> None:
    with pytest.raises(GroupError, match="switches per group must be an integer from 1 to 4096"):
        switch_groups(["a"], size)  # type: ignore[arg-type]


def test_the_size_comes_from_the_environment_with_a_default() -> None:
    assert switches_per_group({}) == 64
    assert switches_per_group({SIZE_ENV: " 8 "}) == 8
    for junk in ("eight", "0", "1e3", "\x00"):
        with pytest.raises(GroupError, match=SIZE_ENV):
            switches_per_group({SIZE_ENV: junk})
