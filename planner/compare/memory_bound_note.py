"""The planned row's memory bound (`formulations.pipeline_memory_bound`) in `plan-compare`: after the solves, when
the row is not proven optimal, search each device's relaxation with the cap, then each pair of neighbouring
devices, for a higher bound, asking first whether any schedule can reach half of DualPipe's bubble (the planned
row's target; the devices the row's schedule holds at the cap are asked first, where memory binds), and raise the row's
bound and gap when it proves more than the solver did.  Outside the row's time limit, as the bound over every cut
is, with its own (`ComparePolicy.memory_bound_s`, ``plan-compare --bound-time``)."""

from __future__ import annotations

from collections.abc import Callable

from formulations.pipeline_memory_bound import DEFAULT_MEMORY_BOUND_POLICY, MemoryBoundPolicy, memory_bound
from planner.compare.compare_row import CompareRow
from planner.errors import OpplanError
from planner.pipeline.metrics import PipelineFigures
from planner.pipeline.registry import Scales
from planner.schedule.plan import PlanStatus

__all__ = ["half_bubble_tick", "half_bubble_tick_of_work", "note_memory_bound"]

def half_bubble_tick(row_figures: PipelineFigures, dualpipe: PipelineFigures, num_devices: int) -> int:
    """The largest makespan at which a schedule of the row's pipeline has at most half DualPipe's bubble
    (`half_bubble_tick_of_work`, with the row's work: p x makespan - bubble)."""
    work = num_devices * row_figures.makespan_tick - row_figures.bubble_tick
    return half_bubble_tick_of_work(work, dualpipe.bubble_tick, num_devices)


def half_bubble_tick_of_work(work_tick: int, dualpipe_bubble_tick: int, num_devices: int) -> int:
    """The largest makespan M at which a pipeline with `work_tick` of compute on `num_devices` devices has at most
    half of `dualpipe_bubble_tick` as bubble: the bubble is p x M - work (every compute stream idles from 0 to the
    makespan but for its work), so 2 (p M - work) <= DualPipe's bubble."""
    return (dualpipe_bubble_tick + 2 * work_tick) // (2 * num_devices)


def note_memory_bound(row: CompareRow, dualpipe: PipelineFigures | None, cap_bytes: int | None, scales: Scales,
                      time_s: float, progress: Callable[[str], None] | None = None,
                      policy: MemoryBoundPolicy = DEFAULT_MEMORY_BOUND_POLICY) -> None:
    """Search the memory bound of the planned `row` within `time_s` (with `policy`: `ComparePolicy.memory_bound`)
    and note it (notes["memory_bound"]); when it is above the row's bound, it becomes the row's bound (gap and
    status follow).  Nothing when the row is proven optimal, has no cap or no time; a pipeline the bound does not
    hold for gets the reason in the note."""
    fig, pipe = row.figures, row.pipeline
    if fig is None or pipe is None or cap_bytes is None or time_s <= 0 or row.notes.get("status") is \
            PlanStatus.OPTIMAL:
        return
    half = None if dualpipe is None else half_bubble_tick(fig, dualpipe, pipe.num_devices)
    try:
        got = memory_bound(pipe, cap_bytes, upper_tick=fig.makespan_tick, time_limit_s=time_s,
                           first_ticks=() if half is None else (half,), progress=progress, policy=policy,
                           first_devices=tuple(row.notes.get("devices_at_cap") or ()))  # type: ignore[arg-type]
    except OpplanError as exc:
        row.notes["memory_bound"] = {"skipped": " ".join(str(exc).split())}
        return
    per = scales.ticks_per_unit
    row.notes["memory_bound"] = {
        "bound_units": got.bound_tick / per, "bound_tick": got.bound_tick, "device": got.device, "devices": got.devices,
        "complete": got.complete, "probes": len(got.probes), "seconds": got.seconds,
        "half_bubble_units": None if half is None else half / per,
        # proven when the bound lies above the makespan that half the bubble needs
        "half_bubble_unreachable": half is not None and got.bound_tick > half,
        "half_bubble_reached": half is not None and fig.makespan_tick <= half,  # by the row's own schedule
        # each device's answer to that question, e.g. "d3 infeasible" or "d0 feasible, d3 unknown": where the
        # question stays open, whether a relaxation fits (this bound cannot settle it) or time ran out
        "half_bubble_answers": ", ".join(f"{x.label} {x.status}" for x in got.probes if x.makespan_tick == half)}
    if got.bound_tick > int(row.notes["bound_tick"]):  # type: ignore[call-overload]
        bound = min(got.bound_tick, fig.makespan_tick)
        row.notes["bound_tick"], row.notes["bound_units"] = bound, bound / per
        row.notes["gap"] = (fig.makespan_tick - bound) / fig.makespan_tick
        if bound >= fig.makespan_tick:
            row.notes["status"] = PlanStatus.OPTIMAL
