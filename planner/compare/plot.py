"""The pictures of `plan-compare`: one Gantt chart per schedule, and one device-by-time panel per schedule on a
shared time axis.

Both state the figures of ``compare.csv`` in its units (`Comparison.units`: the model's "us"/"MiB", or the user's
own units on unit costs), read from the timeline that is drawn: the time axis is in those units (not ticks), and
the memory curve is the pipeline accounting the CSV's ``peak_memory`` uses (parameters of the stages on a device
plus activations in flight, `planner.pipeline.metrics`), not the generic memory model of an op graph.

Bars are coloured by action kind (F, B, W, BW, F&B, and the communication kinds SEND_F, DISPATCH_B, ...: the
stage and micro-batch of a label are left out, so one kind is one colour); the legend says what each kind does and
a caption gives the labels' grammar (`planner.schedule.actions`).  Every row is named: a device ``p0`` and, where
the pipeline has communication streams, the stream ``p0/comm`` of that device.  No pyplot (Figure + Agg canvas);
the `*_figure` functions return the `Figure` so that tests read what is drawn.
"""

from __future__ import annotations

import dataclasses
import os
import re
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

# what each action kind does, as the legends say it (the README's Outputs section: pipeline action labels)
KIND_WORDS = {
    "F": "F: forward",
    "B": "B: backward, input gradient",
    "W": "W: backward, weight gradient",
    "BW": "BW: full backward (B and W)",
    "F&B": "F&B: a forward and a backward overlapped",
    "SEND_F": "SEND_F: send activations",
    "SEND_B": "SEND_B: send gradients",
    "RECV_F": "RECV_F: receive activations",
    "RECV_B": "RECV_B: receive gradients",
    "DISPATCH_F": "DISPATCH_F: MoE all-to-all dispatch, forward",
    "COMBINE_F": "COMBINE_F: MoE all-to-all combine, forward",
    "DISPATCH_B": "DISPATCH_B: MoE all-to-all dispatch, backward",
    "COMBINE_B": "COMBINE_B: MoE all-to-all combine, backward",
}
LABEL_GRAMMAR = ("labels: <stage><kind><micro-batch>, e.g. 3F4 = stage 3's forward of micro-batch 4; "
                 "a pair 3F4&5B2 runs a forward and a backward together on one device")
_COMM_COLORS = {"SEND_F": "0.55", "SEND_B": "0.35", "RECV_F": "0.7", "RECV_B": "0.45", "DISPATCH_F": "#9ecae1",
                "COMBINE_F": "#6baed6", "DISPATCH_B": "#fdae6b", "COMBINE_B": "#e6550d"}
_LABEL = re.compile(r"^\d+([A-Z_]+)\d+$")  # <stage><KIND><micro-batch>, communication kinds included
_FONT = 9  # the pictures' smallest text: ticks, legends, captions


def action_group(task: str) -> str:
    """The kind of a pipeline label without its stage and micro-batch (``0COMBINE_B3`` -> ``COMBINE_B``); other
    names as `planner.plot.default_group` groups them."""
    kind = default_group(task)
    if kind in KIND_WORDS:
        return kind
    found = _LABEL.match(task)
    return found[1] if found else kind


def kind_color(kind: str) -> str:
    """One colour per kind, the same in every picture."""
    return _KIND_COLORS.get(kind) or _COMM_COLORS.get(kind, "0.5")


def row_names(num_devices: int, timeline: Timeline) -> tuple[str, ...]:
    """A name for every row of a pipeline's timeline: its own names where they say which rows are communication
    streams, else ``p<d>`` for the `num_devices` devices and ``p<d>/comm`` for the stream of device d after them."""
    names = tuple(timeline.device_names)
    if any("/" in n for n in names) or len(names) <= num_devices:
        return names
    return tuple(f"p{d}" if d < num_devices else f"p{(d - num_devices) % num_devices}/comm"
                 for d in range(len(names)))


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
    timeline = dataclasses.replace(row.timeline, memory=pipeline_memory_profile(row.pipeline, row.timeline),
                                   device_names=row_names(cmp.num_devices, row.timeline))
    # the CSV's bubble counts the compute streams only; the timeline's own ratio would count the communication
    # streams' idle time too (47.2 % drawn against 48.8 % in the CSV on the DeepSeek-V3 preset)
    fig = gantt_figure(timeline, title=row.name, time_unit=(cmp.scales.ticks_per_unit, time_unit),
                       memory_unit=(cmp.scales.bytes_per_unit, memory_unit),
                       bubble_ratio=cmp.values(row)["bubble_ratio"], group=action_group,
                       group_colors=kind_color, group_words=KIND_WORDS)
    fig.text(0.01, 0.0, LABEL_GRAMMAR, fontsize=_FONT, color="0.3", ha="left", va="top")
    return fig


