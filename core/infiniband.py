"""InfiniBand facts as data, and the classification of what a fabric discovery found.

Real fabrics are messy: HCAs whose node description was never set (the firmware default, or
empty), hosts that still call themselves ``localhost`` or ``ubuntu``, UFM servers and SHARP
"Aggregation Node" CAs hanging off switch ports, the internal port 65 of a Quantum-2 switch, and
storage or management HCAs on the compute fabric. If any of them were taken for compute hosts they
would distort the fabric (a storage server "in" an SU, a host named ``localhost`` in four SUs at
once), so each node is classified explicitly here and everything that is not a compute HCA becomes
a finding, not a host. Pure functions over plain values: no I/O, nothing of ours imported except
the canonical models.

Every rule is data (regexes with the class and the reason), so a site with another naming scheme
changes a table, not the code, and :class:`HcaFilter` lets the site file add its own patterns.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from core.models import Finding, PortRef, Severity

# --- link rates -----------------------------------------------------------------------------

LANE_GBPS: Mapping[str, float] = {
    # Data rate per lane as ibnetdiscover / UFM name it (IBTA spec; FDR10 is Mellanox's 10G FDR
    # encoding). A 4x HDR port is 4 x 50 = 200 Gb/s, a 4x NDR port 400 Gb/s.
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}

WIDTH_LANES: Mapping[str, int] = {"1x": 1, "2x": 2, "4x": 4, "8x": 8, "12x": 12}


def normalise_width(width: str) -> str:
    """``4X``, ``IB_4x``, ``4`` -> ``4x`` (UFM says ``IB_4x``, ibnetdiscover ``4x``)."""
    w = width.strip().lower().removeprefix("ib_")
    if w.isdigit():
        w += "x"
    if w not in WIDTH_LANES:
        raise ValueError(f"unknown link width {width!r}")
    return w


def normalise_speed(speed: str) -> str:
    """``hdr``, ``IB_HDR``, ``HDR`` -> ``HDR``."""
    s = speed.strip().upper().removeprefix("IB_")
    if s not in LANE_GBPS:
        raise ValueError(f"unknown link speed {speed!r}")
    return s


def link_gbps(width: str, speed: str) -> float:
    """Signalling rate of a port: lanes x per-lane rate (``4x`` ``NDR`` -> 400.0)."""
    return WIDTH_LANES[normalise_width(width)] * LANE_GBPS[normalise_speed(speed)]


def normalise_guid(value: str | int) -> str:
    """Any GUID spelling (``0xB83F...``, ``b83f...``, an int) -> ``0x`` + 16 lower-case hex digits."""
    if isinstance(value, int):
        n = value
    else:
        text = value.strip().lower()
        text = text.removeprefix("0x")
        if not text or len(text) > 16 or any(c not in "0123456789abcdef" for c in text):
            raise ValueError(f"not a 64-bit GUID: {value!r}")
        n = int(text, 16)
    if not 0 <= n < 1 << 64:
        raise ValueError(f"not a 64-bit GUID: {value!r}")
    return f"0x{n:016x}"


# --- switch platforms: front-panel ports; anything above is internal ------------------------

SWITCH_FRONT_PANEL_PORTS: Mapping[str, int] = {
    # Quantum (HDR): 40 ports. Quantum-2 reports 65 ports in NodeInfo: 64 NDR front-panel ports
    # plus port 65, the internal port the SHARP Aggregation Node sits on (NVIDIA Quantum-2
    # ibnetdiscover output). Quantum-X800: 144 + internal.
    "MQM8700": 40,
    "MQM8790": 40,
    "MQM9700": 64,
    "MQM9790": 64,
    "QM9700": 64,
    "QM9790": 64,
    "Q3400": 144,
    "Q3400-RA": 144,
}


# --- node descriptions: hostnames and switch names ------------------------------------------

HCA_DESCRIPTION_RULES: Sequence[tuple[str, re.Pattern[str]]] = (
    # (rule name, pattern with a ``host`` group and optionally ``hca``), first match wins.
    # Linux rdma-core sets "<hostname> <ibdev>" (mlx5_N, also mlx5_bond_0 on bonded ports).
    ("hostname_mlx5", re.compile(r"^(?P<host>\S+)\s+(?P<hca>mlx[45]_(?:bond_)?\d+)$")),
    # NVIDIA DGX / GB200 trays and UFM-managed hosts: "<hostname> HCA-N".
    ("hostname_hca_n", re.compile(r"^(?P<host>\S+)\s+(?P<hca>HCA-\d+)$", re.IGNORECASE)),
)

SWITCH_DESCRIPTION_RULES: Sequence[tuple[str, re.Pattern[str]]] = (
    # Quantum switches managed by MLNX-OS/UFM: "MF0;<hostname>:<model>/U1" (MF0 = chassis
    # management, U1 = the ASIC in unit 1).
    ("mf0", re.compile(r"^MF0;(?P<name>[^:;]+):(?P<model>[^/;]+)(?:/(?P<unit>U\d+))?$")),
    # Switches whose description is just their host name (unmanaged Quantum with a set name).
    ("plain", re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)$")),
)

FIRMWARE_DEFAULT_DESCRIPTIONS: Sequence[re.Pattern[str]] = (
    # What an HCA reports when nobody set its node description (firmware defaults seen on
    # ConnectX-5..8 and the older "MT4123 ConnectX6   Mellanox Technologies" form).
    re.compile(r"^MT\d+\s+ConnectX-?\d+\w*\s+Mellanox Technologies$", re.IGNORECASE),
    re.compile(r"^(Mellanox Technologies|NVIDIA) ConnectX-?\d+\w*$", re.IGNORECASE),
    re.compile(r"^ConnectX-?\d+\w*$", re.IGNORECASE),
)

DEFAULT_HOSTNAMES: frozenset[str] = frozenset(
    # Names a freshly installed OS gives itself; several hosts share them, so they identify nothing.
    {"localhost", "localhost.localdomain", "ubuntu", "debian", "rhel", "centos", "(none)", "dgx", "node"}
)


class NodeClass(StrEnum):
    """What an InfiniBand node is, as far as the compute fabric is concerned."""

    SWITCH = "switch"
    COMPUTE_HCA = "compute_hca"
    UNNAMED_HCA = "unnamed_hca"  # empty or firmware-default node description
    DEFAULT_HOSTNAME = "default_hostname"  # localhost, ubuntu, ...
    UFM_SERVER = "ufm_server"
    SHARP_AGGREGATION_NODE = "sharp_aggregation_node"
    STORAGE = "storage"
    LOGIN = "login"
    MANAGEMENT = "management"
    EXCLUDED = "excluded"  # the site's filter said so
    ROUTER = "router"
    UNKNOWN_CA = "unknown_ca"  # a description we cannot read a host from


FINDING_SEVERITY: Mapping[NodeClass, Severity] = {
    NodeClass.UNNAMED_HCA: Severity.WARNING,
    NodeClass.DEFAULT_HOSTNAME: Severity.WARNING,
    NodeClass.UNKNOWN_CA: Severity.WARNING,
    NodeClass.UFM_SERVER: Severity.INFO,
    NodeClass.SHARP_AGGREGATION_NODE: Severity.INFO,
    NodeClass.STORAGE: Severity.INFO,
    NodeClass.LOGIN: Severity.INFO,
    NodeClass.MANAGEMENT: Severity.INFO,
    NodeClass.EXCLUDED: Severity.INFO,
    NodeClass.ROUTER: Severity.INFO,
}


@dataclass(frozen=True)
class HcaFilter:
    """Site rules on top of the built-in ones: regexes on the host name (or the whole description
    when no host name can be read), checked in this order: exclude, ufm, storage, login,
    management.

    These alone decide that a host is not compute, so they are strict (a word of the name, not any
    substring). Hosts they miss are still set apart in topology derivation when they break the
    fleet's compute pattern (``core.topology.roles``)."""

    exclude: Sequence[str] = ()
    ufm: Sequence[str] = (r"(?i)(^|[-_.])ufm([-_.\d]|$)",)
    storage: Sequence[str] = (
        # Parallel file systems that sit on the compute fabric (DDN, VAST, Weka, Lustre OSS/MDS).
        r"(?i)(^|[-_.])(ddn|vast|weka|lustre|oss\d*|mds\d*|exa|gpfs|nfs|stor(age)?\d*)([-_.\d]|$)",
    )
    login: Sequence[str] = (r"(?i)(^|[-_.])(login|lgn)([-_.\d]|$)",)
    management: Sequence[str] = (r"(?i)(^|[-_.])(mgmt|head|slurmctld|bcm|admin)([-_.\d]|$)",)

    @classmethod
    def from_mapping(cls, rules: Mapping[str, Sequence[str]] | Mapping[Any, Sequence[str]] | None) -> HcaFilter:
        """Site patterns are added to the defaults (``exclude`` has none by default)."""
        if not rules:
            return cls()
        base = cls()
        return cls(
            exclude=tuple(rules.get("exclude", ())),
            ufm=(*base.ufm, *rules.get("ufm", ())),
            storage=(*base.storage, *rules.get("storage", ())),
            login=(*base.login, *rules.get("login", ())),
            management=(*base.management, *rules.get("management", ())),
        )

    def compiled(self) -> list[tuple[NodeClass, re.Pattern[str]]]:
        out: list[tuple[NodeClass, re.Pattern[str]]] = []
        for cls_, patterns in (
            (NodeClass.EXCLUDED, self.exclude),
            (NodeClass.UFM_SERVER, self.ufm),
            (NodeClass.STORAGE, self.storage),
            (NodeClass.LOGIN, self.login),
            (NodeClass.MANAGEMENT, self.management),
        ):
            out.extend((cls_, re.compile(p)) for p in patterns)
        return out


