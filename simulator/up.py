"""``gpufabric sim up``: write every twin's data for a spec, and the gpufabric.yaml that names them.

Today the twins are files (the DCIM export); later ones start servers (SNMP, SSH, UFM, Kubernetes)
and add their endpoints to the same generated site file. Ground truth stays here, in the
simulator: it is never written to the warehouse as if it were observed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from simulator.dcim import write_dcim_export
from simulator.generator import GroundTruth, generate
from simulator.spec import ClusterSpec


@dataclass(frozen=True)
class SimUp:
    spec_name: str
    truth: GroundTruth
    out_dir: Path
    config_path: Path
    dcim_path: Path

    @property
    def summary(self) -> str:
        return (
            f"{len(self.truth.hosts())} nodes, {len(self.truth.gpus())} GPUs, "
            f"{len(self.truth.switches())} switches, {len(self.truth.links)} links, "
            f"{len(self.truth.defects)} injected defects; DCIM export {self.dcim_path.name}"
        )


def site_config(dcim_path: Path) -> dict[str, object]:
    """The gpufabric.yaml a real site would write, pointing at the twins."""
    return {
        "version": 1,
        "sources": {"dcim": [{"name": "dcim-export", "path": str(dcim_path), "format": "csv"}]},
    }


def sim_up(spec: ClusterSpec, sim_root: Path) -> SimUp:
    """Generate the spec's twins under ``sim_root/<spec>``; ``sim_root/gpufabric.yaml`` is the active site."""
    truth = generate(spec)
    out_dir = sim_root / spec.name
    out_dir.mkdir(parents=True, exist_ok=True)
    dcim_path = write_dcim_export(truth, out_dir / "dcim.csv").resolve()
    text = "# Written by `gpufabric sim up`; the site file for the simulated cluster " + spec.name + "\n"
    text += yaml.safe_dump(site_config(dcim_path), sort_keys=False)
    (out_dir / "gpufabric.yaml").write_text(text)
    active = sim_root / "gpufabric.yaml"
    active.write_text(text)
    return SimUp(spec.name, truth, out_dir, active.resolve(), dcim_path)
