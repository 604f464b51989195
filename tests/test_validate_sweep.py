"""The validator lists every violation (its docstring's promise), including every overlap on a device, not just
the first one a sweep meets (a sweep that stops listing later overlaps must fail here)."""

from __future__ import annotations

from planner.cost.instance import SchedulingInstance
from planner.schedule.plan import Plan, TaskPlacement
from planner.schedule.validate import check_plan


def _plan(inst: SchedulingInstance, rows: list[tuple[str, int, int, int]]) -> Plan:
    end = max(r[3] for r in rows)
    return Plan(instance_name=inst.name, placements=tuple(TaskPlacement(*r) for r in rows),
                device_names=tuple(inst.device_names), makespan_tick=end,
                lower_bound_tick=inst.trivial_lower_bound_tick(), status="feasible", method="hand")


def _overlaps(inst, rows):
    violations, _ = check_plan(inst, _plan(inst, rows))
    return sorted(tuple(sorted(v.tasks)) + (v.device,) for v in violations if v.kind == "overlap")


def test_a_long_task_overlapping_two_later_ones_gives_two_violations() -> None:
    # d0: a [0,10) covers b [2,4) and c [5,7); b and c do not overlap each other.  Two overlaps: (a,b), (a,c).
    inst = SchedulingInstance.uniform("long", [10, 2, 2], [], 2, task_names=["a", "b", "c"])
    assert _overlaps(inst, [("a", 0, 0, 10), ("b", 0, 2, 4), ("c", 0, 5, 7)]) == [("a", "b", 0), ("a", "c", 0)]


def test_a_chain_of_overlaps_lists_each_link() -> None:
    # d1: a [0,3), b [2,5), c [4,7), d [6,8): three consecutive overlaps; d0 (e [0,2), f [2,4)) is clean.
    inst = SchedulingInstance.uniform("chain", [3, 3, 3, 2, 2, 2], [], 2, task_names=list("abcdef"))
    rows = [("a", 1, 0, 3), ("b", 1, 2, 5), ("c", 1, 4, 7), ("d", 1, 6, 8), ("e", 0, 0, 2), ("f", 0, 2, 4)]
    assert _overlaps(inst, rows) == [("a", "b", 1), ("b", "c", 1), ("c", "d", 1)]


def test_overlaps_on_several_devices_are_all_listed() -> None:
    inst = SchedulingInstance.uniform("two", [2, 2, 2, 2], [], 2, task_names=list("abcd"))
    rows = [("a", 0, 0, 2), ("b", 0, 1, 3), ("c", 1, 0, 2), ("d", 1, 0, 2)]
    assert _overlaps(inst, rows) == [("a", "b", 0), ("c", "d", 1)]


def test_touching_intervals_and_zero_length_tasks_do_not_overlap() -> None:
    inst = SchedulingInstance.uniform("touch", [2, 2, 0], [], 1, task_names=list("abz"))
    assert _overlaps(inst, [("a", 0, 0, 2), ("b", 0, 2, 4), ("z", 0, 1, 1)]) == []
