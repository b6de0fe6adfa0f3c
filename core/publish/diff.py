"""What a publish changes on each node: managed labels, annotations and extended resources (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LabelChange:
    key: str
    before: str | None
    after: str | None

    @property
    def change(self) -> str:
        if self.before is None:
            return "added"
        return "removed" if self.after is None else "changed"


@dataclass(frozen=True)
class NodeDiff:
    node: str
    labels: tuple[LabelChange, ...] = ()
    resources: tuple[LabelChange, ...] = ()
    had_managed_state: bool = False  # the node carried something we published before
    missing: bool = False  # in the topology but not in the cluster: nothing is written
    annotations: tuple[LabelChange, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.labels or self.resources or self.annotations) and not self.missing

    @property
    def metadata_changed(self) -> bool:
        """Labels or annotations change: both go in the node's one metadata apply."""
        return bool(self.labels or self.annotations)


def _changes(current: Mapping[str, str], desired: Mapping[str, str]) -> tuple[LabelChange, ...]:
    keys = sorted(set(current) | set(desired))
    return tuple(
        LabelChange(k, current.get(k), desired.get(k)) for k in keys if current.get(k) != desired.get(k)
    )


@dataclass(frozen=True)
class NodeState:
    """What we own on a node now (from managedFields of our field manager)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


def diff_nodes(
    current: Mapping[str, NodeState],
    desired_labels: Mapping[str, Mapping[str, str]],
    desired_resources: Mapping[str, Mapping[str, str]],
    desired_annotations: Mapping[str, Mapping[str, str]] | None = None,
) -> list[NodeDiff]:
    """Per node in the cluster or the plan, sorted by name. A cluster node absent from the plan
    loses what we published on it (stale); a planned node absent from the cluster is ``missing``."""
    annotations = desired_annotations or {}
    out: list[NodeDiff] = []
    for node in sorted(set(current) | set(desired_labels) | set(annotations)):
        state = current.get(node)
        if state is None:
            out.append(NodeDiff(node, missing=True))
            continue
        out.append(
            NodeDiff(
                node,
                labels=_changes(state.labels, desired_labels.get(node, {})),
                resources=_changes(state.resources, desired_resources.get(node, {})),
                had_managed_state=bool(state.labels or state.resources or state.annotations),
                annotations=_changes(state.annotations, annotations.get(node, {})),
            )
        )
    return out
