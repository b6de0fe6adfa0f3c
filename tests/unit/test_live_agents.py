"""The demo's live agent trees (simulator/agents/live.py): read back by the production parsers."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from connectors.kube.pods import parse_pods
from core.budget import BudgetConfig, Envelope, PodRequest, parse_pod
from core.finops.labels import UNATTRIBUTED
from simulator.agents.live import CHILD_RUN_S, ROOT_RUN_S, plan_trees
from simulator.controlplane.nodes import RUN_SECONDS_ANNOTATION

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
ENVELOPE = Envelope(gpu_hours=Decimal(200), cost_usd=Decimal(600), max_live_pods=250, max_depth=3, max_fan_out=60)


def _manifests(namespaces: list[str], trees: int = 6) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for n, pod in enumerate(plan_trees(namespaces, trees=trees)):
        body = pod.manifest("gpufabric.io", expires_at=NOW)
        # What the API server adds: a uid, and (once scheduled and running) a node and a start time.
        body["metadata"]["uid"] = f"uid-{n}"
        body["spec"]["nodeName"] = "dgx001"
        body["status"] = {"phase": "Running", "startTime": "2026-12-03T11:59:00Z"}
        out.append(body)
    return out


def test_every_pod_parses_with_its_ancestry_and_attribution() -> None:
    pods = plan_trees(["research", "inference"], trees=6)
    parsed = parse_pods(_manifests(["research", "inference"]), cluster="sim", collected_at=NOW)
    assert not parsed.quarantined and len(parsed.records) == len(pods)
    for pod, record in zip(pods, parsed.records, strict=True):
        assert record.name == pod.name and record.namespace == pod.namespace and record.gpus == pod.gpus
        assert record.attribution.root_id == pod.root_id
        assert record.attribution.parent_id == (pod.parent_id or UNATTRIBUTED)
        assert (record.attribution.client, record.attribution.tier) == (pod.client, pod.tier)
        assert record.attribution.depth == pod.depth and record.attribution.agent_type == pod.agent_type
        assert not record.issues


def test_trees_are_well_formed_and_spread_over_the_namespaces() -> None:
    pods = plan_trees(["research", "inference"], trees=6)
    by_id = {p.agent_id: p for p in pods}
    roots = [p for p in pods if p.parent_id is None]
    assert len(roots) == 6 and all(r.root_id == r.agent_id and r.depth == 0 for r in roots)
    for pod in pods:
        if pod.parent_id is not None:
            parent = by_id[pod.parent_id]  # a parent is created before its children
            assert pods.index(parent) < pods.index(pod)
            assert pod.depth == parent.depth + 1 and pod.root_id == parent.root_id
            assert pod.namespace == parent.namespace and pod.client == parent.client
            assert CHILD_RUN_S[0] <= pod.run_s <= CHILD_RUN_S[1]
        else:
            assert pod.run_s == ROOT_RUN_S
    assert Counter(r.namespace for r in roots) == {"research": 3, "inference": 3}
    assert len({p.name for p in pods}) == len(pods)  # unique within a namespace, and across
    assert plan_trees(["research", "inference"], trees=6) == pods  # deterministic for a seed


def test_the_budget_webhook_would_admit_them_as_governed_agents() -> None:
    config = BudgetConfig(defaults={"*": ENVELOPE}, rates_usd_per_gpu_hour={"*": Decimal(3)})
    for body in _manifests(["agents"]):
        request = parse_pod(body, "agents", config)
        assert isinstance(request, PodRequest), request
        assert not request.unlabeled and request.gpu_units == Decimal(body["spec"]["containers"][0]["resources"]
                                                                     ["requests"]["nvidia.com/gpu"])  # fmt: skip
        assert float(body["metadata"]["annotations"][RUN_SECONDS_ANNOTATION]) > 0


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="no namespace"):
        plan_trees([])
    with pytest.raises(ValueError, match="trees must be at least 1"):
        plan_trees(["research"], trees=0)
