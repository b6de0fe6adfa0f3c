"""MIG layouts onto a cluster through ``gpufabric publish``'s machinery (issue 21, part 3).

One apply = one window: read the nodes (GFD product and count, ``nvidia.com/mig.config`` and its
state) and the mig-parted ConfigMap, plan from what is on the nodes now (``core.mig.plan``),
refuse an incomplete plan, then publish the first window's labels and the ConfigMap with
``connectors.kube.publish`` (server-side apply under our own field manager, the server's dry run,
the blast-radius guard) and wait for mig-manager to report ``success`` on every node of the
window; a node ``failed`` or stuck past the timeout is a finding and stops the apply. The next
window is planned again from what the nodes then carry, so a half-done window is never stacked on.

Our field manager is not the topology publisher's (``gpufabric``): a server-side apply removes
the fields its manager applied before and omits now, so one manager per kind of state keeps a
MIG apply from removing topology labels and the other way round.

Rollback: the ConfigMap carries the labels as they were before the last apply (annotation
``gpufabric.io/mig-previous-labels``) and keeps the configs they name; ``rollback`` re-applies them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from connectors.kube.pods import list_nodes_raw, list_pods_raw
from connectors.kube.publish import (
    BlastRadiusExceeded,
    ObjectChange,
    Plan,
    PublishError,
    execute,
    node_facts,
    plan,
    read_state,
    render_diff,
)
from core.mig import apply as mig
from core.mig.demand import SliceRequest, TenantDemand
from core.mig.migparted import MigConfigError, MigPartedConfig, load_config
from core.mig.planner import PlanResult
from core.mig.planner import plan as plan_layouts
from core.mig.training import training_nodes

PREVIOUS_ANNOTATION = "gpufabric.io/mig-previous-labels"
POLL_S = 0.25


class MigRefused(Exception):
    """An apply that cannot or must not go ahead; the message is for the operator."""


@dataclass(frozen=True)
class MigConfig:
    demands: tuple[TenantDemand, ...]
    max_per_window: int = 8
    windows: int = 4
    ref: mig.ConfigMapRef = field(default_factory=mig.ConfigMapRef)
    field_manager: str = "gpufabric-mig"
    max_fraction: float = 0.25
    prefix: str = "gpufabric"
    timeout_s: float = 900.0


def config_from_settings(settings: Any) -> MigConfig:
    """``settings.Settings`` -> MigConfig (duck-typed)."""
    m = settings.mig
    demands = tuple(
        TenantDemand(t.tenant, t.isolation, tuple(
            SliceRequest(s.model, s.count, s.profile, s.memory_gib, s.compute_slices, s.media, s.whole_gpu)
            for s in t.slices))
        for t in m.tenants
    )  # fmt: skip
    return MigConfig(
        demands=demands,
        max_per_window=m.max_gpus_per_window,
        windows=m.windows,
        ref=mig.ConfigMapRef(m.config_namespace, m.config_map),
        field_manager=m.field_manager,
        max_fraction=m.max_node_change_fraction,
        prefix=m.config_prefix,
        timeout_s=m.apply_timeout_s,
    )


@dataclass
class ClusterView:
    nodes: list[dict[str, Any]]  # raw Node JSON
    labels: dict[str, dict[str, str]]  # node -> all its labels
    owned: dict[str, str]  # node -> the mig.config value our field manager owns
    configmap: dict[str, Any] | None
    config: MigPartedConfig | None
    notes: list[str]
    training: frozenset[str] = frozenset()  # nodes running a training job's pods: never reconfigured


# Bound pods that have not finished: what may be running on a GPU now (core.mig.training decides which
# are a training job's).
_BOUND_UNFINISHED = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


def read_cluster(api: client.ApiClient, cfg: MigConfig) -> ClusterView:
    nodes = list_nodes_raw(api)
    labels = node_facts(nodes)
    state = read_state(nodes, cfg.field_manager)
    owned = {n: s.labels[mig.MIG_CONFIG_LABEL] for n, s in state.items() if mig.MIG_CONFIG_LABEL in s.labels}
    notes: list[str] = []
    try:
        cm: Any = client.CoreV1Api(api).read_namespaced_config_map(cfg.ref.name, cfg.ref.namespace)
        configmap = api.sanitize_for_serialization(cm)
    except ApiException as exc:
        if exc.status != 404:
            raise
        configmap = None
    config = None
    text = ((configmap or {}).get("data") or {}).get(cfg.ref.key)
    if text is not None:
        try:
            config = load_config(text)
        except MigConfigError as exc:
            notes.append(f"ConfigMap {cfg.ref.namespace}/{cfg.ref.name}: {exc}; current layouts taken as MIG disabled")
    training = training_nodes(list_pods_raw(api, _BOUND_UNFINISHED).pods)
    if training:
        notes.append(f"{len(training)} node(s) run a training job's pods and keep their layout: "
                     + ", ".join(sorted(training)[:10]) + (" ..." if len(training) > 10 else ""))  # fmt: skip
    return ClusterView(nodes, labels, owned, configmap, config, notes, training)


def plan_cluster(api: client.ApiClient, cfg: MigConfig) -> tuple[PlanResult, ClusterView]:
    """The plan from the nodes' current layouts (``plan`` prints it; ``apply`` applies its first window)."""
    view = read_cluster(api, cfg)
    gpus, notes = mig.current_gpus(view.labels, view.config, view.training)
    view.notes += notes
    if not gpus:
        raise MigRefused("no node of a modelled MIG GPU in the cluster (GFD labels nvidia.com/gpu.product and .count)")
    result = plan_layouts(gpus, cfg.demands, max_per_window=cfg.max_per_window, windows=cfg.windows)
    return result, view


