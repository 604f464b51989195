"""A warm start that breaks a memory cap is not the solve's known schedule (`prepare_pipeline`), and no schedule
over a cap leaves `finish_pipeline`: the driver returns the known schedule when the solver finds nothing better,
and the plan validator does not see memory, so before this an over-cap warm start could come back as the answer
(and CP-SAT 9.15 aborted the process on such a hint, GPT-2 export at p = 8)."""

from __future__ import annotations

import time

import pytest

from formulations.pipeline import PipelineTimes, finish_pipeline, prepare_pipeline, solve_pipeline, split_start_times
from planner.compare.pipelines import scales_of, simulate_baseline
from planner.pipeline.registry import UnitCosts
from planner.pipeline.unroll import uniform_pipeline
from planner.schedule.plan import PlanStatus


def _uncapped():
    """Two stages on two devices, two micro-batches, activation 1 per stage and micro-batch (held to W): the
    optimum without a cap (7 ticks) holds both micro-batches' activations on device 0 at once; under a cap of 1 the
    optimum is 10 (`test_pipeline_families.test_memory_cap_serializes_micro_batches`)."""
    pipe = uniform_pipeline(2, 2)
    sol = solve_pipeline(pipe, None, time_limit_s=10, threads=1)
    assert sol.plan.makespan_tick == 7
    return pipe, {x.task: x.start_tick for x in sol.plan.placements}


def test_a_warm_start_over_the_cap_is_not_the_known_schedule() -> None:
    pipe, starts = _uncapped()
    free = prepare_pipeline(pipe, None, warm_start=starts)
    assert free.known is not None and free.warm_rejected is None
    assert free.peak_bytes(free.known) == [2, 2]  # device 0's two activations overlap; so do device 1's
    setup = prepare_pipeline(pipe, 1, warm_start=starts)
    assert setup.warm_rejected is not None and "device 0 holds 2 bytes" in setup.warm_rejected
    assert "its memory cap 1" in setup.warm_rejected
    assert setup.known is not None and setup.over_cap(setup.known) is None  # the list schedule instead
    sol = solve_pipeline(pipe, 1, warm_start=starts, time_limit_s=10, threads=1)
    assert sol.plan.makespan_tick == 10


def test_no_schedule_over_a_cap_leaves_finish_pipeline() -> None:
    pipe, starts = _uncapped()
    setup = prepare_pipeline(pipe, 1)
    names = setup.tasks.instance.task_names
    over = PipelineTimes(tuple(starts[n] for n in names))
    with pytest.raises(RuntimeError, match="breaks a memory cap: device 0 holds 2 bytes"):
        finish_pipeline(setup, over, 0, PlanStatus.FEASIBLE, solver="test", solver_version="0",
                        started_s=time.monotonic(), time_to_best_s=0.0)
    roomy = prepare_pipeline(pipe, 2)
    sol = finish_pipeline(roomy, over, 0, PlanStatus.FEASIBLE, solver="test", solver_version="0",
                          started_s=time.monotonic(), time_to_best_s=0.0)
    assert sol.plan.makespan_tick == 7


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1", "dualpipe"])
def test_peak_bytes_is_the_metrics_peak(name: str) -> None:
    # the cap check counts memory as the figures do: every baseline's peak per device, both ways
    costs = UnitCosts()
    scales = scales_of(costs)
    row = simulate_baseline(name, 4, 8, costs, scales)
    assert row.figures is not None and row.schedule is not None
    pipe = row.pipeline
    starts = split_start_times(pipe, row.timeline)
    assert starts is not None
    setup = prepare_pipeline(pipe, None, warm_start=starts)
    assert setup.known is not None
    assert tuple(setup.peak_bytes(setup.known)) == row.figures.peak_memory_bytes
