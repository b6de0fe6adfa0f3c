"""Admission policy on arbitrary input: any JSON either evaluates or raises BadWorkload with a
field name, never another exception (the webhook's "never a 500" rests on this)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.publish.admission import BadWorkload, TopologyIndex, evaluate

INDEX = TopologyIndex.from_nodes(
    ["fabric.gpufabric.io/block", "kubernetes.io/hostname"],
    [({"fabric.gpufabric.io/block": f"b{i // 4}", "kubernetes.io/hostname": f"n{i}"}, 8) for i in range(16)],
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 100) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
KEYS = st.sampled_from(["spec", "metadata", "template", "parallelism", "replicatedJobs", "replicas", "containers",
                        "resources", "limits", "nvidia.com/gpu", "annotations",
                        "kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-slice-size"])  # fmt: skip
shaped = st.recursive(json_values, lambda inner: st.dictionaries(KEYS, inner, max_size=4), max_leaves=30)


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(["Job", "JobSet", "Pod", "Other"]), body=st.dictionaries(KEYS, shaped, max_size=4))
def test_any_object_evaluates_or_is_a_bad_workload(kind: str, body: dict[str, Any]) -> None:
    try:
        verdict = evaluate({"kind": kind, **body}, INDEX)
    except BadWorkload as exc:
        assert str(exc)
    else:
        assert verdict.allowed or verdict.message


def test_capacity_counts_whole_pods_per_node() -> None:
    job = {"kind": "Job", "spec": {"parallelism": 8, "template": {
        "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": "fabric.gpufabric.io/block"}},
        "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": 5}}}]}}}}  # fmt: skip
    verdict = evaluate(job, INDEX)
    assert not verdict.allowed
    assert verdict.message.endswith("the largest fabric.gpufabric.io/block domain (b0) has 32 GPUs on 4 nodes and "
                                    "holds 4 pods of 5 GPUs")  # fmt: skip
