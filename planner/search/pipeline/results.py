"""What the pipeline search reports: one record per step (`LnsStep`) and the search's answer (`LnsResult`)."""

from __future__ import annotations

from dataclasses import dataclass

from formulations.pipeline import PipelineTimes


@dataclass(frozen=True)
class LnsStep:
    """One step: the neighbourhood's kind and size (tasks freed), the incumbent's makespan before and after,
    seconds since the search started, and whether CP-SAT proved the neighbourhood optimal.  Kind ``periodic``: a
    periodic start (`periodic_start`) found before the search, replayed, against the best start before it; its
    seconds count from `solve_pipeline_lns`'s call."""

    step: int
    kind: str
    size: int
    before_tick: int
    after_tick: int
    wall_s: float
    proven: bool
    period_tick: int | None = None  # kind "periodic": the start found by `periodic_start`, before the search's steps

    @property
    def gained(self) -> bool:
        return self.after_tick < self.before_tick


@dataclass(frozen=True)
class LnsResult:
    """The search's answer: the best schedule, its makespan, the start's and its order's replayed (`Units.replay`:
    slack the start left, gained before any step), every step, whether the schedule keeps micro-batch order on every
    stage, and when (seconds since the search started) the best was found."""

    times: PipelineTimes
    start_tick: int
    best_tick: int
    steps: tuple[LnsStep, ...]
    in_order: bool
    time_to_best_s: float
    replayed_tick: int = 0
    resolve: tuple[float, int] | None = None  # the full model solved again after a stall: (seconds, makespan tick)
    after_full_solve: bool = True  # False: started from the warm start (`PipelineSearchPolicy.full_solve_max_tasks`)
    folded: bool = False  # True: searched on the mirror half (`improve_folded`), the schedule unfolded
    periodic: tuple[int, int] | None = None  # started from a periodic schedule: (its period, its replay's makespan)

    @property
    def gains(self) -> int:
        return sum(s.gained for s in self.steps)

