"""Admission policy on arbitrary input: any JSON either evaluates or raises BadWorkload with a
field name, never another exception (the webhook's "never a 500" rests on this)."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.publish.admission import BadWorkload, TopologyIndex, Verdict, evaluate

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
FIELD_FIRST = re.compile(r"^\.?(spec|metadata)(\.[\w/.-]+|\[\d+\])*:? ")
shaped = st.recursive(json_values, lambda inner: st.dictionaries(KEYS, inner, max_size=4), max_leaves=30)


# Near-valid workloads: the real nesting of a Pod, Job and JobSet with any value at the leaves, so
# the fuzzing reaches denials and the bad-field messages deep inside, not only "spec must be an object".
_odd = json_values | st.integers(0, 64)
_limits = st.dictionaries(st.sampled_from(["nvidia.com/gpu", "cpu"]), _odd, max_size=2)
_container = st.fixed_dictionaries({"resources": st.fixed_dictionaries({"limits": _limits}) | json_values})
_pod_spec = st.fixed_dictionaries({"containers": st.lists(_container | json_values, max_size=3) | json_values})
_annotations = st.dictionaries(
    st.sampled_from(["kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology",
                     "kueue.x-k8s.io/podset-slice-size", "kueue.x-k8s.io/podset-slice-required-topology"]),
    st.sampled_from(["fabric.gpufabric.io/block", "kubernetes.io/hostname", "no/such-level", "2"]) | json_values,
    max_size=2,
)  # fmt: skip
_meta = st.fixed_dictionaries({"annotations": _annotations | json_values})
_template = st.fixed_dictionaries({"metadata": _meta, "spec": _pod_spec | json_values})
_job_spec = st.fixed_dictionaries({"parallelism": _odd, "template": _template | json_values})
_workloads = st.one_of(
    st.fixed_dictionaries({"kind": st.just("Pod"), "metadata": _meta, "spec": _pod_spec}),
    st.fixed_dictionaries({"kind": st.just("Job"), "spec": _job_spec}),
    st.fixed_dictionaries({"kind": st.just("JobSet"), "spec": st.fixed_dictionaries({"replicatedJobs": st.lists(
        st.fixed_dictionaries({"name": st.text(max_size=4), "replicas": _odd,
                               "template": st.fixed_dictionaries({"spec": _job_spec})}) | json_values,
        max_size=3) | json_values})}),
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(["Job", "JobSet", "Pod", "Other"]), body=st.dictionaries(KEYS, shaped, max_size=4))
def test_any_object_evaluates_or_is_a_bad_workload(kind: str, body: dict[str, Any]) -> None:
    _evaluates_or_names_the_field({"kind": kind, **body})


@settings(max_examples=300, deadline=None)
@given(_workloads)
def test_near_valid_workloads_evaluate_or_name_the_field(obj: dict[str, Any]) -> None:
    _evaluates_or_names_the_field(obj)


def _evaluates_or_names_the_field(obj: dict[str, Any]) -> None:
    kind = obj["kind"]
    try:
        verdict = evaluate(obj, INDEX)
    except BadWorkload as exc:
        # the message starts with the path of the field at fault (a Pod's paths start at the
        # object, so with a dot), then says what is wrong with it
        assert FIELD_FIRST.match(str(exc)), str(exc)
        if kind == "Other":  # kinds we do not check fail only on a spec that is no object
            assert str(exc) == "spec must be an object"
    else:
        assert verdict.allowed or verdict.message  # a denial always says why
        if kind == "Other":
            assert verdict == Verdict(True)


def test_capacity_counts_whole_pods_per_node() -> None:
    job = {"kind": "Job", "spec": {"parallelism": 8, "template": {
        "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": "fabric.gpufabric.io/block"}},
        "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": 5}}}]}}}}  # fmt: skip
    verdict = evaluate(job, INDEX)
    assert not verdict.allowed
    assert verdict.message.endswith("the largest fabric.gpufabric.io/block domain (b0) has 32 GPUs on 4 nodes and "
                                    "holds 4 pods of 5 GPUs")  # fmt: skip
