"""The baselines of `plan-compare`: each published schedule simulated on its own pipeline of the comparison's costs
(`simulate_baseline`), the pipeline a schedule name runs on (`pipeline_of`), and which baselines the planned row on
each placement starts from (`WARM_FROM`, `reference_schedules`).
"""

from __future__ import annotations

from planner.compare.compare_row import CompareRow
from planner.compare.model_costs import ModelCosts
from planner.compare.presets import PresetCosts
from planner.pipeline.generators import RequirementError
from planner.pipeline.metrics import figures
from planner.pipeline.registry import GENERATORS, Scales, pipeline_for
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import TrainingPipeline
from planner.schedule.program import Schedule
from planner.schedule.validate import validate_plan

# placement of the planned row -> the baselines on that placement, its warm starts
WARM_FROM = {"v": ("zb-v", "dualpipev"), "fixed": ("1f1b", "gpipe", "zb-h1", "zb-h2"), "dualpipe": ("dualpipe",)}
# placement of the planned row -> the schedule name whose pipeline (split of the model into stages) it solves
SPLIT = {"v": "opplan-v", "fixed": "1f1b", "dualpipe": "dualpipe"}


def pipeline_of(name: str, p: int, m: int, costs, scales: Scales) -> TrainingPipeline:
    """The pipeline `name` runs on: unit costs (`registry.pipeline_for`) or a model's stages (`ModelCosts`)."""
    if isinstance(costs, (ModelCosts, PresetCosts)):
        return costs.pipeline(name, p, m)
    return pipeline_for(name, p, m, costs, scales)


def scales_of(costs) -> Scales:
    """Ticks and bytes per unit of the comparison's figures: the model's or preset's, or the user's on unit costs."""
    if isinstance(costs, (ModelCosts, PresetCosts)):
        return Scales(costs.ticks_per_unit, costs.bytes_per_unit)
    return Scales.of(costs)


def simulate_baseline(name: str, p: int, m: int, costs, scales: Scales) -> CompareRow:
    """The published schedule `name` at p stages and m micro-batches, simulated and validated on its pipeline of
    `costs`; a skipped row with the reason when its requirements fail."""
    try:
        schedule = GENERATORS[name](p, m)
    except RequirementError as exc:
        return CompareRow(name, skipped=str(exc))
    pipe = pipeline_of(name, p, m, costs, scales)
    inst, tl = simulate_pipeline(pipe, schedule)
    validate_plan(inst, tl.to_plan(method=name))
    return CompareRow(name, pipe, schedule, tl, figures(pipe, tl))


def free_placements(p: int, m: int) -> list[str]:
    """The placements ``auto``, ``both`` and ``warm`` choose from: DualPipe's two directions (an even number of
    devices and of micro-batches) and the V."""
    return [pl for pl in ("dualpipe", "v") if pl != "dualpipe" or (p % 2 == 0 and m % 2 == 0)]


def reference_schedules(placement, p, m, costs, scales, by_name) -> list[tuple[str, Schedule]]:
    """(name, schedule) of the baselines the planned row on `placement` starts from (`WARM_FROM`), simulated here
    when the user's `--schedules` left them out."""
    rows = ((n, by_name.get(n) or simulate_baseline(n, p, m, costs, scales)) for n in WARM_FROM[placement])
    return [(n, r.schedule) for n, r in rows if not r.skipped and r.schedule is not None]
