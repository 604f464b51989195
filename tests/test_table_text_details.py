"""The words of plan-compare's table (`planner.compare.table_text`), cell by cell: the number format, the planned
row's short and verbose lines with every note they read, the memory bound's words and the outcome line."""

from __future__ import annotations

import pytest

from planner.compare.compare_row import CompareRow
from planner.compare.table_text import at_cap_text, figure_text, memory_bound_text, opplan_line, outcome_line
from planner.schedule.plan import PlanStatus


@pytest.mark.parametrize("value,text", [(12.3456, "12.35"), (9999.4, "9999"), (10000.4, "10000"),
                                        (-12345.6, "-12346"), (0.000123456, "0.0001235"), (2.0, "2")])
def test_four_significant_digits_below_ten_thousand_whole_numbers_above_never_an_exponent(value, text):
    assert figure_text(value) == text


def _row(**notes):
    return CompareRow("opplan", notes=notes)


def test_the_short_line():
    row = _row(status=PlanStatus.FEASIBLE, bound_units=20.5, gap=0.125, placement="v", solve_time_s=3.25,
               cut={"moves": 3, "simulations": 9})
    assert opplan_line(row, "unit", "GB", 12.0, 0.01, verbose=False) == (
        "opplan: feasible, bound 20.5 unit, gap 12.5%, placement v, memory cap 12 GB, 3.2 s "
        "(--verbose: how the search went)")
    assert opplan_line(_row(bound_units="n/a"), "unit", "GB", None, 0.01, verbose=False) == (
        "opplan: None, bound n/a, gap 0.0%, placement None, memory cap none, 0.0 s (--verbose: how the search went)")


def test_the_verbose_line_tells_every_step_in_order():
    row = _row(status=PlanStatus.FEASIBLE, bound_units=20.5, gap=0.125, placement="v", solve_time_s=3.25,
               cut={"moves": 3, "chain_moves": 1, "simulations": 40, "bound_rounds": 2, "any_cut_bound_units": 18.25},
               every_cut={"bound_units": 19.0, "by_placement_units": {"dualpipe": 19.5, "v": 19.0}},
               memory_bound={"bound_units": 21.0, "device": 3, "devices": (), "complete": False, "probes": 7,
                             "seconds": 12.4, "half_bubble_units": 22.0, "half_bubble_unreachable": False,
                             "half_bubble_reached": True, "half_bubble_answers": "d3 feasible"},
               granularity={"k": 2, "tasks": 800, "a2a_at": "experts", "kept": "sub-chunks",
                            "stage_level_makespan_units": 25.0, "stage_level_replayed_units": 24.0,
                            "fine_makespan_units": 23.0},
               lns={"from_units": 25.0, "to_units": 22.5, "replayed_units": 24.0, "gains": 5, "steps": 9,
                    "seconds": 30.4, "resolve_s": 10.2, "resolve_units": 22.0},
               placement_why="its warm start is shortest", placements_skipped={"dualpipe": 30.0}, warm_start="zb-v",
               devices_at_cap=[0, 3])
    assert opplan_line(row, "unit", "GB", 12.0, 0.01) == (
        "opplan: feasible, bound 20.5 unit, gap 12.5%, placement v (its warm start is shortest), cut moved 3 times, "
        "1 of them chain moves (40 simulations; the bound is for that cut), 2 of its rounds by the cut's bound (a "
        "solve's gap was at most 1%), bound over every cut 18.25 unit (work / devices), bound over every cut of the "
        "dualpipe and v placements 19 unit (heads + work per device; dualpipe 19.5, v 19), memory bound 21 unit "
        "(device 3's relaxation with the cap raised it; 7 probes, 12 s, not searched to the end: out of time); half "
        "DualPipe's bubble needs at most 22 unit: this schedule reaches it (d3 feasible), granularity k = 2 (800 "
        "compute tasks, all-to-alls at experts; kept sub-chunks; stage level 25 unit, its order replayed 24 unit, "
        "sub-chunks 23 unit), neighbourhood search 25 -> 22.5 unit (the full solve's order replayed 24; 5 gains in 9 "
        "steps, 30 s), then the full model again 10 s: 22 unit, the dualpipe placement not solved (its bound 30 unit "
        "cannot beat this schedule), warm start zb-v, memory cap 12 GB (at the cap: devices 0, 3), 3.2 s")


