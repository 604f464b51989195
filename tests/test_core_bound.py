"""The least time any run on k cores can take (`planner.cost.core_bound`): exact values on small graphs, and never
above a run that exists."""

from __future__ import annotations

import random

import pytest

from planner.cost.core_bound import core_bound
from planner.ir.graph import Edge, Op, OpGraph, SourceInfo


def _graph(names: list[str], edges: list[tuple[str, str]]) -> OpGraph:
    return OpGraph.build("g", [Op(n, "task") for n in names], [Edge(a, b, f"{a}->{b}") for a, b in edges],
                         source=SourceInfo("g", "", "taskgraph"))


def test_a_chain_runs_each_op_at_its_fastest_one_after_the_other():
    g = _graph(["a", "b", "c"], [("a", "b"), ("b", "c")])
    got = core_bound(g, {1: {"a": 3.0, "b": 2.0, "c": 4.0}, 2: {"a": 2.0, "b": 1.5, "c": 5.0}})
    assert got.bound_s == pytest.approx(2.0 + 1.5 + 4.0)
    assert (got.serial_s, got.regions, got.cores) == (pytest.approx(7.5), 0, 2)


def test_branches_last_the_longer_of_their_critical_path_and_their_work_over_the_cores():
    # s -> {x1 -> x2, y} -> j; the branches form one region
    g = _graph(["s", "x1", "x2", "y", "j"], [("s", "x1"), ("x1", "x2"), ("s", "y"), ("x2", "j"), ("y", "j")])
    one = {"s": 1.0, "x1": 2.0, "x2": 2.0, "y": 1.0, "j": 0.5}
    # two threads: x1 and x2 gain, y does not; core-time min(t1, 2 t2): x1 2, x2 2, y 1 -> work 5 over 2 cores 2.5
    two = {"s": 0.6, "x1": 1.5, "x2": 1.2, "y": 1.0, "j": 0.5}
    got = core_bound(g, {1: one, 2: two})
    path = 1.5 + 1.2  # x1 then x2 at their fastest, longer than y's 1.0
    assert got.bound_s == pytest.approx(0.6 + max(path, 5.0 / 2) + 0.5)
    assert got.regions == 1 and got.serial_s == pytest.approx(1.1)
    # with work dominating: wider branches
    wide = _graph(["s", "a", "b", "c", "j"], [("s", "a"), ("s", "b"), ("s", "c"), ("a", "j"), ("b", "j"), ("c", "j")])
    times = {"s": 0.0, "a": 2.0, "b": 2.0, "c": 2.0, "j": 0.0}
    assert core_bound(wide, {1: times, 2: {k: v for k, v in times.items()}}).bound_s == pytest.approx(3.0)


def test_two_regions_add_up_and_ops_without_a_time_count_nothing():
    g = _graph(["s", "a", "b", "m", "c", "d", "e"],
               [("s", "a"), ("s", "b"), ("a", "m"), ("b", "m"), ("m", "c"), ("m", "d"), ("c", "e"), ("d", "e")])
    one = {"a": 4.0, "b": 1.0, "c": 3.0, "d": 3.0, "m": 1.0}
    got = core_bound(g, {1: one})  # one thread count: one core
    assert got.cores == 1 and got.regions == 2
    assert got.bound_s == pytest.approx(1.0 + (4.0 + 1.0) + (3.0 + 3.0))


def test_the_one_thread_times_are_required():
    with pytest.raises(ValueError, match="one-thread"):
        core_bound(_graph(["a"], []), {2: {"a": 1.0}})


def _list_schedule_s(g: OpGraph, times: dict[str, float], cores: int) -> float:
    """A run that exists: each op on one core as soon as its inputs and a core are free, in topological order."""
    free = [0.0] * cores
    end: list[float] = []
    for i, op in enumerate(g.ops):
        ready = max((end[j] for j in g.predecessors[i]), default=0.0)
        core = min(range(cores), key=lambda c: max(free[c], ready))
        start = max(free[core], ready)
        end.append(start + times[op.name])
        free[core] = end[-1]
    return max(end, default=0.0)


@pytest.mark.parametrize("seed", range(30))
def test_no_run_that_exists_is_shorter_than_the_bound(seed: int):
    rng = random.Random(seed)
    n = rng.randint(2, 14)
    names = [f"o{i}" for i in range(n)]
    edges = [(names[i], names[j]) for j in range(n) for i in range(j) if rng.random() < 0.3]
    g = _graph(names, edges)
    one = {x: rng.uniform(0.1, 2.0) for x in names}
    two = {x: one[x] * rng.uniform(0.5, 1.2) for x in names}
    got = core_bound(g, {1: one, 2: two})
    assert got.bound_s <= _list_schedule_s(g, one, 2) + 1e-9  # every op on one thread, side by side
    assert got.bound_s <= sum(two.values()) + 1e-9  # one rank, every op on both cores
    assert got.bound_s <= sum(min(one[x], two[x]) for x in names) + 1e-9  # one rank, each op its faster way
    assert got.bound_s >= max(sum(min(one[x], 2 * two[x]) for x in names) / 2,  # the work over the cores
                              max(min(one[x], two[x]) for x in names)) - 1e-9
