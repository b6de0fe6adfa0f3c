"""Topology derivation: observations -> a versioned fabric model with findings (pure, no I/O).

``derive`` resolves identities and links, classifies switch tiers, computes every host's domain
at each level (rail group, spine group, pod, NVLink domain) by majority and similarity, and
reports every deviation as a finding. ``render_*`` turn the model into Slurm ``topology.conf``
and the documented JSON; ``diff_models`` says what moved between two versions.
"""

from core.topology.derive import derive
from core.topology.diff import Change, diff_models, summarise
from core.topology.inputs import (
    DcimHcaObs,
    DcimNodeObs,
    EthInterfaceObs,
    EthSystemObs,
    HostnameRules,
    IbLinkObs,
    IbNodeObs,
    LldpObs,
    NvlinkObs,
    Observations,
    TopologyConfig,
)
from core.topology.model import LEVELS, DomainOut, HcaOut, HostOut, LinkOut, SwitchOut, TopologyModel
from core.topology.render import block_sizes, block_units, render_block, render_json, render_tree

__all__ = [
    "LEVELS",
    "Change",
    "DcimHcaObs",
    "DcimNodeObs",
    "DomainOut",
    "EthInterfaceObs",
    "EthSystemObs",
    "HcaOut",
    "HostOut",
    "HostnameRules",
    "IbLinkObs",
    "IbNodeObs",
    "LinkOut",
    "LldpObs",
    "NvlinkObs",
    "Observations",
    "SwitchOut",
    "TopologyConfig",
    "TopologyModel",
    "block_sizes",
    "block_units",
    "derive",
    "diff_models",
    "render_block",
    "render_json",
    "render_tree",
    "summarise",
]
