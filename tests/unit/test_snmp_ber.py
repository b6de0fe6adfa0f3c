"""The SNMPv2c BER codec (``connectors.snmp.ber``): round trips, agreement with pysnmp/pyasn1 as the
reference codec, captured real datagrams, and bad input of every kind ending in BerError (how fast:
``bench/bench_ber.py``)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyasn1.codec.ber import decoder as pyasn1_decoder
from pyasn1.codec.ber import encoder as pyasn1_encoder
from pyasn1.error import PyAsn1Error
from pyasn1.type import univ
from pysnmp.proto import rfc1902, rfc1905
from pysnmp.proto.api import v2c
from snmp_captured_datagrams import CAPTURED

from connectors.snmp import ber
from connectors.snmp.ber import BerError, Value
from connectors.snmp.collector import convert
from connectors.snmp.oids import LLDP_REM_TABLE, SYSTEM_OIDS

OID = tuple[int, ...]

EDGE_VALUES: list[Value] = [
    ("int", 0),
    ("int", 1),
    ("int", -1),
    ("int", 127),
    ("int", 128),
    ("int", -128),
    ("int", -129),
    ("int", 2**31 - 1),
    ("int", -(2**31)),
    ("counter", 0),
    ("counter", 2**31),
    ("counter", 2**32 - 1),
    ("gauge", 2**32 - 1),
    ("timeticks", 4294967295),
    ("counter64", 0),
    ("counter64", 2**63),
    ("counter64", 2**64 - 1),
    ("octets", b""),
    ("octets", b"\x00\xff" * 300),  # long-form length
    ("octets", bytes(range(256))),
    ("ipaddr", b"\x0a\x00\x00\x01"),
    ("ipaddr", b"\xff\xff\xff\xff"),
    ("opaque", b""),
    ("opaque", b"\x9f\x78\x04\x3f\x80\x00\x00"),
    ("oid", "0.0"),
    ("oid", "1.3.6.1.4.1.8072.3.2.10"),
    ("oid", "2.999.3"),
    ("oid", f"1.3.{2**32 - 1}.0.{2**31}"),
    ("null", None),
    ("nosuch", None),
    ("end", None),
]
EDGE_OIDS: list[OID] = [
    (0, 0),
    (0, 39),
    (1, 0),
    (1, 39),
    (2, 0),
    (2, 47),
    (2, 999, 1),
    (2, 2**32 - 81),  # the largest second arc whose first sub-identifier (80 + arc) still fits 32 bits
    (1, 3, 6, 1, 2, 1, 1, 5, 0),
    (1, 0, 8802, 1, 1, 2, 1, 4, 1, 1, 4, 1001, 3, 8),
    (1, 3, 127, 128, 16383, 16384, 2**32 - 1),
    (1, 3, *range(126)),  # 128 sub-identifiers, SNMP's maximum
]


def _roundtrip(varbinds: list[tuple[OID, Value]], **kw: Any) -> ber.Message:
    data = ber.encode_message(b"community", ber.RESPONSE, 42, varbinds, **kw)
    return ber.decode_message(data)


@pytest.mark.parametrize("value", EDGE_VALUES, ids=lambda v: f"{v[0]}")
def test_every_type_round_trips(value: Value) -> None:
    message = _roundtrip([((1, 3, 6, 1, 2, 1, 1, 5, 0), value)])
    assert message.varbinds == [((1, 3, 6, 1, 2, 1, 1, 5, 0), value)]
    assert (message.version, message.community, message.pdu_type, message.request_id) == (1, b"community", 0xA2, 42)


@pytest.mark.parametrize("oid", EDGE_OIDS, ids=lambda o: ".".join(map(str, o[:6])))
def test_oids_round_trip_including_first_arc_and_large_sub_ids(oid: OID) -> None:
    assert ber.decode_oid(ber.encode_oid(oid)) == oid
    assert _roundtrip([(oid, ("oid", ".".join(map(str, oid))))]).varbinds == [(oid, ("oid", ".".join(map(str, oid))))]


def test_first_arc_encoding_is_the_x_ier() -> None:
    assert ber.encode_oid((1, 3, 6, 1)) == b"\x2b\x06\x01"
    assert ber.encode_oid((2, 999, 3)) == b"\x88\x37\x03"  # X.690 8.19.5 example: 2.999.3
    assert ber.encode_oid((0, 0)) == b"\x00"
    assert ber.encode_oid((1, 3, 2**32 - 1)) == b"\x2b\x8f\xff\xff\xff\x7f"
    with pytest.raises(ValueError):
        ber.encode_oid((1, 40))
    with pytest.raises(ValueError):
        ber.encode_oid((1, 3, 2**32))


def test_integers_are_minimal_twos_complement() -> None:
    for value, content in [(0, "00"), (127, "7f"), (128, "0080"), (-128, "80"), (-129, "ff7f"), (255, "00ff")]:
        assert ber.encode_value(("int", value)) == bytes([2, len(content) // 2]) + bytes.fromhex(content)
    assert ber.encode_value(("counter64", 2**64 - 1)) == bytes.fromhex("4609") + b"\x00" + b"\xff" * 8


def test_requests_and_error_fields_round_trip() -> None:
    get = ber.decode_message(ber.get_request(b"c", 7, SYSTEM_OIDS))
    assert (get.pdu_type, get.request_id, [o for o, _ in get.varbinds]) == (0xA0, 7, list(SYSTEM_OIDS))
    assert all(v == ("null", None) for _, v in get.varbinds)
    bulk = ber.decode_message(ber.get_bulk_request(b"c", 2**31 - 1, LLDP_REM_TABLE, 40))
    assert (bulk.pdu_type, bulk.request_id, bulk.error_status, bulk.error_index) == (0xA5, 2**31 - 1, 0, 40)
    failed = _roundtrip([], error_status=18, error_index=3)
    assert (failed.error_status, failed.error_index, failed.varbinds) == (18, 3, [])
    assert ber.ERROR_STATUS_NAMES[failed.error_status] == "inconsistentName"


# ------------------------------------------------------------------------------------------------
# agreement with pysnmp (pyasn1) as the reference codec
# ------------------------------------------------------------------------------------------------

_PYSNMP_TYPES: dict[str, Any] = {
    "int": rfc1902.Integer32,
    "octets": rfc1902.OctetString,
    "ipaddr": rfc1902.IpAddress,
    "counter": rfc1902.Counter32,
    "gauge": rfc1902.Gauge32,
    "timeticks": rfc1902.TimeTicks,
    "opaque": rfc1902.Opaque,
    "counter64": rfc1902.Counter64,
}


def _pysnmp_value(value: Value, instance: bool) -> Any:
    tag, v = value
    if tag in _PYSNMP_TYPES:
        return _PYSNMP_TYPES[tag](v)
    if tag == "oid":
        return rfc1902.ObjectIdentifier(v)
    if tag == "null":
        return univ.Null("")
    if tag == "nosuch":
        return rfc1905.noSuchInstance if instance else rfc1905.noSuchObject
    if tag == "end":
        return rfc1905.endOfMibView
    raise AssertionError(tag)


def _pysnmp_encode(
    community: bytes, request_id: int, varbinds: list[tuple[OID, Value]], status: int = 0, instances: bool = True
) -> bytes:
    """pysnmp's encoding; with ``instances`` every other noSuch is noSuchInstance (both read as "nosuch")."""
    msg = v2c.Message()
    v2c.apiMessage.set_defaults(msg)
    v2c.apiMessage.set_community(msg, community)
    pdu = v2c.ResponsePDU()
    v2c.apiPDU.set_defaults(pdu)
    v2c.apiPDU.set_request_id(pdu, request_id)
    v2c.apiPDU.set_error_status(pdu, status)
    v2c.apiPDU.set_varbinds(pdu, [(o, _pysnmp_value(v, instances and i % 2 == 1)) for i, (o, v) in enumerate(varbinds)])
    v2c.apiMessage.set_pdu(msg, pdu)
    return bytes(pyasn1_encoder.encode(msg))


