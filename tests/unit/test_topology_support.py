"""Observations built from a ground truth through the other areas' real parsers and row writers,
and the comparison of a derived model against the truth (used by the topology tests).

IB: the generated ibnetdiscover text -> ``connectors.ibnetdiscover`` -> the IB asset's row
writers -> ``services.topology.rows``: exactly what ``raw.ib_*`` holds. DCIM: the export twin's CSV
-> ``connectors.dcim`` -> the DCIM asset's rows. NVLink: the Kubernetes twin's GFD labels ->
``connectors.nvlink``. LLDP: rows with the columns of ``raw.lldp_neighbor_observations`` built from
the truth's Ethernet cables the way an agent advertises them (the SNMP area's collector is still
being finished; the adapter reads the same columns it lands).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from assets.dcim.assets import DCIM_COLUMNS, dcim_rows
from assets.infiniband.assets import NVLINK_COLUMNS, nvlink_rows
from connectors.dcim.parser import parse_file as parse_dcim
from connectors.ibnetdiscover.parser import parse_ibnetdiscover
from connectors.nvlink import from_node_labels
from core.models import DeviceKind, Finding, LinkKind, Tier
from core.topology import Observations, TopologyModel
from services.infiniband import LINK_COLUMNS, NODE_COLUMNS, link_rows, node_rows
from services.topology import rows as R
from simulator.dcim import write_dcim_export
from simulator.generator import DefectKind, GroundTruth, InjectedDefect, generate
from simulator.ib.ibnetdiscover import render_lines
from simulator.kube.populate import node_objects
from simulator.spec import ClusterSpec, load_spec
from simulator.specs import resolve_spec_path

AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SPECS = ("h100-1su", "h100-4su", "b200-16su", "gb200-nvl72")
DEFECTS: dict[str, Any] = {
    "miscabled_ports": 2,
    "missing_links": 3,
    "degraded_uplinks": 1,
    "unnamed_hcas": 2,
    "dcim_extra_hosts": 2,
    "dcim_missing_hosts": 1,
}


@cache
def spec_of(name: str) -> ClusterSpec:
    return load_spec(resolve_spec_path(name))


def truth_with(name: str, **defects: Any) -> GroundTruth:
    data = spec_of(name).model_dump()
    data["defects"] = defects
    return generate(ClusterSpec.model_validate(data))


def ib_rows(lines: Iterable[str], source: str = "saved") -> tuple[list[Any], list[Any]]:
    fabric = parse_ibnetdiscover(lines, source)
    nodes = [R.ib_node(d) for d in R.rows_as_dicts(NODE_COLUMNS, node_rows("run", source, AT, fabric))]
    links = [R.ib_link(d) for d in R.rows_as_dicts(LINK_COLUMNS, link_rows("run", source, AT, fabric))]
    return nodes, links


def dcim_obs(truth: GroundTruth, tmp: Path) -> list[Any]:
    path = write_dcim_export(truth, tmp / f"dcim-{truth.spec.name}.csv")
    parsed = parse_dcim(path, device="dcim")
    assert not parsed.quarantined
    return [R.dcim_node(d) for d in R.rows_as_dicts(DCIM_COLUMNS, dcim_rows("run", "dcim", AT, parsed.records))]


def nvlink_obs(truth: GroundTruth) -> list[Any]:
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in node_objects(truth)}
    parsed = from_node_labels(labels, "k8s")
    assert not parsed.quarantined
    return [R.nvlink(d) for d in R.rows_as_dicts(NVLINK_COLUMNS, nvlink_rows("run", "k8s", AT, parsed.records))]


def lldp_obs(truth: GroundTruth) -> tuple[list[Any], list[Any], list[Any]]:
    """(lldp rows, snmp systems, snmp interfaces) for every Ethernet switch of the truth."""
    switches = sorted(truth.switches(fabric=LinkKind.ETH), key=lambda d: d.id)
    address = {sw.id: f"10.0.{i // 200}.{i % 200 + 10}" for i, sw in enumerate(switches)}
    source = {sw.id: str(sw.attributes["inventory_name"]) for sw in switches}
    systems = [
        R.eth_system({"source": source[sw.id], "address": address[sw.id], "sys_name": sw.name, "chassis_id": sw.id,
                      "chassis_id_subtype": 4, "platform": sw.platform})
        for sw in switches
    ]  # fmt: skip
    interfaces = []
    for sw in switches:
        for k, port in enumerate(truth.ports_of(sw.id), start=1):
            interfaces.append(
                R.eth_interface({"source": source[sw.id], "if_index": k, "name": port.port, "if_name": port.port,
                                 "if_high_speed_mbps": int((port.speed_gbps or 0) * 1000)})
            )  # fmt: skip
    host_mac = {p.device_id: p.mac for p in truth.ports if p.mac and truth.device(p.device_id).kind is DeviceKind.HOST}
    rows = []
    for link in truth.links:
        if link.kind is not LinkKind.ETH:
            continue
        for here, there in ((link.a, link.b), (link.b, link.a)):
            if here.device_id not in source:
                continue
            far = truth.device(there.device_id)
            row: dict[str, Any] = {
                "source": source[here.device_id], "local_port": here.port, "local_chassis_id": here.device_id,
                "local_sys_name": truth.device(here.device_id).name,
            }  # fmt: skip
            if far.kind is DeviceKind.SWITCH:
                row |= {"chassis_id_subtype": 4, "chassis_id": far.id, "port_id_subtype": 5, "port_id": there.port,
                        "sys_name": far.name, "man_addrs": [address[far.id]]}  # fmt: skip
            else:  # lldpd on a host: NIC MAC as chassis and port id, interface name as description
                mac = host_mac[far.id]
                row |= {"chassis_id_subtype": 4, "chassis_id": mac, "port_id_subtype": 3, "port_id": mac,
                        "port_desc": there.port, "sys_name": far.name}  # fmt: skip
            rows.append(R.lldp(row))
    return rows, systems, interfaces


def observe(truth: GroundTruth, tmp: Path, *, lldp: bool = False, dcim: bool = True) -> Observations:
    nodes, links = ib_rows(render_lines(truth))
    eth: tuple[list[Any], list[Any], list[Any]] = lldp_obs(truth) if lldp else ([], [], [])
    return Observations(
        ib_nodes=nodes,
        ib_links=links,
        dcim=dcim_obs(truth, tmp) if dcim else [],
        nvlink=nvlink_obs(truth),
        lldp=eth[0],
        eth_systems=eth[1],
        eth_interfaces=eth[2],
    )


# --- comparison against the truth -------------------------------------------------------------------


def assert_bijection(derived: dict[str, str | None], true: dict[str, str | None], what: str) -> None:
    """Derived domain ids equal the true ones up to renaming: one derived id per true id and back."""
    assert set(derived) == set(true), f"{what}: hosts differ"
    forward: dict[str, str] = {}
    backward: dict[str, str] = {}
    for host in sorted(true):
        d, t = derived[host], true[host]
        assert d is not None, f"{what}: {host} has none (truth {t})"
        assert forward.setdefault(d, t) == t, f"{what}: {d} maps to {forward[d]} and {t} ({host})"  # type: ignore[arg-type]
        assert backward.setdefault(t, d) == d, f"{what}: {t} maps to {backward[t]} and {d} ({host})"


def assert_model_matches_truth(model: TopologyModel, truth: GroundTruth, *, eth: bool = False) -> None:
    fabrics = {LinkKind.IB} | ({LinkKind.ETH} if eth else set())
    true_tiers = {sid: t for sid, t in truth.tiers.items() if truth.device(sid).attributes["fabric"] in fabrics}
    assert model.tiers() == true_tiers
    compute = {h.name: h for h in model.compute_hosts()}
    assert set(compute) == set(truth.spec.host_names)
    assert_roles_match_truth(model, truth)
    for level in ("block", "spine_group", "pod", "nvlink_domain", "nvlink_sub_domain"):
        derived = {n: getattr(h, level) for n, h in compute.items()}
        true = {n: getattr(d, level) for n, d in truth.host_domains.items()}
        assert_bijection(derived, true, level)
    assert all(h.valid for h in compute.values())
    assert all(d.valid for d in model.domains)


SERVICE_ROLES = frozenset({"ufm_server", "storage", "login", "management"})


def assert_roles_match_truth(model: TopologyModel, truth: GroundTruth) -> None:
    """Every host of the truth, compute or service, has its true role, and no other host of the
    model has a service role (DCIM-only spares are ``not_on_fabric``, SHARP nodes their class)."""
    true_roles = {h.id: str(h.attributes["role"]) for h in [*truth.hosts(), *truth.service_hosts()]}
    derived = {h.name: h.role for h in model.hosts}
    assert {n: derived.get(n) for n in true_roles} == true_roles
    assert [n for n, r in derived.items() if r in SERVICE_ROLES and n not in true_roles] == []
    for h in model.hosts:
        if h.name in true_roles and h.role != "compute":
            assert (h.block, h.spine_group, h.pod) == (None, None, None)
            assert {c.guid for c in h.hcas} == {c.id for c in truth.hcas(h.name)}


def _hca_host(truth: GroundTruth, device_id: str) -> str | None:
    dev = truth.device(device_id)
    return dev.parent_id if dev.kind is DeviceKind.HCA else None


def findings_of(defect: InjectedDefect, findings: Iterable[Finding], truth: GroundTruth) -> list[Finding]:
    """The findings that report this defect (the test wants exactly one)."""
    fs = list(findings)
    k = defect.kind
    if k is DefectKind.MISCABLED_PORT:
        return [f for f in fs if f.kind == "miscabled_port" and set(f.ports) == set(defect.ports)]
    if k is DefectKind.MISSING_LINK:
        link = defect.removed_links[0]
        host = _hca_host(truth, link.a.device_id) or _hca_host(truth, link.b.device_id)
        if host is not None:
            return [f for f in fs if f.kind == "host_missing_from_fabric" and f.devices == (host,)]
        leaf = next(e.device_id for e in (link.a, link.b) if truth.tiers.get(e.device_id) is Tier.LEAF)
        return [f for f in fs if f.kind == "degraded_leaf" and f.devices[0] == leaf]
    if k is DefectKind.DEGRADED_UPLINKS:
        return [f for f in fs if f.kind == "degraded_leaf" and f.devices[0] == defect.devices[0]]
    if k is DefectKind.UNNAMED_HCA:
        return [
            f for f in fs
            if f.kind == "unnamed_hca" and f.devices == defect.devices and f.evidence["host"] == defect.hosts[0]
        ]  # fmt: skip
    if k is DefectKind.DUPLICATE_SYSNAME:
        return [f for f in fs if f.kind == "duplicate_name" and set(f.devices) == set(defect.devices)]
    if k is DefectKind.DCIM_MISSING_HOST:
        return [f for f in fs if f.kind == "host_not_in_dcim" and f.devices == defect.hosts]
    if k is DefectKind.DCIM_EXTRA_HOST:
        return [f for f in fs if f.kind == "dcim_host_not_in_fabric" and f.devices == defect.hosts]
    raise AssertionError(f"no rule for {k}")


def assert_findings_match_defects(model: TopologyModel, truth: GroundTruth) -> None:
    """Every defect appears as exactly one finding, and there is no finding without a defect.

    Two defects that leave one condition (two uplinks of one leaf gone) may share that finding.
    """
    explained: set[int] = set()
    for defect in truth.defects:
        matches = findings_of(defect, model.findings, truth)
        assert len(matches) == 1, f"{defect.kind} {defect.description}: {[m.message for m in matches]}"
        explained.add(id(matches[0]))
    extra = [f"{f.kind}: {f.message}" for f in model.findings if id(f) not in explained]
    assert extra == []


# --- the helpers hold what they promise ----------------------------------------------------------------


def test_lldp_rows_cover_every_ethernet_cable_from_each_switch_end() -> None:
    truth = generate(spec_of("h100-1su"))
    rows, systems, interfaces = lldp_obs(truth)
    eth = [lk for lk in truth.links if lk.kind is LinkKind.ETH]
    switch_ends = sum(1 for lk in eth for e in (lk.a, lk.b) if truth.device(e.device_id).kind is DeviceKind.SWITCH)
    assert len(rows) == switch_ends == 32 + 2 * 4 * 2
    assert len(systems) == 6
    assert len(interfaces) == 4 * 48 + 2 * 32


def test_bijection_rejects_a_merged_domain() -> None:
    assert_bijection({"a": "x", "b": "y"}, {"a": "1", "b": "2"}, "block")
    try:
        assert_bijection({"a": "x", "b": "x"}, {"a": "1", "b": "2"}, "block")
    except AssertionError as exc:
        assert "maps to 1 and 2" in str(exc)
    else:
        raise AssertionError("a merged domain passed")


def test_every_spec_has_its_defect_knobs_placed() -> None:
    kinds = sorted(d.kind for d in truth_with("h100-1su", **DEFECTS).defects)
    counts = {k: len(list(g)) for k, g in itertools.groupby(kinds)}
    assert counts == {
        DefectKind.DCIM_EXTRA_HOST: 2, DefectKind.DCIM_MISSING_HOST: 1, DefectKind.DEGRADED_UPLINKS: 1,
        DefectKind.MISCABLED_PORT: 2, DefectKind.MISSING_LINK: 3, DefectKind.UNNAMED_HCA: 2,
    }  # fmt: skip
