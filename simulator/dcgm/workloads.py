"""Simulated GPU workloads: deterministic functions of (node, GPU, MIG instance, time).

Tests must know what the exporter served, so nothing here is random. Every block of 8 nodes runs
the same mix (node position ``h % 8`` picks the role):

====  ===================================================================================
0-2   ``pretrain-bNN``: one training job over 3 nodes, high tensor activity, reports tokens/s
3     ``finetune-bNN``: a smaller training job, lower tensor activity, higher clock
4     ``agent-infer-bNN``: agent inference bursts, one pod per GPU, busy 25 s of every 70 s
5     MIG: every GPU split 3g + 2g + 2g; an inference pod, a small training pod, an idle slice
6-7   idle GPUs: no pod, every activity counter 0
====  ===================================================================================

Variation is sinusoidal with periods that divide an hour, so an hour of samples taken at an
interval dividing the period averages to the stated base value exactly: tests assert the base
values (within 1 percentage point) instead of re-deriving the twin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

HOUR_S = 3600


@dataclass(frozen=True)
class ModelInfo:
    """How a GPU model looks to DCGM."""

    dcgm_name: str  # modelName label
    max_clock_mhz: int
    idle_clock_mhz: int
    fb_total_mib: int
    idle_power_w: float
    tdp_w: float
    mig_layout: tuple[tuple[str, int], ...]  # (GPU_I_PROFILE, GPU_I_ID) per instance


H100 = ModelInfo(
    "NVIDIA H100 80GB HBM3", 1980, 345, 81559, 72.0, 700.0, (("3g.40gb", 2), ("2g.20gb", 3), ("2g.20gb", 4))
)
B200 = ModelInfo("NVIDIA B200", 1965, 345, 183359, 140.0, 1000.0, (("3g.90gb", 2), ("2g.45gb", 3), ("2g.45gb", 4)))
GB200 = ModelInfo("NVIDIA GB200", 2062, 345, 189471, 160.0, 1200.0, (("3g.95gb", 2), ("2g.47gb", 3), ("2g.47gb", 4)))

# spec.node.gpu_model -> what DCGM calls it (the marts match the peak-FLOPs seed on this name).
MODELS: dict[str, ModelInfo] = {
    "H100-SXM5-80GB": H100,
    "B200-SXM-180GB": B200,
    "B200 (GB200 NVL72)": GB200,
}


def model_info(gpu_model: str) -> ModelInfo:
    return MODELS.get(gpu_model, H100)


@dataclass(frozen=True)
class Activity:
    """Profiling ratios (0-1) of one GPU or MIG instance at one instant, and its pod."""

    sm_active: float = 0.0
    sm_occupancy: float = 0.0
    tensor_active: float = 0.0
    dram_active: float = 0.0
    fp16_active: float = 0.0
    fb_used_mib: int = 0
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    job: str | None = None

    @property
    def gr_engine_active(self) -> float:
        return self.sm_active


@dataclass(frozen=True)
class GpuState:
    """Everything the twin serves for one physical GPU at one instant."""

    sm_clock_mhz: int
    power_w: float
    instances: tuple[tuple[str | None, int | None, Activity], ...]  # (profile, GI id, activity)
    fb_total_mib: int
    temps: tuple[int, int] = (30, 35)  # gpu, memory

    # Device-level views of the instances: dcgm-exporter prints device fields once per instance
    # line with the same value, so these must not depend on which instance is printed.
    @property
    def busy(self) -> float:
        return max(act.sm_active for _, _, act in self.instances)

    @property
    def tensor(self) -> float:
        return max(act.tensor_active for _, _, act in self.instances)

    @property
    def dram(self) -> float:
        return max(act.dram_active for _, _, act in self.instances)


@dataclass(frozen=True)
class Job:
    """A training job's self-reported throughput (what model MFU needs)."""

    name: str
    namespace: str
    parameters: float
    tokens_per_s: float
    hosts: tuple[str, ...] = field(default_factory=tuple)


# Base values the tests assert against.
PRETRAIN = {"tensor": 0.62, "sm_active": 0.93, "sm_occupancy": 0.48, "dram": 0.41, "clock": 1755}
FINETUNE = {"tensor": 0.35, "sm_active": 0.80, "sm_occupancy": 0.30, "dram": 0.55, "clock": 1830}
BURST = {"period_s": 70, "busy_s": 25, "tensor": 0.48, "sm_active": 0.85, "busy_clock": 1980, "quiet_clock": 1410,
         "quiet_sm_active": 0.03}
MIG_INSTANCES = {"infer": 0.40, "train": 0.25, "clock": 1650}
PRETRAIN_PARAMS = 8e9
PRETRAIN_TOKENS_PER_S = 220_000.0
FINETUNE_PARAMS = 1.3e9
FINETUNE_TOKENS_PER_S = 90_000.0
PRETRAIN_HOSTS = 3


def role(host_index: int) -> str:
    return {0: "pretrain", 1: "pretrain", 2: "pretrain", 3: "finetune", 4: "inference", 5: "mig"}.get(
        host_index % 8, "idle"
    )


