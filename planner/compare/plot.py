"""The side-by-side picture of `plan-compare`: one device-by-time panel per schedule on a shared time axis.

Bars are coloured by action kind (F, B, W, BW, F&B) as in `planner.plot`; no pyplot (Figure + Agg canvas).
"""

from __future__ import annotations

import os
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from planner.plot import _KIND_COLORS, default_group


def plot_side_by_side(cmp, path: str | os.PathLike[str], *, dpi: int = 110) -> Path:
    rows = cmp.ok_rows()
    scale = 1.0 / cmp.scales.ticks_per_unit
    heights = [0.35 * r.timeline.num_devices + 0.6 for r in rows]
    fig = Figure(figsize=(13, sum(heights) + 0.8), dpi=dpi)
    FigureCanvasAgg(fig)
    gs = fig.add_gridspec(len(rows), 1, height_ratios=heights, hspace=0.55)
    x_end = max(r.timeline.end_tick for r in rows) * scale
    for i, r in enumerate(rows):
        ax = fig.add_subplot(gs[i])
        tl = r.timeline
        for pl in tl.placements:
            g = default_group(pl.task)
            w = (pl.end_tick - pl.start_tick) * scale
            ax.broken_barh([(pl.start_tick * scale, w)], (pl.device - 0.4, 0.8),
                           facecolors=_KIND_COLORS.get(g, "0.5"), edgecolors="white", linewidth=0.3)
        v = cmp.values(r)
        ax.set_title(f"{r.name}: makespan {v['makespan']:.4g}, bubble {v['bubble_ratio']:.1%}, "
                     f"peak memory {v['peak_memory']:.4g}", fontsize=8, loc="left")
        ax.set_ylim(tl.num_devices - 0.5, -0.5)
        ax.set_yticks(range(tl.num_devices))
        ax.tick_params(labelsize=6)
        ax.set_xlim(0, x_end)
    handles = [Patch(facecolor=c, label=k) for k, c in _KIND_COLORS.items()]
    fig.legend(handles=handles, loc="upper right", fontsize=7, ncol=len(handles), frameon=False)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return Path(path)
