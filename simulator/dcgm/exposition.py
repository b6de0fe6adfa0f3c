"""Render what dcgm-exporter would serve for one simulated node at one instant.

The lines look like dcgm-exporter 4.x with Kubernetes pod mapping on: ``# HELP``/``# TYPE`` per
field, one line per GPU (per MIG instance on MIG GPUs, where dcgm-exporter repeats the device-level
fields on every instance line), integers printed with ``%d`` and doubles with ``%f`` as the
exporter does, DCGM blank sentinels where a field is not supported. Even-numbered nodes use the
old ``Hostname`` label and odd ones the new ``hostname`` (dcgm-exporter #655), so every scrape
exercises both spellings. The fields are exactly those of ``counters.csv``.

MIG layouts applied on the control plane (issue 21): the node agent, playing mig-manager, writes
the instances it applied to a JSON file (:func:`load_mig_layouts` reads it); a GPU listed there is
served as those instances (``GPU_I_PROFILE``, ``GPU_I_ID`` labels, device-level fields repeated on
every instance line, as dcgm-exporter does; see the fixtures' ``sample-exposition-mig-a800``), idle
until a workload model for MIG pods exists. The file wins over the spec's built-in MIG role.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from simulator.dcgm import workloads as wl

COUNTERS_CSV = Path(__file__).with_name("counters.csv")
DRIVER_VERSION = "570.124.06"
BOOT_EPOCH_S = 1_750_000_000
INT64_NOT_SUPPORTED = "9223372036854775794"  # DCGM_INT64_NOT_SUPPORTED (0x7ffffffffffffff2)


@dataclass(frozen=True)
class Counter:
    field: str
    kind: str  # gauge | counter | label
    help: str


@cache
def load_counters(path: Path = COUNTERS_CSV) -> tuple[Counter, ...]:
    """dcgm-exporter's counters CSV format: field, type, help; '#' starts a comment."""
    out: list[Counter] = []
    with path.open(newline="") as handle:
        for row in csv.reader(line for line in handle if line.strip() and not line.lstrip().startswith("#")):
            field, kind, *help_parts = (part.strip() for part in row)
            out.append(Counter(field, kind, ", ".join(help_parts)))
    return tuple(out)


@dataclass(frozen=True)
class NodeInfo:
    """One simulated node as its exporter sees it."""

    hostname: str
    index: int  # position in the spec (drives the workload role)
    gpu_uuids: tuple[str, ...]
    model: wl.ModelInfo
    blank_memory_temp: bool = False  # serve DCGM_INT64_NOT_SUPPORTED for the memory temperature
    mig_layout: Mapping[int, tuple[tuple[str, int], ...]] | None = None  # GPU -> (profile, GI id), applied

    @property
    def hostname_label(self) -> str:
        return "Hostname" if self.index % 2 == 0 else "hostname"


def _job_label(act: wl.Activity) -> str:
    if act.job is None:
        return ""
    key = "training_kubeflow_org_job_name" if act.namespace == "training" else "batch_kubernetes_io_job_name"
    return f',{key}="{act.job}"'


def label_block(node: NodeInfo, gpu: int, profile: str | None, gi: int | None, act: wl.Activity) -> str:
    mig = f',GPU_I_PROFILE="{profile}",GPU_I_ID="{gi}"' if profile is not None else ""
    pod = (
        f',container="{act.container}",namespace="{act.namespace}",pod="{act.pod}",pod_uid=""{_job_label(act)}'
        if act.pod
        else ""
    )
    return (
        f'gpu="{gpu}",UUID="{node.gpu_uuids[gpu]}",pci_bus_id="00000000:{0x18 + gpu * 0x10:02X}:00.0",'
        f'device="nvidia{gpu}",modelName="{node.model.dcgm_name}"{mig},{node.hostname_label}="{node.hostname}",'
        f'DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"{pod}'
    )


ValueFn = Callable[[wl.GpuState, wl.Activity, float, NodeInfo], str]


