"""The memory-bound note of plan-compare (`planner.compare.memory_bound_note`) on its edges: the half-bubble
makespan by hand, the rows it leaves alone, a pipeline the bound does not hold for, and units of two ticks."""

from __future__ import annotations

import dataclasses

import pytest

from formulations.pipeline import solve_pipeline
from planner.compare.compare_row import CompareRow
from planner.compare.memory_bound_note import half_bubble_tick, half_bubble_tick_of_work, note_memory_bound
from planner.pipeline.metrics import figures
from planner.pipeline.registry import Scales
from planner.pipeline.unroll import StageCost, TrainingPipeline
from planner.schedule.plan import PlanStatus


@pytest.mark.parametrize("work,bubble,p,tick", [
    (24, 20, 2, 17),   # 2 (2M - 24) <= 20  <=>  M <= 17
    (24, 21, 2, 17),   # 2 (2M - 24) <= 21  <=>  M <= 17.25: the largest whole M is 17
    (24, 23, 2, 17),   # M <= 17.75
    (24, 24, 2, 18),
    (30, 0, 3, 10),    # no bubble to halve: the makespan of no idle at all
    (7, 0, 2, 3),      # 2M - 7 <= 0: M <= 3.5
])
def test_half_bubble_makespan_by_hand(work, bubble, p, tick):
    assert half_bubble_tick_of_work(work, bubble, p) == tick


@pytest.fixture(scope="module")
def solved():
    # two stages, F = B = W = 1, 4 micro-batches, a cap of one activation: 20 is optimal (tests/test_memory_bound_
    # note.py), the device bound 13
    c = StageCost(1, 1, 1, activation_bytes=10)
    pipe = TrainingPipeline((c, c), 4, 2, (0, 1), ((0, 1),))
    out = solve_pipeline(pipe, 10, fifo=False, time_limit_s=30)
    return pipe, out.timeline, figures(pipe, out.timeline)


def test_half_bubble_of_a_row_reads_its_work(solved):
    _pipe, _tl, fig = solved
    assert fig.makespan_tick == 20 and fig.bubble_tick == 16  # work = 2 x 20 - 16 = 24
    assert half_bubble_tick(fig, dataclasses.replace(fig, bubble_tick=21), 2) == 17
    assert half_bubble_tick(fig, dataclasses.replace(fig, bubble_tick=4), 2) == 13


def _row(solved, **notes):
    pipe, tl, fig = solved
    base = {"status": PlanStatus.FEASIBLE, "bound_tick": 13, "bound_units": 6.5, "gap": 0.35}
    return CompareRow("opplan", pipe, None, tl, fig, notes={**base, **notes})


def test_rows_it_leaves_alone(solved):
    fig = solved[2]
    dp = dataclasses.replace(fig, bubble_tick=20)
    for row, cap, time_s in ((_row(solved, status=PlanStatus.OPTIMAL), 10, 30), (_row(solved), None, 30),
                             (_row(solved), 10, 0), (CompareRow("opplan", notes={"bound_tick": 1}), 10, 30)):
        before = dict(row.notes)
        note_memory_bound(row, dp, cap, Scales(2, 1), time_s=time_s)
        assert row.notes == before


def test_units_of_two_ticks_and_a_bound_that_proves_the_row_optimal(solved):
    fig = solved[2]
    row = _row(solved)
    note_memory_bound(row, dataclasses.replace(fig, bubble_tick=20), 10, Scales(2, 1), time_s=30)
    note = row.notes["memory_bound"]
    assert isinstance(note, dict)
    assert note["bound_tick"] == 20 and note["bound_units"] == 10.0 and note["half_bubble_units"] == 8.5
    assert row.notes["bound_tick"] == 20 and row.notes["bound_units"] == 10.0 and row.notes["gap"] == 0
    assert row.notes["status"] is PlanStatus.OPTIMAL


def test_without_dualpipe_there_is_no_half_bubble_question(solved):
    row = _row(solved)
    note_memory_bound(row, None, 10, Scales(1, 1), time_s=30)
    note = row.notes["memory_bound"]
    assert isinstance(note, dict)
    assert note["half_bubble_units"] is None and note["half_bubble_unreachable"] is False
    assert note["half_bubble_reached"] is False and note["half_bubble_answers"] == ""
    assert note["bound_tick"] == 20 and row.notes["bound_tick"] == 20


def test_a_bound_no_higher_than_the_row_s_leaves_bound_gap_and_status(solved):
    row = _row(solved, bound_tick=20, bound_units=20, gap=0.0)
    note_memory_bound(row, None, 10, Scales(1, 1), time_s=30)
    assert row.notes["bound_tick"] == 20 and row.notes["status"] is PlanStatus.FEASIBLE


def test_a_pipeline_whose_pairs_gain_gets_the_reason_in_the_note():
    c = StageCost(1, 1, 1, activation_bytes=10)
    pipe = TrainingPipeline((c, c), 2, 1, (0, 0), ((0, 1),), fb_overlap=0.5)
    out = solve_pipeline(pipe, 100, fifo=False, time_limit_s=30)
    fig = figures(pipe, out.timeline)
    row = CompareRow("opplan", pipe, None, out.timeline, fig,
                     notes={"status": PlanStatus.FEASIBLE, "bound_tick": 1, "bound_units": 1, "gap": 0.5})
    note_memory_bound(row, None, 100, Scales(1, 1), time_s=30)
    note = row.notes["memory_bound"]
    assert isinstance(note, dict) and set(note) == {"skipped"}
    assert "overlapped pairs gain" in str(note["skipped"]) and "\n" not in str(note["skipped"])
    assert row.notes["bound_tick"] == 1


def test_a_bound_equal_to_the_half_bubble_makespan_does_not_rule_it_out(solved):
    # DualPipe's bubble taken as 32: half of it needs 2 (2M - 24) <= 32, M <= 20, the row's own makespan and its
    # memory bound: the row reaches half the bubble, and a bound of 20 rules out nothing at 20
    fig = solved[2]
    row = _row(solved)
    note_memory_bound(row, dataclasses.replace(fig, bubble_tick=32), 10, Scales(1, 1), time_s=30)
    note = row.notes["memory_bound"]
    assert isinstance(note, dict)
    assert note["half_bubble_units"] == 20 and note["bound_tick"] == 20
    assert note["half_bubble_reached"] is True and note["half_bubble_unreachable"] is False


def test_one_second_is_time_enough_to_search(solved):
    row = _row(solved)
    note_memory_bound(row, None, 10, Scales(1, 1), time_s=1)
    note = row.notes["memory_bound"]
    assert isinstance(note, dict) and "bound_tick" in note
