"""The cut search's moves and descent (`planner.compare.cut_search`) on hand-built cuts: the exact single and chain
moves (which ops leave, which piece passes what on, ties to fewer ops), their order, and the descent's rounds,
budget and counts on a toy evaluation."""

from __future__ import annotations

import pytest
from test_model_costs_details import chain_costs

from planner.compare.cut_search import (
    any_cut_bound_tick,
    chain_move,
    chain_moves,
    descend_cut,
    evaluate_cut,
    op_work_ticks,
    refine_cut,
    single_moves,
)
from planner.errors import OpplanError
from planner.pipeline.generators import gpipe, one_f_one_b
from planner.pipeline.unroll import StageCost, TrainingPipeline
from planner.schedule.program import Schedule


def test_single_moves_largest_step_first_each_piece_up_then_down():
    cut = ((0, 1, 2), (3, 4), (5,))
    assert single_moves(cut, [0, 1], (2, 1)) == [
        ((0,), (1, 2, 3, 4), (5,)),      # k = 2: piece 0's last two ops up (piece 1 has only two: no move)
        ((0, 1), (2, 3, 4), (5,)),       # k = 1: piece 0's last op up
        ((0, 1, 2), (3,), (4, 5)),       # piece 1's last op up
        ((0, 1, 2, 3), (4,), (5,)),      # piece 1's first op down
    ]
    assert single_moves(cut, [2], (1,)) == []  # a piece keeps at least one op
    # a piece too small for the step is passed over, and the next piece still moves
    assert single_moves(cut, [2, 1], (1,)) == [((0, 1, 2), (3,), (4, 5)), ((0, 1, 2, 3), (4,), (5,))]
    assert single_moves(((0,), (1, 2)), [1], (1,)) == [((0, 1), (2,))]  # the last piece only gives down


def test_a_chain_move_passes_on_about_the_work_each_piece_received():
    cut = ((0, 1, 2), (3, 4), (5, 6))
    # op 2 (work 2) goes up; piece 1 passes on its last op 4 (work 3, the closest to 2 without going further)
    assert chain_move(cut, 0, 2, 1, [1, 1, 2, 1, 3, 1, 1]) == ((0, 1), (2, 3), (4, 5, 6))
    # ops 4 and 3 (work 1 each) match op 2's work 2 exactly: piece 1 passes on both and keeps only what it received
    assert chain_move(cut, 0, 2, 1, [1, 1, 2, 1, 1, 1, 1]) == ((0, 1), (2,), (3, 4, 5, 6))
    # a tie between one op (miss 1) and two (miss 1) goes to fewer ops
    assert chain_move(cut, 0, 2, 1, [1, 1, 2, 2, 1, 1, 1]) == ((0, 1), (2, 3), (4, 5, 6))


def test_a_piece_passes_on_ops_from_its_end_that_faces_the_target():
    # op 2 (work 3) goes up; piece 1 = ops 3, 4, 5 (work 9, 1, 1) counts from op 5: one op misses by 2, two by 1,
    # three by 8: it passes on ops 4 and 5 and keeps op 3
    cut = ((0, 1, 2), (3, 4, 5), (6, 7))
    assert chain_move(cut, 0, 2, 1, [1, 1, 3, 9, 1, 1, 1, 1]) == ((0, 1), (2, 3), (4, 5, 6, 7))


def test_a_chain_move_down_takes_first_ops():
    cut = ((0, 1), (2, 3), (4, 5, 6))
    # op 4 (work 2) goes down; piece 1 passes on its first op 2 (work 1, closer to 2 than ops 2 and 3's 4)
    assert chain_move(cut, 2, 0, 1, [1, 1, 1, 3, 2, 1, 1]) == ((0, 1, 2), (3, 4), (5, 6))


def test_chain_moves_that_do_not_exist():
    cut = ((0, 1), (2, 3), (4, 5, 6))
    assert chain_move(cut, 2, 0, 3, [1] * 7) is None  # the source would keep nothing
    assert chain_move(cut, 2, 1, 1, [1] * 7) is None  # a neighbour: that is a single move
    assert chain_move(cut, 0, 2, 1, [1] * 7) is not None


