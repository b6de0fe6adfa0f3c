"""How gpufabric's long-running commands stop: promptly on SIGTERM and SIGINT, children included,
however they were started.

Why this is not just Python's defaults: a background job of a non-interactive shell (``cmd &``
in a script, ``nohup``, many CI runners and terminal multiplexers) starts with SIGINT *ignored*,
POSIX says so, and an ignored signal stays ignored across ``exec``. Python then keeps it ignored
instead of raising KeyboardInterrupt, and so does every Python child it starts: ``dagster dev``
and its webserver and daemon never saw the Ctrl-C we forwarded, and ``gpufabric ui`` did not stop
within 30 s of SIGTERM. So long-running entry points install their handlers explicitly
(:func:`install_stop_handlers`), and a supervised child (:func:`run_child`) starts with both
signals at their defaults (``exec`` resets a *caught* signal to default, unlike an ignored one),
in a process group of its own, and is stopped by escalation: its own stop signal to the whole
group, then SIGTERM, then SIGKILL, so nothing of it outlives us.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """Raised in the main thread when SIGTERM or SIGINT arrives (a KeyboardInterrupt, so every
    ``except KeyboardInterrupt`` cleanup path of ours and of our libraries runs for SIGTERM too)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, _frame: FrameType | None) -> None:
    raise Stopped(signum)


def install_stop_handlers() -> None:
    """SIGINT and SIGTERM raise :class:`Stopped` in the main thread, whatever this process
    inherited (an ignored SIGINT included). Call it first thing in a long-running entry point."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise_stopped)


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to every process of the group; False when the group is gone."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed user; the ones we own still got it
        return True
    return True


def stop_group(pgid: int, first: int = signal.SIGINT, *, grace_s: float = 10.0, term_grace_s: float = 5.0) -> None:
    """Stop every process of group ``pgid``: ``first``, then SIGTERM after ``grace_s``, then
    SIGKILL after ``term_grace_s`` more. Returns when the group is empty or was killed."""
    for signum, wait_s in ((first, grace_s), (signal.SIGTERM, term_grace_s), (signal.SIGKILL, 2.0)):
        if not _signal_group(pgid, signum):
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not _group_alive(pgid):
                return
            time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    """True while a live (not zombie) process is in the group. Zombies still count for
    ``killpg(pgid, 0)`` until their parent reaps them, which in a container may be never."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: fall back to the kernel's answer
        return _signal_group(pgid, 0)
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def run_child(
    cmd: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stop_signal: int = signal.SIGINT,
    grace_s: float = 10.0,
    term_grace_s: float = 5.0,
) -> int:
    """Run ``cmd`` in its own process group until it exits or we are told to stop.

    On SIGTERM or SIGINT to us, the child's whole group gets ``stop_signal`` (SIGINT: the Ctrl-C
    that ``dagster dev`` handles by stopping its webserver and daemon), then SIGTERM, then SIGKILL
    (:func:`stop_group`). Returns the child's exit code, or 0 when it stopped because we asked.
    """
    requested: list[int] = []
    proc: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        requested.append(signum)

    # Handlers first: the child then execs with both signals at their defaults, even if we were
    # started with SIGINT ignored.
    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=None if env is None else dict(env), process_group=0)
        while proc.poll() is None and not requested:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.2)
        if requested:
            stop_group(proc.pid, stop_signal, grace_s=grace_s, term_grace_s=term_grace_s)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            return 0
        code = proc.returncode
        # The child is gone; anything it left in its group goes with it.
        if _group_alive(proc.pid):
            stop_group(proc.pid, signal.SIGTERM, grace_s=term_grace_s, term_grace_s=2.0)
        return int(code)
    finally:
        if proc is not None and proc.poll() is None:
            stop_group(proc.pid, signal.SIGKILL, grace_s=2.0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
