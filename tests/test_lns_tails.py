"""The LNS neighbourhood's tails and releases (`planner.lns`): a neighbourhood's objective must not be
held at the incumbent's makespan by work the neighbourhood itself re-schedules.

The graph: x (device 1) -> u -> y (device 0), y -> w1, w2 (10 ticks each), w1, w2 -> z.  The incumbent runs
w1 and w2 one after the other on device 0 (makespan 25 with the 1-tick transfers) while device 1 idles; putting
w2 on device 1 ends at 15.  A window of {w1, w2} opens after y.  Were x's tail to go through u and y into the
window's own schedule, or z (the first op after the window on device 0) to be released at its start in the
incumbent, either would hold the neighbourhood's objective at 25, and the model would have nothing to gain."""

from __future__ import annotations

import numpy as np
from checks import check_plan_valid
from instances import make_instance

from planner.lns import _delivery, neighbourhood_move
from planner.schedule.plan import PlanMethod
from planner.schedule.simulate import simulate
from planner.search.policy import SearchPolicy

X, U, Y, W1, W2, Z = range(6)


def _case():
    dur = [[1, 1], [1, 1], [1, 1], [10, 10], [10, 10], [1, 1]]
    edges = [(X, U, 1), (U, Y, 1), (Y, W1, 1), (Y, W2, 1), (W1, Z, 1), (W2, Z, 1)]
    inst = make_instance("tails", dur, edges)
    timeline = simulate(inst, [[U, Y, W1, W2, Z], [X]])
    plan = timeline.to_plan(method=PlanMethod.HEFT, lower_bound_tick=inst.trivial_lower_bound_tick())
    return inst, plan


def test_the_incumbent_is_the_serial_one() -> None:
    inst, plan = _case()
    check_plan_valid(inst, plan)
    assert plan.makespan_tick == 25  # x 0-1, u 2-3, y 3-4, w1 4-14, w2 14-24, z 24-25


def test_tails_run_only_through_ops_after_the_window() -> None:
    inst, plan = _case()
    by = plan.by_task()
    start = np.array([by[n].start_tick for n in inst.task_names])
    end = np.array([by[n].end_tick for n in inst.task_names])
    device = np.array([by[n].device for n in inst.task_names])
    tasks = [X, Y, W1, W2, Z]  # the neighbourhood of the window {w1, w2}: frozen x, y; sentinel z
    a_tick = int(start[W1])
    after = dict(zip(tasks, _delivery(inst, plan, tasks, start, end, device, a_tick, chained={Z}), strict=True))
    assert after == {X: 0, Y: 0, W1: 0, W2: 0, Z: 0}  # nothing runs after the window outside the neighbourhood
    # tails through the whole incumbent (no window): x's tail runs through u, y, the window's serial w1, w2 and z
    before = dict(zip(tasks, _delivery(inst, plan, tasks, start, end, device, None, chained={Z}), strict=True))
    assert before[X] == plan.makespan_tick - int(end[X])


def test_a_window_move_finds_the_parallel_schedule() -> None:
    inst, plan = _case()
    new, optimal = neighbourhood_move(inst, plan, [W1, W2], time_limit_s=30, threads=1)
    assert optimal
    assert new is not None
    check_plan_valid(inst, new)
    # w1 4-14 on device 0, w2 5-15 on device 1 (after the transfer from y), z (kept on device 0) 16-17
    assert new.makespan_tick == 17
    assert SearchPolicy().lns_tails_after_window