def _wave(t: float, period_s: float, amplitude: float, phase: float = 0.0) -> float:
    """Zero-mean over any whole number of periods (and over an hour: periods divide 3600)."""
    return amplitude * math.sin(2 * math.pi * (t / period_s) + phase)


def gpu_state(host_index: int, gpu_index: int, t: float, model: ModelInfo = H100) -> GpuState:
    """What DCGM measures on GPU ``gpu_index`` of host ``host_index`` at epoch second ``t``."""
    kind = role(host_index)
    block = host_index // 8
    fb = model.fb_total_mib
    if kind == "pretrain":
        job = f"pretrain-b{block:02d}"
        act = Activity(
            sm_active=PRETRAIN["sm_active"] + _wave(t, 300, 0.02, gpu_index),
            sm_occupancy=PRETRAIN["sm_occupancy"] + _wave(t, 600, 0.03, gpu_index),
            tensor_active=PRETRAIN["tensor"] + _wave(t, 300, 0.04, gpu_index * 0.7),
            dram_active=PRETRAIN["dram"] + _wave(t, 200, 0.05),
            fp16_active=0.05,
            fb_used_mib=int(fb * 0.9),
            namespace="training",
            pod=f"{job}-worker-{host_index % 8}",
            container="trainer",
            job=job,
        )
        return GpuState(int(PRETRAIN["clock"]), 0.85 * model.tdp_w, ((None, None, act),), fb, (71, 78))
    if kind == "finetune":
        job = f"finetune-b{block:02d}"
        act = Activity(
            sm_active=FINETUNE["sm_active"],
            sm_occupancy=FINETUNE["sm_occupancy"],
            tensor_active=FINETUNE["tensor"] + _wave(t, 120, 0.05, gpu_index),
            dram_active=FINETUNE["dram"],
            fb_used_mib=int(fb * 0.6),
            namespace="training",
            pod=f"{job}-0",
            container="trainer",
            job=job,
        )
        return GpuState(int(FINETUNE["clock"]), 0.7 * model.tdp_w, ((None, None, act),), fb, (66, 72))
    if kind == "inference":
        job = f"agent-infer-b{block:02d}"
        busy = (t + 7.5 * gpu_index) % BURST["period_s"] < BURST["busy_s"]
        act = Activity(
            sm_active=BURST["sm_active"] if busy else BURST["quiet_sm_active"],
            sm_occupancy=0.35 if busy else 0.01,
            tensor_active=BURST["tensor"] if busy else 0.0,
            dram_active=0.6 if busy else 0.02,
            fb_used_mib=int(fb * 0.75),
            namespace="agents",
            pod=f"{job}-g{gpu_index}",
            container="vllm",
            job=job,
        )
        clock = BURST["busy_clock"] if busy else BURST["quiet_clock"]
        return GpuState(int(clock), (0.8 if busy else 0.25) * model.tdp_w, ((None, None, act),), fb, (60, 66))
    if kind == "mig":
        instances = []
        for (profile, gi), use in zip(model.mig_layout, ("infer", "train", "idle"), strict=False):
            share = int(profile.split("g.")[0])
            slice_fb = fb * share // 7
            if use == "idle":
                act = Activity(fb_used_mib=0)
            else:
                tensor = MIG_INSTANCES[use]
                act = Activity(
                    sm_active=0.7,
                    sm_occupancy=0.25,
                    tensor_active=tensor,
                    dram_active=0.3,
                    fb_used_mib=slice_fb // 2,
                    namespace="agents" if use == "infer" else "research",
                    pod=f"mig-{use}-h{host_index}-g{gpu_index}",
                    container="worker",
                    job=f"mig-{use}-b{block:02d}",
                )
            instances.append((profile, gi, act))
        return GpuState(int(MIG_INSTANCES["clock"]), 0.5 * model.tdp_w, tuple(instances), fb, (55, 60))
    return GpuState(model.idle_clock_mhz, model.idle_power_w, ((None, None, Activity()),), fb, (31, 36))


def jobs(hostnames: list[str]) -> list[Job]:
    """Training jobs that report throughput, one pair per block of 8 hosts."""
    out: list[Job] = []
    for block in range((len(hostnames) + 7) // 8):
        members = [h for i, h in enumerate(hostnames) if i // 8 == block and role(i) == "pretrain"]
        if members:
            out.append(
                Job(f"pretrain-b{block:02d}", "training", PRETRAIN_PARAMS, PRETRAIN_TOKENS_PER_S, tuple(members))
            )
        tuned = [h for i, h in enumerate(hostnames) if i // 8 == block and role(i) == "finetune"]
        if tuned:
            out.append(Job(f"finetune-b{block:02d}", "training", FINETUNE_PARAMS, FINETUNE_TOKENS_PER_S, tuple(tuned)))
    return out


def job_tokens_per_s(job: Job, t: float) -> float:
    """Reported throughput wobbles around the base value (zero-mean over an hour)."""
    return job.tokens_per_s * (1.0 + _wave(t, 400, 0.05))
