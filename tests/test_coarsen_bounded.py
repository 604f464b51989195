"""Merging that keeps parallelism: the coarse critical path stays within the tolerance of the op graph's,
merges stay valid contractions, and the merge stops at the solver's size."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from checks import assert_partition
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import random_dags

from experiments.layered import layered_dag
from planner.coarsen import (
    DEFAULT_COARSEN_POLICY,
    CoarsenPolicy,
    coarsen,
    contract,
    critical_path_length,
    critical_paths,
    edge_comm_estimate,
    linear_clustering,
    quotient_is_acyclic,
    repair_cycles,
    solver_size_target,
    task_cost_estimate,
)
from planner.coarsen.adjacency import Adjacency
from planner.coarsen.bounded import path_pieces
from planner.coarsen.levels import eligibility_masks
from planner.cost.instance import SchedulingInstance
from planner.ir.hardware import load_topology
from planner.ir.moe_model import MoEConfig, write_moe_model
from planner.prepare import prepare
from planner.search.policy import SearchPolicy
from planner.solve import SolveOptions, plan_instance

TOLERANCE = DEFAULT_COARSEN_POLICY.cp_tolerance  # what the search's linear rounds pass

DATA = Path(__file__).resolve().parents[1] / "planner" / "data"
PROFILES = Path(__file__).resolve().parents[1] / "hardware_profiles"
EPS = 1e-6


def assert_within(inst: SchedulingInstance, clusters, tolerance: float) -> None:
    op_cp, coarse_cp = critical_paths(inst, clusters)
    assert coarse_cp <= (1 + tolerance) * op_cp + EPS, (coarse_cp, op_cp)


def fork_join() -> SchedulingInstance:
    # s -> a, s -> b, a -> j, b -> j; durations 1, 10, 10, 1; comm 1 on every edge.
    return SchedulingInstance.uniform("fork", [1, 10, 10, 1], [(0, 1, 1), (0, 2, 1), (1, 3, 1), (2, 3, 1)], 2)


def test_fork_join_branches_stay_apart_within_the_tolerance() -> None:
    # Op critical path: s 1 + comm 1 + a 10 + comm 1 + j 1 = 14; 5 % allows 14.7.  Any merge makes it longer:
    # {a, b}: 1 + 1 + 20 + 1 + 1 = 24; {s, a}: b waits for the cluster's end: 11 + 1 + 10 + 1 + 1 = 24;
    # {a, j}: j's cluster waits for b: 1 + 1 + 10 + 1 + 10 + 1 = 24.  So nothing merges, whatever the target.
    inst = fork_join()
    res = coarsen(inst, target_clusters=1, cp_tolerance=TOLERANCE)
    assert res.num_clusters == 4
    assert res.critical_path_before_tick == res.critical_path_after_tick == 14
    # A tolerance that allows 24 ticks lets the merge go on to the target (cap: total work 22 / 2 devices = 11,
    # raised to the costliest cluster 10 -> 11: {s, a} and {b, j} fit, their critical path is 11 + 1 + 11 = 23).
    loose = coarsen(inst, target_clusters=2, cp_tolerance=1.0)
    assert loose.num_clusters == 2
    assert loose.critical_path_after_tick <= 28


def test_count_merge_ignores_the_critical_path_and_the_tolerance_does_not() -> None:
    inst = layered_dag(500, 8, seed=0)
    count = coarsen(inst, target_clusters=96)
    bounded = coarsen(inst, target_clusters=96, cp_tolerance=TOLERANCE)
    assert count.critical_path_after_tick > 2 * count.critical_path_before_tick  # the 4x-12x
    assert bounded.critical_path_after_tick <= 1.05 * bounded.critical_path_before_tick + EPS
    assert bounded.num_clusters < inst.num_tasks / 1.5  # it still merges a third of the ops away


@pytest.mark.parametrize("n, devices, comm_ratio, seed", [
    (300, 4, 0.5, 0), (300, 8, 2.0, 1), (500, 8, 1.0, 0), (800, 4, 1.0, 2), (1000, 8, 0.5, 3), (2000, 8, 1.0, 0)])
@pytest.mark.parametrize("tolerance", [0.0, 0.05, 0.25])
def test_tolerance_holds_on_layered_dags(n: int, devices: int, comm_ratio: float, seed: int,
                                         tolerance: float) -> None:
    inst = layered_dag(n, devices, seed=seed, comm_ratio=comm_ratio, heterogeneous=seed % 2 == 1)
    res = coarsen(inst, target_clusters=solver_size_target(devices), cp_tolerance=tolerance)
    clusters = [list(c) for c in res.clusters]
    assert_partition(inst, clusters)
    assert quotient_is_acyclic(inst, clusters)
    assert_within(inst, clusters, tolerance)
    assert res.critical_path_after_tick <= (1 + tolerance) * res.critical_path_before_tick + EPS
    assert res.num_clusters < n


def test_more_tolerance_merges_more() -> None:
    inst = layered_dag(1000, 8, seed=1)
    counts = [coarsen(inst, target_clusters=1, cp_tolerance=t).num_clusters for t in (0.0, 0.05, 0.5, 2.0)]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]


def test_tolerance_holds_on_the_stacked_moe(tmp_path: Path) -> None:
    path = write_moe_model(tmp_path / "moe8.onnx",
                           MoEConfig(layers=8, experts=4, hidden=16, ffn=32, heads=2, seq_len=8, vocab=32))
    for profile in ("h100-8-nvlink", "cpu-4"):
        inst = prepare(path, load_topology(PROFILES / f"{profile}.yaml")).instance
        res = coarsen(inst, cp_tolerance=TOLERANCE)
        clusters = [list(c) for c in res.clusters]
        assert_partition(inst, clusters)
        assert quotient_is_acyclic(inst, clusters)
        assert_within(inst, clusters, TOLERANCE)
        assert res.num_clusters <= max(solver_size_target(inst.num_devices), inst.num_tasks // 2)


def test_bundled_moe_reaches_the_solver_size_within_the_tolerance() -> None:
    for profile in ("a100-4-pcie", "cpu-4"):
        inst = prepare(DATA / "models" / "moe.onnx", load_topology(PROFILES / f"{profile}.yaml")
                       ).instance
        res = coarsen(inst, target_clusters=96, cp_tolerance=TOLERANCE)
        assert res.num_clusters == 96
        assert_within(inst, [list(c) for c in res.clusters], TOLERANCE)


@settings(max_examples=80, deadline=None)
@given(random_dags(), st.integers(1, 10), st.sampled_from([0.0, 0.05, 0.5]))
def test_bounded_merges_are_valid_contractions_within_the_tolerance(inst: SchedulingInstance, target: int,
                                                                     tolerance: float) -> None:
    res = coarsen(inst, target_clusters=target, cp_tolerance=tolerance)
    clusters = [list(c) for c in res.clusters]
    assert_partition(inst, clusters)
    assert quotient_is_acyclic(inst, clusters)
    assert len(res.instance.topological_order) == res.instance.num_tasks  # the contraction is acyclic
    assert_within(inst, clusters, tolerance)
    masks = eligibility_masks(inst)
    for members in clusters:  # only clusters that may run on the same devices merge
        assert len({masks[v] for v in members}) == 1
    # members are listed in a topological order of the fine graph (what expansion and contraction need)
    pos = Adjacency.of(inst).pos
    assert all(pos[a] < pos[b] for members in clusters for a, b in zip(members, members[1:]))


@settings(max_examples=60, deadline=None)
@given(random_dags())
def test_pieces_of_linear_clusters_never_lengthen_the_critical_path(inst: SchedulingInstance) -> None:
    adj = Adjacency.of(inst)
    linear = repair_cycles(inst, linear_clustering(inst))
    pieces = path_pieces(adj, linear, eligibility_masks(inst))
    assert_partition(inst, pieces)
    assert quotient_is_acyclic(inst, pieces)
    assert_within(inst, pieces, 0.0)
    for members in pieces:  # each piece is a plain path
        for u, v in zip(members, members[1:]):
            assert {x for x, _ in adj.succ[u]} == {v} and {p for p, _ in adj.pred[v]} == {u}


def test_stops_at_the_target_when_merging_is_free() -> None:
    # A chain 0 -> 1 -> ... -> 11 (5 ticks each, comm 3) whose tasks 0..9 also feed task 11: no task has a single
    # successor, so every piece is one task.  Merging along the chain only removes comm from the critical path
    # (12 x 5 + 11 x 3 = 93 ticks; a side output leaves at its cluster's end, still before the chain reaches 11),
    # so the merge goes on until the target (the load-balance cap, 60 / 2 devices = 30 ticks, allows 4 clusters).
    edges = [(i, i + 1, 3) for i in range(11)] + [(i, 11, 3) for i in range(10)]
    inst = SchedulingInstance.uniform("ladder", [5] * 12, edges, 2)
    res = coarsen(inst, target_clusters=4, cp_tolerance=0.0)
    assert res.num_linear_clusters == 1 and res.num_clusters == 4
    assert res.critical_path_before_tick == 93
    assert res.critical_path_after_tick < 93


def test_critical_paths_of_singletons_and_of_one_cluster() -> None:
    inst = fork_join()
    assert critical_paths(inst, [[i] for i in range(4)]) == (14.0, 14.0)
    assert critical_paths(inst, [[0, 1, 2, 3]]) == (14.0, 22.0)  # one atomic task: all work in a row, no comm
    coarse = contract(inst, [[0, 1], [2, 3]])
    assert critical_paths(inst, [[0, 1], [2, 3]])[1] == critical_path_length(
        coarse, task_cost_estimate(coarse), edge_comm_estimate(coarse))


def test_solver_size_target() -> None:
    assert solver_size_target(8) == 96
    assert solver_size_target(4) == 192
    assert solver_size_target(1000) == 2
    assert solver_size_target(8, cells=80) == 10


def test_negative_tolerance_is_refused() -> None:
    with pytest.raises(ValueError, match="cp_tolerance"):
        coarsen(fork_join(), cp_tolerance=-0.1)


@pytest.mark.parametrize("push_limit", [1, 3])
def test_tolerance_holds_when_raises_become_shifts(push_limit: int) -> None:
    # A raise pushed to more than the policy's push limit becomes a shift of every later position (a cruder bound,
    # still a bound): with the limit at 1 or 3 nearly every merge takes that path, and the tolerance must still hold.
    policy = CoarsenPolicy(push_limit=push_limit)
    for seed, devices in ((0, 8), (1, 4)):
        inst = layered_dag(600, devices, seed=seed, comm_ratio=1.0 + seed)
        res = coarsen(inst, target_clusters=8, cp_tolerance=TOLERANCE, policy=policy)
        assert quotient_is_acyclic(inst, [list(c) for c in res.clusters])
        assert_within(inst, [list(c) for c in res.clusters], TOLERANCE)
        assert res.num_clusters < inst.num_tasks


@settings(max_examples=60, deadline=None)
@given(random_dags(), st.integers(1, 6), st.sampled_from([0.0, 0.2]))
def test_shifted_bounds_on_random_dags(inst: SchedulingInstance, target: int, tolerance: float) -> None:
    res = coarsen(inst, target_clusters=target, cp_tolerance=tolerance, policy=CoarsenPolicy(push_limit=1))
    clusters = [list(c) for c in res.clusters]
    assert_partition(inst, clusters)
    assert quotient_is_acyclic(inst, clusters)
    assert_within(inst, clusters, tolerance)


def test_search_progress_reports_the_coarse_critical_path() -> None:
    # the linear cluster round of the search prints the op graph's and the solved clusters' critical paths
    fine = prepare(DATA / "models" / "moe.onnx", load_topology(PROFILES / "cpu-4.yaml")).instance
    lines: list[str] = []
    plan_instance(fine, SolveOptions(time_limit_s=4, threads=2, decomposition_share=0.0, max_rounds=1),
                  lines.append)
    reported = [m for m in lines if m.startswith("linear clustering:")]
    assert len(reported) == 1
    assert "critical path estimate" in reported[0] and " on ops -> " in reported[0]
    assert reported[0].endswith(" on clusters)")


def _moe_cpu4() -> SchedulingInstance:
    return prepare(DATA / "models" / "moe.onnx", load_topology(PROFILES / "cpu-4.yaml")).instance


def test_search_skips_linear_rounds_above_the_op_limit() -> None:
    # above the policy's linear_max_ops the merge would leave thousands of clusters: the phase says so and runs no round
    fine = _moe_cpu4()
    lines: list[str] = []
    out = plan_instance(fine, SolveOptions(time_limit_s=4, threads=2, decomposition_share=0.0, max_rounds=1),
                        lines.append, policy=dataclasses.replace(SearchPolicy(), linear_max_ops=fine.num_tasks - 1))
    assert any(m.startswith(f"linear clustering skipped: {fine.num_tasks} ops") for m in lines)
    assert not any(m.startswith("linear cluster round") for m in lines)
    assert "linear cluster round" not in [p.source for p in out.phases]


def test_search_skips_linear_rounds_when_clusters_exceed_the_model_size() -> None:
    # the merge stops short of the backend's count when merging further would lengthen the critical path; a
    # round on more than cluster_round_factor x the count is not attempted
    fine = _moe_cpu4()
    lines: list[str] = []
    plan_instance(fine, SolveOptions(time_limit_s=4, threads=2, decomposition_share=0.0, max_rounds=1),
                  lines.append, policy=dataclasses.replace(SearchPolicy(), cluster_round_factor=0))
    assert any(m.startswith("linear clustering:") for m in lines)
    assert any(m.startswith("linear cluster rounds skipped:") for m in lines)
    assert not any(m.startswith("linear cluster round ") for m in lines)
