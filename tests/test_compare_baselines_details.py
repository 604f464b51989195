"""The baselines of plan-compare (`planner.compare.baselines`) and the drawing budget (`compare_budget`): which
placements may be chosen, which baselines a planned row starts from (given rows kept, missing ones simulated,
skipped ones left out), a skipped row's reason, and the time pictures take."""

from __future__ import annotations

import pytest

from planner.compare.baselines import free_placements, reference_schedules, scales_of, simulate_baseline
from planner.compare.compare_budget import CompareBudget, drawing_s
from planner.compare.compare_row import CompareRow
from planner.pipeline.generators import gpipe
from planner.pipeline.registry import Scales, UnitCosts

UNIT = UnitCosts()


@pytest.mark.parametrize("p,m,placements", [(2, 4, ["dualpipe", "v"]), (4, 2, ["dualpipe", "v"]), (3, 4, ["v"]),
                                            (2, 3, ["v"]), (1, 1, ["v"]), (3, 3, ["v"])])
def test_dualpipe_needs_even_devices_and_micro_batches(p, m, placements):
    assert free_placements(p, m) == placements


def test_a_skipped_baseline_says_why():
    row = simulate_baseline("1f1b", 4, 3, UNIT, scales_of(UNIT))
    assert row.skipped.startswith("1F1B requires m >= p") and row.schedule is None and row.figures is None


def test_reference_schedules_simulate_the_missing_baselines_and_leave_out_the_skipped():
    sc = scales_of(UNIT)
    # fixed at p = 4, m = 3: 1F1B, ZB-H1 and ZB-H2 need more micro-batches; GPipe runs
    got = reference_schedules("fixed", 4, 3, UNIT, sc, {})
    assert [n for n, _ in got] == ["gpipe"] and got[0][1].name == "gpipe"
    assert [n for n, _ in reference_schedules("v", 2, 4, UNIT, sc, {})] == ["zb-v", "dualpipev"]


def test_reference_schedules_keep_the_rows_given():
    sc = scales_of(UNIT)
    mine = gpipe(2, 2)
    got = reference_schedules("fixed", 4, 3, UNIT, sc, {"gpipe": CompareRow("gpipe", schedule=mine)})
    assert got == [("gpipe", mine)]
    assert reference_schedules("fixed", 4, 3, UNIT, sc, {"gpipe": CompareRow("gpipe", skipped="no")}) == []
    assert reference_schedules("fixed", 4, 3, UNIT, sc, {"gpipe": CompareRow("gpipe")}) == []  # no schedule


def test_scales_of_unit_costs():
    assert scales_of(UnitCosts(f=0.5)) == Scales(4, 2)


def test_drawing_time_is_a_fixed_part_per_picture_plus_a_part_per_bar():
    budget = CompareBudget(picture_s=0.5, bar_s=0.25)
    assert drawing_s(budget, [4, 10]) == pytest.approx(0.5 + 1.0 + 0.5 + 2.5)
    assert drawing_s(budget, []) == 0
