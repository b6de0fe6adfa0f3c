"""A deterministic agent-workload simulator for FinOps: a week of pods with exact accounting.

``simulate_week`` plans a week of mixed workloads (training jobs, agent trees with root/parent/
depth labels, MIG tenants, idle GPUs, and bad input) on a handful of nodes, as pod manifests with
explicit start and end times, DCGM activity per pod-hour, and its own exact accounting of
GPU-hours and cost per client/task/agent type/tier for both cost bases. See ``week.py``.
``plane.py`` holds what agent workloads on the real control plane share (fake GPU nodes of a
caller's own, namespaces, waits, and the same-name replacement race for UID preconditions).
"""

from simulator.agents.week import Accounting, SimNode, SimPod, SimWeek, runaway_tree, simulate_week

__all__ = ["Accounting", "SimNode", "SimPod", "SimWeek", "runaway_tree", "simulate_week"]
