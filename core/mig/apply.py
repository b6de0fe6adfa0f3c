"""Applying a MIG plan through the GPU operator's mig-manager (part 3 of issue 21), pure parts.

What mig-manager reads (NVIDIA GPU operator, "GPU Operator with MIG", custom MIG configuration):
the mig-parted configs in one ConfigMap of the operator's namespace (key ``config.yaml``; the
operator ships ``default-mig-parted-config`` and reconciles it, so a site's own configs go in a
ConfigMap of their own that ClusterPolicy ``spec.migManager.config.name`` names), and per node the
label ``nvidia.com/mig.config`` naming one config. mig-manager reports its progress in
``nvidia.com/mig.config.state``: ``pending`` (seen, not started), ``rebooting`` (a GPU reset or a
reboot is in progress), ``success`` or ``failed``.

Here: the desired labels of one window, the ConfigMap object, the current layouts read back from
the labels and the ConfigMap, the judge of progress (stuck or failed nodes are findings), and the
extended resources a node advertises under the device plugin's ``mixed`` strategy for a config
(what the simulator's node agent publishes when it plays mig-manager).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from core.mig.demand import Gpu
from core.mig.layout import counts_from_mapping, layout_space
from core.mig.migparted import MigConfigError, MigPartedConfig, load_config, render_plan
from core.mig.planner import PlanResult
from core.mig.profiles import GpuModel, UnknownModelError, UnknownProfileError, model_named

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
STATES = ("pending", "rebooting", "success", "failed")
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # mixed strategy: nvidia.com/mig-<profile>
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_COUNT = "nvidia.com/gpu.count"
CONFIG_KEY = "config.yaml"


@dataclass(frozen=True)
class ConfigMapRef:
    """Where mig-manager reads the configs (ClusterPolicy ``spec.migManager.config.name``)."""

    namespace: str = "gpu-operator"
    name: str = "custom-mig-config"
    key: str = CONFIG_KEY


def configmap_object(text: str, ref: ConfigMapRef, manager: str) -> dict[str, Any]:
    """The ConfigMap holding ``text`` (checked with :func:`load_config` first: a config mig-manager
    would refuse never leaves here)."""
    load_config(text)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": ref.name, "namespace": ref.namespace, "labels": {"app.kubernetes.io/managed-by": manager}},
        "data": {ref.key: text},
    }


def merge_configs(new_text: str, old_text: str | None, keep: Sequence[str]) -> str:
    """``new_text``'s configs plus those of ``old_text`` named in ``keep`` (labels still pointing
    at them: a node mid-way must not lose the config its label names). Names are digests of the
    layout, so a name in both is the same config."""
    new = load_config(new_text)
    doc: dict[str, Any] = {"version": "v1", "mig-configs": yaml.safe_load(new_text)["mig-configs"]}
    if old_text:
        try:
            old = load_config(old_text)
            raw_old = yaml.safe_load(old_text)["mig-configs"]
        except MigConfigError:
            old, raw_old = None, {}
        if old is not None:
            for name in keep:
                if name in raw_old and name not in new.configs:
                    doc["mig-configs"][name] = raw_old[name]
    configs = {name: doc["mig-configs"][name] for name in sorted(doc["mig-configs"])}
    text = yaml.safe_dump({"version": "v1", "mig-configs": configs}, sort_keys=False)
    load_config(text)
    return text


@dataclass(frozen=True)
class WindowLabels:
    """The labels of one apply: every node's ``nvidia.com/mig.config`` after the window."""

    labels: dict[str, dict[str, str]]  # node -> {MIG_CONFIG_LABEL: name}: what our field manager owns after
    window_nodes: tuple[str, ...]  # nodes reconfigured in this window, in drain order
    config_text: str  # the configs the labels name (window target and everything still referenced)
    descriptions: dict[str, str]
    previous: dict[str, str]  # node -> config name before the window (rollback target), for every labelled node


def window_labels(
    plan: PlanResult,
    current: Mapping[str, str],
    *,
    prefix: str = "gpufabric",
    old_text: str | None = None,
    also_keep: Iterable[str] = (),
) -> WindowLabels:
    """Labels after the plan's first window: nodes with a GPU in it get the config of their layout
    after that window; every other node keeps the label we gave it (``current``: node -> value our
    field manager owns now). One window per apply; the next apply re-plans from what is then on
    the nodes, so a window left half done is never stacked on.

    ``previous`` is the rollback target: the label a node had, or for a node we never labelled
    the config of its layout now (``render_plan(through_window=0)``), so that rolling back makes
    mig-manager restore the old layout rather than leave the new one unlabelled. The configs of
    ``old_text`` that a label still names, or that ``also_keep`` lists, are kept."""
    rendered = render_plan(plan, prefix=prefix, through_window=1)
    before = render_plan(plan, prefix=prefix, through_window=0)
    first = plan.windows[0] if plan.windows else ()
    node_of = {g.gpu.id: g.gpu.node for g in plan.gpus}
    window_nodes = tuple(dict.fromkeys(node_of[gpu_id] for gpu_id in first))
    labels = {node: {MIG_CONFIG_LABEL: value} for node, value in current.items()}
    previous = dict(current)
    for node in window_nodes:
        labels[node] = {MIG_CONFIG_LABEL: rendered.node_config[node]}
        previous.setdefault(node, before.node_config[node])
    keep = {v[MIG_CONFIG_LABEL] for v in labels.values()} | set(current.values()) | set(also_keep)
    text = merge_configs(rendered.text, before.text, sorted(set(previous.values())))
    text = merge_configs(text, old_text, sorted(keep))
    descriptions = {**before.descriptions, **rendered.descriptions}
    return WindowLabels(labels, window_nodes, text, descriptions, previous)


