"""Unrolling case by case: the exact tasks, streams, durations and dependencies of small pipelines with sends on
communication streams, MoE all-to-alls (all four kinds or some) and overlapped pairs, as the rules of
`planner.pipeline.unroll`'s docstring state them."""

from __future__ import annotations

from planner.cost.instance import INELIGIBLE
from planner.pipeline.unroll import StageCost, TrainingPipeline, uniform_pipeline, unroll, unroll_actions
from planner.schedule.actions import Action, ActionKind, OverlapAction


def _edges(inst):
    return {(inst.task_names[u], inst.task_names[v]) for u, v in inst.edges}


def _where(inst):
    """task name -> (the one device it may run on, its duration there)."""
    out = {}
    for t, name in enumerate(inst.task_names):
        devs = [d for d in range(inst.num_devices) if inst.duration_tick[t, d] < INELIGIBLE]
        assert len(devs) == 1, name
        out[name] = (devs[0], int(inst.duration_tick[t, devs[0]]))
    return out


PLAIN = StageCost(2, 3, 1, activation_bytes=1)
MOE = StageCost(2, 3, 1, activation_bytes=1, a2a_tick=4)


def test_all_to_alls_wrap_the_forward_and_the_backward_of_their_stage():
    inst = unroll(TrainingPipeline((PLAIN, MOE), 1, 2, (0, 1), ((0, 1),)))
    assert inst.task_names == ("0F0", "0B0", "0W0", "1F0", "1B0", "1W0",
                               "1DISPATCH_F0", "1COMBINE_F0", "1DISPATCH_B0", "1COMBINE_B0")
    assert inst.device_names == ("p0", "p1", "p0/comm", "p1/comm")
    where = _where(inst)
    assert where["0F0"] == (0, 2) and where["1B0"] == (1, 3) and where["1W0"] == (1, 1)
    for kind in ("DISPATCH_F", "COMBINE_F", "DISPATCH_B", "COMBINE_B"):
        assert where[f"1{kind}0"] == (3, 4)  # the communication stream of the stage's device, a2a_tick long
    e = _edges(inst)
    # preds of F -> dispatch -> F -> combine -> succs of F; the same around the backward
    assert {("0F0", "1DISPATCH_F0"), ("1DISPATCH_F0", "1F0"), ("1F0", "1COMBINE_F0"),
            ("1COMBINE_F0", "1DISPATCH_B0"), ("1DISPATCH_B0", "1B0"), ("1B0", "1COMBINE_B0"),
            ("1COMBINE_B0", "0B0")} <= e
    assert ("1B0", "1W0") in e  # the weight gradient needs only the dispatched gradient: B -> W stays direct
    assert not {("0F0", "1F0"), ("1B0", "0B0"), ("1F0", "1B0"), ("1COMBINE_B0", "1W0")} & e
    assert all(int(c) == 0 for c in inst.edge_fixed_tick)  # no hop delay, and an all-to-all edge adds none


def test_a_stage_runs_only_the_all_to_all_kinds_it_names():
    moe = StageCost(2, 3, 1, activation_bytes=1, a2a_tick=4, a2a_kinds=("COMBINE_B", "DISPATCH_F"))
    inst = unroll(TrainingPipeline((PLAIN, moe), 1, 2, (0, 1), ((0, 1),)), fused=[(1, 0)])
    # kinds in A2A_KINDS order whatever order the stage names them in; a fused backward has no W
    assert inst.task_names == ("0F0", "0B0", "0W0", "1F0", "1BW0", "1DISPATCH_F0", "1COMBINE_B0")
    assert _edges(inst) == {("0F0", "0B0"), ("0B0", "0W0"), ("0F0", "0W0"), ("0F0", "1DISPATCH_F0"),
                            ("1DISPATCH_F0", "1F0"), ("1F0", "1BW0"), ("1BW0", "1COMBINE_B0"),
                            ("1COMBINE_B0", "0B0")}


