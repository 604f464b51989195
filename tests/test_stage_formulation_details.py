"""The stage formulation pinned by hand: its traffic sums skip an edge that carries nothing, never stopping there (a
chain whose costly hop follows a free one); the traffic phase takes the split with fewer bytes at the same bottleneck;
a free map whose devices hold exactly the balanced split is solved, not refused, and keeps a heavy stage off a device
too small for it; among DP maps of equal bottleneck the first is kept; the solve time is the call's own; without a
warm start the bottleneck may reach a cut's every crossing edge; the split hint gives each boundary its own link's
traffic."""

from __future__ import annotations

import time

import pytest
from instances import make_instance

from formulations.backends import get_backend
from formulations.stages import build_stage_model, dp_warm_start, hint_split, solve_stages
from planner.errors import InfeasibleError
from planner.heuristics.stage_dp import StagePlacement, stage_data


def test_a_free_hop_before_a_costly_one_leaves_the_costly_one_in_the_period():
    # chain t0 -> t1 -> t2 -> t3 of 1 tick each on 2 devices, stages fixed on devices 0 and 1; the hops cost 0, 10
    # and 0 ticks in edge order.  Cuts: after t0: max(1 + 0, 3) = 3; after t1: max(2 + 10, 2) = 12; after t2:
    # max(3 + 0, 1) = 3.  A sum that stopped at the free first hop would see every cut free and take the middle
    # one (2), whose real bottleneck is 12.
    inst = make_instance("hops", [[1, 1]] * 4, [(0, 1, 0), (1, 2, 10), (2, 3, 0)])
    plan = solve_stages(inst, 2, placement=StagePlacement.FIXED, warm_start=False, comm_tiebreak=False,
                        time_limit_s=10, threads=1)
    assert plan.bottleneck_tick == 3
    assert plan.stage_tasks in ((("t0",), ("t1", "t2", "t3")), (("t0", "t1", "t2"), ("t3",)))


def test_the_traffic_phase_takes_the_split_with_fewer_bytes_at_the_same_bottleneck():
    # chain of 1, 1, 2, 1, 1 ticks on 2 fixed stages; hops cost no time but carry 5, 1, 100, 5 bytes.  Cuts after
    # t1 (2 | 4) and after t2 (4 | 2) both give the bottleneck 4 (the others 5 or more); the first crosses 1 byte,
    # the second 100.  The traffic phase keeps the bottleneck and takes the 1-byte cut.
    inst = make_instance("tie", [[1, 1], [1, 1], [2, 2], [1, 1], [1, 1]],
                         [(0, 1, 0, 5), (1, 2, 0, 1), (2, 3, 0, 100), (3, 4, 0, 5)])
    plan = solve_stages(inst, 2, placement=StagePlacement.FIXED, comm_tiebreak=True, time_limit_s=10, threads=1)
    assert plan.bottleneck_tick == 4
    assert plan.total_comm_bytes == 1
    assert plan.stage_tasks == (("t0", "t1"), ("t2", "t3", "t4"))


def test_a_free_map_whose_devices_hold_exactly_the_balanced_split_is_solved():
    # 4 tasks of 2 bytes of parameters, 2 stages on 2 devices of any map: the balanced split holds 4 bytes per stage,
    # so a capacity of 4 fits exactly (the split 2 | 2); 3 does not fit any split
    def inst(capacity):
        return make_instance("fit", [[1, 1]] * 4, [(i, i + 1, 0) for i in range(3)], params=[2] * 4,
                             capacity=capacity)

    plan = solve_stages(inst(4), 2, placement=StagePlacement.FREE, time_limit_s=10, threads=1)
    assert plan.stage_tasks == (("t0", "t1"), ("t2", "t3"))
    with pytest.raises(InfeasibleError):
        solve_stages(inst(3), 2, placement=StagePlacement.FREE, time_limit_s=10, threads=1)