@dataclass
class ApplyOutcome:
    plan: PlanResult | None
    publish: Plan | None
    diff: list[str]
    window_nodes: tuple[str, ...] = ()
    wanted: dict[str, str] = field(default_factory=dict)
    progress: mig.Progress | None = None
    applied: bool = False


def _configmap(cfg: MigConfig, text: str, previous: Mapping[str, str]) -> dict[str, Any]:
    obj = mig.configmap_object(text, cfg.ref, cfg.field_manager)
    obj["metadata"]["annotations"] = {PREVIOUS_ANNOTATION: json.dumps(dict(sorted(previous.items())))}
    return obj


def _publish(
    api: client.ApiClient, cfg: MigConfig, labels: dict[str, dict[str, str]], cm: dict[str, Any], view: ClusterView,
    *, dry_run: bool, force: bool,
) -> Plan:  # fmt: skip
    """publish's plan + execute for our labels and ConfigMap. Every node whose MIG config changes
    counts against the guard, the first time too: a relabel here drains and resets GPUs."""
    try:
        p = plan(api, labels, {}, [cm], field_manager=cfg.field_manager, max_fraction=cfg.max_fraction)
    except PublishError as exc:
        raise MigRefused(str(exc)) from None
    p.guarded_nodes = len(p.changed_nodes)
    before_text = ((view.configmap or {}).get("data") or {}).get(cfg.ref.key)
    before_notes = ((view.configmap or {}).get("metadata") or {}).get("annotations") or {}
    if view.configmap is not None:  # publish lists only Kueue objects as existing: say what really changes
        same = before_text == cm["data"][cfg.ref.key] and before_notes.get(PREVIOUS_ANNOTATION) == \
            cm["metadata"]["annotations"][PREVIOUS_ANNOTATION]  # fmt: skip
        p.object_changes = [
            ObjectChange(c.kind, c.namespace, c.name, "unchanged" if same else "changed", c.before, c.after)
            if c.kind == "ConfigMap" else c
            for c in p.object_changes
        ]  # fmt: skip
    try:
        execute(api, p, labels, {}, field_manager=cfg.field_manager, force=force, dry_run=dry_run)
    except BlastRadiusExceeded as exc:
        raise MigRefused(f"{exc} (MIG: every node whose config changes is drained and its GPUs reset)") from None
    except PublishError as exc:
        raise MigRefused(str(exc)) from None
    return p


def apply_window(api: client.ApiClient, cfg: MigConfig, *, dry_run: bool = False, force: bool = False) -> ApplyOutcome:
    """Plan, then publish the first window (or, ``dry_run``, the server's dry run of it)."""
    result, view = plan_cluster(api, cfg)
    if not result.complete:
        raise MigRefused(str(_incomplete(result)))
    if not result.windows:
        return ApplyOutcome(result, None, ["nothing to reconfigure: every GPU already has its planned layout"])
    old_text = ((view.configmap or {}).get("data") or {}).get(cfg.ref.key)
    try:
        window = mig.window_labels(result, view.owned, prefix=cfg.prefix, old_text=old_text,
                                   also_keep=_previous(view).values())  # fmt: skip
    except MigConfigError as exc:
        raise MigRefused(f"rendered config refused: {exc}") from None
    cm = _configmap(cfg, window.config_text, window.previous)
    p = _publish(api, cfg, window.labels, cm, view, dry_run=dry_run, force=force)
    diff = render_diff(p)
    for name in sorted({window.labels[n][mig.MIG_CONFIG_LABEL] for n in window.window_nodes}):
        diff.insert(0, f"config {name}: {window.descriptions.get(name, '')}")
    wanted = {n: window.labels[n][mig.MIG_CONFIG_LABEL] for n in window.window_nodes}
    if dry_run and p.guard_exceeded and not force:
        diff.append(f"the blast-radius guard would refuse this: {p.guarded_nodes} of {p.nodes_total} nodes change"
                    f" MIG config (> {p.max_fraction:.0%} allowed); applying needs --force")  # fmt: skip
    return ApplyOutcome(result, p, diff, window.window_nodes, wanted, applied=not dry_run)


