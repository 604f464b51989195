"""A training pipeline as data (`planner.pipeline.training_pipeline`): what its stage costs and pipelines refuse,
the duration of an overlapped pair, which hops are sends, the streams it needs, and the standard placements."""

from __future__ import annotations

import pytest

from planner.errors import InputError
from planner.pipeline.training_pipeline import (
    A2A_KINDS,
    StageCost,
    TrainingPipeline,
    fixed_placement,
    uniform_pipeline,
    v_placement,
)

ST = StageCost(2, 3, 1, activation_bytes=4)


def _pipe(stages=(ST, ST), std=(0, 1), chains=((0, 1),), **kw):
    return TrainingPipeline(tuple(stages), 2, 2, std, chains, **kw)


@pytest.mark.parametrize("field", ["forward_tick", "input_grad_tick", "weight_grad_tick", "activation_bytes",
                                   "param_bytes", "a2a_tick"])
def test_a_stage_cost_refuses_a_negative_field(field):
    kw = {"forward_tick": 1, "input_grad_tick": 1, "weight_grad_tick": 1, field: -1}
    with pytest.raises(InputError, match=f"stage cost {field} = -1 must be >= 0"):
        StageCost(**kw)
    kw[field] = 0
    assert getattr(StageCost(**kw), field) == 0


def test_a_stage_cost_refuses_unknown_all_to_all_kinds_and_frees_no_more_than_it_holds():
    with pytest.raises(InputError, match="a2a_kinds"):
        StageCost(1, 1, 1, a2a_kinds=("DISPATCH_F", "SHUFFLE"))
    with pytest.raises(InputError, match=r"activation_freed_by_b_bytes \(5\) exceeds activation_bytes \(4\)"):
        StageCost(1, 1, 1, activation_bytes=4, activation_freed_by_b_bytes=5)
    assert StageCost(1, 1, 1, activation_bytes=4, activation_freed_by_b_bytes=4).activation_freed_by_b_bytes == 4


def test_the_all_to_all_kinds_of_a_stage():
    assert StageCost(1, 1, 1).a2a_kind_set == ()
    assert StageCost(1, 1, 1, a2a_kinds=("DISPATCH_F",)).a2a_kind_set == ()  # no a2a_tick: none run
    assert StageCost(1, 1, 1, a2a_tick=1).a2a_kind_set == A2A_KINDS
    assert StageCost(1, 1, 1, a2a_tick=1, a2a_kinds=("COMBINE_B", "DISPATCH_F")).a2a_kind_set == \
        ("DISPATCH_F", "COMBINE_B")


def test_a_pipeline_refuses_what_it_cannot_unroll():
    with pytest.raises(InputError, match="needs at least one stage, micro-batch and device"):
        TrainingPipeline((), 1, 1, None, ())
    with pytest.raises(InputError, match="at least one stage"):
        TrainingPipeline((ST,), 0, 1, (0,), ((0,),))
    with pytest.raises(InputError, match="at least one stage"):
        TrainingPipeline((ST,), 1, 0, None, ((0,),))
    with pytest.raises(InputError, match="must cover stages 0..1 once each"):
        _pipe(chains=((0,),))
    with pytest.raises(InputError, match="must cover"):
        _pipe(chains=((0, 1), (1,)))
    with pytest.raises(InputError, match=r"does not map 2 stages to devices 0..1"):
        _pipe(std=(0, 2))
    with pytest.raises(InputError, match="does not map"):
        _pipe(std=(-1, 0))
    with pytest.raises(InputError, match="does not map"):
        _pipe(std=(0,))
    with pytest.raises(InputError, match="comm_tick must be >= 0"):
        _pipe(comm_tick=-1)
    assert _pipe(comm_tick=0, std=(1, 1)).comm_tick == 0


def test_per_stage_hops_need_one_tick_per_stage_none_negative():
    with pytest.raises(InputError, match="stage_comm_tick needs one tick >= 0 per stage"):
        _pipe(stage_comm_tick=(1,))
    with pytest.raises(InputError, match="stage_comm_tick"):
        _pipe(stage_comm_tick=(1, 2, 3))
    with pytest.raises(InputError, match="stage_comm_tick"):
        _pipe(stage_comm_tick=(1, -1))
    pipe = _pipe(stage_comm_tick=(3, 0), comm_tick=7)
    assert pipe.hop_tick(0) == 3 and pipe.hop_tick(1) == 0
    assert _pipe(comm_tick=7).hop_tick(0) == 7


@pytest.mark.parametrize("x", [0, -0.5, 1.01, 2])
def test_fb_overlap_must_lie_in_0_1(x):
    with pytest.raises(InputError, match=r"fb_overlap must be in \(0, 1\]"):
        _pipe(fb_overlap=x)


def test_turn_sends_must_name_stages_with_a_next_stage():
    with pytest.raises(InputError, match="turn_sends"):
        _pipe(turn_sends=(1,))  # the last stage of its chain
    with pytest.raises(InputError, match="turn_sends"):
        _pipe(turn_sends=(2,))
    with pytest.raises(InputError, match="turn_sends"):
        _pipe(turn_sends=(-1,))
    assert _pipe(turn_sends=(0,)).turn_sends == (0,)


