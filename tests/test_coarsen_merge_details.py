"""Merging, case by case: small hand-built cluster graphs whose merged result the module's contract fixes.

Deterministic and fast on purpose: this is the mutation runner's selection for `planner/coarsen/merge.py`
(the property sweeps in test_coarsen_merge.py take minutes per mutant).  Costs, comm, parameter bytes and device
masks are passed to `merge_on_adjacency` / `ClusterGraph` directly, so each case controls exactly the quantity it
checks.
"""

from __future__ import annotations

import pytest

from planner.coarsen import merge_clusters
from planner.coarsen.adjacency import Adjacency
from planner.coarsen.merge import ClusterGraph, final_clusters, merge_on_adjacency
from planner.cost.instance import SchedulingInstance


def dag(n: int, edges: list[tuple[int, int]]) -> Adjacency:
    """The task graph only (durations and comm come from the lists each test passes)."""
    return Adjacency.of(SchedulingInstance.uniform("g", [1] * n, [(s, t, 0) for s, t in edges], 1))


def singletons(n: int) -> list[list[int]]:
    return [[v] for v in range(n)]


def merge(adj: Adjacency, cost: list[float], comm: list[float] | None = None, *, clusters=None,
          param: list[int] | None = None, masks: list[int] | None = None, num_devices: int = 1,
          target_clusters: int | None = None, fraction: float | None = None,
          max_bytes: float | None = None) -> list[list[int]]:
    n = adj.n
    return merge_on_adjacency(adj, clusters or singletons(n), cost, comm or [0.0] * len(adj.edges),
                              param or [0] * n, masks, num_devices=num_devices, target_clusters=target_clusters,
                              min_cluster_cost_fraction=fraction, max_cluster_param_bytes=max_bytes)


def is_topological(adj: Adjacency, clusters: list[list[int]]) -> bool:
    owner = {v: k for k, c in enumerate(clusters) for v in c}
    return all(owner[s] <= owner[t] for s, t in adj.edges)


CHAIN4 = [(0, 1), (1, 2), (2, 3)]


def test_arguments_are_checked() -> None:
    adj = dag(2, [(0, 1)])
    with pytest.raises(ValueError, match="num_devices must be >= 1, got 0"):
        merge(adj, [1.0, 1.0], num_devices=0, target_clusters=1)
    with pytest.raises(ValueError, match="target_clusters must be >= 1, got 0"):
        merge(adj, [1.0, 1.0], target_clusters=0)
    with pytest.raises(ValueError, match="not in a topological order"):
        ClusterGraph(adj, [[1], [0]], [1.0, 1.0], [0.0], [0, 0])


def test_without_a_target_nothing_merges_and_members_come_in_topological_order() -> None:
    adj = dag(3, [(0, 1), (1, 2)])
    assert merge(adj, [1.0, 1.0, 1.0]) == [[0], [1], [2]]
    inst = SchedulingInstance.uniform("c", [1, 1, 1], [(0, 1, 0), (1, 2, 0)], 2)
    assert merge_clusters(inst, [[1, 0], [2]], num_devices=2) == [[0, 1], [2]]


def test_a_count_target_on_a_chain_pairs_neighbours_under_the_balance_cap() -> None:
    adj = dag(4, CHAIN4)
    # cap = total / devices = 2: only pairs of unit tasks fit
    assert merge(adj, [1.0] * 4, num_devices=2, target_clusters=2) == [[0, 1], [2, 3]]
    assert merge(adj, [1.0] * 4, num_devices=1, target_clusters=1) == [[0, 1, 2, 3]]
    assert merge(adj, [1.0] * 4, num_devices=1, target_clusters=3) == [[0, 1], [2], [3]]
    assert merge(adj, [1.0] * 4, num_devices=1, target_clusters=4) == [[0], [1], [2], [3]]


def test_the_cap_doubles_until_a_count_target_can_be_met() -> None:
    # cap starts at max(total / 4, 1) = 1: no merge fits until the cap has doubled twice
    adj = dag(4, CHAIN4)
    assert merge(adj, [1.0] * 4, num_devices=4, target_clusters=1) == [[0, 1, 2, 3]]
    assert merge(adj, [1.0] * 4, num_devices=4, target_clusters=2) == [[0, 1], [2, 3]]


