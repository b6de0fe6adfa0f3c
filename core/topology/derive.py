"""Observations -> :class:`TopologyModel`: resolution, tiers, domains, findings. Pure.

The order matters and each step only uses evidence that earlier steps made trustworthy:

1. InfiniBand nodes: switches by node GUID; compute HCAs to their host by the node description.
   HCAs that name no usable host (empty or firmware-default description, ``localhost``, unreadable)
   are attributed by the DCIM inventory's HCA GUIDs, then by a system image GUID shared with a
   named HCA; whatever remains waits for step 4. Each stays a finding either way: the node
   description is still wrong on the fabric.
1b. Hosts that are not compute hosts although no name rule said so are set apart before anything
   is learned from the hosts: a non-compute DCIM role, else a break with the fleet's compute
   pattern (``core.topology.roles``: far fewer HCAs than the fleet's compute hosts, and a name
   or rails that do not follow the fleet's). They keep their HCAs and role, and take part in no
   rail group, rail vote, attribution or compute finding.
2. Tiers from the switch graph (hop distance from switches that have compute hosts).
3. Rail groups (blocks): leaves grouped by the similarity of the host sets below them; spine
   groups: spines grouped by the similarity of their leaf sets; pods: connected switch components.
4. An HCA still unattributed is given to the one host of its leaf's rail group that has no HCA
   on that leaf, when there is exactly one ("topology" attribution).
5. Hosts get their domain at every level by majority over their HCAs; NVLink domains join by
   host name; DCIM, Ethernet (LLDP) and Kubernetes hosts join through the same hostname rules.
6. Findings, each with severity and the evidence that produced it.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.models import Finding, PortRef, Severity, Tier
from core.topology.ethernet import EthResult, resolve_ethernet
from core.topology.fabric import (
    assign_tiers,
    components,
    domain_id,
    domain_name,
    majority,
    modal,
    natural_key,
    similarity_groups,
)
from core.topology.inputs import DcimNodeObs, IbLinkObs, IbNodeObs, Observations, TopologyConfig
from core.topology.model import (
    LEVELS,
    DomainOut,
    HcaOut,
    HostOut,
    LinkOut,
    SwitchOut,
    TopologyModel,
    sorted_findings,
)
from core.topology.roles import HostFacts, classify_hosts

MISNAMED = ("unnamed_hca", "default_hostname", "unknown_ca")
"""Node classes of CAs that are probably compute HCAs whose description names no usable host."""

NAMED_NON_COMPUTE = ("ufm_server", "storage", "login", "management")
"""Node classes the ingest name rules give; a DCIM role of ``compute`` overrides them (the site's
``exclude`` class is never overridden: it is an explicit instruction)."""

MISNAMED_SEVERITY = Severity.WARNING
TIER_ORDER: Mapping[Tier, int] = {Tier.LEAF: 0, Tier.SPINE: 1, Tier.CORE: 2}


_CANONICAL_GUID = re.compile(r"0x[0-9a-f]{16}")


def _norm_guid(text: str) -> str | None:
    """``0x`` + 16 lower-case hex digits, or None. The connectors already write that form, so it is
    checked first (this runs for every node and link end: 38k times on a 16-SU fabric)."""
    if _CANONICAL_GUID.fullmatch(text):
        return text
    t = text.strip().lower().removeprefix("0x")
    if not t or len(t) > 16 or any(c not in "0123456789abcdef" for c in t):
        return None
    return f"0x{int(t, 16):016x}"


@dataclass
class _Hca:
    guid: str
    host: str | None
    hca: str | None
    rail: str | None
    attribution: str
    node_class: str
    description: str
    leaf: str | None = None
    leaf_port: str | None = None
    system_guid: str | None = None


@dataclass
class _State:
    """Working indexes of one derivation."""

    cfg: TopologyConfig
    nodes: dict[str, IbNodeObs] = field(default_factory=dict)
    node_sources: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    switches: dict[str, IbNodeObs] = field(default_factory=dict)
    hcas: dict[str, _Hca] = field(default_factory=dict)  # compute-fabric CAs (named or misnamed)
    other: dict[str, IbNodeObs] = field(default_factory=dict)  # non-compute CAs / routers
    links: dict[tuple[str, int, str, int], dict[str, Any]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    unresolved: list[dict[str, Any]] = field(default_factory=list)
    dcim_by_guid: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    rail_of_name: dict[str, str] = field(default_factory=dict)
    dcim: dict[str, DcimNodeObs] = field(default_factory=dict)  # normalised node name -> row
    # Hosts set apart as not compute (DCIM role or fleet pattern): host -> (role, reason), and
    # their HCAs, kept out of ``hcas`` so no compute step sees them.
    service: dict[str, tuple[str, str]] = field(default_factory=dict)
    service_hcas: dict[str, _Hca] = field(default_factory=dict)

    def dcim_role(self, host: str) -> str | None:
        row = self.dcim.get(host)
        return self.cfg.host_roles.dcim_role(row.role) if row is not None else None


def derive(obs: Observations, config: TopologyConfig | None = None) -> TopologyModel:
    """The whole derivation; see the module docstring for the order of steps."""
    cfg = config or TopologyConfig()
    st = _State(cfg)
    norm = cfg.hostnames.normalise

    # --- DCIM first: it is the reference HCA GUIDs and rails are read from ---
    dcim = st.dcim
    name_rails: dict[str, Counter[int]] = defaultdict(Counter)
    for drow in sorted(obs.dcim, key=lambda r: (r.source, r.node)):
        node = norm(drow.node)
        if node in dcim:
            st.unresolved.append({"source": drow.source, "node": drow.node, "reason": "node listed twice in DCIM"})
            continue
        dcim[node] = drow
        for dh in drow.hcas:
            guid = _norm_guid(dh.guid) if dh.guid else None
            if guid is not None:
                st.dcim_by_guid[guid] = (node, dh.rail)
            if dh.name and dh.rail is not None:
                name_rails[dh.name][dh.rail] += 1
    for name, counts in name_rails.items():
        st.rail_of_name[name] = f"rail{counts.most_common(1)[0][0]}"

    _ib_nodes(st, obs.ib_nodes)
    _ib_links(st, obs.ib_links)

    # --- graph and tiers ---
    sw_edges: list[tuple[str, str]] = []
    leaf_hosts: dict[str, set[str]] = defaultdict(set)
    for (a, ap, b, bp), link in st.links.items():
        if link["internal"]:
            continue
        if a in st.switches and b in st.switches:
            sw_edges.append((a, b))
        elif a in st.switches and b in st.hcas:
            _attach(st.hcas[b], a, ap)
        elif b in st.switches and a in st.hcas:
            _attach(st.hcas[a], b, bp)
    _set_apart_non_compute(st)
    for h in st.hcas.values():
        if h.leaf is not None and h.host is not None:
            leaf_hosts[h.leaf].add(h.host)
    leaves_with_cas = {h.leaf for h in st.hcas.values() if h.leaf is not None}
    tiers = assign_tiers(st.switches, sw_edges, leaves_with_cas)

    # --- rail groups (blocks) ---
    leaves = sorted(s for s, (t, _) in tiers.items() if t is Tier.LEAF)
    block_groups = similarity_groups({lf: frozenset(leaf_hosts.get(lf, ())) for lf in leaves}, cfg.similarity)
    block_of_leaf: dict[str, str] = {}
    domains: dict[str, dict[str, Any]] = {}
    for group in block_groups:
        did = domain_id("block", group)
        domains[did] = {"level": "block", "members": tuple(group)}
        for lf in group:
            block_of_leaf[lf] = did

    # --- topology attribution of what is still nameless ---
    host_blocks = _host_blocks(st, block_of_leaf)
    _attribute_by_topology(st, block_of_leaf, host_blocks)
    host_blocks = _host_blocks(st, block_of_leaf)

    # --- leaf rails and uplinks ---
    up_neighbours: dict[str, Counter[str]] = defaultdict(Counter)
    down_count: Counter[str] = Counter()
    for a, b in sw_edges:
        ta, tb = tiers[a][0], tiers[b][0]
        if ta is None or tb is None:
            continue
        if TIER_ORDER[ta] < TIER_ORDER[tb]:
            up_neighbours[a][b] += 1
            down_count[b] += 1
        elif TIER_ORDER[tb] < TIER_ORDER[ta]:
            up_neighbours[b][a] += 1
            down_count[a] += 1
    for h in st.hcas.values():
        if h.leaf is not None:
            down_count[h.leaf] += 1
    rails_on: dict[str, list[str]] = defaultdict(list)
    for h in st.hcas.values():
        if h.leaf is not None and h.rail is not None:
            rails_on[h.leaf].append(h.rail)
    leaf_rail: dict[str, str | None] = {}
    for lf in leaves:
        rail, votes, total = majority(rails_on.get(lf, ()))
        leaf_rail[lf] = rail if total and votes * 2 > total else None
    for h in st.hcas.values():  # a nameless HCA's rail is the rail of the leaf it is cabled to
        if h.rail is None and h.leaf is not None:
            h.rail = leaf_rail.get(h.leaf)

    # --- spine groups ---
    spines = sorted(s for s, (t, _) in tiers.items() if t is Tier.SPINE)
    spine_leaves: dict[str, set[str]] = defaultdict(set)
    for lf in leaves:
        for sp in up_neighbours[lf]:
            spine_leaves[sp].add(lf)
    sg_of_spine: dict[str, str] = {}
    for group in similarity_groups({s: frozenset(spine_leaves.get(s, ())) for s in spines}, cfg.similarity):
        did = domain_id("spine_group", group)
        domains[did] = {"level": "spine_group", "members": tuple(group)}
        for s in group:
            sg_of_spine[s] = did
    sg_of_block: dict[str, str | None] = {}
    for did, d in list(domains.items()):
        if d["level"] != "block":
            continue
        sg, _, _ = majority(sg_of_spine[sp] for lf in d["members"] for sp in up_neighbours[lf] if sp in sg_of_spine)
        sg_of_block[did] = sg

    # --- pods: connected components of the switch graph ---
    pod_of_switch: dict[str, str] = {}
    for comp in components(st.switches, sw_edges):
        tiered = [s for s in comp if tiers[s][0] is not None]
        if not tiered:
            continue
        top = max(TIER_ORDER[tiers[s][0]] for s in tiered)  # type: ignore[index]
        members = sorted(s for s in tiered if TIER_ORDER[tiers[s][0]] == top)  # type: ignore[index]
        did = domain_id("pod", members)
        domains[did] = {"level": "pod", "members": tuple(members)}
        for s in comp:
            pod_of_switch[s] = did

    # --- hosts: the join of every source ---
    eth = _ethernet(st, obs, dcim)
    nvlink = _nvlink(st, obs)
    ib_hosts: dict[str, list[_Hca]] = defaultdict(list)
    for h in st.hcas.values():
        if h.host is not None:
            ib_hosts[h.host].append(h)
    k8s = {norm(n) for n in obs.k8s_nodes}
    compute_dcim = {n for n in dcim if st.dcim_role(n) in (None, "compute")}
    names = set(ib_hosts) | eth.hosts | compute_dcim | k8s
    other_hosts = _non_compute(st, eth.hosts)
    names -= set(other_hosts)

    host_members: dict[str, list[str]] = defaultdict(list)
    hosts: dict[str, dict[str, Any]] = {}
    for name in sorted(names):
        block, n, total = host_blocks.get(name, (None, 0, 0))
        invalid = None
        if block is not None and n * 2 <= total:
            invalid = f"its HCAs spread over rail groups with no majority ({n} of {total} in the largest)"
        sg = sg_of_block.get(block) if block else None
        pod = pod_of_switch.get(domains[block]["members"][0]) if block else None
        sources = [
            s
            for s, present in (
                ("ib", name in ib_hosts),
                ("eth", name in eth.hosts),
                ("dcim", name in dcim),
                ("nvlink", name in nvlink),
                ("k8s", name in k8s),
            )
            if present
        ]
        hosts[name] = {
            "block": block,
            "spine_group": sg,
            "pod": pod,
            "sources": tuple(sources),
            "invalid": invalid,
        }
        for lvl in LEVELS:
            if hosts[name][lvl]:
                host_members[hosts[name][lvl]].append(name)

    # --- domain sizes, design sizes, validity ---
    by_level: dict[str, list[str]] = defaultdict(list)
    for did, d in domains.items():
        by_level[d["level"]].append(did)
    domain_out: list[DomainOut] = []
    invalid_domains: dict[str, str] = {}
    names_of = {sid: _switch_name(n) for sid, n in st.switches.items()}
    for lvl in LEVELS:
        ids = sorted(by_level[lvl])
        sizes = {did: len(host_members.get(did, ())) for did in ids}
        design = cfg.design_sizes.get(lvl) or modal(v for v in sizes.values() if v)
        for did in ids:
            d = domains[did]
            reason = None
            if design is not None and sizes[did] > design:
                reason = f"{sizes[did]} hosts, over the design size of {design}"
                invalid_domains[did] = reason
            domain_out.append(
                DomainOut(
                    level=lvl,
                    id=did,
                    name=domain_name((names_of[m] for m in d["members"]), did),
                    members=d["members"],
                    hosts=sizes[did],
                    design_size=design,
                    valid=reason is None,
                    reason=reason,
                )
            )
            if reason is not None:
                st.findings.append(
                    Finding(
                        kind="invalid_domain",
                        severity=Severity.ERROR,
                        message=f"{lvl} {domain_out[-1].name}: {reason}; excluded from what is published",
                        devices=d["members"],
                        evidence={"level": lvl, "domain": did, "hosts": sorted(host_members.get(did, ()))},
                    )
                )

    # --- host records ---
    host_out: list[HostOut] = []
    for name, rec in hosts.items():
        nv = nvlink.get(name)
        bad = [f"{lvl} {rec[lvl]} is invalid: {invalid_domains[rec[lvl]]}" for lvl in LEVELS
               if rec[lvl] in invalid_domains]  # fmt: skip
        invalid = rec["invalid"] or (bad[0] if bad else None)
        row = dcim.get(name)
        on_fabric = "ib" in rec["sources"] or "eth" in rec["sources"]
        fabric_seen = bool(st.switches) or bool(eth.switches)
        role, why = ("compute", "compute host: " + ", ".join(rec["sources"]))
        if fabric_seen and not on_fabric:
            role, why = "not_on_fabric", "listed by " + ", ".join(rec["sources"]) + " but seen on no fabric"
        host_out.append(
            HostOut(
                name=name,
                role=role,
                role_reason=why,
                block=rec["block"],
                spine_group=rec["spine_group"],
                pod=rec["pod"],
                nvlink_domain=nv[0] if nv else None,
                nvlink_sub_domain=nv[1] if nv else None,
                nvlink_method=nv[2] if nv else None,
                hcas=tuple(_hca_out(c) for c in sorted(ib_hosts.get(name, ()), key=lambda c: (c.rail or "", c.guid))),
                sources=rec["sources"],
                rack=row.rack if row is not None else None,
                valid=invalid is None,
                invalid_reason=invalid,
            )
        )
    host_out.extend(other_hosts.values())

    # --- switches ---
    switch_out: list[SwitchOut] = []
    for sid in sorted(st.switches):
        sw = st.switches[sid]
        tier, why = tiers[sid]
        switch_out.append(
            SwitchOut(
                id=sid,
                name=names_of[sid],
                fabric="ib",
                identity_kind="node_guid",
                tier=tier,
                tier_reason=why,
                model=sw.switch_model,
                uplinks=sum(up_neighbours[sid].values()),
                downlinks=down_count[sid],
                rail=leaf_rail.get(sid),
                sources=tuple(sorted(st.node_sources[sid])),
            )
        )
    switch_out.extend(eth_switches(eth, st))

    # --- findings ---
    _finding_misnamed(st)
    _finding_duplicates(st, names_of)
    _finding_miscabled(st, leaf_rail, block_of_leaf)
    _finding_degraded(st, leaves, up_neighbours, pod_of_switch, names_of, sg_of_spine, block_of_leaf, sg_of_block)
    _finding_links(st, tiers, names_of)
    _finding_hosts(st, hosts, ib_hosts, dcim, eth, obs, block_of_leaf, domains, names_of)
    st.findings.extend(eth.findings)
    if st.nodes and not st.switches:
        st.findings.append(
            Finding(
                kind="no_switches",
                severity=Severity.ERROR,
                message=f"the InfiniBand data has {len(st.nodes)} adapter(s) and no switch: it was collected on a "
                "host whose HCA is not cabled or is down, so it says nothing about the fabric",
                devices=tuple(sorted(st.nodes)),
                evidence={"sources": sorted({s for v in st.node_sources.values() for s in v})},
            )
        )
    for sid, (tier, why) in sorted(tiers.items()):
        if tier is None:
            st.findings.append(
                Finding(
                    kind="unclassified_switch",
                    severity=Severity.WARNING,
                    message=f"{names_of[sid]} has no tier: {why}",
                    devices=(sid,),
                    evidence={"reason": why},
                )
            )

    link_out = [_ib_link_out(k, v) for k, v in sorted(st.links.items())]
    link_out.extend(_eth_link_out(eth))
    return TopologyModel(
        switches=tuple(switch_out),
        hosts=tuple(sorted(host_out, key=lambda h: (h.role != "compute", h.name))),
        domains=tuple(sorted(domain_out, key=lambda d: (LEVELS.index(d.level), natural_key(d.name), d.id))),
        links=tuple(link_out),
        findings=sorted_findings(st.findings),
        inputs={
            "ib_nodes": len(obs.ib_nodes),
            "ib_links": len(obs.ib_links),
            "dcim_nodes": len(obs.dcim),
            "nvlink_nodes": len(obs.nvlink),
            "lldp_rows": len(obs.lldp),
            "k8s_nodes": len(obs.k8s_nodes),
            "unresolved": st.unresolved + eth.unresolved,
        },
    )


# --- InfiniBand resolution ------------------------------------------------------------------


def _switch_name(n: IbNodeObs) -> str:
    return n.switch_name or n.description.strip() or n.guid


def _ib_nodes(st: _State, rows: Iterable[IbNodeObs]) -> None:
    norm = st.cfg.hostnames.normalise
    for n in sorted(rows, key=lambda r: (r.source, r.guid)):
        guid = _norm_guid(n.guid)
        if guid is None:
            st.unresolved.append({"source": n.source, "guid": n.guid, "reason": "not a 64-bit node GUID"})
            continue
        st.node_sources[guid].add(n.source)
        if guid in st.nodes:  # a second fabric manager saw the same node: first (by source) wins
            continue
        st.nodes[guid] = n
        if n.node_class == "switch":
            st.switches[guid] = n
            continue
        sysimg = _norm_guid(n.system_guid) if n.system_guid else None
        named_compute = n.node_class in NAMED_NON_COMPUTE and n.hostname and st.dcim_role(norm(n.hostname)) == "compute"
        if (n.node_class == "compute_hca" or named_compute) and n.hostname:
            st.hcas[guid] = _Hca(
                guid, norm(n.hostname), n.hca, _rail(st, guid, n.hca), "node_description", "compute_hca",
                n.description, system_guid=sysimg,
            )  # fmt: skip
        elif n.node_class in MISNAMED and n.node_type == "ca":
            st.hcas[guid] = _Hca(guid, None, n.hca, _rail(st, guid, n.hca), "", n.node_class, n.description,
                                 system_guid=sysimg)  # fmt: skip
        else:
            st.other[guid] = n
    # Misnamed HCAs: the inventory knows their GUID, or a sibling on the same system board does.
    by_system: dict[str, str] = {}
    for h in st.hcas.values():
        if h.host is not None and h.system_guid and h.system_guid != h.guid:
            by_system.setdefault(h.system_guid, h.host)
    for h in st.hcas.values():
        if h.host is not None:
            continue
        if h.guid in st.dcim_by_guid:
            h.host, h.attribution = st.dcim_by_guid[h.guid][0], "dcim_guid"
        elif h.system_guid and h.system_guid != h.guid and h.system_guid in by_system:
            h.host, h.attribution = by_system[h.system_guid], "system_guid"


def _rail(st: _State, guid: str, hca: str | None) -> str | None:
    if guid in st.dcim_by_guid and st.dcim_by_guid[guid][1] is not None:
        return f"rail{st.dcim_by_guid[guid][1]}"
    if hca is not None:
        return st.rail_of_name.get(hca, hca)
    return None


def _ib_links(st: _State, rows: Iterable[IbLinkObs]) -> None:
    for lk in sorted(rows, key=lambda r: r.source):
        a, b = _norm_guid(lk.a_guid), _norm_guid(lk.b_guid)
        if a is None or b is None or a not in st.nodes or b not in st.nodes:
            st.unresolved.append(
                {"source": lk.source, "link": f"{lk.a_guid}:{lk.a_port}-{lk.b_guid}:{lk.b_port}",
                 "reason": "an end is not a node of any source"}
            )  # fmt: skip
            continue
        ends = sorted(((a, lk.a_port), (b, lk.b_port)))
        key = (ends[0][0], ends[0][1], ends[1][0], ends[1][1])
        entry = st.links.setdefault(
            key,
            {"sources": set(), "both_sides": False, "internal": lk.internal, "rates": set(),
             "speed_gbps": lk.speed_gbps, "width": lk.width},
        )  # fmt: skip
        entry["sources"].add(lk.source)
        entry["both_sides"] = entry["both_sides"] or lk.both_sides
        entry["rates"].add((lk.speed_gbps, lk.width))


def _attach(h: _Hca, leaf: str, port: int) -> None:
    h.leaf, h.leaf_port = leaf, str(port)


def _host_blocks(st: _State, block_of_leaf: Mapping[str, str]) -> dict[str, tuple[str | None, int, int]]:
    per_host: dict[str, list[str]] = defaultdict(list)
    for h in st.hcas.values():
        if h.host is not None and h.leaf in block_of_leaf:
            per_host[h.host].append(block_of_leaf[h.leaf])  # type: ignore[index]
    return {host: majority(blocks) for host, blocks in per_host.items()}


def _attribute_by_topology(
    st: _State, block_of_leaf: Mapping[str, str], host_blocks: Mapping[str, tuple[str | None, int, int]]
) -> None:
    on_leaf: dict[str, set[str]] = defaultdict(set)
    for h in st.hcas.values():
        if h.host is not None and h.leaf is not None:
            on_leaf[h.leaf].add(h.host)
    members: dict[str, set[str]] = defaultdict(set)
    for host, (block, _, _) in host_blocks.items():
        if block is not None:
            members[block].add(host)
    pending: dict[str, list[_Hca]] = defaultdict(list)
    for h in st.hcas.values():
        if h.host is None and h.leaf in block_of_leaf:
            pending[h.leaf].append(h)  # type: ignore[index]
    for leaf, items in sorted(pending.items()):
        candidates = sorted(members[block_of_leaf[leaf]] - on_leaf[leaf])
        # Only an unambiguous gap is filled: one nameless HCA on the leaf, one host missing there.
        if len(items) == 1 and len(candidates) == 1:
            items[0].host, items[0].attribution = candidates[0], "topology"


def _set_apart_non_compute(st: _State) -> None:
    """Step 1b: move the hosts that are not compute hosts out of ``st.hcas`` (see the module doc).

    Runs once HCAs are attached to their leaves and before anything is learned from the hosts.
    The rails judged here are the leaves' majority rails over every named HCA: a UFM server's two
    votes among a rail group's 32 cannot move them.
    """
    rules = st.cfg.host_roles
    by_host: dict[str, list[_Hca]] = defaultdict(list)
    for h in st.hcas.values():
        if h.host is not None:
            by_host[h.host].append(h)
    verdict: dict[str, tuple[str, str]] = {}
    kept: set[str] = set()  # DCIM says compute: never judged by the pattern
    for host in by_host:
        role = st.dcim_role(host)
        if role == "compute":
            kept.add(host)
        elif role is not None:
            row = st.dcim[host]
            verdict[host] = (role, f"DCIM ({row.source}) lists its role as {row.role!r}")
    rails_on: dict[str, list[str]] = defaultdict(list)
    for h in st.hcas.values():
        if h.leaf is not None and h.rail is not None:
            rails_on[h.leaf].append(h.rail)
    leaf_rail: dict[str, str] = {}
    for leaf, rails in rails_on.items():
        rail, votes, total = majority(rails)
        if rail is not None and votes * 2 > total:
            leaf_rail[leaf] = rail
    facts = []
    for host, cas in sorted(by_host.items()):
        if host in verdict:
            continue
        checked = [(leaf_rail[c.leaf], c.rail) for c in cas if c.leaf in leaf_rail and c.rail is not None]
        on_rail = len([1 for leaf_has, own in checked if leaf_has == own])
        facts.append(HostFacts(host, len(cas), on_rail, len(checked)))
    for host, found in classify_hosts(facts, rules).items():
        if host not in kept:
            verdict[host] = found
    for host, found in verdict.items():
        st.service[host] = found
        for h in by_host[host]:
            st.service_hcas[h.guid] = st.hcas.pop(h.guid)


def _dcim_override(st: _State, name: str, role: str, why: str) -> tuple[str, str]:
    """A non-compute DCIM role replaces the role a name rule gave (the inventory is the operator's word)."""
    dcim_role = st.dcim_role(name)
    if dcim_role is None or dcim_role == "compute" or dcim_role == role:
        return role, why
    row = st.dcim[name]
    return dcim_role, f"DCIM ({row.source}) lists its role as {row.role!r} (the fabric said: {why})"


def _non_compute(st: _State, eth_hosts: set[str]) -> dict[str, HostOut]:
    """Hosts on the fabric, or in DCIM with a non-compute role, that are not compute hosts, keyed
    by the name they are listed under."""
    out: dict[str, HostOut] = {}
    norm = st.cfg.hostnames.normalise

    def sources(name: str, *first: str) -> tuple[str, ...]:
        return (*first, *(("eth",) if name in eth_hosts else ()), *(("dcim",) if name in st.dcim else ()))

    def rack(name: str) -> str | None:
        row = st.dcim.get(name)
        return row.rack if row is not None else None

    for name, (role, why) in sorted(st.service.items()):
        cas = sorted((c for c in st.service_hcas.values() if c.host == name), key=lambda c: (c.hca or "", c.guid))
        out[name] = HostOut(
            name=name, role=role, role_reason=why, hcas=tuple(_hca_out(c) for c in cas), sources=sources(name, "ib"),
            rack=rack(name),
        )  # fmt: skip
    cabled: dict[str, tuple[str, str]] = {}  # other CA -> (switch, port): where its cable lands
    for (a, ap, b, bp), link in st.links.items():
        if not link["internal"]:
            if a in st.other and b in st.switches:
                cabled[a] = (b, str(bp))
            elif b in st.other and a in st.switches:
                cabled[b] = (a, str(ap))
    named: dict[str, list[str]] = defaultdict(list)
    for guid, n in sorted(st.other.items()):
        named[norm(n.hostname) if n.hostname and n.node_class not in MISNAMED else guid].append(guid)
    for name, guids in named.items():
        if name in out:
            continue
        n = st.other[guids[0]]
        role, why = _dcim_override(st, name, n.node_class, n.class_reason)
        hcas = tuple(
            HcaOut(guid=g, hca=st.other[g].hca, rail=None, leaf=cabled[g][0] if g in cabled else None,
                   leaf_port=cabled[g][1] if g in cabled else None, attribution="node_description")
            for g in sorted(guids, key=lambda g: (st.other[g].hca or "", g))
            if st.other[g].node_type == "ca" and g != name
        )  # fmt: skip
        out[name] = HostOut(
            name=name, role=role, role_reason=why, hcas=hcas, sources=sources(name, "ib"), rack=rack(name)
        )
    for name in sorted(st.dcim):
        listed = st.dcim_role(name)
        if name in out or listed is None or listed == "compute":
            continue
        row = st.dcim[name]
        where = "on the fabric" if name in eth_hosts else "on no fabric"
        out[name] = HostOut(
            name=name, role=listed, role_reason=f"DCIM ({row.source}) lists its role as {row.role!r}; {where}",
            sources=sources(name), rack=row.rack,
        )  # fmt: skip
    for h in sorted(st.hcas.values(), key=lambda c: c.guid):
        if h.host is None:
            out[h.guid] = HostOut(
                name=h.guid,
                role=h.node_class,
                role_reason=f"{h.description.strip() or 'empty description'}: no host could be attributed",
                hcas=(_hca_out(h),),
                sources=("ib",),
            )
    return out


def _hca_out(h: _Hca) -> HcaOut:
    return HcaOut(guid=h.guid, hca=h.hca, rail=h.rail, leaf=h.leaf, leaf_port=h.leaf_port, attribution=h.attribution)


# --- other sources ----------------------------------------------------------------------------


def _ethernet(st: _State, obs: Observations, dcim: Mapping[str, Any]) -> EthResult:
    known = {h.host for h in st.hcas.values() if h.host} | set(dcim) | set(st.service)
    return resolve_ethernet(obs.lldp, obs.eth_systems, obs.eth_interfaces, known, st.cfg.hostnames)


def eth_switches(eth: EthResult, st: _State) -> list[SwitchOut]:
    """Ethernet switches with tiers from their own graph (leaves: switches with hosts below)."""
    if not eth.switches:
        return []
    edges, leaves = [], set()
    up: Counter[str] = Counter()
    down: Counter[str] = Counter()
    for (a, _, b, _), _entry in eth.links.items():
        if a in eth.switches and b in eth.switches:
            edges.append((a, b))
        elif a in eth.switches:
            leaves.add(a)
            down[a] += 1
        elif b in eth.switches:
            leaves.add(b)
            down[b] += 1
    tiers = assign_tiers(eth.switches, edges, leaves)
    for a, b in edges:
        ta, tb = tiers[a][0], tiers[b][0]
        if ta is not None and tb is not None and ta != tb:
            lo, hi = (a, b) if TIER_ORDER[ta] < TIER_ORDER[tb] else (b, a)
            up[lo] += 1
            down[hi] += 1
    out = []
    for sid in sorted(eth.switches):
        dev = eth.switches[sid]
        tier, why = tiers[sid]
        if tier is None:
            st.findings.append(
                Finding(kind="unclassified_switch", severity=Severity.WARNING,
                        message=f"{dev.name} has no tier: {why}", devices=(sid,), evidence={"reason": why})
            )  # fmt: skip
        out.append(
            SwitchOut(
                id=sid, name=dev.name, fabric="eth",
                identity_kind="chassis_mac" if not sid.startswith("switch:") else "configured_name",
                tier=tier, tier_reason=why, uplinks=up[sid], downlinks=down[sid], sources=(f"lldp:{dev.source}",),
            )
        )  # fmt: skip
    return out


def _nvlink(st: _State, obs: Observations) -> dict[str, tuple[str, str, str]]:
    """host -> (domain, sub-domain, method). A GFD clique ``<ClusterUUID>.<CliqueID>`` is a
    partition (sub-domain) of the NVLink domain ``<ClusterUUID>``; without a cluster UUID the
    reported domain is both (HGX single-node, NMX DomainUUID)."""
    out: dict[str, tuple[str, str, str]] = {}
    norm = st.cfg.hostnames.normalise
    for r in sorted(obs.nvlink, key=lambda r: (r.source, r.node)):
        node = norm(r.node)
        value = (r.cluster_uuid or r.domain, r.domain, r.method)
        if node in out and out[node] != value:
            st.findings.append(
                Finding(
                    kind="nvlink_conflict",
                    severity=Severity.WARNING,
                    message=f"{node}: NVLink sources disagree ({out[node][1]} vs {r.domain}); the first is kept",
                    devices=(node,),
                    evidence={"kept": list(out[node]), "other": list(value), "source": r.source},
                )
            )
            continue
        out.setdefault(node, value)
    return out


# --- findings -------------------------------------------------------------------------------


def _finding_misnamed(st: _State) -> None:
    for h in sorted(st.hcas.values(), key=lambda c: c.guid):
        if h.node_class not in MISNAMED:
            continue
        what = {
            "unnamed_hca": "reports no usable node description",
            "default_hostname": "reports an OS default host name",
            "unknown_ca": "has a description no rule reads a host from",
        }[h.node_class]
        where = (
            f"attributed to {h.host} by {h.attribution.replace('_', ' ')}" if h.host else "no host could be attributed"
        )
        st.findings.append(
            Finding(
                kind=h.node_class,
                severity=MISNAMED_SEVERITY,
                message=f"HCA {h.guid} ({h.description.strip() or 'empty'}) {what}; {where}",
                devices=(h.guid,),
                ports=(PortRef(device_id=h.guid, port="1"),),
                evidence={
                    "description": h.description,
                    "host": h.host,
                    "attribution": h.attribution or None,
                    "leaf": h.leaf,
                    "leaf_port": h.leaf_port,
                },
            )
        )


def _finding_duplicates(st: _State, names_of: Mapping[str, str]) -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for sid in sorted(st.switches):
        by_name[names_of[sid]].append(sid)
    for name, ids in sorted(by_name.items()):
        if len(ids) > 1 and name not in ids:
            st.findings.append(
                Finding(kind="duplicate_name", severity=Severity.WARNING,
                        message=f"{len(ids)} InfiniBand switches are named {name!r}", devices=tuple(ids),
                        evidence={"name": name, "fabric": "ib"})
            )  # fmt: skip
    by_desc: dict[str, list[str]] = defaultdict(list)
    for h in st.hcas.values():
        if h.node_class == "compute_hca":
            by_desc[h.description.strip()].append(h.guid)
    for desc, guids in sorted(by_desc.items()):
        if len(guids) > 1:
            st.findings.append(
                Finding(kind="duplicate_name", severity=Severity.WARNING,
                        message=f"{len(guids)} HCAs report the node description {desc!r}",
                        devices=tuple(sorted(guids)), evidence={"name": desc, "fabric": "ib", "what": "hca"})
            )  # fmt: skip


def _finding_miscabled(st: _State, leaf_rail: Mapping[str, str | None], block_of_leaf: Mapping[str, str]) -> None:
    """A rail landing on another rail's leaf. A swap of two cables shows as two mismatches with
    opposite rails in one rail group: they are one finding, as they are one mistake."""
    wrong: dict[str, list[_Hca]] = defaultdict(list)
    for h in sorted(st.hcas.values(), key=lambda c: (c.host or "", c.guid)):
        if h.host is None or h.leaf is None or h.rail is None:
            continue
        lr = leaf_rail.get(h.leaf)
        if lr is not None and lr != h.rail:
            wrong[block_of_leaf.get(h.leaf, "")].append(h)
    for _, items in sorted(wrong.items()):
        left = list(items)
        while left:
            x = left.pop(0)
            y = next((c for c in left if c.rail == leaf_rail[x.leaf] and leaf_rail[c.leaf] == x.rail), None)  # type: ignore[index]
            group = [x] if y is None else [x, y]
            if y is not None:
                left.remove(y)
            st.findings.append(
                Finding(
                    kind="miscabled_port",
                    severity=Severity.ERROR,
                    message="; ".join(
                        f"{c.host} {c.hca or c.guid} ({c.rail}) is cabled to the {leaf_rail[c.leaf]} leaf"  # type: ignore[index]
                        for c in group
                    )
                    + (" (two cables swapped)" if y is not None else ""),
                    devices=tuple(c.guid for c in group) + tuple(dict.fromkeys(c.leaf for c in group if c.leaf)),
                    ports=tuple(PortRef(device_id=c.guid, port="1") for c in group)
                    + tuple(PortRef(device_id=c.leaf, port=c.leaf_port or "") for c in group if c.leaf),
                    evidence={
                        "hcas": [
                            {"host": c.host, "hca": c.hca, "guid": c.guid, "rail": c.rail, "leaf": c.leaf,
                             "leaf_port": c.leaf_port, "leaf_rail": leaf_rail[c.leaf]}  # type: ignore[index]
                            for c in group
                        ]
                    },
                )
            )  # fmt: skip


def _finding_degraded(
    st: _State,
    leaves: list[str],
    up: Mapping[str, Counter[str]],
    pod_of: Mapping[str, str],
    names_of: Mapping[str, str],
    sg_of_spine: Mapping[str, str],
    block_of_leaf: Mapping[str, str],
    sg_of_block: Mapping[str, str | None],
) -> None:
    """Leaves with fewer uplinks than designed (configured, else the modal count in their pod)."""
    per_pod: dict[str, list[str]] = defaultdict(list)
    for lf in leaves:
        per_pod[pod_of.get(lf, "")].append(lf)
    for _, group in sorted(per_pod.items()):
        counts = {lf: sum(up[lf].values()) for lf in group}
        design = st.cfg.design_leaf_uplinks or modal(counts.values())
        per_spine = modal(n for lf in group for n in up[lf].values())
        if not design:
            continue
        for lf in group:
            have = counts[lf]
            if have >= design:
                continue
            sg = sg_of_block.get(block_of_leaf.get(lf, ""))
            expected_spines = sorted(s for s, g in sg_of_spine.items() if g == sg)
            short = {
                s: {"links": up[lf].get(s, 0), "expected": per_spine}
                for s in expected_spines
                if per_spine is not None and up[lf].get(s, 0) < per_spine
            }
            st.findings.append(
                Finding(
                    kind="degraded_leaf",
                    severity=Severity.ERROR if have * 4 < design * 3 else Severity.WARNING,
                    message=f"{names_of[lf]} has {have} uplinks, design {design}",
                    devices=(lf, *short),
                    evidence={
                        "uplinks": have,
                        "design": design,
                        "design_from": "config" if st.cfg.design_leaf_uplinks else "modal uplinks of its pod's leaves",
                        "short_spines": {names_of.get(s, s): v for s, v in short.items()},
                    },
                )
            )


def _finding_links(st: _State, tiers: Mapping[str, tuple[Tier | None, str]], names_of: Mapping[str, str]) -> None:
    def cls(guid: str) -> str:
        if guid in st.switches:
            t = tiers[guid][0]
            return t.value if t else "switch"
        return "host" if guid in st.hcas else "other"

    classes: dict[tuple[str, str], list[tuple[tuple[str, int, str, int], dict[str, Any]]]] = defaultdict(list)
    for key, link in sorted(st.links.items()):
        if link["internal"]:
            continue
        a, b = key[0], key[2]
        classes[tuple(sorted((cls(a), cls(b))))].append((key, link))  # type: ignore[index]
        if not link["both_sides"]:
            st.findings.append(
                Finding(
                    kind="one_sided_link",
                    severity=Severity.WARNING,
                    message=f"{_label(st, a, names_of)}:{key[1]} - {_label(st, b, names_of)}:{key[3]} "
                    "was reported from one end only",
                    devices=(a, b),
                    ports=(PortRef(device_id=a, port=str(key[1])), PortRef(device_id=b, port=str(key[3]))),
                    evidence={"sources": sorted(link["sources"])},
                )
            )
    for pair, items in sorted(classes.items()):
        speed = modal(int(v["speed_gbps"]) for _, v in items if v["speed_gbps"] is not None)
        width, _, _ = majority(v["width"] for _, v in items if v["width"] is not None)
        for key, link in items:
            bad_speed = link["speed_gbps"] is not None and speed is not None and int(link["speed_gbps"]) != speed
            bad_width = link["width"] is not None and width is not None and link["width"] != width
            disagree = len(link["rates"]) > 1
            if bad_speed or bad_width or disagree:
                a, b = key[0], key[2]
                st.findings.append(
                    Finding(
                        kind="speed_width_mismatch",
                        severity=Severity.WARNING,
                        message=f"{_label(st, a, names_of)}:{key[1]} - {_label(st, b, names_of)}:{key[3]} runs "
                        f"{link['width']} at {link['speed_gbps']} Gb/s; {'-'.join(pair)} links run {width} at {speed}",
                        devices=(a, b),
                        ports=(PortRef(device_id=a, port=str(key[1])), PortRef(device_id=b, port=str(key[3]))),
                        evidence={
                            "speed_gbps": link["speed_gbps"],
                            "width": link["width"],
                            "expected_speed_gbps": speed,
                            "expected_width": width,
                            "sources_disagree": sorted(map(str, link["rates"])) if disagree else None,
                        },
                    )
                )


def _label(st: _State, guid: str, names_of: Mapping[str, str]) -> str:
    if guid in names_of:
        return names_of[guid]
    h = st.hcas.get(guid) or st.service_hcas.get(guid)
    if h is not None and h.host:
        return f"{h.host}/{h.hca or guid}"
    return guid


def _finding_hosts(
    st: _State,
    hosts: Mapping[str, Mapping[str, Any]],
    ib_hosts: Mapping[str, list[_Hca]],
    dcim: Mapping[str, Any],
    eth: EthResult,
    obs: Observations,
    block_of_leaf: Mapping[str, str],
    domains: Mapping[str, Mapping[str, Any]],
    names_of: Mapping[str, str],
) -> None:
    have_ib = bool(st.switches)
    have_eth = bool(eth.switches)
    have_dcim = bool(obs.dcim)
    linked: dict[str, list[_Hca]] = {name: [c for c in cas if c.leaf is not None] for name, cas in ib_hosts.items()}
    per_block_counts: dict[str, list[int]] = defaultdict(list)
    block_rails: dict[str, set[str]] = defaultdict(set)
    for name, h in hosts.items():
        if h["block"]:
            per_block_counts[h["block"]].append(len(linked.get(name, ())))
            block_rails[h["block"]].update(c.rail for c in linked.get(name, ()) if c.rail is not None)
    for name, h in sorted(hosts.items()):
        in_fabric = [s for s in ("ib", "eth") if s in h["sources"]]
        row = dcim.get(name)
        if have_dcim and row is None and in_fabric:
            st.findings.append(
                Finding(kind="host_not_in_dcim", severity=Severity.WARNING,
                        message=f"{name} is on the fabric ({', '.join(in_fabric)}) but not in the DCIM inventory",
                        devices=(name,), evidence={"fabrics": in_fabric})
            )  # fmt: skip
        if row is not None and not in_fabric:
            st.findings.append(
                Finding(kind="dcim_host_not_in_fabric", severity=Severity.WARNING,
                        message=f"{name} is in the DCIM inventory ({row.source}, rack {row.rack}) but on no fabric",
                        devices=(name,),
                        evidence={"dcim_source": row.source, "rack": row.rack,
                                  "hca_guids": [c.guid for c in row.hcas if c.guid]})
            )  # fmt: skip
            continue
        if not in_fabric:
            continue
        missing: dict[str, Any] = {}
        if have_ib:
            found = linked.get(name, [])
            expected = row.hca_count if row is not None and row.hca_count else None
            expected_from = "dcim hca_count"
            if expected is None and h["block"]:
                expected = modal(per_block_counts[h["block"]])
                expected_from = "modal HCA count of its rail group"
            if not found:
                missing["ib"] = {"expected_hcas": expected, "found": 0}
            elif expected is not None and len(found) < expected:
                rails_here = {c.rail for c in found}
                absent = sorted(block_rails.get(h["block"], set()) - rails_here) if h["block"] else []
                dark = sorted(c.guid for c in ib_hosts.get(name, ()) if c.leaf is None)
                missing["ib"] = {
                    "expected_hcas": expected,
                    "expected_from": expected_from,
                    "found": len(found),
                    "missing_rails": absent,
                    "hcas_without_link": dark,
                }
        if have_eth and "eth" not in h["sources"]:
            missing["eth"] = {"found": 0}
        if missing:
            st.findings.append(
                Finding(
                    kind="host_missing_from_fabric",
                    severity=Severity.WARNING,
                    message=f"{name} is missing from " + ", ".join(_missing_text(f, v) for f, v in missing.items()),
                    devices=(name,),
                    evidence=missing,
                )
            )  # fmt: skip


def _missing_text(fabric: str, v: Mapping[str, Any]) -> str:
    if fabric == "ib" and v.get("expected_hcas"):
        return f"ib ({v['found']} of {v['expected_hcas']} HCAs linked)"
    return fabric


# --- links out ----------------------------------------------------------------------------------


def _ib_link_out(key: tuple[str, int, str, int], v: Mapping[str, Any]) -> LinkOut:
    # model_construct: the ends are already canonical strings in order; validating 25k PortRefs
    # was a quarter of the derivation time on a 16-SU fabric.
    return LinkOut(
        a=PortRef.model_construct(device_id=key[0], port=str(key[1])),
        b=PortRef.model_construct(device_id=key[2], port=str(key[3])),
        kind="ib",
        speed_gbps=v["speed_gbps"],
        width=v["width"],
        evidence=tuple(sorted(v["sources"])),
        both_sides=v["both_sides"],
        resolution={"internal": True} if v["internal"] else {},
    )


def _eth_link_out(eth: EthResult) -> list[LinkOut]:
    out = []
    for key in sorted(eth.links):
        v = eth.links[key]
        out.append(
            LinkOut(
                a=v["a"],
                b=v["b"],
                kind="eth",
                speed_gbps=v.get("speed_gbps"),
                width=None,
                evidence=tuple(sorted(v["sources"])),
                both_sides=v["both_sides"],
                resolution={"ends": v["resolution"]},
            )
        )
    return out