def test_chain_moves_in_order_largest_step_then_targets_then_sources():
    cut = ((0, 1, 2), (3, 4), (5, 6), (7, 8))
    assert list(chain_moves(cut, [0], [3, 2], [1] * 9, (2, 1))) == [
        ((0,), (1, 2), (3, 4), (5, 6, 7, 8)),
        ((0,), (1, 2), (3, 4, 5, 6), (7, 8)),
        ((0, 1), (2, 3), (4, 5), (6, 7, 8)),
        ((0, 1), (2, 3), (4, 5, 6), (7, 8)),
    ]


def _toy(cut):
    """A toy evaluation: (makespan = 10 x the largest piece + the first piece's size, busy ticks per piece)."""
    return max(len(p) for p in cut) * 10 + len(cut[0]), tuple(len(p) * 10 for p in cut)


def _descend(start, evaluate, **kw):
    kw.setdefault("chain", False)
    kw.setdefault("deadline_s", float("inf"))
    kw.setdefault("max_evaluations", 100)
    return descend_cut(start, evaluate(start), evaluate, lambda e: e[0], lambda e: e[1],
                       [frozenset({c}) for c in range(len(start))], [1] * 9, steps=(1,), **kw)


def test_the_descent_moves_the_busiest_device_s_pieces_first_and_keeps_first_improvements():
    calls = []
    got = _descend(((0, 1, 2, 3), (4,), (5,)), _toy, progress=lambda ms, ev: calls.append((ms, ev)))
    # 44 -> 33 (piece 0 gives op 3) -> 32 (op 2) -> 22 (piece 1, now the busiest, gives op 4); then no single move
    # of the 3 pieces of two ops improves: 1 + 3 kept + 5 tried
    assert got.cut == ((0, 1), (2, 3), (4, 5)) and got.best == (22, (20, 20, 20))
    assert (got.evaluations, got.kept, got.chain_kept) == (9, 3, 0)
    assert calls == [(33, 2), (32, 3), (22, 4)]


def test_the_descent_stops_at_its_evaluation_budget_and_deadline():
    got = _descend(((0, 1, 2, 3), (4,), (5,)), _toy, max_evaluations=3)
    assert got.cut == ((0, 1), (2, 3, 4), (5,)) and (got.evaluations, got.kept) == (3, 2)
    got = _descend(((0, 1, 2, 3), (4,), (5,)), _toy, deadline_s=0.0)
    assert got.cut == ((0, 1, 2, 3), (4,), (5,)) and (got.evaluations, got.kept) == (1, 0)


def test_chain_moves_are_tried_only_once_single_moves_fail():
    start = ((0, 1, 2), (3, 4), (5, 6), (7, 8))
    target = ((0, 1), (2, 3), (4, 5), (6, 7, 8))  # the chain move of op 2 from piece 0 to piece 3

    def evaluate(cut):
        return (50, (10, 10, 10, 10)) if cut == target else (100, (40, 30, 20, 10))

    def run(chain):
        return descend_cut(start, (60, (40, 30, 20, 10)), evaluate, lambda e: e[0], lambda e: e[1],
                           [frozenset({c}) for c in range(4)], [1] * 9, chain=chain, deadline_s=float("inf"),
                           max_evaluations=100, steps=(1,))

    with_chain = run(True)
    # round 1: 7 single moves fail, then the chain move to the lightest device's piece; round 2: 7 singles fail,
    # and no device is lighter than the busiest
    assert with_chain.cut == target and (with_chain.evaluations, with_chain.kept, with_chain.chain_kept) == (16, 1, 1)
    alone = run(False)
    assert alone.cut == start and (alone.evaluations, alone.kept, alone.chain_kept) == (8, 0, 0)
    # a failed evaluation (nothing fits) is never kept
    none = descend_cut(start, (60, (40, 30, 20, 10)), lambda c: None, lambda e: e[0], lambda e: e[1],
                       [frozenset({c}) for c in range(4)], [1] * 9, chain=True, deadline_s=float("inf"),
                       max_evaluations=100, steps=(1,))
    assert none.cut == start and none.kept == 0


