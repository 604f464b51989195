"""List scheduling's insertion policy on hand-built instances (so that `make mutate`'s mutants of the gap search
and the gap bookkeeping die).  Tasks are pinned to devices with ineligible durations and ordered by explicit
priorities, so each placement below follows from the module docstring's rules alone."""

from __future__ import annotations

import time

import pytest
from family_fixtures import instance

from planner.cost.instance import SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics.list_schedule import list_schedule, mean_comm

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


# With memory in play (t0's 8 bytes of parameters and t1's 1 do not fit at once on d1 or d2, so the tracker
# runs), the earliest finish still wins among the devices that fit: t1 finishes at 6 on d0 (after t0), 5 on d1,
# 1 on d2, and fits on each: d2.
def test_memory_aware_choice_takes_the_earliest_finish_that_fits() -> None:
    inst = instance("mem", [[1, N, N], [5, 5, 1]], params=[8, 1], capacity=[9, 8, 8])
    assert _at(list_schedule(inst, [2, 1]))["t1"] == (2, 0, 1)
    assert _at(list_schedule(inst, [2, 1], respect_memory=False))["t1"] == (2, 0, 1)


# Priorities against the precedence order (t1 above its predecessor t0) use the ready heap: among the ready tasks
# the highest priority goes first.  One device, no insertion: t2 (5), t3 (3), t0 (1), then t1.
def test_ready_tasks_go_highest_priority_first() -> None:
    inst = instance("heap", [[1], [1], [1], [1]], [(0, 1, 0)])
    at = _at(list_schedule(inst, [1, 9, 5, 3], insertion=False))
    assert [t for t, _ in sorted(at.items(), key=lambda kv: kv[1][1])] == ["t2", "t3", "t0", "t1"]


# Memory is respected by default: t0 and t1 (5 bytes of parameters each) do not fit together on a 5-byte device,
# so t1 goes to the slower d1 (finish 3) instead of after t0 on d0 (finish 2).
def test_memory_is_respected_by_default() -> None:
    inst = instance("room", [[1, 3], [1, 3]], params=[5, 5], capacity=[5, 5])
    assert _at(list_schedule(inst, [2, 1]))["t1"] == (1, 0, 3)
    assert _at(list_schedule(inst, [2, 1], respect_memory=False))["t1"] == (0, 1, 2)


# A long transfer under the memory tracker: t0 (1, d0) -> t1 (1, d1) over 10 ticks, so t1 runs [11,12); its
# 4-byte output is freed at 12.  t2 (1, d1, 4-byte output), placed after it without insertion at [12,13), fits
# d1's 5 bytes only because the tracker knows t1's output is gone by 12: its horizon must cover the delays.
def test_memory_tracking_covers_long_transfers() -> None:
    inst = instance("far", [[1, N], [N, 1], [N, 1]], [(0, 1, 10)], acts=[0, 4, 4], capacity=[8, 5])
    plan = list_schedule(inst, [3, 2, 1], insertion=False)
    assert _at(plan)["t1"] == (1, 11, 12) and _at(plan)["t2"] == (1, 12, 13)


# Two devices are enough for communication to count in HEFT's mean delay: the only ordered pairs of distinct
# devices are (d0, d1) and (d1, d0), both of class 1: the mean is the edge's delay, 6.  One device: 0.
def test_mean_comm_of_two_devices() -> None:
    assert mean_comm(instance("two", [[1, 1], [1, 1]], [(0, 1, 6)])).tolist() == [6.0]
    assert mean_comm(instance("one", [[1], [1]], [(0, 1, 6)])).tolist() == [0.0]


def test_solve_time_is_the_time_spent_inside() -> None:
    inst = _exact_gap()
    before = time.perf_counter()
    plan = list_schedule(inst, [3, 2, 1])
    spent = time.perf_counter() - before
    assert 0 <= plan.solve_time_s <= spent


# A leftover piece exactly as long as the shortest task on the device is kept: gap [0,10) on d0 (t1 waits for
# t0), t3 (4, ready at 4) leaves [0,4) and [8,10); t4 (2 = the shortest on d0, ready at 8) fills [8,10).
def test_a_leftover_as_long_as_the_shortest_task_is_kept() -> None:
    inst = instance("exact", [[N, 9, N], [2, N, N], [N, N, 3], [4, N, N], [2, N, N]],
                    [(0, 1, 1), (2, 3, 1), (2, 4, 5)])
    at = _at(list_schedule(inst, [5, 4, 3, 2, 1]))
    assert at["t1"] == (0, 10, 12) and at["t3"] == (0, 4, 8) and at["t4"] == (0, 8, 10)


