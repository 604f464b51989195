"""The pictures of `plan-compare`: one Gantt chart per schedule, and one device-by-time panel per schedule on a
shared time axis.

Both state the figures of ``compare.csv`` in its units (`Comparison.units`: the model's "us"/"MiB", or the user's
own units on unit costs), read from the timeline that is drawn: the time axis is in those units (not ticks), and
the memory curve is the pipeline accounting the CSV's ``peak_memory`` uses (parameters of the stages on a device
plus activations in flight, `planner.pipeline.metrics`), not the generic memory model of an op graph.

Bars are coloured by action kind (F, B, W, BW, F&B) as in `planner.plot`; no pyplot (Figure + Agg canvas); the
`*_figure` functions return the `Figure` so that tests read what is drawn.
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from planner.cost.instance import UNBOUNDED_BYTES
from planner.pipeline.metrics import activation_events, device_params
from planner.plot import _KIND_COLORS, default_group, gantt_figure
from planner.schedule.memory import MemoryProfile
from planner.schedule.timeline import Timeline


def pipeline_memory_profile(pipeline, timeline: Timeline) -> MemoryProfile:
    """Memory over time under the pipeline accounting of `planner.pipeline.metrics.figures` (its peak per device
    is `PipelineFigures.peak_memory_bytes`); communication streams hold nothing."""
    stage_dev, events = activation_events(pipeline, timeline)
    params = device_params(pipeline, stage_dev)
    delta: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for d, t, b in events:
        delta[d][t] += b
    steps, peaks, peak_ticks = [], [], []
    for d in range(timeline.num_devices):
        base = params[d] if d < len(params) else 0
        level, row, peak, peak_tick = base, [(timeline.start_tick, base)], base, timeline.start_tick
        for t in sorted(delta[d]):  # frees and allocations at one tick net out, as in `pipeline_memory`
            level += delta[d][t]
            row.append((t, level))
            if level > peak:
                peak, peak_tick = level, t
        steps.append(tuple(row))
        peaks.append(peak)
        peak_ticks.append(peak_tick)
    return MemoryProfile(tuple(timeline.device_names), (UNBOUNDED_BYTES,) * timeline.num_devices, tuple(steps),
                         tuple(peaks), tuple(peak_ticks), ())


def schedule_figure(cmp, row) -> Figure:
    """The Gantt chart of one schedule of a `Comparison`, in the comparison's units (module docstring)."""
    time_unit, memory_unit = cmp.units()
    timeline = dataclasses.replace(row.timeline, memory=pipeline_memory_profile(row.pipeline, row.timeline))
    # the CSV's bubble counts the compute streams only; the timeline's own ratio would count the communication
    # streams' idle time too (47.2 % drawn against 48.8 % in the CSV on the DeepSeek-V3 preset)
    return gantt_figure(timeline, title=row.name, time_unit=(cmp.scales.ticks_per_unit, time_unit),
                        memory_unit=(cmp.scales.bytes_per_unit, memory_unit),
                        bubble_ratio=cmp.values(row)["bubble_ratio"])


def plot_schedule(cmp, row, path: str | os.PathLike[str], *, dpi: int = 120) -> Path:
    """Save `schedule_figure(cmp, row)` as the PNG `path`."""
    schedule_figure(cmp, row).savefig(path, dpi=dpi, bbox_inches="tight")
    return Path(path)


def side_by_side_figure(cmp, *, dpi: int = 110) -> Figure:
    """One panel per schedule on a shared time axis (in the comparison's time unit); each title gives the CSV's
    makespan, bubble ratio and peak memory with their units."""
    rows = cmp.ok_rows()
    time_unit, memory_unit = cmp.units()
    scale = 1.0 / cmp.scales.ticks_per_unit
    heights = [0.35 * r.timeline.num_devices + 0.6 for r in rows]
    fig = Figure(figsize=(13, sum(heights) + 0.8), dpi=dpi)
    FigureCanvasAgg(fig)
    gs = fig.add_gridspec(len(rows), 1, height_ratios=heights, hspace=0.55)
    x_end = max(max(r.timeline.end_tick for r in rows) * scale, 1e-9)
    for i, r in enumerate(rows):
        ax = fig.add_subplot(gs[i])
        tl = r.timeline
        # one bar collection per device and kind: one per bar made a 16-device, 64-micro-batch comparison take
        # about half an hour to draw
        bars: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
        for pl in tl.placements:
            span = (pl.start_tick * scale, (pl.end_tick - pl.start_tick) * scale)
            bars[pl.device, default_group(pl.task)].append(span)
        for (device, g), spans in bars.items():
            ax.broken_barh(spans, (device - 0.4, 0.8), facecolors=_KIND_COLORS.get(g, "0.5"), edgecolors="white",
                           linewidth=0.3)
        v = cmp.values(r)
        ax.set_title(f"{r.name}: makespan {v['makespan']:.4g} {time_unit}, bubble {v['bubble_ratio']:.1%}, "
                     f"peak memory {v['peak_memory']:.4g} {memory_unit}", fontsize=8, loc="left")
        ax.set_ylim(tl.num_devices - 0.5, -0.5)
        ax.set_yticks(range(tl.num_devices))
        ax.tick_params(labelsize=6)
        ax.set_xlim(0, x_end)
        if i == len(rows) - 1:
            ax.set_xlabel(f"time ({time_unit})", fontsize=7)
    handles = [Patch(facecolor=c, label=k) for k, c in _KIND_COLORS.items()]
    fig.legend(handles=handles, loc="upper right", fontsize=7, ncol=len(handles), frameon=False)
    return fig


def plot_side_by_side(cmp, path: str | os.PathLike[str], *, dpi: int = 110) -> Path:
    """Save `side_by_side_figure(cmp)` as the PNG `path`."""
    side_by_side_figure(cmp, dpi=dpi).savefig(path, dpi=dpi, bbox_inches="tight")
    return Path(path)
