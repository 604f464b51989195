"""Linear clustering (chains of the DAG) and cycle repair."""

from __future__ import annotations

from checks import assert_partition
from hypothesis import given, settings
from strategies import layered_chain, random_dags

from planner.coarsen import coarsen, linear_clustering, quotient_is_acyclic, repair_cycles
from planner.cost.instance import SchedulingInstance


def assert_chains(inst: SchedulingInstance, clusters: list[list[int]]) -> None:
    edges = set(inst.edges)
    for c in clusters:
        assert all((u, v) in edges for u, v in zip(c, c[1:])), c


def test_a_chain_collapses_to_one_cluster() -> None:
    inst = layered_chain(7)
    assert linear_clustering(inst) == [[0, 1, 2, 3, 4, 5, 6]]
    res = coarsen(inst)
    assert res.clusters == ((0, 1, 2, 3, 4, 5, 6),)
    assert res.instance.duration_tick.tolist() == [[35, 35]]


def test_the_heaviest_path_is_peeled_first() -> None:
    # 0 -> 1 -> 3 (heavy) and 0 -> 2 -> 3 (light): the first cluster is 0, 1, 3; then 2 alone
    inst = SchedulingInstance.uniform("d", [1, 10, 2, 1], [(0, 1, 1), (0, 2, 1), (1, 3, 1), (2, 3, 1)], 2)
    assert linear_clustering(inst) == [[0, 1, 3], [2]]


def crossing_paths() -> SchedulingInstance:
    # two chains 0 -> 1 and 2 -> 3 crossing by 0 -> 3 and 2 -> 1: clusters {0,1} and {2,3} form a 2-cycle
    return SchedulingInstance.uniform("x", [1, 1, 1, 1], [(0, 1, 1), (2, 3, 1), (0, 3, 1), (2, 1, 1)], 2)


def test_crossing_paths_make_a_cycle_that_repair_fixes() -> None:
    inst = crossing_paths()
    clusters = [[0, 1], [2, 3]]
    assert not quotient_is_acyclic(inst, clusters)
    fixed = repair_cycles(inst, clusters)
    assert quotient_is_acyclic(inst, fixed)
    assert_partition(inst, fixed)
    assert_chains(inst, fixed)
    assert len(fixed) == 3  # one of the two chains is cut once


def test_repair_keeps_an_acyclic_clustering() -> None:
    inst = crossing_paths()
    clusters = [[0, 2], [1, 3]]
    assert sorted(map(sorted, repair_cycles(inst, clusters))) == [[0, 2], [1, 3]]


@settings(max_examples=80, deadline=None)
@given(random_dags())
def test_linear_clusters_are_chains_and_repair_makes_a_dag(inst: SchedulingInstance) -> None:
    linear = linear_clustering(inst)
    assert_partition(inst, linear)
    assert_chains(inst, linear)
    fixed = repair_cycles(inst, linear)
    assert_partition(inst, fixed)
    assert_chains(inst, fixed)
    assert quotient_is_acyclic(inst, fixed)
    if quotient_is_acyclic(inst, linear):
        assert sorted(map(sorted, fixed)) == sorted(map(sorted, linear))
    # every repaired cluster lies inside one linear cluster
    owner = {v: k for k, c in enumerate(linear) for v in c}
    assert all(len({owner[v] for v in c}) == 1 for c in fixed)
