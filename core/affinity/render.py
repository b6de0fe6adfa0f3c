"""What the cluster should be told about each node's GPU-NIC affinity (issue 23, part 4). Pure.

- a node label ``topology.<prefix>/gpu-nic-affinity``: ``aligned`` | ``degraded`` | ``unknown``
  (:func:`affinity_class`), so a scheduler or a person can select or avoid nodes by it;
- a node annotation ``topology.<prefix>/gpu-nic-map``: the compact GPU -> NIC -> rail map as JSON
  (:func:`affinity_map`), too long and too structured for a label value;
- a kubelet configuration snippet per node pool (:func:`kubelet_config`): Topology Manager policy
  and scope and the CPU manager, with the reason for the choice;
- for DRA users, a ``ResourceClaimTemplate`` (:func:`resource_claim_template`) that pairs a GPU
  with a NIC under the same PCIe root (``matchAttribute: resource.kubernetes.io/pcieRoot``).

Sources: Kubernetes "Control Topology Management Policies on a node" and "Control CPU Management
Policies on the Node" (kubernetes.io/docs/tasks/administer-cluster/); kubelet's own types and
validation of ``kubelet.config.k8s.io/v1beta1`` (k8s.io/kubelet v0.36.5 ``config/v1beta1/types.go``,
k8s.io/kubernetes v1.36.5 ``pkg/kubelet/apis/config/validation``, ``pkg/kubelet/cm/cpumanager``);
"Standard Device Attributes for Dynamic Resource Allocation"
(kubernetes.io/docs/reference/node/dra-standard-device-attributes/) and ``resource.k8s.io/v1``
(k8s.io/api v0.36.5 ``resource/v1/types.go``). See docs/affinity.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from core.affinity.derive import AffinityFinding, NodeAffinity

LABEL_NAME = "gpu-nic-affinity"
ANNOTATION_NAME = "gpu-nic-map"
MAP_SCHEMA = 1
ALIGNED, DEGRADED, UNKNOWN = "aligned", "degraded", "unknown"
SWITCH_LOCAL = frozenset({"PSB", "PIX", "PXB"})
"""Classes under one PCIe switch hierarchy, below the root complex: GPUDirect RDMA's good case
(the GPU and its NIC share the root, hence the NUMA node)."""


def label_key(prefix: str, name: str) -> str:
    """``topology.<prefix>/<name>``: beside the scheme's ``fabric.<prefix>/`` and
    ``accelerator.<prefix>/`` keys (core/publish/labels.py), one subdomain for what is inside a node."""
    return f"topology.{prefix}/{name}"


def affinity_class(node: NodeAffinity, findings: Iterable[AffinityFinding] = ()) -> str:
    """``unknown`` when the matrix shows a GPU with no compute NIC (nothing to align with);
    ``degraded`` when a GPU's best NIC is above its PCIe switch (PHB, NODE, SYS) or any affinity
    finding names the node (``findings``: e.g. the fleet ones, which ``node.findings`` lacks);
    ``aligned`` otherwise."""
    if not node.gpus or any(g.path_class is None for g in node.gpus):
        return UNKNOWN
    own = [f for f in (*node.findings, *findings) if f.host == node.host]
    if own or any(g.path_class not in SWITCH_LOCAL for g in node.gpus):
        return DEGRADED
    return ALIGNED


def affinity_map(node: NodeAffinity) -> str:
    """The annotation value: compact JSON, one entry per GPU (``g`` index, ``nics`` best NICs,
    ``c`` path class, ``numa``, ``rail``); ``v`` is the schema of this value."""
    gpus = [
        {"g": g.gpu, "nics": list(g.best_nics), "c": g.path_class, "numa": g.numa_node, "rail": g.rail}
        for g in node.gpus
    ]
    return json.dumps({"v": MAP_SCHEMA, "gpus": gpus}, separators=(",", ":"))


def node_patch(node: NodeAffinity, prefix: str, findings: Iterable[AffinityFinding] = ()) -> dict[str, Any]:
    """The partial Node a server-side apply sends: the label and the annotation, nothing else."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.host,
            "labels": {label_key(prefix, LABEL_NAME): affinity_class(node, findings)},
            "annotations": {label_key(prefix, ANNOTATION_NAME): affinity_map(node)},
        },
    }


# --- kubelet ---------------------------------------------------------------------------------------

KUBELET_API = ("kubelet.config.k8s.io/v1beta1", "KubeletConfiguration")
TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
TOPOLOGY_SCOPES = ("container", "pod")
CPU_POLICIES = ("none", "static")
KUBELET_FIELDS: Mapping[str, str] = {
    "apiVersion": "string",
    "kind": "string",
    "topologyManagerPolicy": "enum",
    "topologyManagerScope": "enum",
    "cpuManagerPolicy": "enum",
    "reservedSystemCPUs": "cpuset",
}
"""The fields we emit, spelled as kubelet's v1beta1 JSON tags (types.go); anything else is a typo."""
_CPUSET = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