def _pysnmp_decode(data: bytes) -> tuple[bytes, int, int, list[tuple[OID, Value]]]:
    msg, _rest = pyasn1_decoder.decode(data, asn1Spec=v2c.Message())
    pdu = v2c.apiMessage.get_pdu(msg)
    varbinds = [(tuple(n), convert(v)) for n, v in v2c.apiPDU.get_varbinds(pdu)]
    return (
        bytes(v2c.apiMessage.get_community(msg)),
        int(v2c.apiPDU.get_request_id(pdu)),
        int(v2c.apiPDU.get_error_status(pdu)),
        varbinds,
    )


_sub_id = st.integers(0, 2**32 - 1) | st.integers(0, 300)
oids = st.builds(
    lambda first, second, rest: (first, second % 40 if first < 2 else second % (2**32 - 80), *rest),
    st.integers(0, 2),
    _sub_id,
    st.lists(_sub_id, max_size=20),
)
values = st.one_of(
    st.tuples(st.just("int"), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.sampled_from(["counter", "gauge", "timeticks"]), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("counter64"), st.integers(0, 2**64 - 1)),
    st.tuples(st.sampled_from(["octets", "opaque"]), st.binary(max_size=300)),
    st.tuples(st.just("ipaddr"), st.binary(min_size=4, max_size=4)),
    st.tuples(st.just("oid"), oids.map(lambda o: ".".join(map(str, o)))),
    st.tuples(st.sampled_from(["null", "nosuch", "end"]), st.none()),
)
varbind_lists = st.lists(st.tuples(oids, values), max_size=40)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(varbind_lists, st.binary(max_size=40), st.integers(-(2**31), 2**31 - 1), st.integers(0, 18))
def test_decoding_what_pysnmp_encodes_equals_what_pysnmp_decodes(
    varbinds: list[tuple[OID, Value]], community: bytes, request_id: int, status: int
) -> None:
    data = _pysnmp_encode(community, request_id, varbinds, status)
    ours = ber.decode_message(data)
    assert (ours.community, ours.request_id, ours.error_status, ours.varbinds) == _pysnmp_decode(data)
    assert ours.varbinds == varbinds


