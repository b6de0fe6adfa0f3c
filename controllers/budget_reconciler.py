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
precondition (and the patches name the uid too: a pod re-created under the same name since the
list is refused, not stopped). ``alert_only`` writes an ``alert`` row and touches nothing.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3HTTPError

from connectors.warehouse.ledger import audit, read_tree, set_state, sync_tree_usage
from controllers.health import Heartbeat
from core.budget import BudgetConfig, LivePod, PodPhase, Step, enforcement_plan

log = logging.getLogger("gpufabric.budget")


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
    dry_run: bool = False,
    audited: set[tuple[str, str, str]] | None = None,
) -> PassResult:
    """One pass over every open or over-budget tree. ``pod_created`` overrides a pod's creation
    time (the replay's simulated clock; the twin stamps wall-clock time).

    ``dry_run``: plan as if enforcing, change nothing (no pod, no tree state) and audit each step
    the plan holds as an ``alert`` row reading "dry run: would <step>". ``audited``: a set kept by
    a long-running loop; alert and dry-run rows already written for the same (root, pod, step)
    are not written again, so a tree that stays over its envelope does not add a row per pass."""
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
        items = json.loads(raw.data).get("items", [])  # type: ignore[attr-defined,unused-ignore]  # raw urllib3 response
        pods = [p for p in (_live_pod(o, config) for o in items) if p is not None]
        if pod_created is not None:
            pods = [
                LivePod(p.namespace, p.name, p.uid, p.agent_id, p.parent_id, p.depth, p.phase, pod_created(p), p.gated)
                for p in pods
            ]
        alert_only = config.alert_only and not dry_run  # a dry run shows the plan enforcement would run
        actions = enforcement_plan(tree, pods, now, alert_only=alert_only, deadline_s=deadline_s)
        if not actions:
            if audited:  # back within its envelope (settlement can lower it): alert again if it crosses again
                audited.difference_update({k for k in audited if k[0] == root})
            continue
        result.trees_over.append(root)
        with conn.transaction():
            if not (config.alert_only or dry_run):
                set_state(conn, root, "over_budget", now)
            for a in actions:
                if dry_run:
                    outcome, action, reason = "dry_run", Step.ALERT.value, f"dry run: would {a.step.value}: {a.reason}"
                else:
                    outcome = _execute(core, a.step, a.pod, config, deadline_s)
                    action = a.step.value if outcome == "ok" else "failed"
                    reason = a.reason if outcome == "ok" else f"{a.reason}; {outcome}"
                result.actions.append((a.step.value, a.pod.name, outcome))
                if audited is not None and action == Step.ALERT.value:
                    key = (root, a.pod.name, a.step.value)
                    if key in audited:
                        continue
                    audited.add(key)
                audit(
                    conn,
                    at=now,
                    controller=controller,
                    action=action,
                    root_id=root,
                    namespace=a.pod.namespace,
                    pod=a.pod.name,
                    reason=reason,
                    alert_only=config.alert_only or dry_run,
                )
    return result


def _execute(core: client.CoreV1Api, step: Step, pod: LivePod, config: BudgetConfig, deadline_s: int) -> str:
    """Each step names the pod's uid: a pod deleted and re-created under the same name since the
    list is not the one the plan is about. A delete's uid precondition is answered 409; a patch
    carrying another uid than the pod's is refused too (422: the uid is immutable)."""
    try:
        if step is Step.GATE:
            core.patch_namespaced_pod(
                pod.name, pod.namespace,
                {"metadata": {"uid": pod.uid, "annotations": {config.key("suspended"): "true"}}},
            )
        elif step is Step.DEADLINE:
            core.patch_namespaced_pod(
                pod.name, pod.namespace, {"metadata": {"uid": pod.uid}, "spec": {"activeDeadlineSeconds": deadline_s}}
            )
        elif step is Step.DELETE:
            core.delete_namespaced_pod(
                pod.name, pod.namespace, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=pod.uid))
            )
        return "ok"
    except ApiException as err:
        return f"kubernetes answered {err.status} {err.reason}"


@dataclass
class BudgetReconciler:
    """The enforcement loop: :func:`reconcile_once` every ``period_s`` until :meth:`stop`.

    Dry run by default, like the orphan reaper: it plans and audits but changes nothing until
    started with ``dry_run=False``. A pass that fails (API or database down) is logged and the
    next tick retries; nothing is half-done, since a tree's steps and its audit rows commit
    together. The database connection is reopened when it breaks."""

    api: client.ApiClient
    database_url: str
    config: BudgetConfig
    dry_run: bool = True
    period_s: float = 10.0
    deadline_s: int = 30
    controller: str = "reconciler"
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    passes: int = 0
    errors: int = 0
    last_error: str = ""
    heartbeat: Heartbeat | None = None  # ticked once per pass of :meth:`run` (controllers/health.py)
    _conn: psycopg.Connection | None = None
    _audited: set[tuple[str, str, str]] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self.database_url, autocommit=True)
        return self._conn

    def run_pass(self) -> PassResult | None:
        """One pass; None when it could not run (logged and counted)."""
        try:
            result = reconcile_once(
                self.api,
                self._connection(),
                self.config,
                self.clock(),
                controller=self.controller,
                deadline_s=self.deadline_s,
                dry_run=self.dry_run,
                audited=self._audited,
            )
        except (ApiException, psycopg.Error, OSError, ValueError, Urllib3HTTPError) as exc:
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"[:500]
            log.warning("budget pass failed, retrying next tick: %s", self.last_error)
            return None
        self.passes += 1
        if result.trees_over:
            log.info(
                "pass %d: %d trees over their envelope, %d steps%s",
                self.passes,
                len(result.trees_over),
                len(result.actions),
                " (dry run)" if self.dry_run else "",
            )
        return result

    def run(self, *, until: Callable[[], bool] | None = None) -> None:
        try:
            while not self._stop.is_set() and not (until is not None and until()):
                started = time.monotonic()
                result = self.run_pass()
                if self.heartbeat is not None:
                    self.heartbeat.tick(ok=result is not None)
                self._stop.wait(max(0.0, self.period_s - (time.monotonic() - started)))
        finally:
            if self._conn is not None:
                self._conn.close()

    def stop(self) -> None:
        self._stop.set()
