"""plan-compare on the hand-built chain of six ops (tests/test_model_costs_details.py) at p = 2, m = 4 with two
ticks per microsecond, both placements: DualPipe's placement is solved first and the V, whose bound over every cut
(144 ticks) cannot beat its schedule, is skipped; the notes of the bound over every cut, the cap and figures in the
model's units; and the placement ``auto`` chooses."""

from __future__ import annotations

import dataclasses
import re

import pytest
from test_model_costs_details import chain_costs

from planner.compare.model_costs import MIB
from planner.compare.pipelines import compare


@pytest.fixture(scope="module")
def run():
    lines: list[str] = []
    cmp = compare(2, 4, COSTS, schedules=("1f1b", "zb-v", "dualpipe"), opplan_placement="both", time_limit_s=4,
                  bound_time_s=1, progress=lines.append)
    return cmp, lines


COSTS = dataclasses.replace(chain_costs(comm_stream=True), ticks_per_unit=2)


def test_a_placement_whose_bound_cannot_beat_the_schedule_found_is_skipped(run):
    cmp, lines = run
    opp = cmp.row("opplan")
    assert opp.figures is not None and opp.notes["placement"] == "dualpipe"
    makespan = opp.figures.makespan_tick
    assert makespan < 144
    assert opp.notes["placements_skipped"] == {"v": 72.0}  # in microseconds
    tried = opp.notes["tried"]
    assert isinstance(tried, dict) and tried["v"] == (None, 144) and tried["dualpipe"][0] == makespan
    assert (f"   v placement skipped: its bound 72 cannot beat the dualpipe placement's schedule {makespan / 2:g}"
            in lines)
    assert [n for n in lines if re.match(r"   planned row \(v\)", n)] == []  # never solved


def test_the_bound_over_every_cut_of_both_placements(run):
    cmp, _ = run
    # tests/test_cut_bound_details.py: 126 ticks for DualPipe's placement, 144 for the V; two ticks per unit
    assert cmp.row("opplan").notes["every_cut"] == {"bound_units": 63.0,
                                                    "by_placement_units": {"dualpipe": 63.0, "v": 72.0}}


def test_the_cap_is_dualpipe_s_peak_and_figures_are_in_mib(run):
    cmp, _ = run
    dualpipe = cmp.row("dualpipe").figures
    assert dualpipe is not None and cmp.row("opplan").notes["cap_bytes"] == dualpipe.max_peak_memory_bytes
    assert cmp.memory_cap_units == dualpipe.max_peak_memory_bytes / MIB
    one = cmp.values(cmp.row("1f1b"))
    assert one["param_memory"] == 2 / MIB  # the stage holding op 3's 2 bytes, not op 0's 1
    assert cmp.units() == ("us", "MiB")


def test_auto_says_how_it_chose_between_the_two_placements():
    cmp = compare(2, 4, COSTS, schedules=("zb-v", "dualpipe"), opplan_placement="auto", time_limit_s=3,
                  bound_time_s=0)
    why = cmp.row("opplan").notes["placement_why"]
    assert isinstance(why, str) and why.startswith("auto: ")
    assert "dualpipe: warm start" in why and "v: warm start" in why


def test_at_granularity_two_no_placement_is_skipped_on_a_stage_level_bound():
    # sub-chunks can overlap what a stage-level bound keeps apart: both placements are solved
    cmp = compare(2, 4, COSTS, schedules=("zb-v", "dualpipe"), opplan_placement="both", time_limit_s=4,
                  bound_time_s=0, granularity=2)
    notes = cmp.row("opplan").notes
    assert notes["placements_skipped"] == {}
    tried = notes["tried"]
    assert isinstance(tried, dict) and set(tried) == {"dualpipe", "v"} and tried["v"][0] is not None