@settings(max_examples=150, deadline=None)
@given(varbind_lists, st.binary(max_size=40), st.integers(-(2**31), 2**31 - 1))
def test_pysnmp_decodes_what_we_encode(varbinds: list[tuple[OID, Value]], community: bytes, request_id: int) -> None:
    data = ber.encode_message(community, ber.RESPONSE, request_id, varbinds)
    assert _pysnmp_decode(data) == (community, request_id, 0, varbinds)


# ------------------------------------------------------------------------------------------------
# captured datagrams from real agents
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_captured_datagrams_decode_as_pysnmp_decodes_them(name: str) -> None:
    data = CAPTURED[name]
    ours = ber.decode_message(data)
    assert (ours.community, ours.request_id, ours.error_status, ours.varbinds) == _pysnmp_decode(data)
    assert ours.version == 1 and ours.pdu_type == ber.RESPONSE and ours.varbinds


def test_captured_datagrams_carry_what_the_agents_hold() -> None:
    system = ber.decode_message(CAPTURED["netsnmp_get_system"]).varbinds
    assert system[2] == ((1, 3, 6, 1, 2, 1, 1, 5, 0), ("octets", b"capture-host"))
    assert system[1][1][0] == "oid" and system[1][1][1].startswith("1.3.6.1.4.1.8072.")
    rem = ber.decode_message(CAPTURED["snmpsim_bulk_lldprem"]).varbinds
    assert len(rem) == 40 and rem[0] == ((*LLDP_REM_TABLE, 4, 1001, 3, 8), ("int", 4))
    end = ber.decode_message(CAPTURED["snmpsim_bulk_end"]).varbinds
    assert {v for _, v in end} == {("end", None)}


