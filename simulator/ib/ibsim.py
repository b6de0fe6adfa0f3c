"""Run the real fabric simulator ``ibsim`` (Debian ibsim-utils) on a spec's InfiniBand fabric.

ibsim answers the management datagrams (MADs) of any libibumad tool that runs with
``LD_PRELOAD=libumad2sim.so``, so the real ``ibnetdiscover`` walks a simulated fabric exactly as
it walks hardware. The topology file is our generated ibnetdiscover text (ibsim reads that
format). Limits of Debian 12's ibsim 0.10, which decide how tests use it: extended speeds stop at
HDR (so ibsim runs use HDR variants of the specs; NDR/XDR are covered by the generated text), at
most 10 clients per simulator, and the node/switch/port tables are sized on the command line.

The console is a FIFO (``<workdir>/console``): ``Unlink "S-<guid>"[port]`` takes a link down,
``ReLink`` restores it. Each simulator gets its own socket name (``IBSIM_SOCKNAME``) so parallel
test sessions and other simulators on the machine never cross.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from simulator.generator import GroundTruth
from simulator.ib.ibnetdiscover import SHARP_PORT, ib_device_count, write_ibnetdiscover
from simulator.twin import spawn

UMAD2SIM = Path("/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so")
READY = b"Network simulator ready."


class IbsimError(RuntimeError):
    """ibsim is missing, refused the topology or did not come up."""


@dataclass
class IbsimFabric:
    proc: subprocess.Popen[bytes]
    workdir: Path
    topology: Path
    sockname: str
    console_path: Path
    _console_fd: int = field(default=-1, repr=False)

    @property
    def env(self) -> dict[str, str]:
        """What a libibumad tool needs to talk to this simulator instead of hardware."""
        return {"LD_PRELOAD": str(UMAD2SIM), "IBSIM_SOCKNAME": self.sockname}

    def console(self, command: str) -> None:
        """Send one console command (e.g. ``Unlink "S-<guid>"[33]``) through the FIFO."""
        log = self.workdir / "ibsim.log"
        before = log.stat().st_size
        with open(self.console_path, "w", encoding="ascii") as fifo:
            fifo.write(command.rstrip("\n") + "\n")
        # The console echoes a prompt after each command: wait for it so the next discovery sees the change.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if log.stat().st_size > before and log.read_bytes()[before:].count(b"sim>") >= 1:
                return
            time.sleep(0.02)
        raise IbsimError(f"ibsim console did not answer {command!r}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._console_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._console_fd)
            self._console_fd = -1

    def __enter__(self) -> IbsimFabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def available() -> str | None:
    """None when ibsim and ibnetdiscover are installed, else what is missing."""
    missing = [
        name
        for name in ("ibsim", "ibnetdiscover")
        if shutil.which(name) is None and not Path(f"/usr/sbin/{name}").exists()
    ]
    if not UMAD2SIM.exists():
        missing.append(str(UMAD2SIM))
    return ", ".join(missing) or None


def start_ibsim(truth: GroundTruth, workdir: Path, *, timeout_s: float = 20.0) -> IbsimFabric:
    """Write the topology for ``truth`` and start ibsim on it; returns once it is ready."""
    if truth.spec.compute_fabric.speed != "hdr":
        raise IbsimError(
            f"Debian's ibsim tops out at HDR; {truth.spec.name} runs {truth.spec.compute_fabric.speed.upper()}"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    topology = write_ibnetdiscover(truth, workdir / "topology.net", sharp=False)
    switches, cas = ib_device_count(truth)
    radix = max((int(d.attributes["radix"]) for d in truth.switches(fabric="ib")), default=SHARP_PORT)
    console_path = workdir / "console"
    if not console_path.exists():
        os.mkfifo(console_path)
    # O_RDWR keeps the FIFO open for reading without waiting for a writer, and stops ibsim from
    # seeing end-of-file (and quitting) when a writer closes it.
    fd = os.open(console_path, os.O_RDWR)
    sockname = f"gf{uuid.uuid4().hex[:10]}"
    log = (workdir / "ibsim.log").open("wb")
    args = [
        "ibsim", "-s",
        "-N", str(max(2048, 2 * (switches + cas))),
        "-S", str(max(256, 2 * switches)),
        "-P", str(max(13312, 2 * (switches * (radix + 2) + cas * 2))),
        str(topology),
    ]  # fmt: skip
    try:
        # Not detached: ibsim reads its console from our pipe; recorded so a killed run's is found.
        proc = spawn("ibsim", args, stdin=fd, log=log, env={**os.environ, "IBSIM_SOCKNAME": sockname}, detached=False)
    except OSError as exc:
        os.close(fd)
        raise IbsimError(f"cannot start ibsim: {exc.strerror or exc}") from None
    finally:
        log.close()
    fabric = IbsimFabric(proc, workdir, topology, sockname, console_path, fd)
    deadline = time.monotonic() + timeout_s
    logfile = workdir / "ibsim.log"
    while time.monotonic() < deadline:
        if READY in logfile.read_bytes():
            return fabric
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    fabric.stop()
    tail = logfile.read_bytes()[-2000:].decode("utf-8", "replace")
    raise IbsimError(f"ibsim did not become ready (exit {proc.returncode}): {tail}")
