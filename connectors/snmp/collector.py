"""Walk many switches' LLDP tables over SNMP: one shared transport per run, bounded fan-out.

SNMPv2c switches go through our own fast path: :mod:`connectors.snmp.ber` (a strict BER codec for
SNMP's subset, decoding straight into the ``(tag, value)`` form :mod:`connectors.snmp.lldp_mib`
reads) and :class:`~connectors.snmp.v2c.V2cClient` (one UDP socket for every device). pysnmp spent
~200 ms of CPU per 48-port switch, nearly all in pyasn1; the fast path spends ~20 ms, so 1,000
switches fit in a minute of one core. It keeps pysnmp's walk semantics exactly (see
:class:`_FastSession`); ``CollectorOptions(v2c_fast_path=False)`` sends SNMPv2c through pysnmp too.

SNMPv3 switches stay on pysnmp (USM authentication, privacy, engine discovery): one
:class:`~pysnmp.entity.engine.SnmpEngine` serves a whole collection run (its dispatcher,
USM user table and message cache are per engine; a second engine per device would multiply the
CPU and the sockets), created only when some switch needs it. ``concurrency`` devices are in
flight at once; each device's walks run one after another so a slow switch never holds more than
one request slot. Every request has the device's timeout and retries, and every device has an
overall deadline, so one switch that trickles answers cannot hold up the run.

Failures are data: a device that never answers is ``timeout`` (SNMPv2c cannot tell a wrong
community from a dead agent: both are silence), a USM report (unknown user, wrong digest,
decryption error) is ``auth_failure``, an agent that stops answering mid-walk is ``timeout`` with
the table it stopped in -- and the walk keeps what completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from pyasn1.type import univ
from pydantic import SecretStr
from pysnmp.entity import config as snmp_config
from pysnmp.hlapi import varbinds
from pysnmp.hlapi.v3arch.asyncio import (
    CommunityData,
    ContextData,
    ObjectIdentity,
    ObjectType,
    SnmpEngine,
    UdpTransportTarget,
    UsmUserData,
    bulk_walk_cmd,
    get_cmd,
)
from pysnmp.proto import errind, rfc1902, rfc1905

from connectors.snmp.ber import ERROR_STATUS_NAMES, get_bulk_request, get_request
from connectors.snmp.lldp_mib import DeviceWalk, LldpCollection, Value, interpret
from connectors.snmp.oids import INTERFACE_WALKS, OID, SYS_NAME, SYSTEM_OIDS, V1_WALKS, V2_WALKS, dotted
from connectors.snmp.v2c import V2cClient, V2cTimeout
from core.quality import CollectionStatus

AUTH_PROTOCOLS: dict[str, Any] = {
    "SHA": snmp_config.USM_AUTH_HMAC96_SHA,
    "SHA256": snmp_config.USM_AUTH_HMAC192_SHA256,
    "SHA512": snmp_config.USM_AUTH_HMAC384_SHA512,
}
PRIV_PROTOCOLS: dict[str, Any] = {
    "AES": snmp_config.USM_PRIV_CFB128_AES,
    # AES-192/256 key extension as Cisco, Arista and Juniper implement it (draft-reeder), which
    # pysnmp and snmpsim call plain AES192/AES256; the Blumenthal variant is what net-snmp means.
    "AES192": snmp_config.USM_PRIV_CFB192_AES,
    "AES256": snmp_config.USM_PRIV_CFB256_AES,
}

_AUTH_ERRORS = (
    errind.UnknownUserName,
    errind.WrongDigest,
    errind.AuthenticationFailure,
    errind.AuthenticationError,
    errind.DecryptionError,
    errind.UnknownSecurityName,
    errind.UnsupportedSecurityLevel,
    errind.UnknownCommunityName,
    errind.NotInTimeWindow,
)


@dataclass(frozen=True)
class SnmpTarget:
    """One switch to poll, with its secrets already resolved (kept as SecretStr, never printed)."""

    name: str
    address: str
    port: int = 161
    version: Literal["2c", "3"] = "2c"
    community: SecretStr | None = None
    user: str | None = None
    auth_protocol: str | None = None
    auth_key: SecretStr | None = None
    priv_protocol: str | None = None
    priv_key: SecretStr | None = None
    context: str | None = None
    timeout_s: float = 10.0
    retries: int = 2
    platform: str | None = None


@dataclass(frozen=True)
class CollectorOptions:
    concurrency: int = 64
    max_repetitions: int = 40
    device_deadline_s: float = 300.0
    max_rows_per_table: int = 200_000
    """A table longer than this is cut (and reported): guards memory against a runaway agent."""
    per_address_in_flight: int = 4
    """SNMPv2c fast path: requests outstanding to one agent address at once (see ``V2cClient``)."""
    v2c_fast_path: bool = True
    """SNMPv2c through our own BER codec on one shared socket (:mod:`connectors.snmp.v2c`), ~10x less
    CPU than pysnmp; ``False`` sends SNMPv2c through pysnmp too (SNMPv3 always goes through pysnmp)."""


_TAGS: dict[Any, str] = {
    univ.Integer.tagSet: "int",
    rfc1902.Integer32.tagSet: "int",
    univ.OctetString.tagSet: "octets",
    univ.ObjectIdentifier.tagSet: "oid",
    rfc1902.IpAddress.tagSet: "ipaddr",
    rfc1902.Counter32.tagSet: "counter",
    rfc1902.Gauge32.tagSet: "gauge",
    rfc1902.Unsigned32.tagSet: "gauge",
    rfc1902.TimeTicks.tagSet: "timeticks",
    rfc1902.Opaque.tagSet: "opaque",
    rfc1902.Counter64.tagSet: "counter64",
    univ.Null.tagSet: "null",
    rfc1905.NoSuchObject.tagSet: "nosuch",
    rfc1905.NoSuchInstance.tagSet: "nosuch",
    rfc1905.EndOfMibView.tagSet: "end",
}
_AS_INT = frozenset({"int", "counter", "gauge", "timeticks", "counter64"})
_AS_BYTES = frozenset({"octets", "ipaddr", "opaque"})


def convert(value: Any) -> Value:
    """A pysnmp value as ``(tag, python value)`` (the form ``lldp_mib`` interprets)."""
    tag = _TAGS.get(value.tagSet, "unknown")
    if tag in _AS_INT:
        return tag, int(value)
    if tag in _AS_BYTES:
        return tag, value.asOctets()
    if tag == "oid":
        return tag, ".".join(str(x) for x in value.asTuple())
    return tag, None


def classify(error: Any, target: SnmpTarget) -> tuple[CollectionStatus, str]:
    """Status and a one-line, secret-free detail for a pysnmp error indication."""
    if isinstance(error, errind.RequestTimedOut):
        tries = target.retries + 1
        hint = " (SNMPv2c: a wrong community looks the same)" if target.version == "2c" else ""
        return CollectionStatus.TIMEOUT, f"no response in {tries} x {target.timeout_s:g}s{hint}"
    if isinstance(error, _AUTH_ERRORS):
        return CollectionStatus.AUTH_FAILURE, f"SNMP{target.version} authentication failed: {error}"
    return CollectionStatus.ERROR, f"SNMP error: {error}"


def _auth(target: SnmpTarget) -> CommunityData | UsmUserData:
    if target.version == "2c":
        if target.community is None:
            raise ValueError("SNMPv2c target without a community")
        return CommunityData(target.community.get_secret_value(), mpModel=1)
    if not target.user:
        raise ValueError("SNMPv3 target without a user")
    kwargs: dict[str, Any] = {}
    if target.auth_key is not None:
        kwargs["authKey"] = target.auth_key.get_secret_value()
        kwargs["authProtocol"] = AUTH_PROTOCOLS[target.auth_protocol or "SHA"]
    if target.priv_key is not None:
        kwargs["privKey"] = target.priv_key.get_secret_value()
        kwargs["privProtocol"] = PRIV_PROTOCOLS[target.priv_protocol or "AES"]
    return UsmUserData(target.user, **kwargs)


class _BaseSession:
    """One device's walk state and the order of its walks; subclasses do the SNMP."""

    def __init__(self, target: SnmpTarget, options: CollectorOptions) -> None:
        self.target = target
        self.options = options
        self.walk = DeviceWalk(device=target.name, configured_platform=target.platform)

    def fail(self, status: CollectionStatus, detail: str) -> None:
        self.walk.failure, self.walk.failure_detail = status, detail

    async def open(self) -> None:
        raise NotImplementedError

    async def _system(self) -> bool:
        raise NotImplementedError

    async def _walk(self, name: str, base: OID) -> bool:
        raise NotImplementedError

    async def run(self) -> DeviceWalk:
        try:
            await self.open()
        except Exception as err:  # name resolution, bad address: the switch is unreachable, the run goes on
            self.fail(CollectionStatus.UNREACHABLE, f"cannot reach {self.target.address}: {err}")
            return self.walk
        if not await self._system():
            return self.walk
        for name, base in V1_WALKS:
            if not await self._walk(name, base):
                return self.walk
        if not self.walk.tables.get("lldpRemTable") and not self.walk.tables.get("lldpLocalSystemData"):
            for name, base in V2_WALKS:  # 802.1AB-2009 agents may only implement LLDP-V2-MIB
                if not await self._walk(name, base):
                    return self.walk
        for name, base in INTERFACE_WALKS:
            if not await self._walk(name, base):
                return self.walk
        return self.walk

    def _stopped(self, name: str, error: Any) -> None:
        state, detail = classify(error, self.target)
        if state is CollectionStatus.TIMEOUT and (self.walk.system or any(self.walk.tables.values())):
            detail = f"stopped answering during {name} after {self.walk.varbinds()} varbinds: {detail}"
        self.fail(state, detail)
        self.walk.incomplete[name] = detail


