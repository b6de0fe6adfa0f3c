"""Hostile UFM JSON through the connector's public functions: ``decode_body`` (bytes -> JSON),
``rows_of`` (JSON -> rows) and ``to_fabric`` (rows -> records).

What must hold for any input: only the connector's own errors (UfmBadResponse, or UfmNotFound for
``{}``), never another exception and never a hang; every row either lands or is quarantined at its
own location with a reason and its JSON; what lands fits the warehouse's columns and keys
(``sql/migrations/versions/0003_infiniband.py``), so landing cannot fail on it.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.ibnetdiscover.parser import IbFabric
from connectors.ufm import UfmBadResponse, UfmFabric, UfmNotFound, decode_body, rows_of, to_fabric
from connectors.ufm.parser import INT_MAX, LID_MAX, LINK_FIELDS, PORT_FIELDS, SYSTEM_FIELDS
from core.infiniband import LANE_GBPS, WIDTH_LANES

GUID = re.compile(r"0x[0-9a-f]{16}")
LOCATION = re.compile(r"(systems|ports|links)\[(\d+)\]")
KEYS = sorted({k for fields in (SYSTEM_FIELDS, PORT_FIELDS, LINK_FIELDS) for keys in fields.values() for k in keys})

# A few GUIDs reused everywhere, so rows collide (duplicates, links between known systems).
GUIDS = ["b83fd20300000001", "0xB83FD20300000002", "b83fd20300000011", "b83fd20300000012", "zz", "0x" + "f" * 17]

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
plausible = st.one_of(
    st.sampled_from(GUIDS),
    st.sampled_from(["switch", "host", "HCA", "gateway", "toaster", ""]),
    st.sampled_from(["NDR", "hdr", "IB_XDR", "XYZ", "4x", "IB_4x", "3x", "12"]),
    st.sampled_from(["1", "65", "-1", "0x10", "1/1/1", " 7 ", "9" * 40, "1e3"]),
    st.integers(min_value=-3, max_value=70_000),
    st.integers(min_value=2**31 - 2, max_value=2**63),
    st.builds(lambda g, p: f"{g}_{p}", st.sampled_from(GUIDS), st.sampled_from(["1", "2", "x", "-1", ""])),
    st.text(alphabet=st.characters(categories=["L", "N", "Cc", "Cs", "Zs"]), max_size=20),  # NUL, surrogates
    st.just("dgx001 mlx5_0\x00"),
    st.just("MF0;leaf01:MQM9700/U1"),
)
field_values = st.one_of(plausible, json_values)


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` three times in four, else ``bad``. (``st.one_of`` would weigh each branch of a nested
    ``one_of`` alike, and ``bad`` has many.)"""
    return st.integers(min_value=0, max_value=3).flatmap(lambda n: bad if n == 3 else good)


