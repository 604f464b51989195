"""The mirror fold (`planner.pipeline.mirror`) on DualPipe's placement at p = 2: the exact half, its unfolding and
folding of start ticks, and every asymmetry that refuses a fold."""

from __future__ import annotations

import dataclasses

from planner.pipeline.mirror import fold
from planner.pipeline.registry import UnitCosts, pipeline_for
from planner.pipeline.unroll import StageCost, unroll

COSTS = UnitCosts(comm=1, comm_stream=True)


def _dualpipe(p=2, m=4, costs=COSTS):
    return pipeline_for("dualpipe", p, m, costs)


def test_the_half_of_dualpipe_on_two_devices():
    f = fold(_dualpipe(), [10, 10])
    assert f is not None
    h = f.half
    # chain 0 = stages 0, 1 on devices 0, 1; chain 1 = stages 2, 3 on devices 1, 0: both chunks fold onto device 0,
    # and the hop between them stays a send (a turn)
    assert f.copies == ((0, 2), (1, 3))
    assert h.num_devices == 1 and h.stage_to_device == (0, 0) and h.chains == ((0, 1),)
    assert h.turn_sends == (0,) and h.stage_comm_tick == (2, 2) and h.name == "dualpipe-half"
    assert h.num_microbatches == 2 and h.stages == _dualpipe().stages[:2] and h.comm_stream
    assert f.half_caps([10, 10]) == [10]


def test_unfolding_gives_each_task_s_start_to_both_copies_and_folding_takes_it_back():
    f = fold(_dualpipe(), [10, 10])
    names = unroll(f.half).task_names
    times = {n: 3 * i for i, n in enumerate(names)}
    whole = f.unfold_times(times)
    assert set(whole) == set(unroll(_dualpipe()).task_names)
    assert whole["0F1"] == whole["2F1"] == times["0F1"]
    assert whole["1W0"] == whole["3W0"] == times["1W0"]
    assert whole["0SEND_F1"] == whole["2SEND_F1"] == times["0SEND_F1"]
    assert whole["1SEND_B0"] == whole["3SEND_B0"] == times["1SEND_B0"]
    assert f.fold_times(whole) == times
    assert f.fold_times({**whole, "3W0": whole["3W0"] + 1}) is None  # not symmetric
    assert f.fold_times({k: v for k, v in whole.items() if k != "0F0"}) is None  # a task missing


def test_all_to_alls_unfold_to_both_copies():
    f = fold(_dualpipe(costs=UnitCosts(a2a=1.0)), [10, 10])
    assert f is not None
    names = unroll(f.half).task_names
    whole = f.unfold_times({n: i for i, n in enumerate(names)})
    assert whole["1DISPATCH_F0"] == whole["3DISPATCH_F0"] == names.index("1DISPATCH_F0")


def test_asymmetric_pipelines_do_not_fold():
    pipe = _dualpipe()
    assert fold(pipe, [10, 9]) is None  # caps differ
    assert fold(pipe, [10, 10, 10]) is None  # a cap per device
    assert fold(dataclasses.replace(pipe, stage_to_device=None), [10, 10]) is None
    assert fold(pipeline_for("zb-v", 2, 4, COSTS), [10, 10]) is None  # one chain
    assert fold(pipeline_for("dualpipe", 2, 4, UnitCosts(fb_overlap=0.5)), [10, 10]) is None  # pairs gain
    cheap = StageCost(1, 1, 1, activation_bytes=1)
    assert fold(dataclasses.replace(pipe, stages=(*pipe.stages[:3], cheap)), [10, 10]) is None  # chunk costs differ
    assert fold(dataclasses.replace(pipe, stage_comm_tick=(2, 2, 3, 2)), [10, 10]) is None  # hops differ
    assert fold(dataclasses.replace(pipe, stage_to_device=(0, 1, 0, 1)), [10, 10]) is None  # not mirrored
    assert fold(fold(pipe, [10, 10]).half, [10]) is None  # a half already (one device, one chain, a turn send)
    odd = dataclasses.replace(pipe, chains=((0, 1), (2,)), stages=pipe.stages[:3], stage_to_device=(0, 1, 1))
    assert fold(odd, [10, 10]) is None  # chains of unequal length


def test_four_devices_fold_to_two_without_turns_in_the_lower_half():
    f = fold(_dualpipe(p=4, m=8), [7] * 4)
    assert f is not None
    # chain 0: stages 0..3 on devices 0..3 fold to 0, 1, 1, 0; the turn is the hop 1 -> 2 (both on device 1)
    assert f.half.stage_to_device == (0, 1, 1, 0) and f.half.turn_sends == (1,)
    assert f.copies == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert f.half_caps([7, 7, 7, 7]) == [7, 7]