def _verbose(**notes):
    return opplan_line(_row(**notes), "u", "GB", None, 0.01)


BARE = "opplan: None, bound None, gap 0.0%, placement None, warm start none, memory cap none, 0.0 s"


def test_notes_that_are_absent_or_empty_add_nothing():
    assert _verbose() == BARE
    assert _verbose(every_cut={"bound_units": None, "by_placement_units": {}}) == BARE
    assert _verbose(placements_skipped={}, devices_at_cap=[], cut="none", lns=None, placement_why="") == BARE


def test_the_bound_over_every_cut_within_the_cap_says_what_it_proves():
    where = "placement None,"
    proves = {"bound_units": 30.0, "half_bubble_units": 28.0, "half_bubble_unreachable": True, "no_cut_fits": False}
    assert _verbose(every_cut_memory=proves) == BARE.replace(
        where, "placement None, within the cap 30 u (half of DualPipe's bubble out of reach on every cut),")
    open_ = dict(proves, bound_units=25.0, half_bubble_unreachable=False)
    assert _verbose(every_cut_memory=open_) == BARE.replace(
        where, "placement None, within the cap 25 u (half of DualPipe's bubble needs 28 u: not ruled out),")
    assert _verbose(every_cut_memory=dict(proves, half_bubble_units=None)) == BARE.replace(
        where, "placement None, within the cap 30 u,")
    assert _verbose(every_cut_memory=dict(proves, bound_units=float("inf"), no_cut_fits=True)) == BARE.replace(
        where, "placement None, no cut of either placement fits the memory cap,")
    assert _verbose(every_cut_memory={"bound_units": None}) == BARE


def test_a_kept_cut_and_a_granularity_of_one():
    assert _verbose(cut={"moves": 0, "simulations": 5}) == BARE.replace(
        "placement None,", "placement None, cut kept (5 simulations),")
    assert _verbose(granularity={"asked": "auto", "why": "too many tasks"}) == BARE.replace(
        "placement None,", "placement None, granularity 1 (asked auto: too many tasks),")
    kept = _verbose(granularity={"k": 3, "tasks": 90, "a2a_at": "experts", "kept": "stage level",
                                 "stage_level_makespan_units": 25.0, "stage_level_replayed_units": 24.0,
                                 "fine_makespan_units": None})
    assert ("granularity k = 3 (90 compute tasks, all-to-alls at experts; kept stage level; stage level 25 u, its "
            "order replayed 24 u), warm start") in kept


def test_where_the_neighbourhood_search_started():
    lns = {"from_units": 25.0, "to_units": 22.5, "replayed_units": 24.0, "gains": 5, "steps": 9, "seconds": 30.4}
    assert ("neighbourhood search 25 -> 22.5 u (no full solve first, the pipeline is that large; the warm start "
            "replayed 24; 5 gains in 9 steps, 30 s), warm start") in _verbose(lns={**lns, "after_full_solve": False})
    assert ("neighbourhood search 25 -> 22.5 u (searched on the pipeline's mirror half: symmetric schedules, half "
            "the tasks; no full solve first, the pipeline is that large; a periodic schedule (one micro-batch of "
            "each chain every 2.5 u: it replays shorter than the warm start) replayed 24; 5 gains in 9 steps, 30 s), "
            "warm start") in _verbose(lns={**lns, "periodic_period_units": 2.5, "folded": True})


def test_devices_at_the_cap():
    assert at_cap_text([2]) == " (at the cap: device 2)"
    assert at_cap_text((1, 4)) == " (at the cap: devices 1, 4)"
    assert at_cap_text(()) == at_cap_text(None) == at_cap_text("0") == ""


