"""``gpufabric sim up`` / ``sim down``: start every twin for a spec and write the site file naming them.

A twin is anything that stands in for an external system: files (the DCIM export, saved
ibnetdiscover output) or servers on loopback (snmpsim, fakenos SSH, UFM REST, dcgm-exporter).
Each twin module contributes one :class:`Twin` to :data:`TWINS`; ``sim_up`` starts them all,
detached, records their PIDs in ``<sim root>/state.json`` and writes the ``gpufabric.yaml`` whose
sources point at them. A second ``sim up`` for the same spec finds the twins alive and reuses
them; ``sim down`` stops them. Ground truth stays here, in the simulator: it is never written to
the warehouse as if it were observed.

Kubernetes is not a twin of ours but the real control plane (``simulator.controlplane``), in
``<sim root>/controlplane``, with one fake Node per host (``simulator.controlplane.twin``). It
is not in :data:`TWINS` because it outlives a spec: a ``sim up`` for another spec restarts the
twins but keeps the plane (seconds to start, half an hour to build) and swaps its Nodes. It
starts in a thread while the twins start, since most of its start-up is waiting on its
processes. ``sim_up(..., kubernetes=False)`` leaves it out (the test session's per-spec twins:
Kubernetes tests share one plane of their own).
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from simulator import controlplane
from simulator.controlplane import twin as plane_twin
from simulator.dcgm import start as start_dcgm_twin
from simulator.dcim import write_dcim_export
from simulator.generator import GroundTruth, generate
from simulator.ib.twins import start_ibnetdiscover, start_ufm
from simulator.kube.populate import gpu_facts
from simulator.node_agent import start as start_node_agent
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


KUBERNETES = "kubernetes"  # the TwinRun name of the control plane
PLANE_DIR = "controlplane"

# Every twin of the simulated cluster, started in this order by `sim up` (the control plane
# starts beside them; see the module docstring).
TWINS: list[Twin] = [
    Twin("dcim", _dcim_twin),
    Twin("snmp", start_snmp_twin),
    Twin("ssh", start_ssh_twin),
    Twin("ibnetdiscover", start_ibnetdiscover),
    Twin("ufm", start_ufm),
    Twin("dcgm", start_dcgm_twin),
    Twin("gpu_topo", start_node_agent),  # files a node agent drops: nvidia-smi topo -m per node
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

    @property
    def kubeconfig(self) -> Path | None:
        """The control plane's admin kubeconfig, or None when started without Kubernetes."""
        run = next((r for r in self.runs if r.name == KUBERNETES), None)
        return Path(run.extra["kubeconfig"]) if run else None

    @property
    def kubectl(self) -> Path | None:
        """The pinned kubectl of the control plane's build (the one that matches its version)."""
        run = next((r for r in self.runs if r.name == KUBERNETES), None)
        return Path(run.extra["kubectl"]) if run else None


def plane_workdir(sim_root: Path) -> Path:
    """Where ``sim up`` runs the control plane for a sim root (``<data dir>/sim/controlplane``)."""
    return (sim_root / PLANE_DIR).resolve()


def _fingerprint(spec: ClusterSpec, kubernetes: bool) -> str:
    names = [t.name for t in TWINS] + ([KUBERNETES] if kubernetes else [])
    body = json.dumps(spec.model_dump(mode="json"), sort_keys=True) + "|" + ",".join(names)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _state_path(sim_root: Path) -> Path:
    return sim_root / "state.json"