# A gap slot that fails the memory check is retried after the device's last task: t1 (d0, waits for t0 on d1)
# runs [10,12) with 3 bytes of working memory; t2 (d0, 3-byte output) would fit the gap [0,10) in time, but
# there the tracker still counts t1's 3 bytes (3 + 3 > 5); after t1, at 12, they are freed: [12,14).
def test_a_gap_that_fails_memory_falls_back_to_the_tail() -> None:
    inst = instance("tail", [[N, 9], [2, N], [2, N]], [(0, 1, 1)], internal=[0, 3, 0], acts=[0, 0, 3],
                    capacity=[5, 100])
    assert _at(list_schedule(inst, [3, 2, 1]))["t2"] == (0, 12, 14)


# When no device fits, the message names the closest miss (free - need largest): t0 (4-byte output) on d1;
# t1 (10 bytes of parameters) needs 10 + a 4-byte copy on d0, which has 12 free (miss 2), and 10 on d1, which has
# 13 - 4 = 9 free (miss 1): d1.  On a tie the first device tried (earliest finish) is named.
def test_no_fit_names_the_closest_miss() -> None:
    inst = instance("miss", [[N, 1], [1, 1]], [(0, 1, 0)], params=[0, 10], acts=[4, 0], capacity=[12, 13])
    with pytest.raises(InfeasibleError, match="the best device, d1, has 9 bytes free of 13 bytes"):
        list_schedule(inst, [2, 1])
    tie = instance("tie", [[1, 2]], params=[10], capacity=[8, 8])
    with pytest.raises(InfeasibleError, match="the best device, d0, has 8 bytes free"):
        list_schedule(tie, [1])


# The retried tail slot competes with the other devices by its own finish: as above, t2's gap slot on d0 fails
# memory and its tail slot would finish at 14; d1 (busy with t0 until 9, t2 lasts 4 there) finishes at 13: d1.
def test_the_retried_tail_slot_competes_by_its_finish() -> None:
    inst = instance("tail2", [[N, 9], [2, N], [2, 4]], [(0, 1, 1)], internal=[0, 3, 0], acts=[0, 0, 3],
                    capacity=[5, 100])
    assert _at(list_schedule(inst, [3, 2, 1]))["t2"] == (1, 9, 13)


# A new gap exactly as long as the shortest task on the device is recorded: t0 (1, d1) -> t1 (3, d0) over 1 tick:
# t1 starts at 2, leaving [0,2) on d0; t2 (2 = the shortest on d0) fills it.
def test_a_gap_as_long_as_the_shortest_task_is_recorded() -> None:
    inst = instance("short", [[N, 1], [3, N], [2, N]], [(0, 1, 1)])
    assert _at(list_schedule(inst, [3, 2, 1]))["t2"] == (0, 0, 2)


# HEFT's key is the finish, not the start: t1 starts at 0 on d0 but lasts 10; on d1 it waits for t0 until 2 and
# finishes at 3.
def test_the_earliest_finish_wins_over_the_earliest_start() -> None:
    inst = instance("eft", [[N, 2], [10, 1]])
    assert _at(list_schedule(inst, [2, 1]))["t1"] == (1, 2, 3)


# The memory check of a task with an input copy starts at the copy's arrival: t0 (d0, 4-byte output) feeds t1
# (d1) over 10 ticks, arriving at 11.  tX (d1 [0,5)) needed 3 bytes of working memory, freed at 5.  At 11 the copy
# (4) fits d1's 5 bytes; counted from before tX ended it would not (3 + 4 > 5).
def test_an_input_copy_is_counted_from_its_arrival() -> None:
    inst = instance("copy", [[1, N], [N, 5], [N, 1]], [(0, 2, 10)], acts=[4, 0, 0], internal=[0, 3, 0],
                    capacity=[100, 5])
    at = _at(list_schedule(inst, [3, 2, 1]))
    assert at["t1"] == (1, 0, 5) and at["t2"] == (1, 11, 12)


# A custom device policy sees each device's finish tick (the same choice as HEFT's here), and a policy that allows
# no device is reported with the devices the task could run on.
def test_a_custom_policy_gets_the_finish_and_may_refuse() -> None:
    inst = instance("eft", [[N, 2], [10, 1]])
    seen: list[tuple[int, int, int]] = []

    def by_finish(t: int, k: int, d: int, finish: int) -> int:
        seen.append((t, d, finish))
        return finish

    assert _at(list_schedule(inst, [2, 1], by_finish))["t1"] == (1, 2, 3)
    assert (1, 0, 10) in seen and (1, 1, 3) in seen
    with pytest.raises(InfeasibleError, match=r"task 't1' may run on no allowed device \(eligible: d0, d1\)"):
        list_schedule(inst, [2, 1], lambda t, k, d, finish: None if t == 1 else finish)


