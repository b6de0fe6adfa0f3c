"""Label/field selector parsing and matching, and label syntax checks (simulator/kube/selectors.py)."""

from __future__ import annotations

import pytest

from simulator.kube.errors import ApiError
from simulator.kube.selectors import (
    label_key_error,
    label_value_error,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)

LABELS = {"app": "web", "tier": "front", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app!=web", False),
        ("missing!=x", True),  # != matches objects without the label, as upstream
        ("app in (web, api)", True),
        ("app notin (web)", False),
        ("missing notin (x)", True),
        ("app", True),
        ("!app", False),
        ("!missing", True),
        ("app=web,tier in (front,back),!missing", True),
        ("app=web,tier=back", False),
        ("nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3", True),
        ("app=", False),
    ],
)
def test_label_selector_semantics(selector: str, expected: bool) -> None:
    assert labels_match(parse_label_selector(selector), LABELS) is expected


@pytest.mark.parametrize("selector", ["a in (b", "a=b=c", "a in b", "-bad=x", "a=" + "x" * 64, "a b"])
def test_bad_label_selectors_are_400(selector: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_label_selector(selector)
    assert err.value.code == 400 and err.value.reason == "BadRequest"


PREFIX_ERROR = "prefix part must be a lowercase RFC 1123 subdomain of at most 253 characters"
NAME_ERROR = (
    "name part must consist of at most 63 alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character"
)
VALUE_ERROR = (
    "a valid label must be an empty string or consist of at most 63 alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)


def test_label_syntax() -> None:
    assert label_key_error("fabric.gpufabric.io/block") is None
    assert label_key_error("kubernetes.io/hostname") is None and label_key_error("app") is None
    assert label_key_error("Fabric.io/x") == PREFIX_ERROR  # prefix must be lower case
    assert label_key_error("a" * 254 + "/x") == PREFIX_ERROR
    assert label_key_error("a/" + "b" * 63) is None and label_key_error("a/" + "b" * 64) == NAME_ERROR
    assert label_key_error("a/") == NAME_ERROR and label_key_error("-a") == NAME_ERROR
    assert label_value_error("") is None
    assert label_value_error("B200 (GB200 NVL72)") == VALUE_ERROR
    assert label_value_error("a-") == VALUE_ERROR
    assert label_value_error("x" * 63) is None and label_value_error("x" * 64) == VALUE_ERROR


def test_field_selectors() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "unschedulable": False},
           "status": {"phase": "Running"}}
    assert parse_field_selector("spec.nodeName=n1")(pod)
    assert parse_field_selector("spec.nodeName==n1,metadata.name=p")(pod)
    assert not parse_field_selector("status.phase!=Running")(pod)
    assert parse_field_selector("spec.unschedulable=false")(pod)
    assert parse_field_selector("spec.missing=")(pod)
    with pytest.raises(ApiError):
        parse_field_selector("spec.nodeName")