@dataclass(frozen=True)
class KubeletSnippet:
    pool: str
    config: dict[str, Any]
    reason: str
    nodes: int

    def to_yaml(self) -> str:
        """The snippet with the reason as comments (merged into the pool's kubelet config file)."""
        lines = [f"# gpufabric: kubelet settings for node pool {self.pool} ({self.nodes} nodes)"]
        lines += [f"# {part}" for part in self.reason.split("\n")]
        return "\n".join(lines) + "\n" + yaml.safe_dump(self.config, sort_keys=False)


def kubelet_config(pool: str, nodes: Sequence[NodeAffinity], *, max_gpus_per_pod: int | None = None) -> KubeletSnippet:
    """Topology Manager and CPU manager for one node pool, with why.

    - every node :func:`numa_aligned` and pods that fit one NUMA node (``max_gpus_per_pod`` at most the GPUs
      each NUMA node has): ``single-numa-node``, scope ``pod`` -- the pod's GPUs, NICs and CPUs
      all from one socket, refused otherwise;
    - every node aligned but pods may ask for more GPUs than a NUMA node has (the default:
      whole-node training pods span both sockets of a DGX): ``restricted``, scope ``pod`` --
      ``single-numa-node`` would refuse every such pod, ``restricted`` admits the narrowest NUMA
      set that can hold it and refuses only a worse one;
    - any node not aligned: ``best-effort``, scope ``pod`` -- some GPU has no NIC
      on its socket, so a policy that refuses non-preferred alignment would refuse pods that
      can only run unaligned there; align what can be, admit the rest.

    CPU manager ``static`` (exclusive CPUs for Guaranteed pods with integer CPU requests, the only
    way the Topology Manager can align CPUs with the devices), with ``reservedSystemCPUs`` = the
    first CPU of each range of every NUMA node's CPU list (one core and its SMT sibling per
    socket on the captures' layout) because kubelet's static policy refuses a zero CPU
    reservation. Without CPU lists in the matrices the CPU manager stays ``none``.
    """
    aligned = [numa_aligned(n) for n in nodes]
    per_numa = min((_gpus_per_numa(n) for n in nodes), default=0)
    if nodes and all(aligned):
        if max_gpus_per_pod is not None and 0 < max_gpus_per_pod <= per_numa:
            policy = "single-numa-node"
            why = (f"every GPU of the pool's {len(nodes)} nodes has a NIC under its own PCIe switch, and pods ask for "
                   f"at most {max_gpus_per_pod} GPUs, which one NUMA node ({per_numa} GPUs) holds: single-numa-node "
                   "puts a pod's GPUs, NICs and CPUs on one socket and refuses it otherwise")  # fmt: skip
        else:
            policy = "restricted"
            why = (f"every GPU of the pool's {len(nodes)} nodes has a NIC under its own PCIe switch, but pods may ask "
                   f"for more GPUs than one NUMA node holds ({per_numa}): single-numa-node would refuse them; "
                   "restricted admits the narrowest NUMA set that fits and refuses a wider one")  # fmt: skip
    else:
        bad = sorted(n.host for n, ok in zip(nodes, aligned, strict=True) if not ok)
        policy = "best-effort"
        why = (f"{len(bad)} of {len(nodes)} nodes are not aligned ({', '.join(bad[:5])}"
               f"{', ...' if len(bad) > 5 else ''}): a GPU there has no NIC under its own PCIe switch, so restricted "
               "or single-numa-node could refuse a pod bound there (admission fails on the node, the pod is not "
               "rescheduled); best-effort aligns what it can. Repair those nodes or move them to a pool of their "
               "own, and this pool can run restricted")  # fmt: skip
    config: dict[str, Any] = {
        "apiVersion": KUBELET_API[0],
        "kind": KUBELET_API[1],
        "topologyManagerPolicy": policy,
        "topologyManagerScope": "pod",
    }
    reserved = _reserved_cpus(nodes)
    if reserved:
        config["cpuManagerPolicy"] = "static"
        config["reservedSystemCPUs"] = reserved
        cpu_why = (f"cpuManagerPolicy static so Guaranteed pods get exclusive CPUs the Topology Manager can align; "
                   f"reservedSystemCPUs {reserved} (the first CPU of each range per NUMA node) because the static "
                   "policy needs a non-zero CPU reservation")  # fmt: skip
    else:
        config["cpuManagerPolicy"] = "none"
        cpu_why = "cpuManagerPolicy none: the matrices give no CPU lists to reserve system CPUs from"
    reason = f"topologyManagerPolicy {policy}, scope pod (a pod's containers aligned together): {why}.\n{cpu_why}."
    return KubeletSnippet(pool, config, reason, len(nodes))


