"""Merging: granularity targets, acyclicity, preserved totals, the critical path, and MoE experts kept apart."""

from __future__ import annotations

import numpy as np
from checks import assert_partition
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import random_dags

from planner.coarsen import (
    coarsen,
    contract,
    critical_path_length,
    edge_comm_estimate,
    linear_clustering,
    merge_clusters,
    quotient_is_acyclic,
    repair_cycles,
    task_cost_estimate,
)
from planner.coarsen.adjacency import Adjacency
from planner.coarsen.merge import ClusterGraph, final_clusters
from planner.cost.instance import INELIGIBLE, SchedulingInstance


def coarse_cp(inst: SchedulingInstance, clusters: list[list[int]]) -> float:
    coarse = contract(inst, clusters)
    return critical_path_length(coarse, task_cost_estimate(coarse), edge_comm_estimate(coarse))


@settings(max_examples=80, deadline=None)
@given(random_dags(), st.integers(1, 12))
def test_coarsening_covers_preserves_and_stays_acyclic(inst: SchedulingInstance, target: int) -> None:
    res = coarsen(inst, target_clusters=target)
    clusters = [list(c) for c in res.clusters]
    assert_partition(inst, clusters)
    assert quotient_is_acyclic(inst, clusters)
    coarse = res.instance
    assert len(coarse.topological_order) == coarse.num_tasks  # raises if cyclic
    assert coarse.param_bytes.sum() == inst.param_bytes.sum()
    for k, members in enumerate(clusters):
        for d in range(inst.num_devices):
            fine = inst.duration_tick[members, d]
            if np.all(fine < INELIGIBLE):
                assert coarse.duration_tick[k, d] == fine.sum()
            else:
                assert coarse.duration_tick[k, d] == INELIGIBLE
    # every task eligible everywhere: total compute per device is preserved exactly
    if np.all(inst.duration_tick < INELIGIBLE):
        assert coarse.duration_tick.sum(axis=0).tolist() == inst.duration_tick.sum(axis=0).tolist()
    assert np.isclose(res.critical_path_after_tick, coarse_cp(inst, clusters))
    # a cluster may run somewhere whenever each of its tasks may
    assert np.all((coarse.duration_tick < INELIGIBLE).any(axis=1))


@settings(max_examples=60, deadline=None)
@given(random_dags(heterogeneous=False), st.integers(1, 6))
def test_count_target_is_met_on_connected_graphs(inst: SchedulingInstance, target: int) -> None:
    # a chain backbone 0 -> 1 -> ... makes the graph connected, so merging can always continue
    edges = [(s, t, int(c)) for (s, t), c in zip(inst.edges, inst.edge_fixed_tick)]
    edges += [(i, i + 1, 0) for i in range(inst.num_tasks - 1)]
    inst = SchedulingInstance.uniform("c", inst.duration_tick[:, 0].tolist(), edges, inst.num_devices)
    merged = merge_clusters(inst, linear_clustering(inst), target_clusters=target, num_devices=inst.num_devices)
    assert len(merged) <= target
    assert quotient_is_acyclic(inst, merged)


@settings(max_examples=60, deadline=None)
@given(random_dags(), st.floats(0.05, 1.0))
def test_min_cost_target(inst: SchedulingInstance, fraction: float) -> None:
    merged = merge_clusters(inst, linear_clustering(inst), min_cluster_cost_fraction=fraction,
                            num_devices=inst.num_devices)
    assert_partition(inst, merged)
    assert quotient_is_acyclic(inst, merged)
    cost = task_cost_estimate(inst)
    limit = fraction * cost.sum() / inst.num_devices
    small = [c for c in merged if cost[c].sum() < limit - 1e-6]
    if small:  # a small cluster left over can merge with no neighbour without a cycle or losing all devices
        adj = Adjacency.of(inst)
        for c in small:
            mine = set(c)
            neighbours = {w for v in c for w, _ in adj.succ[v] + adj.pred[v]} - mine
            for other in merged:
                runs_somewhere = np.any(np.all(inst.duration_tick[c + other] < INELIGIBLE, axis=0))
                if neighbours & set(other) and runs_somewhere:
                    assert not quotient_is_acyclic(inst, [c + other] + [x for x in merged
                                                                          if x is not c and x is not other])


