"""dcgm-exporter twin: one endpoint per simulated node, driven by deterministic workloads.

``start(truth, workdir)`` is the :class:`simulator.up.Twin` entry point: it starts the twin process
(detached), waits until every port listens, writes a Prometheus ``file_sd`` targets file and
returns the ``dcgm_exporters`` sources for ``gpufabric.yaml``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from simulator.dcgm.exposition import COUNTERS_CSV, NodeInfo, nodes_of, render_node, render_workloads
from simulator.twin import TwinRun, spawn

__all__ = ["COUNTERS_CSV", "NodeInfo", "TwinStartError", "nodes_of", "render_node", "render_workloads", "start"]

ROOT = Path(__file__).resolve().parents[2]


class TwinStartError(RuntimeError):
    """The twin process did not come up; the message carries its log tail."""


def start(
    truth: Any,
    workdir: Path,
    *,
    faults: dict[str, str] | None = None,
    clock_offset_s: float = 0.0,
    clock_scale: float = 1.0,
    max_nodes: int | None = None,
    timeout_s: float = 30.0,
    mig_layout_file: Path | None = None,
) -> Any:
    """Start the exporter twin for every host of ``truth`` (or the first ``max_nodes``).

    ``faults`` maps a hostname to a fault switch (see ``simulator.dcgm.server``).
    ``mig_layout_file``: the control plane node agent's ``mig-layouts.json``; GPUs it lists are
    served as their MIG instances.
    """

    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    nodes: list[NodeInfo] = nodes_of(truth)
    if max_nodes is not None:
        nodes = nodes[:max_nodes]
    faults = faults or {}
    config = {
        "nodes": [
            {
                "hostname": n.hostname,
                "index": n.index,
                "gpu_uuids": list(n.gpu_uuids),
                "gpu_model": truth.spec.node.gpu_model,
                "blank_memory_temp": n.blank_memory_temp,
                "fault": faults.get(n.hostname),
            }
            for n in nodes
        ],
        "clock": {"anchor": time.time(), "offset_s": clock_offset_s, "scale": clock_scale},
        "mig_layout_file": str(mig_layout_file) if mig_layout_file else None,
    }
    config_path = workdir / "dcgm-twin.json"
    ready_path = workdir / "ready.json"
    ready_path.unlink(missing_ok=True)
    config_path.write_text(json.dumps(config))
    log_path = workdir / "dcgm-twin.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with log_path.open("ab") as log:
        proc = spawn("dcgm", [sys.executable, "-m", "simulator.dcgm.server", str(config_path)], log=log, env=env)
    deadline = time.monotonic() + timeout_s
    while not ready_path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
            tail = log_path.read_text(errors="replace")[-2000:]
            raise TwinStartError(f"dcgm-exporter twin did not start (see {log_path}):\n{tail}")
        time.sleep(0.05)
    ready = json.loads(ready_path.read_text())
    ports: dict[str, int] = ready["nodes"]
    targets_file = workdir / "dcgm-targets.json"
    targets_file.write_text(
        json.dumps([{"targets": [f"127.0.0.1:{p}" for p in ports.values()], "labels": {"job": "dcgm-exporter"}}],
                   indent=1)
    )
    workloads_url = f"http://127.0.0.1:{ready['workloads']}/metrics"
    return TwinRun(
        name="dcgm",
        sources={
            "dcgm_exporters": [
                {"name": "dcgm-twin", "targets_file": str(targets_file)},
                {"name": "dcgm-twin-workloads", "urls": [workloads_url]},
            ]
        },
        pids=[proc.pid],
        summary=f"dcgm-exporter twin: {len(ports)} endpoints on 127.0.0.1, workload metrics at {workloads_url}",
        extra={"ports": ports, "targets_file": str(targets_file), "workloads_url": workloads_url,
               "config": str(config_path)},
    )
