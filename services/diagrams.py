"""Paint what ``core`` laid out: the topology diagram (PNG, SVG) and the small bar charts of the
FinOps asset, with matplotlib's Agg canvas directly (no display, no pyplot and its global figures).

Byte-stable output, so a diagram can be diffed, cached and asserted on: the SVG carries no date
(``metadata={"Date": None}``) and a fixed ``svg.hashsalt`` (matplotlib otherwise salts its clip
path ids with random bytes), text stays text (``svg.fonttype: none``, also what lets a browser
search and a test read the labels), and PNGs carry no ``Software`` stamp. rcParams are process
global, so one lock serialises renders (assets may run in threads).

Images reach the Dagster UI the way Dagster's own quickstart attaches a plot: a markdown entry
holding a base64 ``data:image/png`` image (``MetadataValue.md``; dagster-io/dagster
examples/quickstart_etl/src/quickstart_etl/defs/assets.py). Every PNG is kept under
``MAX_PNG_BYTES`` by lowering the resolution, since metadata is stored with every materialization.
"""

from __future__ import annotations

import base64
import io
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Patch, Rectangle

from core.topology.diagram import EDGE_COLOUR, REGION_FILL, SEVERITY_COLOUR, Diagram

MAX_PNG_BYTES = 200_000
MAX_WIDTH_IN = 14.0  # inches: at PNG_DPI[0] about a screen's width, so 7-point labels stay legible
INCH_PER_UNIT = 0.5
PNG_DPI = (100, 80, 64, 50)  # tried in turn until the PNG fits MAX_PNG_BYTES
_RC: dict[Any, Any] = {"svg.hashsalt": "gpufabric", "svg.fonttype": "none", "font.family": "DejaVu Sans"}
_LOCK = threading.Lock()
FOOTER_LINE_IN = 0.2


@contextmanager
def chart_style() -> Iterator[None]:
    with _LOCK, rc_context(_RC):
        yield


def _save(fig: Figure, fmt: str, dpi: float) -> bytes:
    buf = io.BytesIO()
    FigureCanvasAgg(fig)
    meta: dict[str, Any] = {"Date": None} if fmt == "svg" else {"Software": None}
    fig.savefig(buf, format=fmt, dpi=dpi, metadata=meta)
    return buf.getvalue()


def fit_png(fig: Figure) -> bytes:
    """The sharpest PNG under MAX_PNG_BYTES (the last try is returned even if it is over)."""
    png = b""
    for dpi in PNG_DPI:
        png = _save(fig, "png", dpi)
        if len(png) <= MAX_PNG_BYTES:
            break
    return png