def test_a_free_map_keeps_the_heavy_stage_off_the_device_too_small_for_it():
    # t2 holds 5 bytes of parameters; d0 holds 100, d1 only 2.  t2 and t3 take 10 ticks on d0 and 1 on d1, t0 and t1
    # 1 on both.  Without the memory rows the split 2 | 2 with t2, t3 on d1 would give 2.  With them, every stage
    # with t2 sits on d0: 3 | 1 with t0..t2 on d0 (12) and t3 on d1 (1) gives 12; 2 | 2 gives 2 | 20; 1 | 3 gives
    # 1 | 21.  The model is solved without the exact DP (which would settle the answer before it).
    inst = make_instance("heavy", [[1, 1], [1, 1], [10, 1], [10, 1]], [(i, i + 1, 0) for i in range(3)],
                         params=[0, 0, 5, 0], capacity=[100, 2])
    plan = solve_stages(inst, 2, placement=StagePlacement.FREE, warm_start=False, time_limit_s=10, threads=1)
    assert plan.bottleneck_tick == 12
    assert plan.stage_tasks == (("t0", "t1", "t2"), ("t3",))
    assert tuple(plan.stage_device) == (0, 1)


def test_among_maps_of_equal_bottleneck_the_dp_warm_start_keeps_the_first():
    # 4 tasks of 1 tick on 3 devices that differ only in capacity (so no two are interchangeable): every map of 2
    # stages gives the split 2 | 2 and the bottleneck 2.  The first map tried, the fastest devices in index order
    # (0, 1), is kept; every canonical map was tried, so the answer is exact
    inst = make_instance("tie3", [[1, 1, 1]] * 4, [(i, i + 1, 0) for i in range(3)], capacity=[100, 200, 300])
    plan, exact = dp_warm_start(inst, stage_data(inst, 2), 2, None, 100, 10.0)
    assert plan is not None and exact
    assert tuple(plan.stage_device) == (0, 1)
    assert plan.bottleneck_tick == 2


def test_the_solve_time_is_the_time_the_call_took():
    inst = make_instance("chain", [[1, 1]] * 4, [(i, i + 1, 0) for i in range(3)])
    t0 = time.monotonic()
    plan = solve_stages(inst, 2, time_limit_s=10, threads=1)
    took = time.monotonic() - t0
    assert 0 < plan.solve_time_s <= took


def test_without_a_warm_start_the_bottleneck_may_reach_every_crossing_edge_of_a_cut():
    # diamond t0 -> t1, t2 -> t3 of 1 tick each, every hop 10 ticks, 2 fixed stages: every cut crosses two edges
    # (after t0: t0->t1, t0->t2; after t1: t0->t2, t1->t3; after t2: t1->t3, t2->t3), so the best is t0 | t1..t3:
    # max(1 + 20, 3) = 21, above the largest work (4) plus the costliest single edge (10)
    inst = make_instance("diamond", [[1, 1]] * 4, [(0, 1, 10), (0, 2, 10), (1, 3, 10), (2, 3, 10)])
    plan = solve_stages(inst, 2, placement=StagePlacement.FIXED, warm_start=False, time_limit_s=10, threads=1)
    assert plan.bottleneck_tick == 21
    assert plan.stage_tasks == (("t0",), ("t1", "t2", "t3"))


def test_the_split_hint_gives_each_boundary_the_traffic_of_its_own_link():
    # 3 tasks, one per stage on devices 0, 1, 2 (a free map); the link d0-d1 costs 1 tick per hop, d1-d2 and d0-d2
    # cost 10: boundary 0 (d0 -> d1) carries 1, boundary 1 (d1 -> d2) 10, the last stage nothing
    inst = make_instance("links", [[1, 1, 1]] * 3, [(0, 1, 0), (1, 2, 0)],
                         link_class=[[0, 1, 2], [1, 0, 2], [2, 2, 0]], latency=[0, 1, 10])
    builder = get_backend("cpsat").new_builder()
    m = build_stage_model(inst, builder, stage_data(inst, 3), 3, None, lower_bound=0, upper_bound=100)
    hints: dict[int, int] = {}
    builder.hint = lambda var, value: hints.__setitem__(var.index, value)  # type: ignore[method-assign]
    hint_split(m, [0, 1, 2], (0, 1, 2))
    assert [hints[m.comm[s].index] for s in range(3)] == [1, 10, 0]