def _read_state(sim_root: Path) -> dict[str, Any]:
    try:
        state = json.loads(_state_path(sim_root).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


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


# The simulated site's price book (issue 25: the site file's rate cards are the only price list;
# the cost fact prices idle capacity and every tier from them). Per GPU model a "*" card (every
# other tier, and idle) and the agent tiers' commitment prices below it; the same prices the
# FinOps tests load (tests/fixtures/finops/rate_cards.yaml).
SIM_RATE_CARDS: list[dict[str, Any]] = [
    {"gpu_model": model, "tier": tier, "usd_per_gpu_hour": price, "effective_from": "2025-01-01"}
    for model, prices in (
        ("NVIDIA-H100-80GB-HBM3", {"*": 4.00, "interactive": 3.50, "standard": 3.00, "batch": 2.50}),
        ("NVIDIA-B200", {"*": 6.50, "interactive": 5.80, "standard": 5.00, "batch": 4.20}),
        ("NVIDIA-GB200", {"*": 7.50, "interactive": 6.80, "standard": 6.00, "batch": 5.00}),
    )
    for tier, price in prices.items()
]


def sim_tenants(truth: GroundTruth) -> list[dict[str, Any]]:
    """Two teams sharing the simulated GPUs, so a publish renders Kueue's whole object set (root
    and team cohorts, priority classes, a ClusterQueue and LocalQueue per team): ``research``
    with a quota of half the GPUs (keyed by the GFD product its nodes carry, so it matches the
    pool on any spec), ``inference`` borrowing only. Their namespaces exist on the simulated
    cluster (``sim up`` creates them), as a team's namespace does before its queue is published."""
    product = gpu_facts(truth.spec.node.gpu_model).product
    return [
        {"id": "research", "name": "Research", "tiers": ["prod", "preemptible"], "cohort": "science",
         "gpu_quota": {product: len(truth.gpus()) // 2}},
        {"id": "inference", "name": "Inference", "tiers": ["prod"]},
    ]  # fmt: skip


def site_config(
    runs: list[TwinRun] | tuple[TwinRun, ...], spec_name: str, tenants: list[dict[str, Any]] | None = None
) -> str:
    """Every twin's sources in one file. Entries of one kind with the same name are one device
    seen by several twins (the SNMP and SSH twins each describe every switch): merged, so the
    switch carries both its ``snmp`` and its ``ssh`` settings."""
    sources: dict[str, dict[str, dict[str, Any]]] = {}
    for run in runs:
        for kind, entries in run.sources.items():
            by_name = sources.setdefault(kind, {})
            for entry in entries:
                by_name[entry["name"]] = {**by_name.get(entry["name"], {}), **entry}
    doc: dict[str, Any] = {"version": 1, "sources": {kind: list(v.values()) for kind, v in sources.items()}}
    if tenants:
        doc["tenants"] = tenants
    doc["rate_cards"] = SIM_RATE_CARDS
    doc["budget"] = SIM_BUDGET
    body = yaml.safe_dump(doc, sort_keys=False)
    return (
        f"# Written by `gpufabric sim up` for the simulated cluster {spec_name}; `gpufabric sim down` stops it.\n{body}"
    )


def sim_up(
    spec: ClusterSpec,
    sim_root: Path,
    *,
    kubernetes: bool = True,
    progress: Callable[[str], None] | None = None,
) -> SimUp:
    """Start every twin for ``spec`` under ``sim_root`` (reusing live ones for the same spec).

    With ``kubernetes`` (the default) also the real control plane in ``<sim_root>/controlplane``,
    built first if the binaries are not cached (``progress`` gets its lines; stderr by default).
    """
    sim_root.mkdir(parents=True, exist_ok=True)
    truth = generate(spec)
    out_dir = sim_root / spec.name
    fingerprint = _fingerprint(spec, kubernetes)
    plane_dir = plane_workdir(sim_root)
    state = _read_state(sim_root)
    if state:
        pids = [p for run in state.get("runs", []) for p in run.get("pids", [])]
        config = Path(state.get("config_path", ""))
        alive = all(start_ticks(p) is not None for p in pids)
        plane_ok = not kubernetes or controlplane.status(plane_dir) is not None
        if state.get("fingerprint") == fingerprint and alive and plane_ok and config.exists():
            live = tuple(TwinRun(**run) for run in state["runs"])
            return SimUp(spec.name, truth, out_dir, config, live, reused=True)
        # Another spec (or a twin died): restart the twins; a live plane stays and swaps its nodes.
        sim_down(sim_root, plane=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs: list[TwinRun] = []
    tenants = sim_tenants(truth)
    # A missing build is a long, loud step of its own (progress per binary), before anything starts.
    binaries = controlplane.build(progress=progress) if kubernetes else None
    with cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="controlplane") as pool:
        plane_job = None
        if binaries is not None:
            namespaces = [t["id"] for t in tenants]
            plane_job = pool.submit(
                plane_twin.start, truth, plane_dir, progress=progress, binaries=binaries, namespaces=namespaces
            )
        try:
            for twin in TWINS:
                if progress is not None:
                    progress(f"starting the {twin.name} twin")
                workdir = out_dir / twin.name
                workdir.mkdir(parents=True, exist_ok=True)
                runs.append(twin.start(truth, workdir))
            if plane_job is not None:
                runs.append(plane_job.result())
        except BaseException:
            # The twins go; a plane that came up stays for the next `sim up` (`sim down` stops it).
            stop_pids([p for r in runs for p in r.pids])
            raise
    text = site_config(runs, spec.name, tenants)
    (out_dir / "gpufabric.yaml").write_text(text)
    config_path = (sim_root / "gpufabric.yaml").resolve()
    config_path.write_text(text)
    _state_path(sim_root).write_text(
        json.dumps(
            {
                "spec": spec.name,
                "fingerprint": fingerprint,
                "config_path": str(config_path),
                "kubernetes": kubernetes,
                "runs": [r.__dict__ for r in runs],
            },
            indent=2,
        )
    )
    return SimUp(spec.name, truth, out_dir, config_path, tuple(runs))


def sim_down(sim_root: Path, *, plane: bool = True, progress: Callable[[str], None] | None = None) -> int:
    """Stop every twin process started by ``sim_up`` and, with ``plane``, the control plane in
    ``<sim_root>/controlplane`` (also what a killed ``sim up`` left there: ``controlplane.down``
    finds those in ``/proc``); returns how many processes were signalled."""
    state = _read_state(sim_root)
    stopped = stop_pids([p for run in state.get("runs", []) for p in run.get("pids", [])])
    _state_path(sim_root).unlink(missing_ok=True)
    if plane:
        stopped += len(controlplane.down(plane_workdir(sim_root), progress=progress or (lambda _m: None)))
    return stopped
