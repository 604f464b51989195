"""The bound over every cut of the planned row's placements (planner/compare/cut_bound.py): checked
against brute force over every cut of small models (it is at most every cut's own head-and-work bound, computed on
the unrolled pipeline, and the search finds the least max_i T_i), and stronger than work / devices on the MoE."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from instances import make_instance, moe_model_costs

from formulations.pipeline import device_of
from planner.compare.compare_policy import ComparePolicy
from planner.compare.cut_bound import (
    every_cut_bound_tick,
    family_best_cut,
    family_cut_bound_tick,
    family_terms,
    op_arrays,
)
from planner.compare.cut_search import any_cut_bound_tick, with_cut
from planner.compare.model_costs import ModelCosts
from planner.pipeline.registry import Scales
from planner.pipeline.unroll import unroll_actions

REPO = Path(__file__).resolve().parents[1]
REL_TOL = ComparePolicy().cut_bound_rel_tol  # the search's precision, the default policy's

_PIPELINE = {"dualpipe": ("dualpipe", 1), "v": ("opplan-v", 2)}


def _small_costs(forward: list[int], skips: list[tuple[int, int]], p: int, latency: int) -> ModelCosts:
    """A chain of ops (plus skip edges) on p identical devices, every edge 8 bytes at `latency` + 1 byte/tick,
    cut at first into pieces of one op (the cut is replaced by every test)."""
    n = len(forward)
    edges = [(i, i + 1, 0, 8) for i in range(n - 1)] + [(u, v, 0, 4) for u, v in skips]
    inst = make_instance("small", [[f] * p for f in forward], edges, latency=[0, latency], bandwidth=[np.inf, 1.0])
    single = tuple((i,) for i in range(n))
    return ModelCosts(inst, p, single[:p], single[:2 * p], ticks_per_unit=1)


def _cuts(n: int, k: int):
    """Every cut of positions 0..n-1 into k non-empty runs, as boundaries (0, x_1, ..., n)."""
    for inner in itertools.combinations(range(1, n), k - 1):
        yield (0, *inner, n)


def _pieces(bounds) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(range(bounds[j], bounds[j + 1])) for j in range(len(bounds) - 1))


def _head_work_bound(pipeline) -> int:
    """Per device of the unrolled pipeline, max over thresholds h of h + the ticks of its compute tasks whose head
    (longest path into them, communication included) is at least h; the largest over devices.  A lower bound on
    every schedule of that pipeline, computed here independently of the module under test."""
    inst = unroll_actions(pipeline).instance
    device = device_of(inst)
    dur = [int(inst.duration_tick[t, device[t]]) for t in range(inst.num_tasks)]
    head = [0] * inst.num_tasks
    for t in inst.topological_order:
        for u, e in inst.predecessors[t]:
            head[t] = max(head[t], head[u] + dur[u] + inst.comm(e, device[u], device[t]))
    best = 0
    for d in range(pipeline.num_devices):
        on = [t for t in range(inst.num_tasks) if device[t] == d]
        for h in {head[t] for t in on}:
            best = max(best, h + sum(dur[t] for t in on if head[t] >= h))
    return best


@st.composite
def _models(draw):
    n = draw(st.integers(min_value=4, max_value=9))
    forward = draw(st.lists(st.integers(min_value=1, max_value=30), min_size=n, max_size=n))
    skips = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda e: e[0] + 1 < e[1]),
                          max_size=3, unique=True))
    latency = draw(st.integers(min_value=0, max_value=10))
    return forward, skips, latency


@settings(max_examples=25, deadline=None)
@given(model=_models(), family=st.sampled_from(["dualpipe", "v"]))
def test_the_bound_is_the_least_over_every_cut_and_below_each_cuts_own_bound(model, family):
    forward, skips, latency = model
    p, m = 2, 4
    costs = _small_costs(forward, skips, p, latency)
    name, split = _PIPELINE[family]
    k = p * split
    got = family_cut_bound_tick(costs, family, p, m)
    assert got is not None
    least_terms, least_own = None, None
    for bounds in _cuts(len(forward), k):
        at = with_cut(costs, split, _pieces(bounds))
        terms = max(family_terms(at, family, p, m, bounds))
        own = _head_work_bound(at.pipeline(name, p, m))
        assert terms <= own  # the module's T_i never exceed what the unrolled pipeline proves for that cut
        least_terms = terms if least_terms is None else min(least_terms, terms)
        least_own = own if least_own is None else min(least_own, own)
    assert least_terms is not None and least_own is not None
    # valid: at most the least of every cut's own bound; exact up to the search's tolerance
    assert got <= least_own
    assert least_terms * (1 - REL_TOL) - 1 <= got <= least_terms
    # the cut it names meets the least value (within the tolerance)
    best = family_best_cut(costs, family, p, m)
    assert best is not None and len(best) == k + 1 and best[0] == 0 and best[-1] == len(forward)
    assert all(a < b for a, b in zip(best, best[1:], strict=False))
    assert max(family_terms(costs, family, p, m, best)) <= least_terms * (1 + REL_TOL) + 1


def test_four_devices_brute_force():
    # p = 4: DualPipe's 4 stages and the V's 8 chunks, every cut of 10 ops, skip edges and latency
    forward = [5, 9, 2, 7, 7, 3, 11, 4, 6, 8]
    costs = _small_costs(forward, [(0, 3), (2, 6), (5, 9)], 4, 3)
    for family in ("dualpipe", "v"):
        name, split = _PIPELINE[family]
        least = min(max(family_terms(costs, family, 4, 8, b)) for b in _cuts(len(forward), 4 * split))
        got = family_cut_bound_tick(costs, family, 4, 8)
        assert got is not None and least * (1 - REL_TOL) - 1 <= got <= least
        for b in itertools.islice(_cuts(len(forward), 4 * split), 0, None, 7):
            assert got <= _head_work_bound(with_cut(costs, split, _pieces(b)).pipeline(name, 4, 8))


@pytest.fixture(scope="module")
def moe():
    return moe_model_costs(4)


def test_stronger_than_work_over_devices_on_the_moe(moe):
    p, m = 4, 8
    bound, per_family = every_cut_bound_tick(moe, p, m)
    any_cut = any_cut_bound_tick(moe, moe.pipeline("dualpipe", p, m))
    assert bound is not None and any_cut is not None
    assert set(per_family) == {"dualpipe", "v"} and bound == min(v for v in per_family.values() if v is not None)
    assert bound > any_cut  # the heads: the far devices cannot start at once
    # and below the baselines' own cut's terms (one of the cuts it minimises over)
    cut = (0, *(moe.stage_positions[s][-1] + 1 for s in range(p)))
    assert bound <= max(family_terms(moe, "dualpipe", p, m, cut))


def test_no_bound_where_the_argument_fails(moe):
    import dataclasses

    assert family_cut_bound_tick(dataclasses.replace(moe, fb_overlap=0.5), "v", 4, 8) is None  # pairs gain
    assert every_cut_bound_tick(moe, 3, 6)[1].keys() == {"v"}  # no DualPipe placement at odd p


def test_plan_compare_reports_it_beside_work_over_devices(moe):
    from planner.compare.pipelines import compare

    p, m = 4, 8
    cmp = compare(p, m, moe, schedules=("dualpipe",), opplan_placement="dualpipe", time_limit_s=6)
    opp = cmp.row("opplan")
    assert opp.figures is not None
    cut, note = opp.notes["cut"], opp.notes["every_cut"]
    assert isinstance(cut, dict) and isinstance(note, dict)
    every, any_cut = note["bound_units"], cut["any_cut_bound_units"]
    assert every == every_cut_bound_tick(moe, p, m)[0] / cmp.scales.ticks_per_unit
    assert any_cut < every <= opp.figures.makespan_tick / cmp.scales.ticks_per_unit
    assert set(note["by_placement_units"]) == {"dualpipe", "v"}
    assert "bound over every cut of the dualpipe and v placements" in cmp.table()
    from experiments.bench_pipeline import _rows  # the bench CSV's column, beside bound_any_cut

    planned = [r for r in _rows("moe", p, m, cmp, "us", "MiB") if r["schedule"] == "opplan"]
    assert planned[0]["bound_every_cut"] == round(every, 4) and planned[0]["bound_any_cut"] == round(any_cut, 4)


def test_on_the_preset_below_its_baselines_and_its_own_cut():
    from planner.compare.pipelines import simulate_baseline
    from planner.compare.presets import preset_costs
    from planner.ir.hardware import load_topology

    hw = REPO / "hardware_profiles" / "h100-2x8-ib.yaml"
    p, m = 4, 8
    costs = preset_costs("deepseek-v3", load_topology(hw), p, num_layers=8)
    bound, per_family = every_cut_bound_tick(costs, p, m)
    assert bound is not None and set(per_family) == {"dualpipe", "v"}
    cut = (0, *(costs.stage_units[s][-1] + 1 for s in range(p)))
    assert bound <= max(family_terms(costs, "dualpipe", p, m, cut))
    scales = Scales(costs.ticks_per_unit, costs.bytes_per_unit)
    for name in ("dualpipe", "zb-v", "dualpipev", "1f1b"):
        row = simulate_baseline(name, p, m, costs, scales)
        assert row.figures is not None and bound <= row.figures.makespan_tick


def test_on_the_preset_with_measured_op_times_it_reads_those_times():
    """The bound prices each unit as the pipeline does: on the op times one H200 measured (about twice the
    roofline's) it stays at or above work / devices of that pipeline (within the per-unit rounding), where the
    roofline's prices would put it far below."""
    from planner.compare.presets import load_op_times, preset_costs
    from planner.ir.hardware import load_topology

    hw = REPO / "hardware_profiles" / "h100-2x8-ib.yaml"
    times = load_op_times(REPO / "experiments" / "measured" / "h200_preset_fbw.csv")
    p, m = 4, 8
    measured = preset_costs("deepseek-v3", load_topology(hw), p, num_layers=8, op_times=times)
    roofline = preset_costs("deepseek-v3", load_topology(hw), p, num_layers=8)
    bound, _ = every_cut_bound_tick(measured, p, m)
    pipe = measured.pipeline("dualpipe", p, m)
    per_microbatch = sum(int(s.forward_tick) + int(s.input_grad_tick) + int(s.weight_grad_tick) for s in pipe.stages)
    work = per_microbatch * int(pipe.num_microbatches)
    assert bound is not None and bound >= 0.99 * work / p
    f_measured, _ = op_arrays(measured)
    f_roofline, _ = op_arrays(roofline)
    assert f_measured.sum() * measured.tick_s > 1.2 * f_roofline.sum() * roofline.tick_s
