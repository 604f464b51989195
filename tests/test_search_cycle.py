"""Phase 3 of the planner alternates the iterated list scheduler and LNS, each handing over when it stalls
(`stall_moves`): the stall stops end each search as stated, keep its plan valid and no longer than its start, and
the planner goes round the cycle again while the budget lasts."""

from __future__ import annotations

import pytest
from checks import check_plan_valid

import planner.solve as solve_module
from experiments.layered import layered_dag
from planner.heuristics.iterated import iterated_list_schedule
from planner.heuristics.list_schedule import heft
from planner.lns import lns
from planner.solve import SolveOptions, plan_instance


@pytest.mark.parametrize("stall", [0, 1, 25])
def test_iterated_stops_after_stall_moves_without_a_better_plan(stall: int) -> None:
    inst = layered_dag(60, 4, seed=3, comm_ratio=2.0)
    result = iterated_list_schedule(inst, time_limit_s=600, stall_moves=stall, seed=1)
    check_plan_valid(inst, result.plan)
    assert result.plan.makespan_tick <= result.start_makespan_tick
    # each improvement resets the count, so at most `stall` moves follow the start and each improvement
    assert stall <= result.moves <= (result.improving_moves + 1) * stall
    # the same run cut by a move count instead: the stall stop changes when it ends, not what it does
    same = iterated_list_schedule(inst, time_limit_s=600, max_moves=result.moves, seed=1)
    assert same.plan.placements == result.plan.placements


def test_lns_stops_after_stall_moves_and_keeps_or_improves_the_plan() -> None:
    inst = layered_dag(50, 3, seed=4, comm_ratio=1.0)
    start = heft(inst)
    result = lns(inst, start, time_limit_s=600, stall_moves=4, threads=1)
    check_plan_valid(inst, result.plan)
    assert result.plan.makespan_tick <= start.makespan_tick
    assert result.moves >= 4 or result.plan.makespan_tick <= inst.trivial_lower_bound_tick()


def test_phase_three_goes_round_the_cycle_while_the_budget_lasts(monkeypatch) -> None:
    # stall stops that end each search after a few moves: the budget then holds several cycles
    monkeypatch.setattr(solve_module, "ITERATED_STALL_MOVES", 20)
    monkeypatch.setattr(solve_module, "LNS_STALL_MOVES", 2)
    inst = layered_dag(80, 4, seed=6, comm_ratio=2.0)
    said: list[str] = []
    out = plan_instance(inst, SolveOptions(time_limit_s=8, threads=1, decomposition_share=0.0), progress=said.append)
    check_plan_valid(inst, out.op_plan)
    ticks = [p.makespan_tick for p in out.phases]
    assert ticks == sorted(ticks, reverse=True) and len(set(ticks)) == len(ticks)  # each step improved
    if out.op_plan.makespan_tick > out.lower_bound_tick:  # the bound ends the search early otherwise
        assert sum(m.startswith("LNS on the op plan") for m in said) >= 2
