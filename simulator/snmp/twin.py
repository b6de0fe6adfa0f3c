"""The SNMP twin: every Ethernet switch of a ground truth served by one snmpsim process.

``start(truth, workdir)`` writes one ``.snmprec`` per switch (community = the switch's inventory
name; SNMPv3 context = the same name), starts ``snmpsim-command-responder`` detached on a
loopback UDP port and returns the ``sources.switches`` entries for ``gpufabric.yaml``. Every
third switch is configured for SNMPv3 authPriv (SHA + AES) so both versions are exercised.

Fault switches, added beside the truth's switches (they are not in the ground truth, so they
cannot hide or invent a real adjacency):

* ``eth-fault-timeout``: its community has no data file; snmpsim drops the request -> timeout.
* ``eth-fault-auth``: SNMPv3 user known to the agent, configured with the wrong keys -> auth failure.
* ``eth-fault-nolldp``: answers the system group and IF-MIB but has no LLDP-MIB -> no data.
* ``eth-fault-garbage``: LLDP rows with wrong types, truncated rows, bad ids, non-UTF-8 -> partial.

Known traps handled here: snmpsim as root needs ``SNMPSIM_ALLOW_ROOT=true`` (dropping to another
user fails when Python lives under /root); the ``-lite`` responder has no SNMPv3; snmpsim keeps
31 data files open, so :mod:`simulator.snmp.responder` raises that for large fabrics.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.models import LinkKind
from simulator.generator import GroundTruth
from simulator.snmp.records import RecordBuilder, garbage_records, no_lldp_records, render
from simulator.twin import TwinRun, spawn, stop_pids

V3_USER = "gpufabric"
V3_AUTH_KEY = "twin-auth-key-0001"  # simulator credentials, not secrets: the twin is loopback-only
V3_PRIV_KEY = "twin-priv-key-0001"
FAULT_USER = "gpufabric-fault"
FAULT_AUTH_KEY = "fault-auth-key-0001"
FAULT_PRIV_KEY = "fault-priv-key-0001"

FAULT_TIMEOUT = "eth-fault-timeout"
FAULT_AUTH = "eth-fault-auth"
FAULT_NO_LLDP = "eth-fault-nolldp"
FAULT_GARBAGE = "eth-fault-garbage"
FAULTS: dict[str, str] = {
    FAULT_TIMEOUT: "timeout",
    FAULT_AUTH: "auth_failure",
    FAULT_NO_LLDP: "no_data",
    FAULT_GARBAGE: "partial",
}
"""Fault switch -> the ops.collection_status it must produce."""


class SnmpTwinError(RuntimeError):
    """snmpsim did not come up; the message carries the tail of its log."""


@dataclass
class SnmpTwinOptions:
    faults: bool = True
    v3_every: int = 3  # every Nth switch is configured for SNMPv3 authPriv (0: none)
    open_files: int = 4096  # snmpsim data-file cache (stock: 31)
    max_var_binds: int = 64
    host: str = "127.0.0.1"
    port: int | None = None
    ready_timeout_s: float = 180.0
    extra_records: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)


def free_udp_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _secret(path: Path, value: str) -> dict[str, str]:
    path.write_text(value + "\n")
    path.chmod(0o600)
    return {"file": str(path)}


def write_data(truth: GroundTruth, data_dir: Path, options: SnmpTwinOptions) -> list[str]:
    """One snmprec per switch (+ fault agents); returns the community names written."""
    data_dir.mkdir(parents=True, exist_ok=True)
    builder = RecordBuilder(truth)
    names: list[str] = []
    for device in truth.switches(fabric=LinkKind.ETH):
        name = str(device.attributes.get("inventory_name", device.name))
        (data_dir / f"{name}.snmprec").write_text(render(builder.records(device)))
        names.append(name)
    if options.faults:
        (data_dir / f"{FAULT_NO_LLDP}.snmprec").write_text(render(no_lldp_records(FAULT_NO_LLDP)))
        (data_dir / f"{FAULT_GARBAGE}.snmprec").write_text(render(garbage_records(FAULT_GARBAGE)))
        (data_dir / f"{FAULT_AUTH}.snmprec").write_text(render(no_lldp_records(FAULT_AUTH)))
        names += [FAULT_NO_LLDP, FAULT_GARBAGE, FAULT_AUTH]
    for name, rows in options.extra_records.items():
        (data_dir / f"{name}.snmprec").write_text(render(rows))
        names.append(name)
    return names


def responder_command(data_dir: Path, cache_dir: Path, host: str, port: int, options: SnmpTwinOptions) -> list[str]:
    return [
        sys.executable,
        "-m",
        "simulator.snmp.responder",
        "--max-open-files",
        str(options.open_files),
        f"--data-dir={data_dir}",
        f"--cache-dir={cache_dir}",
        f"--agent-udpv4-endpoint={host}:{port}",
        f"--max-var-binds={options.max_var_binds}",
        "--log-level=error",
        f"--v3-user={V3_USER}",
        f"--v3-auth-key={V3_AUTH_KEY}",
        "--v3-auth-proto=SHA",
        f"--v3-priv-key={V3_PRIV_KEY}",
        "--v3-priv-proto=AES",
        f"--v3-user={FAULT_USER}",
        f"--v3-auth-key={FAULT_AUTH_KEY}",
        "--v3-auth-proto=SHA",
        f"--v3-priv-key={FAULT_PRIV_KEY}",
        "--v3-priv-proto=AES",
    ]


async def _probe(host: str, port: int, community: str) -> bool:
    from pysnmp.hlapi.v3arch.asyncio import (
        CommunityData,
        ContextData,
        ObjectIdentity,
        ObjectType,
        SnmpEngine,
        UdpTransportTarget,
        get_cmd,
    )

    engine = SnmpEngine()
    try:
        target = await UdpTransportTarget.create((host, port), timeout=0.5, retries=0)
        error, status, _, _ = await get_cmd(
            engine,
            CommunityData(community, mpModel=1),
            target,
            ContextData(),
            ObjectType(ObjectIdentity("1.3.6.1.2.1.1.5.0")),
            lookupMib=False,
        )
        return not error and not status
    finally:
        engine.close_dispatcher()


def launch(data_dir: Path, workdir: Path, options: SnmpTwinOptions, probe_community: str) -> tuple[int, int]:
    """Start snmpsim detached and wait until it answers; returns (pid, port)."""
    port = options.port or free_udp_port(options.host)
    cache_dir = workdir / "cache"
    shutil.rmtree(cache_dir, ignore_errors=True)
    cache_dir.mkdir(parents=True)
    log_path = workdir / "snmpsim.log"
    env = {**os.environ, "SNMPSIM_ALLOW_ROOT": "true", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with log_path.open("wb") as log:
        proc = spawn("snmp", responder_command(data_dir, cache_dir, options.host, port, options), log=log, env=env)
    deadline = time.monotonic() + options.ready_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SnmpTwinError(f"snmpsim exited with {proc.returncode}: {_tail(log_path)}")
        if asyncio.run(_probe(options.host, port, probe_community)):
            return proc.pid, port
        time.sleep(0.2)
    stop(proc.pid)
    raise SnmpTwinError(f"snmpsim did not answer within {options.ready_timeout_s:g}s: {_tail(log_path)}")


def stop(pid: int, grace_s: float = 2.0) -> None:
    """Stop a responder started by :func:`launch` (tests; `sim down` does this for the CLI)."""
    stop_pids([pid], grace_s)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def switch_entries(
    truth: GroundTruth, workdir: Path, host: str, port: int, options: SnmpTwinOptions
) -> list[dict[str, Any]]:
    """``sources.switches`` for gpufabric.yaml, secrets as files under ``workdir/secrets``."""
    secrets = workdir / "secrets"
    secrets.mkdir(parents=True, exist_ok=True)
    secrets.chmod(0o700)
    auth = _secret(secrets / "v3-auth-key", V3_AUTH_KEY)
    priv = _secret(secrets / "v3-priv-key", V3_PRIV_KEY)
    entries: list[dict[str, Any]] = []
    for i, device in enumerate(truth.switches(fabric=LinkKind.ETH)):
        name = str(device.attributes.get("inventory_name", device.name))
        snmp: dict[str, Any]
        if options.v3_every and i % options.v3_every == options.v3_every - 1:
            snmp = {
                "version": "3",
                "port": port,
                "user": V3_USER,
                "auth_protocol": "SHA",
                "auth_key": auth,
                "priv_protocol": "AES",
                "priv_key": priv,
                "context": name,
            }
        else:
            snmp = {"version": "2c", "port": port, "community": _secret(secrets / f"{name}.community", name)}
        entries.append({"name": name, "address": host, "platform": device.platform, "snmp": snmp})
    if options.faults:
        fast = {"timeout_s": 1, "retries": 0}
        for name, platform in (
            (FAULT_TIMEOUT, "arista_eos"),
            (FAULT_NO_LLDP, "arista_eos"),
            (FAULT_GARBAGE, "cumulus"),
        ):
            community = _secret(secrets / f"{name}.community", name)
            entries.append(
                {
                    "name": name,
                    "address": host,
                    "platform": platform,
                    # Only the switch that never answers gets the short timeout (it is waited out);
                    # the others answer, and on a loaded machine 1 s without a retry is too little.
                    "snmp": {"version": "2c", "port": port, "community": community,
                             **(fast if name == FAULT_TIMEOUT else {})},
                }
            )
        entries.append(
            {
                "name": FAULT_AUTH,
                "address": host,
                "platform": "arista_eos",
                "snmp": {
                    "version": "3",
                    "port": port,
                    "user": FAULT_USER,
                    "auth_protocol": "SHA",
                    "auth_key": _secret(secrets / "fault-auth-key", "not-the-" + FAULT_AUTH_KEY),
                    "priv_protocol": "AES",
                    "priv_key": _secret(secrets / "fault-priv-key", FAULT_PRIV_KEY),
                    "context": FAULT_AUTH,
                    **fast,
                },
            }
        )
    return entries


def start_twin(truth: GroundTruth, workdir: Path, options: SnmpTwinOptions | None = None) -> Any:
    """Write the data, start snmpsim and return a :class:`simulator.up.TwinRun`."""

    options = options or SnmpTwinOptions()
    workdir = workdir.resolve()
    data_dir = workdir / "data"
    shutil.rmtree(data_dir, ignore_errors=True)
    names = write_data(truth, data_dir, options)
    if not names:
        return TwinRun(name="snmp", summary="no Ethernet switches: SNMP twin not started")
    pid, port = launch(data_dir, workdir, options, names[0])
    try:
        entries = switch_entries(truth, workdir, options.host, port, options)
    except BaseException:
        stop(pid)
        raise
    real = len(truth.switches(fabric=LinkKind.ETH))
    return TwinRun(
        name="snmp",
        sources={"switches": entries},
        pids=[pid],
        summary=f"snmpsim on udp/{options.host}:{port} ({real} switches"
        + (f" + {len(FAULTS)} fault switches)" if options.faults else ")"),
        extra={
            "host": options.host,
            "port": port,
            "data_dir": str(data_dir),
            "faults": dict(FAULTS) if options.faults else {},
            "v3_user": V3_USER,
        },
    )


def start(truth: GroundTruth, workdir: Path) -> Any:
    """The ``Twin`` start function registered in ``simulator.up.TWINS``."""
    return start_twin(truth, workdir)
