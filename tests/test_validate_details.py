"""The validator's details that a careless one-line edit would break and nothing else would notice (`make mutate`'s
mutants of them die here): every violation listed after the first of its loop, the caps on what the message lists, the
boundaries of each rule, and the window of the text grid drawn around the first violation."""

from __future__ import annotations

import dataclasses
import re

import pytest
from family_fixtures import instance

from planner.cost.instance import SchedulingInstance
from planner.schedule.plan import Plan, TaskPlacement
from planner.schedule.validate import PlanInvalidError, check_plan, validate_plan


def _plan(inst: SchedulingInstance, rows, *, lower_bound: int = 0, makespan: int | None = None) -> Plan:
    t0 = min((r[2] for r in rows), default=0)
    t1 = max((r[3] for r in rows), default=0)
    return Plan(instance_name=inst.name, placements=tuple(TaskPlacement(*r) for r in rows),
                device_names=tuple(inst.device_names), makespan_tick=t1 - t0 if makespan is None else makespan,
                lower_bound_tick=lower_bound, status="feasible", method="hand")


def _kinds(inst, plan) -> list[tuple[str, tuple[str, ...]]]:
    return [(v.kind, v.tasks) for v in check_plan(inst, plan)[0]]


def _message(inst, plan, **kw) -> str:
    with pytest.raises(PlanInvalidError) as info:
        validate_plan(inst, plan, **kw)
    return str(info.value)


def _window(message: str) -> tuple[int, int]:
    m = re.search(r"ticks (-?\d+)\.\.(-?\d+),", message)
    assert m, message
    return int(m.group(1)), int(m.group(2))


# ------------------------------------------------------------------------------------------------ every violation
def test_a_precedence_violation_does_not_hide_later_edges() -> None:
    # a -> b and c -> d, each 2 ticks, on one device: b starts before a ends (precedence), d before c ends too.
    inst = SchedulingInstance.uniform("two", [2, 2, 2, 2], [(0, 1, 0), (2, 3, 0)], 1, task_names=list("abcd"))
    plan = _plan(inst, [("a", 0, 0, 2), ("b", 0, 1, 3), ("c", 0, 10, 12), ("d", 0, 11, 13)])
    found = [k for k in _kinds(inst, plan) if k[0] == "precedence"]
    assert found == [("precedence", ("a", "b")), ("precedence", ("c", "d"))]


def test_every_placement_is_checked_after_a_bad_one() -> None:
    # Two of each per-placement violation, in plan order: a bad placement never stops the loop over the others.
    inst = instance("rows", [[2, 2], [2, 2], [2, 2], [2, None], [2, None], [2, 2]])
    plan = _plan(inst, [("x", 2, 0, 1), ("y", 0, 0, 1), ("t0", 0, 0, 2), ("t0", 1, 0, 2), ("t0", 1, 4, 6),
                        ("t1", 2, 0, 2), ("t1", 0, 2, 4), ("t2", 3, 0, 2), ("t3", 1, 0, 2), ("t4", 1, 2, 4),
                        ("t5", 0, -3, -1)], makespan=7)
    violations = check_plan(inst, plan)[0]
    assert [(v.kind, v.tasks) for v in violations] == [
        ("unknown", ("x",)), ("unknown", ("y",)), ("duplicate", ("t0",)), ("duplicate", ("t0",)),
        ("device", ("t1",)), ("device", ("t2",)), ("ineligible", ("t3",)), ("ineligible", ("t4",)),
        ("negative", ("t5",))]
    assert "on #2 is not in instance" in violations[0].message and "on d0 is not" in violations[1].message


def test_an_unplaced_end_does_not_hide_later_edges() -> None:
    # a -> b with b missing; c -> d violated: the missing task's edge is skipped, c -> d is still checked.
    inst = SchedulingInstance.uniform("skip", [2, 2, 2, 2], [(0, 1, 0), (2, 3, 0)], 1, task_names=list("abcd"))
    plan = _plan(inst, [("a", 0, 0, 2), ("c", 0, 2, 4), ("d", 0, 3, 5)])
    assert ("precedence", ("c", "d")) in _kinds(inst, plan)


def test_the_last_device_index_is_in_range_and_the_next_is_not() -> None:
    inst = SchedulingInstance.uniform("dev", [1, 1], [], 2, task_names=["a", "b"])
    assert check_plan(inst, _plan(inst, [("a", 1, 0, 1), ("b", 0, 0, 1)]))[0] == []
    assert _kinds(inst, _plan(inst, [("a", 2, 0, 1), ("b", 0, 0, 1)])) == [("device", ("a",))]