def test_net_snmp_style_long_form_lengths_are_accepted() -> None:
    """net-snmp's snmpd writes SEQUENCE lengths as 0x82 hh ll even when short form would do."""

    def long_form(tag: int, content: bytes) -> bytes:
        return bytes((tag, 0x82)) + len(content).to_bytes(2, "big") + content

    vb = long_form(0x30, bytes.fromhex("06082b06010201010500") + bytes.fromhex("040178"))
    pdu = bytes.fromhex("020105020100020100") + long_form(0x30, vb)
    data = long_form(0x30, bytes.fromhex("020101") + bytes.fromhex("0406") + b"public" + long_form(0xA2, pdu))
    message = ber.decode_message(data)
    assert message.varbinds == [((1, 3, 6, 1, 2, 1, 1, 5, 0), ("octets", b"x"))]
    assert _pysnmp_decode(data)[3] == message.varbinds


# ------------------------------------------------------------------------------------------------
# bad input: always BerError, never anything else, never slow
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_truncation_at_every_offset_is_an_error(name: str) -> None:
    data = CAPTURED[name]
    for cut in range(len(data)):
        with pytest.raises(BerError):
            ber.decode_message(data[:cut])


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_every_single_octet_mutation_decodes_or_is_a_ber_error(name: str) -> None:
    """Our decoder against the reference on ~2,000 corrupted real datagrams: it raises nothing but
    BerError, and whatever it accepts pysnmp decodes to the same values."""
    data = CAPTURED[name]
    rng = random.Random(name)
    accepted = 0
    for pos in range(len(data)):
        for octet in {0x00, 0x7F, 0x80, 0xFF, data[pos] ^ 0x01, rng.randrange(256)}:
            mutated = data[:pos] + bytes((octet,)) + data[pos + 1 :]
            try:
                ours = ber.decode_message(mutated)
            except BerError:
                continue
            accepted += 1
            if rng.random() > 0.1 and pos > 40:
                continue  # pyasn1 is slow: check one in ten of the accepted value mutations against it
            try:
                reference = _pysnmp_decode(mutated)
            except PyAsn1Error:
                raise AssertionError(f"we accept what pysnmp refuses (octet {pos}): {mutated.hex()}") from None
            assert (ours.community, ours.request_id, ours.error_status, ours.varbinds) == reference
    assert accepted > 0  # the mutations do reach past the framing (values, request-ids)


def _header_message(pdu_content: bytes, pdu_tag: int = 0xA2) -> bytes:
    body = (
        bytes.fromhex("020101") + bytes.fromhex("0406") + b"public" + bytes((pdu_tag, len(pdu_content))) + pdu_content
    )
    return bytes((0x30, len(body))) + body


def _one_value(value: bytes, name: bytes = bytes.fromhex("06082b06010201010500")) -> bytes:
    vb = name + value
    vbl = bytes((0x30, len(vb))) + vb
    return _header_message(bytes.fromhex("020105020100020100") + bytes((0x30, len(vbl))) + vbl)


