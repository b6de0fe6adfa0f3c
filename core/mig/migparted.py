"""mig-parted configs: load one (text in, validated model out), check it against the placement
rules, and render a plan as one (part 3 of issue 21, rendering only).

The format is NVIDIA/mig-parted's ``api/spec/v1`` (``version: v1``, ``mig-configs:`` name -> list
of ``{device-filter?, devices, mig-enabled, mig-devices}``); :func:`load_config` enforces the
rules of its ``Spec.UnmarshalJSON`` / ``MigConfigSpec.UnmarshalJSON`` (required fields, no unknown
field, ``devices`` is ``all`` or a list of indices, ``device-filter`` a string or a list,
``mig-devices`` required when enabled and empty when disabled, counts not negative and not all
zero) and rejects duplicate keys, which a YAML reader would otherwise resolve silently.

A rendered plan has one named config per distinct node layout, each listing the node's GPUs by
index (``devices: [0, 3]``) with the full layout they should have -- spare instances included, so
mig-parted does not tear down what the plan keeps. No ``device-filter``: an ID list that missed a
part would make mig-parted skip the entry silently. Config names are the values of the node
label ``nvidia.com/mig.config``: ``<prefix>-<12 hex of the layout's digest>``, at most 63
characters, stable for a layout and unique per layout.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from core.mig.layout import counts_from_mapping, layout_space
from core.mig.planner import PlanResult
from core.mig.profiles import GpuModel, models_for_device_id, models_with_profiles

MAX_TEXT = 4 << 20  # NVIDIA's config-default.yaml is ~12 KiB
LABEL_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
# go-nvlib's profile format: [<C>c.]<G>g.<M>gb[+attr[.attr]][-attr] (1g.10gb, 1c.3g.40gb, 1g.24gb+me.all, 1g.24gb-me)
PROFILE_FORMAT_RE = re.compile(r"(?:[1-9]\d?c\.)?[1-9]\d?g\.\d{1,4}gb(?:\+[a-z]+(?:\.[a-z]+)*)*(?:-[a-z]+)?\Z")
ENTRY_FIELDS = ("device-filter", "devices", "mig-enabled", "mig-devices")


class MigConfigError(ValueError):
    """A mig-parted config that mig-parted would refuse (or that we cannot read); says where."""


@dataclass(frozen=True)
class DeviceEntry:
    """One entry of a named config: which devices, and what they should be."""

    devices: str | tuple[int, ...]  # "all" or device indices
    device_filter: tuple[str, ...]  # () = no filter
    mig_enabled: bool
    mig_devices: tuple[tuple[str, int], ...]  # (profile, count), as written
    path: str  # where it is in the file, for messages

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for name, n in self.mig_devices:
            out[name] += n
        return {k: v for k, v in out.items() if v}


@dataclass(frozen=True)
class MigPartedConfig:
    version: str
    configs: dict[str, tuple[DeviceEntry, ...]]


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:
            raise MigConfigError(f"line {key_node.start_mark.line + 1}: a mapping key must be a scalar") from None
        if duplicate:
            raise MigConfigError(f"line {key_node.start_mark.line + 1}: key {key!r} given twice")
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_config(text: str) -> MigPartedConfig:
    """Parse and validate a mig-parted config (the text of ``config.yaml``)."""
    if not isinstance(text, str):
        raise MigConfigError(f"expected the config's text, got {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise MigConfigError(f"{len(text):,} characters: over the {MAX_TEXT:,} a mig-parted config can be")
    try:
        doc = yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise MigConfigError(f"{where}not YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise MigConfigError(f"not YAML: {exc}") from None
    except RecursionError:
        raise MigConfigError("nested too deeply to be a mig-parted config") from None
    if not isinstance(doc, dict):
        raise MigConfigError(f"the top level must be a mapping, not {type(doc).__name__}")
    if doc and "version" not in doc:
        raise MigConfigError("missing 'version' field")
    for key in doc:
        if key not in ("version", "mig-configs"):
            raise MigConfigError(f"unexpected field {key!r} (only 'version' and 'mig-configs')")
    if doc.get("version") != "v1":
        raise MigConfigError(f"unknown version {doc.get('version')!r} (mig-parted reads v1)")
    raw = doc.get("mig-configs")
    if not isinstance(raw, dict) or not raw:
        raise MigConfigError("'mig-configs' must be a mapping with at least one entry")
    configs: dict[str, tuple[DeviceEntry, ...]] = {}
    for name, entries in raw.items():
        if not isinstance(name, str):
            raise MigConfigError(f"mig-configs: config name {name!r} is not a string")
        if not isinstance(entries, list) or not entries:
            raise MigConfigError(f"mig-configs.{name}: must be a list with at least one entry")
        configs[name] = tuple(_entry(e, f"mig-configs.{name}[{i}]") for i, e in enumerate(entries))
    return MigPartedConfig("v1", configs)


def _entry(raw: object, path: str) -> DeviceEntry:
    if not isinstance(raw, dict):
        raise MigConfigError(f"{path}: an entry must be a mapping")
    for key in raw:
        if key not in ENTRY_FIELDS:
            raise MigConfigError(f"{path}: unexpected field {key!r}")
    for key in ("devices", "mig-enabled"):
        if key not in raw:
            raise MigConfigError(f"{path}: missing required field {key!r}")
    flt = raw.get("device-filter")
    if flt is None and "device-filter" in raw:
        raise MigConfigError(f"{path}.device-filter: empty")
    if isinstance(flt, str):
        device_filter: tuple[str, ...] = (flt,)
    elif isinstance(flt, list) and all(isinstance(f, str) for f in flt):
        device_filter = tuple(flt)
    elif flt is None:
        device_filter = ()
    else:
        raise MigConfigError(f"{path}.device-filter: a string or a list of strings, not {flt!r}")
    devices = raw["devices"]
    if isinstance(devices, str):
        if devices != "all":
            raise MigConfigError(f"{path}.devices: the only string allowed is 'all', not {devices!r}")
        dev: str | tuple[int, ...] = "all"
    elif isinstance(devices, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices):
        dev = tuple(devices)
    else:
        raise MigConfigError(f"{path}.devices: 'all' or a list of device indices, not {devices!r}")
    enabled = raw["mig-enabled"]
    if not isinstance(enabled, bool):
        raise MigConfigError(f"{path}.mig-enabled: true or false, not {enabled!r}")
    mig = raw.get("mig-devices")
    if "mig-devices" in raw and not isinstance(mig, dict):
        raise MigConfigError(f"{path}.mig-devices: a mapping of profile to count, not {mig!r}")
    pairs: list[tuple[str, int]] = []
    for profile, count in (mig or {}).items():
        if not isinstance(profile, str) or not PROFILE_FORMAT_RE.match(profile):
            raise MigConfigError(f"{path}.mig-devices: {profile!r} is not a MIG profile name")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise MigConfigError(f"{path}.mig-devices.{profile}: count {count!r} is not a non-negative integer")
        pairs.append((profile, count))
    if pairs and not any(n for _, n in pairs):
        raise MigConfigError(f"{path}.mig-devices: all counts are 0")
    if enabled and "mig-devices" not in raw:
        raise MigConfigError(f"{path}: 'mig-devices' is required when 'mig-enabled' is true")
    if not enabled and pairs:
        raise MigConfigError(f"{path}: MIG devices listed while 'mig-enabled' is false")
    return DeviceEntry(dev, device_filter, enabled, tuple(pairs), path)


@dataclass(frozen=True)
class EntryCheck:
    """How one config entry fares under our placement rules."""

    config: str
    path: str
    status: str  # valid | invalid | disabled | unmodelled
    models: tuple[str, ...]  # valid: where it is; invalid: where it was checked
    detail: str


def why_infeasible(model: GpuModel, counts: Mapping[str, int]) -> str:
    """The reason a multiset has no valid placement on ``model`` (the first rule that explains it)."""
    compute = sum(model.profile(p).compute_slices * n for p, n in counts.items())
    if compute > model.compute_slices:
        return f"{compute} compute slices, {model.name} has {model.compute_slices}"
    for p, n in counts.items():
        if n > model.profile(p).max_instances:
            return f"{n} x {p}, at most {model.profile(p).max_instances}"
    media = sum(n for p, n in counts.items() if model.profile(p).media_extensions)
    if media > model.max_media_instances:
        return f"{media} +me instances, at most {model.max_media_instances}"
    memory = sum(model.profile(p).memory_slices * n for p, n in counts.items())
    if memory > model.memory_slices:
        return f"{memory} memory slices, {model.name} has {model.memory_slices}"
    return "no placement of these instances keeps their memory slices apart at the allowed starts"


def check_config(config: MigPartedConfig) -> list[EntryCheck]:
    """Every entry of every named config, checked on the modelled GPUs it can apply to: those its
    device-filter names, or without a filter every model that offers all its profiles."""
    out: list[EntryCheck] = []
    for name, entries in config.configs.items():
        for entry in entries:
            out.append(_check_entry(name, entry))
    return out


def _check_entry(name: str, entry: DeviceEntry) -> EntryCheck:
    counts = entry.counts()
    if not entry.mig_enabled:
        return EntryCheck(name, entry.path, "disabled", (), "MIG disabled: no layout to check")
    if entry.device_filter:
        candidates = tuple(dict.fromkeys(m for f in entry.device_filter for m in models_for_device_id(f)))
        if not candidates:
            ids = ", ".join(entry.device_filter)
            return EntryCheck(name, entry.path, "unmodelled", (), f"device-filter {ids} names no modelled GPU")
        offering = tuple(m for m in candidates if set(counts) <= set(m.profile_names))
        if not offering:
            missing = sorted(set(counts) - set(candidates[0].profile_names))
            detail = f"{', '.join(m.name for m in candidates)} offer(s) no {', '.join(missing)}"
            return EntryCheck(name, entry.path, "invalid", tuple(m.name for m in candidates), detail)
    else:
        offering = models_with_profiles(counts)
        if not offering:
            detail = f"no modelled GPU offers all of {', '.join(sorted(counts))}"
            return EntryCheck(name, entry.path, "unmodelled", (), detail)
    valid = tuple(m for m in offering if layout_space(m).is_feasible(counts_from_mapping(m, counts)))
    if valid:
        return EntryCheck(name, entry.path, "valid", tuple(m.name for m in valid), "")
    detail = "; ".join(f"{m.name}: {why_infeasible(m, counts)}" for m in offering)
    return EntryCheck(name, entry.path, "invalid", tuple(m.name for m in offering), detail)


@dataclass(frozen=True)
class RenderedConfig:
    text: str  # the config.yaml mig-parted reads
    node_config: dict[str, str]  # node -> config name: the nvidia.com/mig.config label value
    descriptions: dict[str, str]  # config name -> a readable summary


GpuState = tuple[int, bool, Mapping[str, int]]  # (device index, MIG enabled, profile -> count)


def render(nodes: Mapping[str, Sequence[GpuState]], prefix: str = "gpufabric") -> RenderedConfig:
    """A mig-parted config with one named config per distinct node layout."""
    if len(prefix) > 50 or not prefix or LABEL_VALUE_RE.match(prefix) is None:
        raise ValueError(f"config name prefix {prefix!r} must be a label value of at most 50 characters")
    configs: dict[str, list[tuple[tuple[int, ...], bool, dict[str, int]]]] = {}
    node_config: dict[str, str] = {}
    descriptions: dict[str, str] = {}
    for node in sorted(nodes):
        states = sorted(nodes[node], key=lambda s: s[0])
        indices = [s[0] for s in states]
        if len(set(indices)) != len(indices):
            raise ValueError(f"node {node!r} lists device index {Counter(indices).most_common(1)[0][0]} twice")
        grouped: dict[tuple[bool, tuple[tuple[str, int], ...]], list[int]] = defaultdict(list)
        for index, enabled, mapping in states:
            clean = tuple(sorted((p, n) for p, n in mapping.items() if n))
            if not enabled and clean:
                raise ValueError(f"node {node!r} GPU {index}: instances listed with MIG disabled")
            grouped[(enabled, clean)].append(index)
        entries = sorted(
            ((tuple(ix), enabled, dict(clean)) for (enabled, clean), ix in grouped.items()), key=lambda e: e[0]
        )
        canonical = json.dumps([[list(ix), en, sorted(m.items())] for ix, en, m in entries], separators=(",", ":"))
        name = f"{prefix}-{hashlib.sha256(canonical.encode()).hexdigest()[:12]}"
        assert len(name) <= 63 and LABEL_VALUE_RE.match(name), name
        configs.setdefault(name, entries)
        node_config[node] = name
        descriptions[name] = "; ".join(
            f"GPU {','.join(map(str, ix))}: "
            + (("MIG " + (" + ".join(f"{n}x{p}" for p, n in m.items()) or "enabled, no instances")) if en else "no MIG")
            for ix, en, m in entries
        )
    lines = ["version: v1", "mig-configs:"]
    for name in sorted(configs):
        lines.append(f"  {name}:")
        for ix, enabled, mapping in configs[name]:
            lines.append(f"    - devices: [{', '.join(map(str, ix))}]")
            lines.append(f"      mig-enabled: {'true' if enabled else 'false'}")
            if enabled:
                if mapping:
                    lines.append("      mig-devices:")
                    lines += [f'        "{p}": {n}' for p, n in sorted(mapping.items())]
                else:
                    lines.append("      mig-devices: {}")
    return RenderedConfig("\n".join(lines) + "\n", node_config, descriptions)


def render_plan(plan: PlanResult, prefix: str = "gpufabric", through_window: int | None = None) -> RenderedConfig:
    """The plan's node layouts as a mig-parted config. ``through_window`` k renders the state after
    the first k windows (later windows' GPUs still as they are now); None renders the target."""
    applied = set(plan.drain_order() if through_window is None else sum(plan.windows[:through_window], ()))
    nodes: dict[str, list[GpuState]] = defaultdict(list)
    for g in plan.gpus:
        if g.changed and g.gpu.id not in applied:
            layout, enabled = g.gpu.layout or (), g.gpu.layout is not None
        else:
            layout, enabled = g.layout, g.mig_enabled
        nodes[g.gpu.node].append((g.gpu.index, enabled, dict(Counter(p.profile for p in layout))))
    return render(nodes, prefix)
