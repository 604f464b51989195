"""Pipeline figures (`planner/pipeline/metrics.py`) on hand-checked timelines, in particular the part of an
activation that B frees (a mutant "B frees nothing, W frees everything" passes a test with one micro-batch, whose
peak comes before B, so these tests have several)."""

from __future__ import annotations

import pytest

from planner.pipeline.generators import gpipe
from planner.pipeline.metrics import IdleParts, PipelineFigures, figures, idle_parts
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import StageCost, TrainingPipeline, instance_for_schedule
from planner.pipeline.zero_bubble import zb_h1
from planner.schedule.actions import Action, ActionKind
from planner.schedule.program import Schedule
from planner.schedule.simulate import simulate_schedule


def _two_stages(freed_by_b: int, params: int = 0) -> TrainingPipeline:
    c = StageCost(1, 1, 1, activation_bytes=10, activation_freed_by_b_bytes=freed_by_b, param_bytes=params)
    return TrainingPipeline((c, c), 2, 2, (0, 1), ((0, 1),))


def _run(pipe, schedule):
    inst = instance_for_schedule(pipe, schedule)
    tl = simulate_schedule(inst, schedule)
    return tl, figures(pipe, tl)


def _order(tl, device):
    return [(p.task, p.start_tick, p.end_tick) for p in sorted(tl.placements, key=lambda p: p.start_tick)
            if p.device == device]


# ZB-H1, 2 stages x 2 micro-batches, F = B = W = 1, 10 bytes of activation per (stage, micro-batch).
#   d0: F0 [0,1) F1 [1,2) B0 [3,4) W0 [4,5) B1 [5,6) W1 [6,7)      -> 10, 20 before any backward: peak 20
#   d1: F0 [1,2) B0 [2,3) F1 [3,4) B1 [4,5) W0 [5,6) W1 [6,7)
# With B freeing 6 of the 10 bytes, d1: 10 after F0, 4 after B0, 14 after F1 (B0's end and F1's start at tick 3
# net out), 8 after B1, 4 after W0, 0 after W1: peak 14.  If B freed nothing d1 would reach 20; if B freed all, 10.
@pytest.mark.parametrize(("freed", "peak_d1"), [(6, 14), (0, 20), (10, 10)])
def test_b_frees_its_part_of_the_activation(freed: int, peak_d1: int) -> None:
    tl, fig = _run(_two_stages(freed), zb_h1(2, 2))
    assert _order(tl, 1) == [("1F0", 1, 2), ("1B0", 2, 3), ("1F1", 3, 4), ("1B1", 4, 5), ("1W0", 5, 6),
                             ("1W1", 6, 7)]
    assert fig.peak_activation_bytes == (20, peak_d1)
    assert fig.peak_memory_bytes == (20, peak_d1)


# Same timeline, 7 ticks, d0 busy 6 and d1 busy 6 of them: bubble 1 + 1 = 2, ratio 2 / (2 x 7).  Parameters of a
# stage count on its device for the whole step: 5 bytes each.
def test_bubble_and_parameters() -> None:
    _tl, fig = _run(_two_stages(6, params=5), zb_h1(2, 2))
    assert fig.makespan_tick == 7 and fig.bubble_tick == 2
    assert fig.bubble_ratio == pytest.approx(2 / 14)
    assert fig.per_device_bubble_tick == pytest.approx(1.0)
    assert fig.param_bytes == (5, 5)
    assert fig.peak_memory_bytes == (25, 19)
    assert fig.max_peak_memory_bytes == 25


def test_idle_parts_split_the_bubble_into_fill_mid_and_drain() -> None:
    # the ZB-H1 run above: d0 waits for B0 in [2, 3) (mid), d1 starts at tick 1 (fill); neither drains
    tl, fig = _run(_two_stages(6), zb_h1(2, 2))
    parts = idle_parts(_two_stages(6), tl)
    assert parts == (IdleParts(0, 1, 0), IdleParts(1, 0, 0))
    assert sum(x.fill_tick + x.mid_tick + x.drain_tick for x in parts) == fig.bubble_tick
    # GPipe, 2 stages x 2 micro-batches: d1 drains while d0 runs its last backward
    tl, fig = _run(_two_stages(6), gpipe(2, 2))
    parts = idle_parts(_two_stages(6), tl)
    assert parts[0].fill_tick == 0 and parts[1].fill_tick == 1 and parts[1].drain_tick > 0
    assert sum(x.fill_tick + x.mid_tick + x.drain_tick for x in parts) == fig.bubble_tick


# GPipe fuses B and W (BW frees the whole activation at its end): one stage, two micro-batches,
# F0 [0,1) F1 [1,2) BW0 [2,4) BW1 [4,6): 20 bytes at the peak, whatever part B alone would free.
def test_fused_backward_frees_everything_at_its_end() -> None:
    c = StageCost(1, 1, 1, activation_bytes=10, activation_freed_by_b_bytes=6)
    tl, fig = _run(TrainingPipeline((c,), 2, 1, (0,), ((0,),)), gpipe(1, 2))
    assert _order(tl, 0) == [("0F0", 0, 1), ("0F1", 1, 2), ("0BW0", 2, 4), ("0BW1", 4, 6)]
    assert fig.peak_activation_bytes == (20,)
    assert fig.bubble_tick == 0 and fig.bubble_ratio == 0.0


