"""The cluster spec: one YAML file from which every twin in ``simulator/`` is built.

A spec describes a DGX SuperPOD-shaped cluster the way its reference architecture does (scalable
units, rail-optimised InfiniBand leaves, spines and cores, NVLink domains, an Ethernet
management fabric) plus the defects to inject. It is validated strictly (``extra="forbid"``) and
for internal consistency (leaf ports fit the radix, switch counts match the rails and SUs, links
divide evenly over spines and cores), because a twin built from an inconsistent spec produces a
fabric no real cluster has, and every test downstream would then be checking nonsense.

Errors are raised as :class:`SpecError`, whose message names the field path and, when the spec was
loaded from a file, the YAML line (mapped from the pydantic error ``loc`` with ``yaml.compose``
node marks), so a spec author can jump straight to the bad line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    field_validator,
)
from pydantic import model_validator as _model_validator

from core.hostlist import expand
from simulator.gpu_topo import TEMPLATES, template_name

# --- platform tables (vendor differences are data) ------------------------------------------

IbPlatform = Literal["quantum", "quantum2", "quantum3"]
EthPlatform = Literal["arista_eos", "cisco_nxos", "juniper_junos", "mellanox_mlnxos", "sonic", "cumulus"]
IbSpeed = Literal["hdr", "ndr", "xdr"]

IB_SPEED_GBPS: dict[str, int] = {"hdr": 200, "ndr": 400, "xdr": 800}
"""Per 4x port: HDR 4 x 50G, NDR 4 x 100G, XDR 4 x 200G (InfiniBand Trade Association roadmap)."""


@dataclass(frozen=True)
class IbPlatformInfo:
    """What an InfiniBand switch platform is: its model, port count and fastest port speed."""

    model: str
    radix: int
    max_speed: str


IB_PLATFORMS: dict[str, IbPlatformInfo] = {
    # NVIDIA Quantum QM8700: 40 x HDR 200 Gb/s (DGX SuperPOD A100 RA).
    "quantum": IbPlatformInfo(model="MQM8700", radix=40, max_speed="hdr"),
    # NVIDIA Quantum-2 QM9700: 64 x NDR 400 Gb/s on 32 OSFP cages (DGX SuperPOD H100/B200 RA).
    "quantum2": IbPlatformInfo(model="MQM9700", radix=64, max_speed="ndr"),
    # NVIDIA Quantum-X800 Q3400: 144 x XDR 800 Gb/s.
    "quantum3": IbPlatformInfo(model="Q3400-RA", radix=144, max_speed="xdr"),
}

_SPEED_ORDER = ["hdr", "ndr", "xdr"]

NVL72_GPUS = 72
"""GB200 NVL72: 18 compute trays x 4 Blackwell GPUs share one NVLink 5 domain (9 switch trays)."""


# --- errors ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a spec: where (dotted path, YAML line when known) and what."""

    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.path or "<root>"
        if self.line is not None:
            where = f"{where} (line {self.line})"
        return f"{where}: {self.message}"


class SpecError(ValueError):
    """A spec that cannot be built: carries every issue found, each with path and line."""

    def __init__(self, issues: list[SpecIssue], source: str | None = None) -> None:
        self.issues = issues
        self.source = source
        head = f"invalid cluster spec {source}" if source else "invalid cluster spec"
        super().__init__(head + ":\n  " + "\n  ".join(str(i) for i in issues))


class _Inconsistent(ValueError):
    """Raised by the root validator so cross-field issues keep their own absolute ``loc``.

    Pydantic wraps a ``ValueError`` from a model validator with the model's (empty) loc; we
    recover the original exception from the error's ``ctx`` and use the locs carried here.
    """

    def __init__(self, issues: list[tuple[tuple[str | int, ...], str]]) -> None:
        self.issues = issues
        super().__init__("; ".join(f"{'.'.join(map(str, loc))}: {msg}" for loc, msg in issues))


# --- models ---------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeSpec(_Strict):
    """One compute node (a DGX/HGX system, or an NVL72 compute tray)."""

    model: str = Field(description="system model, e.g. 'DGX H100' or 'GB200 compute tray'")
    gpu_model: str
    gpus: PositiveInt = Field(description="GPUs per node")
    hcas: PositiveInt = Field(description="compute-fabric HCAs per node; one per rail")
    frontend_nic: str = Field(default="eno1", description="the one management/frontend NIC")
    topology: str | None = Field(
        default=None,
        description="nvidia-smi topo -m template (simulator/gpu_topo.py TEMPLATES); default by model, none for others",
    )

    @field_validator("topology")
    @classmethod
    def _known_template(cls, value: str | None) -> str | None:
        if value is not None and value not in TEMPLATES:
            raise ValueError(f"unknown topology template {value!r} (known: {', '.join(sorted(TEMPLATES))})")
        return value

    @property
    def topology_template(self) -> str | None:
        """The template this node model's matrix is rendered from (explicit, else by model)."""
        return template_name(self.model, self.topology)


