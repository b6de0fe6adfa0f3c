"""Merge, strategic merge and JSON patch (simulator/kube/patches.py)."""

from __future__ import annotations

import pytest

from simulator.kube.errors import ApiError
from simulator.kube.patches import json_patch, merge_patch, strategic_merge_patch

POD = {
    "metadata": {"labels": {"a": "1", "b": "2"}},
    "spec": {"containers": [{"name": "main", "image": "v1"}, {"name": "side", "image": "s1"}], "tolerations": [1]},
    "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Init", "status": "True"}]},
}


def test_merge_patch_rfc7386() -> None:
    out = merge_patch(POD, {"metadata": {"labels": {"a": None, "c": "3"}}, "spec": {"containers": []}})
    assert out["metadata"]["labels"] == {"b": "2", "c": "3"}
    assert out["spec"]["containers"] == []  # lists replace
    assert POD["metadata"]["labels"] == {"a": "1", "b": "2"}  # input untouched
    assert merge_patch({"a": 1}, "x") == "x"


def test_strategic_merge_lists_by_merge_key() -> None:
    out = strategic_merge_patch(POD, {"spec": {"containers": [{"name": "main", "image": "v2"}, {"name": "new",
                                                                                              "image": "n"}]}})
    assert out["spec"]["containers"] == [{"name": "main", "image": "v2"}, {"name": "side", "image": "s1"},
                                         {"name": "new", "image": "n"}]
    out = strategic_merge_patch(POD, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "False"}, {"type": "Init", "status": "True"}]
    out = strategic_merge_patch(POD, {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}})
    assert [c["name"] for c in out["spec"]["containers"]] == ["main"]
    out = strategic_merge_patch(POD, {"spec": {"tolerations": [2]}})  # no merge key: replaced
    assert out["spec"]["tolerations"] == [2]
    out = strategic_merge_patch(POD, {"metadata": {"labels": {"$patch": "replace", "z": "9"}}})
    assert out["metadata"]["labels"] == {"z": "9"}
    out = strategic_merge_patch(POD, {"metadata": {"$setElementOrder/x": [], "labels": {"b": None}}})
    assert out["metadata"] == {"labels": {"a": "1"}}
    with pytest.raises(ApiError):
        strategic_merge_patch(POD, {"spec": {"containers": [{"image": "no-name"}]}})


def test_json_patch_rfc6902() -> None:
    doc = {"a": {"b": [1, 2]}, "c": "x"}
    out = json_patch(doc, [
        {"op": "add", "path": "/a/b/-", "value": 3},
        {"op": "add", "path": "/a/b/0", "value": 0},
        {"op": "replace", "path": "/c", "value": "y"},
        {"op": "copy", "from": "/c", "path": "/d"},
        {"op": "move", "from": "/d", "path": "/e~1f"},
        {"op": "remove", "path": "/a/b/1"},
        {"op": "test", "path": "/c", "value": "y"},
    ])
    assert out == {"a": {"b": [0, 2, 3]}, "c": "y", "e/f": "y"}
    assert doc == {"a": {"b": [1, 2]}, "c": "x"}
    bad_patches: list[tuple[object, int]] = [
        ([{"op": "remove", "path": "/nope"}], 422), ([{"op": "test", "path": "/c", "value": 1}], 422),
        ([{"op": "jump", "path": "/c"}], 400), ({"op": "add"}, 400), ([{"op": "add", "path": "c", "value": 1}], 400),
    ]
    for bad, code in bad_patches:
        with pytest.raises(ApiError) as err:
            json_patch(doc, bad)
        assert err.value.code == code
