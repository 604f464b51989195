"""The cumulative formulation (`formulations/cumulative.py`): optimum against brute force, device assignment,
dispatch from `solve_placement` only on qualifying instances, and the relaxation bound."""

from __future__ import annotations

import random

import numpy as np
import pytest
from brute_force import brute_force_makespan
from brute_force import random_instance as brute_instance
from checks import check_plan_valid
from hypothesis import given, settings
from hypothesis import strategies as st
from instances import make_instance

import formulations.solve_instance as solve_instance
from formulations.backends import available_backends, get_backend
from formulations.cumulative import (
    CumulativeProblem,
    assign_devices,
    build_cumulative_model,
    cumulative_applies,
    relaxed_bound_tick,
    twin_groups,
)
from formulations.placement import Objective
from formulations.solve_instance import solve_placement
from planner.cost.instance import SchedulingInstance
from planner.errors import OpplanError
from planner.schedule.validate import check_plan

CPSAT = get_backend("cpsat")


def _pprec(seed: int) -> SchedulingInstance:
    """4-7 tasks (durations 0-6, zeros included), 2-3 identical devices, a random DAG with free edges."""
    rng = random.Random(seed)
    n = rng.randint(4, 7)
    durations = [rng.choice([0, 1, 2, 3, 4, 5, 6]) for _ in range(n)]
    edges = [(u, v, 0) for v in range(1, n) for u in range(v) if rng.random() < 0.3]
    return SchedulingInstance.uniform(f"pprec{seed}", durations, edges, rng.choice([2, 3]))


def _fork(num_devices: int = 2) -> SchedulingInstance:
    # t0 (1 tick) -> t1, t2, t3 (2 ticks each, twins) -> t4 (1 tick).
    # Trivial bound: critical path 1 + 2 + 1 = 4, work 8 / 2 = 4.  On 2 devices the three middle tasks need two
    # rounds, [1, 3) and [3, 5), so t4 runs [5, 6): optimum 6, above the trivial bound.
    return SchedulingInstance.uniform("fork", [1, 2, 2, 2, 1], [(0, 1, 0), (0, 2, 0), (0, 3, 0), (1, 4, 0),
                                                              (2, 4, 0), (3, 4, 0)], num_devices)