def test_the_duration_of_an_overlapped_pair():
    f, b = StageCost(2, 3, 1), StageCost(4, 5, 6, full_backward_tick=8)
    pipe = TrainingPipeline((f, b), 1, 1, (0, 0), ((0, 1),), fb_overlap=0.5)
    assert pipe.pair_tick(0, 1, full=True) == 5  # round(0.5 * (2 + 8))
    assert pipe.pair_tick(0, 1, full=False) == 4  # round(0.5 * (2 + 5)) = round(3.5), half to even
    assert pipe.pair_tick(1, 0, full=False) == 4  # 0.5 * (4 + 3) = 3.5 -> 4
    assert pipe.pairs_gain
    fixed = TrainingPipeline((f, b), 1, 1, (0, 0), ((0, 1),), overlap_tick=9)
    assert fixed.pair_tick(0, 1, full=True) == 9 and fixed.pair_tick(0, 1, full=False) is None
    assert not fixed.pairs_gain
    assert TrainingPipeline((f, b), 1, 1, (0, 0), ((0, 1),)).pair_tick(0, 1, full=True) is None
    assert not TrainingPipeline((f, b), 1, 1, (0, 0), ((0, 1),), fb_overlap=1).pairs_gain


def test_all_to_alls_and_sends_turn_the_streams_on():
    moe = StageCost(1, 1, 1, a2a_tick=2)
    assert _pipe(stages=(ST, moe)).has_a2a and _pipe(stages=(ST, moe)).num_streams == 4
    assert not _pipe(stages=(ST, moe), std=None).has_a2a  # no placement, no all-to-all tasks
    assert not _pipe().has_a2a and not _pipe().streams_on and _pipe().num_streams == 2
    assert _pipe(comm_stream=True).streams_on and _pipe(comm_stream=True).num_streams == 4


def test_which_hops_are_sends():
    on = _pipe(comm_stream=True, comm_tick=3)
    assert on.sends_on_stream(0, 1)
    assert not _pipe(comm_tick=3).sends_on_stream(0, 1)  # no stream
    assert not _pipe(comm_stream=True, comm_tick=0).sends_on_stream(0, 1)  # no delay
    assert not _pipe(comm_stream=True, comm_tick=3, std=(1, 1)).sends_on_stream(0, 1)  # one device
    assert _pipe(comm_stream=True, comm_tick=3, std=(1, 1), turn_sends=(0,)).sends_on_stream(0, 1)
    assert not _pipe(comm_stream=True, comm_tick=3, std=None).sends_on_stream(0, 1)


def test_stages_of_a_device_and_chain_of_a_stage():
    pipe = TrainingPipeline((ST,) * 4, 1, 2, v_placement(2), ((0, 1), (2, 3)))
    assert pipe.device_stages(0) == (0, 3) and pipe.device_stages(1) == (1, 2)
    assert pipe.chain_of(3) == (2, 3) and pipe.num_stages == 4
    assert TrainingPipeline((ST,), 1, 1, None, ((0,),)).device_stages(0) == ()


def test_standard_placements():
    assert fixed_placement(5, 2) == (0, 1, 0, 1, 0)
    assert v_placement(3) == (0, 1, 2, 2, 1, 0)


def test_uniform_pipelines():
    pipe = uniform_pipeline(4, 3, forward_tick=2, input_grad_tick=3, weight_grad_tick=4, activation_bytes=5,
                            param_bytes=6, comm_tick=1, name="u")
    assert pipe.stages[0] == StageCost(2, 3, 4, 5, 6) and pipe.num_devices == 4 and pipe.name == "u"
    assert pipe.stage_to_device == (0, 1, 2, 3) and pipe.chains == ((0, 1, 2, 3),) and pipe.comm_tick == 1
    assert uniform_pipeline(4, 3, num_devices=2).stage_to_device == (0, 1, 0, 1)
    assert uniform_pipeline(4, 3).name == "fixed-4x3"
    dual = uniform_pipeline(4, 3, placement="dualpipe")
    assert dual.chains == ((0, 1), (2, 3)) and dual.num_devices == 2 and dual.stage_to_device == (0, 1, 1, 0)
    v = uniform_pipeline(4, 3, placement="v", num_devices=7)
    assert v.chains == ((0, 1, 2, 3),) and v.num_devices == 2
    free = uniform_pipeline(3, 1, placement="free")
    assert free.stage_to_device is None and free.num_devices == 3
    assert uniform_pipeline(3, 1, placement="free", num_devices=2).num_devices == 2
    with pytest.raises(InputError, match="needs an even number of stages, got 3"):
        uniform_pipeline(3, 1, placement="v")
    with pytest.raises(InputError, match="unknown placement 'ring'"):
        uniform_pipeline(2, 1, placement="ring")
