"""Server-side apply and managedFields bookkeeping (simulator/kube/fields.py), without HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.kube.fields import (
    ApplyConflict,
    ManagedFields,
    from_fields_v1,
    record_update,
    server_side_apply,
    to_fields_v1,
)


def node(labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": labels}}


def owners(obj: dict[str, Any]) -> dict[str, set[tuple[str, ...]]]:
    mf = ManagedFields(obj["metadata"]["managedFields"])
    return {e["manager"]: s for e, s in zip(mf.entries, mf.sets, strict=True)}


def test_apply_tracks_ownership_and_removes_only_its_own_stale_fields() -> None:
    live = node({"gfd": "x"})
    record_update(None, live, "kubelet", api_version="v1")
    live = server_side_apply(live, node({"a": "1", "b": "2"}), "pub", force=False, api_version="v1")
    assert owners(live)["pub"] == {("metadata", "labels", "a"), ("metadata", "labels", "b")}
    hand = {**live, "metadata": {**live["metadata"], "labels": {**live["metadata"]["labels"], "h": "1"}}}
    record_update(live, hand, "kubectl", api_version="v1")
    out = server_side_apply(hand, node({"a": "1"}), "pub", force=False, api_version="v1")
    assert out["metadata"]["labels"] == {"gfd": "x", "a": "1", "h": "1"}
    assert set(owners(out)) == {"kubelet", "kubectl", "pub"}


def test_conflict_shared_ownership_and_force() -> None:
    live = server_side_apply(None, node({"a": "1"}), "one", force=False, api_version="v1")
    shared = server_side_apply(live, node({"a": "1"}), "two", force=False, api_version="v1")
    assert ("metadata", "labels", "a") in owners(shared)["one"] & owners(shared)["two"]
    with pytest.raises(ApplyConflict) as err:
        server_side_apply(shared, node({"a": "2"}), "two", force=False, api_version="v1")
    assert err.value.conflicts == [(("metadata", "labels", "a"), "one")]
    forced = server_side_apply(shared, node({"a": "2"}), "two", force=True, api_version="v1")
    assert forced["metadata"]["labels"]["a"] == "2" and "one" not in owners(forced)
    # a field shared with another manager survives when one of them stops applying it
    kept = server_side_apply(shared, node({}), "two", force=False, api_version="v1")
    assert kept["metadata"]["labels"] == {"a": "1"}


def test_update_takes_ownership_without_conflict() -> None:
    live = server_side_apply(None, node({"a": "1"}), "pub", force=False, api_version="v1")
    new = {**live, "metadata": {**live["metadata"], "labels": {"a": "edited"}}}
    record_update(live, new, "kubectl", api_version="v1")
    assert owners(new) == {"kubectl": {("metadata", "labels", "a")}}
    # pub no longer owns it, so dropping it from its apply leaves the edited value in place
    out = server_side_apply(new, node({}), "pub", force=False, api_version="v1")
    assert out["metadata"]["labels"] == {"a": "edited"}


def test_status_scope_and_atomic_lists() -> None:
    live = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "status": {"capacity": {"cpu": "1"}},
            "spec": {"taints": [{"key": "a"}]}}
    out = server_side_apply(live, {"metadata": {"labels": {"x": "y"}}, "status": {"capacity": {"gpu": "8"}}}, "m",
                            force=False, api_version="v1", subresource="status", scope=("status",))
    assert out["status"]["capacity"] == {"cpu": "1", "gpu": "8"} and "labels" not in out["metadata"]
    assert out["metadata"]["managedFields"][0]["subresource"] == "status"
    out = server_side_apply(live, {"spec": {"taints": [{"key": "b"}]}}, "m", force=False, api_version="v1")
    assert out["spec"]["taints"] == [{"key": "b"}]
    assert out["metadata"]["managedFields"][0]["fieldsV1"] == {"f:spec": {"f:taints": {}}}


keys = st.text(alphabet="abc./-", min_size=1, max_size=4)
tree: st.SearchStrategy[Any] = st.recursive(st.just({}), lambda inner: st.dictionaries(keys, inner, max_size=3),
                                            max_leaves=8)


@given(tree)
def test_fields_v1_round_trip(fields: dict[str, Any]) -> None:
    paths = from_fields_v1(to_fields_v1({("metadata", "labels", "x")}) | {})
    assert paths == {("metadata", "labels", "x")}
    prefixed = {f"f:{k}": v for k, v in fields.items()}
    leaves = from_fields_v1(prefixed)
    assert from_fields_v1(to_fields_v1(leaves)) == leaves
