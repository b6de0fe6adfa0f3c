"""Long-running commands stop on SIGTERM and SIGINT, children included, however they were started.

Each supervisor here is started the way a background job of a non-interactive shell is (``nohup
make test &``, CI runners, terminal multiplexers): with SIGINT ignored. That inherited SIG_IGN is
what kept ``gpufabric ui``'s ``dagster dev`` running after SIGTERM (issue 17).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from simulator.twin import alive

pytestmark = pytest.mark.standalone  # starts what it needs itself (tests/conftest.py: the scheduler)

ROOT = Path(__file__).resolve().parents[2]

# The supervised child: reports how it found SIGINT, starts a grandchild in its group, and on
# Ctrl-C (KeyboardInterrupt) leaves a marker and exits cleanly. With IGNORE_ALL it traps every
# stop signal, as a wedged process would, so only SIGKILL ends it.
CHILD = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    out = sys.argv[1]
    mode = sys.argv[2]
    with open(os.path.join(out, "disposition"), "w") as f:
        f.write(repr(signal.getsignal(signal.SIGINT)))
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.path.join(out, "grandchild.pid"), "w") as f:
        f.write(str(grandchild.pid))
    if mode == "ignore_all":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "exit_early":
        sys.exit(3)
    open(os.path.join(out, "ready"), "w").close()
    try:
        time.sleep(600)
    except KeyboardInterrupt:
        open(os.path.join(out, "stopped_by_sigint"), "w").close()
        sys.exit(0)
    """
)

SUPERVISOR = textwrap.dedent(
    """
    import sys
    from services.processes import run_child
    child, out, mode = sys.argv[1:4]
    sys.exit(run_child([sys.executable, child, out, mode], grace_s=3.0, term_grace_s=2.0))
    """
)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)




def _wait_for(path: Path, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60  # hang guard only
    while not path.exists():
        assert proc.poll() is None, f"supervisor exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within 60 s"
        time.sleep(0.05)


def _start(tmp_path: Path, mode: str) -> subprocess.Popen[bytes]:
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    return subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(child), str(tmp_path), mode],
        cwd=ROOT,
        preexec_fn=_ignore_sigint,  # as a background job of a non-interactive shell starts
        start_new_session=True,
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_supervised_child_and_grandchild_stop_on_our_signal(tmp_path: Path, signum: int) -> None:
    proc = _start(tmp_path, "sleep")
    try:
        _wait_for(tmp_path / "ready", proc, "ready child")
        grandchild = int((tmp_path / "grandchild.pid").read_text())
        # The child starts with SIGINT at its default even though its supervisor inherited SIG_IGN.
        assert (tmp_path / "disposition").read_text() == repr(signal.default_int_handler)
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == 0
        # Stopped by the Ctrl-C it handles (graceful), not by the SIGKILL escalation.
        assert (tmp_path / "stopped_by_sigint").exists()
        assert not alive(grandchild)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_child_that_ignores_every_stop_signal_is_killed(tmp_path: Path) -> None:
    proc = _start(tmp_path, "ignore_all")
    try:
        _wait_for(tmp_path / "grandchild.pid", proc, "child start")
        grandchild = int((tmp_path / "grandchild.pid").read_text())
        # Let the child reach its trap; "ready" is written after it.
        _wait_for(tmp_path / "ready", proc, "ready child")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert not (tmp_path / "stopped_by_sigint").exists()  # it never stopped by itself
        assert not alive(grandchild)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_what_a_child_leaves_behind_in_its_group_is_stopped(tmp_path: Path) -> None:
    proc = _start(tmp_path, "exit_early")
    assert proc.wait(timeout=60) == 3  # the child's own exit code comes through
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    assert not alive(grandchild)


def test_stop_handlers_turn_sigterm_into_keyboardinterrupt_even_when_sigint_was_ignored(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from services.processes import Stopped, install_stop_handlers
        install_stop_handlers()
        open(sys.argv[1], "w").close()
        try:
            time.sleep(600)
        except Stopped as stop:
            print(f"stopped by {stop.signum}")
        """
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        ready = tmp_path / f"ready-{signum}"
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(ready)], cwd=ROOT, preexec_fn=_ignore_sigint, stdout=subprocess.PIPE
        )
        _wait_for(ready, proc, "handlers installed")  # type: ignore[arg-type]
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        assert out.decode().strip() == f"stopped by {int(signum)}"