def _entry_devices(devices: str | tuple[int, ...], count: int) -> list[int]:
    if isinstance(devices, str):  # "all": load_config allows no other string
        return list(range(count))
    return [d for d in devices if d < count]


def node_layout(config: MigPartedConfig, name: str, gpu_count: int) -> dict[int, dict[str, int] | None]:
    """Device index -> profile counts (None: MIG disabled) that config ``name`` sets on a node of
    ``gpu_count`` GPUs. Later entries win for a device listed twice, as mig-parted applies them in
    order. Devices no entry names are left out (mig-parted leaves them as they are)."""
    if name not in config.configs:
        raise KeyError(name)
    out: dict[int, dict[str, int] | None] = {}
    for entry in config.configs[name]:
        for index in _entry_devices(entry.devices, gpu_count):
            out[index] = entry.counts() if entry.mig_enabled else None
    return out


def mig_resources(config: MigPartedConfig, name: str, gpu_count: int) -> dict[str, str]:
    """Extended resources of a node under the ``mixed`` strategy once config ``name`` is applied:
    ``nvidia.com/mig-<profile>`` per instance profile and ``nvidia.com/gpu`` for the GPUs left
    without MIG. Raises KeyError for an unknown config name."""
    layout = node_layout(config, name, gpu_count)
    totals: Counter[str] = Counter()
    mig_gpus = 0
    for index in range(gpu_count):
        counts = layout.get(index)
        if counts is None:
            continue
        mig_gpus += 1
        totals.update(counts)
    out = {GPU_RESOURCE: str(gpu_count - mig_gpus)}
    out.update({f"{MIG_RESOURCE_PREFIX}{p}": str(n) for p, n in sorted(totals.items()) if n})
    return out


def instances(config: MigPartedConfig, name: str, gpu_count: int, model: str) -> dict[int, list[tuple[str, int]]]:
    """Device index -> (profile, GPU instance id) per instance, for MIG GPUs of config ``name``.

    The placement is the first valid one for the multiset (what the planner gives); instance ids
    count from 1 in placement order. The driver numbers instances by its own table, so consumers
    must treat ``GPU_I_ID`` as an opaque id, as dcgm-exporter's docs do."""
    gpu_model = model_named(model)
    out: dict[int, list[tuple[str, int]]] = {}
    for index, counts in sorted(node_layout(config, name, gpu_count).items()):
        if counts is None:
            continue
        placements = layout_space(gpu_model).placement(counts_from_mapping(gpu_model, counts))
        ordered = sorted(placements, key=lambda p: (p.start, p.profile))
        out[index] = [(p.profile, i + 1) for i, p in enumerate(ordered)]
    return out


def current_gpus(
    nodes: Mapping[str, Mapping[str, str]], config: MigPartedConfig | None, training_nodes: frozenset[str] = frozenset()
) -> tuple[list[Gpu], list[str]]:
    """The inventory the planner needs, from the nodes' labels: GFD's product and count, and the
    current layout of the config ``nvidia.com/mig.config`` names where mig-manager reported
    ``success`` (otherwise MIG disabled, as mig-manager leaves a GPU it never configured).
    Returns (GPUs, notes on nodes that could not be read)."""
    gpus: list[Gpu] = []
    notes: list[str] = []
    for node in sorted(nodes):
        labels = nodes[node]
        product, count = labels.get(GFD_PRODUCT), labels.get(GFD_COUNT)
        if not product or not count:
            continue  # not a GPU node
        if not count.isdigit() or int(count) > 64:
            notes.append(f"{node}: {GFD_COUNT}={count!r} is not a GPU count")
            continue
        try:
            model = model_named(product)
        except UnknownModelError:
            notes.append(f"{node}: {product} is not a modelled MIG GPU")
            continue
        layout: dict[int, dict[str, int] | None] = {}
        name = labels.get(MIG_CONFIG_LABEL)
        if name and labels.get(MIG_STATE_LABEL) == "success":
            if config is None or name not in config.configs:
                notes.append(f"{node}: {MIG_CONFIG_LABEL}={name} is in no config we hold; taken as MIG disabled")
            else:
                layout = node_layout(config, name, int(count))
        for index in range(int(count)):
            counts = layout.get(index)
            placed = _placed(model, counts, notes, node, index)
            gpus.append(Gpu(f"{node}/{index}", node, index, model.name, placed, training=node in training_nodes))
    return gpus, notes