@dataclass(frozen=True)
class Classification:
    node_class: NodeClass
    reason: str
    hostname: str | None = None  # compute host (or the name the node claims, for findings)
    hca: str | None = None  # mlx5_N / HCA-N
    switch_name: str | None = None
    switch_model: str | None = None


def parse_hca_description(description: str) -> tuple[str, str, str] | None:
    """``"dgx001 mlx5_3"`` -> (host, hca, rule name); None when no rule reads a host from it."""
    text = description.strip()
    for name, pattern in HCA_DESCRIPTION_RULES:
        m = pattern.match(text)
        if m:
            return m.group("host"), m.group("hca"), name
    return None


def parse_switch_description(description: str) -> tuple[str, str | None] | None:
    """``"MF0;ib-leaf-01:MQM9700/U1"`` -> (``ib-leaf-01``, ``MQM9700``); None if unreadable."""
    text = description.strip()
    for _, pattern in SWITCH_DESCRIPTION_RULES:
        m = pattern.match(text)
        if m:
            groups = m.groupdict()
            return groups["name"], groups.get("model")
    return None


def _is_sharp_an(description: str) -> bool:
    # SHARP aggregation nodes report "Mellanox Technologies Aggregation Node" (or "... SHArP ...").
    return re.search(r"aggregation node|sharp", description, re.IGNORECASE) is not None