def test_an_unknown_score_is_refused():
    with pytest.raises(OpplanError, match="unknown cut score 'speed'"):
        refine_cut(None, 1, "dualpipe", 2, 4, [], None, deadline_s=0.0, score="speed")  # type: ignore[arg-type]


def test_the_first_of_equally_short_schedules_is_the_cut_s_reference():
    first = one_f_one_b(2, 4)
    twin = Schedule(first.actions, first.num_stages, first.num_microbatches, first.stage_to_device, "twin")
    got = evaluate_cut(chain_costs(), "1f1b", 2, 4, [first, twin], None)
    assert got is not None and got.schedule.name == "1f1b"
    shorter = evaluate_cut(chain_costs(), "1f1b", 2, 4, [first, gpipe(2, 4)], None)
    assert shorter is not None and shorter.schedule.name == "gpipe"  # 234 ticks against 1F1B's 243, no cap
    assert shorter.makespan_tick == 234
    assert evaluate_cut(chain_costs(), "1f1b", 2, 4, [first], 0) is None  # nothing fits a cap of 0


def test_a_search_where_nothing_fits_keeps_the_start_cut():
    mc = chain_costs()
    got = refine_cut(mc, 1, "1f1b", 2, 4, [one_f_one_b(2, 4)], 0, deadline_s=float("inf"))
    assert got.costs is mc and got.best is None and got.start_makespan_tick is None
    assert (got.evaluations, got.moves_kept, got.chain_moves_kept) == (1, 0, 0)
    assert 0 <= got.seconds < 60


def test_chain_moves_weigh_each_op_as_forward_plus_backward_plus_weight_gradient():
    # without per-op training costs B = W = F: three times the forward ticks, on the device of the op's piece
    assert op_work_ticks(chain_costs(), 1, [0, 1]) == (3, 6, 9, 12, 15, 18)


def test_work_over_devices_counts_each_stage_s_cheaper_backward():
    # a fused BW of 3 ticks is cheaper than B + W = 4: each micro-batch costs F + 3 per stage
    fused = StageCost(2, 3, 1, full_backward_tick=3)
    pipe = TrainingPipeline((fused, fused), 4, 2, (0, 1), ((0, 1),))
    assert any_cut_bound_tick(chain_costs(), pipe) == (2 + 3) * 2 * 4 // 2
    slow = StageCost(2, 3, 1, full_backward_tick=9)  # B + W = 4 is cheaper than this BW
    assert any_cut_bound_tick(chain_costs(), TrainingPipeline((slow, slow), 4, 2, (0, 1), ((0, 1),))) == 24
    odd = TrainingPipeline((fused,), 3, 2, (0,), ((0,),))  # 15 ticks over 2 devices: 8 (rounded up)
    assert any_cut_bound_tick(chain_costs(), odd) == 8
    assert any_cut_bound_tick(chain_costs(), TrainingPipeline((fused,), 3, 2, (0,), ((0,),), fb_overlap=0.5)) is None


def test_the_search_returns_the_cut_of_its_one_kept_move():
    # 1F1B on the chain: moving op 3 to the first stage (10 | 11 ticks of forward) replays 231 ticks, from 243
    got = refine_cut(chain_costs(), 1, "1f1b", 2, 4, [one_f_one_b(2, 4)], None, deadline_s=float("inf"),
                     max_evaluations=3)
    assert (got.moves_kept, got.evaluations, got.start_makespan_tick) == (1, 3, 243)
    assert got.best is not None and got.best.makespan_tick == 231
    assert got.costs.cut(1) == ((0, 1, 2, 3), (4, 5))
    kept_none = refine_cut(chain_costs(), 1, "1f1b", 2, 4, [one_f_one_b(2, 4)], None, deadline_s=float("inf"),
                           max_evaluations=2)
    assert kept_none.moves_kept == 0 and kept_none.costs.cut(1) == ((0, 1, 2), (3, 4, 5))
