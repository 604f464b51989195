"""The planned pipeline's cut search (planner/compare/cut_search.py) on the bundled MoE: every move keeps a valid
stage cut, the search never returns a longer schedule than it started from, and it repairs a cut made uneven on
purpose."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from instances import moe_model_costs, uneven_cut

from planner.compare.compare_policy import ComparePolicy
from planner.compare.cut_search import (
    chain_move,
    chain_moves,
    descend_cut,
    evaluate_cut,
    op_work_ticks,
    refine_cut,
    single_moves,
    with_cut,
)
from planner.pipeline.registry import GENERATORS

P, M = 4, 4
STEP_OPS = ComparePolicy().cut_step_ops  # the move sizes of the default policy


@pytest.fixture(scope="module")
def costs():
    return moe_model_costs(P)


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
        moves = single_moves(cut, range(len(cut)))
        if not moves:
            break
        cut = moves[choice % len(moves)]
        _assert_valid_cut(costs, cut)


def test_refine_repairs_an_uneven_cut_and_never_gets_worse(costs):
    uneven = with_cut(costs, 1, uneven_cut(costs, 12))
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
    uneven = with_cut(costs, 1, uneven_cut(costs, 12))
    for c in (costs, uneven):
        best = evaluate_cut(c, "1f1b", P, M, refs, None)
        assert best is not None
        bound = any_cut_bound_tick(c, best.pipeline)
        assert bound is not None and 0 < bound <= best.makespan_tick
    # the same for both cuts: the work of an op does not depend on its piece (identical devices)
    assert any_cut_bound_tick(costs, costs.pipeline("1f1b", P, M)) == \
        any_cut_bound_tick(uneven, uneven.pipeline("1f1b", P, M))


# --- chain moves: several boundaries at once, so a light end piece gains work in one move ---

def _valid_positions_cut(cut, n: int, edges) -> bool:
    """`cut` covers positions 0..n-1 once, in runs of consecutive positions, no piece empty, and every edge (u, v)
    of positions goes from a piece to the same or a later one."""
    if [i for piece in cut for i in piece] != list(range(n)) or not all(cut):
        return False
    piece_of = {i: c for c, piece in enumerate(cut) for i in piece}
    return all(piece_of[u] <= piece_of[v] for u, v in edges)


@st.composite
def _small_models(draw):
    """A random small model: n ops in topological order (edges u -> v with u < v), a work per op, and a cut of it
    into runs of consecutive positions."""
    n = draw(st.integers(min_value=3, max_value=40))
    pieces = draw(st.integers(min_value=3, max_value=min(n, 10)))
    bounds = sorted(draw(st.sets(st.integers(min_value=1, max_value=n - 1), min_size=pieces - 1,
                                 max_size=pieces - 1)))
    starts = [0, *bounds, n]
    cut = tuple(tuple(range(starts[c], starts[c + 1])) for c in range(pieces))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda e: e[0] < e[1]),
                          max_size=3 * n))
    work = draw(st.lists(st.integers(min_value=0, max_value=50), min_size=n, max_size=n))
    return n, cut, edges, work


@settings(max_examples=200, deadline=None)
@given(model=_small_models(), choices=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=8))
def test_chain_moves_keep_a_valid_cut_on_random_small_models(model, choices):
    n, cut, edges, work = model
    assert _valid_positions_cut(cut, n, edges)
    every = range(len(cut))
    for choice in choices:
        moves = list(chain_moves(cut, every, every, work))
        if not moves:
            break
        new = moves[choice % len(moves)]
        assert _valid_positions_cut(new, n, edges)
        # only the pieces from the source to the target change, and the ends of the chain are the ones that
        # lose and gain ops
        changed = [c for c in every if new[c] != cut[c]]
        assert len(changed) >= 3 and changed == list(range(changed[0], changed[-1] + 1))
        first, last = (len(new[c]) - len(cut[c]) for c in (changed[0], changed[-1]))
        assert (first < 0 < last and -first in STEP_OPS) or (last < 0 < first and -last in STEP_OPS)
        cut = new


@settings(max_examples=30, deadline=None)
@given(choices=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=12),
       split=st.sampled_from([1, 2]))
def test_chain_moves_keep_a_valid_cut_on_the_moe(costs, choices, split):
    cut = costs.cut(split)
    work = op_work_ticks(costs, split, list(range(len(cut))) if split == 1 else [c // 2 for c in range(len(cut))])
    every = range(len(cut))
    for choice in choices:
        moves = list(chain_moves(cut, every, every, work))
        if not moves:
            break
        cut = moves[choice % len(moves)]
        _assert_valid_cut(costs, cut)


def test_a_chain_passes_on_the_work_it_received():
    # piece 2 gives its first op (work 3) to piece 1, which passes on its first ops closest to 3 (1 + 2) to piece 0
    cut = ((0, 1), (2, 3, 4, 5), (6, 7, 8))
    work = [1, 1, 1, 2, 5, 1, 3, 1, 1]
    assert chain_move(cut, 2, 0, 1, work) == ((0, 1, 2, 3), (4, 5, 6), (7, 8))
    # upwards: piece 0 gives its last op (work 1) on; piece 1 passes on its last op (work 1)
    assert chain_move(cut, 0, 2, 1, work) == ((0,), (1, 2, 3, 4), (5, 6, 7, 8))
    assert chain_move(cut, 0, 1, 1, work) is None  # a neighbour: that is a single move
    assert chain_move(cut, 0, 2, 2, work) is None  # piece 0 would be left empty


def _bottleneck(work, devices_of_piece):
    """A hand-built evaluation: the makespan of a cut is its busiest device's work (every piece on its devices)."""
    p = 1 + max(d for ds in devices_of_piece for d in ds)

    def evaluate(cut):
        load = [0] * p
        for c, piece in enumerate(cut):
            for d in devices_of_piece[c]:
                load[d] += sum(work[i] for i in piece)
        return max(load), tuple(load)
    return evaluate


