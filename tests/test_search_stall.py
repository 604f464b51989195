"""The stall stops of the two local searches (`stall_moves` of the iterated list scheduler and of LNS): each search
ends as stated, and its plan stays valid and no longer than its start."""

from __future__ import annotations

import pytest
from checks import check_plan_valid

from experiments.layered import layered_dag
from formulations.model_api import SolveParams
from planner.heuristics.iterated import iterated_list_schedule
from planner.heuristics.list_schedule import heft
from planner.lns import lns


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
    result = lns(inst, start, SolveParams(time_limit_s=600, threads=1), stall_moves=4)
    check_plan_valid(inst, result.plan)
    assert result.plan.makespan_tick <= start.makespan_tick
    assert result.moves >= 4 or result.plan.makespan_tick <= inst.trivial_lower_bound_tick()
