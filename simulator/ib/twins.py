"""Twin entries for ``simulator.up.TWINS``: saved ibnetdiscover output and the UFM REST twin."""

from __future__ import annotations

from pathlib import Path

from simulator.generator import GroundTruth
from simulator.ib import ufm
from simulator.ib.ibnetdiscover import write_ibnetdiscover
from simulator.twin import TwinRun


def start_ibnetdiscover(truth: GroundTruth, workdir: Path) -> TwinRun:
    """The output an operator hands over: generated text, any speed (NDR, XDR included)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = write_ibnetdiscover(truth, workdir / "ibnetdiscover.out").resolve()
    return TwinRun(
        name="ibnetdiscover",
        sources={"fabric_managers": [{"name": "ibnetdiscover-saved", "kind": "ibnetdiscover", "path": str(path)}]},
        summary=f"ibnetdiscover output {path.name}",
        extra={"path": str(path)},
    )


def start_ufm(truth: GroundTruth, workdir: Path) -> TwinRun:
    run: TwinRun = ufm.start(truth, workdir)
    return run
