"""One publish, shared by the CLI and the asset: topology version -> desired state -> plan ->
dry run, GitOps files or apply -> a ``publish.runs`` row. Thin glue over ``core.publish``
(rendering), ``connectors.kube.publish`` (the cluster) and ``services.publish.store``."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import yaml
from kubernetes import client

from connectors.kube.pods import list_nodes_raw
from connectors.kube.publish import (
    BlastRadiusExceeded,
    Plan,
    PublishError,
    canonical_quantities,
    execute,
    node_facts,
    plan,
    render_diff,
)
from core.publish import DesiredState, KueuePolicy, LabelScheme, TenantSpec, desired_state
from core.topology.model import model_from_json
from services.gpu_topo import latest_node_patches
from services.publish.store import applied_run_for, last_applied_run, record_run
from services.topology.store import load_model

GITOPS_SUBDIR = "gpufabric"


class PublishRefused(Exception):
    """A publish that cannot or must not go ahead; the message is for the operator."""


@dataclass(frozen=True)
class PublishConfig:
    scheme: LabelScheme = field(default_factory=LabelScheme)
    tenants: Sequence[TenantSpec] = ()
    field_manager: str = "gpufabric"
    max_fraction: float = 0.2
    policy: KueuePolicy = field(default_factory=KueuePolicy)
    cluster: str = "default"


@dataclass
class Outcome:
    run_id: int
    topology_version: int
    mode: str
    status: str
    plan: Plan | None
    diff: list[str]
    files: list[Path] = field(default_factory=list)


def config_from_settings(settings: Any, cluster: str | None = None) -> PublishConfig:
    """``settings.Settings`` -> PublishConfig (duck-typed)."""
    tenants = [TenantSpec(t.id, t.name, list(t.tiers), t.cohort, dict(t.gpu_quota) if t.gpu_quota else None,
                          t.borrowing_fraction, t.lending_fraction)
               for t in settings.tenants]  # fmt: skip
    sources = settings.sources.kubernetes
    return PublishConfig(
        scheme=LabelScheme(settings.topology_label_scheme, settings.label_prefix),
        tenants=tenants,
        field_manager=settings.publish.field_manager,
        max_fraction=settings.publish.max_node_change_fraction,
        policy=KueuePolicy(manager=settings.publish.field_manager),
        cluster=cluster or (sources[0].name if sources else "default"),
    )


def desired_state_for(conn: psycopg.Connection, api: client.ApiClient, cfg: PublishConfig, version: int | None
               ) -> tuple[int, DesiredState]:  # fmt: skip
    doc = load_model(conn, version)
    if doc is None:
        raise PublishRefused(
            f"no topology version {version}"
            if version is not None
            else "no topology version yet: derive one first (gpufabric topology show)"
        )
    facts = node_facts(list_nodes_raw(api))
    state = desired_state(model_from_json(doc), cfg.scheme, facts, cfg.tenants, cfg.policy)
    # issue 23: each node's GPU-NIC affinity label and map annotation from the latest derivation;
    # a node it did not cover gets neither (and loses ours, if it had them)
    return int(doc["version"]), state.with_node_metadata(latest_node_patches(conn, cfg.scheme.prefix))


def write_gitops(directory: Path, state: DesiredState) -> list[Path]:
    """One YAML file per object under ``DIR/gpufabric/`` (a folder we own: files of objects no
    longer rendered are removed). Node labels, annotations and resources are partial Node objects
    for an SSA-capable GitOps tool."""
    root = directory / GITOPS_SUBDIR
    root.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    docs: list[tuple[str, dict[str, Any]]] = []
    for obj in state.objects:
        ns = obj["metadata"].get("namespace")
        # quotas as the API server stores them, or a GitOps tool's diff never settles
        docs.append((f"kueue/{obj['kind'].lower()}-{(ns + '-') if ns else ''}{obj['metadata']['name']}.yaml",
                     canonical_quantities(obj)))  # fmt: skip
    for node in sorted(set(state.labels) | set(state.annotations)):
        meta: dict[str, Any] = {"name": node, "labels": state.labels.get(node, {})}
        if state.annotations.get(node):
            meta["annotations"] = state.annotations[node]
        docs.append((f"nodes/{node}.yaml", {"apiVersion": "v1", "kind": "Node", "metadata": meta}))
        if state.resources.get(node):
            res = state.resources[node]
            docs.append((f"nodes-status/{node}.yaml", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
                                                       "status": {"capacity": res, "allocatable": res}}))  # fmt: skip
    for rel, obj in docs:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        written.append(path)
    keep = set(written)
    for old in root.rglob("*.yaml"):
        if old not in keep:
            old.unlink()
    return written


def _guard_basis(conn: psycopg.Connection, cluster: str) -> str:
    """What the blast-radius guard compared against, for the refusal: the labels and resources
    this very cluster carries under our field manager (read from its managedFields, so another
    cluster's or another warehouse's history never counts), and the publish that put them there."""
    last = last_applied_run(conn, cluster)
    where = (f"our last applied publish to {cluster} was run {last['id']} (topology version "
             f"{last['topology_version']}, {last['started_at']:%Y-%m-%d %H:%M:%S %Z})" if last
             else f"this warehouse has no applied publish to {cluster}: the labels came from another publisher "
                  "or warehouse")  # fmt: skip
    return f"Compared with what cluster {cluster} itself carries under our field manager; {where}"


def publish_fabric(
    conn: psycopg.Connection,
    api: client.ApiClient,
    cfg: PublishConfig,
    *,
    version: int | None = None,
    dry_run: bool = False,
    force: bool = False,
    gitops_dir: Path | None = None,
    rollback_version: int | None = None,
) -> Outcome:
    started = datetime.now(UTC)
    rollback_of: int | None = None
    if rollback_version is not None:
        found = applied_run_for(conn, rollback_version, cfg.cluster)
        if found is None:
            raise PublishRefused(f"topology version {rollback_version} was never published to {cfg.cluster}")
        rollback_of, desired = found
        topo_version, state = rollback_version, DesiredState.from_json(desired)
        mode = "rollback"
    else:
        topo_version, state = desired_state_for(conn, api, cfg, version)
        mode = "apply"
    if gitops_dir is not None:
        files = write_gitops(gitops_dir, state)
        run = record_run(conn, started_at=started, cluster=cfg.cluster, topology_version=topo_version, mode="gitops",
                         status="written", forced=force, field_manager=cfg.field_manager, state=state, plan=None,
                         message=f"{len(files)} files in {gitops_dir}")  # fmt: skip
        return Outcome(run, topo_version, "gitops", "written", None, [f"wrote {len(files)} files"], files)
    try:
        p = plan(api, state.labels, state.resources, state.objects, field_manager=cfg.field_manager,
                 max_fraction=cfg.max_fraction, annotations=state.annotations)  # fmt: skip
    except PublishError as exc:
        raise PublishRefused(str(exc)) from None
    diff = render_diff(p)
    common: dict[str, Any] = {"started_at": started, "cluster": cfg.cluster, "topology_version": topo_version,
                              "forced": force, "field_manager": cfg.field_manager, "state": state, "plan": p,
                              "rollback_of": rollback_of}  # fmt: skip
    if dry_run:
        # The server's own dry run of every write: what it would refuse is refused now.
        try:
            execute(api, p, state.labels, state.resources, field_manager=cfg.field_manager, dry_run=True,
                    annotations=state.annotations)  # fmt: skip
        except PublishError as exc:
            record_run(conn, mode="dry_run", status="failed", message=str(exc), **common)
            raise PublishRefused(str(exc)) from None
        if p.guard_exceeded and not force:
            diff.append(f"the blast-radius guard would refuse this: {p.guarded_nodes} of {p.nodes_total} nodes change"
                        f" what we published (> {p.max_fraction:.0%} allowed); applying needs --force")  # fmt: skip
        run = record_run(conn, mode="dry_run", status="planned", **common)
        return Outcome(run, topo_version, "dry_run", "planned", p, diff)
    try:
        execute(api, p, state.labels, state.resources, field_manager=cfg.field_manager, force=force,
                annotations=state.annotations)  # fmt: skip
    except BlastRadiusExceeded as exc:
        message = f"{exc}. {_guard_basis(conn, cfg.cluster)}"
        record_run(conn, mode=mode, status="refused", message=message, **common)
        raise PublishRefused(message) from None
    except PublishError as exc:
        record_run(conn, mode=mode, status="failed", message=str(exc), **common)
        raise PublishRefused(str(exc)) from None
    run = record_run(conn, mode=mode, status="applied", **common)
    return Outcome(run, topo_version, mode, "applied", p, diff)
