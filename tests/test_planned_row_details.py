"""The planned row on one placement (`planner.compare.planned_row`) on unit costs at p = 2, m = 4 (DualPipe: 24 ticks,
peak 6 bytes; two ticks per unit), and the progress lines of its solves, word for word."""

from __future__ import annotations

import re

import pytest
from test_model_costs_details import chain_costs

from planner.compare.baselines import scales_of
from planner.compare.compare_row import CompareRow
from planner.compare.planned_row import PlacementJob, RowSearch, plan_placement, reference_schedules
from planner.pipeline.generators import gpipe
from planner.pipeline.registry import UnitCosts
from planner.schedule.plan import PlanStatus
from planner.search.pipeline.results import LnsStep

UNIT = UnitCosts()


def test_progress_lines_of_the_neighbourhood_search():
    lines: list[str] = []
    on = RowSearch(progress=lines.append, placement="v").on_step("us", 2)
    assert on is not None
    on(LnsStep(3, "window", 12, 50, 40, 1.25, False))
    on(LnsStep(4, "window", 12, 40, 40, 1.5, False))  # no gain: no line
    on(LnsStep(0, "periodic", 0, 60, 44, 0.5, False, period_tick=6))
    assert lines == ["   neighbourhood search (v): 1.2 s, step 3 (window, 12 tasks): 25 -> 20 us",
                     "   periodic start (v): 0.5 s, one micro-batch of each chain every 3 us, replayed 22 us (best "
                     "start before 30)"]


def test_progress_lines_of_the_full_model_only_at_a_better_incumbent():
    lines: list[str] = []
    on = RowSearch(progress=lines.append, placement="dualpipe").on_full("unit", 2)
    assert on is not None
    on(1.0, None, 10, None)  # no incumbent yet
    on(2.0, 30, None, None)
    on(3.0, 30, 20, 0.3)  # not better
    on(4.5, 28, 22, 0.2)
    assert lines == ["   full model (dualpipe): 2.0 s, incumbent 15 unit",
                     "   full model (dualpipe): 4.5 s, incumbent 14 unit, bound for this cut 11 unit"]


def test_the_line_that_opens_a_solve():
    lines: list[str] = []
    search = RowSearch(progress=lines.append, placement="v")
    search.started("zb-v", 12.5, "unit", 9.6)
    search.started("", 12.5, "unit", 3)
    search.started("greedy", None, "unit", 3)
    assert lines == ["   planned row (v): starts from zb-v (12.5 unit), 10 s to solve",
                     "   planned row (v): starts from the warm start (12.5 unit), 3 s to solve",
                     "   planned row (v): no warm start, 3 s to solve"]


def test_no_progress_no_callbacks():
    search = RowSearch()
    assert search.on_step("unit", 1) is None and search.on_full("unit", 1) is None
    search.started("zb-v", 1.0, "unit", 1)  # says nothing, raises nothing


def _job(cap, placement="dualpipe", **kw):
    return PlacementJob(placement, 2, 4, UNIT, scales_of(UNIT), {}, cap, **kw)


def test_the_row_starts_from_the_shortest_baseline_and_notes_in_units():
    row = plan_placement(_job(None), 5)
    n = row.notes
    assert row.name == "opplan" and row.figures is not None and row.figures.makespan_tick == 24
    assert n["status"] is PlanStatus.OPTIMAL and n["bound_tick"] == 24 and n["bound_units"] == 12.0
    assert n["gap"] == 0.0 and n["warm_start"] == "dualpipe" and n["warm_units"] == 12.0
    assert n["placement"] == "dualpipe" and n["cap_bytes"] is None
    assert row.pipeline is not None and row.pipeline.name == "opplan-dualpipe"


def test_under_a_cap_no_baseline_fits_and_the_list_schedule_is_the_warm_start():
    row = plan_placement(_job(5), 5)  # DualPipe's peak is 6
    assert row.notes["warm_start"] == "greedy" and row.notes["cap_bytes"] == 5
    assert row.figures is not None and row.figures.max_peak_memory_bytes <= 5


