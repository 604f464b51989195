"""Which placement plan-compare solves when it may choose (`planner.compare.placement_choice`): the rule on its two
signals by hand, and the signals of unit costs at p = 2, m = 4 (DualPipe 24 ticks at 6 bytes, ZB-V 25 at 4,
DualPipeV 26 at 5; two ticks and two bytes per unit)."""

from __future__ import annotations

import pytest

from planner.compare.baselines import scales_of
from planner.compare.placement_choice import choose, dominant, warmest
from planner.pipeline.registry import UnitCosts

INF = float("inf")
BOTH = ["dualpipe", "v"]


def test_the_placement_best_on_both_signals_is_solved_alone():
    assert choose(["a", "b"], {"a": 10, "b": 12}, {"a": 8, "b": 9}) == (
        "a", "a alone, the shortest warm start and the lowest bound")
    assert choose(["a", "b"], {"a": 10, "b": 10}, {"a": 8, "b": 8})[0] == "a"  # ties to the earlier
    assert choose(["b", "a"], {"a": 10, "b": 10}, {"a": 8, "b": 8})[0] == "b"
    assert choose(["a", "b"], {"a": INF, "b": INF}, {"a": 5, "b": 4})[0] == "b"


def test_a_bound_lower_by_at_most_the_tie_share_of_the_gap_does_not_count():
    # a: warm 10, bound 9 (gap 1): b's bound 8.95 is lower by 0.05 = 5 % of a's gap, a tie
    assert choose(["a", "b"], {"a": 10, "b": 12}, {"a": 9, "b": 8.95}, 0.05) == (
        "a", "a alone, the shortest warm start, its bound within 5% of its gap of the lowest")
    assert choose(["a", "b"], {"a": 10, "b": 12}, {"a": 9, "b": 8.9}, 0.05) == (
        None, "every placement, the signals disagree")
    assert choose(["a", "b"], {"a": 10, "b": 12}, {"a": 9, "b": 8.9}, 0.1)[0] == "a"
    # no warm start: no gap, no tie
    assert choose(["a", "b"], {"a": INF, "b": INF}, {"a": 9, "b": 8.9999}, 0.5) == (
        "b", "b alone, the shortest warm start and the lowest bound")
    # the shortest warm start must also be no longer than the other's
    assert choose(["a", "b"], {"a": 12, "b": 10}, {"a": 9, "b": 9.01}, 0.05)[0] == "b"


@pytest.fixture(scope="module")
def unit():
    c = UnitCosts()
    return c, scales_of(c)


def test_warmest_takes_the_shortest_baseline_within_the_cap(unit):
    c, sc = unit
    assert warmest(BOTH, 2, 4, c, sc, {}, None) == "dualpipe"  # DualPipe 24 < ZB-V 25
    assert warmest(BOTH, 2, 4, c, sc, {}, 6) == "dualpipe"  # its peak 6 is within a cap of 6
    assert warmest(BOTH, 2, 4, c, sc, {}, 5) == "v"  # over a cap of 5: ZB-V's 25 is the shortest within it
    assert warmest(BOTH, 2, 4, c, sc, {}, 1) == "dualpipe"  # none fits: the first
    assert warmest(["v", "dualpipe"], 2, 4, c, sc, {}, 1) == "v"


def test_dominant_says_why_in_units(unit):
    c, sc = unit
    assert dominant(BOTH, 2, 4, c, sc, {}, None) == (
        "dualpipe", "auto: dualpipe alone, the shortest warm start and the lowest bound (dualpipe: warm start 12, "
        "bound 12; v: warm start 12.5, bound 12.5)")
    assert dominant(BOTH, 2, 4, c, sc, {}, 6)[0] == "dualpipe"
    # over a cap of 5 DualPipe has no warm start but the lower bound: the signals disagree
    assert dominant(BOTH, 2, 4, c, sc, {}, 5) == (
        None, "auto: every placement, the signals disagree (dualpipe: warm start none within the cap, bound 12; "
        "v: warm start 12.5, bound 12.5)")


def test_dominant_hands_over_the_list_schedules_of_pipelines_with_streams():
    c = UnitCosts(a2a=1.0)
    sc = scales_of(c)
    listed: dict = {}
    alone, why = dominant(BOTH, 2, 4, c, sc, {}, None, listed=listed)
    assert alone == "dualpipe"
    assert why.endswith("(dualpipe: warm start 18, bound 16; v: warm start 22, bound 19)")
    assert set(listed) == {"dualpipe", "v"}
    for pipe, got in listed.values():
        assert pipe.streams_on and got is not None and got[1] > 0
