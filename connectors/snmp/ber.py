"""A strict BER codec for exactly the subset of ASN.1 that SNMPv1/v2c messages use.

Why it exists: decoding GETBULK responses through pyasn1 costs ~0.15 ms of CPU per varbind (a
Python object per tag, length and value, constraint objects cloned for each), which made the
collector spend ~200 ms per 48-port switch. This module decodes a whole response in one pass
straight into the ``(tag, python value)`` form :mod:`connectors.snmp.lldp_mib` interprets, and
encodes the few requests we send. SNMPv3 (USM authentication and privacy) stays with pysnmp.

Strict and bounded, because every byte comes from the network: each length is checked against
the enclosing element before it is used (no read can run past the buffer), the structure is a
fixed four levels (message, PDU, varbind list, varbind; no recursion), integers are at most
:data:`MAX_INT_OCTETS` octets and range-checked for their SNMP type, OID sub-identifiers are
minimal and at most 2^32-1, and indefinite lengths, multi-octet tags and constructed strings are
refused. Anything else is a :class:`BerError` naming the offset. The value ranges are those
pysnmp's ASN.1 specification enforces (RFC 2578/3416), so a datagram pysnmp would refuse is
refused here too. Long-form lengths that are not minimal are accepted, as BER allows: net-snmp's
snmpd always encodes SEQUENCE lengths in three octets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

OID = tuple[int, ...]
Value = tuple[str, Any]

# universal
INTEGER = 0x02
OCTET_STRING = 0x04
NULL = 0x05
OBJECT_IDENTIFIER = 0x06
SEQUENCE = 0x30
# application (RFC 2578)
IP_ADDRESS = 0x40
COUNTER32 = 0x41
GAUGE32 = 0x42  # also Unsigned32
TIME_TICKS = 0x43
OPAQUE = 0x44
COUNTER64 = 0x46
# context, primitive: the SNMPv2 exceptions (RFC 3416)
NO_SUCH_OBJECT = 0x80
NO_SUCH_INSTANCE = 0x81
END_OF_MIB_VIEW = 0x82
# context, constructed: PDUs
GET_REQUEST = 0xA0
GET_NEXT_REQUEST = 0xA1
RESPONSE = 0xA2
SET_REQUEST = 0xA3
GET_BULK_REQUEST = 0xA5
INFORM_REQUEST = 0xA6
SNMPV2_TRAP = 0xA7
REPORT = 0xA8
PDU_TAGS = frozenset({GET_REQUEST, GET_NEXT_REQUEST, RESPONSE, SET_REQUEST, GET_BULK_REQUEST, INFORM_REQUEST,
                      SNMPV2_TRAP, REPORT})  # fmt: skip

VERSION_1 = 0
VERSION_2C = 1

MAX_INT_OCTETS = 16
"""Longest INTEGER content accepted (Counter64 needs 9; the rest is tolerance for zero padding)."""
MAX_SUB_ID = 2**32 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1
MAX_BINDINGS = 2**31 - 1

ERROR_STATUS_NAMES = (
    "noError", "tooBig", "noSuchName", "badValue", "readOnly", "genErr", "noAccess", "wrongType", "wrongLength",
    "wrongEncoding", "wrongValue", "noCreation", "inconsistentValue", "resourceUnavailable", "commitFailed",
    "undoFailed", "authorizationError", "notWritable", "inconsistentName",
)  # fmt: skip
"""RFC 3416 error-status names, as pysnmp's ``prettyPrint`` spells them."""

# (tag byte -> our tag name, low, high) for the integer-valued types
_INTEGER_TYPES: dict[int, tuple[str, int, int]] = {
    INTEGER: ("int", INT32_MIN, INT32_MAX),
    COUNTER32: ("counter", 0, UINT32_MAX),
    GAUGE32: ("gauge", 0, UINT32_MAX),
    TIME_TICKS: ("timeticks", 0, UINT32_MAX),
    COUNTER64: ("counter64", 0, UINT64_MAX),
}
_EMPTY_TYPES: dict[int, str] = {
    NULL: "null",
    NO_SUCH_OBJECT: "nosuch",
    NO_SUCH_INSTANCE: "nosuch",
    END_OF_MIB_VIEW: "end",
}
_ENCODE_INTEGER = {name: (tag, low, high) for tag, (name, low, high) in _INTEGER_TYPES.items()}
_ENCODE_BYTES = {"octets": OCTET_STRING, "ipaddr": IP_ADDRESS, "opaque": OPAQUE}
_ENCODE_EMPTY = {"null": NULL, "nosuch": NO_SUCH_OBJECT, "nosuchinstance": NO_SUCH_INSTANCE, "end": END_OF_MIB_VIEW}