def _incomplete(result: PlanResult) -> str:
    lines = "\n  ".join(str(u) for u in result.unmet)
    return f"the MIG plan leaves {len(result.unmet)} demand line(s) unmet; nothing applied:\n  {lines}"


def _previous(view: ClusterView) -> dict[str, str]:
    notes = ((view.configmap or {}).get("metadata") or {}).get("annotations") or {}
    try:
        found = json.loads(notes.get(PREVIOUS_ANNOTATION) or "{}")
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): str(v) for k, v in found.items() if isinstance(v, str)}


def observed(api: client.ApiClient, nodes: Sequence[str]) -> dict[str, dict[str, str]]:
    """node -> its labels now, for the nodes asked about (a node gone is absent)."""
    wanted = set(nodes)
    return {name: labels for name, labels in node_facts(list_nodes_raw(api)).items() if name in wanted}


def wait_window(
    api: client.ApiClient,
    wanted: Mapping[str, str],
    timeout_s: float,
    *,
    stale_success: frozenset[str] = frozenset(),
    poll_s: float = POLL_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> mig.Progress:
    """Poll ``nvidia.com/mig.config.state`` until every node of the window is ``success`` or a
    finding (failed, stuck past ``timeout_s``, relabelled or gone). ``stale_success``: nodes that
    were at ``success`` before the relabel; their ``success`` counts once they were seen leave it."""
    started = clock()
    stale = set(stale_success)
    while True:
        seen = observed(api, list(wanted))
        stale -= {n for n in stale if seen.get(n, {}).get(mig.MIG_STATE_LABEL) != "success"}
        progress = mig.judge(wanted, seen, clock() - started, timeout_s, stale_success=frozenset(stale))
        if progress.finished:
            return progress
        sleep(poll_s)


def apply(
    api: client.ApiClient,
    cfg: MigConfig,
    *,
    force: bool = False,
    max_windows: int | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> list[ApplyOutcome]:
    """Window after window until nothing is left to reconfigure, a window ends with findings, or
    ``max_windows`` were applied. Each window is planned from what the nodes carry then."""
    outcomes: list[ApplyOutcome] = []
    while max_windows is None or len(outcomes) < max_windows:
        before = node_facts(list_nodes_raw(api))
        outcome = apply_window(api, cfg, force=force)
        outcomes.append(outcome)
        if not outcome.wanted:
            break
        say(f"window {len(outcomes)}: {', '.join(outcome.window_nodes)} -> waiting for mig-manager")
        stale = frozenset(n for n in outcome.wanted if before.get(n, {}).get(mig.MIG_STATE_LABEL) == "success")
        outcome.progress = wait_window(api, outcome.wanted, cfg.timeout_s, stale_success=stale)
        if outcome.progress.findings:
            break
    return outcomes


def rollback(api: client.ApiClient, cfg: MigConfig, *, dry_run: bool = False, force: bool = False) -> ApplyOutcome:
    """Put back the labels recorded before the last apply (the ConfigMap keeps their configs)."""
    view = read_cluster(api, cfg)
    previous = _previous(view)
    if view.configmap is None:
        raise MigRefused(f"no ConfigMap {cfg.ref.namespace}/{cfg.ref.name}: nothing was applied to roll back")
    text = ((view.configmap.get("data") or {}).get(cfg.ref.key)) or ""
    if view.config is None:
        raise MigRefused(f"ConfigMap {cfg.ref.namespace}/{cfg.ref.name} holds no readable config")
    missing = sorted({v for v in previous.values() if v not in view.config.configs})
    if missing:
        raise MigRefused(f"the previous labels name configs no longer held: {', '.join(missing)}")
    labels = {n: {mig.MIG_CONFIG_LABEL: v} for n, v in previous.items()}
    cm = _configmap(cfg, text, view.owned)  # rolling back twice returns to where we are now
    p = _publish(api, cfg, labels, cm, view, dry_run=dry_run, force=force)
    changed = {d.node for d in p.changed_nodes}
    wanted = {n: v for n, v in previous.items() if n in changed}
    return ApplyOutcome(None, p, render_diff(p), tuple(sorted(changed)), wanted, applied=not dry_run)


@dataclass(frozen=True)
class NodeStatus:
    node: str
    config: str | None
    state: str | None
    ours: bool  # the label is owned by our field manager


def status(api: client.ApiClient, cfg: MigConfig) -> list[NodeStatus]:
    """Per GPU node: the config its label names and mig-manager's state."""
    view = read_cluster(api, cfg)
    out = []
    for node in sorted(view.labels):
        labels = view.labels[node]
        if mig.GFD_PRODUCT not in labels and mig.MIG_CONFIG_LABEL not in labels:
            continue
        out.append(NodeStatus(node, labels.get(mig.MIG_CONFIG_LABEL), labels.get(mig.MIG_STATE_LABEL),
                              node in view.owned))  # fmt: skip
    return out