def _placed(model: GpuModel, counts: dict[str, int] | None, notes: list[str], node: str, index: int) -> Any:
    if counts is None:
        return None
    try:
        vector = counts_from_mapping(model, counts)
    except (UnknownProfileError, KeyError, ValueError):
        notes.append(f"{node}/{index}: {counts} does not fit {model.name}; taken as MIG disabled")
        return None
    space = layout_space(model)
    if not space.is_feasible(vector):
        notes.append(f"{node}/{index}: {counts} has no valid placement on {model.name}; taken as MIG disabled")
        return None
    return space.placement(vector)


# ----------------------------------------------------------------------------------------- progress


@dataclass(frozen=True)
class Finding:
    node: str
    kind: str  # failed | stuck | label_lost
    detail: str

    def __str__(self) -> str:
        return f"{self.node}: {self.kind}: {self.detail}"


@dataclass(frozen=True)
class Progress:
    done: tuple[str, ...]  # success with the wanted config
    waiting: tuple[str, ...]  # pending, rebooting, or not yet seen by mig-manager
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def finished(self) -> bool:
        """Nothing left to wait for (done, or every remaining node is a finding)."""
        return not self.waiting

    @property
    def ok(self) -> bool:
        return self.finished and not self.findings


def judge(
    wanted: Mapping[str, str],
    observed: Mapping[str, Mapping[str, str]],
    elapsed_s: float,
    timeout_s: float,
    *,
    stale_success: frozenset[str] = frozenset(),
) -> Progress:
    """Where the window stands: ``wanted`` is node -> config name, ``observed`` node -> its labels
    now. ``failed`` is a finding at once; a node not at ``success`` when ``timeout_s`` has passed
    is ``stuck``; a node whose label no longer names the config (someone relabelled it, or the
    node is gone) is ``label_lost``. ``stale_success`` lists nodes whose ``success`` is still the
    one from before the label changed (mig-manager has not yet moved them to ``pending``): the
    caller removes a node from it once it has seen the node in any other state."""
    done: list[str] = []
    waiting: list[str] = []
    findings: list[Finding] = []
    for node in sorted(wanted):
        labels = observed.get(node)
        if labels is None:
            findings.append(Finding(node, "label_lost", "the node is gone"))
            continue
        if labels.get(MIG_CONFIG_LABEL) != wanted[node]:
            now = labels.get(MIG_CONFIG_LABEL)
            findings.append(Finding(node, "label_lost", f"{MIG_CONFIG_LABEL} is {now!r}, not {wanted[node]!r}"))
            continue
        state = labels.get(MIG_STATE_LABEL)
        if state == "success" and node not in stale_success:
            done.append(node)
        elif state == "failed":
            findings.append(Finding(node, "failed", f"mig-manager could not apply {wanted[node]}"))
        elif elapsed_s >= timeout_s:
            findings.append(Finding(node, "stuck", f"{MIG_STATE_LABEL}={state or '(unset)'} after {elapsed_s:.0f} s "
                                                   f"(timeout {timeout_s:.0f} s)"))  # fmt: skip
        else:
            waiting.append(node)
    return Progress(tuple(done), tuple(waiting), tuple(findings))


# ----------------------------------------------------------------------------------------- summary


def _layout_text(mig_enabled: bool, profiles: Sequence[str], whole_owner: str | None = None) -> str:
    if not mig_enabled:
        return f"whole GPU ({whole_owner})" if whole_owner else "MIG disabled"
    counts = Counter(profiles)
    return " + ".join(f"{n}x{p}" for p, n in sorted(counts.items())) or "MIG enabled, no instances"


def plan_summary(plan: PlanResult) -> dict[str, Any]:
    """What the ``mig/plan`` asset records: per GPU the planned layout and tenants, the diff from
    the current layout (changed GPUs only), the windows, stranded slices and unmet demand."""
    layouts: dict[str, dict[str, str]] = {}
    diff: list[str] = []
    for g in plan.gpus:
        after = _layout_text(g.mig_enabled, [a.placement.profile for a in g.instances], g.whole_owner)
        tenants = ",".join(sorted(g.tenants))
        layouts.setdefault(g.gpu.node, {})[str(g.gpu.index)] = f"{after} [{tenants}]" if tenants else after
        if g.changed:
            current = g.gpu.layout
            before = _layout_text(current is not None, [p.profile for p in current or ()])
            diff.append(f"{g.gpu.node}/gpu{g.gpu.index}: {before} -> {after}")
    compute, memory = plan.stranded()
    return {
        "complete": plan.complete,
        "gpus_used": plan.gpus_used,
        "reconfigured": plan.reconfigured,
        "stranded": {"compute_slices": compute, "memory_slices": memory},
        "windows": [list(w) for w in plan.windows],
        "handovers": list(plan.handovers),
        "layouts": layouts,
        "diff": diff,
        "unmet": [str(u) for u in plan.unmet],
        "notes": list(plan.notes),
    }