class Classifier:
    """Classifies nodes by type and description; compile once, call per node."""

    def __init__(self, hca_filter: HcaFilter | None = None) -> None:
        self._site = (hca_filter or HcaFilter()).compiled()

    def classify(self, node_type: str, description: str) -> Classification:
        """``node_type`` is ``switch``, ``ca`` or ``router`` (ibnetdiscover's Switch/Ca/Rt)."""
        desc = description.strip()
        if node_type == "switch":
            parsed = parse_switch_description(desc)
            name, model = parsed if parsed else (None, None)
            return Classification(NodeClass.SWITCH, "switch node", switch_name=name, switch_model=model)
        if node_type == "router":
            return Classification(NodeClass.ROUTER, "IB router node: not a compute host")
        if not desc or any(p.match(desc) for p in FIRMWARE_DEFAULT_DESCRIPTIONS):
            why = "empty node description" if not desc else f"firmware default description {desc!r}"
            return Classification(NodeClass.UNNAMED_HCA, f"{why}: the host cannot be told from the fabric")
        if _is_sharp_an(desc):
            return Classification(NodeClass.SHARP_AGGREGATION_NODE, "SHARP aggregation node inside a switch")
        parsed_hca = parse_hca_description(desc)
        host, hca = (parsed_hca[0], parsed_hca[1]) if parsed_hca else (None, None)
        subject = host if host is not None else desc
        for cls_, pattern in self._site:
            if pattern.search(subject):
                return Classification(cls_, f"{cls_.value} rule {pattern.pattern!r} matched {subject!r}", host, hca)
        if host is None:
            return Classification(NodeClass.UNKNOWN_CA, f"no hostname rule matches description {desc!r}")
        if host.lower() in DEFAULT_HOSTNAMES:
            return Classification(
                NodeClass.DEFAULT_HOSTNAME, f"host name {host!r} is an OS default shared by many hosts", host, hca
            )
        return Classification(NodeClass.COMPUTE_HCA, f"compute HCA of {host}", host, hca)


