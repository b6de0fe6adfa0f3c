"""Build the ground truth of a cluster from its spec: every device, port, cable, tier and domain.

Every twin in ``simulator/`` (SNMP agents, SSH switches, UFM, ibnetdiscover, DCIM exports) renders
this one object, and tests compare what the pipeline derives against it. So generation is pure
and deterministic: the same spec and seed give an equal :class:`GroundTruth`, identities are
hashes of name + seed (stable across runs and machines, never ``hash()``), and every injected
defect is recorded with exactly the devices, ports and links it touched, so a test can say
"the pipeline found precisely the defects we planted and nothing else".

Wiring follows the NVIDIA DGX SuperPOD reference architectures:

* rail-optimised compute fabric: HCA ``mlx5_r`` (rail r) of the node at position p of rail group
  g of SU s lands on port p+1 of leaf (s, g, r); leaf uplinks follow the host ports;
* two tiers: every leaf connects to every spine with ``uplinks / spines`` parallel links;
* three tiers: spine groups of ``sus_per_spine_group`` SUs; every leaf connects to every spine of
  its group; spine j of every spine group uplinks to core group j, spreading its uplinks evenly
  over that group's cores (the B200 RA at 16 SUs: 128 leaves, 128 spines, 64 cores);
* NVLink is not cabled here: it is recorded as per-host domains (HGX: one domain per node;
  NVL72: one domain per rack of 18 trays, cut into equal sub-domains);
* one frontend/management NIC per host to an Ethernet leaf (hosts in order, filling leaves);
  leaves use their last ports as uplinks to every spine; leaves and spines cycle through the
  listed platforms so each vendor's port naming appears;
* service hosts (UFM, storage, login, management servers; ``spec.service_hosts``) are hosts with
  a non-compute ``role``: HCA ``i`` on the rail-``rails[i]`` leaf's first free port, no GPUs, no
  Ethernet cable, no domains. :meth:`GroundTruth.hosts` stays the compute hosts (every GPU-node
  twin iterates it); :meth:`GroundTruth.service_hosts` lists the others, and the IB twins and
  DCIM, which iterate devices, HCAs and links, show them as the real fabric and inventory would.
"""

from __future__ import annotations

import gc
import hashlib
import random
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.hostlist import expand
from core.models import (
    Device,
    DeviceKind,
    HostDomains,
    IdentityKind,
    Link,
    LinkKind,
    Port,
    PortRef,
    Tier,
)
from simulator.gpu_topo import TEMPLATES as TOPO_TEMPLATES
from simulator.gpu_topo import ExpectedFinding, GpuTopoFault, GpuTopoTruth, build_gpu_topo, expected_findings
from simulator.spec import DEFECT_KNOBS, IB_PLATFORMS, ClusterSpec, MiscabledTarget, SpecError, SpecIssue

# --- vendor data ------------------------------------------------------------------------------

ETH_PORT_STYLE: dict[str, tuple[str, int, int]] = {
    # platform: (template, number of the first port, step between ports)
    "arista_eos": ("Ethernet{n}", 1, 1),  # EOS: Ethernet1, Ethernet2, ...
    "cisco_nxos": ("Ethernet1/{n}", 1, 1),  # NX-OS: slot/port
    "juniper_junos": ("et-0/0/{n}", 0, 1),  # Junos: fpc/pic/port, 0-based; et- = 40G and faster
    "mellanox_mlnxos": ("Eth1/{n}", 1, 1),  # Onyx (MLNX-OS)
    "sonic": ("Ethernet{n}", 0, 4),  # SONiC: named by first SerDes lane, 4 lanes per port
    "cumulus": ("swp{n}", 1, 1),  # Cumulus Linux: switch ports are swpN
}
"""How each Ethernet platform names its front-panel port k (1-based)."""

ETH_OUI: dict[str, str] = {
    # Typical vendor OUIs, so MAC-based vendor guesses in the pipeline see plausible values.
    "arista_eos": "44:4c:a8",
    "cisco_nxos": "58:97:bd",
    "juniper_junos": "3c:61:04",
    "mellanox_mlnxos": "98:03:9b",
    "sonic": "04:f8:f8",
    "cumulus": "1c:34:da",
}
HOST_NIC_OUI = "b4:96:91"
IB_OUI = "b83fd2"  # Mellanox/NVIDIA OUI as it appears in ConnectX and Quantum node GUIDs

HCA_MODEL: dict[str, str] = {"hdr": "ConnectX-6", "ndr": "ConnectX-7", "xdr": "ConnectX-8"}


def eth_port_name(platform: str, k: int) -> str:
    """The platform's own name for front-panel port ``k`` (1-based)."""
    template, first, step = ETH_PORT_STYLE[platform]
    return template.format(n=first + (k - 1) * step)


# --- result types -----------------------------------------------------------------------------


class DefectKind(StrEnum):
    MISCABLED_PORT = "miscabled_port"
    MISSING_LINK = "missing_link"
    DEGRADED_UPLINKS = "degraded_uplinks"
    UNNAMED_HCA = "unnamed_hca"
    DUPLICATE_SYSNAME = "duplicate_sysname"
    DCIM_MISSING_HOST = "dcim_missing_host"
    DCIM_EXTRA_HOST = "dcim_extra_host"


KNOB_KIND: dict[str, DefectKind] = {
    "miscabled_ports": DefectKind.MISCABLED_PORT,
    "missing_links": DefectKind.MISSING_LINK,
    "degraded_uplinks": DefectKind.DEGRADED_UPLINKS,
    "unnamed_hcas": DefectKind.UNNAMED_HCA,
    "duplicate_sysnames": DefectKind.DUPLICATE_SYSNAME,
    "dcim_missing_hosts": DefectKind.DCIM_MISSING_HOST,
    "dcim_extra_hosts": DefectKind.DCIM_EXTRA_HOST,
}
"""Spec knob -> the kind of the defects it injects (one defect per count unit / target)."""


