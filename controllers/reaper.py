"""The orphan reaper: a reconcile loop that deletes what crashed agent orchestrators left behind.

Handlers are thin: each pass is :func:`connectors.kube.agents.reap_once` (read pods and Leases,
:mod:`core.orphans` decides, re-verify, guarded delete) and the decisions go to
``agents.reaper_audit``. The loop is timer-driven because a Lease expiring is the *absence* of an
event; a pod watch only wakes it early when pods disappear (a deleted parent orphans its children
now, not at the next tick). A pass that fails (API down, database down) is logged and retried at
the next tick: nothing was deleted on partial information, since a pass reads everything before
it acts.

Repeated skips (the same pod invalid for the same reason every second) are audited once per
reaper process, not once per pass; deletions, failures and deferrals are always written.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

import psycopg
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from connectors.kube.agents import Clock, PassReport, reap_once, utcnow
from connectors.kube.watch import ListWatch
from connectors.warehouse import Warehouse, copy_rows
from controllers.health import Heartbeat
from core.orphans import AUDIT_COLUMNS, AUDIT_TABLE, Action, Decision, OrphanPolicy, RootState, audit_rows

log = logging.getLogger("gpufabric.reaper")


def write_audit(warehouse: Warehouse, decisions: list[Decision], *, pass_id: str, controller: str,
                dry_run: bool) -> int:
    """COPY the decisions of one pass into ``agents.reaper_audit`` (one transaction)."""
    if not decisions:
        return 0
    rows = audit_rows(decisions, pass_id=pass_id, controller=controller, dry_run=dry_run)
    with warehouse.connect() as conn, conn.transaction():
        return copy_rows(conn, AUDIT_TABLE, AUDIT_COLUMNS, rows)


@dataclass
class Reaper:
    """The loop. ``clock`` is injectable so tests and the replay judge Leases on one time line."""

    api: client.ApiClient
    warehouse: Warehouse
    policy: OrphanPolicy
    dry_run: bool = True
    period_s: float = 5.0
    roots: Callable[[], Mapping[str, RootState]] | None = None
    clock: Clock = utcnow
    namespace: str | None = None
    controller: str = "reaper"
    passes: int = 0
    errors: int = 0
    last_error: str = ""
    watcher: ListWatch | None = None  # the pod watch while :meth:`run` runs (its stats show re-lists)
    heartbeat: Heartbeat | None = None  # ticked once per pass of :meth:`run` (controllers/health.py)
    _audited: set[tuple[str, str, str]] = field(default_factory=set)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run_pass(self) -> PassReport | None:
        """One pass; None when it could not run (the error is logged and counted)."""
        try:
            report = reap_once(self.api, self.policy, roots=self.roots, dry_run=self.dry_run, clock=self.clock,
                               namespace=self.namespace)
        except (ApiException, OSError, ValueError, urllib3.exceptions.HTTPError, psycopg.Error) as exc:
            # API unreachable (urllib3 gives up with MaxRetryError, not an OSError), a 5xx, the
            # budget ledger's database down: nothing was deleted, since a pass reads before it acts.
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"[:500]
            log.warning("reaper pass failed, retrying next tick: %s", self.last_error)
            return None
        self.passes += 1
        fresh = [d for d in report.decisions if self._new(d)]
        try:
            write_audit(self.warehouse, fresh, pass_id=report.pass_id, controller=self.controller,
                        dry_run=self.dry_run)
        except Exception as exc:  # the audit must not stop the loop; the deletions already happened
            self.errors += 1
            self.last_error = f"audit write failed: {type(exc).__name__}: {exc}"[:500]
            log.error("%s", self.last_error)
            for d in fresh:  # write these again next pass rather than lose them silently
                self._audited.discard(self._key(d))
        deleted = report.count(Action.DELETED)
        if deleted or report.refused:
            log.info("pass %s: %d deleted, %d would delete, %d deferred, %d failed%s", report.pass_id, deleted,
                     report.count(Action.WOULD_DELETE), report.count(Action.DEFERRED),
                     report.count(Action.FAILED), f"; {report.refused}" if report.refused else "")
        return report

    @staticmethod
    def _key(d: Decision) -> tuple[str, str, str]:
        return d.finding.pod.uid, str(d.action), d.reason

    def _new(self, d: Decision) -> bool:
        if d.action not in (Action.SKIPPED, Action.REFUSED, Action.WOULD_DELETE):
            return True
        key = self._key(d)
        if key in self._audited:
            return False
        self._audited.add(key)
        return True

    def run(self, *, until: Callable[[], bool] | None = None, watch_pods: bool = True) -> None:
        """Pass every ``period_s`` (or sooner when a pod is deleted) until :meth:`stop` or ``until()``."""
        watcher = self.watcher = self._deletions().start() if watch_pods else None
        try:
            while not self._stop.is_set() and not (until is not None and until()):
                started: datetime = self.clock()
                report = self.run_pass()
                if self.heartbeat is not None:
                    self.heartbeat.tick(ok=report is not None)
                elapsed = (self.clock() - started).total_seconds()
                self._wake.wait(max(0.0, self.period_s - elapsed))
                self._wake.clear()
        finally:
            self._stop.set()
            if watcher is not None:
                watcher.stop(timeout_s=3)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _deletions(self) -> ListWatch:
        """A reflector on managed pods that wakes the loop when one goes. It lists once, then
        watches from the list's resourceVersion, resumes where a watch ended and re-lists only
        after a 410 or a failure (``connectors.kube.watch``): a watch restarted without a
        resourceVersion would replay every pod as ADDED each time. A pod that went while the
        watch was down shows as a smaller re-list, and wakes the loop too."""
        core = client.CoreV1Api(self.api)
        selector = f"{self.policy.prefix}/agent-id"
        if self.namespace is None:
            list_call = partial(core.list_pod_for_all_namespaces, label_selector=selector)
        else:
            list_call = partial(core.list_namespaced_pod, self.namespace, label_selector=selector)
        known = [0]

        def changed() -> None:
            count = len(watcher.snapshot())
            if count < known[0]:
                self._wake.set()
            known[0] = count

        watcher = ListWatch(list_call, name="reaper-pods", on_change=changed, transform=_identity_only)
        return watcher


def _identity_only(pod: dict[str, Any]) -> dict[str, Any]:
    """All the wake-up needs of a pod: which one it is (a pod's spec and status are kilobytes)."""
    meta = pod.get("metadata") or {}
    return {"metadata": {k: meta.get(k) for k in ("namespace", "name", "uid", "resourceVersion")}}
