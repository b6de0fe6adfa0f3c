"""The placement chart: step-time slowdown against leaf blocks crossed, one line per
oversubscription (1:1, 2:1, 4:1, degraded), one panel per load from other jobs (issue 22, part 4).

The figures are the cost model's sweep (``core.placement.seed_claim_sweep``: a 4-node job on
the H100 SuperPOD shape spread over 1, 2 and 4 leaf groups). Painted the way
``services.diagrams`` paints: matplotlib's Agg canvas, its style lock (rcParams are process
global) and its PNG size cap, so the image fits in asset metadata.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from core.placement.sweep import SweepRow
from services.diagrams import chart_style, fit_png  # one lock and one size cap for every chart we paint

GIB = 1 << 30


def slowdown_figure(rows: Sequence[SweepRow], *, size_bytes: int = GIB, comm_share: float = 0.3) -> Figure:
    chosen = [r for r in rows if r.size_bytes == size_bytes and abs(r.comm_share - comm_share) < 1e-9]
    if not chosen:
        raise ValueError(f"no sweep rows for {size_bytes} bytes at a communication share of {comm_share}")
    loads = sorted({r.load for r in chosen})
    fig = Figure(figsize=(4.0 * len(loads), 3.4), layout="constrained")
    title = (f"4-node job: step-time slowdown vs leaf blocks crossed ({size_bytes / GIB:g} GiB all-reduce, "
             f"{comm_share:.0%} of the one-leaf step in communication)")  # fmt: skip
    fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    axes = fig.subplots(1, len(loads), squeeze=False, sharey=True)[0]
    for ax, load in zip(axes, loads, strict=True):
        for case in dict.fromkeys(r.case for r in chosen):
            points = sorted((r.leaves, 100 * r.slowdown) for r in chosen if r.case == case and r.load == load)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=case)
        ax.set_title(f"other jobs at {load:.0%} of NIC rate", fontsize=9, loc="left")
        ax.set_xlabel("leaf blocks the job spans", fontsize=8)
        ax.set_xticks(sorted({r.leaves for r in chosen}))
        ax.tick_params(labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0].set_ylabel("slowdown vs one leaf (%)", fontsize=8)
    axes[-1].legend(fontsize=7, frameon=False)
    return fig


def slowdown_png(rows: Sequence[SweepRow], *, size_bytes: int = GIB, comm_share: float = 0.3) -> bytes:
    with chart_style():
        return fit_png(slowdown_figure(rows, size_bytes=size_bytes, comm_share=comm_share))
