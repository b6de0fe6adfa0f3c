"""Node objects for a ground truth: what kubelet and GPU Feature Discovery would have registered.

One Node per host (name = the host's Kubernetes node name, the canonical host key) with:

* kubelet's well-known labels (``kubernetes.io/hostname``, ``kubernetes.io/os``, ``kubernetes.io/arch``);
* GPU Feature Discovery labels (NVIDIA k8s-device-plugin ``gpu-feature-discovery``):
  ``nvidia.com/gpu.present``, ``gpu.product``, ``gpu.count``, ``gpu.memory`` (MiB, as GFD reports
  NVML's total), ``gpu.family``, ``mig.capable``, and for NVL72 systems ``nvidia.com/gpu.clique``
  = ``<ClusterUUID>.<CliqueId>``: GFD reads both from NVML's GPU fabric info. The twin derives a
  stable ClusterUUID per NVLink domain (uuid5 of seed + domain) and uses the 1-based NVLink
  sub-domain (partition) number as the clique id, so hosts share a clique exactly when they share
  an NVLink partition in the ground truth;
* ``status.capacity``/``allocatable`` with ``nvidia.com/gpu`` (the device plugin's extended
  resource), cpu, memory, pods, ephemeral-storage; allocatable keeps kubelet's usual system
  reservation; a Ready condition; addresses; nodeInfo.

GFD labels are owned by the manager ``nfd-master`` (GFD publishes through NFD), everything else
by ``kubelet``, so a publisher's server-side apply meets the same owners as in a real cluster.
Vendor facts are data (tables below) keyed by the spec's ``gpu_model``.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from simulator.generator import GroundTruth


@dataclass(frozen=True)
class GpuFacts:
    product: str  # nvidia.com/gpu.product as GFD renders NVML's name (spaces -> '-')
    memory_mib: int  # nvidia.com/gpu.memory
    family: str  # nvidia.com/gpu.family
    mig_capable: bool
    arch: str  # kubernetes.io/arch of the host CPU
    cpus: int  # logical CPUs of the node
    memory_gib: int  # host memory


GPU_FACTS: dict[str, GpuFacts] = {
    # DGX H100: 8x H100 SXM5 80GB (NVML "NVIDIA H100 80GB HBM3", 81559 MiB), 2x Xeon 8480C (224 threads), 2 TiB.
    "H100-SXM5-80GB": GpuFacts("NVIDIA-H100-80GB-HBM3", 81559, "hopper", True, "amd64", 224, 2048),
    # DGX B200: 8x B200 (NVML "NVIDIA B200", 183359 MiB), 2x Xeon 8570 (224 threads), 2 TiB (4 TiB option).
    "B200-SXM-180GB": GpuFacts("NVIDIA-B200", 183359, "blackwell", True, "amd64", 224, 2048),
    # GB200 NVL72 compute tray: 4x B200 on 2 Grace CPUs (2x72 Arm cores, 2x 480 GB LPDDR5X).
    "B200 (GB200 NVL72)": GpuFacts("NVIDIA-GB200", 189471, "blackwell", True, "arm64", 144, 884),
}

KUBELET_VERSION = "v1.33.4"
GFD_PREFIX = "nvidia.com/"


def _fallback_facts(gpu_model: str) -> GpuFacts:
    """A plausible GFD rendering for a model the table lacks (label-safe product, memory from '80GB')."""
    product = "NVIDIA-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", gpu_model).strip("-._")
    m = re.search(r"(\d+)\s*GB", gpu_model)
    memory = int(m.group(1)) * 1024 if m else 0
    return GpuFacts(product[:63].rstrip("-._"), memory, "unknown", False, "amd64", 128, 1024)


def gpu_facts(gpu_model: str) -> GpuFacts:
    return GPU_FACTS.get(gpu_model) or _fallback_facts(gpu_model)


def clique_label(seed: int, nvlink_domain: str, sub_domain: str | None) -> str:
    """``<ClusterUUID>.<CliqueId>`` for an NVLink multi-node domain (GFD's nvidia.com/gpu.clique)."""
    cluster_uuid = uuid.uuid5(uuid.NAMESPACE_URL, f"gpufabric-sim:{seed}:{nvlink_domain}")
    m = re.search(r"-s(\d+)$", sub_domain or "")
    clique_id = int(m.group(1)) if m else 1
    return f"{cluster_uuid}.{clique_id}"


def node_objects(truth: GroundTruth) -> list[dict[str, Any]]:
    """One Node per host; ``metadata.x-twin-managers`` tells the store who owns which labels."""
    spec = truth.spec
    facts = gpu_facts(spec.node.gpu_model)
    multi_node_nvlink = spec.nvlink.kind != "hgx"
    out = []
    for i, host in enumerate(truth.hosts()):
        gpus = len(truth.gpus(host.id))
        labels = {
            "kubernetes.io/hostname": host.id,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": facts.arch,
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": facts.arch,
        }
        gfd = {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": facts.product,
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.memory": str(facts.memory_mib),
            "nvidia.com/gpu.family": facts.family,
            "nvidia.com/mig.capable": "true" if facts.mig_capable else "false",
        }
        domains = truth.host_domains.get(host.id)
        if multi_node_nvlink and domains is not None and domains.nvlink_domain:
            gfd["nvidia.com/gpu.clique"] = clique_label(spec.seed, domains.nvlink_domain, domains.nvlink_sub_domain)
        memory_ki = facts.memory_gib * 1024 * 1024
        capacity = {
            "cpu": str(facts.cpus),
            "memory": f"{memory_ki}Ki",
            "pods": "110",
            "ephemeral-storage": "3750000000Ki",
            "nvidia.com/gpu": str(gpus),
        }
        allocatable = {
            **capacity,
            "cpu": f"{facts.cpus * 1000 - 500}m",  # kube-reserved + system-reserved
            "memory": f"{memory_ki - 2 * 1024 * 1024}Ki",
            "ephemeral-storage": "3455999999Ki",
        }
        addresses = [{"type": "InternalIP", "address": _node_ip(i)}, {"type": "Hostname", "address": host.id}]
        out.append({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": host.id, "labels": {**labels, **gfd},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                         "x-twin-managers": {"nfd-master": sorted(gfd)}},
            "spec": {"providerID": f"gpufabric-sim://{spec.name}/{host.id}"},
            "status": {
                "capacity": capacity,
                "allocatable": allocatable,
                "conditions": [
                    {"type": t, "status": "False", "reason": r, "message": m,
                     "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                    for t, r, m in (
                        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                    )
                ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                      "message": "kubelet is posting ready status",
                      "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "addresses": addresses,
                "nodeInfo": {
                    "architecture": facts.arch, "operatingSystem": "linux", "kubeletVersion": KUBELET_VERSION,
                    "kubeProxyVersion": KUBELET_VERSION, "osImage": "Ubuntu 22.04.5 LTS (DGX OS 6)",
                    "kernelVersion": "5.15.0-1063-nvidia", "containerRuntimeVersion": "containerd://1.7.27",
                    "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, host.id).hex,
                    "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_OID, host.id)),
                    "bootID": str(uuid.uuid5(uuid.NAMESPACE_X500, host.id)),
                },
            },
        })
    return out


def _node_ip(index: int) -> str:
    return f"10.0.{index // 250}.{index % 250 + 1}"
