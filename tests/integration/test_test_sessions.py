"""Every test run starts from a known state, however the run before it ended (issue 17).

A nested pytest session is killed with SIGKILL mid-run, leaving its embedded Postgres, its data
and a twin process behind; the next session must start on an empty warehouse of its own and
clean up what the killed one left.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from simulator.twin import alive

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "probes" / "probe_session.py"


def _pytest(mode: str, report: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PROBE_MODE": mode, "PROBE_REPORT": str(report)}
    for inherited in ("GPUFABRIC_DATA_DIR", "GPUFABRIC_TWIN_OWNER", "GPUFABRIC_PG_PORT"):
        env.pop(inherited, None)  # the nested session chooses its own, as a fresh `make test` does
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PROBE)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0




def test_a_killed_session_leaves_nothing_the_next_one_sees(tmp_path: Path) -> None:
    killed_report = tmp_path / "killed.json"
    killed = _pytest("hang", killed_report)
    deadline = time.monotonic() + 180  # hang guard only
    while not killed_report.exists():
        assert killed.poll() is None, killed.stdout.read().decode() if killed.stdout else ""
        assert time.monotonic() < deadline, "the probe session never reported"
        time.sleep(0.2)
    time.sleep(0.2)  # the report is written in one call; let it land whole
    left = json.loads(killed_report.read_text())
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    # What a killed run leaves: its server still answering, its twin still running.
    assert _answers(left["pg_port"]) and alive(left["pg_pid"]) and alive(left["twin_pid"])
    assert Path(left["data_dir"]).is_dir()

    next_report = tmp_path / "next.json"
    nxt = _pytest("check", next_report)
    out, _ = nxt.communicate(timeout=600)
    assert nxt.returncode == 0, out.decode()
    seen = json.loads(next_report.read_text())
    assert seen["markers_before"] == 0  # a warehouse of its own: no row of the killed run
    assert seen["data_dir"] != left["data_dir"]
    # The next session cleaned up after the killed one, and after itself.
    assert not alive(left["twin_pid"])
    assert not Path(left["data_dir"]).exists()
    assert not alive(seen["twin_pid"])
    assert not Path(seen["data_dir"]).exists()
    assert not alive(left["pg_pid"])  # the killed run's server was stopped (its port may be another's now)


def _spawn_twin_from(data_dir: Path, owner: int | None) -> int:
    """Start a twin the way a test or CLI would, from another process that then exits."""
    env = {**os.environ, "GPUFABRIC_DATA_DIR": str(data_dir)}
    env.pop("GPUFABRIC_TWIN_OWNER", None)
    if owner is not None:
        env["GPUFABRIC_TWIN_OWNER"] = str(owner)
    script = ("import subprocess, sys; from simulator.twin import spawn; print(spawn('probe', [sys.executable, "
              "'-c', 'import time; time.sleep(600)'], log=subprocess.DEVNULL).pid)")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    return int(done.stdout.strip())


def test_twins_are_recorded_and_found_by_sim_down_whoever_started_them(tmp_path: Path) -> None:
    from simulator.twin import reap, registered

    gone_owner = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                                text=True, check=True)  # fmt: skip
    orphan = _spawn_twin_from(tmp_path, int(gone_owner.stdout))  # its test session is gone
    owned = _spawn_twin_from(tmp_path, os.getpid())  # this session is alive
    kept = _spawn_twin_from(tmp_path, None)  # a `sim up` twin: kept until `sim down`
    try:
        assert {r.pid for r in registered(tmp_path) if r.alive} == {orphan, owned, kept}
        # A new session reaps only what a dead owner left.
        assert reap(tmp_path) == 1
        assert not alive(orphan) and alive(owned) and alive(kept)
        down = subprocess.run([sys.executable, "-m", "pipelines.cli", "sim", "down"], cwd=ROOT, text=True,
                              capture_output=True, timeout=120,
                              env={**os.environ, "GPUFABRIC_DATA_DIR": str(tmp_path)})  # fmt: skip
        assert down.returncode == 0, down.stderr
        assert "stopped 2 twin process(es)" in down.stdout
        assert not alive(owned) and not alive(kept)
        assert registered(tmp_path) == []
    finally:
        for pid in (orphan, owned, kept):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_recycled_pid_is_never_signalled(tmp_path: Path) -> None:
    from simulator.twin import reap, registered

    pid = _spawn_twin_from(tmp_path, None)
    record = tmp_path / "twins" / f"{pid}.json"
    data = json.loads(record.read_text())
    data["start_ticks"] -= 1  # as if the kernel had given this PID to another process since
    record.write_text(json.dumps(data))
    try:
        assert [r.alive for r in registered(tmp_path)] == [False]
        assert reap(tmp_path, only_orphaned=False) == 0
        assert alive(pid)  # not ours any more: left alone, and its stale record dropped
        assert registered(tmp_path) == []
    finally:
        os.kill(pid, signal.SIGKILL)
