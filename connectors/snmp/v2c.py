"""SNMPv2c requests over one shared UDP socket: the collector's fast path (SNMPv3 stays on pysnmp).

One :class:`V2cClient` (one socket, one asyncio datagram endpoint) serves every SNMPv2c switch
of a collection run, as one pysnmp engine does for SNMPv3. Requests carry run-unique request-ids;
an answer is accepted only if it decodes strictly (:mod:`connectors.snmp.ber`), is an SNMPv2c
Response, carries the request's community and an id still waiting -- the checks pysnmp's message
processing makes. Anything else (garbage, a stray or duplicate datagram, an answer to a request
already given up) is counted and dropped, so a bad datagram can only ever end in a timeout, never
a crash. Retries resend the same message with the same request-id, so a late answer to an
earlier try is still taken.
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Callable
from typing import Any, cast

from connectors.snmp.ber import RESPONSE, VERSION_2C, BerError, Message, decode_message

RECEIVE_BUFFER = 4 * 1024 * 1024
"""Socket receive buffer asked for: 64 switches in flight, each with one answer of up to 64 KiB."""


class V2cTimeout(Exception):
    """No acceptable answer within timeout x (retries + 1)."""


class _Pending:
    __slots__ = ("community", "future")

    def __init__(self, community: bytes) -> None:
        self.community = community
        self.future: asyncio.Future[Message | None] | None = None


def _expire(future: asyncio.Future[Message | None]) -> None:
    if not future.done():
        future.set_result(None)


class V2cClient(asyncio.DatagramProtocol):
    """SNMPv2c GET / GETBULK over one UDP socket shared by every device of a run."""

    def __init__(self, per_address: int = 4) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.pending: dict[int, _Pending] = {}
        self.per_address = per_address
        self._gates: dict[tuple[str, int], asyncio.Semaphore] = {}
        self._next_id = random.randrange(1, 2**30)
        self.malformed = 0  # datagrams that failed to decode
        self.stray = 0  # decoded, but no request is waiting for them (late, duplicate, wrong community)
        self.last_error: BerError | None = None

    @classmethod
    async def open(cls, per_address: int = 4, local: tuple[str, int] = ("0.0.0.0", 0)) -> V2cClient:
        loop = asyncio.get_running_loop()
        client = cls(per_address)
        await loop.create_datagram_endpoint(lambda: client, local_addr=local, family=socket.AF_INET)
        return client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
            except OSError:  # capped by net.core.rmem_max; the default still works, only burstier loss
                pass

    def datagram_received(self, data: bytes, addr: Any) -> None:
        try:
            message = decode_message(data)
        except BerError as err:
            self.malformed += 1
            self.last_error = err
            return
        entry = self.pending.get(message.request_id)
        if (
            entry is None
            or entry.future is None
            or entry.future.done()
            or message.version != VERSION_2C
            or message.pdu_type != RESPONSE
            or message.community != entry.community
        ):
            self.stray += 1
            return
        entry.future.set_result(message)

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable and the like: pysnmp drops them too; the request times out.
        pass

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _request_id(self) -> int:
        while True:
            rid = self._next_id
            self._next_id = rid + 1 if rid < 2**31 - 1 else 1
            if rid not in self.pending:
                return rid

    async def request(
        self,
        address: tuple[str, int],
        community: bytes,
        build: Callable[[int], bytes],
        timeout_s: float,
        retries: int,
    ) -> Message:
        """Send ``build(request_id)`` to ``address`` and wait for its Response; up to ``retries``
        resends, each after ``timeout_s`` of silence. :class:`V2cTimeout` when none comes.

        At most ``per_address`` requests are outstanding to one address: an agent (snmpd, a proxy,
        a simulator serving many communities) answers one request at a time, so more only queue
        in its socket and eat into their own timeouts. The timeout runs from the send, not from
        the wait for a slot (the device deadline bounds that)."""
        transport = self.transport
        if transport is None:
            raise RuntimeError("V2cClient is not open")
        gate = self._gates.get(address)
        if gate is None:
            gate = self._gates[address] = asyncio.Semaphore(self.per_address)
        async with gate:
            loop = asyncio.get_running_loop()
            rid = self._request_id()
            payload = build(rid)
            entry = _Pending(community)
            self.pending[rid] = entry
            try:
                for _ in range(retries + 1):
                    future: asyncio.Future[Message | None] = loop.create_future()
                    entry.future = future
                    transport.sendto(payload, address)
                    timer = loop.call_later(timeout_s, _expire, future)
                    try:
                        message = await future
                    finally:
                        timer.cancel()
                    if message is not None:
                        return message
                raise V2cTimeout
            finally:
                del self.pending[rid]
