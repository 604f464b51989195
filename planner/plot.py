"""Pictures of a timed step: a Gantt chart with a memory-over-time panel (PNG, matplotlib with the Agg canvas).

`plot_gantt(timeline, path)` draws devices as rows and tasks as bars coloured by group — by default the action kind
for pipeline tasks (F, B, W, BW, F&B), else the layer prefix of the task name (``/layer1/attn/...`` -> ``layer1``,
``t12`` -> ``t``), and the op type (`op_types=`, op name -> type) when names carry no structure (ops named
``n0..n175`` all fall in one name group ``n``, which tells nothing); pass `group=` to choose.  Communication is a
thin grey bar in the lower part of the sending device's row (plus arrows that end on the receiver's row when there
are few transfers).  Below, one memory line per device with
its capacity as a dashed line of the same colour.  Labels are written only inside bars wide enough for them, so
a few hundred tasks stay readable.  For a plan use `planner.schedule.timeline.timeline_of_plan(instance, plan)`
(its own times) or `planner.schedule.simulate.simulate_plan` (replayed).

Units agree with the tables and CSVs: times on the axes and in the titles use the prefixes of
`planner.ir.units.format_time` (or the task graph's own unit, never "s" for abstract units), sizes the binary
units of `format_bytes`; a caller with units of its own (plan-compare: "us" and "MiB", or the user's units) passes
`time_unit=` / `memory_unit=`.  Every Gantt title states the makespan and peak memory in the axes' units, read from
the timeline that is drawn.

Each picture has a function that returns the `Figure` (`gantt_figure`, `whatif_figure`), so that tests read what
is drawn (titles, labels, limits); the `plot_*` functions save it.  No pyplot: figures are built on
`matplotlib.figure.Figure` + the Agg canvas, so nothing global is touched.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from planner.cost.instance import UNBOUNDED_BYTES
from planner.ir.units import bytes_axis, format_bytes, format_time, time_axis
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


def structured_group(task_names: Sequence[str], op_types: Mapping[str, str] | None) -> Callable[[str], str]:
    """The default grouping of these tasks: `default_group`, unless its groups carry no structure (every task in
    one name group) and `op_types` names the tasks' op types, then the op type (a task without one keeps its name
    group)."""
    if not op_types or len(task_names) < 2:
        return default_group
    if len({default_group(t) for t in task_names}) > 1:
        return default_group
    return lambda task: op_types.get(task) or default_group(task)


def _time_scale(timeline: Timeline, time_unit: tuple[float, str] | None) -> tuple[float, str]:
    """(axis units per tick, label): the caller's (ticks per unit, label), else seconds with a readable prefix, else
    the timeline's own unit (a task graph's abstract unit stays abstract)."""
    if time_unit is not None:
        ticks_per_unit, label = time_unit
        return 1.0 / ticks_per_unit, label
    tick = timeline.tick_s if timeline.tick_s is not None else 1.0
    unit = timeline.time_unit or "tick"
    divisor, label = time_axis(max(timeline.end_tick, 1) * tick, unit)
    return tick / divisor, label


def _byte_scale(peak_bytes: float, memory_unit: tuple[float, str] | None) -> tuple[float, str]:
    """(bytes per axis unit, label): the caller's, else the binary unit `format_bytes` would print."""
    return memory_unit if memory_unit is not None else bytes_axis(peak_bytes)


def _amount(value: float, unit: str) -> str:
    """A figure as a title prints it, in its axis' unit: '1.311 ms', '33 unit', '4.5 MiB'."""
    return f"{value:.4g} {unit}"


