"""Inside the node: the ``nvidia-smi topo -m`` matrix as data, and each GPU's NIC, NUMA node and
rail derived from it, with the findings (issue 23). Pure: no I/O.

``TopoMatrix`` is what ``connectors.gpu_topo.parse_gpu_topo`` returns; ``derive_node`` turns one
node's matrix (and, optionally, its HCAs' cabling from the fabric model) into ``NodeAffinity``;
``fleet_findings`` compares the nodes of one model. See docs/affinity.md.
"""

from core.affinity.derive import (
    FINDING_KINDS,
    NON_COMPUTE_NIC_NAMES,
    AffinityFinding,
    FleetNode,
    GpuAffinity,
    NicCabling,
    NicRole,
    NodeAffinity,
    cabling_from_topology,
    classify_nics,
    derive_node,
    fleet_findings,
    matrix_differences,
)
from core.affinity.matrix import (
    CPU_AFFINITY,
    GPU_NUMA_ID,
    LEGACY_CLASSES,
    LOCAL_CLASSES,
    NUMA_AFFINITY,
    PCIE_CLASSES,
    Connection,
    GpuInfo,
    NicInfo,
    TopoMatrix,
)

__all__ = [
    "CPU_AFFINITY",
    "FINDING_KINDS",
    "GPU_NUMA_ID",
    "LEGACY_CLASSES",
    "LOCAL_CLASSES",
    "NON_COMPUTE_NIC_NAMES",
    "NUMA_AFFINITY",
    "PCIE_CLASSES",
    "AffinityFinding",
    "Connection",
    "FleetNode",
    "GpuAffinity",
    "GpuInfo",
    "NicCabling",
    "NicInfo",
    "NicRole",
    "NodeAffinity",
    "TopoMatrix",
    "cabling_from_topology",
    "classify_nics",
    "derive_node",
    "fleet_findings",
    "matrix_differences",
]
