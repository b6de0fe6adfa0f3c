"""A pytest session run *inside* a test (tests/integration/test_test_sessions.py), never collected
by the suite itself (its name does not match ``test_*.py``).

``PROBE_MODE=hang``: land a marker row, start a twin process, report where everything is, then
wait to be killed, as a test run that is interrupted (Ctrl-C twice, OOM killer, CI timeout) is.
``PROBE_MODE=check``: assert this session starts clean: no marker row, no earlier session's data.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def test_probe(warehouse) -> None:  # type: ignore[no-untyped-def]
    from simulator.twin import spawn

    report = Path(os.environ["PROBE_REPORT"])
    with warehouse.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS ops.probe_marker (session text)")
        before = conn.execute("SELECT count(*) FROM ops.probe_marker").fetchone()
        conn.execute("INSERT INTO ops.probe_marker VALUES (%s)", (os.environ["GPUFABRIC_DATA_DIR"],))
        conn.commit()
    twin = spawn("probe", [sys.executable, "-c", "import time; time.sleep(600)"], log=subprocess.DEVNULL)
    # The server's own PID (postmaster.pid, first line): other sessions on the machine may take its
    # port once it is stopped, so the PID, not the port, says whether it still runs.
    postmaster = Path(os.environ["GPUFABRIC_DATA_DIR"]) / "postgres" / "postmaster.pid"
    report.write_text(json.dumps({
        "data_dir": os.environ["GPUFABRIC_DATA_DIR"],
        "pg_port": warehouse.base_url.port,
        "pg_pid": int(postmaster.read_text().splitlines()[0]),
        "twin_pid": twin.pid,
        "markers_before": before[0] if before else None,
    }))
    if os.environ["PROBE_MODE"] == "hang":
        time.sleep(600)