def gantt_figure(
    timeline: Timeline,
    *,
    group: Callable[[str], str] | None = None,
    title: str | None = None,
    show_comm: bool = True,
    show_memory: bool = True,
    max_arrows: int = 60,
    dpi: int = 120,
    time_unit: tuple[float, str] | None = None,
    memory_unit: tuple[float, str] | None = None,
    bubble_ratio: float | None = None,
    op_types: Mapping[str, str] | None = None,
    group_colors: Callable[[str], str] | None = None,
    group_words: Mapping[str, str] | None = None,
) -> Figure:
    """The Gantt chart (and memory panel) of `timeline` as a `Figure`.

    `title` names the picture; the makespan, peak memory and bubble ratio are always appended, in the axes' units.
    `bubble_ratio` is the ratio the title states when the caller's figure counts other rows than the timeline's
    own (a pipeline counts its compute streams only, not the communication streams drawn below them).
    `time_unit` = (ticks per unit, label) and `memory_unit` = (bytes per unit, label) override the automatic units.
    The memory panel is left out when nothing in the plan holds memory (a task graph without `memory`).
    `op_types` (op name -> op type) colours the bars by op type when the names carry no structure
    (`structured_group`); `group_colors` gives a group's colour and `group_words` its legend entry (default: the
    group's name).  A transfer's arrow ends on the receiving device's row, at the receiver's bar height.
    """
    group = group or structured_group([p.task for p in timeline.placements], op_types)
    num_dev = timeline.num_devices
    scale, unit = _time_scale(timeline, time_unit)
    peak = max(timeline.memory.peak_bytes, default=0)
    show_memory = show_memory and peak > 0
    fig, ax, mem_ax = _gantt_axes(num_dev, show_memory, dpi)

    placements = timeline.placements
    group_of = [group(p.task) for p in placements]  # once per task: 100k names take seconds
    groups = _group_colours(timeline, group_of, group_colors)

    end = max(timeline.end_tick, 1)
    x0 = timeline.start_tick * scale
    x1 = end * scale
    axes_w_px = _WIDTH_IN * dpi * 0.8
    px_per_unit = axes_w_px / max(x1 - x0, 1e-12)
    # With more bars than pixels across (`dense`), no bar can be seen alone and white edges would wash the rows out:
    # bars of one colour less than a pixel apart are drawn as one, without edges.
    dense = len(placements) > axes_w_px
    merge_gap = 1.0 / px_per_unit if dense else -1.0
    _draw_task_bars(ax, timeline, group_of, groups, scale, merge_gap if dense else None, px_per_unit)
    if show_comm and timeline.transfers:
        _draw_transfers(ax, timeline, scale, merge_gap if dense else None, max_arrows)

    ax.set_yticks(range(num_dev))
    ax.set_yticklabels(timeline.device_names)
    ax.set_ylim(num_dev - 0.5, -0.6)
    ax.set_xlim(x0, x1)
    ax.grid(axis="x", linewidth=0.3, alpha=0.5)
    bytes_per_unit, memory_label = _byte_scale(peak, memory_unit)
    figures = [f"makespan {_amount(timeline.makespan_tick * scale, unit)}",
               f"peak memory {_amount(peak / bytes_per_unit, memory_label)}" if peak else "no memory",
               f"bubble ratio {timeline.bubble_ratio if bubble_ratio is None else bubble_ratio:.1%}"]
    if timeline.link_contention:
        figures.append("link contention")
    ax.set_title(f"{title or timeline.instance_name}: " + ", ".join(figures), fontsize=10)
    if len(groups) <= 20:
        _draw_legend(ax, groups, group_words or {}, transfers=show_comm and bool(timeline.transfers))
    if mem_ax is None:
        ax.set_xlabel(f"time ({unit})")
    else:
        _plot_memory(mem_ax, timeline, scale, unit, x1, (bytes_per_unit, memory_label))
    return fig


# The figure's width in inches: the bars' pixel width, and so which labels fit and when bars merge, follow from it.
_WIDTH_IN = 13.0

_Colour = str | tuple[float, float, float, float]  # a named colour or an RGBA from the colormap


def _gantt_axes(num_dev: int, show_memory: bool, dpi: int) -> tuple[Figure, Axes, Axes | None]:
    """The figure on the Agg canvas, its Gantt axes (a row per device), and below it the memory axes sharing the
    time axis when there is memory to show."""
    gantt_h = 0.9 + 0.5 * max(num_dev, 1)
    mem_h = 2.4 if show_memory else 0.0
    fig = Figure(figsize=(_WIDTH_IN, gantt_h + mem_h + 0.6), dpi=dpi)
    FigureCanvasAgg(fig)
    if not show_memory:
        return fig, fig.add_subplot(1, 1, 1), None
    gs = fig.add_gridspec(2, 1, height_ratios=[gantt_h, mem_h], hspace=0.25)
    ax = fig.add_subplot(gs[0])
    return fig, ax, fig.add_subplot(gs[1], sharex=ax)