# Communication streams (GPipe, 2 stages x 2 micro-batches, F = B = W = 1, hops of 2 ticks as sends; the timeline
# of test_pipeline_model's test_a_devices_sends_serialize_on_its_stream):
#   d0: F0 [0,1) F1 [1,2) BW0 [10,12) BW1 [12,14);  d1: F0 [3,4) F1 [5,6) BW0 [6,8) BW1 [8,10);  makespan 14.
# Only the compute streams count: busy 6 of 14 on each, bubble 8 + 8 = 16 (the comm streams' idle time is not a
# bubble), ratio 16 / 28.  A send holds no activation and no parameters: peaks 20 and 20 (+5 parameters each).
def test_sends_on_communication_streams_are_not_figures() -> None:
    c = StageCost(1, 1, 1, activation_bytes=10, param_bytes=5)
    pipe = TrainingPipeline((c, c), 2, 2, (0, 1), ((0, 1),), comm_tick=2, comm_stream=True)
    _inst, tl = simulate_pipeline(pipe, gpipe(2, 2))
    fig = figures(pipe, tl)
    assert tl.num_devices == 4 and {p.device for p in tl.placements} == {0, 1, 2, 3}
    assert _order(tl, 0) == [("0F0", 0, 1), ("0F1", 1, 2), ("0BW0", 10, 12), ("0BW1", 12, 14)]
    assert fig.makespan_tick == 14 and fig.bubble_tick == 16
    assert fig.bubble_ratio == pytest.approx(16 / 28)
    assert fig.peak_activation_bytes == (20, 20) and fig.param_bytes == (5, 5)
    assert fig.peak_memory_bytes == (25, 25)


# A schedule whose tasks all last 0 ticks has makespan 0: its bubble ratio is 0, not a division by zero.
def test_an_empty_span_has_no_bubble_ratio() -> None:
    c = StageCost(0, 0, 0, activation_bytes=10)
    _tl, fig = _run(TrainingPipeline((c,), 1, 1, (0,), ((0,),)), gpipe(1, 1))
    assert fig.makespan_tick == 0 and fig.bubble_ratio == 0.0


def test_per_device_figures_of_one_device_and_of_none() -> None:
    one = PipelineFigures(makespan_tick=7, bubble_tick=3, bubble_ratio=3 / 7, peak_memory_bytes=(5,),
                          param_bytes=(0,), peak_activation_bytes=(5,))
    assert one.per_device_bubble_tick == 3.0 and one.max_peak_memory_bytes == 5
    none = PipelineFigures(0, 0, 0.0, (), (), ())
    assert none.max_peak_memory_bytes == 0 and none.per_device_bubble_tick == 0.0


# One stage, three micro-batches, unit F, B, W, 10 bytes of which B frees 6, run as F0 B0 F1 W0 F2 B1 W1 B2 W2:
# +10 at 0; at 2 B0 frees 6 and F1 takes 10: 14; at 4 W0 frees the other 4 and F2 takes 10: 20 (the peak);
# then 14, 10, 4, 0.  W frees what B left (10 - 6), not more: freeing 16 would give a peak of 14.
def test_w_frees_what_b_left() -> None:
    c = StageCost(1, 1, 1, activation_bytes=10, activation_freed_by_b_bytes=6)
    F, B, W = ActionKind.F, ActionKind.B, ActionKind.W
    row = [Action(0, F, 0), Action(0, B, 0), Action(0, F, 1), Action(0, W, 0), Action(0, F, 2), Action(0, B, 1),
           Action(0, W, 1), Action(0, B, 2), Action(0, W, 2)]
    schedule = Schedule((tuple(row),), 1, 3, (0,), name="by-hand")
    tl, fig = _run(TrainingPipeline((c,), 3, 1, (0,), ((0,),)), schedule)
    assert [(p.task, p.start_tick) for p in sorted(tl.placements, key=lambda p: p.start_tick)][:5] == [
        ("0F0", 0), ("0B0", 1), ("0F1", 2), ("0W0", 3), ("0F2", 4)]
    assert fig.peak_activation_bytes == (20,)


# Makespan 1 on two devices: stage 0 (F = 1) on d0, stage 1 (all 0 ticks) on d1; d1 is idle the whole tick:
# bubble 1, ratio 1 / (2 x 1).
def test_bubble_ratio_of_a_one_tick_schedule() -> None:
    busy, empty = StageCost(1, 0, 0), StageCost(0, 0, 0)
    _tl, fig = _run(TrainingPipeline((busy, empty), 1, 2, (0, 1), ((0, 1),)), gpipe(2, 1))
    assert fig.makespan_tick == 1 and fig.bubble_tick == 1
    assert fig.bubble_ratio == pytest.approx(0.5)