@settings(max_examples=80, deadline=None)
@given(random_dags(heterogeneous=False), st.data())
def test_growth_estimate_is_exact_for_one_merge(inst: SchedulingInstance, data: st.DataObject) -> None:
    # Identical devices and no tensors: the merge's cluster-graph model (summed costs, summed comm) is exactly the
    # contracted instance, so one merge with estimated growth g turns critical path CP into at most CP + g, and
    # into exactly CP + g when g > 0, provided A and B share no neighbour (edges from A and from B to one cluster
    # add up when merged, which the estimate ignores).  Merging along a zero-cost edge A -> B where A feeds only B
    # and B is fed only
    # by A never lengthens the critical path.
    adj = Adjacency.of(inst)
    clusters = repair_cycles(inst, linear_clustering(inst))
    cost, comm = task_cost_estimate(inst).tolist(), edge_comm_estimate(inst).tolist()
    g = ClusterGraph(adj, clusters, cost, comm, inst.param_bytes.tolist())
    cp, cands = g.score()
    before = coarse_cp(inst, clusters)
    assert np.isclose(cp, before)
    if not cands:
        return
    growth, _, a, b = data.draw(st.sampled_from(cands))
    series = len(g.succ[a]) == 1 and len(g.pred[b]) == 1 and g.succ[a][b] == 0
    shared = (set(g.succ[a]) | set(g.pred[a])) & (set(g.succ[b]) | set(g.pred[b]))
    if not g.try_merge(a, b):
        return
    merged = final_clusters(adj, g)
    after = coarse_cp(inst, merged)
    if shared:
        return
    assert after <= before + growth + 1e-6
    if growth > 0:
        assert np.isclose(after, before + growth)
    if series:
        assert after <= before + 1e-6


@settings(max_examples=60, deadline=None)
@given(random_dags(zero_comm=True))
def test_zeroing_edges_inside_clusters_never_lengthens_the_path(inst: SchedulingInstance) -> None:
    # Fine critical path with the edges inside clusters free: linear clusters, then merged ones, never longer.
    def zeroed_cp(clusters: list[list[int]]) -> float:
        owner = {v: k for k, c in enumerate(clusters) for v in c}
        comm = edge_comm_estimate(inst) * np.array([owner[s] != owner[t] for s, t in inst.edges], dtype=float)
        return critical_path_length(inst, task_cost_estimate(inst), comm)

    linear = repair_cycles(inst, linear_clustering(inst))
    merged = merge_clusters(inst, linear, target_clusters=2, num_devices=inst.num_devices)
    full = critical_path_length(inst, task_cost_estimate(inst), edge_comm_estimate(inst))
    assert zeroed_cp(merged) <= zeroed_cp(linear) <= full


def fork_join(k: int, diamond: bool) -> SchedulingInstance:
    """pre0 -> pre1 -> router -> k experts -> combine -> post0 -> post1; an expert is a chain gate -> mlp -> out,
    or (diamond) gate -> {mlp_a, mlp_b} -> out.  Experts are heavy; every edge costs 3 across devices."""
    names = ["layer0/pre0", "layer0/pre1", "layer0/router"]
    durations = [5, 5, 1]
    edges = [(0, 1, 3), (1, 2, 3)]
    outs = []
    for i in range(k):
        g = len(names)
        if diamond:
            names += [f"layer0/expert{i}/{x}" for x in ("gate", "mlp_a", "mlp_b", "out")]
            durations += [2, 20, 20, 2]
            edges += [(2, g, 3), (g, g + 1, 3), (g, g + 2, 3), (g + 1, g + 3, 3), (g + 2, g + 3, 3)]
            outs.append(g + 3)
        else:
            names += [f"layer0/expert{i}/{x}" for x in ("gate", "mlp", "out")]
            durations += [2, 40, 2]
            edges += [(2, g, 3), (g, g + 1, 3), (g + 1, g + 2, 3)]
            outs.append(g + 2)
    j = len(names)
    names += ["layer0/combine", "layer1/post0", "layer1/post1"]
    durations += [1, 5, 5]
    edges += [(o, j, 3) for o in outs] + [(j, j + 1, 3), (j + 1, j + 2, 3)]
    return SchedulingInstance.uniform("moe", durations, edges, 4, task_names=names)


def expert_of(name: str) -> str | None:
    parts = name.split("/")
    return parts[1] if len(parts) > 2 and parts[1].startswith("expert") else None


def test_experts_of_one_moe_layer_stay_in_separate_clusters() -> None:
    # k heavy independent branches between a fork and a join, target >= k + 2: no cluster holds two branches.
    for k in (2, 3, 4, 6, 8):
        inst = fork_join(k, diamond=False)
        for target in (k + 2, k + 3, k + 6):
            res = coarsen(inst, target_clusters=target)
            assert res.num_clusters <= target
            for ops in res.instance.task_ops.values():
                assert len({expert_of(op) for op in ops} - {None}) <= 1, (k, target, ops)


def test_heavy_parts_of_diamond_experts_stay_apart() -> None:
    # Experts with two parallel heavy MLPs: a light expert output may join the combine op (that costs the critical
    # path least), but the heavy MLPs of two experts never share a cluster.
    for k in (2, 3, 4, 6):
        inst = fork_join(k, diamond=True)
        for target in (k + 2, k + 4, 2 * k + 2):
            res = coarsen(inst, target_clusters=target)
            assert res.num_clusters <= target
            for ops in res.instance.task_ops.values():
                heavy = {expert_of(op) for op in ops if "mlp" in op}
                assert len(heavy) <= 1, (k, target, ops)


def test_cluster_names_follow_the_common_prefix() -> None:
    inst = fork_join(3, diamond=False)
    res = coarsen(inst, target_clusters=5)
    names = res.instance.task_names
    assert len(set(names)) == len(names)
    assert any(n.startswith("layer0/expert1#") for n in names)
