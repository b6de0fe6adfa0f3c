"""The node agent's drop directory: each compute node's ``nvidia-smi topo -m``, one file per host.

Hosts are not served over SSH by any twin (the SSH twin is the switches' CLI, and the site file has
no hosts source), so the matrices reach the collector the other way a real site has: an agent on
every node (a DaemonSet, or a cron job run by the node's configuration management) runs
``nvidia-smi topo -m`` and writes its output to ``<dir>/<hostname>.txt`` on shared storage; the
file's modification time is when it was captured. The twin writes exactly that, from the ground
truth (:attr:`simulator.generator.GroundTruth.gpu_topo`), and returns the site file's
``sources.gpu_topo`` entry naming the directory.

Fault file beside the truth's hosts (a name that is not a node, so it can neither hide nor invent a
finding): ``gpu-topo-fault-truncated.txt``, a capture cut in the middle of the matrix, which the
collector must quarantine with its reason.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from simulator.generator import GroundTruth
from simulator.twin import TwinRun

SUFFIX = ".txt"
FAULT_TRUNCATED = "gpu-topo-fault-truncated"
CAPTURED_AT = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)  # fixed: the files are the same on every run


def write_drop(truth: GroundTruth, directory: Path, *, faults: bool = True) -> list[Path]:
    """One file per compute node with a matrix (and the fault file); returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    topo = truth.gpu_topo
    written: list[Path] = []
    stamp = CAPTURED_AT.timestamp()
    for host in topo.matrices:
        path = directory / f"{host}{SUFFIX}"
        path.write_text(topo.text(host))
        os.utime(path, (stamp, stamp))
        written.append(path)
    if faults and topo.matrices:
        text = topo.text(next(iter(topo.matrices)))
        lines = text.splitlines(keepends=True)
        path = directory / f"{FAULT_TRUNCATED}{SUFFIX}"
        path.write_text("".join(lines[: len(lines) // 3]))  # header and a few GPU rows: no NIC rows
        os.utime(path, (stamp, stamp))
        written.append(path)
    return written


def start(truth: GroundTruth, workdir: Path) -> TwinRun:
    """The ``Twin`` start function for ``simulator.up.TWINS``."""
    directory = (workdir / "drop").resolve()
    written = write_drop(truth, directory)
    if not written:
        return TwinRun(name="gpu_topo", summary=f"no nvidia-smi topo -m template for {truth.spec.node.model}")
    return TwinRun(
        name="gpu_topo",
        sources={"gpu_topo": [{"name": "node-agent", "path": str(directory)}]},
        summary=f"nvidia-smi topo -m of {len(written) - 1} nodes in {directory} (+1 truncated fault file)",
        extra={"directory": str(directory), "fault_hosts": [FAULT_TRUNCATED]},
    )
