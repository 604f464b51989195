"""`CompareRow`: one schedule's line in `plan-compare` (its pipeline, schedule, timeline and figures, or why it was
skipped), with the notes the steps after the solve add (bounds, gap, status).

Its own module, below both `planner.compare.pipelines`, which builds the rows, and
`planner.compare.memory_bound_note`, which raises a row's bound, so that neither imports the other to name it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.pipeline.metrics import PipelineFigures
from planner.pipeline.unroll import TrainingPipeline
from planner.schedule.program import Schedule
from planner.schedule.timeline import Timeline

__all__ = ["CompareRow"]


@dataclass
class CompareRow:
    """One schedule's result, or why it was skipped (`skipped` set, the rest None)."""

    name: str
    pipeline: TrainingPipeline | None = None
    schedule: Schedule | None = None
    timeline: Timeline | None = None
    figures: PipelineFigures | None = None
    skipped: str = ""
    notes: dict[str, object] = field(default_factory=dict)
