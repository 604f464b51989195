"""plan-compare's comparison as data (`planner.compare.pipelines.Comparison`) on unit costs at p = 2, m = 4 with
parameters of one unit: every figure in units, the CSV, the marks of the best rows and the table line by line;
solver ticks in progress lines, and the devices at the cap."""

from __future__ import annotations

import re

import pytest

from planner.compare.baselines import scales_of, simulate_baseline
from planner.compare.compare_budget import CompareBudget
from planner.compare.compare_row import CompareRow
from planner.compare.pipelines import Comparison, compare, devices_at_cap, ticks_in_units, write_outputs
from planner.pipeline.registry import Scales, UnitCosts

COSTS = UnitCosts(param=1)  # two ticks and two bytes per unit


@pytest.fixture(scope="module")
def rows():
    sc = scales_of(COSTS)
    return [*(simulate_baseline(n, 2, 4, COSTS, sc) for n in ("1f1b", "zb-h2", "zb-v", "dualpipe")),
            CompareRow("gpipe", skipped="not asked")]


def _opplan(like: CompareRow, **notes) -> CompareRow:
    base = {"status": "optimal", "bound_units": 12.0, "gap": 0.0, "placement": "dualpipe", "solve_time_s": 1.0}
    return CompareRow("opplan", like.pipeline, like.schedule, like.timeline, like.figures, notes={**base, **notes})


def test_figures_in_units_and_the_csv(rows):
    cmp = Comparison(2, 4, COSTS, scales_of(COSTS), rows)
    # 1F1B: 30 ticks, bubble 0.2, peak 6 bytes, parameters 2 bytes per device; DualPipe holds two copies
    assert cmp.values(cmp.row("1f1b")) == {"schedule": "1f1b", "makespan": 15.0, "bubble_ratio": 0.2,
                                           "peak_memory": 3.0, "param_memory": 1.0}
    assert cmp.values(cmp.row("zb-h2"))["bubble_ratio"] == 0.076923  # rounded to 6 places
    assert cmp.units() == ("unit", "unit")
    assert cmp.csv_text() == ("schedule,makespan,bubble_ratio,peak_memory,param_memory\n"
                              "1f1b,15.0,0.2,3.0,1.0\n"
                              "zb-h2,13.0,0.076923,4.0,1.0\n"
                              "zb-v,12.5,0.04,3.0,1.0\n"
                              "dualpipe,12.0,0.0,5.0,2.0\n")  # the skipped row is left out
    assert [r.name for r in cmp.ok_rows()] == ["1f1b", "zb-h2", "zb-v", "dualpipe"]


def test_marks_of_the_best_known_and_of_a_planned_row_at_least_as_short(rows):
    sc = scales_of(COSTS)
    dualpipe, zbv = rows[3], rows[2]
    assert Comparison(2, 4, COSTS, sc, rows).best_marks() == {"dualpipe": "best known"}
    assert Comparison(2, 4, COSTS, sc, [*rows, _opplan(dualpipe)]).best_marks() == {
        "dualpipe": "best known", "opplan": "best of all"}
    assert Comparison(2, 4, COSTS, sc, [*rows, _opplan(zbv)]).best_marks() == {"dualpipe": "best known"}
    zbv_row = rows[2]
    tie = [zbv_row, CompareRow("zb-v copy", zbv_row.pipeline, zbv_row.schedule, zbv_row.timeline, zbv_row.figures)]
    assert Comparison(2, 4, COSTS, sc, tie).best_marks() == {"zb-v": "best known", "zb-v copy": "best known"}
    assert Comparison(2, 4, COSTS, sc, [_opplan(dualpipe)]).best_marks() == {}


def test_the_table_line_by_line(rows):
    cmp = Comparison(2, 4, COSTS, scales_of(COSTS), [*rows, _opplan(rows[3])], memory_cap_units=3.0)
    lines = cmp.table(verbose=False).split("\n")
    assert lines[0] == "schedule              makespan   bubble    peak mem      params"
    assert lines[1] == "                        (unit)               (unit)      (unit)"
    assert lines[2] == "1f1b                        15   20.00%           3           1"
    assert lines[4] == "zb-v                      12.5    4.00%           3           1"
    assert lines[5] == "dualpipe                    12    0.00%           5           2  <- best known"
    assert lines[6] == "gpipe             skipped: not asked"
    assert lines[7] == "opplan                      12    0.00%           5           2  <- best of all"
    assert lines[8] == ("opplan: optimal, bound 12 unit, gap 0.0%, placement dualpipe, memory cap 3 unit, 1.0 s "
                        "(--verbose: how the search went)")
    assert lines[9] == ("result: opplan 12 unit — as long as DualPipe, 4.0 % shorter than the best other schedule "
                        "(zb-v), bubble as DualPipe's (0.0%), peak memory 100 % of DualPipe's")
    assert len(lines) == 10


def test_a_table_without_a_planned_row_ends_with_the_rows(rows):
    lines = Comparison(2, 4, COSTS, scales_of(COSTS), rows).table().split("\n")
    assert len(lines) == 2 + len(rows) and not any(line.startswith("opplan") for line in lines)


def test_ticks_in_progress_lines_become_units():
    assert ticks_in_units("bound 48 ticks, 3 ticks left; 10 tickses, x5 ticks", Scales(2, 2), "us") == (
        "bound 24 us, 1.5 us left; 10 tickses, x5 ticks")


def test_devices_at_the_cap():
    assert devices_at_cap([99, 100, 50], 100) == (0, 1)  # at least 99 % of the cap
    assert devices_at_cap([98, 99], 100, 0.99) == (1,)
    assert devices_at_cap([1], None) == devices_at_cap([1], 0) == ()


@pytest.mark.parametrize("after_s,said", [(2.0, []), (1.9, ["   drawing 1/2 pictures: 1f1b",
                                                            "   drawing 2/2 pictures: side by side"])])
def test_drawing_says_how_far_it_is_only_when_longer_than_the_budget_s_threshold(tmp_path, after_s, said):
    # one schedule: its picture and the side-by-side, 1 s each by this budget
    costs = UnitCosts()
    sc = scales_of(costs)
    cmp = Comparison(2, 4, costs, sc, [simulate_baseline("1f1b", 2, 4, costs, sc)])
    lines: list[str] = []
    written = write_outputs(cmp, tmp_path, pictures=True, progress=lines.append,
                            budget=CompareBudget(picture_s=1.0, bar_s=0.0, progress_after_s=after_s))
    assert lines == said
    assert [p.name for p in written] == ["compare.csv", "1f1b.torch.csv", "1f1b.png", "side_by_side.png"]


def test_the_solves_get_the_time_limit_less_the_pictures_drawing():
    # two baselines of 16 bars each: their pictures, the planned row's (as large as the largest) and the side by side
    # (their sum plus the planned row's), 0.05 s a bar: 0.05 x (16 + 16 + 16 + 48) = 4.8 s set aside of 30
    lines: list[str] = []
    compare(2, 4, UnitCosts(), schedules=("1f1b", "dualpipe"), opplan_placement="dualpipe", time_limit_s=30,
            bound_time_s=0, pictures=True, budget=CompareBudget(picture_s=0.0, bar_s=0.05), progress=lines.append)
    limits = [int(found[1]) for line in lines if (found := re.search(r"planned row .*, (\d+) s to solve$", line))]
    assert len(limits) == 1 and 23 <= limits[0] <= 25
