"""SNMP BER decoding: our codec (``connectors.snmp.ber``) against pyasn1, the codec pysnmp uses.

Measured in one run, every contender once per round with the order rotating (bench/common.py):

(a) decoding real GETBULK responses (captured from snmpsim: lldpRemTable pages), ours against
    pyasn1's ``decoder.decode(..., asn1Spec=v2c.Message())`` of the same bytes -- the peer;
(b) refusing hostile input (what ``tests/unit/test_snmp_ber.py`` asserts the outcome of, and used
    to time): 10 MB of random bytes, a 10 MB frame claiming a huge length, and 20,000 nested
    SEQUENCEs. Each is compared with decoding one captured datagram: refusing 10 MB should cost
    about what one datagram costs, since only the first octets are read;
(c) a 10 MB well-formed varbind list against a 1 MB one: decoding time should grow linearly
    (ratio near 10), never quadratically.

``python -m bench --only ber [--quick] [-- --rounds 7]``
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Sequence

from bench.common import Spread, interleaved, ratio_line


def _decode_or_refuse(decode: Callable[[bytes], object], blob: bytes) -> Callable[[], None]:
    from connectors.snmp.ber import BerError

    def run() -> None:
        try:
            decode(blob)
        except BerError:
            return
        raise RuntimeError("hostile input was decoded")

    return run


def _varbind_message(size: int) -> bytes:
    from connectors.snmp import ber

    vb = ber._tlv(0x30, ber._tlv(6, ber.encode_oid((1, 3, 6, 1))) + b"\x05\x00")
    body = ber._tlv(0x30, vb * (size // len(vb)))
    return ber._tlv(0x30, bytes.fromhex("020101040170") + ber._tlv(0xA2, bytes.fromhex("020101020100020100") + body))


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_ber", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 7")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args(list(argv))
    rounds = args.rounds or (3 if args.quick else 7)

    from pyasn1.codec.ber import decoder as pyasn1_decoder
    from pysnmp.proto.api import v2c

    from connectors.snmp import ber
    from tests.unit.snmp_captured_datagrams import CAPTURED

    page = CAPTURED["snmpsim_bulk_lldprem"]
    repeat = 200  # one datagram decodes in microseconds: time a batch

    def ours_pages() -> None:
        for _ in range(repeat):
            ber.decode_message(page)

    def pyasn1_pages() -> None:
        for _ in range(repeat):
            pyasn1_decoder.decode(page, asn1Spec=v2c.Message())

    def one_page() -> None:
        ber.decode_message(page)

    garbage = random.Random(1).randbytes(10 * 1024 * 1024)
    nested = b""
    for _ in range(20_000):
        nested = ber._tlv(0x30, nested)
    small, large = _varbind_message(1024 * 1024), _varbind_message(10 * 1024 * 1024)
    vb_len = len(ber._tlv(0x30, ber._tlv(6, ber.encode_oid((1, 3, 6, 1))) + b"\x05\x00"))
    if len(ber.decode_message(large).varbinds) != 10 * 1024 * 1024 // vb_len:
        print("  FAILED: the 10 MB varbind list did not decode whole", file=sys.stderr)
        return 1
    times = interleaved(
        {
            "ours": ours_pages,
            "pyasn1": pyasn1_pages,
            "one page": one_page,
            "10 MB random": _decode_or_refuse(ber.decode_message, garbage),
            "10 MB huge length": _decode_or_refuse(ber.decode_message, b"\x30\x84\x00\x9f\xff\xf0" + garbage),
            "20,000 nested": _decode_or_refuse(ber.decode_message, nested),
            "1 MB varbinds": lambda: ber.decode_message(small),
            "10 MB varbinds": lambda: ber.decode_message(large),
        },
        rounds,
    )
    n_vb = len(ber.decode_message(page).varbinds)
    print(f"BER decoding: captured lldpRemTable page ({len(page)} octets, {n_vb} varbinds), {rounds} rounds")
    per_page = {k: Spread.of([t / repeat * 1e6 for t in times[k]]) for k in ("ours", "pyasn1")}
    print(f"  ours:           {per_page['ours'].fmt('.1f', ' us/datagram')}")
    print(f"  pyasn1 (peer):  {per_page['pyasn1'].fmt('.1f', ' us/datagram')}")
    print(f"  {ratio_line('ours / pyasn1 time', times['ours'], times['pyasn1'])}")
    for name in ("10 MB random", "10 MB huge length", "20,000 nested"):
        print(f"  refusing {name}: {Spread.of([t * 1e6 for t in times[name]]).fmt('.1f', ' us')}; "
              f"{ratio_line('against decoding one datagram', times[name], times['one page'])}")  # fmt: skip
    print(f"  1 MB varbind list: {Spread.of(times['1 MB varbinds']).fmt('.3f', ' s')}")
    print(f"  10 MB varbind list: {Spread.of(times['10 MB varbinds']).fmt('.3f', ' s')}")
    print(f"  {ratio_line('10 MB / 1 MB (linear = 10)', times['10 MB varbinds'], times['1 MB varbinds'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
