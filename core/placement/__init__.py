"""Placement cost model: what a placement costs a training job in collective time (issue 22).

Pure functions, no I/O. The public API:

* ``fabric_from_topology(model, gpu_model)`` -> :class:`Fabric` from a derived
  :class:`core.topology.TopologyModel` (miscabled rails and degraded leaves included);
  ``synthetic_fabric(...)`` and ``with_leaf_uplinks(...)`` for regular or degraded test fabrics.
* ``collective_time(op, algorithm, size_bytes, placement, fabric, background=None)`` ->
  :class:`CollectiveResult` (seconds, nccl-tests' algbw and busbw, the bottleneck). ``op`` is
  ``all_reduce`` / ``all_gather`` / ``reduce_scatter``; ``algorithm`` ``ring`` / ``tree`` /
  ``hierarchical`` / ``auto``; ``placement`` a :class:`Placement` (node names in rank order,
  GPUs per node); ``background`` leaf id -> other jobs' flows through its uplinks.
* ``step_time(compute_seconds, collectives, overlap=0.0)`` -> :class:`StepTime`: compute plus
  the exposed communication.
* ``calibration_table()`` (the model against published nccl-tests figures) and
  ``seed_claim_sweep()`` (a 4-node job over 1, 2 and 4 leaves at 1:1, 2:1, 4:1 and degraded).

Equations, constants and sources: ``docs/placement.md``.
"""

from core.placement.calibration import FIGURES, CalibrationRow, PublishedFigure, calibration_table
from core.placement.collectives import (
    Algorithm,
    Collective,
    CollectiveResult,
    Placement,
    StepTime,
    bus_factor,
    collective_time,
    step_time,
)
from core.placement.fabric import (
    IB_LINK_GBITS,
    NVLINK_BIDIR_GBYTES,
    Efficiency,
    Fabric,
    LatencyModel,
    Leaf,
    Nic,
    Node,
    SpineGroup,
    fabric_from_topology,
    synthetic_fabric,
    with_leaf_uplinks,
)
from core.placement.sweep import SweepCase, SweepRow, seed_claim_sweep

__all__ = [
    "FIGURES",
    "IB_LINK_GBITS",
    "NVLINK_BIDIR_GBYTES",
    "Algorithm",
    "CalibrationRow",
    "Collective",
    "CollectiveResult",
    "Efficiency",
    "Fabric",
    "LatencyModel",
    "Leaf",
    "Nic",
    "Node",
    "Placement",
    "PublishedFigure",
    "SpineGroup",
    "StepTime",
    "SweepCase",
    "SweepRow",
    "bus_factor",
    "calibration_table",
    "collective_time",
    "fabric_from_topology",
    "seed_claim_sweep",
    "step_time",
    "synthetic_fabric",
    "with_leaf_uplinks",
]