class _Session(_BaseSession):
    """One device walked through pysnmp (SNMPv3, or SNMPv2c with the fast path off)."""

    def __init__(self, engine: SnmpEngine, target: SnmpTarget, options: CollectorOptions) -> None:
        super().__init__(target, options)
        self.engine = engine
        self.auth = _auth(target)
        self.context = ContextData(contextName=target.context or "")
        self.transport: UdpTransportTarget | None = None

    async def open(self) -> None:
        self.transport = await UdpTransportTarget.create(
            (self.target.address, self.target.port), timeout=self.target.timeout_s, retries=self.target.retries
        )

    async def _system(self) -> bool:
        assert self.transport is not None
        objects = [ObjectType(ObjectIdentity(dotted(o))) for o in SYSTEM_OIDS]
        error, status, _index, varbinds = await get_cmd(
            self.engine, self.auth, self.transport, self.context, *objects, lookupMib=False
        )
        self.walk.requests += 1
        if error:
            self.fail(*classify(error, self.target))
            return False
        if status:
            self.fail(CollectionStatus.ERROR, f"agent answered GET of the system group with {status.prettyPrint()}")
            return False
        for name, value in varbinds:
            self.walk.system[tuple(name.asTuple())] = convert(value)
        return True

    async def _walk(self, name: str, base: OID) -> bool:
        assert self.transport is not None
        table: dict[OID, Value] = self.walk.tables.setdefault(name, {})
        cut = len(base)
        limit = self.options.max_rows_per_table
        walker = bulk_walk_cmd(
            self.engine,
            self.auth,
            self.transport,
            self.context,
            0,
            self.options.max_repetitions,
            ObjectType(ObjectIdentity(dotted(base))),
            lexicographicMode=False,
            lookupMib=False,
        )
        async with contextlib.aclosing(walker) as responses:
            async for error, status, _index, varbinds in responses:
                self.walk.requests += 1
                if error:
                    # pysnmp's bulk walk retries forever on requestTimedOut; we stop at the first.
                    self._stopped(name, error)
                    return False
                if status:
                    detail = f"agent answered {status.prettyPrint()} during {name}"
                    self.fail(CollectionStatus.ERROR, detail)
                    self.walk.incomplete[name] = detail
                    return False
                for oid_, value in varbinds:
                    table[tuple(oid_.asTuple())[cut:]] = convert(value)
                if len(table) > limit:
                    self.walk.incomplete[name] = f"more than {limit} varbinds; walk stopped there"
                    return True
        return True


