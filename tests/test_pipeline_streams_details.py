"""Communication streams run their sends first come, first served (`planner.pipeline.streams`): exact times and
stream orders on a hand-timed two-device pipeline, the refusal of an action the instance lacks, and deadlocks."""

from __future__ import annotations

import pytest

from planner.pipeline.streams import compute_orders, simulate_pipeline, stream_orders
from planner.pipeline.unroll import StageCost, TrainingPipeline, instance_for_schedule, uniform_pipeline, unroll
from planner.schedule.errors import DeadlockError, ScheduleError
from planner.schedule.program import Schedule

STAGE = StageCost(2, 3, 1, activation_bytes=1)  # F = 2, BW = 4


def _pipe(**kw):
    return TrainingPipeline((STAGE, STAGE), 2, 2, (0, 1), ((0, 1),), comm_tick=5, **kw)


def _times(inst, tl):
    return {p.task: (p.device, p.start_tick, p.end_tick) for p in tl.placements}


def test_sends_go_in_the_order_they_become_ready_not_by_micro_batch():
    # device 0 runs micro-batch 1 first: its send is ready at 2 and goes first although 0SEND_F0 has the lower
    # index; 0SEND_F0 (ready at 4) waits for the stream until 7.  Hand-timed with F = 2, BW = 4, hop 5.
    sch = Schedule.build([["0F1", "0F0", "0BW1", "0BW0"], ["1F1", "1F0", "1BW1", "1BW0"]], name="swap")
    inst, tl = simulate_pipeline(_pipe(comm_stream=True), sch)
    t = _times(inst, tl)
    assert t["0SEND_F1"] == (2, 2, 7) and t["0SEND_F0"] == (2, 7, 12)
    assert t["1F1"] == (1, 7, 9) and t["1F0"] == (1, 12, 14)
    assert t["1BW1"] == (1, 14, 18) and t["1BW0"] == (1, 18, 22)
    assert t["1SEND_B1"] == (3, 18, 23) and t["1SEND_B0"] == (3, 23, 28)
    assert t["0BW1"] == (0, 23, 27) and t["0BW0"] == (0, 28, 32)
    assert tl.makespan_tick == 32
    orders = stream_orders(inst, compute_orders(sch, inst), 2)
    names = [[inst.task_names[x] for x in row] for row in orders]
    assert names == [["0F1", "0F0", "0BW1", "0BW0"], ["1F1", "1F0", "1BW1", "1BW0"],
                     ["0SEND_F1", "0SEND_F0"], ["1SEND_B1", "1SEND_B0"]]


def test_without_streams_hops_overlap_each_other():
    sch = Schedule.build([["0F1", "0F0", "0BW1", "0BW0"], ["1F1", "1F0", "1BW1", "1BW0"]], name="swap")
    inst, tl = simulate_pipeline(_pipe(), sch)
    t = _times(inst, tl)
    assert t["1F1"] == (1, 7, 9) and t["1F0"] == (1, 9, 11)  # 0F0 ends at 4, arrives at 9: no queue
    assert not any("SEND" in name for name in inst.task_names)


def test_all_to_alls_with_no_predecessor_are_ready_at_once():
    moe = StageCost(2, 3, 1, activation_bytes=1, a2a_tick=4)
    pipe = TrainingPipeline((moe,), 1, 1, (0,), ((0,),))
    sch = Schedule.build([["0F0", "0BW0"]], name="one")
    inst, tl = simulate_pipeline(pipe, sch)
    t = _times(inst, tl)
    assert t["0DISPATCH_F0"] == (1, 0, 4) and t["0F0"] == (0, 4, 6) and t["0COMBINE_F0"] == (1, 6, 10)
    assert t["0DISPATCH_B0"] == (1, 10, 14) and t["0BW0"] == (0, 14, 18) and t["0COMBINE_B0"] == (1, 18, 22)


def test_an_action_the_instance_lacks_is_a_schedule_error():
    pipe = uniform_pipeline(2, 1)
    inst = unroll(pipe)  # B and W, no BW
    sch = Schedule.build([["0F0", "0BW0"], ["1F0", "1BW0"]], name="fused")
    with pytest.raises(ScheduleError, match="action '0BW0' has no task"):
        compute_orders(sch, inst)


def test_a_pair_without_its_own_task_maps_to_its_two_halves():
    pipe = uniform_pipeline(2, 2, placement="v")  # no pair duration: pairs run as two tasks
    sch = Schedule.build([["0F0", "1F0", "0F1&1BW0", "1F1", "1BW1", "0BW0", "0BW1"]], name="v")
    inst = instance_for_schedule(pipe, sch)
    (row,) = compute_orders(sch, inst)
    assert [inst.task_names[t] for t in row] == ["0F0", "1F0", "0F1", "1BW0", "1F1", "1BW1", "0BW0", "0BW1"]


def test_crossed_compute_orders_deadlock():
    pipe = _pipe(comm_stream=True)
    sch = Schedule.build([["0F0", "0BW0", "0F1", "0BW1"], ["1F1", "1F0", "1BW0", "1BW1"]], name="crossed")
    inst = instance_for_schedule(pipe, sch)
    with pytest.raises(DeadlockError, match="deadlock"):
        stream_orders(inst, compute_orders(sch, inst), 2)


def test_send_and_receive_actions_of_a_schedule_are_left_to_the_streams():
    sch = Schedule.build([["0F0", "0SEND_F0", "0RECV_B0", "0BW0"], ["1RECV_F0", "1F0", "1BW0", "1SEND_B0"]],
                         name="with comm")
    inst = instance_for_schedule(uniform_pipeline(2, 1), sch)
    orders = compute_orders(sch, inst)
    assert [[inst.task_names[t] for t in row] for row in orders] == [["0F0", "0BW0"], ["1F0", "1BW0"]]


def test_a_deadlock_at_the_end_counts_the_tasks_that_never_start():
    # device 1 runs its last backward before its last forward: 1BW3 waits for 1F3 behind it, and 0BW3 for 1BW3;
    # the other 13 tasks run
    pipe = TrainingPipeline((STAGE, STAGE), 4, 2, (0, 1), ((0, 1),), comm_tick=5)
    sch = Schedule.build([["0F0", "0BW0", "0F1", "0BW1", "0F2", "0BW2", "0F3", "0BW3"],
                          ["1F0", "1BW0", "1F1", "1BW1", "1F2", "1BW2", "1BW3", "1F3"]], name="late")
    inst = instance_for_schedule(pipe, sch)
    with pytest.raises(DeadlockError, match=r"\(3 tasks never start\)"):
        stream_orders(inst, compute_orders(sch, inst), 2)
