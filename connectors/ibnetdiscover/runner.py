"""Run ``ibnetdiscover`` on this host and parse its output as it streams.

The command is the real one from infiniband-diags; it needs an HCA on the fabric (or, in the
simulator, ``LD_PRELOAD`` of ibsim's ``libumad2sim.so``, passed through ``env``). Output is read
line by line from the pipe, so a 10k-node fabric is parsed while it is still being printed. A
watchdog kills the process at ``timeout_s``: a hung MAD query must not hang the run.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Mapping, Sequence

from connectors.ibnetdiscover.parser import IbFabric, IbnetdiscoverError, parse_ibnetdiscover, read_lines
from core.infiniband import HcaFilter

DEFAULT_COMMAND: tuple[str, ...] = ("ibnetdiscover",)


class IbnetdiscoverTimeout(IbnetdiscoverError):
    """The command did not finish within its timeout and was killed."""


def discover(
    *,
    command: Sequence[str] = DEFAULT_COMMAND,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
    source: str = "ibnetdiscover",
    hca_filter: HcaFilter | None = None,
) -> IbFabric:
    """Run the command, parse stdout while it streams; raise on a failed or hung command."""
    full_env = {**os.environ, **(env or {})}
    try:
        proc = subprocess.Popen(
            [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=full_env
        )
    except OSError as exc:
        raise IbnetdiscoverError(f"cannot run {command[0]}: {exc.strerror or exc}") from None
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        proc.kill()

    timer = threading.Timer(timeout_s, kill)
    timer.daemon = True
    stderr_chunks: list[bytes] = []

    def drain_stderr() -> None:
        # Read stderr concurrently: a chatty stderr filling its pipe would block the command.
        assert proc.stderr is not None
        for chunk in iter(lambda: proc.stderr.read(4096), b""):  # type: ignore[union-attr]
            if sum(len(c) for c in stderr_chunks) < 64 * 1024:
                stderr_chunks.append(chunk)

    reader = threading.Thread(target=drain_stderr, daemon=True)
    timer.start()
    reader.start()
    try:
        assert proc.stdout is not None
        fabric = parse_ibnetdiscover(read_lines(proc.stdout), source, hca_filter)
        rc = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
    if killed.is_set():
        raise IbnetdiscoverTimeout(f"{command[0]} did not finish within {timeout_s:g}s and was killed")
    if rc != 0:
        tail = b"".join(stderr_chunks).decode("utf-8", "backslashreplace").strip().splitlines()[-5:]
        raise IbnetdiscoverError(f"{command[0]} exited with status {rc}: {' | '.join(tail) or 'no message'}")
    return fabric