def test_a_chain_move_reaches_a_cut_no_single_move_improves_towards():
    # unit work, pieces of 2, 10, 11, 10 ops on devices 0..3: the busiest piece's neighbours are one op short of it,
    # so every single move leaves a device at 11 or more; the chain 2 -> 1 -> 0 gives device 0 one op: 3, 10, 10, 10
    sizes = (2, 10, 11, 10)
    starts = [sum(sizes[:c]) for c in range(len(sizes) + 1)]
    cut = tuple(tuple(range(starts[c], starts[c + 1])) for c in range(len(sizes)))
    work = [1] * starts[-1]
    devices = [frozenset({c}) for c in range(len(sizes))]
    evaluate = _bottleneck(work, devices)
    start = evaluate(cut)
    assert start[0] == 11
    assert all(evaluate(c)[0] >= 11 for c in single_moves(cut, range(len(cut))))  # a local optimum of single moves

    def descend(chain, **kw):
        return descend_cut(cut, start, evaluate, lambda e: e[0], lambda e: e[1], devices, work, chain=chain,
                           deadline_s=time.monotonic() + 60, max_evaluations=kw.get("max_evaluations", 400))

    alone = descend(False)
    assert alone.kept == 0 and alone.cut == cut and alone.best == start
    got = descend(True)
    assert got.best[0] == 10 and got.chain_kept == 1 and got.kept == 1
    # the largest step first: piece 2 gives 8 ops, piece 1 passes 8 on, the light end piece gains them
    assert [len(piece) for piece in got.cut] == [10, 10, 3, 10]
    assert _valid_positions_cut(got.cut, len(work), [])
    assert descend(True) == got  # deterministic
    # evaluations count against the budget, chain moves included
    few = descend(True, max_evaluations=5)
    assert few.evaluations <= 5 and few.best == start


def test_a_chain_move_gives_dualpipes_end_devices_work():
    # DualPipe on 6 devices: piece c on devices c and 5-c, so devices {0, 5} run pieces 0 and 5, {1, 4} pieces 1
    # and 4, {2, 3} pieces 2 and 3.  Loads 4 / 21 / 22: a single move out of piece 2 or 3 makes {1, 4} 22 (or
    # leaves the work on {2, 3}), so single moves stall; a chain 2 -> 1 -> 0 gives the end devices work.
    sizes = (2, 10, 11, 11, 11, 2)
    starts = [sum(sizes[:c]) for c in range(len(sizes) + 1)]
    cut = tuple(tuple(range(starts[c], starts[c + 1])) for c in range(len(sizes)))
    work = [1] * starts[-1]
    devices = [frozenset({c, len(sizes) - 1 - c}) for c in range(len(sizes))]
    evaluate = _bottleneck(work, devices)
    start = evaluate(cut)
    assert start[0] == 22

    def descend(chain):
        return descend_cut(cut, start, evaluate, lambda e: e[0], lambda e: e[1], devices, work, chain=chain,
                           deadline_s=time.monotonic() + 60, max_evaluations=400)

    assert descend(False).best == start
    got = descend(True)
    assert got.best[0] < 22 and got.chain_kept >= 1  # and once the chain has moved, single moves go on from there
    assert got.best[1][0] == got.best[1][5] > 4  # the end devices gained work
    assert _valid_positions_cut(got.cut, len(work), [])


def test_refine_with_chain_moves_is_deterministic_and_never_longer_than_single_moves(costs):
    refs = [GENERATORS["1f1b"](P, M)]
    uneven = with_cut(costs, 1, uneven_cut(costs, 12))
    far = time.monotonic() + 600  # the evaluation budget, not the clock, ends these searches

    def run(chain):
        return refine_cut(uneven, 1, "1f1b", P, M, refs, None, deadline_s=far, max_evaluations=40, chain=chain)

    single, chained, again = run(False), run(True), run(True)
    assert single.best is not None and chained.best is not None and again.best is not None
    assert chained.best.makespan_tick <= single.best.makespan_tick
    assert chained.costs.stage_positions == again.costs.stage_positions
    assert chained.best.makespan_tick == again.best.makespan_tick and chained.evaluations == again.evaluations
    assert single.chain_moves_kept == 0 and single.evaluations <= 40 and chained.evaluations <= 40
    _assert_valid_cut(costs, chained.costs.stage_positions)


def test_single_moves_carry_the_step_sizes_they_are_given() -> None:
    cut = (tuple(range(10)), (10, 11, 12))
    assert single_moves(cut, [0], steps=(3,)) == [(tuple(range(7)), (7, 8, 9, 10, 11, 12))]
    # the default policy's sizes, largest first: one move per size that leaves piece 0 an op
    assert [len(c[1]) - 3 for c in single_moves(cut, [0])] == list(STEP_OPS)
