"""The simulator's details on hand-built instances (pinned so that `make mutate`'s mutants die): order checking and its
messages, devices without an order, which transfers contend, plan orders' tie-breaks, retiming's bound."""

from __future__ import annotations

import dataclasses

import pytest
from family_fixtures import instance

from planner.cost.instance import SchedulingInstance
from planner.pipeline.generators import gpipe
from planner.pipeline.unroll import instance_for_schedule, uniform_pipeline
from planner.schedule.errors import DeadlockError, SimulationError
from planner.schedule.plan import Plan, TaskPlacement
from planner.schedule.simulate import plan_orders, retime_plan, simulate, simulate_schedule

N = None


def _times(tl) -> dict[str, tuple[int, int, int]]:
    return {p.task: (p.device, p.start_tick, p.end_tick) for p in tl.placements}


def _error(inst, orders) -> str:
    with pytest.raises(SimulationError) as info:
        simulate(inst, orders)
    return str(info.value)


def test_every_bad_entry_of_an_order_is_reported_up_to_six() -> None:
    inst = instance("bad", [[1, 1], [1, N], [1, 1]])
    msg = _error(inst, [["zz", "t0", "t0", 3], ["t1", -1, "yy"]])
    problems = msg.split(": ", 1)[1].split("; ")
    assert problems == ["unknown task 'zz' on device d0", "task 't0' ordered twice (devices d0 and d0)",
                        "task index 3 out of range on device d0", "task 't1' cannot run on device d1",
                        "task index -1 out of range on device d1", "unknown task 'yy' on device d1"]
    # a seventh problem (t2 in no order) is not shown
    assert "no device's order" not in msg


def test_missing_tasks_are_named_up_to_eight() -> None:
    names = [f"t{i}" for i in range(10)]
    inst = SchedulingInstance.uniform("m", [1] * 10, [], 1, task_names=names)
    # (the " ..." that marks more than eight is appended, but OpplanError strips a message's trailing dots)
    assert f"tasks {names[1:9]} are in no device's order" in _error(inst, [["t0"]])
    assert _error(inst, [["t0", "t9"]]).endswith(f"tasks {names[1:9]} are in no device's order")


def test_a_device_without_an_order_runs_nothing() -> None:
    inst = SchedulingInstance.uniform("pad", [2, 3], [(0, 1, 0)], 3, task_names=["a", "b"])
    tl = simulate(inst, [[0, 1]])
    assert _times(tl) == {"a": (0, 0, 2), "b": (0, 2, 5)} and tl.makespan_tick == 5
    assert [p.task for p in tl.device_order(2)] == []


# Contention is per directed device pair.  a (1) on d0 feeds b (1) and c (1) on d1 (5 ticks each): with contention
# the two transfers on d0 -> d1 serialize: b [6,7), c [11,12).  d (1) on d1 feeds e (1) on d0 at the same time:
# the reverse direction does not wait: e starts at 1 + 5 = 6.  f (1) on d2 fed by a over d0 -> d2: 6 as well.
def test_contention_only_on_one_directed_link() -> None:
    inst = instance("dir", [[1, 1, 1]] * 6, [(0, 1, 5), (0, 2, 5), (3, 4, 5), (0, 5, 5)])
    tl = simulate(inst, [["t0", "t4"], ["t3", "t1", "t2"], ["t5"]], link_contention=True)
    at = _times(tl)
    assert at["t1"] == (1, 6, 7) and at["t2"] == (1, 11, 12)
    assert at["t4"] == (0, 6, 7) and at["t5"] == (2, 6, 7)
    free = _times(simulate(inst, [["t0", "t4"], ["t3", "t1", "t2"], ["t5"]]))
    assert free["t2"] == (1, 7, 8)


# A task waits for the later of its device and its inputs: b (d1) is ready at 4 but d1 is busy until 6.
def test_start_is_the_later_of_device_and_inputs() -> None:
    inst = instance("wait", [[2, 2], [1, 1], [6, 6]], [(0, 1, 2)])
    at = _times(simulate(inst, [["t0"], ["t2", "t1"]]))
    assert at == {"t0": (0, 0, 2), "t2": (1, 0, 6), "t1": (1, 6, 7)}