_ENDINGS = frozenset({"end"})
"""Values that end a walk. pysnmp's ``bulk_walk_cmd`` tests for ``rfc1902.Null`` and endOfMibView,
but a decoded NULL is a plain ``univ.Null`` and the exceptions are other classes, so in practice
only endOfMibView ends it; NULL and noSuchObject/noSuchInstance land in the table (and
``interpret`` quarantines them where a column needs a real value)."""


class _FastSession(_BaseSession):
    """One SNMPv2c device walked through the shared :class:`V2cClient`, with the semantics of
    pysnmp's ``get_cmd`` / ``bulk_walk_cmd(lexicographicMode=False)`` and the same statuses and
    details, so :func:`interpret` cannot tell the two paths apart."""

    def __init__(self, client: V2cClient, target: SnmpTarget, options: CollectorOptions) -> None:
        super().__init__(target, options)
        if target.community is None:
            raise ValueError("SNMPv2c target without a community")
        self.client = client
        self.community = target.community.get_secret_value().encode("latin-1")  # as pyasn1 encodes a str
        self.address: tuple[str, int] | None = None

    async def open(self) -> None:
        try:  # a numeric address needs no resolver thread
            self.address = (str(ipaddress.IPv4Address(self.target.address)), self.target.port)
            return
        except ValueError:
            pass
        # a name: pysnmp's resolver, so a bad one fails with the same message on both paths
        transport = await UdpTransportTarget.create((self.target.address, self.target.port))
        self.address = transport.transport_address

    async def _system(self) -> bool:
        assert self.address is not None
        community = self.community
        try:
            message = await self.client.request(
                self.address,
                community,
                lambda rid: get_request(community, rid, SYSTEM_OIDS),
                self.target.timeout_s,
                self.target.retries,
            )
        except V2cTimeout:
            self.walk.requests += 1
            self.fail(*classify(errind.requestTimedOut, self.target))
            return False
        self.walk.requests += 1
        if message.error_status:
            status = ERROR_STATUS_NAMES[message.error_status]
            self.fail(CollectionStatus.ERROR, f"agent answered GET of the system group with {status}")
            return False
        for oid_, value in message.varbinds:
            self.walk.system[oid_] = value
        return True

    async def _walk(self, name: str, base: OID) -> bool:
        assert self.address is not None
        table: dict[OID, Value] = self.walk.tables.setdefault(name, {})
        cut = len(base)
        limit = self.options.max_rows_per_table
        repetitions = self.options.max_repetitions
        community = self.community
        last = base
        while True:
            seed = last
            try:
                message = await self.client.request(
                    self.address,
                    community,
                    partial(get_bulk_request, community, oid=seed, max_repetitions=repetitions),
                    self.target.timeout_s,
                    self.target.retries,
                )
            except V2cTimeout:
                self.walk.requests += 1
                self._stopped(name, errind.requestTimedOut)
                return False
            if message.error_status == 2:
                # noSuchName (an SNMPv1 agent behind a proxy): pysnmp hides it, hands back the previous
                # page once more (on the first page: the request itself, base = NULL) and ends the walk.
                self.walk.requests += 1
                if seed == base:
                    table[()] = ("null", None)
                if len(table) > limit:
                    self.walk.incomplete[name] = f"more than {limit} varbinds; walk stopped there"
                return True
            if message.error_status:
                self.walk.requests += 1
                detail = f"agent answered {ERROR_STATUS_NAMES[message.error_status]} during {name}"
                self.fail(CollectionStatus.ERROR, detail)
                self.walk.incomplete[name] = detail
                return False
            varbinds = message.varbinds
            if not varbinds:
                self.walk.requests += 1
                self._stopped(name, errind.emptyResponse)  # pysnmp's "Empty SNMP response message"
                return False
            rows = 0
            ended = False
            for oid_, value in varbinds:
                if value[0] in _ENDINGS or oid_[:cut] != base:
                    ended = True
                    break
                table[oid_[cut:]] = value
                rows += 1
            if rows:
                self.walk.requests += 1  # pysnmp's walk yields (and we count) only pages with rows
            if len(table) > limit:
                self.walk.incomplete[name] = f"more than {limit} varbinds; walk stopped there"
                return True
            if ended:
                return True
            last = varbinds[-1][0]
            if last <= seed:
                # pysnmp would ask again for ever (until the device deadline); net-snmp stops here too.
                detail = f"agent returned a non-increasing OID {dotted(last)} during {name}"
                self.fail(CollectionStatus.ERROR, detail)
                self.walk.incomplete[name] = detail
                return False


