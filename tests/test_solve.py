"""The planner's entry points (`planner.solve`) and the bottleneck decomposition (`planner.decompose`).

Fast tests use budgets of a few seconds and assert no speed; the acceptance run on the two real models at the
default 60 s budget is marked `slow`.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
from brute_force import brute_force_makespan, random_instance

from formulations.model_api import SolveParams
from planner.cost.instance import SchedulingInstance
from planner.decompose import bottleneck_tasks, decompose_and_solve, induced_instance, segments
from planner.heuristics.list_schedule import heft
from planner.prepare import prepare
from planner.schedule.validate import validate_plan
from planner.search.policy import SearchPolicy
from planner.solve import Method, SolveOptions, plan_instance

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
H100 = REPO / "hardware_profiles" / "h100-8-nvlink.yaml"
CPU4 = REPO / "hardware_profiles" / "cpu-4.yaml"


def _light_inception() -> Path:
    import onnx

    return Path(os.path.dirname(onnx.__file__)) / "backend/test/data/light/light_inception_v1.onnx"


def _prepared(model: Path, profile: Path = H100):
    from planner.ir.hardware import load_topology

    return prepare(model, load_topology(profile))


def _bottleneck_by_definition(inst: SchedulingInstance) -> list[int]:
    """Every other task is an ancestor or a descendant (sets built naively)."""
    n = inst.num_tasks
    desc = [set() for _ in range(n)]
    for t in reversed(inst.topological_order):
        for v, _ in inst.successors[t]:
            desc[t] |= {v} | desc[v]
    anc = [{u for u in range(n) if t in desc[u]} for t in range(n)]
    return [t for t in inst.topological_order if len(anc[t]) + len(desc[t]) == n - 1]


# Two fork-joins in a row on 2 identical devices, every transfer 2 ticks:
#     s(1) -> {x1(4), y1(4)} -> m(1) -> {x2(4), y2(4)} -> t(1),   plus a skip edge s -> t (0 extra delay).
# One fork-join alone: with x, y on one device the join starts at 1 + 8; otherwise one branch runs on a device
# other than s's, so it starts at 1 + 2 = 3 and ends at 7, and the other branch (ending >= 5) reaches it by 7:
# the join starts at 7 at best, span 8 (s [0,1] p0, x p0 [1,5], y p1 [3,7], j p1 [7,8]).  Chained through m the
# optimum is 8 + 8 - 1 = 15: (s p0 [0,1], x1 p0 [1,5], y1 p1 [3,7], m p1 [7,8], x2 p1 [8,12], y2 p0 [10,14],
# t p0 [14,15]; s -> t arrives at 3).  The trivial bound is only max(1+4+1+4+1, 19/2) = 11; the decomposition at
# m proves 15.
FORK_JOINS = SchedulingInstance.uniform(
    "fork-joins", [1, 4, 4, 1, 4, 4, 1],
    [(0, 1, 2), (0, 2, 2), (1, 3, 2), (2, 3, 2), (3, 4, 2), (3, 5, 2), (4, 6, 2), (5, 6, 2), (0, 6, 2)], 2,
    task_names=["s", "x1", "y1", "m", "x2", "y2", "t"])


def test_bottlenecks_include_those_a_skip_edge_jumps_over() -> None:
    assert bottleneck_tasks(FORK_JOINS) == [0, 3, 6] == _bottleneck_by_definition(FORK_JOINS)
    segs = segments(FORK_JOINS)
    assert [s.tasks for s in segs] == [(0, 1, 2, 3), (3, 4, 5, 6)]
    assert [(s.first, s.last) for s in segs] == [(None, 3), (3, None)]


def test_above_the_policys_exact_size_the_linear_rule_misses_a_jumped_bottleneck() -> None:
    # with no graph small enough for the exact rule, the skip edge s -> t hides m: one segment, never a wrong cut
    linear = dataclasses.replace(SearchPolicy(), exact_bottleneck_tasks=0)
    assert bottleneck_tasks(FORK_JOINS, linear) == [0, 6]
    assert [s.tasks for s in segments(FORK_JOINS, linear)] == [tuple(range(7))]


@pytest.mark.parametrize("seed", range(8))
def test_bottlenecks_match_the_definition_on_random_dags(seed: int) -> None:
    inst = random_instance(seed)
    assert bottleneck_tasks(inst) == _bottleneck_by_definition(inst)
    covered = sorted({t for s in segments(inst) for t in s.tasks})
    assert covered == list(range(inst.num_tasks))


def test_induced_instance_keeps_only_inner_edges() -> None:
    sub = induced_instance(FORK_JOINS, [3, 4, 5, 6], "second")
    assert sub.task_names == ("m", "x2", "y2", "t")
    assert sorted(sub.edges) == [(0, 1), (0, 2), (1, 3), (2, 3)]
    assert sub.duration_tick.shape == (4, 2) and int(sub.comm(0, 0, 1)) == 2


def test_hand_derived_fork_joins_are_solved_and_proved_optimal() -> None:
    out = plan_instance(FORK_JOINS, SolveOptions(time_limit_s=5, threads=2))
    assert FORK_JOINS.trivial_lower_bound_tick() == 11
    assert out.decomposition is not None and out.decomposition.bound_tick == 15
    assert out.op_plan.makespan_tick == 15 == out.lower_bound_tick == out.op_plan.lower_bound_tick
    assert out.op_plan.status == out.plan.status == "optimal"
    validate_plan(FORK_JOINS, out.op_plan)
    validate_plan(out.coarse, out.plan)


@pytest.mark.parametrize("seed", [0, 4, 5, 9, 12])
def test_decomposition_bound_never_exceeds_the_brute_force_optimum(seed: int) -> None:
    inst = random_instance(seed)
    best = brute_force_makespan(inst)
    assert best is not None
    dec = decompose_and_solve(inst, SolveParams(time_limit_s=2, threads=2))
    assert dec.bound_tick <= best
    if dec.plan is not None:
        validate_plan(inst, dec.plan)
        assert dec.plan.makespan_tick >= best
    out = plan_instance(inst, SolveOptions(time_limit_s=3, threads=2))
    validate_plan(inst, out.op_plan)
    assert inst.trivial_lower_bound_tick() <= out.lower_bound_tick <= best <= out.op_plan.makespan_tick


def _check_outcome(out, fine: SchedulingInstance) -> None:
    """The op plan validates, the cluster plan validates on its instance and maps back to every op once, the
    bounds are ordered."""
    validate_plan(fine, out.op_plan)
    validate_plan(out.coarse, out.plan)
    ops = [op for p in out.plan.placements for op in out.plan.task_ops[p.task]]
    assert sorted(ops) == sorted(fine.task_names)
    assert out.plan.makespan_tick == out.op_plan.makespan_tick
    trivial = fine.trivial_lower_bound_tick()
    assert trivial <= out.lower_bound_tick == out.op_plan.lower_bound_tick <= out.op_plan.makespan_tick
    assert out.plan.lower_bound_tick <= out.plan.makespan_tick


def test_moe_short_budget_is_valid_and_no_worse_than_heft() -> None:
    fine = _prepared(MOE).instance
    out = plan_instance(fine, SolveOptions(time_limit_s=8, threads=2))
    _check_outcome(out, fine)
    assert out.op_plan.makespan_tick <= min(out.baselines.values())
    assert out.baselines["heft"] == heft(fine).makespan_tick


def test_bilevel_loop_alone_still_runs_and_maps_back_to_ops() -> None:
    """Without phase 1 the bi-level loop runs over clusters; the result never loses to the HEFT incumbent."""
    # cpu-4: on h100-8-nvlink the communication-aware bound proves HEFT optimal, so no round would run
    fine = _prepared(MOE, CPU4).instance
    # 20 s, not less: phase 0 counts against the limit and the rounds get a quarter of what is left, so under load a
    # short limit left no time for one round (the assertion below is on the rounds, not on speed)
    out = plan_instance(fine, SolveOptions(time_limit_s=20, threads=2, decomposition_share=0.0, max_rounds=2))
    _check_outcome(out, fine)
    assert out.decomposition is None and out.rounds
    assert out.op_plan.makespan_tick <= out.baselines["heft"]


def test_baseline_methods_are_unchanged() -> None:
    out = plan_instance(FORK_JOINS, SolveOptions(method=Method.HEFT))
    validate_plan(FORK_JOINS, out.op_plan)
    assert out.op_plan.method == "heft"


@pytest.mark.slow
@pytest.mark.parametrize("model", ["moe", "inception"])
def test_acceptance_real_models_on_eight_h100(model: str) -> None:
    """The issue's acceptance run (default 60 s budget).  On both models HEFT is already optimal: the
    decomposition bound equals HEFT's makespan (each segment's optimum is proven by CP-SAT, and by HiGHS/SCIP on
    the small ones), so no plan can beat it; the planner must match it and report a zero gap."""
    path = MOE if model == "moe" else _light_inception()
    fine = _prepared(path).instance
    out = plan_instance(fine, SolveOptions())
    _check_outcome(out, fine)
    best = min(out.baselines.values())
    assert out.op_plan.makespan_tick <= best
    assert out.lower_bound_tick == out.op_plan.makespan_tick and out.op_plan.gap == 0.0
    assert np.isclose(out.op_plan.gap, 0.0)


def test_decomposition_segments_are_never_longer_than_the_incumbents_part() -> None:
    # The bundled MoE on cpu-4 has 34 segments; with almost no solver time every segment keeps its best list
    # schedule, which is now never longer than the incumbent's schedule of that segment.
    from planner.heuristics.list_schedule import Rank
    from planner.ir.hardware import load_topology

    inst = prepare(MOE, load_topology(H100.parent / "cpu-4.yaml")).instance
    incumbent = heft(inst, rank=Rank.SUM)
    by = incumbent.by_task()
    dec = decompose_and_solve(inst, SolveParams(time_limit_s=0.5, threads=2), incumbent=incumbent)
    assert len(dec.segments) > 1
    for r in dec.segments:
        rows = [by[inst.task_names[t]] for t in r.segment.tasks]
        span = max(p.end_tick for p in rows) - min(p.start_tick for p in rows)
        assert r.makespan_tick <= span
    if dec.plan is not None:
        validate_plan(inst, dec.plan)