def test_min_cost_fraction_merges_only_until_no_cluster_is_small() -> None:
    adj = dag(4, CHAIN4)
    # every cluster must cost >= 1.0 x 4 / 2 = 2
    assert merge(adj, [1.0] * 4, num_devices=2, fraction=1.0) == [[0, 1], [2, 3]]
    # >= 0.5 x 4 / 2 = 1: a cluster costing exactly the limit is not small, so nothing merges
    assert merge(adj, [1.0] * 4, num_devices=2, fraction=0.5) == [[0], [1], [2], [3]]
    # a target of 0 work per cluster is met at once
    assert merge(adj, [1.0] * 4, num_devices=2, fraction=0.0) == [[0], [1], [2], [3]]


def test_once_the_count_is_met_only_a_small_cluster_merges() -> None:
    adj = dag(3, [(0, 1), (1, 2)])
    # count target 3 already holds; min cost 0.2 x 9 = 1.8, so only task 2 (cost 1) is small
    assert merge(adj, [4.0, 4.0, 1.0], target_clusters=3, fraction=0.2) == [[0], [1, 2]]
    # both targets given: the count is met, then the small one still merges
    assert merge(adj, [4.0, 4.0, 1.0], target_clusters=2, fraction=0.2) == [[0], [1, 2]]


def test_both_targets_must_hold() -> None:
    adj = dag(4, CHAIN4)
    # min cost alone is met at once (limit 0.25); the count target still asks for 2 clusters
    assert merge(adj, [1.0] * 4, num_devices=4, target_clusters=2, fraction=1.0) == [[0, 1], [2, 3]]
    # the count alone is met (4 <= 4); min cost 1 x 4 / 1 = 4 needs everything in one cluster
    assert merge(adj, [1.0] * 4, num_devices=1, target_clusters=4, fraction=1.0) == [[0, 1, 2, 3]]


def test_clusters_without_a_common_device_never_merge() -> None:
    adj = dag(3, [(0, 1), (1, 2)])
    assert merge(adj, [1.0] * 3, masks=[0b01, 0b10, 0b10], num_devices=2, target_clusters=1) == [[0], [1, 2]]
    assert merge(adj, [1.0] * 3, masks=[0b11, 0b10, 0b11], num_devices=2, target_clusters=1) == [[0, 1, 2]]
    # device 0 alone is a common device
    assert merge(adj, [1.0] * 3, masks=[0b01, 0b01, 0b01], num_devices=2, target_clusters=1) == [[0, 1, 2]]


def test_the_parameter_limit_is_never_relaxed() -> None:
    adj = dag(3, [(0, 1), (1, 2)])
    out = merge(adj, [1.0] * 3, param=[5, 5, 5], target_clusters=1, max_bytes=10)
    assert out == [[0, 1], [2]]
    assert merge(adj, [1.0] * 3, param=[5, 5, 5], target_clusters=1, max_bytes=15) == [[0, 1, 2]]
    assert merge(adj, [1.0] * 3, param=[5, 5, 5], target_clusters=1, max_bytes=9) == [[0], [1], [2]]


def test_a_merge_that_closes_a_cycle_is_refused() -> None:
    # 0 -> 1 directly and 0 -> 2 -> 1: merging 0 and 1 would make {0, 1} -> 2 -> {0, 1}
    adj = dag(3, [(0, 1), (0, 2), (2, 1)])
    g = ClusterGraph(adj, [[0], [2], [1]], [1.0] * 3, [0.0] * 3, [0] * 3)
    assert not g.try_merge(0, 2)  # clusters are numbered by position: 0 = task 0, 2 = task 1
    assert g.n_alive == 3 and g.alive == [True, True, True]
    assert g.try_merge(0, 1)
    assert g.n_alive == 2
    assert final_clusters(adj, g) == [[0, 2], [1]]
    # a longer detour: 0 -> 1 -> 2 -> 3 and 0 -> 3
    adj = dag(4, CHAIN4 + [(0, 3)])
    g = ClusterGraph(adj, singletons(4), [1.0] * 4, [0.0] * 4, [0] * 4)
    assert not g.try_merge(0, 3)
    assert g.try_merge(2, 3)
    assert not g.try_merge(0, g.find(3))


