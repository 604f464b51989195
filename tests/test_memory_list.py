"""The memory-aware list scheduler (`planner.heuristics.memory_list`) and the memory report of any plan."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cost.instance import SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics import heft, round_robin
from planner.heuristics.memory import capacity_lower_bound
from planner.heuristics.memory_list import memory_list, peak_memory_bytes
from planner.schedule.validate import check_plan
from tests.instances import random_instance


def _chain(capacity: int) -> SchedulingInstance:
    # 4 tasks of 10 ticks in a chain, each holding 30 bytes of parameters and writing 1 byte; crossing devices
    # costs 100 ticks, so a scheduler that ignores memory keeps all four on one device (120 bytes of parameters).
    return SchedulingInstance.uniform("chain", [10] * 4, [(0, 1, 100), (1, 2, 100), (2, 3, 100)], 2,
                                      param_bytes=[30] * 4, activation_bytes=[1] * 4, capacity_bytes=capacity)


def test_respects_capacity_where_heft_ignoring_memory_does_not() -> None:
    inst = _chain(capacity=70)
    ignoring = heft(inst, respect_memory=False)
    assert ignoring.makespan_tick == 40 and max(peak_memory_bytes(inst, ignoring)) > 70
    violations, _ = check_plan(inst, ignoring)
    assert any("memory" in str(v).lower() or "capacity" in str(v).lower() for v in violations)
    plan = memory_list(inst)
    violations, profile = check_plan(inst, plan)
    assert not violations
    assert profile is not None and max(profile.peak_bytes) <= 70
    # two tasks per device (60 bytes of parameters + live outputs), one crossing: 40 + 100 ticks
    assert sorted(p.device for p in plan.placements) == [0, 0, 1, 1]
    assert plan.makespan_tick == 140


def test_same_as_earliest_finish_when_memory_is_plentiful() -> None:
    inst = _chain(capacity=10_000)
    assert memory_list(inst).makespan_tick == heft(inst).makespan_tick == 40


def test_infeasible_names_the_task_and_the_proven_bound() -> None:
    # 120 bytes of parameters on 2 devices need at least 60 (+ a task's own output) per device: 50 cannot fit
    inst = _chain(capacity=50)
    with pytest.raises(InfeasibleError) as err:
        memory_list(inst)
    text = str(err.value)
    assert "fits on no device" in text and "no plan exists at this capacity" in text
    assert str(capacity_lower_bound(inst).capacity_bytes) in text


def test_reports_memory_of_round_robin() -> None:
    inst = _chain(capacity=10_000)
    peaks = peak_memory_bytes(inst, round_robin(inst, respect_memory=False))
    assert len(peaks) == 2 and min(peaks) >= 60  # two tasks' parameters on each device


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 25), d=st.integers(1, 4), slack=st.floats(1.0, 3.0))
def test_plans_are_valid_and_within_capacity(seed: int, n: int, d: int, slack: float) -> None:
    base = random_instance(seed, n, d)
    capacity = int(capacity_lower_bound(base).capacity_bytes * slack) + 1
    inst = random_instance(seed, n, d, capacity_bytes=capacity)
    try:
        plan = memory_list(inst)
    except InfeasibleError as err:
        assert "fits on no device" in str(err) or "may run on no device" in str(err)
        return
    violations, profile = check_plan(inst, plan)
    assert not violations, violations
    assert profile is not None and max(profile.peak_bytes) <= capacity
