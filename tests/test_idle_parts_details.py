"""Where each device's bubble sits (`planner.pipeline.metrics.idle_parts`), by hand: GPipe at p = 2, m = 2
(F = 2, BW = 4), the same timeline starting later, and a device with nothing to run."""

from __future__ import annotations

import dataclasses

from planner.pipeline.generators import gpipe
from planner.pipeline.metrics import IdleParts, idle_parts
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import StageCost, TrainingPipeline, uniform_pipeline
from planner.schedule.program import Schedule

PIPE = uniform_pipeline(2, 2, forward_tick=2, input_grad_tick=3, weight_grad_tick=1)


def test_fill_mid_and_drain_of_gpipe():
    # device 0: F at 0-4, waits 4-10 for the first gradient, BW at 10-18 (makespan 18): 6 ticks mid-schedule;
    # device 1: starts at 2 (fill), runs 2-14, idle 14-18 (drain)
    _inst, tl = simulate_pipeline(PIPE, gpipe(2, 2))
    assert tl.makespan_tick == 18
    assert idle_parts(PIPE, tl) == (IdleParts(0, 6, 0), IdleParts(2, 0, 4))


def test_a_timeline_that_starts_later_splits_the_same():
    _inst, tl = simulate_pipeline(PIPE, gpipe(2, 2))
    later = dataclasses.replace(tl, start_tick=5, placements=tuple(
        dataclasses.replace(x, start_tick=x.start_tick + 5, end_tick=x.end_tick + 5) for x in tl.placements))
    assert idle_parts(PIPE, later) == idle_parts(PIPE, tl)


def test_a_device_with_nothing_to_run_is_all_fill_and_the_others_still_count():
    # both stages on device 1: device 0 idles the whole 24 ticks
    st = StageCost(2, 3, 1)
    pipe = TrainingPipeline((st, st), 2, 2, (1, 1), ((0, 1),))
    one = Schedule.build([["0F0", "1F0", "1BW0", "0BW0", "0F1", "1F1", "1BW1", "0BW1"]])
    _inst, tl = simulate_pipeline(pipe, Schedule(((), one.actions[0]), 2, 2, (1, 1), "one device"))
    assert tl.makespan_tick == 24
    assert idle_parts(pipe, tl) == (IdleParts(24, 0, 0), IdleParts(0, 0, 0))
