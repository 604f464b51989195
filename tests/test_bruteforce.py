"""Brute force over every device assignment and per-device order (`brute_force.py`): the formulation's optimum
equals it, on every backend.
"""

from __future__ import annotations

from functools import cache

import pytest
from brute_force import brute_force_makespan, random_instance
from checks import check_plan_valid
from instances import make_instance

from formulations.backends import available_backends
from formulations.solve_instance import solve_placement

BACKENDS = available_backends()


# 7 tasks on 3 devices with two link classes, heterogeneous and ineligible pairs, parameter limits, zero delays.
SEEDS = [0, 4, 5, 9, 11, 12, 13, 16, 17, 20, 24, 25, 27, 38, 39]
INFEASIBLE_SEEDS = [6, 28]  # the parameter limit admits no assignment at all


@cache
def _brute(seed: int) -> int | None:
    return brute_force_makespan(random_instance(seed))


# ------------------------------------------------------------------------------------------------ tests
def test_brute_force_helper_on_a_hand_case() -> None:
    # a(2) -> b(2), comm 5, params 6 + 6 with capacity 10: a and b cannot share a device, so b starts at 2 + 5.
    inst = make_instance("split", [[2, 2], [2, 2]], [(0, 1, 5)], params=[6, 6], capacity=10)
    assert brute_force_makespan(inst) == 9


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_optimum_equals_brute_force(backend: str, seed: int) -> None:
    inst = random_instance(seed)
    expected = _brute(seed)
    assert expected is not None
    plan = solve_placement(inst, backend=backend, time_limit_s=20, threads=2)
    check_plan_valid(inst, plan)
    assert plan.status == "optimal"
    assert plan.makespan_tick == expected
    assert plan.lower_bound_tick == expected


@pytest.mark.parametrize("seed", INFEASIBLE_SEEDS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_infeasible_when_brute_force_finds_nothing(backend: str, seed: int) -> None:
    from planner.errors import InfeasibleError

    assert _brute(seed) is None
    with pytest.raises(InfeasibleError, match="smallest capacity"):
        solve_placement(random_instance(seed), backend=backend, time_limit_s=10, threads=2)