def usually(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a value UFM would send, sometimes anything at all."""
    return mostly(good, field_values)


good_guid = st.sampled_from(GUIDS[:4])
good_port = st.one_of(st.integers(min_value=0, max_value=4), st.sampled_from(["1", "2", "0x3"]))
# Rows shaped like UFM's (the right keys, mostly good values), so the fuzz lands rows as well as
# rejecting them; plus rows of any keys and any JSON value at all.
system_rows = st.fixed_dictionaries(
    {"guid": usually(good_guid), "type": usually(st.sampled_from(["switch", "host"]))},
    optional={
        "description": usually(st.sampled_from(["MF0;l1:MQM9700/U1", "dgx001 mlx5_0", "localhost mlx5_1"])),
        "ports_count": usually(st.integers(min_value=0, max_value=65)),
        "lid": usually(st.integers(min_value=0, max_value=LID_MAX)),
    },
)
port_rows = st.fixed_dictionaries(
    {"systemID": usually(good_guid), "number": usually(good_port)},
    optional={
        "active_speed": usually(st.sampled_from(["NDR", "HDR"])),
        "active_width": usually(st.sampled_from(["4x", "IB_4x"])),
        "peer": usually(st.builds(lambda g, n: f"{g}_{n}", good_guid, st.integers(min_value=0, max_value=4))),
        "guid": usually(good_guid),
        "lid": usually(st.integers(min_value=0, max_value=LID_MAX)),
    },
)
link_rows = st.fixed_dictionaries(
    {
        "source_guid": usually(good_guid),
        "source_port": usually(good_port),
        "destination_guid": usually(good_guid),
        "destination_port": usually(good_port),
    },
    optional={"width": usually(st.sampled_from(["IB_4x", "2x"])), "speed": usually(st.sampled_from(["NDR", "XDR"]))},
)
any_rows = st.one_of(st.dictionaries(st.sampled_from(KEYS), field_values, max_size=12), json_values)
system_lists = st.lists(mostly(system_rows, any_rows), max_size=12)
port_lists = st.lists(mostly(port_rows, any_rows), max_size=25)
link_lists = st.lists(mostly(link_rows, any_rows), max_size=25)
row_lists = st.lists(st.one_of(system_rows, port_rows, link_rows, any_rows), max_size=25)


def check_landable(fabric: IbFabric) -> None:
    """What lands satisfies raw.ib_nodes/ib_ports/ib_links: types, ranges, keys, text Postgres takes."""
    guids = [n.guid for n in fabric.nodes]
    assert len(guids) == len(set(guids))
    for n in fabric.nodes:
        assert GUID.fullmatch(n.guid) and n.node_type in ("switch", "ca", "router")
        assert type(n.port_count) is int and 0 <= n.port_count <= INT_MAX
        assert n.lid is None or (type(n.lid) is int and 0 <= n.lid <= LID_MAX)
        assert "\x00" not in n.description
        n.description.encode("utf-8")  # no unpaired surrogates
    keys = [(p.node_guid, p.port) for p in fabric.ports]
    assert len(keys) == len(set(keys))
    for p in fabric.ports:
        assert GUID.fullmatch(p.node_guid) and type(p.port) is int and 0 <= p.port <= INT_MAX
        assert p.peer_guid == "" or GUID.fullmatch(p.peer_guid)
        assert type(p.peer_port) is int and 0 <= p.peer_port <= INT_MAX
        assert p.port_guid is None or GUID.fullmatch(p.port_guid)
        assert p.lid is None or (type(p.lid) is int and 0 <= p.lid <= LID_MAX)
        assert p.width is None or p.width in WIDTH_LANES
        assert p.speed is None or p.speed in LANE_GBPS
    ends = [(lk.a_guid, lk.a_port, lk.b_guid, lk.b_port) for lk in fabric.links]
    assert len(ends) == len(set(ends))
    for lk in fabric.links:
        assert (lk.a_guid, lk.a_port) < (lk.b_guid, lk.b_port)
        assert lk.a_guid in guids and lk.b_guid in guids
        assert 0 <= lk.a_port <= INT_MAX and 0 <= lk.b_port <= INT_MAX
        assert lk.width is None or lk.width in WIDTH_LANES
        assert lk.speed is None or lk.speed in LANE_GBPS


def check_accounted(fabric: IbFabric, ufm: UfmFabric) -> None:
    """Every row lands or is quarantined (not both, unless it landed with fields left out, and then
    the entry says so); each entry is at its row's location, with a reason and the row's JSON."""
    entries: dict[tuple[str, int], list[str]] = defaultdict(list)
    given_rows = {"systems": ufm.systems, "ports": ufm.ports, "links": ufm.links}
    for q in fabric.quarantined:
        m = LOCATION.fullmatch(q.location or "")
        assert m is not None, q.location
        table, i = m[1], int(m[2])
        assert i < len(given_rows[table])
        assert q.reason.strip() and len(q.reason) <= 400
        assert q.payload == json.dumps(given_rows[table][i], sort_keys=True, default=str)
        entries[(table, i)].append(q.reason)
    assert all(len(reasons) == 1 for reasons in entries.values()), entries
    for table, landed, what in (
        ("systems", {n.line for n in fabric.nodes}, "system"),
        ("ports", {p.line for p in fabric.ports}, "port"),
    ):
        for i in range(len(given_rows[table])):
            (reason,) = entries.get((table, i), [None])
            if i in landed:
                assert reason is None or reason.startswith(f"{what} landed; "), reason
            else:
                assert reason is not None and not reason.startswith(f"{what} landed"), (table, i)
    held_links = sum(1 for (table, _) in entries if table == "links")
    assert len(fabric.links) + held_links == len(ufm.links)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(system_lists, port_lists, link_lists)
def test_any_rows_land_or_are_quarantined_with_a_reason(systems: Any, ports: Any, links: Any) -> None:
    ufm = UfmFabric(systems=systems, ports=ports, links=links)
    fabric = to_fabric(ufm, "fuzz")
    check_landable(fabric)
    check_accounted(fabric, ufm)


def _link_rows(n: int) -> list[dict[str, Any]]:
    return [
        {"source_guid": "b83fd20300000001", "source_port": str(p), "destination_guid": "b83fd20300000011",
         "destination_port": p % 3, "width": "IB_4x"}
        for p in range(n)
    ]  # fmt: skip


def test_rows_that_should_land_do() -> None:
    """The fuzz above could pass by quarantining everything; these rows must land, whole."""
    port_row = {"systemID": "b83fd20300000001", "number": "3", "active_speed": "IB_NDR", "active_width": "IB_4x",
                "peer": "b83fd20300000011_1", "guid": "b83fd20300000001", "lid": 7}  # fmt: skip
    ufm = UfmFabric(
        systems=[
            {"guid": "b83fd20300000001", "type": "switch", "description": "MF0;l1:MQM9700/U1", "ports_count": 65},
            {"guid": "0xB83FD20300000011", "type": "host", "description": "dgx001 mlx5_0", "lid": "0x1a"},
        ],
        ports=[port_row],
        links=_link_rows(4),
    )
    fabric = to_fabric(ufm, "fuzz")
    assert fabric.quarantined == []
    assert [(n.guid, n.port_count, n.lid) for n in fabric.nodes] == [
        ("0xb83fd20300000001", 65, None),
        ("0xb83fd20300000011", 0, 0x1A),
    ]
    (port,) = fabric.ports
    assert (port.port, port.port_guid, port.peer_guid, port.peer_port, port.lid, port.speed_gbps) == (
        3, "0xb83fd20300000001", "0xb83fd20300000011", 1, 7, 400.0,
    )  # fmt: skip
    assert [(lk.a_port, lk.b_port, lk.speed_gbps) for lk in fabric.links] == [
        (0, 0, None), (1, 1, None), (2, 2, None), (3, 0, 400.0),  # port 3's rate comes from its port row
    ]  # fmt: skip


page_bodies = st.one_of(
    row_lists,
    st.fixed_dictionaries(
        {"data": row_lists}, optional={"pages_number": json_scalars, "total_rows": json_scalars, "rpp": json_scalars}
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=300), page_bodies.map(lambda b: json.dumps(b).encode())))
def test_any_body_is_rows_or_a_clear_error(content: bytes) -> None:
    try:
        body = decode_body(content, "GET /ufmRest/resources/links")
        found = rows_of(body, "GET /ufmRest/resources/links")
    except (UfmBadResponse, UfmNotFound) as exc:
        assert str(exc).startswith("GET /ufmRest/resources/links: ")
        return
    assert isinstance(found, list)
    ufm = UfmFabric(systems=found, ports=found, links=found)
    fabric = to_fabric(ufm, "fuzz")
    check_landable(fabric)
    check_accounted(fabric, ufm)


@settings(max_examples=200, deadline=None)
@given(page_bodies, st.data())
def test_a_truncated_body_is_invalid_json_never_rows(body: Any, data: st.DataObject) -> None:
    """A proxy that cuts the body: any strict prefix of a list or page object is not JSON."""
    text = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    cut = data.draw(st.integers(min_value=0, max_value=len(text) - 1))
    with pytest.raises(UfmBadResponse, match=r"^GET x: body is not valid JSON \(.*\); \d+ bytes$"):
        decode_body(text[:cut], "GET x")


def test_wrong_shapes_are_named() -> None:
    with pytest.raises(UfmNotFound, match=r"^GET x: UFM answered 200 \{\} \(resource not found\)$"):
        decode_body(b"{}", "GET x")
    with pytest.raises(UfmBadResponse, match=r"^GET x: expected a JSON list or object, got int$"):
        rows_of(decode_body(b"42", "GET x"), "GET x")
    with pytest.raises(UfmBadResponse, match=r"^GET x: an object without a row list \(keys: 'data', 'total'\)$"):
        rows_of({"data": {"not": "a list"}, "total": 3}, "GET x")
    with pytest.raises(UfmBadResponse, match=r"^GET x: body is not valid JSON \(.*\); 3 bytes$"):
        decode_body(b"\xff\xfe[", "GET x")
    # Python refuses to read integers of more than 4300 digits (CVE-2020-10735): a plain ValueError.
    with pytest.raises(UfmBadResponse, match=r"^GET x: body is not valid JSON \(Exceeds the limit .*\); 5002 bytes$"):
        decode_body(b"[" + b"9" * 5000 + b"]", "GET x")


@pytest.mark.parametrize("opener", [b"[", b'{"data":'])
def test_nesting_too_deep_to_read_is_invalid_not_a_crash(opener: bytes) -> None:
    closer = b"]" if opener == b"[" else b"}"
    content = opener * 200_000 + b"1" + closer * 200_000
    with pytest.raises(UfmBadResponse, match=rf"^GET x: body is nested too deeply to read; {len(content)} bytes$"):
        decode_body(content, "GET x")


def test_a_row_nested_too_deep_to_write_back_is_still_quarantined() -> None:
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    fabric = to_fabric(UfmFabric(systems=[{"guid": deep}], ports=[deep], links=[]), "fuzz")
    assert [(q.location, q.reason, q.payload) for q in fabric.quarantined] == [
        ("systems[0]", "system without a usable GUID: guid/system_guid/node_guid is a list, not a string or number",
         "<an object that cannot be written as JSON: RecursionError>"),
        ("ports[0]", "port row is a list, not an object", "<a list that cannot be written as JSON: RecursionError>"),
    ]  # fmt: skip


def test_huge_lists_are_read_whole() -> None:
    """20,000 links and as many garbage rows: all accounted for, in one pass."""
    good = _link_rows(20_000)
    garbage: list[Any] = [["x"] * 3, None, 7, "row", {"source_guid": "zz"}] * 4_000
    ufm = UfmFabric(
        systems=[{"guid": "b83fd20300000001", "type": "switch"}, {"guid": "b83fd20300000011", "type": "host"}],
        ports=garbage,
        links=good + garbage,
    )
    fabric = to_fabric(ufm, "fuzz")
    # Every source port is distinct, so every good link is distinct and lands.
    assert len(fabric.links) == 20_000
    assert len(fabric.quarantined) == 2 * 20_000
    assert fabric.quarantined[0].reason == "port row is a list, not an object"
    assert fabric.quarantined[-1].reason == "link without usable ends: not a 64-bit GUID: 'zz'"
    body = json.dumps({"data": good, "pages_number": 1}).encode()
    assert rows_of(decode_body(body, "GET x"), "GET x") == good
