"""The burst admission controller's readers: pods and nodes as the API serves them, to the policy's
view (controllers/burst_admission.py). The loop itself runs on the real plane in
tests/integration/test_burst_admission.py."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.kube.watch import ListWatch
from controllers.burst_admission import as_gated, node_rooms, pod_requests, slim_node, slim_pod
from core.burst import GATE, HELD, BadQuantity

GPU, MIG = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"


def node(name: str, allocatable: dict[str, Any], *, ready: str = "True", unschedulable: bool = False,
         taints: list[dict[str, str]] | None = None) -> dict[str, Any]:  # fmt: skip
    return {"metadata": {"name": name, "labels": {"pool": "h100"}, "managedFields": [{"big": "x" * 100}]},
            "spec": {"unschedulable": unschedulable, "taints": taints or []},
            "status": {"allocatable": {"cpu": "64", **allocatable}, "images": [{"names": ["x"]}],
                       "conditions": [{"type": "MemoryPressure", "status": "False"},
                                      {"type": "Ready", "status": ready}]}}  # fmt: skip


def pod(name: str, requests: dict[str, Any], *, node_name: str | None = None, phase: str = "Pending",
        gated: bool = False, init: dict[str, Any] | None = None, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {"containers": [{"name": "a", "resources": {"requests": requests}},
                                           {"name": "sidecar", "resources": {}}]}  # fmt: skip
    if node_name:
        spec["nodeName"] = node_name
    if gated:
        spec["schedulingGates"] = [{"name": "other.io/gate"}, {"name": GATE}]
    if init is not None:
        spec["initContainers"] = [{"name": "init", "resources": {"requests": init}}]
    return {"metadata": {"namespace": "ns", "name": name, "uid": f"u-{name}", "labels": labels or {},
                         "annotations": annotations or {"big": "y" * 100},
                         "creationTimestamp": "2026-12-01T00:00:05Z"},
            "spec": spec, "status": {"phase": phase}}  # fmt: skip


def test_slim_objects_keep_the_key_the_watch_stores_them_by() -> None:
    # ListWatch keys its copy by metadata namespace/name: a transform that loses them would
    # collapse every node into one (it did, once).
    watch = ListWatch(lambda **_: None, name="t")
    assert watch._key(slim_node(node("a", {}))) == "a" != watch._key(slim_node(node("b", {})))
    assert watch._key(slim_pod(pod("p", {}))) == "ns/p"
    slim = slim_node(node("a", {GPU: "8"}))
    assert "managedFields" not in str(slim) and "images" not in str(slim)


def test_node_room_is_allocatable_minus_unfinished_bound_pods() -> None:
    nodes = [slim_node(n) for n in (node("a", {GPU: "8"}), node("m", {GPU: "0", MIG: "56"}),
                                    node("down", {GPU: "8"}, ready="False"),
                                    node("cordoned", {GPU: "8"}, unschedulable=True))]  # fmt: skip
    pods = [slim_pod(p) for p in (pod("t", {GPU: "4"}, node_name="a", phase="Running"),
                                  pod("done", {GPU: "4"}, node_name="a", phase="Succeeded"),
                                  pod("s", {MIG: "2"}, node_name="m"),
                                  pod("init", {GPU: "1"}, node_name="a", init={GPU: "3"}),
                                  pod("unbound", {GPU: "8"}))]  # fmt: skip
    rooms = {r.name: dict(r.free) for r in node_rooms(nodes, pods)}
    assert rooms == {"a": {GPU: 1}, "m": {GPU: 0, MIG: 54}}  # 8 - 4 - max(1, 3); cpu is not counted


def test_a_malformed_allocatable_is_no_room() -> None:
    rooms = node_rooms([slim_node(node("bad", {GPU: "8.5", MIG: "3"}))], [])
    assert [dict(r.free) for r in rooms] == [{MIG: 3}]


def test_taints_that_repel_are_kept_and_others_dropped() -> None:
    (room,) = node_rooms([slim_node(node("t", {GPU: "1"}, taints=[
        {"key": "gpu", "value": "true", "effect": "NoSchedule"},
        {"key": "soft", "effect": "PreferNoSchedule"}]))], [])  # fmt: skip
    assert room.taints == (("gpu", "true", "NoSchedule"),)


def test_pod_requests_sum_containers_and_take_the_larger_init() -> None:
    assert pod_requests(slim_pod(pod("p", {GPU: "1", "cpu": "2"}, init={GPU: "2"}))) == {GPU: 2}
    assert pod_requests(slim_pod(pod("p", {MIG: "1"}, init={MIG: "1"}))) == {MIG: 1}
    with pytest.raises(BadQuantity, match="'half' is not a whole number of devices"):
        pod_requests(slim_pod(pod("p", {GPU: "half"})))


def test_as_gated_reads_ancestry_and_the_held_reason() -> None:
    labels = {"gpufabric.io/agent-id": "c1", "gpufabric.io/root-id": "r", "gpufabric.io/parent-id": "r",
              "gpufabric.io/depth": "x", "gpufabric.io/tier": "interactive"}  # fmt: skip
    view = as_gated(slim_pod(pod("c1", {MIG: "1"}, gated=True, labels=labels, annotations={HELD: "over-envelope: x"})),
                    "gpufabric.io")  # fmt: skip
    assert (view.agent_id, view.root_id, view.parent_id, view.depth, view.tier) == ("c1", "r", "r", 0, "interactive")
    assert view.requests == {MIG: 1} and view.held == "over-envelope: x"
    bare = as_gated(slim_pod(pod("lone", {})), "gpufabric.io")  # no labels: its own one-pod tree
    assert (bare.agent_id, bare.root_id, bare.parent_id, bare.tier) == ("lone", "lone", None, "")