BAD: dict[str, bytes] = {
    "empty": b"",
    "one octet": b"\x30",
    "not a sequence": bytes.fromhex("0403616263"),
    "indefinite length": bytes.fromhex("3080020101040170a2800000") + b"\x00\x00",
    "length past the buffer": bytes.fromhex("3064020101"),
    "five-octet length": bytes.fromhex("3085000000000a"),
    "multi-octet tag": bytes.fromhex("3f0501"),
    "version not an integer": bytes.fromhex("30050401010401"),
    "community not a string": bytes.fromhex("3006020101020100"),
    "unknown PDU tag": _header_message(bytes.fromhex("020105020100020100") + b"\x30\x00", pdu_tag=0xA9),
    "trap v1 PDU": _header_message(bytes.fromhex("020105020100020100") + b"\x30\x00", pdu_tag=0xA4),
    "error-status 19": _header_message(bytes.fromhex("020105020113020100") + b"\x30\x00"),
    "negative error-index": _header_message(bytes.fromhex("0201050201000201ff") + b"\x30\x00"),
    "request-id over 32 bits": _header_message(bytes.fromhex("020500ffffffff020100020100") + b"\x30\x00"),
    "octets after the varbind list": _header_message(bytes.fromhex("020105020100020100") + b"\x30\x00\x05\x00"),
    "varbind not a sequence": _header_message(bytes.fromhex("020105020100020100") + bytes.fromhex("30020500")),
    "varbind name not an OID": _one_value(b"\x05\x00", name=b"\x04\x01\x2b"),
    "empty OID name": _one_value(b"\x05\x00", name=b"\x06\x00"),
    "non-minimal OID sub-id": _one_value(b"\x05\x00", name=b"\x06\x04\x2b\x80\x80\x01"),
    "OID sub-id over 2^32-1": _one_value(b"\x05\x00", name=b"\x06\x07\x2b\x90\x80\x80\x80\x80\x00"),
    "OID cut inside a sub-id": _one_value(b"\x05\x00", name=b"\x06\x02\x2b\x86"),
    "Integer32 over 2^31-1": _one_value(bytes.fromhex("02050080000000")),
    "oversize INTEGER": _one_value(b"\x02\x11" + b"\x00" * 16 + b"\x01"),
    "negative Counter32": _one_value(bytes.fromhex("4101ff")),
    "Counter32 of 2^32": _one_value(bytes.fromhex("41050100000000")),
    "Counter64 of 2^64": _one_value(bytes.fromhex("4609010000000000000000")),
    "IpAddress of 5 octets": _one_value(bytes.fromhex("40050a00000001")),
    "NULL with content": _one_value(bytes.fromhex("050100")),
    "endOfMibView with content": _one_value(bytes.fromhex("820100")),
    "constructed OCTET STRING": _one_value(bytes.fromhex("2403040178")),
    "unknown value tag": _one_value(bytes.fromhex("470100")),
    "value missing": _one_value(b""),
    "two values in a varbind": _one_value(b"\x05\x00\x05\x00"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_malformed_input_is_a_ber_error(name: str) -> None:
    with pytest.raises(BerError):
        ber.decode_message(BAD[name])


def test_deeply_nested_sequences_fail_at_once() -> None:
    content = b""
    for _ in range(20_000):
        content = ber._tlv(0x30, content)
    # The decoder reads the version INTEGER where the first nested SEQUENCE starts and stops there:
    # offset 5 (tag + 4-octet length of the outer SEQUENCE), not 20,000 levels down (a recursive
    # descent would end in RecursionError, which is not a BerError). Speed: bench/bench_ber.py.
    with pytest.raises(BerError) as err:
        ber.decode_message(content)
    assert str(err.value) == "version: expected INTEGER, got tag 0x30 at offset 5"


def test_ten_megabytes_of_garbage_are_refused_at_their_first_octets() -> None:
    """Each blob is refused by what its first octets say (the offset in the message proves the
    decoder looked no further); the time this takes is measured in bench/bench_ber.py."""
    garbage = random.Random(1).randbytes(10 * 1024 * 1024)  # seeded: the first octets decide the message
    cases = [
        (garbage, "message: 49-octet length at offset 1"),
        (b"\x30\x84\x00\x9f\xff\xf0" + garbage, "version: 49-octet length at offset 7"),
        (
            b"\x30\x82\xff\xff" * (10 * 1024 * 1024 // 4),
            "version: length 65535 at offset 8 runs past the end (65531 octets left)",
        ),
    ]
    for blob, expected in cases:
        with pytest.raises(BerError) as err:
            ber.decode_message(blob)
        assert str(err.value) == expected
    # a well-framed message whose one varbind list is 10 MB of well-formed varbinds is decoded
    # whole (the socket never delivers one this large: UDP stops at 64 KiB)
    vb = ber._tlv(0x30, ber._tlv(6, ber.encode_oid((1, 3, 6, 1))) + b"\x05\x00")
    huge = ber._tlv(0x30, vb * (1024 * 1024 // len(vb)))
    message = ber._tlv(0x30, bytes.fromhex("020101040170") + ber._tlv(0xA2, bytes.fromhex("020101020100020100") + huge))
    decoded = ber.decode_message(message).varbinds
    assert len(decoded) == 1024 * 1024 // len(vb)
    assert set(decoded) == {((1, 3, 6, 1), ("null", None))}