def plot_schedule(cmp, row, path: str | os.PathLike[str], *, dpi: int = 120) -> Path:
    """Save `schedule_figure(cmp, row)` as the PNG `path`."""
    schedule_figure(cmp, row).savefig(path, dpi=dpi, bbox_inches="tight")
    return Path(path)


def side_by_side_figure(cmp, *, dpi: int = 110) -> Figure:
    """One panel per schedule on a shared time axis (in the comparison's time unit); each title gives the CSV's
    makespan, bubble ratio and peak memory with their units.  Every row is named (`row_names`); one legend above the
    panels says what each kind drawn does (`KIND_WORDS`)."""
    rows = cmp.ok_rows()
    time_unit, memory_unit = cmp.units()
    scale = 1.0 / cmp.scales.ticks_per_unit
    heights = [0.3 * r.timeline.num_devices + 0.5 for r in rows]
    # inches above the panels (the legend), below them (the x label, the labels' grammar), between two panels (a
    # title and the tick labels of the panel above it)
    legend_in, caption_in, gap_in = 0.9, 0.75, 0.6
    total_in = sum(heights) + gap_in * len(rows) + legend_in + caption_in
    fig = Figure(figsize=(13, total_in), dpi=dpi)
    FigureCanvasAgg(fig)
    # the panels fill the figure between the legend and the caption (no empty band above the first panel)
    gs = fig.add_gridspec(len(rows), 1, height_ratios=heights,
                          hspace=gap_in * len(rows) / max(sum(heights), 1e-9),
                          top=1 - legend_in / total_in, bottom=caption_in / total_in, left=0.08, right=0.99)
    x_end = max(max(r.timeline.end_tick for r in rows) * scale, 1e-9)
    kinds: dict[str, str] = {}
    for i, r in enumerate(rows):
        ax = fig.add_subplot(gs[i])
        tl = r.timeline
        # one bar collection per device and kind: one per bar made a 16-device, 64-micro-batch comparison take
        # about half an hour to draw
        bars: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
        for pl in tl.placements:
            span = (pl.start_tick * scale, (pl.end_tick - pl.start_tick) * scale)
            bars[pl.device, action_group(pl.task)].append(span)
        for (device, g), spans in bars.items():
            kinds.setdefault(g, kind_color(g))
            ax.broken_barh(spans, (device - 0.4, 0.8), facecolors=kind_color(g), edgecolors="white",
                           linewidth=0.3)
        v = cmp.values(r)
        ax.set_title(f"{r.name}: makespan {v['makespan']:.4g} {time_unit}, bubble {v['bubble_ratio']:.1%}, "
                     f"peak memory {v['peak_memory']:.4g} {memory_unit}", fontsize=_FONT + 1, loc="left")
        ax.set_ylim(tl.num_devices - 0.5, -0.5)
        ax.set_yticks(range(tl.num_devices))
        ax.set_yticklabels(row_names(cmp.num_devices, tl))
        ax.tick_params(labelsize=_FONT)
        ax.set_xlim(0, x_end)
        ax.grid(axis="x", linewidth=0.3, alpha=0.5)
        if i == len(rows) - 1:
            ax.set_xlabel(f"time ({time_unit})", fontsize=_FONT)
    order = [k for k in KIND_WORDS if k in kinds] + [k for k in kinds if k not in KIND_WORDS]
    handles = [Patch(facecolor=kinds[k], label=KIND_WORDS.get(k, k)) for k in order]
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.08, 1.0), fontsize=_FONT,
               ncol=min(4, max(len(handles), 1)), frameon=False)
    fig.text(0.08, 0.0, LABEL_GRAMMAR, fontsize=_FONT, color="0.3", ha="left", va="bottom")
    return fig


def plot_side_by_side(cmp, path: str | os.PathLike[str], *, dpi: int = 110) -> Path:
    """Save `side_by_side_figure(cmp)` as the PNG `path`."""
    side_by_side_figure(cmp, dpi=dpi).savefig(path, dpi=dpi, bbox_inches="tight")
    return Path(path)