class InjectedDefect(BaseModel):
    """One planted defect and exactly what it touched, so findings can be checked one-to-one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: DefectKind
    description: str
    hosts: tuple[str, ...] = Field(default=(), description="host names involved (incl. DCIM-only names)")
    devices: tuple[str, ...] = Field(default=(), description="identities of fabric devices touched")
    ports: tuple[PortRef, ...] = ()
    removed_links: tuple[Link, ...] = Field(default=(), description="clean-truth links that are gone")
    added_links: tuple[Link, ...] = Field(default=(), description="links that exist only because of it")
    detail: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class DcimHca:
    """One HCA as the inventory lists it: the intended rail, not where the cable really went."""

    name: str
    rail: int
    guid: str

    def __str__(self) -> str:
        return f"{self.name}:rail{self.rail}:{self.guid}"


@dataclass(frozen=True)
class DcimRecord:
    """One node row of the data-center inventory (DCIM) export."""

    rack: str
    node: str
    role: str
    gpu_model: str | None  # None: a server without GPUs (the export leaves the cell empty)
    gpu_count: int
    hca_count: int
    hcas: tuple[DcimHca, ...]
    bmc_address: str
    serial: str
    su: str

    @property
    def hcas_field(self) -> str:
        """The ``hcas`` column: ``mlx5_0:rail0:<guid>;mlx5_1:rail1:<guid>;...``."""
        return ";".join(str(h) for h in self.hcas)


@dataclass(frozen=True)
class GroundTruth:
    """Everything that is physically true about the simulated cluster, defects included."""

    spec: ClusterSpec
    devices: list[Device]
    ports: list[Port]
    links: list[Link]
    tiers: dict[str, Tier]
    host_domains: dict[str, HostDomains]
    defects: list[InjectedDefect]
    dcim: list[DcimRecord]

    # -- indexes (cached_property writes __dict__ directly, so it works on a frozen dataclass
    #    and does not take part in equality) --

    @cached_property
    def _by_id(self) -> dict[str, Device]:
        return {d.id: d for d in self.devices}

    @cached_property
    def _links_by_device(self) -> dict[str, list[Link]]:
        index: dict[str, list[Link]] = defaultdict(list)
        for link in self.links:
            index[link.a.device_id].append(link)
            if link.b.device_id != link.a.device_id:
                index[link.b.device_id].append(link)
        return dict(index)

    @cached_property
    def _link_by_port(self) -> dict[tuple[str, str], Link]:
        index: dict[tuple[str, str], Link] = {}
        for link in self.links:
            index[(link.a.device_id, link.a.port)] = link
            index[(link.b.device_id, link.b.port)] = link
        return index

    @cached_property
    def _ports_by_device(self) -> dict[str, list[Port]]:
        index: dict[str, list[Port]] = defaultdict(list)
        for port in self.ports:
            index[port.device_id].append(port)
        return dict(index)

    @cached_property
    def _children(self) -> dict[str, list[Device]]:
        index: dict[str, list[Device]] = defaultdict(list)
        for dev in self.devices:
            if dev.parent_id is not None:
                index[dev.parent_id].append(dev)
        return dict(index)

    # -- queries --

    def device(self, device_id: str) -> Device:
        """The device with this identity (KeyError if none)."""
        return self._by_id[device_id]

    def named(self, name: str) -> list[Device]:
        """Devices whose (reported) name is ``name``; more than one when sysNames collide."""
        return [d for d in self.devices if d.name == name]

    def hosts(self) -> list[Device]:
        """The compute hosts (GPU nodes), in spec order."""
        return [d for d in self.devices if d.kind is DeviceKind.HOST and d.attributes.get("role") == "compute"]

    def service_hosts(self) -> list[Device]:
        """Hosts on the fabric that are not compute hosts (UFM, storage, login, management)."""
        return [d for d in self.devices if d.kind is DeviceKind.HOST and d.attributes.get("role") != "compute"]

    def switches(self, tier: Tier | str | None = None, fabric: LinkKind | str | None = None) -> list[Device]:
        """Switches, optionally of one tier and one fabric (``ib`` or ``eth``)."""
        out = []
        for d in self.devices:
            if d.kind is not DeviceKind.SWITCH:
                continue
            if tier is not None and d.attributes["tier"] != Tier(tier):
                continue
            if fabric is not None and d.attributes["fabric"] != LinkKind(fabric):
                continue
            out.append(d)
        return out

    def hcas(self, host: str | None = None) -> list[Device]:
        """HCAs of one host, or every HCA on the fabric (service hosts' included)."""
        if host is not None:
            return [d for d in self._children.get(host, []) if d.kind is DeviceKind.HCA]
        return [d for d in self.devices if d.kind is DeviceKind.HCA]

    def gpus(self, host: str | None = None) -> list[Device]:
        if host is not None:
            return [d for d in self._children.get(host, []) if d.kind is DeviceKind.GPU]
        return [d for d in self.devices if d.kind is DeviceKind.GPU]

    def ports_of(self, device_id: str) -> list[Port]:
        return list(self._ports_by_device.get(device_id, []))

    def links_of(self, device_id: str) -> list[Link]:
        return list(self._links_by_device.get(device_id, []))

    def link_at(self, device_id: str, port: str) -> Link | None:
        """The link plugged into this port, if any."""
        return self._link_by_port.get((device_id, port))

    def peer(self, device_id: str, port: str) -> PortRef | None:
        """The far end of the cable in this port."""
        link = self.link_at(device_id, port)
        if link is None:
            return None
        return link.b if (link.a.device_id, link.a.port) == (device_id, port) else link.a

    def defects_of(self, kind: DefectKind | str) -> list[InjectedDefect]:
        return [d for d in self.defects if d.kind == DefectKind(kind)]

    # -- inside the nodes (issue 23): computed on first use, most callers never need it --

    @cached_property
    def gpu_topo(self) -> GpuTopoTruth:
        """Every compute node's ``nvidia-smi topo -m`` matrix, with the spec's matrix faults."""
        name = self.spec.node.topology_template
        d = self.spec.gpu_topo_faults
        faults = [
            GpuTopoFault("nic_across_socket", t.host, gpu=t.gpu,
                                  description=f"{t.host} GPU{t.gpu} reaches every compute NIC only across the socket")
            for t in d.nic_across_socket
        ] + [
            GpuTopoFault("swapped_nic_order", t.host, nics=t.nics,
                                  description=f"{t.host}'s NIC{t.nics[0]} and NIC{t.nics[1]} device names swapped")
            for t in d.swapped_nic_order
        ]  # fmt: skip
        template = TOPO_TEMPLATES[name] if name else None
        return build_gpu_topo([h.name for h in self.hosts()], template, faults)

    def affinity_findings(self) -> set[ExpectedFinding]:
        """The GPU-NIC affinity findings the pipeline must report on this cluster: the matrix faults'
        and those the fabric's miscabled ports cause inside the nodes."""
        miscabled = [d.detail for d in self.defects_of(DefectKind.MISCABLED_PORT)]
        return expected_findings(self.gpu_topo, miscabled, fleet=len(self.hosts()))


# --- identities -------------------------------------------------------------------------------


class _Ids:
    """Deterministic, collision-free identities from a hash of (seed, namespace, name)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.used: set[str] = set()

    def _digest(self, namespace: str, name: str, salt: int) -> str:
        data = f"{self.seed}|{namespace}|{name}|{salt}".encode()
        return hashlib.blake2b(data, digest_size=16).hexdigest()

    def _unique(self, namespace: str, name: str, render: Any) -> str:
        salt = 0
        while True:
            value: str = render(self._digest(namespace, name, salt))
            if value not in self.used:
                self.used.add(value)
                return value
            salt += 1

    def guid(self, name: str) -> str:
        """Node GUID ``0x`` + 16 hex digits: Mellanox OUI, ``03``, 8 hashed digits."""
        return self._unique("guid", name, lambda h: f"0x{IB_OUI}03{h[:8]}")

    def mac(self, oui: str, name: str) -> str:
        return self._unique("mac", name, lambda h: f"{oui}:{h[0:2]}:{h[2:4]}:{h[4:6]}")

    def gpu_uuid(self, name: str) -> str:
        return self._unique("gpu", name, lambda h: f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}")

    def serial(self, name: str) -> str:
        return self._unique("serial", name, lambda h: f"{int(h[:12], 16) % 10**13:013d}")


# --- the builder ------------------------------------------------------------------------------


@dataclass
class _HostSlot:
    """Where a host sits in the structure (indices are 0-based)."""

    index: int
    name: str
    su: int
    rail_group: int
    position: int  # within its rail group: leaf port position + 1
    rack: int


@dataclass
class _Wiring:
    """Links being built, indexed by port so defects can find and replace cables."""

    links: dict[tuple[str, str, str, str], Link] = field(default_factory=dict)
    by_port: dict[tuple[str, str], tuple[str, str, str, str]] = field(default_factory=dict)

    def add(self, link: Link) -> None:
        for end in (link.a, link.b):
            if (end.device_id, end.port) in self.by_port:
                raise AssertionError(f"port {end} cabled twice")
        self.links[link.key] = link
        self.by_port[(link.a.device_id, link.a.port)] = link.key
        self.by_port[(link.b.device_id, link.b.port)] = link.key

    def remove(self, key: tuple[str, str, str, str]) -> Link:
        link = self.links.pop(key)
        del self.by_port[(link.a.device_id, link.a.port)]
        del self.by_port[(link.b.device_id, link.b.port)]
        return link

    def at(self, device_id: str, port: str) -> Link | None:
        key = self.by_port.get((device_id, port))
        return None if key is None else self.links[key]


def _su_name(spec: ClusterSpec, s: int) -> str:
    return f"su{s + 1:0{max(2, len(str(spec.scalable_units)))}d}"


def generate(spec: ClusterSpec) -> GroundTruth:
    """Build the ground truth for ``spec``: pure, deterministic, seeded by ``spec.seed``.

    The cyclic garbage collector is paused while building: tens of thousands of small,
    acyclic model objects otherwise trigger repeated full collections that cost about a third
    of the run time on b200-16su. It is restored on exit, even on error.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _Builder(spec).build()
    finally:
        if was_enabled:
            gc.enable()


class _Builder:
    """Builds the clean cluster, then hands it to the defect placer; used once per ``generate``."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.ids = _Ids(spec.seed)
        self.devices: list[Device] = []
        self.dev_index: dict[str, int] = {}
        self.ports: list[Port] = []
        self.wiring = _Wiring()
        self.tiers: dict[str, Tier] = {}
        self.slots: list[_HostSlot] = []
        self.hca_ids: dict[tuple[int, int], str] = {}  # (host index, rail) -> HCA GUID
        self.leaf_ids: dict[tuple[int, int, int], str] = {}  # (su, rail group, rail) -> GUID
        self.leaf_uplinks: dict[str, list[tuple[str, str, str, str]]] = {}
        self.host_leaf_keys: list[tuple[str, str, str, str]] = []
        self.leaf_spine_keys: list[tuple[str, str, str, str]] = []
        self.eth_switch_ids: list[str] = []
        self.names: dict[str, str] = {}  # host and switch (inventory) names -> identity

    # -- helpers --

    def _add_device(self, device: Device) -> None:
        self.dev_index[device.id] = len(self.devices)
        self.devices.append(device)

    def _replace_device(self, device_id: str, **update: Any) -> Device:
        i = self.dev_index[device_id]
        new = self.devices[i].model_copy(update=update)
        self.devices[i] = new
        return new

    def _link(self, x: PortRef, y: PortRef, kind: LinkKind, speed: float) -> Link:
        width = "4x" if kind is LinkKind.IB else None
        return Link.between(x, y, kind=kind, speed_gbps=speed, width=width)

    # -- build --

    def build(self) -> GroundTruth:
        self._hosts()
        self._ib_switches_and_links()
        self._eth_fabric()
        self._service_hosts()
        domains = self._host_domains()
        dcim = self._dcim()
        defects = _DefectPlacer(self, dcim).place()
        links = sorted(self.wiring.links.values(), key=lambda lk: lk.key)
        return GroundTruth(
            spec=self.spec,
            devices=self.devices,
            ports=self.ports,
            links=links,
            tiers=self.tiers,
            host_domains=domains,
            defects=defects,
            dcim=dcim,
        )

    def _hosts(self) -> None:
        spec = self.spec
        speed = spec.link_speed_gbps
        npg = spec.nodes_per_rail_group
        hca_model = HCA_MODEL[spec.compute_fabric.speed]
        for h, name in enumerate(spec.host_names):
            s, w = divmod(h, spec.nodes_per_su)
            g, p = divmod(w, npg)
            slot = _HostSlot(
                index=h, name=name, su=s, rail_group=g, position=p, rack=h // spec.nodes_per_rack
            )
            self.slots.append(slot)
            self.names[name] = name
            self._add_device(
                Device(
                    id=name,
                    kind=DeviceKind.HOST,
                    identity_kind=IdentityKind.NODE_NAME,
                    name=name,
                    attributes={
                        "role": "compute",
                        "model": spec.node.model,
                        "rack": spec.rack_names[slot.rack],
                        "su": _su_name(spec, s),
                        "rail_group": g,
                        "gpu_model": spec.node.gpu_model,
                        "gpu_count": spec.node.gpus,
                        "hca_count": spec.rails,
                        "serial": self.ids.serial(name),
                        "bmc_address": _bmc_address(h),
                    },
                )
            )
            nic = spec.node.frontend_nic
            self.ports.append(
                Port(
                    device_id=name,
                    port=nic,
                    vendor_name=nic,
                    mac=self.ids.mac(HOST_NIC_OUI, name),
                    speed_gbps=spec.management_fabric.host_speed_gbps,
                )
            )
            for r in range(spec.rails):
                hca = f"mlx5_{r}"
                guid = self.ids.guid(f"hca:{name}:{hca}")
                self.hca_ids[(h, r)] = guid
                self._add_device(
                    Device(
                        id=guid,
                        kind=DeviceKind.HCA,
                        identity_kind=IdentityKind.NODE_GUID,
                        name=f"{name} {hca}",
                        system_guid=guid,
                        parent_id=name,
                        attributes={
                            "hca": hca,
                            "rail": r,
                            "model": hca_model,
                            "node_description": f"{name} {hca}",
                        },
                    )
                )
                self.ports.append(
                    Port(
                        device_id=guid,
                        port="1",
                        vendor_name="1",
                        guid=guid,
                        rail=r,
                        speed_gbps=speed,
                        description=f"{name} {hca}",
                    )
                )
            for k in range(spec.node.gpus):
                self._add_device(
                    Device(
                        id=self.ids.gpu_uuid(f"{name}:gpu{k}"),
                        kind=DeviceKind.GPU,
                        identity_kind=IdentityKind.GPU_UUID,
                        name=f"{name} gpu{k}",
                        parent_id=name,
                        attributes={"index": k, "model": spec.node.gpu_model},
                    )
                )

    def _ib_switch(self, name: str, tier: Tier, platform: str, radix: int, **attrs: Any) -> str:
        guid = self.ids.guid(f"ibsw:{name}")
        self._add_device(
            Device(
                id=guid,
                kind=DeviceKind.SWITCH,
                identity_kind=IdentityKind.NODE_GUID,
                name=name,
                platform=platform,
                system_guid=guid,  # single-ASIC Quantum systems: system image GUID = node GUID
                attributes={
                    "fabric": LinkKind.IB,
                    "tier": tier,
                    "model": IB_PLATFORMS[platform].model,
                    "radix": radix,
                    **attrs,
                },
            )
        )
        speed = self.spec.link_speed_gbps
        # Plain numbered ports built right here: skip re-validating ~20k of them (b200-16su).
        self.ports.extend(
            Port.model_construct(device_id=guid, port=str(n), vendor_name=str(n), speed_gbps=float(speed))
            for n in range(1, radix + 1)
        )
        self.tiers[guid] = tier
        self.names[name] = guid
        return guid

    def _ib_switches_and_links(self) -> None:
        spec = self.spec
        cf = spec.compute_fabric
        speed = spec.link_speed_gbps
        groups = cf.rail_groups_per_su
        sus_per_sg = cf.sus_per_spine_group or spec.scalable_units
        # leaves, in (su, rail group, rail) order = global leaf index
        leaves: list[str] = []
        for s in range(spec.scalable_units):
            for g in range(groups):
                for r in range(spec.rails):
                    su = _su_name(spec, s)
                    name = f"ib-leaf-{su}-r{r}" if groups == 1 else f"ib-leaf-{su}-rg{g + 1:02d}-r{r}"
                    sg = s // sus_per_sg
                    guid = self._ib_switch(
                        name,
                        Tier.LEAF,
                        cf.leaf.platform,
                        cf.leaf.radix,
                        su=su,
                        rail_group=g,
                        rail=r,
                        spine_group=f"sg{sg + 1:02d}",
                    )
                    self.leaf_ids[(s, g, r)] = guid
                    self.leaf_uplinks[guid] = []
                    leaves.append(guid)
        # spines, per spine group
        spines: list[list[str]] = []
        for sg in range(spec.spine_groups):
            group = []
            for j in range(spec.spines_per_group):
                name = f"ib-spine-{j + 1:02d}" if cf.tiers == 2 else f"ib-spine-sg{sg + 1:02d}-{j + 1:02d}"
                group.append(
                    self._ib_switch(
                        name,
                        Tier.SPINE,
                        cf.spine.platform,
                        cf.spine.radix,
                        spine_group=f"sg{sg + 1:02d}",
                        position=j,
                    )
                )
            spines.append(group)
        # cores, per core group (core group j serves spine position j of every spine group)
        cores: list[list[str]] = []
        if cf.tiers == 3 and cf.core is not None:
            width = max(2, len(str(cf.core.count)))
            for j in range(spec.core_groups):
                cores.append(
                    [
                        self._ib_switch(
                            f"ib-core-{j * spec.cores_per_group + c + 1:0{width}d}",
                            Tier.CORE,
                            cf.core.platform,
                            cf.core.radix,
                            core_group=f"cg{j + 1:02d}",
                        )
                        for c in range(spec.cores_per_group)
                    ]
                )

        # host -> leaf (rail-optimised)
        for slot in self.slots:
            for r in range(spec.rails):
                leaf = self.leaf_ids[(slot.su, slot.rail_group, r)]
                link = self._link(
                    PortRef(device_id=self.hca_ids[(slot.index, r)], port="1"),
                    PortRef(device_id=leaf, port=str(slot.position + 1)),
                    LinkKind.IB,
                    speed,
                )
                self.wiring.add(link)
                self.host_leaf_keys.append(link.key)

        # leaf -> spine: every leaf to every spine of its group, m parallel links
        down = spec.leaf_downlinks
        m = spec.leaf_links_per_spine
        lpg = spec.leaves_per_spine_group
        for li, leaf in enumerate(leaves):
            sg, l_in = divmod(li, lpg)
            for j, spine in enumerate(spines[sg]):
                for t in range(m):
                    link = self._link(
                        PortRef(device_id=leaf, port=str(down + j * m + t + 1)),
                        PortRef(device_id=spine, port=str(l_in * m + t + 1)),
                        LinkKind.IB,
                        speed,
                    )
                    self.wiring.add(link)
                    self.leaf_spine_keys.append(link.key)
                    self.leaf_uplinks[leaf].append(link.key)

        # spine -> core: spine j of every group to each core of core group j, q parallel links
        if cores:
            sdown = spec.spine_downlinks
            q = spec.spine_links_per_core
            for sg, group in enumerate(spines):
                for j, spine in enumerate(group):
                    for c, core in enumerate(cores[j]):
                        for u in range(q):
                            self.wiring.add(
                                self._link(
                                    PortRef(device_id=spine, port=str(sdown + c * q + u + 1)),
                                    PortRef(device_id=core, port=str(sg * q + u + 1)),
                                    LinkKind.IB,
                                    speed,
                                )
                            )

    def _eth_switch(self, name: str, tier: Tier, platform: str, radix: int, uplinks: int) -> str:
        mac = self.ids.mac(ETH_OUI[platform], f"eth:{name}")
        self._add_device(
            Device(
                id=mac,
                kind=DeviceKind.SWITCH,
                identity_kind=IdentityKind.CHASSIS_MAC,
                name=name,
                platform=platform,
                attributes={"fabric": LinkKind.ETH, "tier": tier, "radix": radix, "inventory_name": name},
            )
        )
        mf = self.spec.management_fabric
        first_uplink = radix - uplinks + 1
        for k in range(1, radix + 1):
            pname = eth_port_name(platform, k)
            speed = mf.uplink_speed_gbps if (k >= first_uplink or tier is Tier.SPINE) else mf.host_speed_gbps
            self.ports.append(Port(device_id=mac, port=pname, vendor_name=pname, speed_gbps=speed))
        self.tiers[mac] = tier
        self.names[name] = mac
        self.eth_switch_ids.append(mac)
        return mac

    def _eth_fabric(self) -> None:
        spec = self.spec
        mf = spec.management_fabric
        up = spec.eth_leaf_uplinks
        leaves: list[tuple[str, str]] = []
        for i in range(mf.leaf.count):
            platform = mf.leaf.platforms[i % len(mf.leaf.platforms)]
            leaves.append(
                (self._eth_switch(f"eth-leaf-{i + 1:02d}", Tier.LEAF, platform, mf.leaf.radix, up), platform)
            )
        spines: list[tuple[str, str]] = []
        for i in range(mf.spine.count):
            platform = mf.spine.platforms[i % len(mf.spine.platforms)]
            spines.append(
                (
                    self._eth_switch(f"eth-spine-{i + 1:02d}", Tier.SPINE, platform, mf.spine.radix, 0),
                    platform,
                )
            )
        hpl = spec.eth_hosts_per_leaf
        nic = spec.node.frontend_nic
        for slot in self.slots:
            leaf, leaf_platform = leaves[slot.index // hpl]
            k = slot.index % hpl + 1
            self.wiring.add(
                self._link(
                    PortRef(device_id=slot.name, port=nic),
                    PortRef(device_id=leaf, port=eth_port_name(leaf_platform, k)),
                    LinkKind.ETH,
                    mf.host_speed_gbps,
                )
            )
        L = mf.links_per_spine
        for i, (leaf, lplat) in enumerate(leaves):
            first = mf.leaf.radix - up + 1
            for j, (spine, splat) in enumerate(spines):
                for t in range(L):
                    self.wiring.add(
                        self._link(
                            PortRef(device_id=leaf, port=eth_port_name(lplat, first + j * L + t)),
                            PortRef(device_id=spine, port=eth_port_name(splat, i * L + t + 1)),
                            LinkKind.ETH,
                            mf.uplink_speed_gbps,
                        )
                    )

    def _service_hosts(self) -> None:
        """Service hosts after everything else, so compute identities and wiring do not move."""
        spec = self.spec
        speed = spec.link_speed_gbps
        hca_model = HCA_MODEL[spec.compute_fabric.speed]
        first_free = spec.leaf_downlinks + spec.leaf_uplinks + 1
        taken: dict[str, int] = defaultdict(int)
        for k, sh in enumerate(spec.service_hosts):
            self.names[sh.name] = sh.name
            self._add_device(
                Device(
                    id=sh.name,
                    kind=DeviceKind.HOST,
                    identity_kind=IdentityKind.NODE_NAME,
                    name=sh.name,
                    attributes={
                        "role": sh.role,
                        "model": sh.model,
                        "rack": sh.rack,
                        "gpu_count": 0,
                        "hca_count": len(sh.rails),
                        "serial": self.ids.serial(sh.name),
                        "bmc_address": _bmc_address(len(spec.host_names) + k),
                    },
                )
            )
            for i, rail in enumerate(sh.rails):
                hca = f"mlx5_{i}"
                guid = self.ids.guid(f"hca:{sh.name}:{hca}")
                self._add_device(
                    Device(
                        id=guid,
                        kind=DeviceKind.HCA,
                        identity_kind=IdentityKind.NODE_GUID,
                        name=f"{sh.name} {hca}",
                        system_guid=guid,
                        parent_id=sh.name,
                        attributes={
                            "hca": hca,
                            "rail": rail,
                            "model": hca_model,
                            "node_description": f"{sh.name} {hca}",
                        },
                    )
                )
                self.ports.append(
                    Port(
                        device_id=guid, port="1", vendor_name="1", guid=guid, rail=rail, speed_gbps=speed,
                        description=f"{sh.name} {hca}",
                    )
                )  # fmt: skip
                s, g, r = spec.service_leaf(sh, i)
                leaf = self.leaf_ids[(s, g, r)]
                port = first_free + taken[leaf]
                taken[leaf] += 1
                self.wiring.add(
                    self._link(
                        PortRef(device_id=guid, port="1"), PortRef(device_id=leaf, port=str(port)), LinkKind.IB, speed
                    )
                )

    def _host_domains(self) -> dict[str, HostDomains]:
        spec = self.spec
        cf = spec.compute_fabric
        sus_per_sg = cf.sus_per_spine_group or spec.scalable_units
        nv = spec.nvlink
        per_sub = nv.nodes_per_domain // nv.sub_domains
        out: dict[str, HostDomains] = {}
        for slot in self.slots:
            su = _su_name(spec, slot.su)
            # block = the set of hosts sharing leaves: the SU, or its rail group when an SU has several
            block = su if cf.rail_groups_per_su == 1 else f"{su}-rg{slot.rail_group + 1:02d}"
            if nv.kind == "hgx":
                domain = f"nvl-{slot.name}"
                sub = domain  # an HGX baseboard is not subdivided: sub-domain = domain
            else:
                d, pos = divmod(slot.index, nv.nodes_per_domain)
                domain = f"nvl72-{spec.rack_names[d]}"
                sub = f"{domain}-s{pos // per_sub + 1}"
            out[slot.name] = HostDomains(
                host=slot.name,
                block=block,
                spine_group=f"sg{slot.su // sus_per_sg + 1:02d}",
                pod="pod01",  # one core layer (or one spine layer): the whole fabric is one pod
                nvlink_domain=domain,
                nvlink_sub_domain=sub,
            )
        return out

    def _dcim(self) -> list[DcimRecord]:
        spec = self.spec
        records = []
        for slot in self.slots:
            host = self.devices[self.dev_index[slot.name]]
            records.append(
                DcimRecord(
                    rack=spec.rack_names[slot.rack],
                    node=slot.name,
                    role="compute",
                    gpu_model=spec.node.gpu_model,
                    gpu_count=spec.node.gpus,
                    hca_count=spec.rails,
                    hcas=tuple(
                        DcimHca(f"mlx5_{r}", r, self.hca_ids[(slot.index, r)]) for r in range(spec.rails)
                    ),
                    bmc_address=host.attributes["bmc_address"],
                    serial=host.attributes["serial"],
                    su=_su_name(spec, slot.su),
                )
            )
        for sh in spec.service_hosts:
            host = self.devices[self.dev_index[sh.name]]
            records.append(
                DcimRecord(
                    rack=sh.rack,
                    node=sh.name,
                    role=sh.role,
                    gpu_model=None,
                    gpu_count=0,
                    hca_count=len(sh.rails),
                    hcas=tuple(
                        DcimHca(hca.attributes["hca"], hca.attributes["rail"], hca.id)
                        for hca in sorted(
                            (d for d in self.devices if d.parent_id == sh.name and d.kind is DeviceKind.HCA),
                            key=lambda d: str(d.attributes["hca"]),
                        )
                    ),
                    bmc_address=host.attributes["bmc_address"],
                    serial=host.attributes["serial"],
                    su="",  # in the management rack, in no SU
                )
            )
        return records


def _bmc_address(index: int) -> str:
    """Out-of-band BMC address: 10.128.0.0/16, skipping .0-.9 and the top of each /24."""
    return f"10.128.{index // 200}.{index % 200 + 10}"


# --- defects ----------------------------------------------------------------------------------


class _DefectPlacer:
    """Plants the spec's defects into a clean build, recording exactly what each one touched.

    Explicit targets are placed first (so a count can never take a port a target names), then
    counts, knob by knob in ``DEFECT_KNOBS`` order, each knob drawing from its own seeded stream.
    Link defects never share a port, so the diff against the clean truth splits exactly into the
    defects' removed and added links.
    """

    def __init__(self, builder: _Builder, dcim: list[DcimRecord]) -> None:
        self.b = builder
        self.spec = builder.spec
        self.dcim = dcim
        self.touched: set[tuple[str, str]] = set()
        self.degraded_leaves: set[str] = set()
        self.renamed: set[str] = set()
        self.unnamed: set[tuple[int, int]] = set()
        self.dcim_missing: set[str] = set()
        self.out: dict[str, list[InjectedDefect]] = {knob: [] for knob in KNOB_KIND}

    def _rng(self, knob: str) -> random.Random:
        return random.Random(f"{self.spec.seed}:defects:{knob}")

    def _fail(self, path: str, message: str) -> SpecError:
        return SpecError([SpecIssue(f"defects.{path}", message)], self.spec.name)

    def _free(self, *ends: PortRef) -> bool:
        return not any((e.device_id, e.port) in self.touched for e in ends)

    def _touch(self, *ends: PortRef) -> None:
        self.touched.update((e.device_id, e.port) for e in ends)

    def place(self) -> list[InjectedDefect]:
        d = self.spec.defects
        for explicit in (True, False):
            for knob in DEFECT_KNOBS:
                value = getattr(d, knob)
                if isinstance(value, int) == explicit:
                    continue
                getattr(self, f"_{knob}")(value, self._rng(knob))
        return [defect for knob in DEFECT_KNOBS for defect in self.out[knob]]

    # -- link defects --

    def _miscabled_ports(self, value: int | list[MiscabledTarget], rng: random.Random) -> None:
        spec = self.spec
        slots = self.b.slots
        by_name = {s.name: s for s in slots}
        npg = spec.nodes_per_rail_group
        if not isinstance(value, int):
            for i, t in enumerate(value):
                a = by_name[t.host]
                to_rail = (
                    t.to_rail
                    if t.to_rail is not None
                    else rng.choice([r for r in range(spec.rails) if r != t.rail])
                )
                if t.with_host is None:
                    b = slots[a.index - a.position + rng.randrange(npg)]
                else:
                    b = by_name[t.with_host]
                    if (b.su, b.rail_group) != (a.su, a.rail_group):
                        raise self._fail(
                            f"miscabled_ports[{i}].with_host", f"{b.name} is not in {a.name}'s SU rail group"
                        )
                if not self._swap(a, t.rail, to_rail, b):
                    raise self._fail(f"miscabled_ports[{i}]", "overlaps another defect's ports")
            return
        for _ in range(value):
            for _attempt in range(1000):
                a = slots[rng.randrange(len(slots))]
                rail = rng.randrange(spec.rails)
                to_rail = rng.choice([r for r in range(spec.rails) if r != rail])
                b = slots[a.index - a.position + rng.randrange(npg)]
                if self._swap(a, rail, to_rail, b):
                    break
            else:
                raise self._fail("miscabled_ports", "could not place without overlapping other defects")

    def _swap(self, a: _HostSlot, rail: int, to_rail: int, b: _HostSlot) -> bool:
        """``a``'s rail-``rail`` HCA takes ``b``'s port on the rail-``to_rail`` leaf and vice versa."""
        w = self.b.wiring
        hca_a = PortRef(device_id=self.b.hca_ids[(a.index, rail)], port="1")
        hca_b = PortRef(device_id=self.b.hca_ids[(b.index, to_rail)], port="1")
        leaf_a = PortRef(device_id=self.b.leaf_ids[(a.su, a.rail_group, rail)], port=str(a.position + 1))
        leaf_b = PortRef(device_id=self.b.leaf_ids[(b.su, b.rail_group, to_rail)], port=str(b.position + 1))
        if not self._free(hca_a, hca_b, leaf_a, leaf_b):
            return False
        link_a = w.at(hca_a.device_id, hca_a.port)
        link_b = w.at(hca_b.device_id, hca_b.port)
        if link_a is None or link_b is None:
            return False
        removed = (w.remove(link_a.key), w.remove(link_b.key))
        speed = self.spec.link_speed_gbps
        added = (
            self.b._link(hca_a, leaf_b, LinkKind.IB, speed),
            self.b._link(hca_b, leaf_a, LinkKind.IB, speed),
        )
        for link in added:
            w.add(link)
        self._touch(hca_a, hca_b, leaf_a, leaf_b)
        self.out["miscabled_ports"].append(
            InjectedDefect(
                kind=DefectKind.MISCABLED_PORT,
                description=f"{a.name} mlx5_{rail} (rail {rail}) is cabled to the rail-{to_rail} leaf, "
                f"swapped with {b.name} mlx5_{to_rail}",
                hosts=tuple(dict.fromkeys((a.name, b.name))),
                devices=(hca_a.device_id, hca_b.device_id, leaf_a.device_id, leaf_b.device_id),
                ports=(hca_a, hca_b, leaf_a, leaf_b),
                removed_links=removed,
                added_links=added,
                detail={
                    "host": a.name,
                    "hca": f"mlx5_{rail}",
                    "rail": rail,
                    "landed_on_rail": to_rail,
                    "displaced_host": b.name,
                    "displaced_hca": f"mlx5_{to_rail}",
                },
            )
        )
        return True

    def _resolve_end(self, ref: str) -> PortRef | None:
        """``dgx001:mlx5_0`` / ``dgx001:eno1`` / ``<switch name>:<port>`` -> a port reference."""
        name, _, port = ref.partition(":")
        device_id = self.b.names.get(name)
        if device_id is None or not port:
            return None
        if name in {s.name for s in self.b.slots} and port.startswith("mlx5_"):
            rail = port.removeprefix("mlx5_")
            slot = next(s for s in self.b.slots if s.name == name)
            if not rail.isdigit() or (slot.index, int(rail)) not in self.b.hca_ids:
                return None
            return PortRef(device_id=self.b.hca_ids[(slot.index, int(rail))], port="1")
        return PortRef(device_id=device_id, port=port)

    def _hosts_of(self, *ends: PortRef) -> tuple[str, ...]:
        """Host names behind link ends: the host itself, or the host an HCA sits in."""
        out: list[str] = []
        for end in ends:
            dev = self.b.devices[self.b.dev_index[end.device_id]]
            if dev.kind is DeviceKind.HOST:
                out.append(dev.id)
            elif dev.parent_id is not None:
                out.append(dev.parent_id)
        return tuple(dict.fromkeys(out))

    def _remove_link(self, link: Link, description: str) -> InjectedDefect:
        self.b.wiring.remove(link.key)
        self._touch(link.a, link.b)
        return InjectedDefect(
            kind=DefectKind.MISSING_LINK,
            description=description,
            hosts=self._hosts_of(link.a, link.b),
            devices=(link.a.device_id, link.b.device_id),
            ports=(link.a, link.b),
            removed_links=(link,),
            detail={"a": self._ref_of(link.a), "b": self._ref_of(link.b)},
        )

    def _ref_of(self, end: PortRef) -> str:
        """A link end in the spec's target syntax (``dgx001:mlx5_0``, ``ib-leaf-su01-r0:33``)."""
        dev = self.b.devices[self.b.dev_index[end.device_id]]
        if dev.kind is DeviceKind.HCA:
            return f"{dev.parent_id}:{dev.attributes['hca']}"
        return f"{self._name_of(end.device_id)}:{end.port}"

    def _name_of(self, device_id: str) -> str:
        dev = self.b.devices[self.b.dev_index[device_id]]
        return str(dev.attributes.get("inventory_name", dev.name))

    def _missing_links(self, value: int | list[str], rng: random.Random) -> None:
        w = self.b.wiring
        if not isinstance(value, int):
            for i, ref in enumerate(value):
                end = self._resolve_end(ref)
                link = None if end is None else w.at(end.device_id, end.port)
                if link is None:
                    raise self._fail(f"missing_links[{i}]", f"{ref!r} names no cabled port")
                if not self._free(link.a, link.b):
                    raise self._fail(f"missing_links[{i}]", f"{ref!r} overlaps another defect's ports")
                self.out["missing_links"].append(self._remove_link(link, f"link at {ref} is absent"))
            return
        candidates = list(self.b.host_leaf_keys) + list(self.b.leaf_spine_keys)
        rng.shuffle(candidates)
        placed = 0
        for key in candidates:
            if placed == value:
                break
            link = w.links.get(key)
            if link is None or not self._free(link.a, link.b):
                continue
            if link.a.device_id in self.degraded_leaves or link.b.device_id in self.degraded_leaves:
                continue
            description = f"link {self._ref_of(link.a)} - {self._ref_of(link.b)} is absent"
            self.out["missing_links"].append(self._remove_link(link, description))
            placed += 1
        if placed < value:
            raise self._fail("missing_links", f"only {placed} of {value} could be placed")

    def _degrade(self, leaf: str, k: int, rng: random.Random, *, pristine: bool = False) -> bool:
        """Remove ``k`` uplinks of ``leaf``; with ``pristine``, only a leaf no other defect touched."""
        w = self.b.wiring
        uplinks = [w.links[key] for key in self.b.leaf_uplinks[leaf] if key in w.links]
        free = [lk for lk in uplinks if self._free(lk.a, lk.b)]
        if pristine and len(free) < len(self.b.leaf_uplinks[leaf]):
            return False
        if len(free) < k or len(uplinks) - k < 1:
            return False
        chosen = sorted(rng.sample(free, k), key=lambda lk: lk.key)
        for link in chosen:
            w.remove(link.key)
            self._touch(link.a, link.b)
        self.degraded_leaves.add(leaf)
        spines = tuple(
            dict.fromkeys(e.device_id for lk in chosen for e in (lk.a, lk.b) if e.device_id != leaf)
        )
        name = self._name_of(leaf)
        self.out["degraded_uplinks"].append(
            InjectedDefect(
                kind=DefectKind.DEGRADED_UPLINKS,
                description=f"{name} lost {k} of its {len(uplinks)} uplinks",
                devices=(leaf, *spines),
                ports=tuple(e for lk in chosen for e in (lk.a, lk.b)),
                removed_links=tuple(chosen),
                detail={"leaf": name, "removed": k, "uplinks": len(uplinks), "remaining": len(uplinks) - k},
            )
        )
        return True

    def _degraded_uplinks(self, value: int | list[Any], rng: random.Random) -> None:
        if not isinstance(value, int):
            for i, t in enumerate(value):
                leaf = self.b.names.get(t.leaf)
                if leaf is None or leaf not in self.b.leaf_uplinks:
                    raise self._fail(f"degraded_uplinks[{i}].leaf", f"{t.leaf!r} is not an InfiniBand leaf")
                if leaf in self.degraded_leaves or not self._degrade(leaf, t.remove, rng):
                    raise self._fail(
                        f"degraded_uplinks[{i}]", f"cannot remove {t.remove} uplinks of {t.leaf}"
                    )
            return
        leaves = list(self.b.leaf_uplinks)
        rng.shuffle(leaves)
        placed = 0
        for leaf in leaves:
            if placed == value:
                break
            k = self.spec.defects.uplinks_removed_per_leaf
            if leaf not in self.degraded_leaves and self._degrade(leaf, k, rng, pristine=True):
                placed += 1
        if placed < value:
            raise self._fail("degraded_uplinks", f"only {placed} of {value} leaves could be degraded")

    # -- naming defects --

    def _unnamed_hcas(self, value: int | list[str], rng: random.Random) -> None:
        slots = self.b.slots
        if isinstance(value, int):
            free = [
                (h, r)
                for h in range(len(slots))
                for r in range(self.spec.rails)
                if (h, r) not in self.unnamed
            ]
            targets = rng.sample(free, value)
        else:
            index = {s.name: s.index for s in slots}
            targets = []
            for ref in value:
                host, _, hca = ref.partition(":")
                targets.append((index[host], int(hca.removeprefix("mlx5_"))))
        for h, r in targets:
            if (h, r) in self.unnamed:
                continue
            self.unnamed.add((h, r))
            guid = self.b.hca_ids[(h, r)]
            dev = self.b.devices[self.b.dev_index[guid]]
            self.b._replace_device(guid, attributes={**dev.attributes, "node_description": ""})
            host = slots[h].name
            self.out["unnamed_hcas"].append(
                InjectedDefect(
                    kind=DefectKind.UNNAMED_HCA,
                    description=f"{host} mlx5_{r} reports an empty node description",
                    hosts=(host,),
                    devices=(guid,),
                    ports=(PortRef(device_id=guid, port="1"),),
                    detail={"host": host, "hca": f"mlx5_{r}", "expected": f"{host} mlx5_{r}"},
                )
            )

    def _duplicate_sysnames(self, value: int | list[tuple[str, str]], rng: random.Random) -> None:
        if isinstance(value, int):
            free = [s for s in self.b.eth_switch_ids if s not in self.renamed]
            chosen = rng.sample(free, 2 * value)
            pairs = [(chosen[2 * i], chosen[2 * i + 1]) for i in range(value)]
        else:
            pairs = []
            for i, (keep, take) in enumerate(value):
                ids = [self.b.names.get(n) for n in (keep, take)]
                if any(x is None or x not in self.b.eth_switch_ids for x in ids) or keep == take:
                    raise self._fail(
                        f"duplicate_sysnames[{i}]", f"{keep!r}, {take!r} must be two Ethernet switches"
                    )
                pairs.append((str(ids[0]), str(ids[1])))
        for i, (keep, take) in enumerate(pairs):
            if keep in self.renamed or take in self.renamed:
                raise self._fail(f"duplicate_sysnames[{i}]", "a switch can be in one duplicate pair only")
            self.renamed.update((keep, take))
            name = self.b.devices[self.b.dev_index[keep]].name
            original = self.b.devices[self.b.dev_index[take]].name
            self.b._replace_device(take, name=name)
            self.out["duplicate_sysnames"].append(
                InjectedDefect(
                    kind=DefectKind.DUPLICATE_SYSNAME,
                    description=f"{original} reports sysName {name!r}, the same as another switch",
                    devices=(keep, take),
                    detail={"name": name, "original_name": original},
                )
            )

    # -- inventory defects --

    def _dcim_missing_hosts(self, value: int | list[str], rng: random.Random) -> None:
        if isinstance(value, int):
            free = [s.name for s in self.b.slots if s.name not in self.dcim_missing]
            names = rng.sample(free, value)
        else:
            names = [n for expr in value for n in expand(expr)]
        for name in names:
            if name in self.dcim_missing:
                continue
            self.dcim_missing.add(name)
            self.out["dcim_missing_hosts"].append(
                InjectedDefect(
                    kind=DefectKind.DCIM_MISSING_HOST,
                    description=f"{name} is cabled but not in DCIM",
                    hosts=(name,),
                    devices=(name,),
                    detail={"node": name},
                )
            )
        self.dcim[:] = [r for r in self.dcim if r.node not in self.dcim_missing]

    def _dcim_extra_hosts(self, value: int | list[str], rng: random.Random) -> None:
        spec = self.spec
        taken = set(spec.host_names) | {r.node for r in self.dcim} | {sh.name for sh in spec.service_hosts}
        if isinstance(value, int):
            names = list(_spare_names(spec.host_names, taken, value))
        else:
            names = [n for expr in value for n in expand(expr) if n not in taken]
        n_hosts = len(spec.host_names) + len(spec.service_hosts)  # BMC addresses past every real host
        for i, name in enumerate(names):
            taken.add(name)
            hcas = tuple(
                DcimHca(f"mlx5_{r}", r, self.b.ids.guid(f"dcim-extra:{name}:mlx5_{r}"))
                for r in range(spec.rails)
            )
            self.dcim.append(
                DcimRecord(
                    rack=spec.rack_names[-1],
                    node=name,
                    role="compute",
                    gpu_model=spec.node.gpu_model,
                    gpu_count=spec.node.gpus,
                    hca_count=spec.rails,
                    hcas=hcas,
                    bmc_address=_bmc_address(n_hosts + i),
                    serial=self.b.ids.serial(name),
                    su="",
                )
            )
            self.out["dcim_extra_hosts"].append(
                InjectedDefect(
                    kind=DefectKind.DCIM_EXTRA_HOST,
                    description=f"{name} is in DCIM but has no fabric presence",
                    hosts=(name,),
                    detail={"node": name, "hca_guids": [h.guid for h in hcas]},
                )
            )


def _spare_names(hosts: list[str], taken: set[str], count: int) -> Iterable[str]:
    """Names the DCIM team would give spares: the last host's number, continued."""
    m = re.match(r"^(.*?)([0-9]+)([^0-9]*)$", hosts[-1])
    made = 0
    i = 1
    while made < count:
        if m is None:
            name = f"{hosts[-1]}-spare{i}"
        else:
            prefix, digits, suffix = m.groups()
            name = f"{prefix}{int(digits) + i:0{len(digits)}d}{suffix}"
        i += 1
        if name in taken:
            continue
        made += 1
        yield name