def _group_colours(timeline: Timeline, group_of: list[str],
                   group_colors: Callable[[str], str] | None) -> dict[str, _Colour]:
    """A colour per group, in order of first appearance (by start time): the caller's, else the action kind's,
    else the next of tab20."""
    placements = timeline.placements
    ordered = sorted(range(len(placements)), key=lambda i: (placements[i].start_tick, placements[i].device))
    groups: dict[str, _Colour] = {}
    cmap = colormaps["tab20"]
    for i in ordered:
        g = group_of[i]
        if g not in groups:
            groups[g] = (group_colors(g) if group_colors is not None else None) or _KIND_COLORS.get(g) \
                or cmap(len(groups) % 20)
    return groups


def _draw_task_bars(ax: Axes, timeline: Timeline, group_of: list[str], groups: dict[str, _Colour], scale: float,
                    merge_gap: float | None, px_per_unit: float) -> None:
    """The tasks' bars in their groups' colours (bars less than `merge_gap` apart merged, no edges, when given),
    zero-length tasks as tick marks, and each task's name inside a bar wide enough for it."""
    # one bar collection per device, each bar with its group's colour: a stacked model has thousands of groups, and
    # each broken_barh call rescales the axes (one call per group costs seconds on a large model's plan; one per
    # device and colour is a few dozen calls).
    placements = timeline.placements
    spans: dict[int, list[tuple[float, float]]] = defaultdict(list)
    colours: dict[int, list[_Colour]] = defaultdict(list)
    marks: list[tuple[float, int, _Colour]] = []  # zero-length tasks: tick marks
    for p, g in zip(placements, group_of):
        if p.end_tick > p.start_tick:
            spans[p.device].append((p.start_tick * scale, (p.end_tick - p.start_tick) * scale))
            colours[p.device].append(groups[g])
        else:
            marks.append((p.start_tick * scale, p.device, groups[g]))
    for d, row in spans.items():
        row, row_colours = merged_bars(row, colours[d], merge_gap) if merge_gap is not None else (row, colours[d])
        ax.broken_barh(row, (d - 0.38, 0.6), facecolors=row_colours,
                       edgecolors="none" if merge_gap is not None else "white", linewidth=0.4)
    if marks:
        ax.vlines([x for x, _, _ in marks], [d - 0.38 for _, d, _ in marks], [d + 0.22 for _, d, _ in marks],
                  colors=[c for _, _, c in marks], linewidth=1.0)
    for p in placements:
        w = (p.end_tick - p.start_tick) * scale
        if w * px_per_unit >= 6.5 * len(p.task) + 4:
            ax.text((p.start_tick * scale) + w / 2, p.device - 0.08, p.task, ha="center", va="center",
                    fontsize=7, color="white", clip_on=True)


def _draw_transfers(ax: Axes, timeline: Timeline, scale: float, merge_gap: float | None, max_arrows: int) -> None:
    """Each transfer as a thin grey bar low in the sender's row (merged as the task bars are), and, when there are
    at most `max_arrows`, an arrow from the sender to the receiver."""
    comm: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for x in timeline.transfers:
        comm[x.src_device].append((x.start_tick * scale, max((x.end_tick - x.start_tick) * scale, 0.0)))
    for d, comm_spans in comm.items():
        if merge_gap is not None:
            comm_spans = merged_bars(sorted(comm_spans), ["0.45"] * len(comm_spans), merge_gap)[0]
        ax.broken_barh(comm_spans, (d + 0.26, 0.1), facecolors="0.45", edgecolors="none", alpha=0.8)
    if len(timeline.transfers) <= max_arrows:
        for x in timeline.transfers:
            # the head sits inside the receiver's bar band (rows run top to bottom: d - 0.38 .. d + 0.22)
            ax.annotate("", xy=(x.end_tick * scale, x.dst_device - 0.08),
                        xytext=(x.start_tick * scale, x.src_device + 0.31),
                        arrowprops={"arrowstyle": "->", "color": "0.35", "lw": 0.6, "alpha": 0.7})