class NvlinkSpec(_Strict):
    """NVLink domains: one per HGX node, or one per NVL72 rack split into sub-domains."""

    kind: Literal["hgx", "nvl72"]
    nodes_per_domain: PositiveInt = Field(default=1, description="hgx: 1; nvl72: 18 compute trays")
    sub_domains: PositiveInt = Field(default=1, description="equal slices of a domain (nvl72: 2 x 9)")


class IbLayer(_Strict):
    """One tier of InfiniBand switches."""

    platform: IbPlatform
    radix: PositiveInt = Field(description="ports per switch (QM9700: 64)")
    count: PositiveInt
    uplinks: NonNegativeInt | None = Field(
        default=None, description="uplink ports per switch; default = downlinks (non-blocking 1:1)"
    )


class ComputeFabricSpec(_Strict):
    """The rail-optimised InfiniBand compute fabric."""

    kind: Literal["infiniband"]
    speed: IbSpeed = Field(description="per 4x port: hdr=200, ndr=400, xdr=800 Gb/s")
    tiers: Literal[2, 3]
    rail_groups_per_su: PositiveInt = Field(
        default=1, description="node groups per SU that each get their own set of rail leaves"
    )
    sus_per_spine_group: PositiveInt | None = Field(default=None, description="three tiers only")
    leaf: IbLayer
    spine: IbLayer
    core: IbLayer | None = None


class EthLayer(_Strict):
    """One tier of Ethernet switches; platforms are cycled so every vendor's quirks appear."""

    platforms: list[EthPlatform] = Field(min_length=1)
    radix: PositiveInt
    count: PositiveInt


class ManagementFabricSpec(_Strict):
    """The Ethernet management/frontend fabric: one NIC per host to a leaf, leaves to spines."""

    host_speed_gbps: float = Field(default=100, gt=0)
    uplink_speed_gbps: float = Field(default=400, gt=0)
    links_per_spine: PositiveInt = Field(default=1, description="links from every leaf to every spine")
    leaf: EthLayer
    spine: EthLayer


ServiceRole = Literal["ufm_server", "storage", "login", "management"]


class ServiceHostSpec(_Strict):
    """A server that is cabled into the compute fabric but is not a compute node.

    The DGX SuperPOD RAs put the UFM appliances on the compute fabric: the H100 and B200 RAs count
    4 "Compute and UFM" cables beyond the DGX ones (31 DGX per SU: "a DGX system must be removed
    to accommodate for UFM connectivity"), i.e. two appliances with two ports each on rail leaves.
    HCA ``i`` (``mlx5_i``) lands on the rail-``rails[i]`` leaf of the given SU and rail group, on
    that leaf's first port past its host ports and uplinks, so it needs leaves with free ports.
    It has no GPUs, no NVLink domain and no Ethernet cable in the simulator; it is in the IB
    fabric (ibnetdiscover, UFM) and in DCIM with its role, and nowhere a GPU node is.
    """

    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", description="host name (a DNS label)")
    role: ServiceRole
    model: str = Field(default="x86 server", description="e.g. 'UFM Enterprise Appliance'")
    rails: list[NonNegativeInt] = Field(min_length=1, description="HCA i is cabled to the rail-rails[i] leaf")
    su: PositiveInt | None = Field(default=None, description="1-based SU of its leaves; default the last")
    rail_group: PositiveInt | None = Field(default=None, description="1-based rail group; default the last")
    rack: str = Field(default="mgmt01", description="the management rack DCIM lists it in")


class MiscabledTarget(_Strict):
    """Put ``host``'s rail-``rail`` HCA on the rail-``to_rail`` leaf, swapping with ``with_host``."""

    host: str
    rail: NonNegativeInt
    to_rail: NonNegativeInt | None = None
    with_host: str | None = Field(default=None, description="whose port is displaced; default by seed")


class DegradedTarget(_Strict):
    """Remove ``remove`` uplinks of the named leaf."""

    leaf: str
    remove: PositiveInt


class NicAcrossSocketTarget(_Strict):
    """``host``'s GPU ``gpu`` reaches every compute NIC only across the CPU interconnect (SYS)."""

    host: str
    gpu: NonNegativeInt


