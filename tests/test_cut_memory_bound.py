"""The bound over every cut with the memory cap (planner/compare/cut_memory_bound.py): never above the optimum
CP-SAT proves for any cut of a small model under the cap (every cut of both families, brute force), its terms
exact on a hand-computed case, never below `cut_bound`'s value, and above it where the cap serialises the round
trips."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from instances import make_instance

from formulations.pipeline import solve_pipeline
from planner.compare.cut_bound import family_cut_bound_tick, family_terms
from planner.compare.cut_memory_bound import (
    _stash_tables,
    every_cut_memory_bound_tick,
    family_cut_memory_bound_tick,
    memory_terms,
    work_upper_tick,
)
from planner.compare.cut_search import with_cut
from planner.compare.model_costs import ModelCosts
from planner.errors import InfeasibleError
from planner.schedule.plan import PlanStatus
from tests.test_cut_bound import _cuts, _pieces

_PIPELINE = {"dualpipe": ("dualpipe", 1), "v": ("opplan-v", 2)}


def _costs(forward: list[int], acts: list[int], params: list[int], p: int, latency: int = 0) -> ModelCosts:
    """A chain of ops on p identical devices (the stage rule B = W = F; each op's output its stash), every edge
    `latency` ticks; the cut is replaced by every test."""
    n = len(forward)
    edges = [(i, i + 1, 0, 0) for i in range(n - 1)]
    inst = make_instance("small", [[f] * p for f in forward], edges, latency=[0, latency], acts=acts, params=params)
    single = tuple((i,) for i in range(n))
    return ModelCosts(inst, p, single[:p], single[:2 * p], ticks_per_unit=1)




def test_hand_computed_terms_where_the_cap_binds():
    # V on 2 devices, one op per chunk (the only cut of 4 ops), F = B = W = (1, 5, 5, 1), 10 bytes per op, cap 20,
    # no hops, c = m = 4.  Piece 0: round trip L = 2 x 12 = 24, two micro-batches fit (A = 2), so q = 2 classes:
    # max(0 + 2 x 24 + 0, 0 + 2 x (24 + 1)) = 50.  Piece 1: head 1, L = 2 x 11 = 22, back 1: max(1 + 44 + 1,
    # 1 + 2 x 27) = 55.  Piece 2: head 6, L = 12, back 6: max(6 + 24 + 6, 6 + 2 x 17) = 40.  Piece 3: head 11,
    # L = 2, back 11: max(11 + 4 + 11, 11 + 2 x 3) = 26.  cut_bound's terms: device 0 max(0 + 4 x 6, 11 + 4 x 3)
    # = 24, device 1 max(1 + 4 x 30, 6 + 4 x 15) = 121: the work dominates at m = 4
    costs = _costs([1, 5, 5, 1], [10] * 4, [0] * 4, 2)
    cut = (0, 1, 2, 3, 4)
    assert memory_terms(costs, "v", 2, 4, 20, cut) == [50, 55, 40, 26]
    assert family_terms(costs, "v", 2, 4, cut) == [24, 121]
    # the memory of one device: at m = 8 (c = 8, 4 classes) piece 1's term 1 + 4 x 27 = 109 stays below its
    # device's work 1 + 8 x 30 = 241; with the cap at 10 (one micro-batch: 8 classes) piece 1 reaches
    # 1 + 8 x 27 = 217, piece 0 8 x 25 = 200
    assert memory_terms(costs, "v", 2, 8, 10, cut)[:2] == [200, 217]
    # a piece whose parameters leave no room for one activation: inf, and no cut fits
    heavy = _costs([1, 5, 5, 1], [10] * 4, [15, 0, 0, 0], 2)
    assert memory_terms(heavy, "v", 2, 4, 20, cut)[0] == math.inf
    assert family_cut_memory_bound_tick(heavy, "v", 2, 4, 20) == math.inf


def test_it_rises_above_cut_bound_where_the_round_trips_bind():
    # light ends, heavy middle: the first and last pieces carry little work, but their round trip is the whole
    # model, and the cap holds one micro-batch of every piece
    costs = _costs([1, 1, 6, 6, 6, 6, 1, 1], [10] * 8, [0] * 8, 2)
    plain = family_cut_bound_tick(costs, "v", 2, 6)
    got = family_cut_memory_bound_tick(costs, "v", 2, 6, 10)
    brute = min(max(*memory_terms(costs, "v", 2, 6, 10, b), *family_terms(costs, "v", 2, 6, b))
                for b in _cuts(8, 4))
    assert plain is not None and got is not None
    assert plain < got == brute  # exact on this scale (the search's tolerance is below a tick)
    # no cap that binds: cut_bound's value
    assert family_cut_memory_bound_tick(costs, "v", 2, 6, 10**6) == plain


_CASES = [  # forward ticks, activation bytes, parameter bytes per op, m, cap, hop latency
    ([2, 1, 3, 1, 2, 2], [4, 6, 3, 5, 2, 4], [1, 0, 2, 0, 1, 1], 4, 16, 0),
    ([1, 3, 1, 2, 3, 1], [5, 2, 6, 4, 3, 5], [0, 1, 0, 2, 0, 1], 4, 18, 1),
    ([3, 1, 1, 1, 1, 3], [6, 6, 6, 6, 6, 6], [0, 0, 0, 0, 0, 0], 2, 18, 0),
]


@pytest.mark.parametrize("case", _CASES)
def test_never_above_the_optimum_of_any_cut_under_the_cap(case):
    """Brute force: CP-SAT's optimum of every cut of both families under the cap (micro-batches in any order) is
    at least that cut's memory terms and at least the bound; a cut with an infinite term has no schedule."""
    forward, acts, params, m, cap, latency = case
    p, n = 2, len(forward)
    costs = _costs(forward, acts, params, p, latency)
    proven = 0
    for family, (name, split) in _PIPELINE.items():
        got = family_cut_memory_bound_tick(costs, family, p, m, cap)
        assert got is not None
        least = math.inf
        for bounds in _cuts(n, p * split):
            pipe = with_cut(costs, split, _pieces(bounds)).pipeline(name, p, m)
            terms = memory_terms(costs, family, p, m, cap, bounds)
            try:
                solved = solve_pipeline(pipe, cap, fifo=False, time_limit_s=20, threads=2)
            except InfeasibleError:  # one micro-batch does not fit beside the parameters
                continue
            if solved.status is PlanStatus.INFEASIBLE:
                continue
            assert solved.status is PlanStatus.OPTIMAL
            span = solved.timeline.makespan_tick
            assert max(terms) <= span, (family, bounds, terms, span)
            least = min(least, span)
            proven += 1
        assert got <= least, (family, got, least)
    assert proven >= 4  # the caps leave cuts that fit: the check is not vacuous


def test_stash_tables_match_the_training_costs_per_piece():
    """The incremental union equals `TrainingCosts.stage_activation_bytes` on every piece of a real export."""
    from planner.cost.training_costs import training_costs
    from planner.ir.hardware import load_topology
    from planner.prepare import prepare

    repo = Path(__file__).resolve().parents[1]
    prepared = prepare(repo / "planner" / "data" / "models" / "moe.onnx",
                       load_topology(repo / "hardware_profiles" / "h100-8-nvlink.yaml"))
    inst = prepared.instance
    tr = training_costs(prepared.graph, prepared.topology, inst)
    order = list(inst.topological_order)[:40]
    act, act_w = _stash_tables(tr, order)
    assert act.max() > 0 and (act_w < act).any()  # stashes, some freed by B
    rng = np.random.default_rng(0)
    for lo, hi in {tuple(sorted(rng.choice(41, 2, replace=False))) for _ in range(60)}:
        total, freed = tr.stage_activation_bytes([order[i] for i in range(lo, hi)])
        assert (act[lo, hi], act_w[lo, hi]) == (total, total - freed)


def test_every_family_and_the_work_bound():
    costs = _costs([1, 1, 6, 6, 6, 6, 1, 1], [10] * 8, [0] * 8, 2)
    bound, per = every_cut_memory_bound_tick(costs, 2, 6, 10)
    assert set(per) == {"dualpipe", "v"} and bound == min(v for v in per.values() if v is not None)
    assert work_upper_tick(costs, 2, 6) == 6 * 3 * 28  # the stage rule: every cut's work exactly


def test_the_work_bound_is_above_every_baselines_work_on_the_preset():
    """A preset rounds each piece's seconds up: any cut's work is at most the units' rounded-up ticks; the
    baselines' work (p x makespan - bubble) on their cuts stays at or below it, and not far."""
    from planner.compare.pipelines import simulate_baseline
    from planner.compare.presets import preset_costs
    from planner.ir.hardware import load_topology
    from planner.pipeline.registry import Scales

    repo = Path(__file__).resolve().parents[1]
    p, m = 4, 8
    costs = preset_costs("deepseek-v3", load_topology(repo / "hardware_profiles" / "h100-2x8-ib.yaml"), p,
                         num_layers=8)
    upper = work_upper_tick(costs, p, m)
    assert upper is not None
    for name in ("dualpipe", "zb-v", "1f1b"):
        fig = simulate_baseline(name, p, m, costs, Scales(costs.ticks_per_unit, costs.bytes_per_unit)).figures
        assert fig is not None
        work = p * fig.makespan_tick - fig.bubble_tick
        assert upper * 0.99 <= work <= upper


def test_plan_compare_notes_it_and_the_bench_reports_it():
    from instances import moe_model_costs

    from experiments.bench_pipeline import _rows
    from planner.compare.pipelines import compare

    moe = moe_model_costs(4)
    p, m = 4, 8
    cmp = compare(p, m, moe, schedules=("dualpipe",), opplan_placement="dualpipe", time_limit_s=6)
    opp = cmp.row("opplan")
    note = opp.notes["every_cut_memory"]
    assert isinstance(note, dict) and cmp.memory_cap_units is not None
    cap = round(cmp.memory_cap_units * cmp.scales.bytes_per_unit)
    got, _ = every_cut_memory_bound_tick(moe, p, m, cap)
    assert got is not None and note["bound_units"] == got / cmp.scales.ticks_per_unit
    assert note["bound_units"] >= opp.notes["every_cut"]["bound_units"]  # type: ignore[index]
    assert opp.figures is not None and got <= opp.figures.makespan_tick  # a schedule within the cap
    assert note["half_bubble_unreachable"] is (got > note["half_bubble_units"] * cmp.scales.ticks_per_unit)
    planned = [r for r in _rows("moe", p, m, cmp, "us", "MiB") if r["schedule"] == "opplan"]
    assert planned[0]["bound_every_cut_memory"] == round(note["bound_units"], 4)
    assert planned[0]["half_bubble_unreachable_every_cut"] == note["half_bubble_unreachable"]


@pytest.mark.parametrize("cap", [16, 22, 40])
def test_the_search_finds_the_least_over_every_cut(cap):
    """The nested-pairs search against every cut's max(T_i, M_j), on more pairs than one (V at p = 3: three
    pairs; DualPipe at p = 4: two), with skipped latency and a cap that binds on some cuts."""
    from planner.compare.compare_policy import ComparePolicy

    tol = ComparePolicy().cut_bound_rel_tol
    costs = _costs([1, 1, 6, 6, 2, 6, 6, 1, 1], [10, 3, 5, 7, 9, 2, 4, 6, 8], [0, 1, 0, 2, 0, 1, 0, 0, 1], 4, 1)
    for family, p, k in (("v", 3, 6), ("dualpipe", 4, 4)):
        m = 6
        least = min(max(*family_terms(costs, family, p, m, b), *memory_terms(costs, family, p, m, cap, b))
                    for b in _cuts(9, k))
        got = family_cut_memory_bound_tick(costs, family, p, m, cap)
        assert got is not None
        if math.isinf(least):
            assert math.isinf(got)
        else:
            assert least * (1 - tol) - 1 <= got <= least
