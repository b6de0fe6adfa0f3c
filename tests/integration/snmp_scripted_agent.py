"""A tiny scripted SNMPv2c agent for the fast-path tests: a sorted MIB answered over a real UDP
socket, plus knobs for the misbehaviour a real network shows (garbage, stray and duplicate
datagrams, error statuses, exceptions inside a table, non-increasing OIDs, silence).

It decodes requests with our codec, so every test through it also checks that the codec reads
what pysnmp's encoder writes (the pysnmp path's requests arrive here too)."""

from __future__ import annotations

import bisect
import select
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from connectors.snmp import ber
from connectors.snmp.ber import OID, Value

Hook = Callable[["Request"], list[bytes] | None]
"""Called per request; returns datagrams to send instead of the normal answer (None: answer)."""


@dataclass
class Request:
    n: int  # 0-based count of requests received
    message: ber.Message
    answer: bytes  # what the agent would send

    @property
    def oid(self) -> OID:
        return self.message.varbinds[0][0]


@dataclass
class ScriptedAgent:
    mib: dict[OID, Value]
    community: bytes = b"public"
    hook: Hook | None = None
    requests: list[ber.Message] = field(default_factory=list)
    sources: set[tuple[str, int]] = field(default_factory=set)  # the client sockets requests came from

    def __post_init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.keys = sorted(self.mib)
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def __enter__(self) -> ScriptedAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.running = False
        self.thread.join(timeout=2)
        self.sock.close()

    def answer(self, message: ber.Message) -> bytes:
        out: list[tuple[OID, Value]] = []
        if message.pdu_type == ber.GET_REQUEST:
            for oid, _ in message.varbinds:
                out.append((oid, self.mib.get(oid, ("nosuch", None))))
        else:  # GETBULK, non-repeaters 0
            for oid, _ in message.varbinds:
                i = bisect.bisect_right(self.keys, oid)
                for k in self.keys[i : i + message.error_index]:
                    out.append((k, self.mib[k]))
                if i + message.error_index > len(self.keys):
                    out.append((self.keys[-1] if not out else out[-1][0], ("end", None)))
        return ber.encode_message(self.community, ber.RESPONSE, message.request_id, out)

    def _run(self) -> None:
        while self.running:
            ready, _, _ = select.select([self.sock], [], [], 0.05)
            if not ready:
                continue
            data, addr = self.sock.recvfrom(65535)
            message = ber.decode_message(data)
            if message.community != self.community:
                continue
            n = len(self.requests)
            self.requests.append(message)
            self.sources.add(addr)
            answer = self.answer(message)
            datagrams = self.hook(Request(n, message, answer)) if self.hook else None
            for datagram in [answer] if datagrams is None else datagrams:
                self.sock.sendto(datagram, addr)


def response(request_id: int, varbinds: list[tuple[OID, Value]], community: bytes = b"public", status: int = 0,
             index: int = 0, version: int = ber.VERSION_2C, pdu: int = ber.RESPONSE) -> bytes:  # fmt: skip
    return ber.encode_message(community, pdu, request_id, varbinds, status, index, version)