async def _collect_one(
    make: Callable[[], _BaseSession], target: SnmpTarget, options: CollectorOptions, gate: asyncio.Semaphore
) -> DeviceWalk:
    async with gate:
        try:
            session = make()
        except (ValueError, KeyError) as err:
            return DeviceWalk(device=target.name, failure=CollectionStatus.ERROR, failure_detail=str(err))
        try:
            async with asyncio.timeout(options.device_deadline_s):
                return await session.run()
        except TimeoutError:
            session.fail(
                CollectionStatus.TIMEOUT,
                f"device deadline of {options.device_deadline_s:g}s exceeded after {session.walk.varbinds()} varbinds",
            )
            return session.walk
        except Exception as err:  # a pysnmp bug or a malformed answer it could not decode
            session.fail(CollectionStatus.ERROR, f"{type(err).__name__}: {err}")
            return session.walk


def _engine() -> SnmpEngine:
    """A pysnmp engine with its MIB view already built: pysnmp builds it (~0.5 s of CPU, a pysmi
    parser) on the first request, which would block the event loop while SNMPv2c requests of the
    fast path are in flight and eat into their timeouts."""
    engine = SnmpEngine()
    varbinds.CommandGeneratorVarBinds().make_varbinds(engine.cache, [ObjectType(ObjectIdentity(dotted(SYS_NAME)))])
    return engine