def test_the_order_is_repaired_around_the_merged_cluster() -> None:
    # nothing between A and B reachable from A: the merged cluster takes B's place
    adj = dag(3, [(0, 2), (1, 2)])
    g = ClusterGraph(adj, singletons(3), [1.0] * 3, [0.0] * 2, [0] * 3)
    assert g.try_merge(0, 2)
    assert final_clusters(adj, g) == [[1], [0, 2]]
    # nothing between them reaches B: it takes A's place
    adj = dag(3, [(0, 1), (0, 2)])
    g = ClusterGraph(adj, singletons(3), [1.0] * 3, [0.0] * 2, [0] * 3)
    assert g.try_merge(0, 2)
    assert final_clusters(adj, g) == [[0, 2], [1]]
    # both (Pearce-Kelly): A -> X, Y -> B; Y moves before the merged cluster, X after it
    adj = dag(4, [(0, 1), (2, 3), (0, 3)])
    g = ClusterGraph(adj, singletons(4), [1.0] * 4, [0.0] * 3, [0] * 4)
    assert g.try_merge(0, 3)
    out = final_clusters(adj, g)
    assert out == [[2], [0, 3], [1]]
    assert is_topological(adj, out)
    # a deeper window: A -> X1 -> X2, Y1 -> Y2 -> B, A -> B, positions A X1 Y1 X2 Y2 B
    adj = dag(6, [(0, 1), (1, 3), (2, 4), (4, 5), (0, 5)])
    g = ClusterGraph(adj, singletons(6), [1.0] * 6, [0.0] * 5, [0] * 6)
    assert g.try_merge(0, 5)
    out = final_clusters(adj, g)
    assert out == [[2], [4], [0, 5], [1], [3]]
    assert is_topological(adj, out)


def test_a_join_adds_costs_bytes_masks_and_the_comm_to_a_shared_neighbour() -> None:
    # tasks: 3 -> 0 (2), 3 -> 1 (5), 0 -> 1 (1), 0 -> 2 (3), 1 -> 2 (4); clusters by position: 3, 0, 1, 2
    adj = dag(4, [(3, 0), (3, 1), (0, 1), (0, 2), (1, 2)])
    clusters = [[3], [0], [1], [2]]
    g = ClusterGraph(adj, clusters, [1.0, 2.0, 4.0, 8.0], [2.0, 5.0, 1.0, 3.0, 4.0], [1, 2, 4, 8],
                      [0b011, 0b110, 0b100, 0b111])
    assert g.succ[1] == {2: 1.0, 3: 3.0} and g.pred[2] == {0: 5.0, 1: 1.0}
    assert g.try_merge(1, 2)
    keep = g.find(1)
    assert g.find(2) == keep and g.n_alive == 3
    other = 2 if keep == 1 else 1
    assert not g.alive[other] and g.succ[other] == {} and g.pred[other] == {}
    assert g.cost[keep] == 3.0 and g.param[keep] == 3 and g.mask[keep] == 0b010
    assert g.succ[keep] == {3: 7.0} and g.pred[3] == {keep: 7.0}
    assert g.pred[keep] == {0: 7.0} and g.succ[0] == {keep: 7.0}


def longest_path(succ: dict[int, dict[int, float]], cost: dict[int, float]) -> float:
    memo: dict[int, float] = {}

    def tail(k: int) -> float:
        if k not in memo:
            memo[k] = cost[k] + max((w + tail(x) for x, w in succ[k].items()), default=0.0)
        return memo[k]

    return max(tail(k) for k in cost)