def internal_port(switch_model: str | None, port: int) -> bool:
    """Whether ``port`` is above the model's front-panel ports (Quantum-2 port 65)."""
    if switch_model is None:
        return False
    front = SWITCH_FRONT_PANEL_PORTS.get(switch_model)
    return front is not None and port > front


@dataclass(frozen=True)
class NodeView:
    """What :func:`fabric_findings` needs of a node (kept minimal so any connector can feed it)."""

    guid: str
    node_type: str
    description: str
    classification: Classification


@dataclass
class FabricSummary:
    by_class: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    hosts: dict[str, list[str]] = field(default_factory=dict)  # host -> HCA GUIDs


def fabric_findings(nodes: Iterable[NodeView], *, switches: int | None = None) -> FabricSummary:
    """Counts per class, compute hosts, and one finding per node that is not a compute HCA.

    A host name claimed by HCAs whose descriptions are identical (two ``dgx001 mlx5_0``) is a
    finding too: one of them is misnamed, and it is the GUID, not the name, that is trusted.
    """
    out = FabricSummary()
    seen_desc: dict[str, str] = {}
    for n in nodes:
        c = n.classification
        out.by_class[c.node_class.value] += 1
        if c.node_class is NodeClass.SWITCH:
            continue
        if c.node_class is NodeClass.COMPUTE_HCA and c.hostname is not None:
            first = seen_desc.setdefault(n.description.strip(), n.guid)
            if first != n.guid:
                out.findings.append(
                    Finding(
                        kind="duplicate_node_description",
                        severity=Severity.WARNING,
                        message=f"{first} and {n.guid} both report {n.description.strip()!r}",
                        devices=(first, n.guid),
                    )
                )
            out.hosts.setdefault(c.hostname, []).append(n.guid)
            continue
        out.findings.append(
            Finding(
                kind=c.node_class.value,
                severity=FINDING_SEVERITY.get(c.node_class, Severity.INFO),
                message=f"{n.guid} ({n.description.strip() or 'no description'}): {c.reason}",
                devices=(n.guid,),
                ports=(PortRef(device_id=n.guid, port="1"),) if n.node_type == "ca" else (),
                evidence={"description": n.description, "hostname": c.hostname},
            )
        )
    if switches == 0:
        out.findings.append(
            Finding(
                kind="no_switches",
                severity=Severity.ERROR,
                message="the discovery found no switches: only adapters (an HCA whose port is down, "
                "or ibnetdiscover run on a host that is not cabled to the fabric)",
            )
        )
    return out
