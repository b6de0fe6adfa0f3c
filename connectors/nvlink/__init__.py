"""NVLink domains: GFD clique labels, nvidia-smi fabric fields, NetQ NMX compute nodes."""

from connectors.nvlink.parser import (
    CLIQUE_LABEL,
    SOURCE,
    NvlinkDomain,
    from_node_labels,
    parse_clique_label,
    parse_kubectl_nodes,
    parse_nmx_compute_nodes,
    parse_nvidia_smi,
    single_node_domain,
)

__all__ = [
    "CLIQUE_LABEL",
    "SOURCE",
    "NvlinkDomain",
    "from_node_labels",
    "parse_clique_label",
    "parse_kubectl_nodes",
    "parse_nmx_compute_nodes",
    "parse_nvidia_smi",
    "single_node_domain",
]
