"""Agent orchestrators on Kubernetes: spawn children with liveness signals set, heartbeat a Lease,
and the cluster side of the orphan reaper (read pods and Leases, re-verify, guarded delete).

Orchestrators use :class:`Orchestrator`: every child it spawns carries the ancestry labels
(``<p>/agent-id``, ``root-id``, ``parent-id``, ``depth`` and the attribution labels), the
absolute ``<p>/expires-at`` annotation, and the orchestrator renews ``Lease agent-<agent id>`` in
its namespace. The reaper's pass (:func:`reap_once`) lives here rather than in ``controllers/``
because the controller, the Dagster sensor and the CLI all run it, and assets may not import
controllers; the rule itself is :mod:`core.orphans`.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from connectors.kube.client import apply
from core.orphans import (
    ORCHESTRATOR,
    Decision,
    Finding,
    LeaseInfo,
    OrphanPolicy,
    PodInfo,
    RootState,
    Rule,
    classify,
    execute_plan,
    format_time,
    lease_name,
    parse_time,
    plan,
    root_states_from_pods,
)

Clock = Callable[[], datetime]
PAGE = 500


def utcnow() -> datetime:
    return datetime.now(UTC)


# -- spawning -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spawn:
    """What a new agent pod is: attribution, TTL, GPUs, and whether it starts gated or suspended."""

    agent_type: str = "worker"
    ttl_s: float = 3600.0
    gpus: int = 0
    client_name: str = ""
    task: str = ""
    tier: str = ""
    gated: bool = False  # a scheduling gate, as Kueue sets before admission
    suspended: bool = False
    image: str = "busybox"
    agent_id: str | None = None  # default: a fresh uuid-based id
    name: str | None = None  # pod name; default: "agent-<agent id>"
    node_selector: Mapping[str, str] | None = None  # a node pool (e.g. CPU-only nodes) to run on


def agent_pod_manifest(
    spawn: Spawn, *, namespace: str, agent_id: str, root_id: str, parent_id: str | None, depth: int,
    now: datetime, prefix: str = "gpufabric.io",
) -> dict[str, Any]:
    """The pod for one agent; labels and annotations are the liveness contract (core.orphans)."""
    labels = {
        f"{prefix}/agent-id": agent_id,
        f"{prefix}/root-id": root_id,
        f"{prefix}/depth": str(depth),
        f"{prefix}/agent-type": spawn.agent_type,
    }
    if parent_id is not None:
        labels[f"{prefix}/parent-id"] = parent_id
    for key, value in (("client", spawn.client_name), ("task", spawn.task), ("tier", spawn.tier)):
        if value:
            labels[f"{prefix}/{key}"] = value
    annotations = {f"{prefix}/expires-at": format_time(now + timedelta(seconds=spawn.ttl_s))}
    if spawn.suspended:
        annotations[f"{prefix}/suspended"] = "true"
    container: dict[str, Any] = {"name": "agent", "image": spawn.image}
    if spawn.gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(spawn.gpus)}}
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never"}
    if spawn.node_selector:
        spec["nodeSelector"] = dict(spawn.node_selector)
    if spawn.gated:
        spec["schedulingGates"] = [{"name": f"{prefix}/admission"}]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": spawn.name or f"agent-{agent_id}", "namespace": namespace,
                     "labels": labels, "annotations": annotations},
        "spec": spec,
    }


def new_agent_id() -> str:
    return uuid.uuid4().hex[:16]


class Orchestrator:
    """One orchestrator's handle: its Lease heartbeat and the children it spawns.

    ``holder`` is the pod name of the process holding the identity now; a restarted orchestrator
    that constructs an ``Orchestrator`` with the same ``agent_id`` and renews re-adopts every child
    (the reaper sees the same Lease renewed and leaves the tree alone).
    """

    def __init__(
        self, api: client.ApiClient, *, namespace: str, agent_id: str, root_id: str | None = None,
        parent_id: str | None = None, depth: int = 0, holder: str | None = None, lease_duration_s: int = 15,
        prefix: str = "gpufabric.io", clock: Clock = utcnow,
    ) -> None:
        if (parent_id is None) != (depth == 0):
            raise ValueError("a root orchestrator has depth 0 and no parent; a child has both")
        self.api, self.namespace, self.agent_id = api, namespace, agent_id
        self.root_id = root_id or agent_id
        self.parent_id, self.depth, self.prefix, self.clock = parent_id, depth, prefix, clock
        self.holder = holder or f"agent-{agent_id}"
        self.lease_duration_s = lease_duration_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def lease_manifest(self) -> dict[str, Any]:
        now = format_time(self.clock())
        return {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": lease_name(self.agent_id), "namespace": self.namespace,
                         "labels": {f"{self.prefix}/agent-id": self.agent_id, f"{self.prefix}/root-id": self.root_id}},
            "spec": {"holderIdentity": self.holder, "leaseDurationSeconds": self.lease_duration_s,
                     "renewTime": now, "acquireTime": now},
        }

    def renew(self) -> None:
        """Create or renew the Lease (server-side apply: one call, no read-modify-write race)."""
        manifest = self.lease_manifest()
        manifest["spec"].pop("acquireTime")  # acquireTime stays as first applied
        apply(self.api, manifest, field_manager=f"gpufabric-agent-{self.agent_id}", force=True)

    def register(self, spawn: Spawn | None = None) -> dict[str, Any]:
        """Create this orchestrator's own pod (roots only need this; children are spawned by parents)."""
        manifest = agent_pod_manifest(
            spawn or Spawn(agent_type=ORCHESTRATOR), namespace=self.namespace, agent_id=self.agent_id,
            root_id=self.root_id, parent_id=self.parent_id, depth=self.depth, now=self.clock(), prefix=self.prefix)
        manifest["metadata"]["name"] = self.holder
        self.renew()
        return self._create(manifest)

    def spawn(self, spawn: Spawn) -> dict[str, Any]:
        """Create a child pod of this orchestrator, in its namespace (never across namespaces)."""
        child_id = spawn.agent_id or new_agent_id()
        manifest = agent_pod_manifest(spawn, namespace=self.namespace, agent_id=child_id, root_id=self.root_id,
                                      parent_id=self.agent_id, depth=self.depth + 1, now=self.clock(),
                                      prefix=self.prefix)
        return self._create(manifest)

    def child(self, agent_id: str, holder: str | None = None) -> Orchestrator:
        """The handle for a child orchestrator spawned by this one (same root, one level down)."""
        return Orchestrator(self.api, namespace=self.namespace, agent_id=agent_id, root_id=self.root_id,
                            parent_id=self.agent_id, depth=self.depth + 1, holder=holder,
                            lease_duration_s=self.lease_duration_s, prefix=self.prefix, clock=self.clock)

    def _create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        created: Any = self.core.create_namespaced_pod(self.namespace, manifest,  # type: ignore[arg-type,unused-ignore]
                                                       _preload_content=False)
        result: dict[str, Any] = json.loads(created.data)
        return result

    def start_heartbeat(self, period_s: float) -> None:
        """Renew every ``period_s`` on a daemon thread until :meth:`stop` (a crash is just stop)."""
        self._stop.clear()

        def beat() -> None:
            while not self._stop.wait(period_s):
                try:
                    self.renew()
                except (ApiException, OSError):
                    pass  # a missed beat is what the grace period is for; the next one retries

        self._thread = threading.Thread(target=beat, name=f"lease-{self.agent_id}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


# -- reading the cluster --------------------------------------------------------------------------


def _raw_pages(fetch: Callable[..., Any]) -> Iterator[dict[str, Any]]:
    """Items of a list as plain JSON: 850 pods a second through the model classes costs a core."""
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": PAGE, "_preload_content": False}
        if token:
            kwargs["_continue"] = token
        page = json.loads(fetch(**kwargs).data)
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def _gpus(spec: Mapping[str, Any]) -> int:
    total = 0
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get("nvidia.com/gpu") or (resources.get("requests") or {}).get(
            "nvidia.com/gpu")
        if isinstance(amount, int | str) and str(amount).isdigit():
            total += int(amount)
    return total


def pod_info(obj: Mapping[str, Any]) -> PodInfo:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    return PodInfo(
        namespace=meta.get("namespace", ""), name=meta.get("name", ""), uid=meta.get("uid", ""),
        labels=dict(meta.get("labels") or {}), annotations=dict(meta.get("annotations") or {}),
        phase=status.get("phase") or "Pending", scheduling_gates=len(spec.get("schedulingGates") or []),
        deleting=bool(meta.get("deletionTimestamp")), created=_time(meta.get("creationTimestamp")),
        gpus=_gpus(spec), resource_version=meta.get("resourceVersion", ""),
    )


def lease_info(obj: Mapping[str, Any]) -> LeaseInfo:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    return LeaseInfo(meta.get("namespace", ""), meta.get("name", ""), spec.get("holderIdentity"),
                     _time(spec.get("renewTime")), duration if isinstance(duration, int) else None)


def read_agents(api: client.ApiClient, namespace: str | None = None) -> tuple[list[PodInfo], list[LeaseInfo]]:
    """Every pod and every Lease (all pods, not a selector: a pod with *partial* ancestry labels
    must be seen to be reported). Leases are read after pods, so a Lease renewed during the read
    can only look fresher than the pods, never staler."""
    core, coord = client.CoreV1Api(api), client.CoordinationV1Api(api)
    if namespace is None:
        pods = [pod_info(o) for o in _raw_pages(core.list_pod_for_all_namespaces)]
        leases = [lease_info(o) for o in _raw_pages(coord.list_lease_for_all_namespaces)]
    else:
        pods = [pod_info(o) for o in _raw_pages(lambda **kw: core.list_namespaced_pod(namespace, **kw))]
        leases = [lease_info(o) for o in _raw_pages(lambda **kw: coord.list_namespaced_lease(namespace, **kw))]
    return pods, leases


# -- one reaper pass ------------------------------------------------------------------------------


@dataclass
class PassReport:
    pass_id: str
    started_at: datetime
    findings: list[Finding]
    decisions: list[Decision] = field(default_factory=list)
    refused: str = ""

    def count(self, action: str) -> int:
        return sum(1 for d in self.decisions if d.action == action)


def _error_text(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        try:
            body = json.loads(exc.body or "{}")
            return f"HTTP {exc.status} {body.get('reason', '')}: {body.get('message', '')}".strip()
        except (ValueError, TypeError):
            return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def make_verify(api: client.ApiClient, policy: OrphanPolicy, clock: Clock) -> Callable[[Finding], str | None]:
    """Re-read the evidence of an orphaned subtree right before its first deletion."""
    core, coord = client.CoreV1Api(api), client.CoordinationV1Api(api)

    def verify(f: Finding) -> str | None:
        try:
            if f.rule is Rule.LEASE_EXPIRED or f.rule is Rule.LEASE_MISSING:
                name = str(f.evidence.get("lease"))
                try:
                    answer: Any = coord.read_namespaced_lease(name, f.pod.namespace, _preload_content=False)
                    raw = json.loads(answer.data)
                except ApiException as exc:
                    if exc.status == 404:
                        return None  # no Lease (still, or deleted since): still no heartbeat
                    raise
                lease = lease_info(raw)
                expires = lease.expires_at()
                if expires is not None and clock() < expires + timedelta(seconds=policy.grace_s):
                    return f"lease {name} renewed at {format_time(lease.renew_time or expires)} by {lease.holder}"
            elif f.rule is Rule.PARENT_MISSING:
                parent = str(f.evidence.get("parent_id"))
                selector = f"{policy.prefix}/agent-id={parent}"
                found: Any = core.list_namespaced_pod(f.pod.namespace, label_selector=selector, limit=1,
                                                 _preload_content=False)
                if json.loads(found.data).get("items"):
                    return f"parent {parent} exists again"
            return None
        except (ApiException, OSError) as exc:
            return f"could not re-verify: {_error_text(exc)}"

    return verify


def make_delete(api: client.ApiClient, policy: OrphanPolicy) -> Callable[[Finding], str | None]:
    """Delete guarded by uid and resourceVersion: a pod re-created under the same name, or one whose
    labels changed since the list (a re-adoption, a TTL extension), answers 409 and is kept."""
    core = client.CoreV1Api(api)

    def delete(f: Finding) -> str | None:
        body = client.V1DeleteOptions(
            grace_period_seconds=policy.delete_grace_s,
            preconditions=client.V1Preconditions(uid=f.pod.uid, resource_version=f.pod.resource_version or None),
        )
        try:
            core.delete_namespaced_pod(f.pod.name, f.pod.namespace, body=body, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None  # already gone: the goal state
            return _error_text(exc)
        except OSError as exc:
            return _error_text(exc)
        return None

    return delete


def reap_once(
    api: client.ApiClient,
    policy: OrphanPolicy,
    *,
    roots: Callable[[], Mapping[str, RootState]] | None = None,
    dry_run: bool = True,
    force: bool = False,
    clock: Clock = utcnow,
    namespace: str | None = None,
) -> PassReport:
    """Read, classify, plan, re-verify and delete (or pretend to): one pass of the reaper.

    Raises if the cluster cannot be read: a pass that saw only part of the cluster must not act.
    Root states come from ``roots`` (the FinOps tables) merged over what root pods announce.
    """
    started = clock()
    pass_id = f"{started:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    pods, leases = read_agents(api, namespace)
    states = root_states_from_pods(pods, policy)
    if roots is not None:
        states.update(roots())
    now = clock()
    findings = classify(pods, leases, states, now, policy)
    the_plan = plan(findings, policy, force=force)
    decisions = execute_plan(the_plan, dry_run=dry_run, verify=make_verify(api, policy, clock),
                             delete=make_delete(api, policy), clock=clock)
    return PassReport(pass_id, started, findings, decisions, the_plan.refusal)
