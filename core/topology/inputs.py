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


ROLE_HINTS: Mapping[str, tuple[str, ...]] = {
    # Which non-compute role a host's name suggests, once its HCAs and cabling already said it is
    # not a compute host. Each regex must match one whole word of the name (its runs of letters:
    # "fm01" -> "fm", "ib-ufm-a" -> "ib", "ufm", "a"), so "bufmaster" is no UFM. Looser than the
    # ingest rules of core.infiniband.HcaFilter on purpose: those alone decide that a host is not
    # compute, these only name the kind of a host the fleet pattern already set apart. First role
    # whose pattern matches wins; no match means "management".
    "ufm_server": (r"ufm\w*", r"fm", r"fabric(mgr|manager|mgmt)?", r"(open)?sm", r"subnetmanager"),
    "storage": (r"stor(age)?\w*", r"ddn", r"vast", r"weka", r"lustre", r"gpfs", r"nfs", r"nas", r"oss", r"mds"),
    "login": (r"login\w*", r"lgn", r"submit\w*"),
    "management": (r"mgmt", r"mgr", r"head\w*", r"admin\w*", r"bcm", r"ctl", r"ctrl", r"slurm\w*", r"master"),
}


def _role_value(text: str) -> str:
    return re.sub(r"[\s-]+", "_", text.strip().lower())


@dataclass(frozen=True)
class HostRoleRules:
    """When a host on the fabric is not a compute host although no name rule said so.

    A fleet has a compute pattern that the data shows: the HCA count most of its HCAs' hosts have
    (eight on a DGX H100), HCA *i* on the rail-*i* leaf, and one naming scheme (``dgx###``). A
    UFM, storage or login server cabled to the same leaves breaks the pattern in more than one
    way at once, a broken compute host in one: it keeps its name and the rails of the HCAs it
    still has. So a host is set apart only when it has **at most** ``max_hca_share`` of the
    fleet's HCA count **and** either its name does not follow the fleet's naming or fewer than
    ``min_rail_share`` of its cabled HCAs are on their own rail's leaf. A compute host with a dead
    HCA (7 of 8) stays compute and keeps its finding.

    ``min_fleet`` compute-looking hosts are needed before a pattern is learned at all (two hosts
    are no fleet). ``compute_roles`` are the DCIM role values that mean a compute host; any other
    non-empty DCIM role wins over the fabric (the inventory is the operator's word), and a DCIM
    role in ``compute_roles`` keeps a host compute whatever its cabling. ``hints`` name the role
    (see ``ROLE_HINTS``).
    """

    enabled: bool = True
    max_hca_share: float = 0.5
    min_rail_share: float = 0.5
    min_fleet: int = 4
    compute_roles: tuple[str, ...] = ("compute",)
    hints: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(ROLE_HINTS))

    @cached_property
    def _compiled_hints(self) -> tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]:
        return tuple((role, tuple(re.compile(p, re.IGNORECASE) for p in pats)) for role, pats in self.hints.items())

    def role_hint(self, name: str) -> str | None:
        """The first role one of whose patterns matches a whole word of ``name``, else None."""
        words = re.findall(r"[a-z]+", name.lower())
        for role, patterns in self._compiled_hints:
            if any(p.fullmatch(w) for w in words for p in patterns):
                return role
        return None

    def dcim_role(self, role: str | None) -> str | None:
        """A DCIM role as a role value (``"UFM Server"`` -> ``ufm_server``), ``compute`` for the
        compute roles, None when the inventory says nothing."""
        if role is None or not role.strip():
            return None
        text = _role_value(role)
        return "compute" if text in {_role_value(r) for r in self.compute_roles} else text

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> HostRoleRules:
        known = {"enabled", "max_hca_share", "min_rail_share", "min_fleet", "compute_roles", "hints"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown host_roles settings: {', '.join(sorted(unknown))}")
        base = cls()
        shares = {}
        for key in ("max_hca_share", "min_rail_share"):
            value = float(data.get(key, getattr(base, key)))
            if not 0.0 < value <= 1.0:
                raise ValueError(f"host_roles.{key} must be in (0, 1], got {value}")
            shares[key] = value
        min_fleet = int(data.get("min_fleet", base.min_fleet))
        if min_fleet < 1:
            raise ValueError(f"host_roles.min_fleet must be at least 1, got {min_fleet}")
        hints: dict[str, tuple[str, ...]] = dict(base.hints)
        for role, patterns in (data.get("hints") or {}).items():
            compiled = []
            for p in patterns if not isinstance(patterns, str) else [patterns]:
                try:
                    re.compile(str(p))
                except re.error as exc:
                    raise ValueError(f"host_roles.hints.{role}: {p!r} is not a regex ({exc})") from None
                compiled.append(str(p))
            # A site's patterns come first: they name its own hosts better than the defaults.
            hints[str(role)] = (*compiled, *hints.get(str(role), ()))
        roles = data.get("compute_roles", base.compute_roles)
        return cls(
            enabled=bool(data.get("enabled", True)),
            max_hca_share=shares["max_hca_share"],
            min_rail_share=shares["min_rail_share"],
            min_fleet=min_fleet,
            compute_roles=tuple(str(r) for r in ([roles] if isinstance(roles, str) else roles)),
            hints=hints,
        )


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
    host_roles: HostRoleRules = field(default_factory=HostRoleRules)  # non-compute hosts on the fabric

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> TopologyConfig:
        """From the asset's run config (plain JSON-able values)."""
        if not data:
            return cls()
        known = {
            "hostnames", "similarity", "design_leaf_uplinks", "design_sizes", "check_severity", "block_sizes",
            "host_roles",
        }  # fmt: skip
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
            host_roles=HostRoleRules.from_mapping(data.get("host_roles") or {}),
        )
