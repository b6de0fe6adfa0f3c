"""Chassis/port id rendering: raw bytes in, one normalised text form out, or a clear error."""

from __future__ import annotations

import pytest

from core.lldp import IdError, format_mac, parse_mac, render_chassis_id, render_port_id, text_of


def test_mac_subtypes_need_exactly_six_bytes() -> None:
    assert render_chassis_id(4, bytes.fromhex("444ca8010203")) == "44:4c:a8:01:02:03"
    assert render_port_id(3, bytes.fromhex("b49691000001")) == "b4:96:91:00:00:01"
    with pytest.raises(IdError, match="a MAC address is 6 bytes, got 5"):
        render_chassis_id(4, b"\x01\x02\x03\x04\x05")
    with pytest.raises(IdError, match="got 7"):
        render_port_id(3, b"\x01" * 7)


def test_network_address_ids() -> None:
    assert render_chassis_id(5, bytes([1, 10, 0, 0, 1])) == "10.0.0.1"
    assert render_port_id(4, bytes([2]) + bytes(15) + b"\x01") == "::1"
    with pytest.raises(IdError, match="network address"):
        render_chassis_id(5, bytes([1, 10, 0]))


def test_text_ids_and_binary_ids() -> None:
    assert render_port_id(5, b"Ethernet1/1") == "Ethernet1/1"
    assert render_port_id(7, b"514\x00\x00") == "514"  # NUL padding trimmed
    assert render_chassis_id(7, b"\x00\x01\xff") == "00:01:ff"  # binary local id: hex, not mojibake
    with pytest.raises(IdError, match="empty port id"):
        render_port_id(5, b"")
    with pytest.raises(IdError, match="subtype 0 is not defined"):
        render_chassis_id(0, b"x")
    with pytest.raises(IdError, match="exceeds 255"):
        render_port_id(5, b"x" * 256)


def test_text_of_escapes_invalid_utf8_and_inner_nul() -> None:
    assert text_of(b"peer\xff") == ("peer\\xff", False)
    assert text_of(b"a\x00b\x00") == ("a\\x00b", True)
    assert text_of("spine-ü".encode()) == ("spine-ü", True)


def test_mac_round_trip() -> None:
    raw = parse_mac("44-4C-A8-01-02-03")
    assert format_mac(raw) == "44:4c:a8:01:02:03"
    assert parse_mac("444c.a801.0203") == raw
    with pytest.raises(IdError):
        parse_mac("44:4c")