def numa_aligned(node: NodeAffinity) -> bool:
    """Every GPU has a compute NIC under its own PCIe switch (so on its own root and NUMA node):
    what the Topology Manager can align. Findings that do not move a NIC (a rail cabled to the
    wrong leaf, a matrix unlike the fleet's) do not count here."""
    return bool(node.gpus) and all(g.path_class in SWITCH_LOCAL for g in node.gpus)


def _gpus_per_numa(node: NodeAffinity) -> int:
    counts: dict[int | None, int] = {}
    for g in node.gpus:
        counts[g.numa_node] = counts.get(g.numa_node, 0) + 1
    return min(counts.values()) if counts and None not in counts else 0


def _reserved_cpus(nodes: Sequence[NodeAffinity]) -> str | None:
    """One CPU per range of each NUMA node's list, the same on every node of the pool (else None:
    a pool whose nodes disagree gets no CPU reservation from us)."""
    per_node = set()
    for n in nodes:
        lists = {g.numa_node: g.cpu_affinity for g in n.gpus}
        if not lists or any(v is None or not _CPUSET.match(v) for v in lists.values()):
            return None
        firsts = sorted({int(part.split("-")[0]) for v in lists.values() if v for part in v.split(",")})
        per_node.add(",".join(map(str, firsts)))
    return per_node.pop() if len(per_node) == 1 else None


def validate_kubelet_config(doc: Mapping[str, Any]) -> list[str]:
    """Problems kubelet would refuse this snippet for (empty when none): an unknown field (its
    v1beta1 decoder is strict), an enum value kubelet's validation rejects, a reservedSystemCPUs
    ``cpuset.Parse`` cannot read, ``static`` without a CPU reservation (the CPU manager's
    "the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero")."""
    problems = [f"unknown field {k!r}" for k in doc if k not in KUBELET_FIELDS]
    if (doc.get("apiVersion"), doc.get("kind")) != KUBELET_API:
        problems.append(f"apiVersion/kind must be {KUBELET_API[0]} / {KUBELET_API[1]}")
    for key, allowed in (("topologyManagerPolicy", TOPOLOGY_POLICIES), ("topologyManagerScope", TOPOLOGY_SCOPES),
                         ("cpuManagerPolicy", CPU_POLICIES)):  # fmt: skip
        if key in doc and doc[key] not in allowed:
            problems.append(f"{key} {doc[key]!r} must be one of {', '.join(allowed)}")
    cpus = doc.get("reservedSystemCPUs")
    if cpus is not None and (not isinstance(cpus, str) or not _CPUSET.match(cpus) or not _ranges_ascend(cpus)):
        problems.append(f"reservedSystemCPUs {cpus!r} is not a CPU list such as 0-1,56")
    if doc.get("cpuManagerPolicy") == "static" and not cpus:
        problems.append("cpuManagerPolicy static needs a CPU reservation (reservedSystemCPUs)")
    return problems


def _ranges_ascend(text: str) -> bool:
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if hi and int(hi) < int(lo):
            return False
    return True


# --- DRA ----------------------------------------------------------------------------------------------

PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
"""The standard DRA device attribute naming a PCI device's root complex (``pci<domain>:<bus>``);
drivers publish it (k8s.io/dynamic-resource-allocation/deviceattribute)."""
DRA_API = "resource.k8s.io/v1"  # GA since Kubernetes 1.34; the pinned v1.36 API server serves it


def resource_claim_template(
    name: str,
    namespace: str,
    *,
    gpu_class: str = "gpu.nvidia.com",
    nic_class: str = "dranet",
    pairs: int = 1,
) -> dict[str, Any]:
    """A claim template for ``pairs`` GPU+NIC pairs, each GPU with a NIC under the same PCIe root.

    ``gpu_class``: NVIDIA's DRA driver for GPUs; ``nic_class``: the DraNet driver's class (use your
    NIC driver's DeviceClass). One constraint per pair: with several pairs, each pair shares a
    root, not all of them (one root holds one GPU and one NIC on the boards modelled here)."""
    requests: list[dict[str, Any]] = []
    constraints: list[dict[str, Any]] = []
    for i in range(pairs):
        gpu, nic = (f"gpu-{i}", f"nic-{i}") if pairs > 1 else ("gpu", "nic")
        requests += [
            {"name": gpu, "exactly": {"deviceClassName": gpu_class, "allocationMode": "ExactCount", "count": 1}},
            {"name": nic, "exactly": {"deviceClassName": nic_class, "allocationMode": "ExactCount", "count": 1}},
        ]
        constraints.append({"requests": [gpu, nic], "matchAttribute": PCIE_ROOT_ATTRIBUTE})
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": requests, "constraints": constraints}}},
    }
