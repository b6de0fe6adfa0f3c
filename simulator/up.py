"""``gpufabric sim up`` / ``sim down``: start every twin for a spec and write the site file naming them.

A twin is anything that stands in for an external system: files (the DCIM export, saved
ibnetdiscover output) or servers on loopback (snmpsim, fakenos SSH, UFM REST, dcgm-exporter, a
Kubernetes API). Each twin module contributes one :class:`Twin` to :data:`TWINS`; ``sim_up``
starts them all, detached, records their PIDs in ``<sim root>/state.json`` and writes the
``gpufabric.yaml`` whose sources point at them. A second ``sim up`` for the same spec finds the
twins alive and reuses them; ``sim down`` stops them. Ground truth stays here, in the simulator:
it is never written to the warehouse as if it were observed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from simulator.dcgm import start as start_dcgm_twin
from simulator.dcim import write_dcim_export
from simulator.generator import GroundTruth, generate
from simulator.ib.twins import start_ibnetdiscover, start_ufm
from simulator.kube import start as start_kube_twin
from simulator.snmp import start as start_snmp_twin
from simulator.spec import ClusterSpec
from simulator.ssh import start as start_ssh_twin
from simulator.twin import Twin, TwinRun, start_ticks, stop_pids


def _dcim_twin(truth: GroundTruth, workdir: Path) -> TwinRun:
    path = write_dcim_export(truth, workdir / "dcim.csv").resolve()
    return TwinRun(
        name="dcim",
        sources={"dcim": [{"name": "dcim-export", "path": str(path), "format": "csv"}]},
        summary=f"DCIM export {path.name} ({len(truth.dcim)} rows)",
    )


# Every twin of the simulated cluster, started in this order by `sim up`.
TWINS: list[Twin] = [
    Twin("dcim", _dcim_twin),
    Twin("snmp", start_snmp_twin),
    Twin("ssh", start_ssh_twin),
    Twin("ibnetdiscover", start_ibnetdiscover),
    Twin("ufm", start_ufm),
    Twin("kubernetes", start_kube_twin),
    Twin("dcgm", start_dcgm_twin),
]


@dataclass(frozen=True)
class SimUp:
    spec_name: str
    truth: GroundTruth
    out_dir: Path
    config_path: Path
    runs: tuple[TwinRun, ...]
    reused: bool = False

    @property
    def summary(self) -> str:
        t = self.truth
        base = (
            f"{len(t.hosts())} nodes, {len(t.gpus())} GPUs, {len(t.switches())} switches, "
            f"{len(t.links)} links, {len(t.defects)} injected defects"
        )
        twins = "; ".join(r.summary for r in self.runs if r.summary)
        return f"{base}; twins: {twins}" + (" (already running, reused)" if self.reused else "")

    def twin(self, name: str) -> TwinRun:
        return next(r for r in self.runs if r.name == name)


def _fingerprint(spec: ClusterSpec) -> str:
    body = json.dumps(spec.model_dump(mode="json"), sort_keys=True) + "|" + ",".join(t.name for t in TWINS)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _state_path(sim_root: Path) -> Path:
    return sim_root / "state.json"


# The budget controller's section of the simulated site: the incident replay's envelope
# (tests/integration/test_budget_incident.py: 200 GPU-h, $600, 250 live pods) as every tree's
# default, a flat $3 per GPU-hour estimate, and the reconciler in alert-only mode, so pointing
# `python -m controllers budget-reconciler` at the twins records what it would stop.
SIM_BUDGET: dict[str, Any] = {
    "governed_namespaces": ["agents"],
    "unlabeled_pods": "deny",
    "envelopes": {"*": {"gpu_hours": 200, "cost_usd": 600, "max_live_pods": 250, "max_depth": 3, "max_fan_out": 60}},
    "expected_hours": {"*": 1, "orchestrator": 2, "analyser": 1, "reconciler": 0.5},
    "usd_per_gpu_hour": {"*": 3},
    "reconciler": {"alert_only": True, "period_s": 10, "stop_deadline_s": 30},
    "settlement": {"cost_wait_s": 3600, "unseen_after_s": 900},
}


def site_config(runs: list[TwinRun] | tuple[TwinRun, ...], spec_name: str) -> str:
    """Every twin's sources in one file. Entries of one kind with the same name are one device
    seen by several twins (the SNMP and SSH twins each describe every switch): merged, so the
    switch carries both its ``snmp`` and its ``ssh`` settings."""
    sources: dict[str, dict[str, dict[str, Any]]] = {}
    for run in runs:
        for kind, entries in run.sources.items():
            by_name = sources.setdefault(kind, {})
            for entry in entries:
                by_name[entry["name"]] = {**by_name.get(entry["name"], {}), **entry}
    body = yaml.safe_dump(
        {"version": 1, "sources": {kind: list(v.values()) for kind, v in sources.items()}, "budget": SIM_BUDGET},
        sort_keys=False,
    )
    return (
        f"# Written by `gpufabric sim up` for the simulated cluster {spec_name}; `gpufabric sim down` stops it.\n{body}"
    )


def sim_up(spec: ClusterSpec, sim_root: Path) -> SimUp:
    """Start every twin for ``spec`` under ``sim_root`` (reusing live ones for the same spec)."""
    sim_root.mkdir(parents=True, exist_ok=True)
    truth = generate(spec)
    out_dir = sim_root / spec.name
    state_file = _state_path(sim_root)
    fingerprint = _fingerprint(spec)
    if state_file.exists():
        state = json.loads(state_file.read_text())
        pids = [p for run in state.get("runs", []) for p in run.get("pids", [])]
        config = Path(state.get("config_path", ""))
        alive = all(start_ticks(p) is not None for p in pids)
        if state.get("fingerprint") == fingerprint and alive and config.exists():
            live = tuple(TwinRun(**run) for run in state["runs"])
            return SimUp(spec.name, truth, out_dir, config, live, reused=True)
        sim_down(sim_root)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs: list[TwinRun] = []
    try:
        for twin in TWINS:
            workdir = out_dir / twin.name
            workdir.mkdir(parents=True, exist_ok=True)
            runs.append(twin.start(truth, workdir))
    except BaseException:
        stop_pids([p for r in runs for p in r.pids])
        raise
    text = site_config(runs, spec.name)
    (out_dir / "gpufabric.yaml").write_text(text)
    config_path = (sim_root / "gpufabric.yaml").resolve()
    config_path.write_text(text)
    state_file.write_text(
        json.dumps(
            {
                "spec": spec.name,
                "fingerprint": fingerprint,
                "config_path": str(config_path),
                "runs": [r.__dict__ for r in runs],
            },
            indent=2,
        )
    )
    return SimUp(spec.name, truth, out_dir, config_path, tuple(runs))


def sim_down(sim_root: Path) -> int:
    """Stop every twin process started by ``sim_up``; returns how many were signalled."""
    state_file = _state_path(sim_root)
    if not state_file.exists():
        return 0
    try:
        state = json.loads(state_file.read_text())
    except json.JSONDecodeError:
        state = {}
    stopped = stop_pids([p for run in state.get("runs", []) for p in run.get("pids", [])])
    state_file.unlink(missing_ok=True)
    return stopped