def markdown_image(png: bytes, alt: str) -> str:
    """The markdown Dagster's UI renders as an image (see the module docstring)."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


# --- topology -------------------------------------------------------------------------------


def _fontsize(text: str, width_pt: float, largest: float = 7.0, smallest: float = 3.5) -> float:
    longest = max((len(line) for line in text.splitlines()), default=1) or 1
    return max(smallest, min(largest, width_pt / (0.62 * longest)))


def _wrapped(text: str, width_pt: float, legible: float = 5.5) -> str:
    """Break a line that would need a font under ``legible`` points at its middle-most hyphen
    (switch names are hyphenated: ``ib-leaf-su01-`` / ``r[0-7]``)."""
    out = []
    for line in text.splitlines():
        cuts = [i for i, ch in enumerate(line) if ch == "-" and 0 < i < len(line) - 1]
        if _fontsize(line, width_pt) < legible and cuts:
            cut = min(cuts, key=lambda i: abs(i - len(line) / 2)) + 1
            out += [line[:cut], line[cut:]]
        else:
            out.append(line)
    return "\n".join(out)


def _footer_lines(d: Diagram) -> list[tuple[str, str]]:
    """(text, colour) under the picture: every finding kind with its count, then what matched nothing."""
    lines = [("findings: none", "#333333")] if not d.findings_by_kind else [(
        f"findings: {sum(d.findings_by_kind.values())} (a box's outline shows its worst; fabric-wide ones name "
        "no drawn switch)", "#333333")]  # fmt: skip
    for kind, n in sorted(d.findings_by_kind.items(), key=lambda kv: (-kv[1], kv[0])):
        wide = d.fabric_wide.get(kind, 0)
        sev = d.severity_by_kind[kind]
        lines.append((f"  {kind}: {n} ({sev})" + (f", {wide} fabric-wide" if wide else ""), SEVERITY_COLOUR[sev]))
    if d.unresolved:
        lines.append((f"unresolved observations (unknown neighbours, bad ids): {d.unresolved}", "#555555"))
    return lines


def _topology_figure(d: Diagram) -> Figure:
    scale = min(INCH_PER_UNIT, MAX_WIDTH_IN / max(d.width, 1.0))
    footer = _footer_lines(d)
    pic_h = d.height * scale
    foot_h = (len(footer) + 1.5) * FOOTER_LINE_IN
    fig_w, fig_h = max(d.width * scale, 6.0), pic_h + foot_h + 0.5
    fig = Figure(figsize=(fig_w, fig_h))
    fig.suptitle(d.title, x=0.01, y=1 - 0.05 / fig_h, ha="left", va="top", fontsize=11, fontweight="bold")
    fig.legend(handles=[Patch(facecolor=c, edgecolor="#333333", label=t) for t, c in d.legend], loc="upper right",
               ncols=max(len(d.legend), 1), fontsize=7, frameon=False, handlelength=1.0, columnspacing=1.0)  # fmt: skip
    ax = fig.add_axes((0.0, foot_h / fig_h, 1.0, pic_h / fig_h))
    margin = (fig_w / scale - d.width) / 2  # equal aspect: the axes is as wide as the figure
    ax.set_xlim(-margin, d.width + margin)
    ax.set_ylim(d.height, 0)
    ax.set_axis_off()
    pt_per_unit = scale * 72
    for r in d.regions:
        ax.add_patch(Rectangle((r.x0, r.y0), r.x1 - r.x0, r.y1 - r.y0, facecolor=REGION_FILL, edgecolor="#c8d3e0",
                               linewidth=0.6, zorder=0))  # fmt: skip
        ax.text((r.x0 + r.x1) / 2, r.y1 - 0.08, r.label, ha="center", va="bottom", color="#4a5a70",
                fontsize=_fontsize(r.label, (r.x1 - r.x0) * pt_per_unit, largest=7), zorder=1)  # fmt: skip
    if d.edges:
        ax.add_collection(LineCollection(
            [((e.x1, e.y1), (e.x2, e.y2)) for e in d.edges], linewidths=[e.width for e in d.edges],
            colors=EDGE_COLOUR, alpha=0.55 if len(d.edges) <= 64 else 0.3, zorder=1,
        ))  # fmt: skip
    for title, y in d.sections:
        ax.text(0.1, y, title, ha="left", va="top", fontsize=9, fontweight="bold", color="#222222")
    for b in d.boxes:
        ax.add_patch(FancyBboxPatch(
            (b.x - b.w / 2, b.y - b.h / 2), b.w, b.h, boxstyle="round,pad=0,rounding_size=0.06",
            facecolor=b.fill, edgecolor=b.stroke, linewidth=2.2 if b.severity else 0.6, zorder=2,
        ))  # fmt: skip
        text = _wrapped(b.label + (f"\n{b.detail}" if b.detail else ""), b.w * pt_per_unit)
        ax.text(b.x, b.y, text, ha="center", va="center", zorder=3, color="#111111", linespacing=1.1,
                fontsize=_fontsize(text, b.w * pt_per_unit))  # fmt: skip
        if b.findings:
            mark = b.mark
            ax.text(b.x, b.y + b.h / 2 + 0.04, mark, ha="center", va="top", zorder=4, color=b.stroke,
                    fontsize=_fontsize(mark, (b.w + 0.25) * pt_per_unit, largest=6.5), fontweight="bold")  # fmt: skip
    for i, (line, colour) in enumerate(footer):
        fig.text(0.01, (foot_h - (i + 1) * FOOTER_LINE_IN) / fig_h, line, ha="left", va="bottom", color=colour,
                 fontsize=8)  # fmt: skip
    return fig


def topology_svg(d: Diagram) -> bytes:
    with chart_style():
        return _save(_topology_figure(d), "svg", 72)


def topology_png(d: Diagram) -> bytes:
    with chart_style():
        return fit_png(_topology_figure(d))


# --- bar charts -----------------------------------------------------------------------------


def _bars_figure(title: str, panels: Sequence[tuple[str, Mapping[str, float]]], unit: str, top: int) -> Figure:
    rows = max([1, *(min(len(v), top + 1) for _, v in panels)])
    fig = Figure(figsize=(4.2 * max(len(panels), 1), 0.9 + 0.28 * rows), layout="constrained")
    fig.suptitle(title, fontsize=11, fontweight="bold", x=0.01, ha="left")
    axes = fig.subplots(1, max(len(panels), 1), squeeze=False)[0]
    for ax, (name, values) in zip(axes, panels or [("nothing to show", {})], strict=False):
        ranked = sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ranked[:top] + ([("other", sum(v for _, v in ranked[top:]))] if len(ranked) > top else [])
        ax.barh([k for k, _ in shown][::-1], [v for _, v in shown][::-1], color="#4a90d9")
        ax.set_title(name, fontsize=9, loc="left")
        ax.tick_params(labelsize=7)
        ax.set_xlabel(unit, fontsize=7)
        ax.spines[["top", "right"]].set_visible(False)
        if not shown:
            ax.text(0.5, 0.5, "nothing to show", ha="center", va="center", transform=ax.transAxes, fontsize=8)
    return fig


def bar_panels_png(title: str, panels: Sequence[tuple[str, Mapping[str, float]]], unit: str,
                   top: int = 12) -> bytes:  # fmt: skip
    """Horizontal bars, one panel per breakdown (largest first, the rest summed as "other")."""
    with chart_style():
        return fit_png(_bars_figure(title, panels, unit, top))
