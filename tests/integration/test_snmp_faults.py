"""Bad input over real sockets: an agent that stops answering mid-walk, huge tables, a dead port,
a missing secret. Each ends in a status with a reason, never a crash or a hang."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from assets.lldp.assets import targets_from
from connectors.snmp import CollectorOptions, LldpCollection, SnmpTarget, ber, collect
from connectors.snmp.oids import LLDP_REM_TABLE
from core.quality import CollectionStatus
from settings import parse_settings
from simulator.snmp.records import LLDP_LOC, LLDP_REM, render
from simulator.snmp.twin import SnmpTwinOptions, free_udp_port, launch, stop

pytestmark = pytest.mark.standalone  # starts what it needs itself (tests/conftest.py: the scheduler)

HUGE_NEIGHBORS = 1500


def _huge_records() -> list[tuple[str, str, str]]:
    """A switch with 1500 neighbours on 48 ports (many per port, as behind an unmanaged hub)."""
    rows = [
        ("1.3.6.1.2.1.1.1.0", "4", "Linux huge 6.1.0 #1 SMP x86_64"),
        ("1.3.6.1.2.1.1.2.0", "6", "1.3.6.1.4.1.8072.3.2.10"),
        ("1.3.6.1.2.1.1.5.0", "4", "huge"),
        (f"{LLDP_LOC}.1.0", "2", "4"),
        (f"{LLDP_LOC}.2.0", "4x", "020000000001"),
    ]
    for port in range(1, 49):
        rows.append((f"1.3.6.1.2.1.31.1.1.1.1.{port}", "4", f"swp{port}"))
    for i in range(HUGE_NEIGHBORS):
        port, mac = i % 48 + 1, (0x020000100000 + i).to_bytes(6, "big").hex()
        key = f"{7 + i}.{port}.{i + 1}"
        rows += [
            (f"{LLDP_REM}.4.{key}", "2", "4"),
            (f"{LLDP_REM}.5.{key}", "4x", mac),
            (f"{LLDP_REM}.6.{key}", "2", "3"),
            (f"{LLDP_REM}.7.{key}", "4x", mac),
            (f"{LLDP_REM}.9.{key}", "4", f"vm{i:05d}"),
        ]
    return rows


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    workdir = tmp_path_factory.mktemp("snmp-faults")
    data = workdir / "data"
    data.mkdir()
    (data / "huge.snmprec").write_text(render(_huge_records()))
    pid, port = launch(data, workdir, SnmpTwinOptions(), "huge")
    yield port
    stop(pid)


class Relay:
    """A UDP relay in front of the agent that forwards ``answers`` responses, then goes silent:
    an agent that stops answering in the middle of a walk."""

    def __init__(self, upstream_port: int, answers: int) -> None:
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.back.connect(("127.0.0.1", upstream_port))
        self.port = self.front.getsockname()[1]
        self.answers = answers
        self.client: tuple[str, int] | None = None
        self.log: list[tuple[str, bytes]] = []  # ("request", datagram) from the client, ("answer", ...) back
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            ready, _, _ = select.select([self.front, self.back], [], [], 0.1)
            for sock in ready:
                data, addr = sock.recvfrom(65535)
                if sock is self.front:
                    self.client = addr
                    self.log.append(("request", data))
                    self.back.send(data)
                elif self.answers > 0 and self.client is not None:
                    self.answers -= 1
                    self.log.append(("answer", data))
                    self.front.sendto(data, self.client)

    def close(self) -> None:
        self.running = False
        self.thread.join(timeout=2)
        self.front.close()
        self.back.close()


def _target(port: int, **kw: object) -> SnmpTarget:
    return SnmpTarget(
        name=str(kw.pop("name", "huge")), address="127.0.0.1", port=port, community=SecretStr("huge"),
        timeout_s=float(kw.pop("timeout_s", 5.0)), retries=int(kw.pop("retries", 1)),  # type: ignore[call-overload]
        platform="linux_lldpd",
    )


def _one(target: SnmpTarget, options: CollectorOptions | None = None) -> LldpCollection:
    (result,) = list(collect([target], options or CollectorOptions()))
    return result


@pytest.mark.integration
def test_huge_table_is_collected_whole(agent: int) -> None:
    c = _one(_target(agent))
    assert c.status is CollectionStatus.OK
    assert len(c.neighbors) == HUGE_NEIGHBORS
    assert sum(1 for n in c.neighbors if n.local_port == "swp1") == 32  # many neighbours per port
    assert len({n.key for n in c.neighbors}) == HUGE_NEIGHBORS
    assert c.neighbors[0].remote_port is None and c.neighbors[0].port_id_subtype == 3


@pytest.mark.integration
def test_table_over_the_row_cap_is_cut_and_reported(agent: int) -> None:
    c = _one(_target(agent), CollectorOptions(max_rows_per_table=1000))
    assert c.status is CollectionStatus.PARTIAL
    assert c.neighbors == []
    assert c.detail == "lldpRemTable: more than 1000 varbinds; walk stopped there"
    assert [q.reason for q in c.quarantined] == [
        "lldpRemTable not landed: more than 1000 varbinds; walk stopped there"
    ]


@pytest.mark.integration
def test_agent_that_stops_answering_mid_walk(agent: int) -> None:
    relay = Relay(agent, answers=6)  # system GET + lldpLocalSystemData + a few lldpRemTable pages
    try:
        c = _one(_target(relay.port, timeout_s=0.5, retries=1))
    finally:
        relay.close()
    # After the last answer the collector asks once and retries once (retries=1), then gives up
    # the device: no third attempt, no walk of the tables after lldpRemTable.
    kinds = [kind for kind, _ in relay.log]
    assert kinds.count("answer") == 6
    after_last_answer = [data for kind, data in relay.log[len(kinds) - kinds[::-1].index("answer") :]]
    assert len(after_last_answer) == 2
    first, retry = (ber.decode_message(d) for d in after_last_answer)
    assert first.pdu_type == retry.pdu_type == ber.GET_BULK_REQUEST and first.varbinds == retry.varbinds
    assert first.varbinds[0][0][: len(LLDP_REM_TABLE)] == LLDP_REM_TABLE
    assert c.status is CollectionStatus.TIMEOUT
    assert c.detail is not None and c.detail.startswith("stopped answering during lldpRemTable after ")
    assert c.detail.endswith("no response in 2 x 0.5s (SNMPv2c: a wrong community looks the same)")
    assert c.neighbors == []  # a half-walked remote table is never landed as if complete
    assert c.system is not None and c.system.sys_name == "huge"  # what completed is kept


@pytest.mark.integration
def test_dead_port_times_out_and_the_deadline_bounds_a_device(agent: int) -> None:
    dead = free_udp_port()
    c = _one(_target(dead, name="dead", timeout_s=0.3, retries=1))
    assert c.status is CollectionStatus.TIMEOUT
    slow = _one(_target(agent, name="slow"), CollectorOptions(device_deadline_s=0.05, max_repetitions=5))
    assert slow.status is CollectionStatus.TIMEOUT
    assert (slow.detail or "").startswith("device deadline of 0.05s exceeded after ")


def test_missing_secret_is_an_error_for_that_switch_only(tmp_path: Path) -> None:
    settings = parse_settings(
        "version: 1\nsources:\n  switches:\n"
        "    - {name: a, address: 127.0.0.1, platform: cumulus, snmp: {version: 2c, community: {env: NOPE_GPUF_X}}}\n"
        "    - {name: b, address: 127.0.0.1, platform: cumulus,"
        f" snmp: {{version: 2c, community: {{file: {tmp_path / 'c'}}}}}}}\n"
    )
    (tmp_path / "c").write_text("public\n")
    targets, failed = targets_from(settings.sources.switches)
    assert [t.name for t in targets] == ["b"]
    assert [(f.device, f.status, f.detail) for f in failed] == [
        ("a", CollectionStatus.ERROR, "secret environment variable NOPE_GPUF_X is not set")
    ]
    assert "public" not in repr(targets[0])
