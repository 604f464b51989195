"""The planned pipeline's cut search (planner/compare/cut_search.py) on the bundled MoE: every move keeps a valid
stage cut, the search never returns a longer schedule than it started from, and it repairs a cut made uneven on
purpose."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.compare.cut_search import _moves, evaluate_cut, refine_cut, with_cut
from planner.compare.model_costs import model_costs
from planner.pipeline.registry import GENERATORS

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
HW = REPO / "planner" / "data" / "hardware_profiles" / "h100-8-nvlink.yaml"
P, M = 4, 4


@pytest.fixture(scope="module")
def costs():
    from planner.ir.hardware import load_topology
    from planner.prepare import prepare

    return model_costs(prepare(MOE, load_topology(HW)).instance, P, time_limit_s=10)


def _assert_valid_cut(costs, cut) -> None:
    inst = costs.instance
    assert [i for piece in cut for i in piece] == list(range(inst.num_tasks))  # contiguous, each op once
    assert all(piece for piece in cut)
    position = {t: i for i, t in enumerate(inst.topological_order)}
    piece_of = {i: c for c, piece in enumerate(cut) for i in piece}
    for u, v in inst.edges:  # edges never go back to an earlier piece
        assert piece_of[position[u]] <= piece_of[position[v]]


@settings(max_examples=30, deadline=None)
@given(choices=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=12),
       split=st.sampled_from([1, 2]))
def test_every_move_keeps_a_valid_cut(costs, choices, split):
    cut = costs.cut(split)
    for choice in choices:
        moves = _moves(cut, range(len(cut)))
        if not moves:
            break
        cut = moves[choice % len(moves)]
        _assert_valid_cut(costs, cut)


def _uneven(costs, shift: int):
    """The p-stage cut with `shift` ops of stage 1 given to stage 0 (stage 0 gets too much work)."""
    cut = [list(piece) for piece in costs.stage_positions]
    cut[0] += cut[1][:shift]
    cut[1] = cut[1][shift:]
    return tuple(tuple(piece) for piece in cut)


def test_refine_repairs_an_uneven_cut_and_never_gets_worse(costs):
    uneven = with_cut(costs, 1, _uneven(costs, 12))
    _assert_valid_cut(costs, uneven.stage_positions)
    refs = [GENERATORS["1f1b"](P, M)]
    start = evaluate_cut(uneven, "1f1b", P, M, refs, None)
    assert start is not None
    result = refine_cut(uneven, 1, "1f1b", P, M, refs, None, deadline_s=time.monotonic() + 120)
    assert result.start_makespan_tick == start.makespan_tick
    assert result.best is not None and result.best.makespan_tick < start.makespan_tick
    assert result.moves_kept >= 1
    _assert_valid_cut(costs, result.costs.stage_positions)
    # the returned costs carry the cut the returned makespan was measured on
    again = evaluate_cut(result.costs, "1f1b", P, M, refs, None)
    assert again is not None and again.makespan_tick == result.best.makespan_tick


def test_a_cap_nothing_fits_leaves_the_cut_alone(costs):
    refs = [GENERATORS["dualpipe"](P, 2 * P)]
    result = refine_cut(costs, 1, "dualpipe", P, 2 * P, refs, 1, deadline_s=time.monotonic() + 60)
    assert result.best is None and result.costs is costs and result.moves_kept == 0


def test_the_cap_is_kept_by_every_accepted_cut(costs):
    refs = [GENERATORS["dualpipe"](P, 2 * P)]
    start = evaluate_cut(costs, "dualpipe", P, 2 * P, refs, None)
    assert start is not None
    cap = _peak(start)  # the start cut's own peak: every cut the search keeps must stay under it
    result = refine_cut(costs, 1, "dualpipe", P, 2 * P, refs, cap, deadline_s=time.monotonic() + 60,
                        max_evaluations=30)
    assert result.best is not None and _peak(result.best) <= cap


def _peak(evaluation) -> int:
    from planner.pipeline.metrics import figures

    return figures(evaluation.pipeline, evaluation.timeline).max_peak_memory_bytes


def test_the_planned_row_chooses_its_cut_and_says_so(costs):
    from planner.compare.pipelines import compare

    cmp = compare(P, 2 * P, costs, schedules=("dualpipe",), opplan_placement="dualpipe", time_limit_s=8)
    opp, dp = cmp.row("opplan"), cmp.row("dualpipe")
    assert opp.figures is not None and dp.figures is not None
    assert opp.figures.makespan_tick <= dp.figures.makespan_tick  # the search starts from DualPipe's own order
    cut = opp.notes["cut"]
    assert isinstance(cut, dict) and cut["simulations"] >= 1
    assert ("cut moved" in cmp.table()) == bool(cut["moves"])
    # the planned row's pipeline is on its own cut; the baseline keeps the stage formulation's
    assert dp.pipeline is not None and dp.pipeline.stages == costs.pipeline("dualpipe", P, 2 * P).stages


def test_the_any_cut_bound_is_below_every_cut_visited(costs):
    from planner.compare.cut_search import any_cut_bound_tick

    refs = [GENERATORS["1f1b"](P, M)]
    uneven = with_cut(costs, 1, _uneven(costs, 12))
    for c in (costs, uneven):
        best = evaluate_cut(c, "1f1b", P, M, refs, None)
        assert best is not None
        bound = any_cut_bound_tick(c, best.pipeline)
        assert bound is not None and 0 < bound <= best.makespan_tick
    # the same for both cuts: the work of an op does not depend on its piece (identical devices)
    assert any_cut_bound_tick(costs, costs.pipeline("1f1b", P, M)) == \
        any_cut_bound_tick(uneven, uneven.pipeline("1f1b", P, M))