def _f(value: float) -> str:
    return f"{value:f}"


def _power(s: wl.GpuState, a: wl.Activity, t: float, n: NodeInfo) -> str:
    return _f(s.power_w)


# Field -> how to print it for one (GPU state, instance activity, time).
VALUES: dict[str, ValueFn] = {
    "DCGM_FI_DEV_SM_CLOCK": lambda s, a, t, n: str(s.sm_clock_mhz),
    "DCGM_FI_DEV_MEM_CLOCK": lambda s, a, t, n: "2619",
    "DCGM_FI_DEV_MEMORY_TEMP": lambda s, a, t, n: INT64_NOT_SUPPORTED if n.blank_memory_temp else str(s.temps[1]),
    "DCGM_FI_DEV_GPU_TEMP": lambda s, a, t, n: str(s.temps[0]),
    "DCGM_FI_DEV_POWER_USAGE": _power,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": lambda s, a, t, n: str(int((t - BOOT_EPOCH_S) * s.power_w * 1000)),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": lambda s, a, t, n: "0",
    "DCGM_FI_DEV_GPU_UTIL": lambda s, a, t, n: str(round(100 * s.busy)),
    "DCGM_FI_DEV_MEM_COPY_UTIL": lambda s, a, t, n: str(round(100 * s.dram)),
    "DCGM_FI_DEV_XID_ERRORS": lambda s, a, t, n: "0",
    "DCGM_FI_DEV_POWER_VIOLATION": lambda s, a, t, n: "0",
    "DCGM_FI_DEV_THERMAL_VIOLATION": lambda s, a, t, n: "0",
    "DCGM_FI_DEV_FB_FREE": lambda s, a, t, n: str(_fb_total(s, a) - a.fb_used_mib),
    "DCGM_FI_DEV_FB_USED": lambda s, a, t, n: str(a.fb_used_mib),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": lambda s, a, t, n: "0",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": lambda s, a, t, n: "0",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda s, a, t, n: "0",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": lambda s, a, t, n: str(int((t - BOOT_EPOCH_S) * 1000 * (1 + s.busy))),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": lambda s, a, t, n: _f(a.gr_engine_active),
    "DCGM_FI_PROF_SM_ACTIVE": lambda s, a, t, n: _f(a.sm_active),
    "DCGM_FI_PROF_SM_OCCUPANCY": lambda s, a, t, n: _f(a.sm_occupancy),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": lambda s, a, t, n: _f(a.tensor_active),
    "DCGM_FI_PROF_DRAM_ACTIVE": lambda s, a, t, n: _f(a.dram_active),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": lambda s, a, t, n: _f(a.fp16_active),
    "DCGM_FI_PROF_PCIE_TX_BYTES": lambda s, a, t, n: str(int(2e9 * s.busy) + 40_000_000),
    "DCGM_FI_PROF_PCIE_RX_BYTES": lambda s, a, t, n: str(int(3e9 * s.busy) + 45_000_000),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": lambda s, a, t, n: str(int(1.5e11 * s.tensor)),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": lambda s, a, t, n: str(int(1.5e11 * s.tensor)),
}


def _fb_total(state: wl.GpuState, act: wl.Activity) -> int:
    return state.fb_total_mib


def render_node(node: NodeInfo, t: float, counters: tuple[Counter, ...] | None = None) -> str:
    """The exposition body for ``node`` at epoch second ``t``."""
    counters = counters or load_counters()
    states = [wl.gpu_state(node.index, g, t, node.model) for g in range(len(node.gpu_uuids))]
    for g, parts in (node.mig_layout or {}).items():
        if 0 <= g < len(states):
            states[g] = replace(states[g], instances=tuple((p, gi, wl.Activity()) for p, gi in parts))
    blocks = [
        [(label_block(node, g, profile, gi, act), act) for profile, gi, act in state.instances]
        for g, state in enumerate(states)
    ]
    out: list[str] = []
    for counter in counters:
        if counter.kind == "label":
            continue
        value_of = VALUES.get(counter.field)
        if value_of is None:
            continue  # a field the twin has no model for is not served (as a GPU that lacks it)
        out.append(f"# HELP {counter.field} {counter.help}")
        out.append(f"# TYPE {counter.field} {counter.kind}")
        for state, gpu_blocks in zip(states, blocks, strict=True):
            for block, act in gpu_blocks:
                out.append(f"{counter.field}{{{block}}} {value_of(state, act, t, node)}")
    out.append("")
    return "\n".join(out)


