"""PEFT (`planner/heuristics/peft.py`) and the iterated list scheduler (`planner/heuristics/iterated.py`): every
plan passes the validator (memory included), and each has a case where it is known to beat HEFT."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from checks import check_plan_valid
from instances import make_instance, random_instance

from experiments.layered import layered_dag
from planner.cost.instance import INELIGIBLE
from planner.errors import InfeasibleError
from planner.heuristics.iterated import ITERATED_METHOD, Start, classic_starts, iterated_list_schedule
from planner.heuristics.list_schedule import Rank, earliest_finish, heft
from planner.heuristics.memory import memory_never_binds
from planner.heuristics.peft import PEFT_METHOD, optimistic_cost_table, peft, peft_rank
from planner.schedule.validate import validate_plan


def test_oct_by_hand() -> None:
    # a -> b, 2 devices; b lasts 4 on dev0 and 10 on dev1; the edge costs 3 between devices.
    inst = make_instance("oct", [[1, 1], [4, 10]], [(0, 1, 3)])
    table = optimistic_cost_table(inst)
    # from a on dev0: b on dev0 (4) or dev1 (10 + 3); from a on dev1: b on dev1 (10) or dev0 (4 + 3)
    assert table[0].tolist() == [4, 7]
    assert table[1].tolist() == [0, 0]
    assert peft_rank(table).tolist() == [5.5, 0.0]


def test_oct_ineligible_devices_are_infinite() -> None:
    inst = make_instance("pin", [[1, None], [2, 2]], [(0, 1, 3)])
    table = optimistic_cost_table(inst)
    assert table[0, 1] == np.inf
    assert peft(inst).by_task()["t0"].device == 0


@pytest.mark.parametrize("seed", range(12))
def test_peft_plans_are_valid(seed: int) -> None:
    inst = random_instance(seed, 30, 1 + seed % 4)
    plan = peft(inst)
    assert plan.method == PEFT_METHOD
    check_plan_valid(inst, plan)


def test_peft_beats_heft_on_a_heterogeneous_graph() -> None:
    # found by search over seeds; the regression pins the look-ahead's benefit (33 -> 29 ticks)
    inst = random_instance(0, 20, 3)
    assert peft(inst).makespan_tick < heft(inst).makespan_tick


def test_peft_beats_heft_on_a_layered_graph() -> None:
    inst = layered_dag(40, 3, seed=24, comm_ratio=2.0)
    assert peft(inst).makespan_tick < heft(inst).makespan_tick


def _tight(seed: int):
    """random_instance(seed, 30, 3) with room for all parameters and outputs on each device: the tracker runs
    (holding everything at once does not fit with the input copies), and the list schedulers fit."""
    inst = random_instance(seed, 30, 3)
    cap = int(inst.param_bytes.sum() + inst.activation_bytes.sum())
    return dataclasses.replace(inst, capacity_bytes=np.full(3, cap, dtype=np.int64))


def test_peft_respects_memory() -> None:
    tight = _tight(3)
    assert not memory_never_binds(tight)
    validate_plan(tight, peft(tight))


# ----------------------------------------------------------------------------------------- iterated search --


@pytest.mark.parametrize("seed", range(6))
def test_iterated_plans_are_valid_and_no_worse_than_the_starts(seed: int) -> None:
    inst = random_instance(seed, 40, 2 + seed % 3)
    result = iterated_list_schedule(inst, time_limit_s=60, max_moves=40, seed=seed)
    check_plan_valid(inst, result.plan)
    best_classic = min(heft(inst).makespan_tick, heft(inst, rank=Rank.SUM).makespan_tick, peft(inst).makespan_tick)
    assert result.start_makespan_tick == best_classic
    assert result.plan.makespan_tick <= best_classic
    assert result.moves <= 40


def test_iterated_is_deterministic_for_a_seed_and_a_move_count() -> None:
    inst = layered_dag(60, 4, seed=1, comm_ratio=1.0)
    a = iterated_list_schedule(inst, time_limit_s=120, max_moves=30, seed=7)
    b = iterated_list_schedule(inst, time_limit_s=120, max_moves=30, seed=7)
    assert a.plan.placements == b.plan.placements


def test_iterated_beats_every_classic_scheduler_on_a_comm_heavy_graph() -> None:
    inst = layered_dag(120, 8, seed=5, comm_ratio=2.0)
    best_classic = min(heft(inst).makespan_tick, heft(inst, rank=Rank.SUM).makespan_tick, peft(inst).makespan_tick)
    result = iterated_list_schedule(inst, time_limit_s=120, max_moves=150, seed=0)
    assert result.plan.makespan_tick < best_classic
    assert result.plan.method == ITERATED_METHOD
    assert result.improving_moves >= 1
    check_plan_valid(inst, result.plan)


def test_iterated_stops_at_the_bound() -> None:
    inst = make_instance("chain", [[2, 2], [3, 3]], [(0, 1, 1)])
    result = iterated_list_schedule(inst, time_limit_s=10, bound_tick=5)
    assert result.plan.makespan_tick == 5
    assert result.moves == 0


def test_iterated_respects_memory_and_rejects_failing_orders() -> None:
    tight = _tight(4)
    assert not memory_never_binds(tight)
    result = iterated_list_schedule(tight, time_limit_s=60, max_moves=30)
    validate_plan(tight, result.plan)


def test_iterated_raises_when_no_start_decodes() -> None:
    inst = make_instance("nowhere", [[1, 1]], [])
    inst = dataclasses.replace(inst, duration_tick=np.full((1, 2), INELIGIBLE, dtype=np.int64))
    with pytest.raises(InfeasibleError):
        iterated_list_schedule(inst, time_limit_s=1, starts=[Start("x", np.zeros(1), earliest_finish)])


def test_classic_starts_decode_to_the_classic_schedulers() -> None:
    inst = random_instance(2, 25, 3)
    names = [s.name for s in classic_starts(inst)]
    assert names == ["heft", "heft-sum", "peft"]
    result = iterated_list_schedule(inst, time_limit_s=10, max_moves=0)
    assert result.plan.makespan_tick == min(heft(inst).makespan_tick, heft(inst, rank=Rank.SUM).makespan_tick,
                                            peft(inst).makespan_tick)