class SwappedNicTarget(_Strict):
    """``host``'s NIC Legend names the two NIC columns ``nics`` the other way round (the RDMA
    devices enumerated in another order than on the rest of the fleet)."""

    host: str
    nics: tuple[NonNegativeInt, NonNegativeInt]


class GpuTopoFaults(_Strict):
    """Faults inside nodes: their ``nvidia-smi topo -m`` matrices (simulator/gpu_topo.py), not the
    fabric; kept apart from ``defects`` (``GroundTruth.defects`` stays the fabric's)."""

    nic_across_socket: list[NicAcrossSocketTarget] = []
    swapped_nic_order: list[SwappedNicTarget] = []


class DefectSpec(_Strict):
    """Defect knobs: each a count (placed by seed) or an explicit list of targets."""

    miscabled_ports: NonNegativeInt | list[MiscabledTarget] = 0
    missing_links: NonNegativeInt | list[str] = Field(
        default=0, description="count, or link ends as 'dgx001:mlx5_0' / 'ib-leaf-su01-r0:33'"
    )
    degraded_uplinks: NonNegativeInt | list[DegradedTarget] = Field(default=0, description="leaves")
    uplinks_removed_per_leaf: PositiveInt = 2
    unnamed_hcas: NonNegativeInt | list[str] = Field(default=0, description="count, or 'dgx001:mlx5_3'")
    duplicate_sysnames: NonNegativeInt | list[tuple[str, str]] = Field(
        default=0, description="count of pairs, or [keeps_name, takes_that_name] Ethernet switch names"
    )
    dcim_extra_hosts: NonNegativeInt | list[str] = Field(default=0, description="count or host ranges")
    dcim_missing_hosts: NonNegativeInt | list[str] = Field(default=0, description="count or host ranges")

    def any(self) -> bool:
        """Whether any defect is requested."""
        return any(getattr(self, knob) not in (0, []) for knob in DEFECT_KNOBS)


DEFECT_KNOBS: tuple[str, ...] = (
    "degraded_uplinks",
    "miscabled_ports",
    "missing_links",
    "unnamed_hcas",
    "duplicate_sysnames",
    "dcim_missing_hosts",
    "dcim_extra_hosts",
)
"""Knob names in placement order: explicit targets first, then counts, in this order."""