def render_workloads(hostnames: list[str], t: float) -> str:
    """The training jobs' own metrics endpoint: throughput and model size (for model MFU)."""
    out = [
        "# HELP gpufabric_workload_tokens_per_second Training throughput reported by the job.",
        "# TYPE gpufabric_workload_tokens_per_second gauge",
    ]
    jobs = wl.jobs(hostnames)
    for job in jobs:
        out.append(
            f'gpufabric_workload_tokens_per_second{{namespace="{job.namespace}",job_name="{job.name}"}} '
            f"{wl.job_tokens_per_s(job, t):f}"
        )
    out += [
        "# HELP gpufabric_workload_model_parameters Parameter count of the model being trained.",
        "# TYPE gpufabric_workload_model_parameters gauge",
    ]
    for job in jobs:
        out.append(f'gpufabric_workload_model_parameters{{namespace="{job.namespace}",job_name="{job.name}"}} '
                   f"{int(job.parameters)}")
    out.append("")
    return "\n".join(out)


def nodes_of(truth: object, *, blank_memory_temp_every: int = 8) -> list[NodeInfo]:
    """NodeInfo for every host of a simulator GroundTruth (duck-typed to keep this module light)."""
    spec = truth.spec  # type: ignore[attr-defined]
    model = wl.model_info(spec.node.gpu_model)
    nodes = []
    for i, host in enumerate(truth.hosts()):  # type: ignore[attr-defined]
        gpus = sorted(truth.gpus(host.id), key=lambda d: d.attributes["index"])  # type: ignore[attr-defined]
        nodes.append(
            NodeInfo(
                hostname=host.name,
                index=i,
                gpu_uuids=tuple(g.id for g in gpus),
                model=model,
                blank_memory_temp=blank_memory_temp_every > 0 and i % blank_memory_temp_every == 7,
            )
        )
    return nodes


MAX_LAYOUT_FILE = 16 << 20


def load_mig_layouts(path: Path) -> dict[str, dict[int, tuple[tuple[str, int], ...]]]:
    """node -> GPU index -> (profile, GPU instance id), from the node agent's file. A missing file
    is no layouts; a file that is not what the agent writes raises ValueError saying why."""
    try:
        if path.stat().st_size > MAX_LAYOUT_FILE:
            raise ValueError(f"{path}: over {MAX_LAYOUT_FILE} bytes; not a layout file")
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected an object of nodes")
    out: dict[str, dict[int, tuple[tuple[str, int], ...]]] = {}
    for node, gpus in doc.items():
        if not isinstance(gpus, dict):
            raise ValueError(f"{path}: node {node!r}: expected an object of GPUs")
        per: dict[int, tuple[tuple[str, int], ...]] = {}
        for index, parts in gpus.items():
            if not str(index).isdigit() or not isinstance(parts, list):
                raise ValueError(f"{path}: node {node!r} GPU {index!r}: expected a list of instances")
            items = []
            for part in parts:
                if (not isinstance(part, list) or len(part) != 2 or not isinstance(part[0], str)
                        or not isinstance(part[1], int) or isinstance(part[1], bool)):  # fmt: skip
                    raise ValueError(f"{path}: node {node!r} GPU {index}: {part!r} is not [profile, id]")
                items.append((part[0], part[1]))
            per[int(index)] = tuple(items)
        out[str(node)] = per
    return out
