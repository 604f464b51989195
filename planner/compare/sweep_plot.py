"""The picture of ``plan-compare --memory-sweep``: makespan against peak memory per device, the Pareto front a user
reads to pick a memory budget; `write_sweep` writes it beside ``memory_sweep.csv``.

Drawn from `MemorySweep.frame()`, the frame ``memory_sweep.csv`` is written from, so the picture states the CSV's
figures in its units: each baseline is one labelled point at (its peak memory, its makespan); the planned schedule
is a line over the caps at (cap, planned makespan), a step that holds from each cap to the next (a budget between
two caps gets the smaller cap's schedule), and a hollow point at (its own peak, its makespan), where it sits beside
the baselines (a cap's schedule may use less than the cap); its bound a dashed line at (cap, bound), a step that
holds from the cap before (the bound at a cap covers every smaller budget), with a tick at each cap.  Infeasible
caps are left out of the lines and points.  No pyplot (Figure + Agg canvas): `sweep_figure` returns the `Figure` so
that tests read what is drawn (the artists' ``gid``: ``baselines``, ``planned``, ``planned_peak``, ``bound``).
"""

from __future__ import annotations

import os
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from planner.compare.memory_sweep import PLANNED, MemorySweep
from planner.schedule.atomic import atomic_write_text

__all__ = ["plot_sweep", "sweep_figure", "write_sweep"]

_FONT = 9


def sweep_figure(sweep: MemorySweep, *, what: str = "") -> Figure:
    """Makespan against peak memory: the baselines as labelled points, the planned schedule and its bound as
    lines over the caps (module docstring); `what` (the model or setup swept) heads the title where given."""
    frame = sweep.frame()
    cap, _, makespan, peak, bound, *_ = sweep.columns()
    time_unit, memory_unit = sweep.units()
    fig = Figure(figsize=(9, 5.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    base = frame[frame["schedule"] != PLANNED].drop_duplicates("schedule")
    ax.scatter(base[peak], base[makespan], color="0.35", zorder=3, label="baselines (peak memory, makespan)",
               gid="baselines")
    for name, x, y in zip(base["schedule"], base[peak], base[makespan], strict=True):
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=_FONT)
    planned = frame[(frame["schedule"] == PLANNED) & (frame["feasible"] == 1)]
    ax.plot(planned[cap], planned[makespan], drawstyle="steps-post", marker="o", color="tab:blue", zorder=4,
            label="planned schedule within the cap", gid="planned")
    ax.scatter(planned[peak], planned[makespan], facecolors="none", edgecolors="tab:blue", zorder=5,
               label="planned schedule at its own peak", gid="planned_peak")
    ax.plot(planned[cap], planned[bound], drawstyle="steps-pre", linestyle="--", marker="_", markersize=10,
            markeredgewidth=1.5, color="tab:blue", alpha=0.7, label="its proven bound at the cap", gid="bound")
    ax.set_xlabel(f"peak memory per device, or memory cap ({memory_unit})", fontsize=_FONT + 1)
    ax.set_ylabel(f"makespan ({time_unit})", fontsize=_FONT + 1)
    ax.set_title(f"{what + ': ' if what else ''}makespan against memory: {sweep.baselines.num_devices} devices, "
                 f"{sweep.baselines.num_microbatches} micro-batches", fontsize=_FONT + 2, loc="left")
    ax.tick_params(labelsize=_FONT)
    ax.grid(linewidth=0.3, alpha=0.5)
    ax.legend(fontsize=_FONT, frameon=False)
    return fig


def plot_sweep(sweep: MemorySweep, path: str | os.PathLike[str], *, dpi: int = 120, what: str = "") -> Path:
    """Save `sweep_figure(sweep, what=what)` as the PNG `path`."""
    sweep_figure(sweep, what=what).savefig(path, dpi=dpi, bbox_inches="tight")
    return Path(path)


def write_sweep(sweep: MemorySweep, out_dir: str | os.PathLike[str], *, pictures: bool = True) -> list[Path]:
    """``memory_sweep.csv`` (`MemorySweep.csv_text`) and, if `pictures`, ``memory_sweep.png`` (`plot_sweep`) in
    `out_dir`; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "memory_sweep.csv"]
    atomic_write_text(written[0], sweep.csv_text())
    if pictures:
        written.append(plot_sweep(sweep, out / "memory_sweep.png"))
    return written