class ClusterSpec(_Strict):
    """A whole cluster: hosts, racks, scalable units, fabrics, NVLink domains, seed and defects."""

    name: str
    description: str = ""
    seed: int
    hosts: str = Field(description="compact host range, e.g. dgx[001-128]; order = SU order")
    racks: str | None = Field(default=None, description="compact rack range; default rack[01-NN]")
    nodes_per_rack: PositiveInt
    scalable_units: PositiveInt
    nodes_per_su: PositiveInt
    node: NodeSpec
    nvlink: NvlinkSpec
    compute_fabric: ComputeFabricSpec
    management_fabric: ManagementFabricSpec
    service_hosts: list[ServiceHostSpec] = Field(
        default_factory=list, description="UFM, storage, login or management servers on the compute fabric"
    )
    defects: DefectSpec = DefectSpec()
    gpu_topo_faults: GpuTopoFaults = GpuTopoFaults()

    @field_validator("hosts", "racks")
    @classmethod
    def _valid_range(cls, value: str | None) -> str | None:
        if value is None:
            return value
        names = expand(value)  # ValueError -> a pydantic error at this field
        if len(set(names)) != len(names):
            raise ValueError(f"{value!r} names some hosts twice")
        return value

    # -- derived numbers (the generator and the twins read these, never recompute them) --

    @cached_property
    def host_names(self) -> list[str]:
        return expand(self.hosts)

    @cached_property
    def rack_names(self) -> list[str]:
        if self.racks is not None:
            return expand(self.racks)
        n = len(self.host_names) // self.nodes_per_rack
        width = max(2, len(str(n)))
        return [f"rack{i + 1:0{width}d}" for i in range(n)]

    @property
    def rails(self) -> int:
        return self.node.hcas

    @property
    def link_speed_gbps(self) -> int:
        return IB_SPEED_GBPS[self.compute_fabric.speed]

    @property
    def nodes_per_rail_group(self) -> int:
        return self.nodes_per_su // self.compute_fabric.rail_groups_per_su

    @property
    def leaf_downlinks(self) -> int:
        """One port per node of the rail group (rail-optimised: leaf (su, group, r) serves rail r)."""
        return self.nodes_per_rail_group

    @property
    def leaf_uplinks(self) -> int:
        up = self.compute_fabric.leaf.uplinks
        return self.leaf_downlinks if up is None else up

    @property
    def leaf_free_ports(self) -> int:
        """Ports of a leaf past its host ports and uplinks: where service hosts are cabled."""
        return self.compute_fabric.leaf.radix - self.leaf_downlinks - self.leaf_uplinks

    def service_leaf(self, host: ServiceHostSpec, i: int) -> tuple[int, int, int]:
        """(su, rail group, rail), 0-based, of the leaf service host HCA ``i`` is cabled to."""
        su = (host.su or self.scalable_units) - 1
        group = (host.rail_group or self.compute_fabric.rail_groups_per_su) - 1
        return su, group, host.rails[i]

    @property
    def spine_groups(self) -> int:
        cf = self.compute_fabric
        if cf.tiers == 2 or cf.sus_per_spine_group is None:
            return 1
        return self.scalable_units // cf.sus_per_spine_group

    @property
    def leaves_per_spine_group(self) -> int:
        return self.compute_fabric.leaf.count // self.spine_groups

    @property
    def spines_per_group(self) -> int:
        return self.compute_fabric.spine.count // self.spine_groups

    @property
    def leaf_links_per_spine(self) -> int:
        return self.leaf_uplinks // self.spines_per_group

    @property
    def spine_downlinks(self) -> int:
        return self.leaves_per_spine_group * self.leaf_links_per_spine

    @property
    def spine_uplinks(self) -> int:
        if self.compute_fabric.tiers == 2:
            return 0
        up = self.compute_fabric.spine.uplinks
        return self.spine_downlinks if up is None else up

    @property
    def core_groups(self) -> int:
        """Spine j of every spine group uplinks to core group j."""
        return self.spines_per_group if self.compute_fabric.tiers == 3 else 0

    @property
    def cores_per_group(self) -> int:
        core = self.compute_fabric.core
        if core is None or not self.core_groups:
            return 0
        return core.count // self.core_groups

    @property
    def spine_links_per_core(self) -> int:
        return self.spine_uplinks // self.cores_per_group if self.cores_per_group else 0

    @property
    def core_ports_used(self) -> int:
        return self.spine_groups * self.spine_links_per_core

    @property
    def eth_hosts_per_leaf(self) -> int:
        return math.ceil(len(self.host_names) / self.management_fabric.leaf.count)

    @property
    def eth_leaf_uplinks(self) -> int:
        mf = self.management_fabric
        return mf.spine.count * mf.links_per_spine

    # -- consistency -----------------------------------------------------------------------

    @_model_validator(mode="after")
    def _consistent(self) -> ClusterSpec:
        issues = list(_consistency_issues(self))
        if issues:
            raise _Inconsistent(issues)
        return self

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> ClusterSpec:
        """Validate a spec dict; raises :class:`SpecError` (field paths, no lines) when bad."""
        return parse_spec(obj)


