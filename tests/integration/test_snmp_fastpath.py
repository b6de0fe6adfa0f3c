"""The SNMPv2c fast path (our BER codec on one shared socket) against the pysnmp path, over real
sockets: the same walks, statuses and details from the same agents, including agents that
misbehave; and garbage on the wire never crashes or hangs a run."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import pytest
from pydantic import SecretStr
from snmp import support
from snmp.support import SnmpSite
from snmp_scripted_agent import Request, ScriptedAgent, response

from assets.lldp.assets import targets_from
from connectors.snmp import CollectorOptions, DeviceWalk, SnmpTarget, ber, interpret, walk_devices
from connectors.snmp.oids import IF_DESCR, IF_HIGH_SPEED, IF_NAME, LLDP_REM_TABLE, SYS_DESCR, SYS_NAME, SYS_OBJECT_ID
from connectors.snmp.v2c import V2cClient
from core.quality import CollectionStatus

pytestmark = pytest.mark.standalone  # starts what it needs itself (tests/conftest.py: the scheduler)

snmp_site = support.snmp_site  # the shared session fixture (one snmpsim per spec)

MIB: dict[ber.OID, ber.Value] = {
    SYS_DESCR: ("octets", b"Linux scripted 6.1.0 #1 SMP x86_64"),
    SYS_OBJECT_ID: ("oid", "1.3.6.1.4.1.8072.3.2.10"),
    SYS_NAME: ("octets", b"scripted"),
    **{(*LLDP_REM_TABLE, 4, 0, p, 1): ("int", 4) for p in range(1, 9)},
    **{(*LLDP_REM_TABLE, 5, 0, p, 1): ("octets", bytes([2, 0, 0, 0, 0, p])) for p in range(1, 9)},
    **{(*LLDP_REM_TABLE, 6, 0, p, 1): ("int", 3) for p in range(1, 9)},
    **{(*LLDP_REM_TABLE, 7, 0, p, 1): ("octets", bytes([2, 0, 0, 0, 1, p])) for p in range(1, 9)},
    **{(*IF_NAME, p): ("octets", f"swp{p}".encode()) for p in range(1, 9)},
    (*IF_NAME, 9): ("null", None),  # exceptions and NULL inside a table: pysnmp keeps walking
    (*IF_NAME, 10): ("nosuch", None),
    (*IF_NAME, 11): ("nosuchinstance", None),
    (*IF_NAME, 12): ("octets", b"swp12"),
    (*IF_DESCR, 1): ("counter64", 2**64 - 1),
    (*IF_DESCR, 2): ("ipaddr", b"\x0a\x00\x00\x01"),
    (*IF_DESCR, 3): ("opaque", b"\x01\x02"),
    (*IF_DESCR, 4): ("timeticks", 2**32 - 1),
    (*IF_DESCR, 5): ("counter", 0),
    (*IF_DESCR, 6): ("oid", "0.0"),
    **{(*IF_HIGH_SPEED, p): ("gauge", 100_000) for p in range(1, 9)},
}


def _target(port: int, **kw: Any) -> SnmpTarget:
    return SnmpTarget(
        name="scripted", address="127.0.0.1", port=port, community=SecretStr("public"),
        timeout_s=kw.pop("timeout_s", 0.3), retries=kw.pop("retries", 1), platform="linux_lldpd",
    )  # fmt: skip


def _walk(target: SnmpTarget, fast: bool, **options: Any) -> DeviceWalk:
    async def run() -> DeviceWalk:
        async for walk in walk_devices([target], CollectorOptions(v2c_fast_path=fast, **options)):
            return walk
        raise AssertionError("no walk")

    return asyncio.run(run())


Hook = Callable[[Request], list[bytes] | None]


def _both(hook: Callable[[], Hook] | None, **options: Any) -> tuple[DeviceWalk, DeviceWalk]:
    """The same agent (a fresh one, with a fresh hook) walked by the pysnmp path, then the fast path."""
    walks = []
    for fast in (False, True):
        with ScriptedAgent(dict(MIB), hook=hook() if hook else None) as agent:
            walks.append(_walk(_target(agent.port), fast=fast, **options))
    return walks[0], walks[1]


def _same(slow: DeviceWalk, fast: DeviceWalk) -> None:
    assert asdict(fast) == asdict(slow)
    assert interpret(fast) == interpret(slow)


def _nth_bulk(n: int, make: Callable[[Request], list[bytes]]) -> Callable[[], Hook]:
    """Misbehave on the n-th GETBULK only (both paths send the same sequence of requests)."""

    def factory() -> Hook:
        seen = {"bulk": 0}

        def hook(request: Request) -> list[bytes] | None:
            if request.message.pdu_type != ber.GET_BULK_REQUEST:
                return None
            seen["bulk"] += 1
            return make(request) if seen["bulk"] == n else None

        return hook

    return factory


@pytest.mark.integration
def test_clean_walk_is_identical_on_both_paths() -> None:
    slow, fast = _both(None, max_repetitions=5)
    _same(slow, fast)
    assert fast.failure is None
    assert fast.tables["ifName"][(9,)] == ("null", None) and fast.tables["ifName"][(10,)] == ("nosuch", None)
    assert fast.tables["ifDescr"][(1,)] == ("counter64", 2**64 - 1)
    assert len(fast.tables["lldpRemTable"]) == 32
    collection = interpret(fast)  # the odd-typed ifName/ifDescr values are quarantined, the rows land
    assert collection.status is CollectionStatus.PARTIAL and len(collection.neighbors) == 8


def _reply(varbinds: list[tuple[ber.OID, ber.Value]], **kw: Any) -> Callable[[Request], list[bytes]]:
    return lambda r: [response(r.message.request_id, varbinds, **kw)]


MISBEHAVIOUR: dict[str, Callable[[], Hook]] = {
    "genErr mid-walk": _nth_bulk(2, _reply([], status=5, index=1)),
    "tooBig mid-walk": _nth_bulk(3, _reply([], status=1)),
    "noSuchName on a first page": _nth_bulk(1, _reply([], status=2, index=1)),
    "noSuchName on a later page": _nth_bulk(2, _reply([], status=2, index=1)),
    "empty varbind list": _nth_bulk(2, _reply([])),
    "endOfMibView mid-page": _nth_bulk(2, lambda r: [response(r.message.request_id, [(r.oid, ("end", None))])]),
    "leaves the subtree at once": _nth_bulk(2, _reply([((1, 3, 6, 1, 6), ("int", 1))])),
    "GET answered genErr": lambda: (
        lambda r: [response(r.message.request_id, [], status=5)] if r.message.pdu_type == ber.GET_REQUEST else None
    ),
    "GET answered with fewer varbinds": lambda: (
        lambda r: (
            [response(r.message.request_id, [(SYS_NAME, ("octets", b"x"))])]
            if r.message.pdu_type == ber.GET_REQUEST
            else None
        )
    ),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(MISBEHAVIOUR))
def test_misbehaving_agent_gives_the_same_walk_on_both_paths(case: str) -> None:
    slow, fast = _both(MISBEHAVIOUR[case], max_repetitions=4)
    _same(slow, fast)


@pytest.mark.integration
def test_row_cap_is_identical_on_both_paths() -> None:
    slow, fast = _both(None, max_repetitions=3, max_rows_per_table=10)
    _same(slow, fast)
    assert fast.incomplete["lldpRemTable"] == "more than 10 varbinds; walk stopped there"


@pytest.mark.integration
def test_silence_is_the_same_timeout_on_both_paths() -> None:
    slow, fast = _both(lambda: lambda r: [] if r.n >= 3 else None, max_repetitions=4)
    _same(slow, fast)
    assert fast.failure is CollectionStatus.TIMEOUT
    assert fast.failure_detail == (
        "stopped answering during lldpRemTable after 7 varbinds: "
        "no response in 2 x 0.3s (SNMPv2c: a wrong community looks the same)"
    )


def _noise(request: Request) -> list[bytes]:
    """Everything a network or a confused agent can send before the real answer."""
    rid = request.message.request_id
    return [
        os.urandom(50),
        b"",
        request.answer[: len(request.answer) // 2],  # truncated
        response(rid + 1, [(SYS_NAME, ("octets", b"stray"))]),  # someone else's request-id
        response(rid, [(SYS_NAME, ("octets", b"evil"))], community=b"wrong"),  # wrong community
        response(rid, [(SYS_NAME, ("octets", b"v1"))], version=0),  # SNMPv1
        response(rid, request.message.varbinds, pdu=ber.GET_REQUEST),  # not a Response
        request.answer,
        request.answer,  # duplicate: arrives after the request is answered
    ]


@pytest.mark.integration
def test_noise_before_every_answer_changes_nothing() -> None:
    with ScriptedAgent(dict(MIB)) as agent:
        clean = _walk(_target(agent.port), fast=True, max_repetitions=4)
    with ScriptedAgent(dict(MIB), hook=_noise) as agent:
        noisy = _walk(_target(agent.port), fast=True, max_repetitions=4)
    assert asdict(noisy) == asdict(clean)


@pytest.mark.integration
def test_client_drops_noise_and_counts_it() -> None:
    async def run() -> tuple[ber.Message, V2cClient]:
        client = await V2cClient.open()
        try:
            with ScriptedAgent(dict(MIB), hook=_noise) as agent:
                message = await client.request(
                    ("127.0.0.1", agent.port), b"public", lambda rid: ber.get_request(b"public", rid, [SYS_NAME]), 1, 0
                )
                await asyncio.sleep(0.1)  # the duplicate
            return message, client
        finally:
            client.close()

    message, client = asyncio.run(run())
    assert message.varbinds == [(SYS_NAME, ("octets", b"scripted"))]
    assert client.malformed == 3 and client.stray == 5
    assert client.pending == {}


@pytest.mark.integration
def test_an_agent_that_only_sends_garbage_times_out_without_crashing() -> None:
    with ScriptedAgent(dict(MIB), hook=lambda r: [os.urandom(n) for n in (1, 17, 300, 1400)]) as agent:
        walk = _walk(_target(agent.port, timeout_s=0.2, retries=1), fast=True)
    assert walk.failure is CollectionStatus.TIMEOUT
    assert walk.failure_detail == "no response in 2 x 0.2s (SNMPv2c: a wrong community looks the same)"
    # the garbage never counts as an answer, and the walk gives up after its one retry of the
    # first GET: the same request twice, nothing after it
    assert [m.pdu_type for m in agent.requests] == [ber.GET_REQUEST] * 2
    assert agent.requests[0].varbinds == agent.requests[1].varbinds


@pytest.mark.integration
def test_non_increasing_oids_stop_the_walk_at_once() -> None:
    """pysnmp would ask again for ever (bounded only by the device deadline); we stop and say why."""
    loop_back = _nth_bulk(3, lambda r: [response(r.message.request_id, [((*LLDP_REM_TABLE, 4, 0, 1, 1), ("int", 4))])])
    with ScriptedAgent(dict(MIB), hook=loop_back()) as agent:
        walk = _walk(_target(agent.port), fast=True, max_repetitions=4)
    # the walk stopped at the answer that went backwards: that GETBULK is the last request sent
    # (no retry, no re-ask, no other table), where pysnmp would keep asking
    bulks = [m for m in agent.requests if m.pdu_type == ber.GET_BULK_REQUEST]
    assert len(bulks) == 3 and agent.requests[-1] is bulks[-1]
    assert walk.failure is CollectionStatus.ERROR
    assert (
        walk.failure_detail == "agent returned a non-increasing OID 1.0.8802.1.1.2.1.4.1.1.4.0.1.1 during lldpRemTable"
    )
    assert walk.incomplete == {"lldpRemTable": walk.failure_detail}


@pytest.mark.integration
def test_one_socket_serves_every_device() -> None:
    with ScriptedAgent(dict(MIB)) as agent:
        targets = [
            SnmpTarget(name=f"d{i}", address="127.0.0.1", port=agent.port, community=SecretStr("public"))
            for i in range(12)
        ]

        async def run() -> list[DeviceWalk]:
            return [w async for w in walk_devices(targets, CollectorOptions(concurrency=12, max_repetitions=10))]

        walks = asyncio.run(run())
    assert len(walks) == 12 and all(w.failure is None for w in walks)
    assert len(agent.sources) == 1  # twelve devices, one socket
    assert {len(w.tables["lldpRemTable"]) for w in walks} == {32}


@pytest.mark.integration
def test_fast_path_equals_pysnmp_path_on_the_twin(snmp_site: Callable[..., SnmpSite]) -> None:
    site = snmp_site("h100-1su")
    targets, _ = targets_from(site.settings.sources.switches)
    v2c = [t for t in targets if t.version == "2c"]
    chosen = [t for t in v2c if not t.name.startswith("eth-fault")][:3]
    chosen += [t for t in v2c if t.name in ("eth-fault-garbage", "eth-fault-nolldp")]
    assert len(chosen) == 5

    def walks(fast: bool) -> dict[str, DeviceWalk]:
        async def run() -> dict[str, DeviceWalk]:
            options = CollectorOptions(concurrency=2, v2c_fast_path=fast)
            return {w.device: w async for w in walk_devices(chosen, options)}

        return asyncio.run(run())

    slow, fast = walks(False), walks(True)
    assert set(fast) == {t.name for t in chosen}
    for name in fast:
        _same(slow[name], fast[name])
    assert interpret(fast["eth-fault-garbage"]).status is CollectionStatus.PARTIAL
    assert interpret(fast["eth-fault-nolldp"]).status is CollectionStatus.NO_DATA
    assert sum(len(n.neighbors) for n in map(interpret, fast.values())) > 0