def merged_path(g: ClusterGraph, a: int, b: int) -> float:
    """Critical path of the cluster graph with a and b merged (their edge zeroed, parallel edges added)."""
    live = [k for k in range(len(g.alive)) if g.alive[k]]
    rename = {k: (a if k == b else k) for k in live}
    succ: dict[int, dict[int, float]] = {rename[k]: {} for k in live}
    cost: dict[int, float] = {}
    for k in live:
        cost[rename[k]] = cost.get(rename[k], 0.0) + g.cost[k]
        for x, w in g.succ[k].items():
            s, t = rename[k], rename[x]
            if s != t:
                succ[s][t] = succ[s].get(t, 0.0) + w
    return longest_path(succ, cost)


# (edges, cost, comm): small graphs where every edge's two ends share no neighbour
GRAPHS = [
    ([(0, 1), (0, 2)], [1.0, 1.0, 1.0], [1.0, 10.0]),
    ([(0, 1), (0, 2), (1, 3), (2, 3)], [1.0, 2.0, 3.0, 1.0], [4.0, 1.0, 2.0, 6.0]),
    ([(0, 1), (0, 2), (1, 3), (2, 3)], [2.0, 5.0, 1.0, 2.0], [1.0, 3.0, 7.0, 1.0]),
    ([(0, 2), (1, 2), (2, 3), (2, 4)], [3.0, 1.0, 2.0, 4.0, 1.0], [1.0, 6.0, 2.0, 5.0]),
    ([(0, 1), (1, 2), (2, 3)], [1.0, 2.0, 3.0, 4.0], [5.0, 0.0, 2.0]),
]


@pytest.mark.parametrize("edges, cost, comm", GRAPHS)
def test_growth_is_the_critical_path_increase_of_each_merge(edges, cost, comm) -> None:
    adj = dag(len(cost), edges)
    g = ClusterGraph(adj, singletons(len(cost)), cost, comm, [0] * len(cost))
    cp, cands = g.score(every_edge=True)
    assert cp == longest_path({k: dict(g.succ[k]) for k in range(len(cost))}, dict(enumerate(cost)))
    assert sorted((a, b) for _, _, a, b in cands) == sorted(adj.edges)
    for growth, key, a, b in cands:
        assert key == g.cost[a] + g.cost[b] - g.succ[a][b]
        assert growth == pytest.approx(max(0.0, merged_path(g, a, b) - cp))


def test_each_cluster_proposes_its_best_edge() -> None:
    # fork 0 -> 1 (comm 1), 0 -> 2 (comm 10); CP 12.  Merging 0, 1 leaves 0 -> 2: 1 + 1 + 10 + 1 = 13 (growth 1);
    # merging 0, 2 leaves 0 -> 1: 1 + 1 + 1 + 1 = 4 (growth 0)
    adj = dag(3, [(0, 1), (0, 2)])
    g = ClusterGraph(adj, singletons(3), [1.0] * 3, [1.0, 10.0], [0] * 3)
    cp, cands = g.score()
    assert cp == 12.0
    assert sorted(cands) == [(0.0, -8.0, 0, 2), (1.0, 1.0, 0, 1)]
    # a tie in growth goes to the lighter merged cluster: chain 0 -> 1 -> 2 with costs 5, 1, 1 and no comm
    adj = dag(3, [(0, 1), (1, 2)])
    g = ClusterGraph(adj, singletons(3), [5.0, 1.0, 1.0], [0.0, 0.0], [0] * 3)
    _, cands = g.score()
    assert sorted(cands) == [(0.0, 2.0, 1, 2), (0.0, 6.0, 0, 1)]
    assert merge(adj, [5.0, 1.0, 1.0], target_clusters=2) == [[0], [1, 2]]


def test_the_merge_that_keeps_the_critical_path_goes_first() -> None:
    adj = dag(3, [(0, 1), (0, 2)])
    assert merge(adj, [1.0] * 3, [1.0, 10.0], target_clusters=2) == [[0, 2], [1]]


