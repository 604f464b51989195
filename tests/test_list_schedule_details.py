"""List scheduling's insertion policy on hand-built instances (issue 17: gap search and gap bookkeeping survived
`make mutate`).  Tasks are pinned to devices with ineligible durations and ordered by explicit priorities, so each
placement below follows from the module docstring's rules alone."""

from __future__ import annotations

from family_fixtures import instance

from planner.heuristics.list_schedule import list_schedule

N = None  # ineligible


def _at(plan) -> dict[str, tuple[int, int, int]]:
    return {p.task: (p.device, p.start_tick, p.end_tick) for p in plan.placements}


# t0 (4) on d1 feeds t1 (2) on d0 over a 1-tick edge: t1 starts at 5 and leaves the gap [0,5) on d0.  t2 (5, d0,
# no inputs, placed last) fits the gap exactly: [0,5), makespan 7.  Without insertion, with a scan of no gaps, or
# if "fits" were strict, t2 goes after t1: [7,12).
def _exact_gap():
    return instance("gap", [[N, 4], [2, N], [5, N]], [(0, 1, 1)])


def test_a_task_fills_a_gap_it_fits_exactly() -> None:
    plan = list_schedule(_exact_gap(), [3, 2, 1])
    assert _at(plan) == {"t0": (1, 0, 4), "t1": (0, 5, 7), "t2": (0, 0, 5)}
    assert plan.makespan_tick == 7


def test_without_insertion_or_gap_scan_the_task_is_appended() -> None:
    for kw in ({"insertion": False}, {"max_gap_scan": 0}):
        assert _at(list_schedule(_exact_gap(), [3, 2, 1], **kw))["t2"] == (0, 7, 12), kw


# A task longer than the gap does not go in it: t2 lasts 6 > 5.
def test_a_task_longer_than_the_gap_is_appended() -> None:
    inst = instance("long", [[N, 4], [2, N], [6, N]], [(0, 1, 1)])
    assert _at(list_schedule(inst, [3, 2, 1]))["t2"] == (0, 7, 13)


# Three devices.  t0 (9, d1) -> t1 (2, d0) over 1 tick: t1 [10,12), gap [0,10) on d0.  t2 (3, d2) -> t3 (3, d0)
# over 1 tick: t3 is ready at 4 and splits the gap into [0,4) and [7,10) (both >= 2, the shortest task on d0).
# t4 (3, d0) takes [0,3) (the leftover [3,4) is shorter than 2 and dropped); t5 (3, d0) takes [7,10); t6 (2, d0)
# finds no gap left and goes after t1: [12,14).
def test_gap_pieces_left_over_are_kept_when_useful() -> None:
    inst = instance("pieces", [[N, 9, N], [2, N, N], [N, N, 3], [3, N, N], [3, N, N], [3, N, N], [2, N, N]],
                    [(0, 1, 1), (2, 3, 1)])
    plan = list_schedule(inst, [7, 6, 5, 4, 3, 2, 1])
    at = _at(plan)
    assert at["t1"] == (0, 10, 12) and at["t3"] == (0, 4, 7)
    assert (at["t4"], at["t5"], at["t6"]) == ((0, 0, 3), (0, 7, 10), (0, 12, 14))


# A gap that ends before the task is ready is skipped (the search starts at the first gap ending after the ready
# time): t0 (9, d1) -> t1 (2, d0) over 1: gap [0,10).  t2 (1, d2) -> t3 (2, d0) over 9: ready 10, so t3 cannot
# use [0,10) and follows t1: [12,14).  t4 (2, d0, no inputs) still fills the gap at [0,2).
def test_a_gap_before_the_ready_time_is_skipped() -> None:
    inst = instance("late", [[N, 9, N], [2, N, N], [N, N, 1], [2, N, N], [2, N, N]], [(0, 1, 1), (2, 3, 9)])
    at = _at(list_schedule(inst, [5, 4, 3, 2, 1]))
    assert at["t3"] == (0, 12, 14) and at["t4"] == (0, 0, 2)


# In a gap, a task starts at its ready time when that is later than the gap's start: gap [0,10) on d0, t3 ready
# at 4 (t2 (3, d2) over 1) lasting 2: [4,6), not [0,2).
def test_a_task_in_a_gap_waits_for_its_inputs() -> None:
    inst = instance("wait", [[N, 9, N], [2, N, N], [N, N, 3], [2, N, N]], [(0, 1, 1), (2, 3, 1)])
    assert _at(list_schedule(inst, [4, 3, 2, 1]))["t3"] == (0, 4, 6)