def test_deadlock_message_counts_the_tasks_that_never_run() -> None:
    # d0 runs t5 and finishes; d1 and d2 wait for each other (a finished device does not end the report)
    # t1 also needs t5, which ran at tick 0: only what never ran is named
    inst = instance("dl", [[1, 1, 1]] * 6, [(0, 1, 0), (2, 3, 0), (3, 4, 0), (5, 1, 0)])
    with pytest.raises(DeadlockError) as info:
        simulate(inst, [["t5"], ["t1", "t2"], ["t3", "t0", "t4"]])
    msg = str(info.value)
    assert "; 5 tasks never run; " in msg
    assert "d1 is stuck at t1, which waits for t0 (on d2); " in msg
    assert "d2 is stuck at t3, which waits for t2 (on d1)" in msg
    assert info.value.stuck_tasks == ("t1", "t3")


def _plan(rows, devices=("d0", "d1")) -> Plan:
    return Plan(instance_name="p", placements=tuple(TaskPlacement(*r) for r in rows), device_names=devices,
                makespan_tick=max(r[3] for r in rows), lower_bound_tick=0, status="feasible", method="hand")


# Per device the plan's tasks sorted by start, then end, then topological position: two zero-length tasks at
# tick 2 before a task [2,3); of the two, the one earlier in topological order first.
def test_plan_orders_break_ties_by_end_then_topological_position() -> None:
    inst = instance("ties", [[0, 0], [0, 0], [1, 1], [1, 1]], [(1, 0, 0)])
    plan = _plan([("t2", 0, 2, 3), ("t0", 0, 2, 2), ("t1", 0, 2, 2), ("t3", 1, 0, 1)])
    assert plan_orders(inst, plan) == ((1, 0, 2), (3,))
    with pytest.raises(SimulationError, match="device index 2, out of range"):
        plan_orders(inst, _plan([("t0", 2, 0, 0)]))
    with pytest.raises(SimulationError, match="uses 3 devices"):
        plan_orders(inst, _plan([("t0", 0, 0, 0)], devices=("d0", "d1", "d2")))


# Retiming: the bound is the new instance's trivial bound, unless the new makespan is below it (never: it is a
# bound) - here the plan runs a and b in parallel on two devices, makespan 3 = the bound.
def test_retime_bound_method_and_provenance() -> None:
    inst = SchedulingInstance.uniform("r", [3, 2], [], 2, task_names=["a", "b"])
    plan = dataclasses.replace(simulate(inst, [["a"], ["b"]]).to_plan(method="hand"), lower_bound_tick=0)
    out = retime_plan(plan, inst, hardware_path="hw.yaml")
    assert out.lower_bound_tick == 3 == out.makespan_tick
    assert out.method == "hand+retime" and out.hardware_path == "hw.yaml" and out.status == "heuristic"
    assert retime_plan(plan, inst, method="again").method == "again"
    serial = dataclasses.replace(simulate(inst, [["a", "b"]]).to_plan(method="hand"), lower_bound_tick=0)
    assert retime_plan(serial, inst).lower_bound_tick == 3 and retime_plan(serial, inst).makespan_tick == 5


# Defaults: no link contention unless asked.  GPipe, 2 stages x 2 micro-batches, unit tasks, 5-tick hops:
# 0F0 [0,1), 0F1 [1,2); the activations arrive at 6 and 7, so 1F1 starts at 7 (at 11 if the second transfer
# waited for the first).
def test_simulate_schedule_and_retime_default_to_no_contention() -> None:
    pipe = uniform_pipeline(2, 2, comm_tick=5)
    sched = gpipe(2, 2)
    inst = instance_for_schedule(pipe, sched)
    tl = simulate_schedule(inst, sched)
    assert tl.by_task()["1F1"].start_tick == 7
    assert {p.task: p.stage for p in tl.placements if p.task.endswith("F0")} == {"0F0": 0, "1F0": 1}
    assert simulate_schedule(inst, sched, link_contention=True).by_task()["1F1"].start_tick == 11
    plan = simulate_schedule(inst, sched, link_contention=True).to_plan(method="hand")
    assert {p.task: p.start_tick for p in retime_plan(plan, inst).placements}["1F1"] == 7


def test_a_deadlock_report_names_eight_devices() -> None:
    # nine devices in a ring: device i runs b_i first, which needs a_(i+1) that device i+1 runs second
    n = 9
    durations = [[1] * n for _ in range(2 * n)]  # a_i = task i, b_i = task n + i
    edges = [((i + 1) % n, n + i, 0) for i in range(n)]
    inst = instance("ring", durations, edges)
    with pytest.raises(DeadlockError) as info:
        simulate(inst, [[n + i, i] for i in range(n)])
    assert str(info.value).count(" is stuck at ") == 8 and len(info.value.stuck_tasks) == 9
    assert "; 18 tasks never run; " in str(info.value)
