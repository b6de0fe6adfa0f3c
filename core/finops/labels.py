"""Attribution labels on agent pods → cost dimensions, with ``unattributed`` for what is missing.

The brief's labels are ``<prefix>/root-id``, ``parent-id``, ``depth``, ``client``, ``task``,
``agent-type`` and ``tier``. A pod never drops out of the cost tables because a label is missing or
bad: the dimension becomes :data:`UNATTRIBUTED` and the reason is recorded as an *issue* on the
snapshot (counted in the asset's metadata). The raw label value is kept beside it (``labels``), so
an analyst can still see what the pod said.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

UNATTRIBUTED = "unattributed"
DEFAULT_PREFIX = "gpufabric.io"
# The keys after the prefix, in the column order of raw.k8s_pod_snapshots.
KEYS = ("root-id", "parent-id", "depth", "client", "task", "agent-type", "tier")
MAX_LABEL_VALUE = 63  # Kubernetes label values: at most 63 characters
_LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class Attribution:
    """The dimensions of one pod. ``depth`` is None when absent or not a number."""

    root_id: str = UNATTRIBUTED
    parent_id: str = UNATTRIBUTED
    depth: int | None = None
    client: str = UNATTRIBUTED
    task: str = UNATTRIBUTED
    agent_type: str = UNATTRIBUTED
    tier: str = UNATTRIBUTED


def label_value_problem(value: object) -> str | None:
    """Why the API server would refuse this label value, or None. Snapshots may come from places
    that never went through an API server's validation (exports, older clusters, other tools)."""
    if not isinstance(value, str):
        return f"not a string ({type(value).__name__})"
    if len(value) > MAX_LABEL_VALUE:
        return f"over {MAX_LABEL_VALUE} characters ({len(value)})"
    if value and not _LABEL_VALUE_RE.fullmatch(value):
        return "not a valid label value"
    return None


def attribution(labels: Mapping[str, object] | None, prefix: str = DEFAULT_PREFIX) -> tuple[Attribution, list[str]]:
    """The pod's dimensions and the list of issues (``"<key>: missing"``, ``"client: over 63 ..."``).

    ``missing`` is only an issue for ``client``, ``task`` and ``tier``: a training job has no
    agent tree, so a missing root-id/parent-id/depth/agent-type is normal and not counted.
    """
    labels = labels or {}
    values: dict[str, str] = {}
    issues: list[str] = []
    depth: int | None = None
    for key in KEYS:
        raw = labels.get(f"{prefix}/{key}")
        if raw is None or raw == "":
            if key in ("client", "task", "tier"):
                issues.append(f"{key}: missing")
            continue
        problem = label_value_problem(raw)
        if problem is not None:
            issues.append(f"{key}: {problem}")
            continue
        assert isinstance(raw, str)
        if key == "depth":
            if raw.isdigit():
                depth = int(raw)
            else:
                issues.append(f"depth: not a non-negative integer ({raw!r})")
            continue
        values[key] = raw
    return (
        Attribution(
            root_id=values.get("root-id", UNATTRIBUTED),
            parent_id=values.get("parent-id", UNATTRIBUTED),
            depth=depth,
            client=values.get("client", UNATTRIBUTED),
            task=values.get("task", UNATTRIBUTED),
            agent_type=values.get("agent-type", UNATTRIBUTED),
            tier=values.get("tier", UNATTRIBUTED),
        ),
        issues,
    )