async def walk_devices(targets: Sequence[SnmpTarget], options: CollectorOptions) -> AsyncIterator[DeviceWalk]:
    """Walk every target with at most ``options.concurrency`` in flight; yields each device's walk
    as it finishes. SNMPv2c devices share one :class:`V2cClient` (one socket), SNMPv3 devices one
    pysnmp engine; each is created only if some target needs it (a pysnmp engine costs ~0.5 s of
    CPU to set up its MIB machinery)."""
    fast = options.v2c_fast_path
    any_v2c = fast and any(t.version == "2c" for t in targets)
    client = await V2cClient.open(options.per_address_in_flight) if any_v2c else None
    engine = _engine() if any(t.version != "2c" or not fast for t in targets) else None
    gate = asyncio.Semaphore(options.concurrency)

    def session_for(target: SnmpTarget) -> Callable[[], _BaseSession]:
        if client is not None and target.version == "2c":
            return lambda: _FastSession(client, target, options)
        assert engine is not None
        return lambda: _Session(engine, target, options)

    try:
        tasks = [asyncio.ensure_future(_collect_one(session_for(t), t, options, gate)) for t in targets]
        try:
            for finished in asyncio.as_completed(tasks):
                yield await finished
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        if engine is not None:
            engine.close_dispatcher()
        if client is not None:
            client.close()


@dataclass
class CollectionStats:
    devices: int = 0
    requests: int = 0
    varbinds: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0  # CPU time of the collector thread (walk + interpretation)


def collect(
    targets: Iterable[SnmpTarget], options: CollectorOptions | None = None, stats: CollectionStats | None = None
) -> Iterator[LldpCollection]:
    """Walk and interpret every target; yields one :class:`LldpCollection` per device as it
    completes, so the caller can land results while the rest are still being walked.

    The event loop runs in a worker thread (the caller may be inside Dagster or another loop);
    results cross over a queue. Closing the generator early stops the walk.
    """
    options = options or CollectorOptions()
    targets = list(targets)
    out: queue.SimpleQueue[LldpCollection | BaseException | None] = queue.SimpleQueue()
    stop = threading.Event()
    stats = stats if stats is not None else CollectionStats()

    async def main() -> None:
        async for walk in walk_devices(targets, options):
            stats.requests += walk.requests
            stats.varbinds += walk.varbinds()
            if stop.is_set():
                return
            out.put(interpret(walk))

    def worker() -> None:
        started_cpu = time.thread_time()
        try:
            asyncio.run(main())
        except BaseException as err:
            out.put(err)
        finally:
            stats.cpu_s = time.thread_time() - started_cpu
            out.put(None)

    started = time.perf_counter()
    thread = threading.Thread(target=worker, name="snmp-collector", daemon=True)
    thread.start()
    try:
        while True:
            item = out.get()
            if item is None:
                break
            if isinstance(item, BaseException):
                raise item
            stats.devices += 1
            yield item
    finally:
        stop.set()
        thread.join(timeout=30)
        stats.wall_s = time.perf_counter() - started