class BerError(ValueError):
    """The bytes are not a well-formed SNMPv1/v2c message (what is wrong, and at which offset)."""


@dataclass(frozen=True, slots=True)
class Message:
    """One decoded SNMPv1/v2c message. For GetBulkRequest, ``error_status``/``error_index`` hold
    non-repeaters/max-repetitions (the same two INTEGER positions)."""

    version: int
    community: bytes
    pdu_type: int
    request_id: int
    error_status: int
    error_index: int
    varbinds: list[tuple[OID, Value]]


# ------------------------------------------------------------------------------------------------
# decoding
# ------------------------------------------------------------------------------------------------


def _header(data: bytes, pos: int, end: int, what: str) -> tuple[int, int, int]:
    """(tag, content start, content end) of the element at ``pos``; its content must fit in ``end``."""
    if pos + 2 > end:
        raise BerError(f"{what}: truncated at offset {pos}")
    tag = data[pos]
    if tag & 0x1F == 0x1F:
        raise BerError(f"{what}: multi-octet tag at offset {pos}")
    length = data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0:
            raise BerError(f"{what}: indefinite length at offset {pos - 1}")
        if count > 4:
            raise BerError(f"{what}: {count}-octet length at offset {pos - 1}")
        if pos + count > end:
            raise BerError(f"{what}: truncated length at offset {pos - 1}")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    stop = pos + length
    if stop > end:
        raise BerError(f"{what}: length {length} at offset {pos} runs past the end ({end - pos} octets left)")
    return tag, pos, stop


def _integer(data: bytes, start: int, stop: int, low: int, high: int, what: str) -> int:
    if stop - start > MAX_INT_OCTETS:
        raise BerError(f"{what}: {stop - start}-octet INTEGER at offset {start}")
    value = int.from_bytes(data[start:stop], "big", signed=True)
    if not low <= value <= high:
        raise BerError(f"{what}: {value} out of range {low}..{high} at offset {start}")
    return value


def _expect_integer(data: bytes, pos: int, end: int, low: int, high: int, what: str) -> tuple[int, int]:
    tag, start, stop = _header(data, pos, end, what)
    if tag != INTEGER:
        raise BerError(f"{what}: expected INTEGER, got tag 0x{tag:02x} at offset {pos}")
    return _integer(data, start, stop, low, high, what), stop


_HIGH_BIT = bytes.maketrans(bytes(range(0x80, 0x100)), b"\x80" * 0x80)
_PREFIXES: dict[bytes, OID] = {}
_PREFIX_CACHE_SIZE = 4096


