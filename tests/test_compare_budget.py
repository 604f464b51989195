"""plan-compare keeps to its time limit: the solves get what the baselines, the memory bound and the pictures leave,
and a placement whose bound cannot beat a schedule already found is not solved."""

from __future__ import annotations

import pytest

import planner.compare.pipelines as pipelines
from planner.compare.compare_budget import CompareBudget, drawing_s
from planner.compare.pipelines import compare
from planner.pipeline.registry import UnitCosts


def test_a_placement_that_cannot_beat_the_incumbent_is_skipped():
    lines: list[str] = []
    cmp = compare(4, 8, UnitCosts(), schedules=("1f1b", "dualpipe"), opplan_placement="both", time_limit_s=10,
                  bound_time_s=0, progress=lines.append)
    opp = cmp.row("opplan")
    skipped = opp.notes["placements_skipped"]
    assert skipped, "DualPipe's placement reaches 25, the V placement's bound is 25.5"
    for placement, bound_units in skipped.items():  # type: ignore[union-attr]
        assert bound_units >= cmp.values(opp)["makespan"]
        assert opp.notes["tried"][placement][0] is None  # type: ignore[index]
        said = [x for x in lines if f"{placement} placement skipped" in x]
        assert len(said) == 1 and "cannot beat" in said[0]
    assert "not solved" in cmp.table(verbose=True) and "not solved" not in cmp.table(verbose=False)


def test_the_solves_share_the_time_limit_with_the_bound_and_the_pictures(monkeypatch):
    given: list[float] = []
    original = pipelines.plan_placement

    def recording(job, time_limit_s):
        given.append(time_limit_s)
        return original(job, time_limit_s)

    monkeypatch.setattr(pipelines, "plan_placement", recording)
    budget = CompareBudget(bound_share=0.25, picture_s=1.0, bar_s=0.0, min_solve_s=0.5)
    limit_s = 12.0
    cmp = compare(3, 6, UnitCosts(), schedules=("1f1b", "zb-h1"), opplan_placement="fixed", time_limit_s=limit_s,
                  bound_time_s=60, pictures=True, budget=budget)
    assert cmp.row("opplan").figures is not None
    # three baselines' worth of pictures (two baselines, the planned row) and the side-by-side: 4 s; the bound's
    # share: min(60, 0.25 x 12) = 3 s
    assert len(given) == 1 and given[0] <= limit_s - 4.0 - 3.0 + 1e-9
    assert drawing_s(budget, [10, 20]) == pytest.approx(2.0)


def test_drawing_says_how_far_it_is(tmp_path):
    cmp = compare(2, 4, UnitCosts(), schedules=("1f1b", "dualpipe"), opplan=False)
    lines: list[str] = []
    pipelines.write_outputs(cmp, tmp_path / "quiet", progress=lines.append)
    assert lines == []  # a few seconds of drawing need no account
    pipelines.write_outputs(cmp, tmp_path / "told", progress=lines.append, budget=CompareBudget(progress_after_s=0))
    assert lines == ["   drawing 1/3 pictures: 1f1b", "   drawing 2/3 pictures: dualpipe",
                     "   drawing 3/3 pictures: side by side"]
