"""The communication-aware lower bound (`planner/heuristics/comm_bound.py`): never above the brute-force optimum,
heads and tails hold in real plans, and it is strictly stronger than the trivial bound where a join must pay a
transfer or serialize its inputs."""

from __future__ import annotations

from functools import cache

import pytest
from brute_force import brute_force_makespan
from brute_force import random_instance as tiny_instance
from instances import make_instance, random_instance

import planner.heuristics.comm_bound as comm_bound
from experiments.layered import layered_dag
from planner.heuristics.comm_bound import comm_heads_tails, comm_lower_bound_tick
from planner.heuristics.list_schedule import heft

TINY_SEEDS = range(30)


@cache
def _optimum(seed: int) -> int | None:
    return brute_force_makespan(tiny_instance(seed))


def test_join_pays_a_transfer_or_serializes() -> None:
    # a(5), b(5) -> c(1), each edge 10 ticks between devices: c waits for a transfer (5 + 10) or runs after both
    # on one device (5 + 5); the optimum is 11, the trivial bound max(6, 11 / 2) = 6.
    inst = make_instance("join", [[5, 5], [5, 5], [1, 1]], [(0, 2, 10), (1, 2, 10)])
    assert inst.trivial_lower_bound_tick() == 6
    heads, tails = comm_heads_tails(inst)
    assert heads.tolist() == [0, 0, 10]
    assert tails.tolist() == [1, 1, 0]
    assert comm_lower_bound_tick(inst) == 11 == brute_force_makespan(inst)


def test_fork_tail_mirrors_the_join() -> None:
    # a(1) -> b(5), c(5): the fork's tail is min(transfer + 5, 5 + 5) = 10.
    inst = make_instance("fork", [[1, 1], [5, 5], [5, 5]], [(0, 1, 10), (0, 2, 10)])
    assert comm_lower_bound_tick(inst) == 11 == brute_force_makespan(inst)


def test_single_device_serializes_every_join() -> None:
    inst = make_instance("one", [[3], [4], [2]], [(0, 2, 10), (1, 2, 10)])
    assert comm_lower_bound_tick(inst) == 9


@pytest.mark.parametrize("seed", TINY_SEEDS)
def test_never_above_the_optimum(seed: int) -> None:
    inst = tiny_instance(seed)
    optimum = _optimum(seed)
    bound = comm_lower_bound_tick(inst)
    assert bound >= inst.trivial_lower_bound_tick()
    if optimum is not None:  # infeasible under the parameter limit: nothing to compare
        assert bound <= optimum


def test_stronger_than_trivial_somewhere() -> None:
    stronger = [s for s in TINY_SEEDS
                if comm_lower_bound_tick(tiny_instance(s)) > tiny_instance(s).trivial_lower_bound_tick()]
    assert len(stronger) >= 3


@pytest.mark.parametrize("seed", range(8))
def test_heads_and_tails_hold_in_list_schedules(seed: int) -> None:
    inst = random_instance(seed, 40, 1 + seed % 4)
    plan = heft(inst)
    by = plan.by_task()
    heads, tails = comm_heads_tails(inst)
    for t, name in enumerate(inst.task_names):
        assert heads[t] <= by[name].start_tick
        assert tails[t] <= plan.makespan_tick - by[name].end_tick
    assert comm_lower_bound_tick(inst) <= plan.makespan_tick


@pytest.mark.parametrize("comm", [0.5, 2.0])
def test_layered_bound_below_heft(comm: float) -> None:
    inst = layered_dag(200, 8, seed=3, comm_ratio=comm)
    assert inst.trivial_lower_bound_tick() <= comm_lower_bound_tick(inst) <= heft(inst).makespan_tick


def _reference_side(order, links, p, delays, share):
    """The module docstring's recursion written plainly (every prefix, no shortcuts), for the fast `_side`."""
    out = [0.0] * len(p)
    for v in order:
        if not links[v]:
            continue
        per = {}
        for u, e in links[v]:
            c, s = per.get(u, (0.0, True))
            per[u] = (max(c, delays[e]), s and share[e])
        fixed_out = max([out[u] + p[u] + c for u, (c, s) in per.items() if not s], default=0.0)
        forced = [(out[u], p[u]) for u, (c, s) in per.items() if s and c == float("inf")]
        free = sorted(((out[u] + p[u] + c, u) for u, (c, s) in per.items() if s and c != float("inf")), reverse=True)
        values = []
        for k in range(len(free) + 1):
            inside = forced + [(out[u], p[u]) for _, u in free[:k]]
            f = 0.0
            for r, q in sorted(inside):
                f = max(f, r) + q
            values.append(max(fixed_out, free[k][0] if k < len(free) else 0.0, f))
        out[v] = min(values)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_heads_and_tails_match_the_plain_recursion(seed: int) -> None:
    inst = random_instance(seed, 60, 1 + seed % 4) if seed % 3 else tiny_instance(seed)
    heads, tails = comm_heads_tails(inst)
    g = comm_bound._graph(inst)
    assert heads.tolist() == _reference_side(g.topo, g.pred, g.p, g.delays, g.share)
    assert tails.tolist() == _reference_side(g.topo[::-1], g.succ, g.p, g.delays, g.share)