def test_an_edge_no_cluster_prefers_is_proposed_only_when_every_edge_is_asked_for() -> None:
    # diamond 0 -> {1, 2} -> 3, task 1 heavy: 1 -> 3 is neither 1's best edge (0 -> 1 ties, and comes first) nor 3's
    adj = dag(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    g = ClusterGraph(adj, singletons(4), [1.0, 10.0, 1.0, 1.0], [0.0] * 4, [0] * 4)
    assert sorted(g.score()[1]) == [(1.0, 2.0, 0, 2), (1.0, 2.0, 2, 3), (1.0, 11.0, 0, 1)]
    assert sorted(g.score(every_edge=True)[1]) == [(1.0, 2.0, 0, 2), (1.0, 2.0, 2, 3), (1.0, 11.0, 0, 1),
                                                   (1.0, 11.0, 1, 3)]


def test_a_merged_source_stays_a_source() -> None:
    # 0 -> 1 -> {2, 3}: cluster 1 has more neighbours, so it absorbs 0 and must drop 0 from its predecessors
    adj = dag(4, [(0, 1), (1, 2), (1, 3)])
    g = ClusterGraph(adj, singletons(4), [1.0] * 4, [0.0] * 3, [0] * 4)
    assert g.try_merge(0, 1)
    keep = g.find(0)
    assert g.pred[keep] == {} and g.succ[keep] == {2: 0.0, 3: 0.0}
    cp, _ = g.score()
    assert cp == 3.0


def test_a_join_moves_every_other_edge_of_the_absorbed_cluster() -> None:
    # a absorbs b, and b's predecessors list a before another cluster X (edges in that order): X -> ab stays
    adj = dag(5, [(0, 2), (1, 2), (0, 3), (0, 4)])
    g = ClusterGraph(adj, singletons(5), [1.0] * 5, [1.0, 2.0, 3.0, 4.0], [0] * 5)
    assert g.try_merge(0, 2) and g.find(2) == 0
    assert g.succ[1] == {0: 2.0} and g.pred[0] == {1: 2.0} and g.succ[0] == {3: 3.0, 4: 4.0}
    # b absorbs a, and a's successors list b before another cluster Y: ab -> Y stays
    adj = dag(6, [(0, 1), (0, 2), (1, 3), (1, 4), (1, 5)])
    g = ClusterGraph(adj, singletons(6), [1.0] * 6, [1.0, 2.0, 3.0, 4.0, 5.0], [0] * 6)
    assert g.try_merge(0, 1) and g.find(0) == 1
    assert g.succ[1] == {2: 2.0, 3: 3.0, 4: 4.0, 5: 5.0} and g.pred[2] == {1: 2.0} and g.pred[1] == {}


def test_only_the_window_between_the_pair_is_searched() -> None:
    # A(0), U(1) unrelated, B(2), A -> B and A -> Z(3) past the window: nothing in the window is reachable from A,
    # so the merged cluster takes B's place and U keeps its own before it
    adj = dag(4, [(0, 2), (0, 3)])
    g = ClusterGraph(adj, singletons(4), [1.0] * 4, [0.0] * 2, [0] * 4)
    assert g.try_merge(0, 2)
    assert final_clusters(adj, g) == [[1], [0, 2], [3]]


def test_a_tie_keeps_the_first_edge_seen() -> None:
    # unit diamond, no comm: every edge has growth 1 and key 2; each cluster keeps the first of its tied edges in
    # the order tails are visited, so 3 proposes 1 -> 3 (not 2 -> 3)
    adj = dag(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    g = ClusterGraph(adj, singletons(4), [1.0] * 4, [0.0] * 4, [0] * 4)
    assert sorted(g.score()[1]) == [(1.0, 2.0, 0, 1), (1.0, 2.0, 0, 2), (1.0, 2.0, 1, 3)]


# Pinned outcomes of the round heuristic (module docstring: each cluster's best edge, the every-edge retry of a
# round that merged nothing, the locked then unlocked pass, the cap that doubles, the side that keeps its id).
# Each graph is one where changing that rule changes the clusters; all outcomes meet the contract (checked).
ROUND_CASES = [
    # a round after an every-edge retry goes back to the best edge per cluster
    ([(0, 1), (0, 5), (0, 6), (1, 2), (1, 4), (1, 5), (2, 4), (3, 4), (3, 5), (3, 6), (4, 5)],
     [1.0, 3.0, 1.0, 1.0, 1.0, 3.0, 3.0], [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 3.0, 1.0, 0.0, 0.0], 3, 2, None,
     [[0, 3, 1, 2, 4, 5], [6]]),
    # on a tie in adjacency the tail cluster keeps its id (ties later break by id and adjacency order)
    ([(0, 3), (0, 4), (1, 5), (1, 6), (2, 3), (2, 4), (2, 5), (2, 6)], [1.0, 4.0, 4.0, 4.0, 2.0, 2.0, 4.0],
     [0.0, 3.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0], 4, 3, None, [[2], [0, 3, 4], [1, 5, 6]]),
    # the unlocked pass runs only when the locked one merged under half the round's budget
    ([(0, 1), (0, 4), (0, 5), (1, 2), (1, 4)], [5.0, 2.0, 3.0, 2.0, 2.0, 4.0], [1.0, 0.0, 3.0, 0.0, 0.0], 3, None,
     1.0, [[3], [0, 5], [1, 2, 4]]),
    # the cap doubles (not just up to the cheapest refused merge): 0 -> 2, the heavier edge, merges first
    ([(0, 1), (0, 2)], [3.0, 3.0, 4.0], [1.0, 3.0], 4, 2, None, [[0, 2], [1]]),
    # ... and doubles, not triples
    ([(0, 1), (0, 3), (1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (2, 5), (4, 5)], [5.0, 0.7, 3.0, 2.0, 4.0, 4.0],
     [3.0, 0.0, 0.0, 0.0, 1.0, 3.0, 3.0, 0.0, 3.0], 3, 2, 0.5, [[0, 1, 2, 3], [4, 5]]),
    # the cap starts at total work / devices
    ([(0, 6), (1, 4), (1, 6), (2, 4), (3, 4), (3, 5)], [2.0, 0.3, 0.2, 0.7, 0.7, 0.3, 0.7],
     [0.0, 1.0, 0.0, 3.0, 3.0, 3.0], 3, None, 0.5, [[0], [3, 5], [1, 6], [2, 4]]),
    # a merge over the cap by rounding only (0.1 + 0.2 against 0.3) is within the cap's tolerance
    ([(0, 1), (0, 2), (1, 2)], [0.1, 0.2, 0.3], [0.0, 0.0, 1.0], 4, 2, None, [[0, 1], [2]]),
    # a tail cluster's best edge: lower growth, or equal growth and lower key
    ([(0, 1), (0, 2), (0, 3), (1, 3), (2, 3)], [0.7, 2.0, 4.0, 0.7], [1.0, 0.0, 0.0, 0.0, 3.0], 4, 2, None,
     [[0], [1, 2, 3]]),
    # the locked pass skips a candidate when either end was touched; the budget counts merges one by one
    ([(0, 3), (0, 5), (1, 2), (1, 4), (1, 5), (2, 4), (2, 5), (3, 4), (4, 5)], [5.0, 0.7, 4.0, 0.1, 0.2, 1.0],
     [1.0, 3.0, 3.0, 0.0, 0.0, 1.0, 3.0, 3.0, 1.0], 1, 2, None, [[0], [1, 3, 2, 4, 5]]),
    ([(0, 4), (0, 6), (1, 4), (1, 5), (2, 3), (2, 5), (4, 6)], [0.7, 5.0, 0.7, 4.0, 3.0, 1.0, 0.7],
     [0.0, 1.0, 0.0, 1.0, 1.0, 3.0, 0.0], 1, 3, None, [[1], [2, 3, 5], [0, 4, 6]]),
]


@pytest.mark.parametrize("edges, cost, comm, devices, target, fraction, expected", ROUND_CASES)
def test_round_rules_pinned(edges, cost, comm, devices, target, fraction, expected) -> None:
    adj = dag(len(cost), edges)
    clusters = [[v] for v in adj.topo]
    out = merge(adj, cost, comm, clusters=clusters, num_devices=devices, target_clusters=target, fraction=fraction)
    assert sorted(v for c in out for v in c) == list(range(len(cost)))
    assert is_topological(adj, out)
    assert target is None or len(out) <= target
    assert out == expected
