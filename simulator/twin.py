"""The twin run-time: what every twin is, how its processes start, and how they are found and
stopped again, whoever started them.

Every twin module and ``simulator.up`` import this module; it imports no twin, so there is no
cycle. A twin's server process is started through :func:`spawn`, which records it in the
registry of the data directory (``$GPUFABRIC_DATA_DIR/twins/<pid>.json``, default ``.data``):
``gpufabric sim down`` stops every twin recorded there, including ones a killed test run or a
crashed CLI left behind, and a new test session stops the ones whose owner is gone. A record
keeps the process's start time as the kernel counts it, so a PID the kernel has since given to
another process is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from simulator.generator import GroundTruth

ROOT = Path(__file__).resolve().parents[1]
# A test session sets this to its own PID: its twins are then stale once that process is gone.
OWNER_ENV = "GPUFABRIC_TWIN_OWNER"


@dataclass
class TwinRun:
    """What a started twin reports back."""

    name: str
    sources: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # merged into gpufabric.yaml sources
    pids: list[int] = field(default_factory=list)  # detached processes to stop on `sim down`
    summary: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. a twin's port, for tests


@dataclass(frozen=True)
class Twin:
    """A twin: a name and a function that starts it for a ground truth in a work directory."""

    name: str
    start: Callable[[GroundTruth, Path], TwinRun]


# ------------------------------------------------------------------------------------ registry


def registry_dir(data_dir: Path | None = None) -> Path:
    """Where this data directory's twins are recorded. The simulator reads ``GPUFABRIC_DATA_DIR``
    itself (the same variable and default as the warehouse) because it imports nothing of ours
    but ``core``."""
    base = data_dir or Path(os.environ.get("GPUFABRIC_DATA_DIR") or ROOT / ".data")
    return base.resolve() / "twins"


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), or
    None when there is no such live process. Zombies count as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _same_process(pid: int, ticks: int | None) -> bool:
    return ticks is not None and start_ticks(pid) == ticks


def spawn(
    name: str,
    cmd: Sequence[str],
    *,
    log: IO[bytes] | int | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: IO[Any] | int | None = subprocess.DEVNULL,
    detached: bool = True,
) -> subprocess.Popen[bytes]:
    """Start a twin's process and record it in the registry.

    ``detached`` puts it in its own session: it survives the CLI that started it (``sim up``
    returns, the twins keep serving) and a Ctrl-C in that terminal does not reach it.
    """
    proc = subprocess.Popen(
        list(cmd), stdin=stdin, stdout=log, stderr=subprocess.STDOUT if log is not None else None,
        cwd=cwd or ROOT, env=None if env is None else dict(env), start_new_session=detached,
    )  # fmt: skip
    owner = os.environ.get(OWNER_ENV)
    record = {
        "pid": proc.pid,
        "start_ticks": start_ticks(proc.pid),
        "name": name,
        "cmd": list(cmd),
        "owner_pid": int(owner) if owner and owner.isdigit() else None,
        "owner_start_ticks": start_ticks(int(owner)) if owner and owner.isdigit() else None,
        "started_at": time.time(),
    }
    directory = registry_dir()
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{proc.pid}.json.tmp"
    tmp.write_text(json.dumps(record))
    tmp.replace(directory / f"{proc.pid}.json")
    return proc


@dataclass(frozen=True)
class Registered:
    """One recorded twin process, and whether it is still the process that was recorded."""

    path: Path
    pid: int
    name: str
    alive: bool
    owner_pid: int | None  # the test session that started it; None: a `sim up` twin, kept until `sim down`
    owner_alive: bool | None


def registered(data_dir: Path | None = None) -> list[Registered]:
    """Every twin recorded for the data directory; unreadable records count as dead."""
    out: list[Registered] = []
    directory = registry_dir(data_dir)
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.json")):
        try:
            rec = json.loads(path.read_text())
            pid = int(rec["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            out.append(Registered(path, -1, "?", False, None, None))
            continue
        owner = None if rec.get("owner_pid") is None else int(rec["owner_pid"])
        owner_alive = None if owner is None else _same_process(owner, rec.get("owner_start_ticks"))
        out.append(Registered(path, pid, str(rec.get("name", "?")), _same_process(pid, rec.get("start_ticks")),
                              owner, owner_alive))  # fmt: skip
    return out


def reap(data_dir: Path | None = None, *, only_orphaned: bool = True, owner_pid: int | None = None) -> int:
    """Stop recorded twins and drop their records; returns how many live processes were stopped.

    ``only_orphaned``: just those whose owning process is gone (a killed test session's). With
    ``owner_pid``: just that owner's. Otherwise every recorded twin (``gpufabric sim down``).
    """
    victims: list[Registered] = []
    for rec in registered(data_dir):
        if not rec.alive:  # exited or never came up: nothing to stop, the record is stale
            rec.path.unlink(missing_ok=True)
            continue
        if owner_pid is not None:
            if rec.owner_pid != owner_pid:
                continue
        elif only_orphaned and rec.owner_alive is not False:
            continue
        victims.append(rec)
    stopped = stop_pids([r.pid for r in victims])
    for rec in victims:
        rec.path.unlink(missing_ok=True)
    return stopped


def forget(pids: Sequence[int], data_dir: Path | None = None) -> None:
    """Drop the records of processes that were stopped."""
    directory = registry_dir(data_dir)
    for pid in pids:
        (directory / f"{pid}.json").unlink(missing_ok=True)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return start_ticks(pid) is not None  # a zombie is not alive


def stop_pids(pids: Sequence[int], grace_s: float = 2.0) -> int:
    """SIGTERM each twin process, wait up to ``grace_s``, then SIGKILL (a twin keeps nothing a
    hard stop could lose; its uvicorn servers otherwise wait on idle keep-alive and watch
    connections, which cost the suite 5 s per twin set); reaps our own children
    and drops their registry records. Also what tests use to stop a twin they started directly."""
    stopped = 0
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            stopped += 1
    deadline = time.monotonic() + grace_s
    for pid in pids:
        while alive(pid) and time.monotonic() < deadline:
            reap_child(pid)
            time.sleep(0.05)
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            # SIGKILL is delivered when the process next runs: on a busy machine that is not yet
            # when kill() returns. Wait for it (bounded), so "stopped" means gone.
            kill_deadline = time.monotonic() + 5.0
            while alive(pid) and time.monotonic() < kill_deadline:
                reap_child(pid)
                time.sleep(0.02)
        reap_child(pid)
    forget(pids)
    return stopped


def reap_child(pid: int) -> None:
    """Collect a child that exited, if it was ours, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