def test_a_placement_with_no_schedule_under_the_cap_is_skipped_with_the_reason():
    row = plan_placement(_job(1), 5)
    assert row.figures is None and row.skipped.startswith("dualpipe placement: device 0: parameters (0) plus one "
                                                          "micro-batch's activation (2) need 2")


def test_reference_schedules_of_a_job():
    got = reference_schedules(_job(None, placement="v"))
    assert [n for n, _ in got] == ["zb-v", "dualpipev"]
    mine = gpipe(2, 2)
    job = PlacementJob("fixed", 4, 3, UNIT, scales_of(UNIT), {"gpipe": CompareRow("gpipe", schedule=mine)}, None)
    assert reference_schedules(job) == [("gpipe", mine)]


@pytest.mark.parametrize("placement,warm,units", [("v", "zb-v", 12.5), ("fixed", "zb-h1", 13.0)])
def test_other_placements_start_from_their_own_shortest_baseline(placement, warm, units):
    # V: ZB-V 25 ticks (DualPipeV 26); fixed: ZB-H1 26 ticks, the shortest of 1F1B, GPipe, ZB-H1 and ZB-H2
    row = plan_placement(_job(None, placement=placement), 3)
    assert row.notes["placement"] == placement and row.figures is not None
    assert row.notes["warm_start"] == warm and row.notes["warm_units"] == units


def _limits(lines: list[str]) -> list[int]:
    """The seconds each solve was given, from its opening line."""
    return [int(found[1]) for line in lines if (found := re.search(r"planned row .*, (\d+) s to solve$", line))]


def test_a_solve_on_unit_costs_gets_the_budget_less_the_list_schedules():
    lines: list[str] = []
    plan_placement(_job(None, search=RowSearch(progress=lines.append, placement="dualpipe")), 3)
    assert len(_limits(lines)) == 1 and 2 <= _limits(lines)[0] <= 3


def test_on_a_model_the_stage_level_gets_half_the_budget_at_granularity_two():
    # policy: the sub-chunk solve gets half (fine_share), and of the stage level's half the cut search a quarter
    # (cut_share) before the first solve: 8 s -> 4 s for the stage level -> at most 3 s for its first solve, every
    # later stage-level solve at most what is left of the 4 s, then the sub-chunk solve the rest of the 8 s
    mc = chain_costs(comm_stream=True)
    lines: list[str] = []
    job = PlacementJob("v", 2, 4, mc, scales_of(mc), {}, None, granularity=2,
                       search=RowSearch(progress=lines.append, placement="v"))
    row = plan_placement(job, 8)
    limits = _limits(lines)
    assert len(limits) >= 2 and limits[0] <= 3 and all(x <= 4 for x in limits[:-1]) and limits[-1] <= 8
    gran = row.notes["granularity"]
    # the chunks of 1, 2, 2 and 1 ops make 6 sub-chunks: 3 x 6 x 4 compute tasks
    assert isinstance(gran, dict) and gran["k"] == 2 and gran["tasks"] == 72
    cut = row.notes["cut"]
    # the V's cut search moves the chunk cut (ops 0 | 1, 2 | 3, 4 | 5 are far from balanced)
    assert isinstance(cut, dict) and cut["moves"] >= 1 and cut["any_cut_bound_units"] == 126.0


def test_on_a_model_at_granularity_one_there_is_no_sub_chunk_solve():
    mc = chain_costs(comm_stream=True)
    row = plan_placement(PlacementJob("dualpipe", 2, 4, mc, scales_of(mc), {}, None, granularity=1), 2)
    assert "granularity" not in row.notes
    # DualPipe's placement searches the stage cut (ops 0..2 | 3..5, 6 against 15 ticks of forward): it moves
    cut = row.notes["cut"]
    assert isinstance(cut, dict) and cut["moves"] >= 1