def _consistency_issues(spec: ClusterSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """Cross-field checks; each issue carries the absolute loc of the field to fix."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    cf = spec.compute_fabric
    n = len(spec.host_names)
    if n != spec.scalable_units * spec.nodes_per_su:
        out.append(
            (
                ("hosts",),
                f"{spec.hosts!r} has {n} hosts but scalable_units x nodes_per_su = "
                f"{spec.scalable_units} x {spec.nodes_per_su} = {spec.scalable_units * spec.nodes_per_su}",
            )
        )
        return out  # everything below counts hosts
    if n % spec.nodes_per_rack:
        out.append((("nodes_per_rack",), f"{n} hosts do not fill racks of {spec.nodes_per_rack} evenly"))
    elif spec.racks is not None and len(spec.rack_names) != n // spec.nodes_per_rack:
        out.append(
            (
                ("racks",),
                f"{len(spec.rack_names)} racks named but {n} hosts / {spec.nodes_per_rack} "
                f"per rack = {n // spec.nodes_per_rack}",
            )
        )

    # NVLink domains
    nv = spec.nvlink
    if nv.kind == "hgx" and nv.nodes_per_domain != 1:
        out.append((("nvlink", "nodes_per_domain"), "an HGX NVLink domain is one node"))
    if nv.kind == "nvl72":
        if nv.nodes_per_domain * spec.node.gpus != NVL72_GPUS:
            out.append(
                (
                    ("nvlink", "nodes_per_domain"),
                    f"NVL72 needs {NVL72_GPUS} GPUs per domain, got {nv.nodes_per_domain} x {spec.node.gpus}",
                )
            )
        if nv.nodes_per_domain != spec.nodes_per_rack:
            out.append(
                (("nvlink", "nodes_per_domain"), "an NVL72 domain is one rack: must equal nodes_per_rack")
            )
    if n % nv.nodes_per_domain:
        out.append(
            (("nvlink", "nodes_per_domain"), f"{n} hosts do not fill domains of {nv.nodes_per_domain}")
        )
    if nv.nodes_per_domain % nv.sub_domains:
        out.append(
            (("nvlink", "sub_domains"), f"{nv.nodes_per_domain} nodes do not split into {nv.sub_domains}")
        )

    # platforms: radix and speed
    layers: list[tuple[str, IbLayer]] = [("leaf", cf.leaf), ("spine", cf.spine)]
    if cf.core is not None:
        layers.append(("core", cf.core))
    for tier, layer in layers:
        info = IB_PLATFORMS[layer.platform]
        if layer.radix > info.radix:
            out.append(
                (
                    ("compute_fabric", tier, "radix"),
                    f"{layer.platform} ({info.model}) has {info.radix} ports, not {layer.radix}",
                )
            )
        if _SPEED_ORDER.index(cf.speed) > _SPEED_ORDER.index(info.max_speed):
            out.append(
                (
                    ("compute_fabric", tier, "platform"),
                    f"{layer.platform} ({info.model}) tops out at "
                    f"{info.max_speed.upper()}, cannot run {cf.speed.upper()}",
                )
            )

    # tiers
    if cf.tiers == 2:
        if cf.core is not None:
            out.append((("compute_fabric", "core"), "a two-tier fabric has no core layer"))
        if cf.sus_per_spine_group is not None:
            out.append((("compute_fabric", "sus_per_spine_group"), "only meaningful with three tiers"))
    else:
        if cf.core is None:
            out.append((("compute_fabric", "core"), "a three-tier fabric needs a core layer"))
        if cf.sus_per_spine_group is None:
            out.append((("compute_fabric", "sus_per_spine_group"), "a three-tier fabric needs spine groups"))
    if out:
        return out

    # leaves: rail-optimised, one leaf per (SU, rail group, rail)
    if spec.nodes_per_su % cf.rail_groups_per_su:
        out.append(
            (
                ("compute_fabric", "rail_groups_per_su"),
                f"{spec.nodes_per_su} nodes per SU do not split into {cf.rail_groups_per_su} rail groups",
            )
        )
        return out
    want_leaves = spec.scalable_units * cf.rail_groups_per_su * spec.rails
    if cf.leaf.count != want_leaves:
        out.append(
            (
                ("compute_fabric", "leaf", "count"),
                f"rail-optimised wiring needs scalable_units x rail_groups_per_su x rails = "
                f"{spec.scalable_units} x {cf.rail_groups_per_su} x {spec.rails} = {want_leaves} leaves, "
                f"got {cf.leaf.count}",
            )
        )
    if spec.leaf_downlinks + spec.leaf_uplinks > cf.leaf.radix:
        out.append(
            (
                ("compute_fabric", "leaf", "radix"),
                f"{spec.leaf_downlinks} host ports + {spec.leaf_uplinks} uplinks "
                f"do not fit {cf.leaf.radix} ports",
            )
        )
    if out:
        return out

    # spines
    if cf.tiers == 3:
        assert cf.sus_per_spine_group is not None
        if spec.scalable_units % cf.sus_per_spine_group:
            out.append(
                (
                    ("compute_fabric", "sus_per_spine_group"),
                    f"{spec.scalable_units} SUs do not split into spine groups of {cf.sus_per_spine_group}",
                )
            )
            return out
    if cf.spine.count % spec.spine_groups:
        out.append(
            (
                ("compute_fabric", "spine", "count"),
                f"{cf.spine.count} spines do not split over {spec.spine_groups} spine groups",
            )
        )
        return out
    if spec.leaf_uplinks % spec.spines_per_group or spec.leaf_uplinks < spec.spines_per_group:
        out.append(
            (
                ("compute_fabric", "spine", "count"),
                f"each leaf's {spec.leaf_uplinks} uplinks must divide evenly "
                f"over the {spec.spines_per_group} spines of its spine group",
            )
        )
        return out
    if spec.spine_downlinks + spec.spine_uplinks > cf.spine.radix:
        out.append(
            (
                ("compute_fabric", "spine", "radix"),
                f"{spec.spine_downlinks} leaf ports + {spec.spine_uplinks} "
                f"uplinks do not fit {cf.spine.radix} ports",
            )
        )

    # cores: spine j of every spine group -> core group j
    if cf.tiers == 3 and cf.core is not None:
        groups = spec.core_groups
        if cf.core.count % groups:
            out.append(
                (
                    ("compute_fabric", "core", "count"),
                    f"{cf.core.count} cores do not split into {groups} core groups (one per spine position)",
                )
            )
            return out
        cpg = cf.core.count // groups
        if spec.spine_uplinks % cpg or spec.spine_uplinks < cpg:
            out.append(
                (
                    ("compute_fabric", "spine", "uplinks"),
                    f"each spine's {spec.spine_uplinks} uplinks must divide "
                    f"evenly over the {cpg} cores of its core group",
                )
            )
            return out
        if spec.core_ports_used > cf.core.radix:
            out.append(
                (
                    ("compute_fabric", "core", "radix"),
                    f"{spec.spine_groups} spine groups x {spec.spine_links_per_core} links = "
                    f"{spec.core_ports_used} ports, more than {cf.core.radix}",
                )
            )

    # Ethernet management fabric
    mf = spec.management_fabric
    hpl = spec.eth_hosts_per_leaf
    if hpl * (mf.leaf.count - 1) >= n:
        out.append(
            (("management_fabric", "leaf", "count"), f"{mf.leaf.count} leaves for {n} hosts leaves one empty")
        )
    if hpl + spec.eth_leaf_uplinks > mf.leaf.radix:
        out.append(
            (
                ("management_fabric", "leaf", "radix"),
                f"{hpl} host ports + {spec.eth_leaf_uplinks} uplinks do not fit {mf.leaf.radix} ports",
            )
        )
    if mf.leaf.count * mf.links_per_spine > mf.spine.radix:
        out.append(
            (
                ("management_fabric", "spine", "radix"),
                f"{mf.leaf.count} leaves x {mf.links_per_spine} links do not fit {mf.spine.radix} ports",
            )
        )
    out.extend(_service_host_issues(spec))
    out.extend(_defect_issues(spec))
    out.extend(_gpu_topo_issues(spec))
    return out


def _service_host_issues(spec: ClusterSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """Service hosts: unique new names, leaves that exist, and a free leaf port for every HCA."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    hosts = set(spec.host_names)
    seen: set[str] = set()
    per_leaf: dict[tuple[int, int, int], int] = {}
    for i, sh in enumerate(spec.service_hosts):
        loc: tuple[str | int, ...] = ("service_hosts", i)
        if sh.name in hosts:
            out.append(((*loc, "name"), f"{sh.name!r} is a compute host"))
        elif sh.name in seen:
            out.append(((*loc, "name"), f"{sh.name!r} is listed twice"))
        seen.add(sh.name)
        if sh.su is not None and sh.su > spec.scalable_units:
            out.append(((*loc, "su"), f"SU {sh.su} > scalable_units ({spec.scalable_units})"))
            continue
        groups = spec.compute_fabric.rail_groups_per_su
        if sh.rail_group is not None and sh.rail_group > groups:
            out.append(((*loc, "rail_group"), f"rail group {sh.rail_group} > rail_groups_per_su ({groups})"))
            continue
        for k, rail in enumerate(sh.rails):
            if rail >= spec.rails:
                out.append(((*loc, "rails", k), f"rail {rail} >= rails ({spec.rails})"))
                continue
            leaf = spec.service_leaf(sh, k)
            per_leaf[leaf] = per_leaf.get(leaf, 0) + 1
            if per_leaf[leaf] > spec.leaf_free_ports:
                radix = spec.compute_fabric.leaf.radix
                used = f"{spec.leaf_downlinks} host ports + {spec.leaf_uplinks} uplinks of {radix}"
                taken = f", {spec.leaf_free_ports} free and all taken" if spec.leaf_free_ports > 0 else ""
                out.append(
                    (
                        (*loc, "rails", k),
                        f"the rail-{rail} leaf of SU {leaf[0] + 1} rail group {leaf[1] + 1} has no free port "
                        f"({used}{taken}); the DGX SuperPOD RA frees ports for UFM by leaving a DGX out",
                    )
                )
    return out


def _defect_issues(spec: ClusterSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """Check defect counts are placeable and explicit host targets exist."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    d = spec.defects
    hosts = set(spec.host_names)
    n = len(spec.host_names)
    loc = ("defects",)

    def host_ok(path: tuple[str | int, ...], host: str) -> None:
        if host not in hosts:
            out.append((loc + path, f"{host!r} is not one of the spec's hosts"))

    if isinstance(d.miscabled_ports, int):
        if d.miscabled_ports and spec.rails < 2:
            out.append(((*loc, "miscabled_ports"), "miscabling across rails needs at least 2 rails"))
        elif d.miscabled_ports > n * spec.rails // 4:
            out.append(((*loc, "miscabled_ports"), f"at most {n * spec.rails // 4} can be placed"))
    else:
        for i, t in enumerate(d.miscabled_ports):
            host_ok(("miscabled_ports", i, "host"), t.host)
            if t.with_host is not None:
                host_ok(("miscabled_ports", i, "with_host"), t.with_host)
            for field, rail in (("rail", t.rail), ("to_rail", t.to_rail)):
                if rail is not None and rail >= spec.rails:
                    out.append(((*loc, "miscabled_ports", i, field), f"rail {rail} >= rails ({spec.rails})"))
            if t.to_rail is not None and t.to_rail == t.rail:
                out.append(((*loc, "miscabled_ports", i, "to_rail"), "must differ from rail"))
    if isinstance(d.missing_links, int) and d.missing_links > n * spec.rails // 2:
        out.append(((*loc, "missing_links"), f"at most {n * spec.rails // 2} can be placed"))
    if isinstance(d.degraded_uplinks, int):
        if d.degraded_uplinks > spec.compute_fabric.leaf.count:
            out.append(((*loc, "degraded_uplinks"), f"only {spec.compute_fabric.leaf.count} leaves"))
        if d.degraded_uplinks and d.uplinks_removed_per_leaf >= spec.leaf_uplinks:
            out.append(
                (
                    (*loc, "uplinks_removed_per_leaf"),
                    f"a leaf has {spec.leaf_uplinks} uplinks; removing "
                    f"{d.uplinks_removed_per_leaf} would isolate it, not degrade it",
                )
            )
    if isinstance(d.unnamed_hcas, int):
        if d.unnamed_hcas > n * spec.rails:
            out.append(((*loc, "unnamed_hcas"), f"only {n * spec.rails} HCAs"))
    else:
        for i, ref in enumerate(d.unnamed_hcas):
            host, _, hca = ref.partition(":")
            host_ok(("unnamed_hcas", i), host)
            if hca not in {f"mlx5_{r}" for r in range(spec.rails)}:
                out.append(((*loc, "unnamed_hcas", i), f"{ref!r} is not '<host>:mlx5_<rail>'"))
    eth_switches = spec.management_fabric.leaf.count + spec.management_fabric.spine.count
    if isinstance(d.duplicate_sysnames, int) and 2 * d.duplicate_sysnames > eth_switches:
        out.append(((*loc, "duplicate_sysnames"), f"only {eth_switches} Ethernet switches to pair"))
    for knob in ("dcim_missing_hosts", "dcim_extra_hosts"):
        value = getattr(d, knob)
        if isinstance(value, int):
            if knob == "dcim_missing_hosts" and value > n:
                out.append(((*loc, knob), f"only {n} hosts"))
            continue
        for i, expr in enumerate(value):
            try:
                names = expand(expr)
            except ValueError as exc:
                out.append(((*loc, knob, i), str(exc)))
                continue
            for name in names:
                if knob == "dcim_missing_hosts" and name not in hosts:
                    out.append(((*loc, knob, i), f"{name!r} is not one of the spec's hosts"))
                elif knob == "dcim_extra_hosts" and name in hosts:
                    out.append(((*loc, knob, i), f"{name!r} is a fabric host; extra hosts must be new"))
    return out


def _gpu_topo_issues(spec: ClusterSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """The node's template must fit its GPU and HCA counts; matrix faults need a template, a real
    host, a GPU it has, two distinct compute NIC columns, and one fault per host."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    d = spec.gpu_topo_faults
    name = spec.node.topology_template
    template = TEMPLATES.get(name) if name else None
    if template is not None and (len(template.gpus), len(template.compute_nics)) != (spec.node.gpus, spec.rails):
        out.append(
            (
                ("node", "topology"),
                f"template {name!r} has {len(template.gpus)} GPUs and {len(template.compute_nics)} compute NICs, "
                f"the node {spec.node.gpus} GPUs and {spec.rails} HCAs",
            )
        )
        return out
    seen: set[str] = set()
    targets: list[tuple[str, int, NicAcrossSocketTarget | SwappedNicTarget]] = [
        *(("nic_across_socket", i, t) for i, t in enumerate(d.nic_across_socket)),
        *(("swapped_nic_order", i, t) for i, t in enumerate(d.swapped_nic_order)),
    ]
    for knob, i, t in targets:
        loc: tuple[str | int, ...] = ("gpu_topo_faults", knob, i)
        if template is None:
            out.append((loc, f"node model {spec.node.model!r} has no topology template (set node.topology)"))
            continue
        if t.host not in spec.host_names:
            out.append(((*loc, "host"), f"{t.host!r} is not one of the spec's hosts"))
        if t.host in seen:
            out.append(((*loc, "host"), f"{t.host!r} already has a matrix fault"))
        seen.add(t.host)
        if isinstance(t, NicAcrossSocketTarget) and t.gpu >= spec.node.gpus:
            out.append(((*loc, "gpu"), f"GPU {t.gpu} >= gpus ({spec.node.gpus})"))
        if isinstance(t, SwappedNicTarget):
            if t.nics[0] == t.nics[1] or max(t.nics) >= spec.rails:
                out.append(((*loc, "nics"), f"two distinct compute NIC columns below {spec.rails}"))
    return out


# --- loading and error mapping --------------------------------------------------------------


def load_spec(path: str | Path) -> ClusterSpec:
    """Load and validate a spec file; errors carry field paths and YAML line numbers."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    return parse_spec_text(text, source=str(path))


def parse_spec_text(text: str, source: str | None = None) -> ClusterSpec:
    """Validate YAML text (kept separate from the file read so tests can feed strings)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise SpecError(
            [SpecIssue("", f"not valid YAML: {getattr(exc, 'problem', exc)}", line)], source
        ) from None
    return parse_spec(data, source=source, root=root)


def parse_spec(data: Any, source: str | None = None, root: yaml.Node | None = None) -> ClusterSpec:
    """Validate a spec mapping; ``root`` (from ``yaml.compose``) lets errors name YAML lines."""
    if not isinstance(data, dict):
        line = root.start_mark.line + 1 if root is not None else None
        raise SpecError([SpecIssue("", f"a spec is a mapping, got {type(data).__name__}", line)], source)
    try:
        return ClusterSpec.__pydantic_validator__.validate_python(data)
    except ValidationError as exc:
        raise SpecError(_issues_from(exc, root), source) from None


def _issues_from(exc: ValidationError, root: yaml.Node | None) -> list[SpecIssue]:
    """Turn pydantic errors into issues; union branches at one path merge into one issue."""
    merged: dict[str, SpecIssue] = {}
    for err in exc.errors(include_url=False):
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, _Inconsistent):
            pairs = [(loc, msg, "value_error") for loc, msg in ctx_error.issues]
        else:
            message = _describe(err)
            pairs = [(tuple(err["loc"]), message, err["type"])]
        for loc, message, etype in pairs:
            path, line = _locate(root, loc, missing=etype == "missing")
            if path in merged:
                prev = merged[path]
                if message not in prev.message:
                    merged[path] = SpecIssue(path, f"{prev.message}; or {message}", prev.line)
            else:
                merged[path] = SpecIssue(path, message, line)
    return list(merged.values())


def _describe(err: Any) -> str:
    etype = err["type"]
    if etype == "missing":
        return "required field is missing"
    if etype == "extra_forbidden":
        return "unknown key (not part of the spec schema)"
    msg = str(err["msg"]).removeprefix("Value error, ")
    value = repr(err.get("input"))
    if len(value) > 60:
        value = value[:57] + "..."
    return f"{msg} (got {value})"


def _is_union_tag(el: str | int) -> bool:
    """Pydantic adds the branch type to the loc of union errors (``int``, ``list[str]``)."""
    return isinstance(el, str) and ("[" in el or el in {"int", "str", "float", "bool", "list", "tuple"})


def _locate(root: yaml.Node | None, loc: tuple[str | int, ...], *, missing: bool) -> tuple[str, int | None]:
    """Map a pydantic ``loc`` to a dotted path and the 1-based YAML line it points at."""
    path = ""
    node = root
    line = root.start_mark.line + 1 if root is not None else None
    for i, el in enumerate(loc):
        last = i == len(loc) - 1
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode) and isinstance(el, str):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == el:
                    child = value
                    line = key.start_mark.line + 1
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(el, int) and 0 <= el < len(node.value):
            child = node.value[el]
            line = child.start_mark.line + 1
        if child is None and _is_union_tag(el) and not (last and missing):
            continue
        if isinstance(el, int):
            path += f"[{el}]"
        else:
            path = f"{path}.{el}" if path else el
        node = child
    return path, line
