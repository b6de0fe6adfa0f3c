"""Warehouse rows -> the observation records ``core.topology`` reads.

One function per raw table, keyed by column name, so the mapping is the only place that knows
the tables' columns; tests feed the same functions with rows built by the other areas' own row
writers (``assets.infiniband.node_rows`` ...), which keeps the test input identical to what lands.
The LLDP adapter reads the columns of ``raw.lldp_neighbor_observations`` as migration 0002
defines them; anything else that collects LLDP (SSH, lldpctl) lands in the same table and plugs
in here unchanged.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from core.topology.inputs import (
    DcimHcaObs,
    DcimNodeObs,
    EthInterfaceObs,
    EthSystemObs,
    IbLinkObs,
    IbNodeObs,
    LldpObs,
    NvlinkObs,
)

Row = Mapping[str, Any]


def rows_as_dicts(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(columns, r, strict=True)) for r in rows]


def ib_node(r: Row) -> IbNodeObs:
    return IbNodeObs(
        source=r["source"],
        guid=r["guid"],
        node_type=r["node_type"],
        description=r["description"],
        node_class=r["node_class"],
        class_reason=r.get("class_reason") or "",
        system_guid=r.get("system_guid"),
        hostname=r.get("hostname"),
        hca=r.get("hca"),
        switch_name=r.get("switch_name"),
        switch_model=r.get("switch_model"),
    )


def ib_link(r: Row) -> IbLinkObs:
    return IbLinkObs(
        source=r["source"],
        a_guid=r["a_guid"],
        a_port=int(r["a_port"]),
        b_guid=r["b_guid"],
        b_port=int(r["b_port"]),
        width=r.get("width"),
        speed=r.get("speed"),
        speed_gbps=r.get("speed_gbps"),
        both_sides=bool(r["both_sides"]),
        internal=bool(r.get("internal", False)),
    )


def dcim_node(r: Row) -> DcimNodeObs:
    hcas = tuple(
        DcimHcaObs(name=h.get("name"), rail=h.get("rail"), guid=h.get("guid"))
        for h in (r.get("hcas") or ())
        if isinstance(h, Mapping)
    )
    return DcimNodeObs(
        source=r["source"], node=r["node"], rack=r.get("rack"), role=r.get("role"), su=r.get("su"),
        hca_count=r.get("hca_count"), hcas=hcas,
    )  # fmt: skip


def nvlink(r: Row) -> NvlinkObs:
    return NvlinkObs(
        source=r["source"], node=r["node"], method=r["method"], domain=r["domain"],
        cluster_uuid=r.get("cluster_uuid"), clique_id=r.get("clique_id"),
    )  # fmt: skip


def lldp(r: Row) -> LldpObs:
    return LldpObs(
        source=r["source"],
        local_port=r.get("local_port"),
        chassis_id_subtype=None if r["chassis_id_subtype"] is None else int(r["chassis_id_subtype"]),
        chassis_id=r["chassis_id"],
        port_id_subtype=None if r["port_id_subtype"] is None else int(r["port_id_subtype"]),
        port_id=r["port_id"],
        local_chassis_id=r.get("local_chassis_id"),
        local_sys_name=r.get("local_sys_name"),
        port_desc=r.get("port_desc"),
        sys_name=r.get("sys_name"),
        remote_port=r.get("remote_port"),
        man_addrs=tuple(r.get("man_addrs") or ()),
    )


def eth_system(r: Row) -> EthSystemObs:
    return EthSystemObs(
        source=r["source"], address=str(r["address"]), sys_name=r.get("sys_name"), chassis_id=r.get("chassis_id"),
        chassis_id_subtype=r.get("chassis_id_subtype"), platform=r.get("platform"),
    )  # fmt: skip


def eth_interface(r: Row) -> EthInterfaceObs:
    mbps = r.get("if_high_speed_mbps")
    return EthInterfaceObs(
        source=r["source"], if_index=int(r["if_index"]), name=r.get("name"), if_name=r.get("if_name"),
        if_descr=r.get("if_descr"), if_alias=r.get("if_alias"), mac=r.get("mac"),
        speed_mbps=int(mbps) if mbps is not None else None,
    )  # fmt: skip