def _draw_legend(ax: Axes, groups: dict[str, _Colour], words: Mapping[str, str], *, transfers: bool) -> None:
    """A legend entry per group (its word, else its name), and one for transfers when they are drawn."""
    handles = [Patch(facecolor=c, label=words.get(g, g)) for g, c in groups.items()]
    if transfers:
        handles.append(Patch(facecolor="0.45", label="transfer"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)


def merged_bars(spans: list[tuple[float, float]], colours: list, gap: float) -> tuple[list[tuple[float, float]], list]:
    """(start, width) bars in start order with their colours -> the same bars with each run of one colour whose
    next bar starts less than `gap` after the run's end drawn as one bar."""
    out: list[tuple[float, float]] = []
    out_colours: list = []
    end = 0.0
    for (x, w), c in sorted(zip(spans, colours), key=lambda item: item[0][0]):
        if out and c == out_colours[-1] and x - end < gap:
            end = max(end, x + w)
            out[-1] = (out[-1][0], end - out[-1][0])
        else:
            out.append((x, w))
            out_colours.append(c)
            end = x + w
    return out, out_colours


def plot_gantt(timeline: Timeline, path: str | os.PathLike[str], *, dpi: int = 120, **options) -> Path:
    """Draw `gantt_figure(timeline, **options)` into the PNG `path`; return the path."""
    fig = gantt_figure(timeline, dpi=dpi, **options)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return Path(path)


def _plot_memory(ax, timeline: Timeline, scale: float, unit: str, x_end: float,
                 memory_unit: tuple[float, str]) -> None:
    mem = timeline.memory
    peak = max(mem.peak_bytes, default=0)
    finite_caps = [c for c in mem.capacity_bytes if c < UNBOUNDED_BYTES // 2]
    top = max([peak] + [c for c in finite_caps if c <= 4 * max(peak, 1)])
    bscale, bunit = memory_unit
    cmap = colormaps["tab10"]
    off_scale: dict[str, list[str]] = defaultdict(list)  # capacity text -> every device with that capacity
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
                off_scale[format_bytes(cap)].append(timeline.device_names[d])
    ax.set_ylim(0, top / bscale * 1.12)
    ax.set_ylabel(f"memory ({bunit})")
    ax.set_xlabel(f"time ({unit})")
    ax.grid(linewidth=0.3, alpha=0.5)
    if timeline.num_devices <= 16:
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    if off_scale:
        # every device is named: a note naming half of them reads as if the others had no capacity
        told = "; ".join(f"{', '.join(names)} {cap_text}" for cap_text, names in off_scale.items())
        ax.text(0.995, 0.97, "capacity off scale: " + told, transform=ax.transAxes,
                ha="right", va="top", fontsize=8, color="0.3")


def whatif_figure(result) -> Figure:
    """Makespan against per-device memory capacity (a `planner.whatif.WhatIfResult`) as a `Figure`; infeasible
    capacities are marked along the bottom and the smallest capacity that can fit at all is a dashed line.  The
    axes use the units `format_bytes` / `format_time` print for the sweep's largest values (the CSV beside it holds
    the raw numbers: bytes, and the instance's time unit)."""
    fig = Figure(figsize=(8, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    feasible = [r for r in result.rows if r.feasible]
    infeasible = [r for r in result.rows if not r.feasible]
    largest = max([r.capacity_bytes for r in result.rows] + [result.capacity_lower_bound_bytes])
    bdiv, bunit = bytes_axis(largest)
    tdiv, tunit = time_axis(max((r.makespan_s for r in feasible), default=1.0), result.time_unit)
    if feasible:
        ax.step([r.capacity_bytes / bdiv for r in feasible], [r.makespan_s / tdiv for r in feasible], where="post",
                marker="o", label="planned makespan")
        ax.plot([r.capacity_bytes / bdiv for r in feasible], [r.lower_bound_s / tdiv for r in feasible], ":",
                color="grey", label="lower bound (op graph, at that capacity)")
    if infeasible:
        ymin = min((r.makespan_s / tdiv for r in feasible), default=1.0)
        ax.scatter([r.capacity_bytes / bdiv for r in infeasible], [ymin * 0.95] * len(infeasible), marker="x",
                   color="red", label="infeasible")
    ax.axvline(result.capacity_lower_bound_bytes / bdiv, ls="--", color="red", alpha=0.6,
               label="smallest capacity that can fit")
    ax.set_xlabel(f"memory per device ({bunit})")
    ax.set_ylabel(f"makespan ({tunit})")
    best = min(feasible, key=lambda r: (r.makespan_s, r.capacity_bytes), default=None)
    ax.set_title("Memory what-if" + (f": best makespan {format_time(best.makespan_s, unit=result.time_unit)} "
                                     f"from {format_bytes(best.capacity_bytes)}" if best else ""))
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def plot_whatif(result, path: str | os.PathLike[str], *, dpi: int = 120) -> Path:
    """Save `whatif_figure(result)` as the PNG `path`."""
    out = Path(path)
    whatif_figure(result).savefig(out, dpi=dpi)
    return out
