"""The derived fabric model and its JSON form (the documented contract, docs/topology-json.md).

Plain frozen dataclasses rather than pydantic: a 16-SU fabric has ~12k links and the model is
built on every derivation, so construction must cost nothing; validation happened upstream (the
raw rows) and the JSON shape is pinned by tests. Findings reuse the canonical
:class:`core.models.Finding` so every area speaks one finding type.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.models import Finding, HostDomains, PortRef, Severity, Tier

SCHEMA_VERSION = 1
LEVELS: tuple[str, ...] = ("block", "spine_group", "pod")
"""Fabric domain levels, innermost first (rail group / scalable unit, spine group, core pod)."""

SEVERITY_RANK: Mapping[Severity, int] = {
    Severity.INFO: 0,
    Severity.WARNING: 1,
    Severity.ERROR: 2,
    Severity.CRITICAL: 3,
}


@dataclass(frozen=True)
class SwitchOut:
    id: str  # node GUID (IB) or chassis MAC (Ethernet)
    name: str
    fabric: str  # ib | eth
    identity_kind: str  # node_guid | chassis_mac
    tier: Tier | None
    tier_reason: str
    model: str | None = None
    uplinks: int = 0
    downlinks: int = 0
    rail: str | None = None  # leaves: the majority rail of the HCAs below it
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class HcaOut:
    guid: str
    hca: str | None
    rail: str | None
    leaf: str | None  # switch id
    leaf_port: str | None
    attribution: str  # node_description | dcim_guid | system_guid | topology


@dataclass(frozen=True)
class HostOut:
    name: str
    # compute, or what it is instead: a name class (ufm_server, storage, login, management, unnamed_hca
    # ...), a DCIM role (normalised: "UFM Server" -> ufm_server), or a fleet-pattern verdict.
    role: str
    role_reason: str  # the sources that saw it, the rule that matched, or the facts that deviated
    block: str | None = None
    spine_group: str | None = None
    pod: str | None = None
    nvlink_domain: str | None = None
    nvlink_sub_domain: str | None = None
    nvlink_method: str | None = None
    hcas: tuple[HcaOut, ...] = ()
    sources: tuple[str, ...] = ()  # ib, eth, dcim, nvlink, k8s
    rack: str | None = None
    valid: bool = True
    invalid_reason: str | None = None

    def domains(self) -> HostDomains:
        return HostDomains(
            host=self.name,
            block=self.block,
            spine_group=self.spine_group,
            pod=self.pod,
            nvlink_domain=self.nvlink_domain,
            nvlink_sub_domain=self.nvlink_sub_domain,
        )


@dataclass(frozen=True)
class DomainOut:
    level: str  # block | spine_group | pod
    id: str  # stable: a hash of the sorted member identities
    name: str  # readable: the member switch names, compressed
    members: tuple[str, ...]  # switch ids
    hosts: int
    design_size: int | None
    valid: bool = True
    reason: str | None = None


@dataclass(frozen=True)
class LinkOut:
    a: PortRef
    b: PortRef
    kind: str  # ib | eth
    speed_gbps: float | None
    width: str | None
    evidence: tuple[str, ...]  # sources that saw it
    both_sides: bool
    resolution: Mapping[str, Any] = field(default_factory=dict)  # Ethernet: how each end was matched


@dataclass(frozen=True)
class TopologyModel:
    switches: tuple[SwitchOut, ...]
    hosts: tuple[HostOut, ...]
    domains: tuple[DomainOut, ...]
    links: tuple[LinkOut, ...]
    findings: tuple[Finding, ...]
    inputs: Mapping[str, Any] = field(default_factory=dict)  # counts per source, unresolved rows

    # -- queries --

    def host(self, name: str) -> HostOut:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def compute_hosts(self) -> list[HostOut]:
        return [h for h in self.hosts if h.role == "compute"]

    def tiers(self) -> dict[str, Tier]:
        return {s.id: s.tier for s in self.switches if s.tier is not None}

    def domain(self, domain_id: str) -> DomainOut:
        for d in self.domains:
            if d.id == domain_id:
                return d
        raise KeyError(domain_id)

    def findings_at_least(self, severity: Severity) -> list[Finding]:
        return [f for f in self.findings if SEVERITY_RANK[f.severity] >= SEVERITY_RANK[severity]]

    # -- the contract --

    def to_json(self, *, version: int | None = None, created_at: datetime | None = None) -> dict[str, Any]:
        """The documented JSON form (docs/topology-json.md); key order is stable."""
        return {
            "schema_version": SCHEMA_VERSION,
            "version": version,
            "created_at": created_at.isoformat() if created_at else None,
            "content_hash": self.content_hash(),
            "switches": [_switch_json(s) for s in self.switches],
            "hosts": [_host_json(h) for h in self.hosts],
            "domains": [_domain_json(d) for d in self.domains],
            "links": [_link_json(lk) for lk in self.links],
            "findings": [finding_json(f) for f in self.findings],
            "inputs": dict(self.inputs),
        }

    def content_hash(self) -> str:
        """Hash of everything derived (not when, not from which run): equal hash = nothing changed."""
        body = {
            "switches": [_switch_json(s) for s in self.switches],
            "hosts": [_host_json(h) for h in self.hosts],
            "domains": [_domain_json(d) for d in self.domains],
            "links": [_link_json(lk) for lk in self.links],
            "findings": [finding_json(f) for f in self.findings],
        }
        data = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()
        return hashlib.blake2b(data, digest_size=16).hexdigest()


def _switch_json(s: SwitchOut) -> dict[str, Any]:
    return {
        "id": s.id,
        "name": s.name,
        "fabric": s.fabric,
        "identity": {"kind": s.identity_kind, "value": s.id},
        "tier": s.tier.value if s.tier else None,
        "tier_reason": s.tier_reason,
        "model": s.model,
        "uplinks": s.uplinks,
        "downlinks": s.downlinks,
        "rail": s.rail,
        "sources": list(s.sources),
    }


def _host_json(h: HostOut) -> dict[str, Any]:
    return {
        "name": h.name,
        "role": h.role,
        "role_reason": h.role_reason,
        "domains": {"block": h.block, "spine_group": h.spine_group, "pod": h.pod},
        "nvlink": {"domain": h.nvlink_domain, "sub_domain": h.nvlink_sub_domain, "method": h.nvlink_method},
        "hcas": [
            {
                "guid": c.guid,
                "hca": c.hca,
                "rail": c.rail,
                "leaf": c.leaf,
                "leaf_port": c.leaf_port,
                "attribution": c.attribution,
            }
            for c in h.hcas
        ],
        "sources": list(h.sources),
        "rack": h.rack,
        "valid": h.valid,
        "invalid_reason": h.invalid_reason,
    }


def _domain_json(d: DomainOut) -> dict[str, Any]:
    return {
        "level": d.level,
        "id": d.id,
        "name": d.name,
        "members": list(d.members),
        "hosts": d.hosts,
        "design_size": d.design_size,
        "valid": d.valid,
        "reason": d.reason,
    }


def _port_json(p: PortRef) -> dict[str, str]:
    return {"device": p.device_id, "port": p.port}


def _link_json(lk: LinkOut) -> dict[str, Any]:
    return {
        "a": _port_json(lk.a),
        "b": _port_json(lk.b),
        "kind": lk.kind,
        "speed_gbps": lk.speed_gbps,
        "width": lk.width,
        "evidence": {"sources": list(lk.evidence), "both_sides": lk.both_sides, **dict(lk.resolution)},
    }


def finding_json(f: Finding) -> dict[str, Any]:
    return {
        "kind": f.kind,
        "severity": f.severity.value,
        "message": f.message,
        "devices": list(f.devices),
        "ports": [_port_json(p) for p in f.ports],
        "evidence": f.evidence,
    }


def finding_from_json(data: Mapping[str, Any]) -> Finding:
    return Finding(
        kind=data["kind"],
        severity=Severity(data["severity"]),
        message=data["message"],
        devices=tuple(data.get("devices", ())),
        ports=tuple(PortRef(device_id=p["device"], port=p["port"]) for p in data.get("ports", ())),
        evidence=dict(data.get("evidence", {})),
    )


def sorted_findings(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    """Most severe first, then by kind and devices: a stable order makes hashes and diffs stable."""
    return tuple(sorted(findings, key=lambda f: (-SEVERITY_RANK[f.severity], f.kind, f.devices, f.message)))


def _port(p: Mapping[str, str]) -> PortRef:
    return PortRef(device_id=p["device"], port=p["port"])


def model_from_json(doc: Mapping[str, Any]) -> TopologyModel:
    """Rebuild a model from its JSON contract (a stored version), so renderers run on history."""
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"topology JSON schema_version {doc.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    return TopologyModel(
        switches=tuple(
            SwitchOut(
                id=s["id"], name=s["name"], fabric=s["fabric"], identity_kind=s["identity"]["kind"],
                tier=Tier(s["tier"]) if s["tier"] else None, tier_reason=s["tier_reason"], model=s["model"],
                uplinks=s["uplinks"], downlinks=s["downlinks"], rail=s["rail"], sources=tuple(s["sources"]),
            )
            for s in doc["switches"]
        ),
        hosts=tuple(
            HostOut(
                name=h["name"], role=h["role"], role_reason=h["role_reason"], block=h["domains"]["block"],
                spine_group=h["domains"]["spine_group"], pod=h["domains"]["pod"],
                nvlink_domain=h["nvlink"]["domain"], nvlink_sub_domain=h["nvlink"]["sub_domain"],
                nvlink_method=h["nvlink"]["method"],
                hcas=tuple(HcaOut(**c) for c in h["hcas"]), sources=tuple(h["sources"]), rack=h["rack"],
                valid=h["valid"], invalid_reason=h["invalid_reason"],
            )
            for h in doc["hosts"]
        ),
        domains=tuple(
            DomainOut(
                level=d["level"], id=d["id"], name=d["name"], members=tuple(d["members"]), hosts=d["hosts"],
                design_size=d["design_size"], valid=d["valid"], reason=d["reason"],
            )
            for d in doc["domains"]
        ),
        links=tuple(
            LinkOut(
                a=_port(lk["a"]), b=_port(lk["b"]), kind=lk["kind"], speed_gbps=lk["speed_gbps"], width=lk["width"],
                evidence=tuple(lk["evidence"]["sources"]), both_sides=lk["evidence"]["both_sides"],
                resolution={k: v for k, v in lk["evidence"].items() if k not in ("sources", "both_sides")},
            )
            for lk in doc["links"]
        ),
        findings=tuple(finding_from_json(f) for f in doc["findings"]),
        inputs=dict(doc.get("inputs", {})),
    )  # fmt: skip