# Gaps too short for any task on the device are not kept, so they do not use up the gap scan.  d0: t0 [0,2); t1
# waits for t3 (d1 [0,2)) over 1 tick: starts at 3, the 1-tick hole [2,3) is too short (shortest task on d0: 2);
# t2 waits for t4 (d2 [0,8)): starts at 9, gap [5,9).  t5 (2, no inputs) with a scan of one gap fills [5,7).
def test_holes_shorter_than_any_task_do_not_count_against_the_scan() -> None:
    inst = instance("holes", [[2, N, N], [2, N, N], [2, N, N], [N, 2, N], [N, N, 8], [2, N, N]],
                    [(3, 1, 1), (4, 2, 1)])
    at = _at(list_schedule(inst, [6, 4, 2, 5, 3, 1], max_gap_scan=1))
    assert (at["t0"], at["t1"], at["t2"]) == ((0, 0, 2), (0, 3, 5), (0, 9, 11))
    assert at["t5"] == (0, 5, 7)


# The same for what is left of a gap.  d0: t0 [0,2); t1 waits for t4 (d2 [0,8)) over 1: [9,11), gap [2,9); t3 (3)
# waits for t6 (d1 [0,4)) over 1: [5,8), leaving [2,5) and a 1-tick remainder [8,9), dropped; t2 waits for t7
# (d1 [4,14)) over 1: [15,17), gap [11,15).  t5 (2) waits for t8 (d3 [0,5)) over 1: ready at 6, the first gap
# ending after 6 is [11,15) (a kept [8,9) would be the one gap scanned): [11,13).
def test_a_remainder_shorter_than_any_task_is_dropped() -> None:
    inst = instance("rem", [[2, N, N, N], [2, N, N, N], [2, N, N, N], [3, N, N, N], [N, N, 8, N], [2, N, N, N],
                            [N, 4, N, N], [N, 10, N, N], [N, N, N, 5]],
                    [(4, 1, 1), (6, 3, 1), (7, 2, 1), (8, 5, 1)])
    at = _at(list_schedule(inst, [9, 7, 5, 6, 8, 1, 8.5, 6.5, 2], max_gap_scan=1))
    assert (at["t1"], at["t3"], at["t2"], at["t8"]) == ((0, 9, 11), (0, 5, 8), (0, 15, 17), (3, 0, 5))
    assert at["t5"] == (0, 11, 13)


def test_no_fit_message_details_and_fix() -> None:
    # the closest miss above: t1 needs 10 bytes on d1, all of them parameters (no input copy there)
    inst = instance("miss", [[N, 1], [1, 1]], [(0, 1, 0)], params=[0, 10], acts=[4, 0], capacity=[12, 13])
    with pytest.raises(InfeasibleError, match=r"it needs 10 bytes \(params 10\); the best device, d1"):
        list_schedule(inst, [2, 1])
    # t0 alone needs more than any device it may run on (d1 is larger but t0 cannot run there): no plan exists
    alone = instance("alone", [[1, N]], params=[10], capacity=[5, 100])
    with pytest.raises(InfeasibleError) as info:
        list_schedule(alone, [1])
    assert info.value.fix.startswith("no plan exists with less than")
    # t1 alone fits d0 exactly (5 of 5) but not beside t0's 3 bytes: the conservative check may be the reason
    both = instance("both", [[1], [1]], params=[3, 5], capacity=[5])
    with pytest.raises(InfeasibleError) as info:
        list_schedule(both, [2, 1])
    assert info.value.fix.startswith("the check is conservative")


# A one-tick hole is a gap when the device runs one-tick tasks: t0 (1, d1) -> t1 (d0), no delay: t1 starts at 1,
# t2 (1, d0) fills [0,1).
def test_a_one_tick_gap_takes_a_one_tick_task() -> None:
    inst = instance("tick", [[N, 1], [1, N], [1, N]], [(0, 1, 0)])
    assert _at(list_schedule(inst, [3, 2, 1]))["t2"] == (0, 0, 1)


def test_an_empty_instance_has_makespan_zero() -> None:
    plan = list_schedule(SchedulingInstance.uniform("empty", [], [], 2), [])
    assert plan.placements == () and plan.makespan_tick == 0
