"""Micro-batch order is no restriction (`formulations.pipeline`, family 5): without candidate pairs, any schedule of
a pipeline renamed so that every task's copies start in micro-batch order (`renamed_in_order`) is still a schedule,
with the same makespan and memory, so the in-order model's optimum and bound hold for every order.  Checked against
CP-SAT's proven optima with and without family 5 on random pipelines (communication streams, all-to-alls, V and
DualPipe placements, binding caps).  The search that may leave micro-batch order (`fifo_inside=False`)
is checked in `test_pipeline_lns`."""

from __future__ import annotations

import dataclasses
import random

import pytest
from random_pipelines import random_cap, random_pipeline, uneven_pipeline

from formulations.pipeline import (
    PipelineSetup,
    PipelineTimes,
    finish_pipeline,
    prepare_pipeline,
    solve_pipeline,
    split_start_times,
)
from formulations.pipeline_units import in_order, renamed_in_order
from planner.pipeline.unroll import StageCost, TrainingPipeline, uniform_pipeline
from planner.schedule.plan import PlanStatus
from planner.search.pipeline.lns import improve_pipeline
from planner.search.pipeline.policy import PipelineLnsPolicy

SEEDS = range(8)


def _times_of(pipe: TrainingPipeline, cap: int, fifo: bool) -> tuple[PipelineSetup, PipelineTimes, PlanStatus]:
    """The full model's schedule of `pipe` under `cap` (family 5 on or off), as the times of a setup."""
    got = solve_pipeline(pipe, cap, fifo=fifo, time_limit_s=30, threads=2)
    setup = prepare_pipeline(pipe, cap, warm_start=split_start_times(pipe, got.timeline))
    assert setup.known is not None and setup.makespan_tick(setup.known) == got.timeline.makespan_tick
    return setup, setup.known, got.status


def _check_renamed(setup: PipelineSetup, times: PipelineTimes) -> PipelineTimes:
    """`renamed_in_order(times)`, checked: in order, the validator and the caps take it, same makespan and peaks."""
    renamed = renamed_in_order(setup, times)
    assert in_order(setup, renamed)
    assert setup.makespan_tick(renamed) == setup.makespan_tick(times)
    assert setup.peak_bytes(renamed) == setup.peak_bytes(times)
    finish_pipeline(setup, renamed, 0, PlanStatus.FEASIBLE, solver="test", solver_version="", started_s=0.0,
                    time_to_best_s=0.0)  # the independent validator and the cap check, or it raises
    return renamed


@pytest.mark.parametrize("seed", SEEDS)
def test_the_optimum_is_the_same_with_and_without_family_5(seed: int) -> None:
    rng = random.Random(seed)
    pipe = random_pipeline(rng)
    cap = random_cap(pipe, rng)
    _, free, free_status = _times_of(pipe, cap, fifo=False)
    setup, ordered, ordered_status = _times_of(pipe, cap, fifo=True)
    assert free_status is PlanStatus.OPTIMAL and ordered_status is PlanStatus.OPTIMAL
    assert setup.makespan_tick(ordered) == setup.makespan_tick(free)


@pytest.mark.parametrize(("seed", "placement"), [(0, "fixed"), (1, "fixed"), (3, "v")])
def test_schedules_out_of_order_are_renamed_into_order(seed: int, placement: str) -> None:
    # the search free to reorder inside its neighbourhoods (`fifo_inside=False`) leaves micro-batch order on these
    # (improve_pipeline alone: solve_pipeline_lns would rename them itself); renamed, they are in order again, valid,
    # with the same makespan and memory
    pipe = uneven_pipeline(4, 6, placement, seed)
    setup = prepare_pipeline(pipe)
    assert setup.known is not None
    got = improve_pipeline(setup, setup.known, time_limit_s=60, policy=PipelineLnsPolicy(step_s=5), max_steps=6,
                           fifo_inside=False, threads=2, seed=seed)
    assert not got.in_order and not in_order(setup, got.times)
    _check_renamed(setup, got.times)


def test_swapping_two_micro_batches_names_is_undone() -> None:
    # an in-order schedule with micro-batches 0 and 1 swapped everywhere (the same schedule, out of order)
    pipe = TrainingPipeline((StageCost(2, 2, 1, activation_bytes=4),) * 4, 4, 2, (0, 1, 1, 0), ((0, 1, 2, 3),),
                            comm_tick=1)
    setup, times, _ = _times_of(pipe, 40, fifo=True)
    index = setup.tasks.index
    swapped = list(times.start)
    for action, t in index.items():
        if action.microbatch in (0, 1):
            swapped[t] = times.start[index[dataclasses.replace(action, microbatch=1 - action.microbatch)]]
    out_of_order = PipelineTimes(tuple(swapped))
    assert not in_order(setup, out_of_order)
    assert _check_renamed(setup, out_of_order) == times


def test_pairs_are_left_as_they_are() -> None:
    # a pair joins two micro-batches: no renaming is claimed there
    pipe = dataclasses.replace(uniform_pipeline(2, 3), fb_overlap=0.5)
    setup = prepare_pipeline(pipe)
    assert setup.pairs and setup.known is not None
    assert renamed_in_order(setup, setup.known) is setup.known