def test_all_to_alls_of_every_micro_batch_and_no_streams_without_them():
    inst = unroll(TrainingPipeline((MOE, PLAIN), 2, 2, (0, 1), ((0, 1),)))
    a2a = [n for n in inst.task_names if "DISPATCH" in n or "COMBINE" in n]
    assert a2a == ["0DISPATCH_F0", "0COMBINE_F0", "0DISPATCH_B0", "0COMBINE_B0",
                   "0DISPATCH_F1", "0COMBINE_F1", "0DISPATCH_B1", "0COMBINE_B1"]
    assert {_where(inst)[n][0] for n in a2a} == {2}
    plain = unroll(TrainingPipeline((PLAIN, PLAIN), 2, 2, (0, 1), ((0, 1),)))
    assert plain.device_names == ("p0", "p1") and plain.num_tasks == 12


def test_sends_run_on_the_sender_s_communication_stream():
    pipe = TrainingPipeline((PLAIN, PLAIN), 2, 2, (0, 1), ((0, 1),), comm_tick=5, comm_stream=True)
    inst = unroll(pipe)
    assert inst.task_names[12:] == ("0SEND_F0", "1SEND_B0", "0SEND_F1", "1SEND_B1")
    where = _where(inst)
    assert where["0SEND_F0"] == (2, 5) and where["1SEND_B1"] == (3, 5)
    assert where["1F1"] == (1, 2)
    e = _edges(inst)
    assert {("0F0", "0SEND_F0"), ("0SEND_F0", "1F0"), ("1B0", "1SEND_B0"), ("1SEND_B0", "0B0")} <= e
    assert ("0F0", "1F0") not in e
    assert all(int(c) == 0 for c in inst.edge_fixed_tick)  # the sends carry the delay; the edges cost nothing


def test_without_streams_a_hop_is_an_edge_delay_of_its_stage_s_tick():
    pipe = TrainingPipeline((PLAIN, PLAIN, PLAIN), 1, 2, (0, 0, 1), ((0, 1, 2),), comm_tick=5,
                            stage_comm_tick=(7, 0, 0))
    inst = unroll(pipe)
    delays = {(inst.task_names[u], inst.task_names[v]): int(c) for (u, v), c in zip(inst.edges,
                                                                                   inst.edge_fixed_tick)}
    assert delays[("0F0", "1F0")] == 7 and delays[("1B0", "0B0")] == 7  # activation and gradient, same hop
    assert delays[("1F0", "2F0")] == 0 and delays[("0F0", "0B0")] == 0


def test_an_overlapped_pair_becomes_one_task_with_both_halves_edges_and_memory():
    pipe = uniform_pipeline(2, 2, placement="v", overlap_tick=5, forward_tick=2, activation_bytes=3,
                            param_bytes=4)
    pair = OverlapAction(Action(0, ActionKind.F, 1), Action(1, ActionKind.BW, 0))
    un = unroll_actions(pipe, fused=[(1, 0), (1, 1)], pairs=[pair])
    inst = un.instance
    assert inst.task_names == ("0F0", "0B0", "0W0", "0F1&1BW0", "0B1", "0W1", "1F0", "1F1", "1BW1")
    assert un.actions[3] == pair and un.index[pair] == 3
    t = inst.task_names.index("0F1&1BW0")
    assert int(inst.duration_tick[t, 0]) == 5  # the pair's own tick, not F + BW = 4
    assert int(inst.activation_bytes[t]) == 3 and int(inst.param_bytes[t]) == 0  # F(0, 1)'s activation
    assert int(inst.param_bytes[inst.task_names.index("0F0")]) == 4  # parameters on each stage's first F
    e = _edges(inst)
    assert {("1F0", "0F1&1BW0"), ("0F1&1BW0", "0B0"), ("0F1&1BW0", "1F1"), ("0F1&1BW0", "0B1")} <= e


def test_a_pair_without_a_duration_of_its_own_runs_as_its_two_halves():
    pipe = uniform_pipeline(2, 2, placement="v")  # no overlap_tick, no fb_overlap
    pair = OverlapAction(Action(0, ActionKind.F, 1), Action(1, ActionKind.BW, 0))
    inst = unroll(pipe, fused=[(1, 0), (1, 1)], pairs=[pair])
    assert "0F1&1BW0" not in inst.task_names and {"0F1", "1BW0"} <= set(inst.task_names)
