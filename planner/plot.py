"""Pictures of a timed step: a Gantt chart with a memory-over-time panel (PNG, matplotlib with the Agg canvas).

`plot_gantt(timeline, path)` draws devices as rows and tasks as bars coloured by group — by default the action kind
for pipeline tasks (F, B, W, BW, F&B), else the layer prefix of the task name (``/layer1/attn/...`` -> ``layer1``,
``t12`` -> ``t``); pass `group=` to choose.  Communication is a thin grey bar in the lower part of the sending
device's row (plus arrows to the receiver when there are few transfers).  Below, one memory line per device with
its capacity as a dashed line of the same colour.  Labels are written only inside bars wide enough for them, so
a few hundred tasks stay readable.  For a plan use `planner.schedule.timeline.timeline_of_plan(instance, plan)`
(its own times) or `planner.schedule.simulate.simulate_plan` (replayed).

No pyplot: figures are built on `matplotlib.figure.Figure` + the Agg canvas, so nothing global is touched.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from planner.cost.instance import UNBOUNDED_BYTES
from planner.schedule.actions import try_parse_action
from planner.schedule.timeline import Timeline

_KIND_COLORS = {"F": "#4C78A8", "B": "#F58518", "W": "#54A24B", "BW": "#E45756", "F&B": "#B279A2"}


def default_group(task: str) -> str:
    """Action kind for pipeline tasks, else the first path segment of the name without trailing digits."""
    a = try_parse_action(task)
    if a is not None:
        return a.kind.value
    name = task.lstrip("/")
    head = re.split(r"[/.:]", name, maxsplit=1)[0]
    if head == name:
        head = re.sub(r"[_\-]*\d+$", "", head) or head
    return head or task


def _time_scale(timeline: Timeline) -> tuple[float, str]:
    if timeline.tick_s is None:
        return 1.0, timeline.time_unit or "tick"
    span_s = max(timeline.end_tick, 1) * timeline.tick_s
    for factor, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "µs")):
        if span_s * factor >= 1.0:
            return timeline.tick_s * factor, unit
    return timeline.tick_s * 1e9, "ns"


def _byte_scale(value: float) -> tuple[float, str]:
    for size, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if value >= size:
            return float(size), unit
    return 1.0, "B"


def plot_gantt(
    timeline: Timeline,
    path: str | os.PathLike[str],
    *,
    group: Callable[[str], str] | None = None,
    title: str | None = None,
    show_comm: bool = True,
    show_memory: bool = True,
    max_arrows: int = 60,
    dpi: int = 120,
) -> Path:
    """Draw the Gantt chart (and memory panel) of `timeline` into the PNG `path`; return the path."""
    group = group or default_group
    num_dev = timeline.num_devices
    scale, unit = _time_scale(timeline)
    width_in = 13.0
    gantt_h = 0.9 + 0.5 * max(num_dev, 1)
    mem_h = 2.4 if show_memory else 0.0
    fig = Figure(figsize=(width_in, gantt_h + mem_h + 0.6), dpi=dpi)
    FigureCanvasAgg(fig)
    if show_memory:
        gs = fig.add_gridspec(2, 1, height_ratios=[gantt_h, mem_h], hspace=0.25)
        ax = fig.add_subplot(gs[0])
        mem_ax = fig.add_subplot(gs[1], sharex=ax)
    else:
        ax = fig.add_subplot(1, 1, 1)
        mem_ax = None

    # colours by group, in order of first appearance (by start time)
    ordered = sorted(timeline.placements, key=lambda p: (p.start_tick, p.device))
    groups: dict[str, str] = {}
    cmap = colormaps["tab20"]
    for p in ordered:
        g = group(p.task)
        if g not in groups:
            groups[g] = _KIND_COLORS.get(g) or cmap(len(groups) % 20)

    end = max(timeline.end_tick, 1)
    x0 = timeline.start_tick * scale
    x1 = end * scale
    axes_w_px = width_in * dpi * 0.8
    px_per_unit = axes_w_px / max(x1 - x0, 1e-12)

    bars: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for p in timeline.placements:
        bars[(p.device, group(p.task))].append((p.start_tick * scale, (p.end_tick - p.start_tick) * scale))
    for (d, g), spans in bars.items():
        nonzero = [s for s in spans if s[1] > 0]
        if nonzero:
            ax.broken_barh(nonzero, (d - 0.38, 0.6), facecolors=groups[g], edgecolors="white", linewidth=0.4)
        for s, w in spans:
            if w == 0:
                ax.plot([s, s], [d - 0.38, d + 0.22], color=groups[g], linewidth=1.0)
    for p in timeline.placements:
        w = (p.end_tick - p.start_tick) * scale
        if w * px_per_unit >= 6.5 * len(p.task) + 4:
            ax.text((p.start_tick * scale) + w / 2, p.device - 0.08, p.task, ha="center", va="center",
                    fontsize=7, color="white", clip_on=True)

    if show_comm and timeline.transfers:
        comm: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for x in timeline.transfers:
            comm[x.src_device].append((x.start_tick * scale, max((x.end_tick - x.start_tick) * scale, 0.0)))
        for d, spans in comm.items():
            ax.broken_barh(spans, (d + 0.26, 0.1), facecolors="0.45", edgecolors="none", alpha=0.8)
        if len(timeline.transfers) <= max_arrows:
            for x in timeline.transfers:
                ax.annotate("", xy=(x.end_tick * scale, x.dst_device - 0.38),
                            xytext=(x.start_tick * scale, x.src_device + 0.31),
                            arrowprops={"arrowstyle": "->", "color": "0.35", "lw": 0.6, "alpha": 0.7})

    ax.set_yticks(range(num_dev))
    ax.set_yticklabels(timeline.device_names)
    ax.set_ylim(num_dev - 0.5, -0.6)
    ax.set_xlim(x0, x1)
    ax.grid(axis="x", linewidth=0.3, alpha=0.5)
    ax.set_title(title or (
        f"{timeline.instance_name}: makespan {timeline.makespan_tick * scale:.4g} {unit}, "
        f"bubble ratio {timeline.bubble_ratio:.1%}" + (" (link contention)" if timeline.link_contention else "")
    ), fontsize=10)
    if len(groups) <= 20:
        handles = [Patch(facecolor=c, label=g) for g, c in groups.items()]
        if show_comm and timeline.transfers:
            handles.append(Patch(facecolor="0.45", label="transfer"))
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, frameon=False)
    if mem_ax is None:
        ax.set_xlabel(f"time ({unit})")
    else:
        _plot_memory(mem_ax, timeline, scale, unit, x1)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return Path(path)


def _plot_memory(ax, timeline: Timeline, scale: float, unit: str, x_end: float) -> None:
    mem = timeline.memory
    peak = max(mem.peak_bytes, default=0)
    finite_caps = [c for c in mem.capacity_bytes if c < UNBOUNDED_BYTES // 2]
    top = max([peak] + [c for c in finite_caps if c <= 4 * max(peak, 1)])
    bscale, bunit = _byte_scale(max(top, 1))
    cmap = colormaps["tab10"]
    off_scale: list[str] = []
    for d, row in enumerate(mem.steps):
        color = cmap(d % 10)
        xs = [t * scale for t, _ in row] + [x_end]
        ys = [b / bscale for _, b in row]
        ys.append(ys[-1] if ys else 0.0)
        ax.step(xs, ys, where="post", color=color, linewidth=1.0, label=timeline.device_names[d])
        cap = mem.capacity_bytes[d]
        if cap < UNBOUNDED_BYTES // 2:
            if cap <= 4 * max(peak, 1):
                ax.axhline(cap / bscale, color=color, linestyle="--", linewidth=0.8)
            else:
                off_scale.append(f"{timeline.device_names[d]} {cap / 2**30:.3g} GiB")
    ax.set_ylim(0, max(top / bscale * 1.12, 1e-9))
    ax.set_ylabel(f"memory ({bunit})")
    ax.set_xlabel(f"time ({unit})")
    ax.grid(linewidth=0.3, alpha=0.5)
    if timeline.num_devices <= 16:
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, frameon=False)
    if off_scale:
        ax.text(0.995, 0.97, "capacity off scale: " + ", ".join(off_scale[:4]), transform=ax.transAxes,
                ha="right", va="top", fontsize=7, color="0.3")


def plot_whatif(result, path: str | os.PathLike[str], *, dpi: int = 120) -> Path:
    """Makespan against per-device memory capacity (a `planner.whatif.WhatIfResult`); infeasible capacities are
    marked along the bottom and the smallest capacity that can fit at all is a dashed line."""
    fig = Figure(figsize=(8, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    gib = 2**30
    feasible = [r for r in result.rows if r.feasible]
    infeasible = [r for r in result.rows if not r.feasible]
    scale, unit = (1e3, "ms") if result.time_unit == "s" else (1.0, result.time_unit)
    if feasible:
        ax.step([r.capacity_bytes / gib for r in feasible], [r.makespan_s * scale for r in feasible], where="post",
                marker="o", label="planned makespan")
        ax.plot([r.capacity_bytes / gib for r in feasible], [r.lower_bound_s * scale for r in feasible], ":",
                color="grey", label="lower bound (critical path, work)")
    if infeasible:
        ymin = min((r.makespan_s * scale for r in feasible), default=1.0)
        ax.scatter([r.capacity_bytes / gib for r in infeasible], [ymin * 0.95] * len(infeasible), marker="x",
                   color="red", label="infeasible")
    ax.axvline(result.capacity_lower_bound_bytes / gib, ls="--", color="red", alpha=0.6,
               label="smallest capacity that can fit")
    ax.set_xlabel("memory per device (GiB)")
    ax.set_ylabel(f"makespan ({unit})")
    ax.set_title("Memory what-if")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=dpi)
    return out
