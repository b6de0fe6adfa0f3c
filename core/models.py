"""Canonical models: the contracts every connector, derivation and renderer speaks.

They follow ``../shared/ARCHITECTURE.md`` ("Canonical models"). Keys are stable identities
(chassis MAC, node GUID, Kubernetes node name), never human names, because names are the first
thing that is wrong in a real data center (duplicate sysNames, hosts called ``localhost``).
Changing a field here needs a migration and a note in ``docs/architecture.md``.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DeviceKind(StrEnum):
    SWITCH = "switch"
    HOST = "host"
    HCA = "hca"
    GPU = "gpu"


class IdentityKind(StrEnum):
    """Which stable identity keys a device; tells a reader how to match it against observations."""

    CHASSIS_MAC = "chassis_mac"  # Ethernet switches (LLDP chassis id subtype 4)
    NODE_GUID = "node_guid"  # InfiniBand switches and HCAs
    NODE_NAME = "node_name"  # hosts: the Kubernetes node name
    GPU_UUID = "gpu_uuid"


class LinkKind(StrEnum):
    ETH = "eth"
    IB = "ib"
    NVLINK = "nvlink"


class Tier(StrEnum):
    LEAF = "leaf"
    SPINE = "spine"
    CORE = "core"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


class Device(_Frozen):
    """A switch, host, HCA or GPU keyed by its stable identity."""

    id: str = Field(description="stable identity: chassis MAC, node GUID or node name, normalised")
    kind: DeviceKind
    identity_kind: IdentityKind
    name: str = Field(description="human name; an attribute, never a key")
    platform: str | None = Field(default=None, description="vendor platform key, e.g. arista_eos")
    system_guid: str | None = Field(
        default=None, description="IB system image GUID: groups the ASICs of one multi-ASIC system"
    )
    parent_id: str | None = Field(default=None, description="the host an HCA or GPU sits in")
    attributes: dict[str, Any] = Field(default_factory=dict)


class PortRef(_Frozen):
    """One end of a link: a device identity and its normalised port key."""

    device_id: str
    port: str

    def sort_key(self) -> tuple[str, str]:
        return (self.device_id, self.port)

    def __str__(self) -> str:
        return f"{self.device_id}:{self.port}"


class Port(_Frozen):
    """A port with the vendor's own strings kept beside the normalised name."""

    device_id: str
    port: str = Field(description="normalised port key, e.g. Ethernet1/1, swp1s0, 17")
    vendor_name: str | None = Field(default=None, description="the name exactly as the device reported it")
    description: str | None = None
    mac: str | None = None
    guid: str | None = None
    rail: int | None = Field(default=None, description="rail index of a host's data-plane NIC/HCA")
    speed_gbps: float | None = None


class Link(_Frozen):
    """An undirected link; ``a < b`` always, so the same cable has one representation."""

    a: PortRef
    b: PortRef
    kind: LinkKind
    speed_gbps: float | None = None
    width: str | None = Field(default=None, description="lane width, e.g. 4x")
    evidence: frozenset[str] = Field(default_factory=frozenset, description="sources that saw it")
    both_sides: bool = Field(default=True, description="seen from both ends (False = one-sided)")
    first_seen: datetime | None = None
    last_seen: datetime | None = None

    @model_validator(mode="after")
    def _canonical_order(self) -> Link:
        if self.a.sort_key() >= self.b.sort_key():
            raise ValueError(f"link ends must be ordered a < b, got {self.a} / {self.b}; use Link.between()")
        return self

    @classmethod
    def between(cls, x: PortRef, y: PortRef, **fields: Any) -> Link:
        """Build a link with its ends in canonical order, whichever way round they were seen."""
        a, b = sorted((x, y), key=PortRef.sort_key)
        return cls(a=a, b=b, **fields)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.a.device_id, self.a.port, self.b.device_id, self.b.port)


class HostDomains(_Frozen):
    """Where a host sits: one domain per fabric level plus its NVLink domain."""

    host: str
    block: str | None = Field(default=None, description="rail group / scalable unit")
    spine_group: str | None = None
    pod: str | None = Field(default=None, description="core pod (the whole fabric in two tiers)")
    nvlink_domain: str | None = None
    nvlink_sub_domain: str | None = None


class Finding(_Frozen):
    kind: str = Field(description="e.g. miscabled_port, degraded_leaf, one_sided_link, missing_host")
    severity: Severity
    message: str
    devices: tuple[str, ...] = ()
    ports: tuple[PortRef, ...] = ()
    evidence: dict[str, Any] = Field(default_factory=dict)


class FabricSnapshot(_Frozen):
    """A derived, versioned view of the fabric."""

    version: str
    created_at: datetime
    tiers: dict[str, Tier] = Field(description="switch identity -> tier")
    hosts: dict[str, HostDomains]
    findings: tuple[Finding, ...] = ()
