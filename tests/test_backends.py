"""The backend registry, and every backend against the others on the same instances."""

from __future__ import annotations

import random

import pytest
from checks import check_plan_valid
from instances import make_instance

from formulations.backends import BACKEND_NAMES, available_backends, get_backend
from formulations.model_api import SolveParams, SolveStatus, interval
from formulations.solve_instance import solve_placement
from planner.errors import BackendUnavailableError, InfeasibleError

BACKENDS = available_backends()


def test_all_four_backends_are_installed_here() -> None:
    assert BACKENDS == list(BACKEND_NAMES)


def test_unknown_backend_lists_the_installed_ones() -> None:
    with pytest.raises(BackendUnavailableError) as err:
        get_backend("gurobi")
    for name in BACKENDS:
        assert name in str(err.value)
    with pytest.raises(BackendUnavailableError, match="installed backends: cpsat"):
        solve_placement(make_instance("x", [[1]], []), backend="nope")


def test_backend_names_are_case_insensitive() -> None:
    assert get_backend("CPSAT").name == "cpsat"


@pytest.mark.parametrize("backend", BACKENDS)
def test_builder_operations_on_a_toy_model(backend: str) -> None:
    # Two unit jobs with optional placement on one machine, both must run (presence fixed by constraints), plus an
    # enforced constraint: minimise the makespan -> 2.
    b = get_backend(backend).new_builder()
    s = [b.int_var(0, 10, f"s{i}") for i in range(2)]
    p = [b.bool_var(f"p{i}") for i in range(2)]
    for i in range(2):
        b.add(p[i] + 0 == 1, f"on[i={i}]")
    b.no_overlap([interval(s[i], 1, s[i] + 1, p[i], f"j{i}") for i in range(2)], "noover[d=0]")
    c = b.int_var(0, 10, "C")
    for i in range(2):
        b.add(c - s[i] >= 1, f"mk[i={i}]")
    flag = b.bool_var("flag")
    b.add_if(flag, s[0] >= 5, "late[i=0]")
    b.add_if(~flag, s[1] >= 0, "early[i=1]")
    b.minimize(c + flag)
    b.hint(s[0], 0)
    # The toy solves in milliseconds; the limit only matters on a starved machine (CI once saw CBC take 10 s).
    res = b.solve(SolveParams(time_limit_s=60, threads=1))
    assert res.status is SolveStatus.OPTIMAL
    assert res.objective == pytest.approx(2) and res.int_value(c) == 2
    assert not res.bool_value(flag)
    assert res.best_bound is not None and res.best_bound == pytest.approx(2, abs=1e-6)
    assert b.family_counts() == {"on": 2, "noover": 1, "mk": 2, "late": 1, "early": 1}


@pytest.mark.parametrize("backend", BACKENDS)
def test_infeasible_model_is_reported(backend: str) -> None:
    b = get_backend(backend).new_builder()
    x = b.int_var(0, 3, "x")
    b.add(x + 0 >= 5, "impossible")
    b.minimize(x)
    assert b.solve(SolveParams(time_limit_s=5, threads=1)).status is SolveStatus.INFEASIBLE


def _random_medium(seed: int):
    # 9-10 tasks, 3 devices (two close, one far), heterogeneous durations, comm over two link classes.
    rng = random.Random(seed)
    n = rng.randint(9, 10)
    bases = [rng.randint(1, 6) for _ in range(n)]
    durations = [[max(1, base + rng.randint(-1, 2)) for _ in range(3)] for base in bases]
    edges = [(u, v, rng.randint(0, 3)) for v in range(1, n) for u in range(v) if rng.random() < 0.25]
    lc = [[0, 1, 2], [1, 0, 2], [2, 2, 0]]
    return make_instance(f"medium{seed}", durations, edges, link_class=lc, latency=[0.0, 1.0, 3.0])


@pytest.mark.parametrize("seed", [11, 12])
def test_every_backend_agrees_on_the_optimum(seed: int) -> None:
    inst = _random_medium(seed)
    results = {}
    for backend in BACKENDS:
        plan = solve_placement(inst, backend=backend, time_limit_s=30, threads=2)
        check_plan_valid(inst, plan)
        results[backend] = plan
    # Same objective within each reported gap: every makespan lies in every plan's [bound, makespan].
    best = min(p.makespan_tick for p in results.values())
    for backend, plan in results.items():
        assert plan.lower_bound_tick <= best, backend
    if all(p.status == "optimal" for p in results.values()):
        assert len({p.makespan_tick for p in results.values()}) == 1


# The MILP backends bound memory safely (every buffer at once): one device, a(1) -> b(1), c(1) -> d(1), outputs of
# a and c 6 bytes each, capacity 10.  CP-SAT orders the lifetimes apart (see test_formulation_placement); the MILP
# bound 6 + 6 > 10 rejects every plan and the error says so.
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "cpsat"])
def test_milp_memory_bound_is_conservative_and_says_so(backend: str) -> None:
    inst = make_instance("acts", [[1], [1], [1], [1]], [(0, 1, 0), (2, 3, 0)], acts=[6, 0, 6, 0], capacity=10)
    with pytest.raises(InfeasibleError, match="conservatively"):
        solve_placement(inst, backend=backend, time_limit_s=5, threads=1)


def test_a_closed_gap_is_reported_optimal_whatever_stopped_the_solver() -> None:
    # CBC stopped by its time limit reports "integer feasible" even when its best possible value is the incumbent.
    from formulations.backends._milp import MilpOutcome, closed_gap_is_optimal

    closed = closed_gap_is_optimal(MilpOutcome(SolveStatus.FEASIBLE, 2.0, 2.0, {0: 1.0}), rel_gap=0.0)
    assert closed.status is SolveStatus.OPTIMAL and closed.values == {0: 1.0}
    open_gap = MilpOutcome(SolveStatus.FEASIBLE, 2.0, 1.5, {})
    assert closed_gap_is_optimal(open_gap, rel_gap=0.0).status is SolveStatus.FEASIBLE
    assert closed_gap_is_optimal(open_gap, rel_gap=0.25).status is SolveStatus.OPTIMAL
    assert closed_gap_is_optimal(MilpOutcome(SolveStatus.FEASIBLE, 2.0, None, {}), 0.0).status is SolveStatus.FEASIBLE


@pytest.mark.parametrize("deterministic", [True, False])
def test_cpsat_interleaved_search_runs_at_most_two_workers(capfd, deterministic: bool) -> None:
    # CP-SAT 9.13-9.15 corrupt their heap under interleaved (deterministic) search with more workers; the free
    # portfolio keeps the threads asked for.  Read from CP-SAT's own log.
    b = get_backend("cpsat").new_builder()
    s = [b.int_var(0, 10, f"s{i}") for i in range(3)]
    b.no_overlap([interval(x, 2, x + 2, None, f"j{i}") for i, x in enumerate(s)], "noover[d=0]")
    c = b.int_var(0, 10, "C")
    for i, x in enumerate(s):
        b.add(c - x >= 2, f"mk[i={i}]")
    b.minimize(c)
    res = b.solve(SolveParams(time_limit_s=30, threads=8, deterministic=deterministic, log=True))
    assert res.status is SolveStatus.OPTIMAL and res.objective == pytest.approx(6)
    log = capfd.readouterr().out
    assert f"num_workers: {2 if deterministic else 8}" in log, log[:2000]