def decode_oid(content: bytes, offset: int = 0) -> OID:
    """OBJECT IDENTIFIER content octets as a tuple of sub-identifiers."""
    if content.isascii():  # every sub-identifier is one octet: done in C
        if not content:
            raise BerError(f"empty OBJECT IDENTIFIER at offset {offset}")
        first = content[0]
        return ((first // 40, first % 40) if first < 80 else (2, first - 80)) + tuple(content[1:])
    # Multi-octet sub-identifiers (8802 in every LLDP-MIB OID) sit in the prefix a response's OIDs
    # share; decode the prefix up to the last of them once, the one-octet tail in C.
    cut = content.translate(_HIGH_BIT).rfind(0x80) + 2
    prefix = content[:cut]
    head = _PREFIXES.get(prefix)
    if head is None:
        head = _decode_oid_slow(prefix, offset)
        if len(_PREFIXES) >= _PREFIX_CACHE_SIZE:
            _PREFIXES.clear()
        _PREFIXES[prefix] = head
    return head + tuple(content[cut:])


def _decode_oid_slow(content: bytes, offset: int) -> OID:
    subs: list[int] = []
    value = 0
    fresh = True
    for i, octet in enumerate(content):
        if fresh and octet == 0x80:
            raise BerError(f"non-minimal OID sub-identifier at offset {offset + i}")
        value = (value << 7) | (octet & 0x7F)
        if octet & 0x80:
            fresh = False
            if value > MAX_SUB_ID + 80:  # (the first sub-identifier carries 40 * arc1 on top)
                raise BerError(f"OID sub-identifier over 2^32-1 at offset {offset + i}")
            continue
        if subs and value > MAX_SUB_ID:
            raise BerError(f"OID sub-identifier over 2^32-1 at offset {offset + i}")
        subs.append(value)
        value, fresh = 0, True
    if not fresh:
        raise BerError(f"OBJECT IDENTIFIER truncated inside a sub-identifier at offset {offset + len(content) - 1}")
    first = subs[0]
    head = (first // 40, first % 40) if first < 80 else (2, first - 80)
    if head[1] > MAX_SUB_ID:
        raise BerError(f"OID sub-identifier over 2^32-1 at offset {offset}")
    return head + tuple(subs[1:])


def _value(data: bytes, pos: int, end: int) -> tuple[Value, int]:
    """One varbind value as ``(tag name, python value)`` (the form ``collector.convert`` gives)."""
    tag, start, stop = _header(data, pos, end, "varbind value")
    if tag == OCTET_STRING:
        return ("octets", data[start:stop]), stop
    if tag in _INTEGER_TYPES:
        name, low, high = _INTEGER_TYPES[tag]
        return (name, _integer(data, start, stop, low, high, name)), stop
    if tag == OBJECT_IDENTIFIER:
        return ("oid", ".".join(map(str, decode_oid(data[start:stop], start)))), stop
    if tag in _EMPTY_TYPES:
        if stop != start:
            raise BerError(f"{_EMPTY_TYPES[tag]} value with {stop - start} content octets at offset {start}")
        return (_EMPTY_TYPES[tag], None), stop
    if tag == IP_ADDRESS:
        if stop - start != 4:
            raise BerError(f"IpAddress of {stop - start} octets at offset {start}")
        return ("ipaddr", data[start:stop]), stop
    if tag == OPAQUE:
        return ("opaque", data[start:stop]), stop
    raise BerError(f"unexpected value tag 0x{tag:02x} at offset {pos}")


def decode_message(data: bytes) -> Message:
    """Decode one SNMPv1/v2c message; :class:`BerError` for anything malformed. Octets after the
    message are ignored (as pysnmp does)."""
    data = bytes(data)
    end = len(data)
    tag, pos, end = _header(data, 0, end, "message")
    if tag != SEQUENCE:
        raise BerError(f"message: expected SEQUENCE, got tag 0x{tag:02x}")
    version, pos = _expect_integer(data, pos, end, 0, INT32_MAX, "version")
    tag, start, pos = _header(data, pos, end, "community")
    if tag != OCTET_STRING:
        raise BerError(f"community: expected OCTET STRING, got tag 0x{tag:02x} at offset {start}")
    community = data[start:pos]
    pdu_at = pos
    pdu_type, pos, pdu_end = _header(data, pos, end, "PDU")
    if pdu_type not in PDU_TAGS:
        raise BerError(f"PDU: unexpected tag 0x{pdu_type:02x} at offset {pdu_at}")
    if pdu_end != end:
        raise BerError(f"message: {end - pdu_end} octets after the PDU at offset {pdu_end}")
    request_id, pos = _expect_integer(data, pos, pdu_end, INT32_MIN, INT32_MAX, "request-id")
    if pdu_type == GET_BULK_REQUEST:
        error_status, pos = _expect_integer(data, pos, pdu_end, 0, MAX_BINDINGS, "non-repeaters")
        error_index, pos = _expect_integer(data, pos, pdu_end, 0, MAX_BINDINGS, "max-repetitions")
    else:
        error_status, pos = _expect_integer(data, pos, pdu_end, 0, len(ERROR_STATUS_NAMES) - 1, "error-status")
        error_index, pos = _expect_integer(data, pos, pdu_end, 0, MAX_BINDINGS, "error-index")
    list_at = pos
    tag, pos, list_end = _header(data, pos, pdu_end, "variable-bindings")
    if tag != SEQUENCE:
        raise BerError(f"variable-bindings: expected SEQUENCE, got tag 0x{tag:02x} at offset {list_at}")
    if list_end != pdu_end:
        raise BerError(f"PDU: {pdu_end - list_end} octets after the variable-bindings at offset {list_end}")
    varbinds: list[tuple[OID, Value]] = []
    append = varbinds.append
    while pos < list_end:
        # Inline fast paths for short-form lengths (nearly every element of a real response); any
        # other shape goes through the general _header/_value, so both accept exactly the same input.
        vb_at = pos
        if pos + 2 <= list_end and data[pos] == SEQUENCE and data[pos + 1] < 0x80:
            vb_end = pos + 2 + data[pos + 1]
            pos += 2
            if vb_end > list_end:
                raise BerError(f"varbind: length {vb_end - pos} at offset {pos} runs past the end")
        else:
            tag, pos, vb_end = _header(data, pos, list_end, "varbind")
            if tag != SEQUENCE:
                raise BerError(f"varbind: expected SEQUENCE, got tag 0x{tag:02x} at offset {vb_at}")
        if pos + 2 <= vb_end and data[pos] == OBJECT_IDENTIFIER and data[pos + 1] < 0x80:
            start = pos + 2
            pos = start + data[pos + 1]
            if pos > vb_end:
                raise BerError(f"varbind name: length {pos - start} at offset {start} runs past the end")
        else:
            tag, start, pos = _header(data, pos, vb_end, "varbind name")
            if tag != OBJECT_IDENTIFIER:
                raise BerError(f"varbind name: expected OBJECT IDENTIFIER, got tag 0x{tag:02x} at offset {start}")
        name = decode_oid(data[start:pos], start)
        tag = data[pos] if pos < vb_end else -1
        if tag == OCTET_STRING and pos + 2 <= vb_end and data[pos + 1] < 0x80:
            start = pos + 2
            pos = start + data[pos + 1]
            if pos > vb_end:
                raise BerError(f"varbind value: length {pos - start} at offset {start} runs past the end")
            value: Value = ("octets", data[start:pos])
        else:
            value, pos = _value(data, pos, vb_end)
        if pos != vb_end:
            raise BerError(f"varbind: {vb_end - pos} octets after the value at offset {pos}")
        append((name, value))
    return Message(version, community, pdu_type, request_id, error_status, error_index, varbinds)


# ------------------------------------------------------------------------------------------------
# encoding
# ------------------------------------------------------------------------------------------------


def _length(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((0x80 | len(raw),)) + raw


def _tlv(tag: int, content: bytes) -> bytes:
    return bytes((tag,)) + _length(len(content)) + content


def _int_content(value: int) -> bytes:
    magnitude = value if value >= 0 else ~value
    return value.to_bytes(magnitude.bit_length() // 8 + 1, "big", signed=True)  # minimal two's complement


def encode_oid(oid: Sequence[int] | str) -> bytes:
    """OBJECT IDENTIFIER content octets (``"1.3.6.1"`` or ``(1, 3, 6, 1)``)."""
    subs = tuple(int(x) for x in oid.strip(".").split(".")) if isinstance(oid, str) else tuple(oid)
    if len(subs) < 2 or subs[0] > 2 or (subs[0] < 2 and subs[1] > 39):
        raise ValueError(f"not an encodable OID: {subs}")
    if any(not 0 <= s <= MAX_SUB_ID for s in subs):
        raise ValueError(f"OID sub-identifier out of 0..2^32-1: {subs}")
    out = bytearray()
    for sub in (subs[0] * 40 + subs[1], *subs[2:]):
        chunk = [sub & 0x7F]
        sub >>= 7
        while sub:
            chunk.append(0x80 | (sub & 0x7F))
            sub >>= 7
        out += bytes(reversed(chunk))
    return bytes(out)


def encode_value(value: Value) -> bytes:
    """A ``(tag name, python value)`` as one BER element (``"nosuchinstance"`` selects [context 1])."""
    tag, v = value
    if tag in _ENCODE_INTEGER:
        code, low, high = _ENCODE_INTEGER[tag]
        if not low <= int(v) <= high:
            raise ValueError(f"{tag} {v} out of range {low}..{high}")
        return _tlv(code, _int_content(int(v)))
    if tag in _ENCODE_BYTES:
        return _tlv(_ENCODE_BYTES[tag], bytes(v))
    if tag == "oid":
        return _tlv(OBJECT_IDENTIFIER, encode_oid(v))
    if tag in _ENCODE_EMPTY:
        return bytes((_ENCODE_EMPTY[tag], 0))
    raise ValueError(f"cannot encode a value tagged {tag!r}")


def encode_message(
    community: bytes,
    pdu_type: int,
    request_id: int,
    varbinds: Sequence[tuple[OID, Value]],
    error_status: int = 0,
    error_index: int = 0,
    version: int = VERSION_2C,
) -> bytes:
    """One SNMPv1/v2c message. For GetBulkRequest pass non-repeaters/max-repetitions as
    ``error_status``/``error_index``."""
    bindings = b"".join(_tlv(SEQUENCE, _tlv(OBJECT_IDENTIFIER, encode_oid(n)) + encode_value(v)) for n, v in varbinds)
    pdu = (
        _tlv(INTEGER, _int_content(request_id))
        + _tlv(INTEGER, _int_content(error_status))
        + _tlv(INTEGER, _int_content(error_index))
        + _tlv(SEQUENCE, bindings)
    )
    return _tlv(SEQUENCE, _tlv(INTEGER, _int_content(version)) + _tlv(OCTET_STRING, community) + _tlv(pdu_type, pdu))


def get_request(community: bytes, request_id: int, oids: Sequence[OID]) -> bytes:
    return encode_message(community, GET_REQUEST, request_id, [(o, ("null", None)) for o in oids])


def get_bulk_request(
    community: bytes, request_id: int, oid: OID, max_repetitions: int, non_repeaters: int = 0
) -> bytes:
    return encode_message(
        community, GET_BULK_REQUEST, request_id, [(oid, ("null", None))], non_repeaters, max_repetitions
    )
