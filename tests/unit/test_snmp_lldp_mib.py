"""Interpretation of walked LLDP-MIB tables: bad input is quarantined with a reason, never crashes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.snmp.lldp_mib import DeviceWalk, interpret
from connectors.snmp.oids import LLDP_REM_TABLE, SYS_DESCR, SYS_NAME, SYS_OBJECT_ID, dotted
from core.quality import CollectionStatus

PEER = bytes.fromhex("3c6104000001")


def _walk(**tables: dict) -> DeviceWalk:  # type: ignore[type-arg]
    walk = DeviceWalk(device="sw1", configured_platform="cumulus")
    walk.system = {SYS_DESCR: ("octets", b"Cumulus Linux 5.9"), SYS_OBJECT_ID: ("oid", "1.3.6.1.4.1.40310"),
                   SYS_NAME: ("octets", b"sw1")}
    walk.tables = {k: dict(v) for k, v in tables.items()}
    return walk


def _row(port: int, rem: int, mark: int = 99, **over: tuple[str, object]) -> dict:  # type: ignore[type-arg]
    cols = {4: ("int", 4), 5: ("octets", PEER), 6: ("int", 5), 7: ("octets", b"et-0/0/1"), 9: ("octets", b"peer")}
    for k, v in over.items():
        cols[int(k[1:])] = v
    return {(c, mark, port, rem): v for c, v in cols.items() if v is not None}


def test_rows_are_keyed_by_port_and_index_not_time_mark() -> None:
    rem = {**_row(3, 17, mark=5000), **_row(3, 18, mark=7), **_row(4, 1, mark=0)}
    c = interpret(_walk(lldpRemTable=rem, ifName={(3,): ("octets", b"swp1"), (4,): ("octets", b"swp2")}))
    assert c.status is CollectionStatus.OK
    assert [(n.local_port, n.rem_index, n.time_mark) for n in c.neighbors] == [
        ("swp1", 17, 5000), ("swp1", 18, 7), ("swp2", 1, 0)
    ]
    assert c.neighbors[0].chassis_id == "3c:61:04:00:00:01"
    assert c.neighbors[0].chassis_id_raw == PEER


def test_truncated_and_wrong_typed_varbinds() -> None:
    rem = {
        **_row(1, 1),
        **_row(2, 1, c7=None),  # truncated: no port id -> lands with port_id None
        **_row(3, 1, c4=("octets", b"4")),  # subtype as a string
        **_row(4, 1, c5=("octets", PEER[:5])),  # 5-byte MAC
        **_row(5, 1, c9=("int", 7)),  # sysName as an integer: row kept, field quarantined
        (4, 1, 6): ("int", 4),  # index with two numbers instead of three
    }
    c = interpret(_walk(lldpRemTable=rem))
    assert c.status is CollectionStatus.PARTIAL
    assert [(n.local_port_num, n.sys_name) for n in c.neighbors] == [(1, "peer"), (2, "peer"), (5, None)]
    assert c.neighbors[1].port_id is None and c.neighbors[1].port_id_subtype is not None
    assert sorted(q.reason for q in c.quarantined) == [
        "lldpRemChassisId: a MAC address is 6 bytes, got 5",
        "lldpRemChassisIdSubtype: expected INTEGER, got OCTET STRING",
        "lldpRemSysName: expected OCTET STRING, got INTEGER",
        "lldpRemTable: index must be 3 numbers, got 2",
    ]
    wrong = next(q for q in c.quarantined if q.reason.startswith("lldpRemSysName"))
    assert wrong.location == "1.0.8802.1.1.2.1.4.1.1.9.99.5.1" and wrong.payload == "INTEGER: 7"


def test_non_utf8_sysnames_are_kept_with_their_bytes() -> None:
    walk = _walk(lldpRemTable=_row(1, 1, c9=("octets", b"sp\xe9ine\x00")))
    walk.system[SYS_NAME] = ("octets", b"le\xffaf")
    c = interpret(walk)
    assert c.status is CollectionStatus.OK
    (n,) = c.neighbors
    assert (n.sys_name, n.sys_name_raw) == ("sp\\xe9ine", b"sp\xe9ine\x00")
    assert c.system is not None and (c.system.sys_name, c.system.sys_name_raw) == ("le\\xffaf", b"le\xffaf")


def test_management_addresses_from_the_index() -> None:
    man = {
        (3, 99, 1, 1, 1, 4, 10, 0, 0, 7): ("int", 2),
        (3, 99, 1, 1, 2, 16, *([0] * 15), 1): ("int", 2),
        (3, 99, 1, 1, 1, 9, 10, 0): ("int", 2),  # length says 9, index has 2: quarantined
    }
    c = interpret(_walk(lldpRemTable=_row(1, 1), lldpRemManAddrTable=man))
    assert c.neighbors[0].man_addrs == ("10.0.0.7", "::1")
    assert [q.reason for q in c.quarantined] == ["lldpRemManAddrTable: address length 9 does not match the index"]


def test_lldp_v2_mib_when_v1_is_empty() -> None:
    v2 = {
        (5, 10, 7, 1, 3): ("int", 4), (6, 10, 7, 1, 3): ("octets", PEER), (7, 10, 7, 1, 3): ("int", 5),
        (8, 10, 7, 1, 3): ("octets", b"Eth1/2"), (10, 10, 7, 1, 3): ("octets", b"nx1"),
    }
    local = {(1, 0): ("int", 4), (2, 0): ("octets", bytes.fromhex("1c34da000001"))}
    c = interpret(_walk(lldpV2RemTable=v2, lldpV2LocalSystemData=local, ifName={(7,): ("octets", b"swp5")}))
    assert c.status is CollectionStatus.OK
    assert c.system is not None and (c.system.mib, c.system.chassis_id) == ("lldp-v2", "1c:34:da:00:00:01")
    (n,) = c.neighbors
    assert (n.mib, n.local_port_num, n.local_if_index, n.local_port, n.rem_index) == ("lldp-v2", 7, 7, "swp5", 3)
    assert n.remote_port == "Ethernet1/2"


def test_statuses_without_neighbours() -> None:
    assert interpret(_walk()).status is CollectionStatus.NO_DATA
    empty = interpret(_walk(lldpLocalSystemData={(1, 0): ("int", 4), (2, 0): ("octets", PEER)}))
    assert (empty.status, empty.detail) == (CollectionStatus.NO_DATA, "LLDP neighbour table is empty")
    bad = interpret(_walk(lldpRemTable=_row(1, 1, c5=("octets", b""))))
    assert (bad.status, bad.detail) == (CollectionStatus.INVALID, "every LLDP row was quarantined")
    failed = DeviceWalk(device="x", failure=CollectionStatus.AUTH_FAILURE, failure_detail="wrong digest")
    assert (interpret(failed).status, interpret(failed).detail) == (CollectionStatus.AUTH_FAILURE, "wrong digest")


def test_huge_table_interprets_every_row() -> None:
    rem: dict = {}  # type: ignore[type-arg]
    for i in range(20_000):
        rem.update(_row(i % 48 + 1, i + 1, mark=i, c5=("octets", (0x020000000000 + i).to_bytes(6, "big"))))
    c = interpret(_walk(lldpRemTable=rem))
    assert c.status is CollectionStatus.OK
    assert len(c.neighbors) == 20_000
    assert len({n.chassis_id for n in c.neighbors}) == 20_000


_values = st.one_of(
    st.tuples(st.sampled_from(["int", "gauge", "timeticks", "counter64"]), st.integers(-(2**63), 2**64)),
    st.tuples(st.just("octets"), st.binary(max_size=40)),
    st.tuples(st.just("oid"), st.text(max_size=10)),
    st.tuples(st.sampled_from(["null", "nosuch", "end", "unknown"]), st.none()),
)
_suffix = st.lists(st.integers(0, 2**32), min_size=0, max_size=8).map(tuple)
_table = st.dictionaries(_suffix, _values, max_size=30)
# lldpRemTable rows of the right shape (column, time mark, local port, remote index) with values
# that are often well typed, so fuzzing reaches whole rows, half rows and rows with one bad field,
# not only malformed indexes
_rem_key = st.tuples(st.integers(3, 11), st.integers(0, 2), st.integers(1, 3), st.integers(1, 2))
_plausible = st.sampled_from([
    ("int", 4), ("int", 3), ("int", 5), ("int", 7),
    ("octets", bytes.fromhex("3c6104000001")), ("octets", b"swp1"), ("octets", b"peer"), ("octets", b""),
])  # fmt: skip
_loose = st.dictionaries(st.one_of(_rem_key, _rem_key, _suffix), st.one_of(_plausible, _plausible, _values),
                         max_size=20)  # fmt: skip


def _perturbed_row(
    port: int, rem: int, drop: set[int], swap: dict[int, tuple[str, object]]
) -> dict[tuple[int, ...], tuple[str, object]]:
    """A whole row (as ``_row``) with some columns dropped and some values swapped for others."""
    row = _row(port, rem, mark=0)
    for key in list(row):
        if key[0] in drop:
            del row[key]
    row.update({(col, 0, port, rem): value for col, value in swap.items()})
    return row


_rows = st.lists(
    st.builds(_perturbed_row, st.integers(1, 3), st.integers(1, 2),
              st.sets(st.integers(4, 10), max_size=2) | st.just(set()),
              st.dictionaries(st.integers(4, 10), _values | _plausible, max_size=1) | st.just({})),
    max_size=6,
)  # fmt: skip
_rem_table = st.builds(lambda rows, loose: {k: v for row in rows for k, v in row.items()} | loose, _rows, _loose)


@settings(max_examples=300, deadline=None)
@given(
    rem=_rem_table, local=_table, man=_table, names=_table, speeds=_table, bridge=_table,
    sysname=_values, platform=st.sampled_from([None, "arista_eos", "cisco_nxos", "sonic", "juniper_junos"]),
)
def test_garbage_never_crashes(rem, local, man, names, speeds, bridge, sysname, platform) -> None:  # type: ignore[no-untyped-def]
    walk = DeviceWalk(device="fuzz", configured_platform=platform)
    walk.system = {SYS_NAME: sysname, SYS_DESCR: ("octets", b"x"), SYS_OBJECT_ID: ("int", 5)}
    walk.tables = {"lldpRemTable": rem, "lldpLocalSystemData": local, "lldpRemManAddrTable": man,
                   "ifName": names, "ifHighSpeed": speeds, "dot1dBasePortIfIndex": bridge}
    c = interpret(walk)
    # A walk that completed is judged by what it held: landed rows, quarantined values, or
    # nothing. The status and its detail follow from those two lists and nothing else.
    if c.neighbors and c.quarantined:
        assert (c.status, c.detail) == (CollectionStatus.PARTIAL, f"{len(c.quarantined)} value(s) quarantined")
    elif c.neighbors:
        assert (c.status, c.detail) == (CollectionStatus.OK, None)
    elif c.status is CollectionStatus.INVALID:
        assert c.quarantined and c.detail == "every LLDP row was quarantined"
    else:
        assert c.status is CollectionStatus.NO_DATA
        assert c.detail in {"LLDP neighbour table is empty", "no LLDP: LLDP-MIB and LLDP-V2-MIB are empty"}
        assert (c.detail == "LLDP neighbour table is empty") == bool(rem or local)
    # bad input is never silently dropped: every lldpRemTable varbind of an LLDP column lands in
    # a neighbour, or is quarantined on its own (bad index) or with its row (a bad or missing field)
    if c.system is not None and c.system.mib == "lldp":
        landed = {(n.local_port_num, n.rem_index) for n in c.neighbors}
        locations = {str(q.location) for q in c.quarantined}
        for key in rem:
            if key and key[0] in range(4, 11):
                row = f"lldpRemTable row (local port {key[2]}, remote index {key[3]})" if len(key) == 4 else None
                assert (key[2:] in landed if len(key) == 4 else False) or row in locations or (
                    dotted((*LLDP_REM_TABLE, *key)) in locations), key
    for n in c.neighbors:
        assert n.chassis_id_raw is None or (len(n.chassis_id_raw) > 0 and n.chassis_id)
        assert n.mib == "lldp" and n.local_port_num is not None
    for q in c.quarantined:
        assert q.reason and q.device == "fuzz" and q.source == "snmp"