class _Spy:
    """Counts the calls of `solve_cumulative` made by `solve_placement` (the dispatch)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = solve_instance.solve_cumulative

        def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(solve_instance, "solve_cumulative", spy)


# ------------------------------------------------------------------------------------------------ optimum
def test_fork_optimum_above_the_trivial_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy(monkeypatch)
    inst = _fork()
    assert inst.trivial_lower_bound_tick() == 4
    plan = solve_placement(inst, time_limit_s=10, threads=2)
    check_plan_valid(inst, plan)
    assert spy.calls == 1
    assert (plan.makespan_tick, plan.lower_bound_tick, plan.status) == (6, 6, "optimal")


@pytest.mark.parametrize("seed", range(12))
def test_optimum_equals_brute_force(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy(monkeypatch)
    inst = _pprec(seed)
    assert cumulative_applies(inst, CPSAT)
    plan = solve_placement(inst, time_limit_s=10, threads=2)
    check_plan_valid(inst, plan)
    assert spy.calls == 1
    assert plan.status == "optimal"
    assert plan.makespan_tick == plan.lower_bound_tick == brute_force_makespan(inst)


@pytest.mark.parametrize("seed", range(6))
def test_release_and_delivery_times_match_the_general_model(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # The window model of the search (release and delivery times): both formulations prove the same optimum.
    inst = _pprec(100 + seed)
    rng = random.Random(seed)
    release = [rng.randint(0, 4) for _ in range(inst.num_tasks)]
    tail = [rng.randint(0, 5) for _ in range(inst.num_tasks)]
    ours = solve_placement(inst, time_limit_s=10, threads=2, release_tick=release, tail_tick=tail)
    monkeypatch.setattr(solve_instance, "cumulative_applies", lambda *a, **k: False)
    general = solve_placement(inst, time_limit_s=10, threads=2, release_tick=release, tail_tick=tail)
    assert ours.status == general.status == "optimal"

    def value(plan):  # type: ignore[no-untyped-def]
        by = plan.by_task()
        return max(by[name].end_tick + q for name, q in zip(inst.task_names, tail, strict=True))

    assert value(ours) == value(general)
    by = ours.by_task()
    assert all(by[name].start_tick >= r for name, r in zip(inst.task_names, release, strict=True))
    # with release times a plan's times are absolute and its makespan is the last end (not last end - first
    # start): every other rule of the validator holds
    violations, _ = check_plan(inst, ours)
    assert [v for v in violations if v.kind != "makespan"] == []


def test_twins_are_found_and_ordered() -> None:
    problem = CumulativeProblem("fork", (1, 2, 2, 2, 1), ((0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4)), 2)
    assert twin_groups(problem) == [[1, 2, 3]]
    builder = CPSAT.new_builder()
    build_cumulative_model(problem, builder, horizon=8)
    # one row per edge, one cumulative, one makespan row per task, the energy row, twins (1, 2) and (2, 3)
    assert builder.family_counts() == {"prec": 6, "cap": 1, "mk": 5, "energy": 1, "twin": 2}


# ------------------------------------------------------------------------------------------------ devices
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 6)), min_size=1, max_size=25))
def test_device_assignment_needs_only_the_peak_concurrency(runs: list[tuple[int, int]]) -> None:
    start = [s for s, _ in runs]
    dur = [p for _, p in runs]
    # the most tasks of positive length running at one moment (a moment is a tick here: integer times)
    peak = max([sum(1 for s, p in runs if p > 0 and s <= x < s + p) for x in range(30)])
    device = assign_devices(dur, start, max(1, peak))
    for d in set(device):
        spans = sorted((start[t], start[t] + dur[t]) for t in range(len(runs)) if device[t] == d and dur[t] > 0)
        assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:]))
    if peak > 1:
        with pytest.raises(ValueError):
            assign_devices(dur, start, peak - 1)


# ------------------------------------------------------------------------------------------------ dispatch
def _qualifying_variants() -> dict[str, SchedulingInstance]:
    base = dict(durations=[[2, 2], [3, 3], [1, 1]], edges=[(0, 1, 0), (0, 2, 0)])
    return {
        "heterogeneous": make_instance("het", [[2, 3], [3, 3], [1, 1]], base["edges"]),
        "ineligible": make_instance("inel", [[2, None], [3, 3], [1, 1]], base["edges"]),
        "communication": make_instance("comm", base["durations"], [(0, 1, 2), (0, 2, 0)]),
        "memory": make_instance("mem", base["durations"], base["edges"], params=[5, 5, 5], capacity=10),
    }


@pytest.mark.parametrize("kind", sorted(_qualifying_variants()))
def test_non_qualifying_instances_keep_the_general_model(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    inst = _qualifying_variants()[kind]
    assert not cumulative_applies(inst, CPSAT)
    spy = _Spy(monkeypatch)
    plan = solve_placement(inst, time_limit_s=10, threads=2)
    check_plan_valid(inst, plan)
    assert spy.calls == 0


def test_qualifying_twin_of_the_variants_uses_the_cumulative_model(monkeypatch: pytest.MonkeyPatch) -> None:
    inst = make_instance("ok", [[2, 2], [3, 3], [1, 1]], [(0, 1, 0), (0, 2, 0)], params=[5, 5, 5], capacity=15)
    assert cumulative_applies(inst, CPSAT)  # memory fits even when everything sits on one device
    spy = _Spy(monkeypatch)
    plan = solve_placement(inst, time_limit_s=10, threads=2)
    check_plan_valid(inst, plan)
    assert spy.calls == 1 and plan.makespan_tick == 5


def test_weighted_objectives_keep_the_general_model(monkeypatch: pytest.MonkeyPatch) -> None:
    inst = _fork()
    objective = Objective(makespan_weight=1, peak_memory_weight=1)
    assert cumulative_applies(inst, CPSAT) and not cumulative_applies(inst, CPSAT, objective)
    spy = _Spy(monkeypatch)
    solve_placement(inst, time_limit_s=10, threads=2, objective=objective)
    assert spy.calls == 0


@pytest.mark.parametrize("backend", [b for b in available_backends() if b != "cpsat"])
def test_milp_backends_keep_the_general_model(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    inst = _fork()
    assert not cumulative_applies(inst, get_backend(backend))
    spy = _Spy(monkeypatch)
    plan = solve_placement(inst, backend=backend, time_limit_s=20, threads=2)
    check_plan_valid(inst, plan)
    assert spy.calls == 0 and plan.makespan_tick == 6


# ------------------------------------------------------------------------------------------------ relaxation bound
def test_relaxed_bound_of_the_fork_is_its_optimum() -> None:
    assert relaxed_bound_tick(_fork(), 10, threads=2) == 6
    assert relaxed_bound_tick(_fork(3), 10, threads=2) == 4  # three devices: the trivial bound is reached


def test_relaxed_bound_beats_the_trivial_bound_on_a_heterogeneous_instance() -> None:
    # The fork with a slower device 1 and delays across devices: the relaxation is the fork itself (fastest
    # durations, no delays), bound 6; the trivial bound is 5: critical path 4, and device 1's relative speed is
    # max(1/2, 2/3) = 2/3, so the work bound is 8 / (1 + 2/3) = 4.8, rounded up 5.
    inst = make_instance("hetfork", [[1, 2], [2, 3], [2, 3], [2, 3], [1, 2]],
                         [(0, 1, 3), (0, 2, 3), (0, 3, 3), (1, 4, 3), (2, 4, 3), (3, 4, 3)])
    bound = relaxed_bound_tick(inst, 10, threads=2)
    assert inst.trivial_lower_bound_tick() == 5 < bound == 6
    assert bound <= brute_force_makespan(inst)


@pytest.mark.parametrize("seed", range(20))
def test_relaxed_bound_is_sound_and_never_below_the_trivial_bound(seed: int) -> None:
    inst = brute_instance(seed)  # heterogeneous, ineligible pairs, delays over link classes, parameter memory
    bound = relaxed_bound_tick(inst, 5, threads=2)
    best = brute_force_makespan(inst)  # None: no plan fits the parameter memory, any bound holds
    assert inst.trivial_lower_bound_tick() <= bound
    assert best is None or bound <= best


def test_relaxed_bound_with_release_and_delivery_times_bounds_the_windowed_optimum() -> None:
    inst = brute_instance(3)
    rng = np.random.default_rng(0)
    release = [int(x) for x in rng.integers(0, 4, inst.num_tasks)]
    tail = [int(x) for x in rng.integers(0, 4, inst.num_tasks)]
    plan = solve_placement(inst, time_limit_s=10, threads=2, release_tick=release, tail_tick=tail)
    assert plan.status == "optimal"
    by = plan.by_task()
    value = max(by[name].end_tick + q for name, q in zip(inst.task_names, tail, strict=True))
    assert relaxed_bound_tick(inst, 5, threads=2, release_tick=release, tail_tick=tail) <= value


@pytest.mark.parametrize("backend", [b for b in available_backends() if b != "cpsat"])
def test_relaxed_bound_needs_an_exact_cumulative(backend: str) -> None:
    with pytest.raises(OpplanError, match="exact cumulative"):
        relaxed_bound_tick(_fork(), 5, backend=backend)


def test_relaxed_bound_of_an_empty_instance_is_zero() -> None:
    assert relaxed_bound_tick(SchedulingInstance.uniform("empty", [], [], 2), 1) == 0
