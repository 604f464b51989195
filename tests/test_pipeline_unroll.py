"""Unrolled training tasks (planner/pipeline/unroll.py) and the pipeline memory accounting (metrics.py)."""

from __future__ import annotations

import pytest

from planner.errors import InputError
from planner.pipeline.metrics import figures, peak_level, pipeline_memory
from planner.pipeline.unroll import (
    StageCost,
    TrainingPipeline,
    instance_for_schedule,
    uniform_pipeline,
    unroll,
    v_placement,
)
from planner.schedule.program import Schedule
from planner.schedule.simulate import simulate, simulate_schedule


def _edges(inst):
    return {(inst.task_names[u], inst.task_names[v]) for u, v in inst.edges}


def test_tasks_and_dependencies_of_two_stages():
    inst = unroll(uniform_pipeline(2, 2, forward_tick=2, input_grad_tick=3, weight_grad_tick=1))
    assert sorted(inst.task_names) == sorted(f"{s}{k}{m}" for s in range(2) for k in "FBW" for m in range(2))
    e = _edges(inst)
    for m in range(2):
        assert (f"0F{m}", f"1F{m}") in e  # F(s,m) -> F(s+1,m)
        assert (f"1F{m}", f"1B{m}") in e  # F(last,m) -> B(last,m)
        assert (f"1B{m}", f"0B{m}") in e  # B(s+1,m) -> B(s,m)
        assert (f"0F{m}", f"0B{m}") in e  # F(s,m) -> B(s,m)
        assert (f"0B{m}", f"0W{m}") in e  # B(s,m) -> W(s,m)
        assert (f"0F{m}", f"0W{m}") in e  # carries the activation to W
    assert len(e) == 2 * (3 * 2 + 2)  # per micro-batch: F->B, B->W, F->W per stage, plus one F->F and one B->B
    idx = inst.task_index
    assert inst.duration_tick[idx["0F0"], 0] == 2 and inst.duration_tick[idx["1B1"], 1] == 3
    assert not inst.eligible(idx["1F0"], 0) and inst.eligible(idx["1F0"], 1)


def test_backward_rule_for_matrix_products():
    c = StageCost.from_forward(5)
    assert (c.forward_tick, c.input_grad_tick, c.weight_grad_tick, c.bw_tick) == (5, 5, 5, 10)
    assert StageCost(1, 2, 3, full_backward_tick=4).bw_tick == 4


def test_fused_backward_and_placements():
    pipe = uniform_pipeline(4, 3, placement="v")
    assert pipe.stage_to_device == (0, 1, 1, 0) == v_placement(2)
    inst = unroll(pipe, fused={(3, 0)})
    assert "3BW0" in inst.task_names and "3B0" not in inst.task_names
    assert ("3BW0", "2B0") in _edges(inst)
    free = unroll(uniform_pipeline(2, 1, placement="free", num_devices=3))
    assert all(free.eligible(t, d) for t in range(free.num_tasks) for d in range(3))
    dp = uniform_pipeline(4, 2, placement="dualpipe")
    assert dp.chains == ((0, 1), (2, 3))
    assert ("1F0", "2F0") not in _edges(unroll(dp))


def test_comm_is_paid_only_across_devices():
    inst = unroll(uniform_pipeline(4, 1, placement="v", comm_tick=5))
    idx = inst.task_index
    e = {(inst.task_names[u], inst.task_names[v]): k for k, (u, v) in enumerate(inst.edges)}
    assert inst.comm(e[("0F0", "1F0")], 0, 1) == 5
    # stages 1 and 2 share device 1 in the V: the hand-over is local
    k = e[("1F0", "2F0")]
    assert inst.comm(k, 1, 1) == 0 and idx
    # ... and that premise is read off the instance, not assumed: comm(k, 1, 1) is 0 for any edge (a device's
    # link to itself), so it alone would pass with the V's turn placed across devices.
    device = {n: next(d for d in range(inst.num_devices) if inst.eligible(t, d)) for t, n in enumerate(inst.task_names)}
    assert [device[f"{s}F0"] for s in range(4)] == [0, 1, 1, 0]
    assert [device[f"{s}B0"] for s in range(4)] == [0, 1, 1, 0]
    assert inst.comm(k, device["1F0"], device["2F0"]) == 0
    assert inst.comm(e[("2F0", "3F0")], device["2F0"], device["3F0"]) == 5
    assert inst.comm(e[("1B0", "0B0")], device["1B0"], device["0B0"]) == 5


def test_activation_lives_from_f_to_w():
    # One stage, one micro-batch, F=2 B=3 W=1, activation 10 of which B frees 4.
    # F [0,2) B [2,5) W [5,6): memory 10 on [0,5), 6 on [5,6) -> peak 10; with params 7 -> 17.
    pipe = TrainingPipeline((StageCost(2, 3, 1, 10, 7, activation_freed_by_b_bytes=4),), 1, 1, (0,), ((0,),))
    inst = unroll(pipe)
    tl = simulate(inst, [["0F0", "0B0", "0W0"]])
    act, par = pipeline_memory(pipe, tl)
    assert act == (10,) and par == (7,)
    # the instance's own model holds the whole activation until W ends, params for the whole step
    assert tl.memory.peak_bytes == (17,)
    assert figures(pipe, tl).peak_memory_bytes == (17,)


def test_two_microbatches_in_flight_count_twice():
    # 1 stage, F F B B W W (all 1 tick): both activations live at tick 2 -> peak 2.
    pipe = uniform_pipeline(1, 2)
    sch = Schedule.build([["0F0", "0F1", "0B0", "0B1", "0W0", "0W1"]])
    tl = simulate_schedule(instance_for_schedule(pipe, sch), sch)
    assert pipeline_memory(pipe, tl)[0] == (2,)


def test_a_free_and_a_take_at_one_tick_net_out_in_either_order():
    # [0, 3) holds 5 and [3, 6) holds 4: the first gives its memory back at tick 3, so the peak is 5, not 9, in
    # whichever order the events come
    events = [(0, 5), (3, -5), (3, 4), (6, -4)]
    assert peak_level(events) == 5
    assert peak_level(reversed(events)) == 5
    assert peak_level([(0, 5), (2, 4), (3, -5), (6, -4)]) == 9  # overlapping on [2, 3): both held
    assert peak_level([]) == 0


def test_bad_inputs_are_input_errors():
    with pytest.raises(InputError):
        StageCost(-1, 1, 1)
    with pytest.raises(InputError):
        uniform_pipeline(3, 2, placement="v")
    with pytest.raises(InputError):
        TrainingPipeline((StageCost(1, 1, 1),), 1, 1, (0,), ((0, 0),))
    with pytest.raises(InputError):
        uniform_pipeline(2, 2, placement="diagonal")