# ------------------------------------------------------------------------------------------------ caps
def test_fifty_missing_tasks_are_named_then_counted() -> None:
    names = [f"t{i}" for i in range(52)]
    inst = SchedulingInstance.uniform("many", [1] * 52, [], 1, task_names=names)
    one_placed = _plan(inst, [("t0", 0, 0, 1)])
    missing = [v for v in check_plan(inst, one_placed)[0] if v.kind == "missing"]
    assert [v.tasks for v in missing[:50]] == [(n,) for n in names[1:51]]
    assert len(missing) == 51 and missing[50].tasks == () and "... and 1 more tasks" in missing[50].message
    two_placed = _plan(inst, [("t0", 0, 0, 1), ("t1", 0, 1, 2)])
    missing = [v for v in check_plan(inst, two_placed)[0] if v.kind == "missing"]
    assert len(missing) == 50 and all(v.tasks for v in missing)


def test_the_message_lists_twenty_violations_by_default() -> None:
    # t0 placed, every other task missing: 20 missing tasks are 20 violations, 21 are 21.
    for n, more in ((21, False), (22, True)):
        inst = SchedulingInstance.uniform("cap", [1] * n, [], 1, task_names=[f"t{i}" for i in range(n)])
        text = _message(inst, _plan(inst, [("t0", 0, 0, 1)]))
        assert sum(1 for line in text.splitlines() if line.startswith("  [missing]")) == 20
        assert ("... and 1 more" in text) == more and ("... and" in text) == more


def test_memory_violation_names_the_five_largest_holders() -> None:
    # seven tasks holding 10..16 parameter bytes on one device of 50 bytes: over capacity from tick 0.
    inst = SchedulingInstance.uniform("mem", [1] * 7, [], 1, task_names=[f"t{i}" for i in range(7)],
                                      param_bytes=[10, 11, 12, 13, 14, 15, 16], capacity_bytes=50)
    plan = _plan(inst, [(f"t{i}", 0, i, i + 1) for i in range(7)])
    (v,) = [v for v in check_plan(inst, plan)[0] if v.kind == "memory"]
    assert v.tasks == ("t6", "t5", "t4", "t3", "t2")
    assert v.tick == 0 and "91 B" in v.message
    assert v.message.split("largest: ")[1].split(", ") == [f"t{i} param {10 + i} B" for i in (6, 5, 4, 3, 2)]


def test_memory_is_checked_by_default() -> None:
    inst = SchedulingInstance.uniform("mem1", [1], [], 1, task_names=["a"], param_bytes=[2], capacity_bytes=1)
    plan = _plan(inst, [("a", 0, 0, 1)])
    assert [v.kind for v in check_plan(inst, plan)[0]] == ["memory"]
    assert check_plan(inst, plan, check_memory=False) == ([], None)


# ------------------------------------------------------------------------------------------------ boundaries
def test_a_plan_that_starts_late_has_the_span_as_makespan() -> None:
    inst = SchedulingInstance.uniform("late", [2, 3], [(0, 1, 0)], 1, task_names=["a", "b"])
    plan = _plan(inst, [("a", 0, 5, 7), ("b", 0, 7, 10)])
    assert plan.makespan_tick == 5 and check_plan(inst, plan)[0] == []
    assert _kinds(inst, dataclasses.replace(plan, makespan_tick=10)) == [("makespan", ())]


def test_a_lower_bound_equal_to_the_makespan_is_fine() -> None:
    inst = SchedulingInstance.uniform("lb", [2, 3], [(0, 1, 0)], 1, task_names=["a", "b"])
    assert check_plan(inst, _plan(inst, [("a", 0, 0, 2), ("b", 0, 2, 5)], lower_bound=5))[0] == []
    assert _kinds(inst, _plan(inst, [("a", 0, 0, 2), ("b", 0, 2, 5)], lower_bound=6)) == [("bound", ())]


# ------------------------------------------------------------------------------------------------ the grid window
# The grid around the first violation spans [max(0, lo - pad), hi + pad) where lo / hi are the earliest start /
# latest end of the tasks involved and the violation's tick (tick + 1 at the right), pad = max(2, (hi - lo) // 2).
def test_grid_window_of_a_wide_overlap() -> None:
    # a [10,20) and b [14,24) on p0: tick 14, lo 10, hi 24, pad 7: ticks 3..31
    inst = SchedulingInstance.uniform("wide", [10, 10], [], 1, task_names=["a", "b"])
    assert _window(_message(inst, _plan(inst, [("a", 0, 10, 20), ("b", 0, 14, 24)]))) == (3, 31)


def test_grid_window_of_a_narrow_overlap_near_zero() -> None:
    # a [1,3) and b [2,4): lo 1, hi 4, pad max(2, 1) = 2: ticks 0..6 (the left edge clipped at 0)
    inst = SchedulingInstance.uniform("narrow", [2, 2], [], 1, task_names=["a", "b"])
    assert _window(_message(inst, _plan(inst, [("a", 0, 1, 3), ("b", 0, 2, 4)]))) == (0, 6)
    # a [10,12) and b [11,13): lo 10, hi 13, pad 2: ticks 8..15
    assert _window(_message(inst, _plan(inst, [("a", 0, 10, 12), ("b", 0, 11, 13)]))) == (8, 15)


