"""The bound over every cut with the memory cap (`planner.compare.cut_memory_bound`) on plan-compare's planned row:
noted beside the bound over every cut without memory (notes["every_cut_memory"]), with the makespan at which any
cut's schedule would have half of DualPipe's bubble and whether the bound lies above it (half of DualPipe's bubble
out of reach for every cut of both placements within the cap).  Computed once, after the solves, outside the row's
time limit, as `cut_bound`'s note is."""

from __future__ import annotations

import math

from planner.compare.compare_policy import ComparePolicy
from planner.compare.compare_row import CompareRow
from planner.compare.cut_memory_bound import every_cut_memory_bound_tick, work_upper_tick
from planner.compare.memory_bound_note import half_bubble_tick_of_work
from planner.compare.model_costs import ModelCosts
from planner.compare.presets import PresetCosts
from planner.pipeline.metrics import PipelineFigures
from planner.pipeline.registry import Scales

__all__ = ["note_every_cut_memory_bound"]


def note_every_cut_memory_bound(row: CompareRow, p: int, m: int, costs: object, scales: Scales, cap: int | None,
                                dualpipe: PipelineFigures | None, policy: ComparePolicy) -> None:
    """On a model or a preset with a memory cap, note on the planned `row` the bound over every cut of both
    placements within `cap` (per placement and the lesser; inf where no cut fits the cap), and with DualPipe's
    figures the half-bubble makespan of any cut: `half_bubble_tick_of_work` of an upper bound on any cut's work
    (`work_upper_tick`: a cut with more work may idle less at one makespan), so "out of reach" holds for every cut."""
    if not isinstance(costs, (ModelCosts, PresetCosts)) or cap is None:
        return
    bound, per_family = every_cut_memory_bound_tick(costs, p, m, cap, policy=policy)
    per = scales.ticks_per_unit
    work = work_upper_tick(costs, p, m)
    half = None if dualpipe is None or work is None else half_bubble_tick_of_work(work, dualpipe.bubble_tick, p)
    row.notes["every_cut_memory"] = {
        "bound_units": None if bound is None else bound / per,
        "by_placement_units": {fam: None if v is None else v / per for fam, v in per_family.items()},
        "covers": "every cut of the dualpipe and v placements, one stage per piece, within the cap",
        "half_bubble_units": None if half is None else half / per,
        "half_bubble_unreachable": bound is not None and half is not None and bound > half,
        "no_cut_fits": bound is not None and math.isinf(bound)}