def test_the_memory_bound_s_words():
    assert memory_bound_text(None, "u") == ""
    assert memory_bound_text({"skipped": "no cap"}, "u") == ", no memory bound (no cap)"
    pair = {"bound_units": 21.0, "device": None, "devices": (1, 2), "complete": True, "probes": 7, "seconds": 12.6,
            "half_bubble_units": 20.0, "half_bubble_unreachable": True,
            "other_placements_units": {"dualpipe": 19.0, "fixed": float("inf"), "v": 21.5, "w": 20.0}}
    assert memory_bound_text(pair, "u") == (
        ", memory bound 21 u (devices 1 and 2 together: their relaxation with the cap raised it; 7 probes, 13 s); "
        "half DualPipe's bubble needs at most 20 u: no schedule of this pipeline under the cap reaches it; on its "
        "own cut, the dualpipe placement's bound 19 u (below it), the fixed placement's bound none within the cap "
        "(above it), the v placement's bound 21.5 u (above it), the w placement's bound 20 u (below it)")
    nobody = {"bound_units": 21.0, "device": None, "devices": (), "complete": True, "probes": 1, "seconds": 0.4,
              "half_bubble_units": 20.0, "half_bubble_unreachable": False, "half_bubble_reached": False,
              "other_placements_units": {}}
    assert memory_bound_text(nobody, "u") == (
        ", memory bound 21 u (no device's relaxation with the cap raised it; 1 probes, 0 s); half DualPipe's bubble "
        "needs at most 20 u: not ruled out")
    no_half = {**nobody, "half_bubble_units": None}
    assert memory_bound_text(no_half, "u") == (
        ", memory bound 21 u (no device's relaxation with the cap raised it; 1 probes, 0 s)")


def _v(makespan: float, bubble: float, peak: float) -> dict[str, float]:
    return {"makespan": makespan, "bubble_ratio": bubble, "peak_memory": peak}


def test_outcome_when_dualpipe_has_no_bubble_or_no_memory():
    # a zero reference leaves the ratio out and writes both figures in the column's own format
    assert outcome_line({"dualpipe": _v(40, 0.0, 5), "opplan": _v(44, 0.1, 0)}, "u") == (
        "result: opplan 44 u — 10.0 % longer than DualPipe, bubble 10.0%, DualPipe's 0.0%, peak memory 0 % of "
        "DualPipe's")
    assert outcome_line({"dualpipe": _v(40, 0.2, 0), "opplan": _v(30, 0.1, 6), "gpipe": _v(50, 0.1, 5),
                         "1f1b": _v(45, 0.1, 5)}, "u") == (
        "result: opplan 30 u — 25.0 % shorter than DualPipe, 33.3 % than the best other schedule (1f1b), bubble 38 % "
        "of DualPipe's, peak memory 6, DualPipe's 0")  # idle time 30 x 0.1 = 3 against 40 x 0.2 = 8


def test_outcome_when_longer_than_the_best_other_but_shorter_than_dualpipe():
    assert outcome_line({"dualpipe": _v(40, 0.2, 5), "opplan": _v(30, 0.1, 6), "zb-v": _v(25, 0.1, 5)}, "u") == (
        "result: opplan 30 u — 25.0 % shorter than DualPipe, 20.0 % longer than the best other schedule (zb-v), "
        "bubble 38 % of DualPipe's, peak memory 120 % of DualPipe's")


def test_outcome_against_a_dualpipe_of_no_length_and_alone():
    # DualPipe idles no time at all (a makespan of 0): the bubbles are compared as ratios
    assert outcome_line({"dualpipe": _v(0, 0.2, 5), "opplan": _v(30, 0.1, 6)}, "u") == (
        "result: opplan 30 u — as long as DualPipe, bubble 50 % of DualPipe's, peak memory 120 % of DualPipe's")
    assert outcome_line({"opplan": _v(30, 0.1, 6)}, "u") == "result: opplan 30 u"
