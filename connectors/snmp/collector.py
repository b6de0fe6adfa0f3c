"""Walk many switches' LLDP tables over SNMP: pysnmp 7 asyncio, one engine, bounded fan-out.

One :class:`~pysnmp.entity.engine.SnmpEngine` serves a whole collection run (its dispatcher,
USM user table and message cache are per engine; a second engine per device would multiply the
CPU and the sockets). ``concurrency`` devices are in flight at once; each device's walks run one
after another so a slow switch never holds more than one request slot. Every request has the
device's timeout and retries, and every device has an overall deadline, so one switch that
trickles answers cannot hold up the run.

Failures are data: a device that never answers is ``timeout`` (SNMPv2c cannot tell a wrong
community from a dead agent: both are silence), a USM report (unknown user, wrong digest,
decryption error) is ``auth_failure``, an agent that stops answering mid-walk is ``timeout`` with
the table it stopped in -- and the walk keeps what completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pyasn1.type import univ
from pydantic import SecretStr
from pysnmp.entity import config as snmp_config
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

from connectors.snmp.lldp_mib import DeviceWalk, LldpCollection, Value, interpret
from connectors.snmp.oids import INTERFACE_WALKS, OID, SYSTEM_OIDS, V1_WALKS, V2_WALKS, dotted
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


class _Session:
    """One device's walk state."""

    def __init__(self, engine: SnmpEngine, target: SnmpTarget, options: CollectorOptions) -> None:
        self.engine = engine
        self.target = target
        self.options = options
        self.walk = DeviceWalk(device=target.name, configured_platform=target.platform)
        self.auth = _auth(target)
        self.context = ContextData(contextName=target.context or "")
        self.transport: UdpTransportTarget | None = None

    def fail(self, status: CollectionStatus, detail: str) -> None:
        self.walk.failure, self.walk.failure_detail = status, detail

    async def run(self) -> DeviceWalk:
        try:
            self.transport = await UdpTransportTarget.create(
                (self.target.address, self.target.port), timeout=self.target.timeout_s, retries=self.target.retries
            )
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
                    state, detail = classify(error, self.target)
                    if state is CollectionStatus.TIMEOUT and (self.walk.system or any(self.walk.tables.values())):
                        detail = f"stopped answering during {name} after {self.walk.varbinds()} varbinds: {detail}"
                    self.fail(state, detail)
                    self.walk.incomplete[name] = detail
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


async def _collect_one(
    engine: SnmpEngine, target: SnmpTarget, options: CollectorOptions, gate: asyncio.Semaphore
) -> DeviceWalk:
    async with gate:
        try:
            session = _Session(engine, target, options)
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


async def walk_devices(targets: Sequence[SnmpTarget], options: CollectorOptions) -> AsyncIterator[DeviceWalk]:
    """Walk every target with one engine and at most ``options.concurrency`` in flight; yields
    each device's walk as it finishes."""
    engine = SnmpEngine()
    gate = asyncio.Semaphore(options.concurrency)
    try:
        tasks = [asyncio.ensure_future(_collect_one(engine, t, options, gate)) for t in targets]
        try:
            for finished in asyncio.as_completed(tasks):
                yield await finished
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        engine.close_dispatcher()


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
