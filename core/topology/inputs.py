"""What topology derivation reads: plain observation records, and its configuration.

The records mirror the raw tables column for column (``raw.ib_nodes``, ``raw.ib_links``,
``raw.dcim_inventory``, ``raw.nvlink_domains``, ``raw.lldp_neighbor_observations``,
``raw.snmp_systems``, ``raw.snmp_interfaces``), so the asset maps rows to records with no logic and
tests can build the same records from connector output without a database. Nothing here does I/O.

Hostname normalisation is configuration, not code: every source spells hosts its own way
(``DGX001.cluster.local`` in LLDP, ``dgx001`` in the IB node description, ``DGX001`` in a DCIM
spreadsheet, the Kubernetes node name), and they only join if all go through the same rules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from core.models import Severity

# --- observations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class IbNodeObs:
    """A row of ``raw.ib_nodes``: one node with the InfiniBand area's classification."""

    source: str
    guid: str
    node_type: str  # switch | ca | router
    description: str
    node_class: str  # core.infiniband.NodeClass value
    class_reason: str = ""
    system_guid: str | None = None
    hostname: str | None = None
    hca: str | None = None
    switch_name: str | None = None
    switch_model: str | None = None


@dataclass(frozen=True)
class IbLinkObs:
    """A row of ``raw.ib_links``: ends already ordered by the connector."""

    source: str
    a_guid: str
    a_port: int
    b_guid: str
    b_port: int
    width: str | None = None
    speed: str | None = None
    speed_gbps: float | None = None
    both_sides: bool = True
    internal: bool = False


@dataclass(frozen=True)
class DcimHcaObs:
    name: str | None
    rail: int | None
    guid: str | None


@dataclass(frozen=True)
class DcimNodeObs:
    """A row of ``raw.dcim_inventory``: what the inventory says should exist."""

    source: str
    node: str
    rack: str | None = None
    role: str | None = None
    su: str | None = None
    hca_count: int | None = None
    hcas: tuple[DcimHcaObs, ...] = ()


@dataclass(frozen=True)
class NvlinkObs:
    """A row of ``raw.nvlink_domains``."""

    source: str
    node: str
    method: str
    domain: str
    cluster_uuid: str | None = None
    clique_id: str | None = None


@dataclass(frozen=True)
class LldpObs:
    """The columns of ``raw.lldp_neighbor_observations`` that resolution uses (one neighbour seen
    on one local port of the polled switch ``source``)."""

    source: str
    local_port: str | None
    chassis_id_subtype: int | None
    chassis_id: str | None
    port_id_subtype: int | None
    port_id: str | None
    local_chassis_id: str | None = None
    local_sys_name: str | None = None
    port_desc: str | None = None
    sys_name: str | None = None
    remote_port: str | None = None
    man_addrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class EthSystemObs:
    """A row of ``raw.snmp_systems``: a polled switch as it describes itself."""

    source: str
    address: str
    sys_name: str | None = None
    chassis_id: str | None = None
    chassis_id_subtype: int | None = None
    platform: str | None = None


@dataclass(frozen=True)
class EthInterfaceObs:
    """A row of ``raw.snmp_interfaces``."""

    source: str
    if_index: int
    name: str | None = None
    if_name: str | None = None
    if_descr: str | None = None
    if_alias: str | None = None
    mac: str | None = None
    speed_mbps: int | None = None


@dataclass(frozen=True)
class Observations:
    """Everything one derivation reads. Empty tuples mean "that source was not collected",
    which changes what can be concluded (no DCIM: nobody is "missing from DCIM")."""

    ib_nodes: Sequence[IbNodeObs] = ()
    ib_links: Sequence[IbLinkObs] = ()
    dcim: Sequence[DcimNodeObs] = ()
    nvlink: Sequence[NvlinkObs] = ()
    lldp: Sequence[LldpObs] = ()
    eth_systems: Sequence[EthSystemObs] = ()
    eth_interfaces: Sequence[EthInterfaceObs] = ()
    k8s_nodes: Sequence[str] = ()  # Kubernetes node names (the publish issue will fill these)


# --- configuration --------------------------------------------------------------------------


@dataclass(frozen=True)
class HostnameRules:
    """How every source's host name is turned into the one join key.

    ``rewrites`` are ``(regex, replacement)`` applied in order after lower-casing and stripping
    the DNS domain, e.g. ``(r"^(dgx\\d+)-ib$", r"\\1")`` for a site whose IB descriptions carry a
    suffix. An IP address is never cut at its dots.
    """

    lowercase: bool = True
    strip_domain: bool = True
    rewrites: tuple[tuple[str, str], ...] = ()

    @cached_property
    def _compiled(self) -> tuple[tuple[re.Pattern[str], str], ...]:
        return tuple((re.compile(p), r) for p, r in self.rewrites)

    def normalise(self, name: str) -> str:
        text = name.strip()
        if self.lowercase:
            text = text.lower()
        if self.strip_domain and "." in text and not _IP.match(text):
            text = text.split(".", 1)[0]
        for pattern, repl in self._compiled:
            text = pattern.sub(repl, text)
        return text


_IP = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")


@dataclass(frozen=True)
class TopologyConfig:
    """Site knobs. Nothing here comes from a cluster spec: design sizes are either configured or
    inferred from the fabric itself (the modal value among peers)."""

    hostnames: HostnameRules = field(default_factory=HostnameRules)
    similarity: float = 0.5  # Jaccard of host (or leaf) sets above which two switches are one group
    design_leaf_uplinks: int | None = None  # None: the modal uplink count of the fabric's leaves
    design_sizes: Mapping[str, int] = field(default_factory=dict)  # level -> max hosts; else modal
    check_severity: Severity = Severity.ERROR  # findings at or above fail the asset check
    block_sizes: tuple[int, ...] | None = None  # Slurm BlockSizes; None: derived

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> TopologyConfig:
        """From the asset's run config (plain JSON-able values)."""
        if not data:
            return cls()
        known = {"hostnames", "similarity", "design_leaf_uplinks", "design_sizes", "check_severity", "block_sizes"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown topology settings: {', '.join(sorted(unknown))}")
        host = dict(data.get("hostnames") or {})
        rewrites = tuple((str(p), str(r)) for p, r in host.pop("rewrites", ()))
        similarity = float(data.get("similarity", 0.5))
        if not 0.0 < similarity <= 1.0:
            raise ValueError(f"similarity must be in (0, 1], got {similarity}")
        sizes = data.get("block_sizes")
        return cls(
            hostnames=HostnameRules(rewrites=rewrites, **host),
            similarity=similarity,
            design_leaf_uplinks=data.get("design_leaf_uplinks"),
            design_sizes={str(k): int(v) for k, v in (data.get("design_sizes") or {}).items()},
            check_severity=Severity(data.get("check_severity", "error")),
            block_sizes=tuple(int(s) for s in sizes) if sizes else None,
        )
