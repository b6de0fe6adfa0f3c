"""The SSH twin: every Ethernet switch of a ground truth as an SSH CLI on its own loopback port.

``start(truth, workdir)`` renders each switch's LLDP output (:mod:`simulator.ssh.render`), starts
:mod:`simulator.ssh.server` detached and returns ``sources.switches`` entries with ``ssh:``
settings (password as ``{file: ...}``). Fault switches beside the truth's (not in the ground
truth, so they cannot hide or invent an adjacency):

* ``eth-fault-ssh-auth``: rejects every password -> auth_failure.
* ``eth-fault-ssh-hang``: accepts the session, never answers the LLDP command -> timeout.
* ``eth-fault-ssh-garbage``: answers the LLDP command with binary junk -> invalid (quarantined whole).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko  # type: ignore[import-untyped]

from simulator.generator import GroundTruth
from simulator.snmp.twin import stop
from simulator.ssh.render import LLDP_COMMAND, outputs_for
from simulator.twin import TwinRun, spawn

USERNAME = "gpufabric"
PASSWORD = "twin-ssh-password-0001"  # simulator credential, loopback only

FAULT_AUTH = "eth-fault-ssh-auth"
FAULT_HANG = "eth-fault-ssh-hang"
FAULT_GARBAGE = "eth-fault-ssh-garbage"
FAULTS: dict[str, str] = {FAULT_AUTH: "auth_failure", FAULT_HANG: "timeout", FAULT_GARBAGE: "invalid"}
_FAULT_SWITCHES = (
    (FAULT_AUTH, "arista_eos", "auth"),
    (FAULT_HANG, "cisco_nxos", "hang"),
    (FAULT_GARBAGE, "arista_eos", "garbage"),
)


class SshTwinError(RuntimeError):
    """The SSH twin did not come up; the message carries the tail of its log."""


@dataclass
class SshTwinOptions:
    faults: bool = True
    host: str = "127.0.0.1"
    ready_timeout_s: float = 60.0
    fault_timeout_s: float = 3.0  # read timeout configured for the hanging switch


def free_tcp_ports(n: int, host: str) -> list[int]:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def start_twin(truth: GroundTruth, workdir: Path, options: SshTwinOptions | None = None) -> TwinRun:
    options = options or SshTwinOptions()
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    outputs = outputs_for(truth)
    if not outputs:
        return TwinRun(name="ssh", summary="no Ethernet switches: SSH twin not started")
    switches: list[dict[str, Any]] = [
        {"name": name, "platform": platform, "fault": None} for name, (platform, _) in outputs.items()
    ]
    if options.faults:
        switches += [{"name": n, "platform": p, "fault": f} for n, p, f in _FAULT_SWITCHES]
    ports = free_tcp_ports(len(switches), options.host)
    for sw, port in zip(switches, ports, strict=True):
        sw.update(port=port, username=USERNAME, password=PASSWORD, command=LLDP_COMMAND[sw["platform"]])
    key_path = workdir / "host_key"
    if not key_path.exists():
        paramiko.RSAKey.generate(2048).write_private_key_file(str(key_path))
    out_path = workdir / "outputs.json"
    out_path.write_text(json.dumps({name: text for name, (_, text) in outputs.items()}))
    cfg_path = workdir / "config.json"
    cfg_path.write_text(
        json.dumps({"host": options.host, "host_key": str(key_path), "outputs": str(out_path), "switches": switches})
    )
    log_path = workdir / "ssh-twin.log"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with log_path.open("wb") as log:
        proc = spawn("ssh", [sys.executable, "-m", "simulator.ssh.server", str(cfg_path)], log=log, env=env)
    deadline = time.monotonic() + options.ready_timeout_s
    while b"ready" not in log_path.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc.pid)
            raise SshTwinError(f"SSH twin did not start: {log_path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)
    secrets = workdir / "secrets"
    secrets.mkdir(exist_ok=True)
    secrets.chmod(0o700)
    pw = secrets / "ssh-password"
    pw.write_text(PASSWORD + "\n")
    pw.chmod(0o600)
    wrong = secrets / "ssh-password-wrong"
    wrong.write_text("not-the-password\n")
    wrong.chmod(0o600)
    entries = [
        {
            "name": sw["name"],
            "address": options.host,
            "platform": sw["platform"],
            "ssh": {"port": sw["port"], "username": USERNAME, "password": {"file": str(pw)}},
        }
        for sw in switches
    ]
    return TwinRun(
        name="ssh",
        sources={"switches": entries},
        pids=[proc.pid],
        summary=f"SSH CLI on tcp/{options.host}:{min(ports)}-{max(ports)} ({len(outputs)} switches"
        + (f" + {len(FAULTS)} fault switches)" if options.faults else ")"),
        extra={
            "host": options.host,
            "ports": {sw["name"]: sw["port"] for sw in switches},
            "faults": dict(FAULTS) if options.faults else {},
        },
    )


def start(truth: GroundTruth, workdir: Path) -> TwinRun:
    """The ``Twin`` start function for ``simulator.up.TWINS``."""
    return start_twin(truth, workdir)