def test_grid_window_includes_the_tick_after_a_zero_length_violation() -> None:
    # a placed [5,5) but lasts 2: the duration violation at tick 5; lo 5, hi 5 + 1 = 6, pad 2: ticks 3..8
    inst = SchedulingInstance.uniform("zero", [2], [], 1, task_names=["a"])
    assert _window(_message(inst, _plan(inst, [("a", 0, 5, 5)]))) == (3, 8)


def test_grid_window_of_a_memory_violation_starts_at_the_excess_tick() -> None:
    # b (parameters 5 > 4 bytes) runs [6,7) but its parameters are held from the step's start 0, where the
    # violation is: lo 0 (the tick, before b's start), hi 7, pad 3: ticks 0..10
    inst = SchedulingInstance.uniform("early", [6, 1], [(0, 1, 0)], 1, task_names=["a", "b"], param_bytes=[0, 5],
                                      capacity_bytes=4)
    assert _window(_message(inst, _plan(inst, [("a", 0, 0, 6), ("b", 0, 6, 7)]))) == (0, 10)


def test_grid_of_a_wide_machine_shows_the_devices_involved() -> None:
    # 17 devices: the grid shows only the sender's and the receiver's rows of the first violation (comm from p3
    # to p16), not the first sixteen.
    inst = SchedulingInstance.uniform("wide17", [2, 2], [(0, 1, 5)], 17, task_names=["a", "b"])
    text = _message(inst, _plan(inst, [("a", 3, 0, 2), ("b", 16, 3, 5)]))
    rows = [line.split("|")[0].strip() for line in text.splitlines() if line.rstrip().endswith("|")]
    assert rows == ["p3", "p16"]
    inst16 = SchedulingInstance.uniform("wide16", [2, 2], [(0, 1, 5)], 16, task_names=["a", "b"])
    text = _message(inst16, _plan(inst16, [("a", 3, 0, 2), ("b", 15, 3, 5)]))
    rows = [line.split("|")[0].strip() for line in text.splitlines() if line.rstrip().endswith("|")]
    assert rows == [f"p{d}" for d in range(16)]


def test_no_makespan_verdict_while_a_task_is_missing() -> None:
    # the span of a partial plan says nothing about its makespan: only the missing task is reported
    inst = SchedulingInstance.uniform("part", [2, 3], [], 1, task_names=["a", "b"])
    assert _kinds(inst, _plan(inst, [("a", 0, 0, 2)], makespan=5, lower_bound=9)) == [("missing", ("b",))]


def test_the_sweep_keeps_the_earlier_of_two_tasks_that_end_together() -> None:
    # a [0,4) and b [2,4) end together; c [3,5) is reported against a, the task the sweep holds (it only moves
    # on to a task that ends strictly later)
    inst = SchedulingInstance.uniform("tie", [4, 2, 2], [], 1, task_names=["a", "b", "c"])
    found = [v.tasks for v in check_plan(inst, _plan(inst, [("a", 0, 0, 4), ("b", 0, 2, 4), ("c", 0, 3, 5)]))[0]]
    assert found == [("a", "b"), ("a", "c")]


def test_grid_of_a_wide_machine_shows_the_device_of_a_memory_violation() -> None:
    # 17 devices; t0 (10 bytes of output) on d3 feeds t1 on d16 over 5 ticks; d16 holds 5 bytes, so the received
    # copy [7,9) breaks it.  The violation names t0 (placed on d3) on device d16: both rows are drawn.
    caps = [2**40] * 16 + [5]
    inst = instance("recv", [[2] * 17, [2] * 17], [(0, 1, 5)], acts=[10, 0], capacity=caps)
    text = _message(inst, _plan(inst, [("t0", 3, 0, 2), ("t1", 16, 7, 9)]))
    assert "[memory] device d16 holds 10 B at tick 7" in text
    rows = [line.split("|")[0].strip() for line in text.splitlines() if line.rstrip().endswith("|")]
    assert rows == ["d3", "d16"]


def test_a_comm_violation_names_the_link_when_it_has_a_name() -> None:
    base = instance("link", [[2, 2], [2, 2]], [(0, 1, 5)])
    plan = _plan(base, [("t0", 0, 0, 2), ("t1", 1, 3, 5)])
    named = dataclasses.replace(base, link_names=("local", "nvlink"))
    (v,) = check_plan(named, plan)[0]
    assert v.kind == "comm" and v.message.endswith("over link class 1 'nvlink': earliest start 7")
    short = dataclasses.replace(base, link_names=("local",))
    (v,) = check_plan(short, plan)[0]
    assert v.message.endswith("over link class 1: earliest start 7")
