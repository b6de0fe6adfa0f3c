"""Budget enforcement loop: stop trees whose actual spend crossed their envelope.

Admission caps what is *reserved*; late telemetry or wrong estimates can still push a tree's
measured usage (``agents.tree_usage`` → ``envelopes.observed_*``) or its live pod count past the
envelope. One pass: copy tree usage onto envelopes, and for each tree over its envelope ask
:func:`core.budget.enforcement_plan` what to do, do it, and write every step to
``agents.budget_audit``. The tree is marked ``over_budget`` so admission denies new pods too.

Steps as executed: *gate* = annotate ``<p>/suspended: "true"`` (Kubernetes only lets scheduling
gates be removed after creation, never added, so the agent runtime's suspend convention — the
one the orphan reaper already reads — stands in); *deadline* = set ``activeDeadlineSeconds``
(upstream allows lowering it on a running pod); *delete* = delete with the pod's uid as a
precondition. ``alert_only`` writes an ``alert`` row and touches nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from connectors.warehouse.ledger import audit, read_tree, set_state, sync_tree_usage
from core.budget import BudgetConfig, LivePod, PodPhase, Step, enforcement_plan


def _live_pod(obj: Mapping[str, Any], config: BudgetConfig) -> LivePod | None:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    labels = meta.get("labels") or {}
    phase = status.get("phase") or "Pending"
    if phase in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
        return None
    agent = labels.get(config.key("agent-id"))
    if not agent:
        return None
    try:
        depth = int(labels.get(config.key("depth"), "0"))
    except ValueError:
        depth = 0
    created = meta.get("creationTimestamp")
    when = datetime.fromisoformat(str(created).replace("Z", "+00:00")) if created else datetime.now(UTC)
    suspended = (meta.get("annotations") or {}).get(config.key("suspended")) == "true"
    return LivePod(
        str(meta.get("namespace")),
        str(meta.get("name")),
        str(meta.get("uid", "")),
        agent,
        labels.get(config.key("parent-id")) or None,
        depth,
        PodPhase.RUNNING if phase == "Running" else PodPhase.GATED if spec.get("schedulingGates") else PodPhase.PENDING,
        when,
        gated=suspended or bool(spec.get("schedulingGates")),
    )


@dataclass
class PassResult:
    trees_over: list[str] = field(default_factory=list)
    actions: list[tuple[str, str, str]] = field(default_factory=list)  # (step, pod, outcome)


def reconcile_once(
    api: client.ApiClient,
    conn: psycopg.Connection,
    config: BudgetConfig,
    now: datetime,
    *,
    controller: str = "reconciler",
    deadline_s: int = 30,
    pod_created: Callable[[LivePod], datetime] | None = None,
    roots: Sequence[str] | None = None,
) -> PassResult:
    """One pass over every open or over-budget tree. ``pod_created`` overrides a pod's creation
    time (the replay's simulated clock; the twin stamps wall-clock time)."""
    core = client.CoreV1Api(api)
    sync_tree_usage(conn, now)
    if roots is None:
        roots = [
            r[0] for r in conn.execute("SELECT root_id FROM agents.envelopes WHERE state <> 'closed' ORDER BY root_id")
        ]
    result = PassResult()
    for root in roots:
        tree, _ = read_tree(conn, root)
        if tree is None:
            continue
        # Raw JSON: the enforcement plan needs spec/status fields as served, not model objects.
        raw = core.list_namespaced_pod(
            tree.namespace, label_selector=f"{config.key('root-id')}={root}", _preload_content=False
        )
        items = json.loads(raw.data).get("items", [])  # type: ignore[attr-defined]  # raw urllib3 response
        pods = [p for p in (_live_pod(o, config) for o in items) if p is not None]
        if pod_created is not None:
            pods = [
                LivePod(p.namespace, p.name, p.uid, p.agent_id, p.parent_id, p.depth, p.phase, pod_created(p), p.gated)
                for p in pods
            ]
        actions = enforcement_plan(tree, pods, now, alert_only=config.alert_only, deadline_s=deadline_s)
        if not actions:
            continue
        result.trees_over.append(root)
        with conn.transaction():
            if not config.alert_only:
                set_state(conn, root, "over_budget", now)
            for a in actions:
                outcome = _execute(core, a.step, a.pod, config, deadline_s)
                action = a.step.value if outcome == "ok" else "failed"
                audit(
                    conn,
                    at=now,
                    controller=controller,
                    action=action,
                    root_id=root,
                    namespace=a.pod.namespace,
                    pod=a.pod.name,
                    reason=a.reason if outcome == "ok" else f"{a.reason}; {outcome}",
                    alert_only=config.alert_only,
                )
                result.actions.append((a.step.value, a.pod.name, outcome))
    return result


def _execute(core: client.CoreV1Api, step: Step, pod: LivePod, config: BudgetConfig, deadline_s: int) -> str:
    try:
        if step is Step.GATE:
            core.patch_namespaced_pod(
                pod.name, pod.namespace, {"metadata": {"annotations": {config.key("suspended"): "true"}}}
            )
        elif step is Step.DEADLINE:
            core.patch_namespaced_pod(pod.name, pod.namespace, {"spec": {"activeDeadlineSeconds": deadline_s}})
        elif step is Step.DELETE:
            core.delete_namespaced_pod(
                pod.name, pod.namespace, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=pod.uid))
            )
        return "ok"
    except ApiException as err:
        return f"kubernetes answered {err.status} {err.reason}"
