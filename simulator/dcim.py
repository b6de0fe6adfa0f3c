"""The DCIM export twin: the node inventory a data-center team keeps, as CSV or YAML.

Inventory is the third opinion beside the switches and the fabric manager: it says which rack a
node is in, which HCA is meant to be on which rail, and which nodes exist at all. The pipeline
reconciles it against what the fabric shows, so the export is written from the ground truth's
``dcim`` records, which already carry the spec's inventory defects (``dcim_extra_hosts``: rows
for nodes with no fabric presence; ``dcim_missing_hosts``: cabled nodes with no row). HCA rails are
the *intended* ones, so a miscabled port shows up as a disagreement, as it would in real life.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Literal

import yaml

from simulator.generator import DcimRecord, GroundTruth

DCIM_COLUMNS: tuple[str, ...] = (
    "rack",
    "node",
    "role",
    "gpu_model",
    "gpu_count",
    "hca_count",
    "hcas",
    "bmc_address",
    "serial",
    "su",
)
"""Column order of the export; ``hcas`` is ``mlx5_0:rail0:<guid>;mlx5_1:rail1:<guid>;...``."""


def dcim_row(record: DcimRecord) -> dict[str, str | int]:
    """One export row, flat, in ``DCIM_COLUMNS`` order."""
    return {
        "rack": record.rack,
        "node": record.node,
        "role": record.role,
        "gpu_model": record.gpu_model or "",  # a server without GPUs: the cell is empty
        "gpu_count": record.gpu_count,
        "hca_count": record.hca_count,
        "hcas": record.hcas_field,
        "bmc_address": record.bmc_address,
        "serial": record.serial,
        "su": record.su,
    }


def write_dcim_export(truth: GroundTruth, path: str | Path, format: Literal["csv", "yaml"] = "csv") -> Path:
    """Write the inventory export, sorted by rack then node as DCIM tools list it.

    CSV has a header row; YAML is a list of mappings with the same keys and values, so one reader
    can handle both. Serials are written as strings (they have leading zeros).
    """
    if format not in ("csv", "yaml"):
        raise ValueError(f"format must be 'csv' or 'yaml', got {format!r}")
    path = Path(path)
    rows = [dcim_row(r) for r in sorted(truth.dcim, key=lambda r: (r.rack, r.node))]
    if format == "csv":
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(DCIM_COLUMNS))
            writer.writeheader()
            writer.writerows(rows)
    else:
        with path.open("w", encoding="utf-8") as fh:
            yaml.safe_dump(rows, fh, sort_keys=False, default_flow_style=False)
    return path
