"""`coarsen`: the whole coarsening pipeline with sensible defaults, and its result.

    linear clustering -> repair cycles -> split clusters too big for memory -> merge to the target -> contract

With `cp_tolerance` the chains are first cut where an outside input or output would make an atomic
cluster wait (`planner.coarsen.bounded.path_pieces`) and then merged only while the coarse critical path stays within
(1 + cp_tolerance) x the op graph's, down to `target_clusters` (default: `solver_size_target`, the clusters the
placement model handles for this many devices) or until no allowed merge is left (`bounded_merge`).  Without it,
merging goes to the count target whatever the critical path becomes (`planner.coarsen.merge`).

Defaults (`planner.coarsen.policy.CoarsenPolicy`): at most `target_clusters` clusters when no target is given; no
cluster above half the largest device memory in parameter bytes (`param_fraction`; no limit when memory is
unbounded).  Critical paths
before and after are measured with the same estimate functions (`task_cost_estimate`, `edge_comm_estimate`), on
the fine instance and on the contracted one (where a cluster is one atomic task), in ticks.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.coarsen.adjacency import Adjacency
from planner.coarsen.bounded import bounded_merge, path_pieces, solver_size_target
from planner.coarsen.contract import _contract
from planner.coarsen.expand import expand_plan
from planner.coarsen.levels import (
    _b_levels,
    critical_path_length,
    edge_comm_estimate,
    eligibility_masks,
    task_cost_estimate,
)
from planner.coarsen.linear import _linear_clustering
from planner.coarsen.merge import merge_on_adjacency
from planner.coarsen.policy import DEFAULT_COARSEN_POLICY, CoarsenPolicy
from planner.coarsen.repair import _repair
from planner.coarsen.split import _split
from planner.cost.instance import UNBOUNDED_BYTES, SchedulingInstance


@dataclass(frozen=True, eq=False)
class CoarseningResult:
    """The coarse instance and how it was made.

    `clusters[k]` lists the fine task indices of coarse task k in a topological order; clusters are in a
    topological order of the coarse graph.  `cut_bytes` is the bytes on the coarse edges (tensors unioned per
    cluster pair).  `seconds` holds wall time per stage, for benchmarks only.
    """

    fine: SchedulingInstance
    instance: SchedulingInstance
    clusters: tuple[tuple[int, ...], ...]
    num_linear_clusters: int
    num_repaired_clusters: int
    critical_path_before_tick: float
    critical_path_after_tick: float
    cut_bytes: int
    seconds: Mapping[str, float] = field(default_factory=dict)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(len(c) for c in self.clusters)

    @property
    def num_clusters(self) -> int:
        return len(self.clusters)

    def expand_plan(self, plan: Any) -> Any:
        """A plan over the clusters -> a plan over the fine tasks (see `planner.coarsen.expand`)."""
        return expand_plan(self.fine, self.instance, self.clusters, plan)


def default_max_param_bytes(inst: SchedulingInstance, policy: CoarsenPolicy = DEFAULT_COARSEN_POLICY) -> float | None:
    """`policy.param_fraction` (half) of the largest device memory, or None when memory is unbounded."""
    if inst.num_devices == 0:
        return None
    biggest = int(inst.capacity_bytes.max())
    return None if biggest >= UNBOUNDED_BYTES // 2 else policy.param_fraction * biggest


def coarsen(inst: SchedulingInstance, *, target_clusters: int | None = None,
            min_cluster_cost_fraction: float | None = None, max_cluster_param_bytes: float | None = None,
            name: str | None = None, cp_tolerance: float | None = None,
            policy: CoarsenPolicy = DEFAULT_COARSEN_POLICY) -> CoarseningResult:
    """Coarsen `inst` (see module).  Without targets, `target_clusters` is `policy.target_clusters`
    (`solver_size_target` with `cp_tolerance`); `max_cluster_param_bytes` None means the default limit
    (`default_max_param_bytes`).  `cp_tolerance` >= 0 bounds the coarse critical path (module docstring; the
    search passes `policy.cp_tolerance`).  `policy`: the defaults and the merges' knobs."""
    if cp_tolerance is not None and not cp_tolerance >= 0:
        raise ValueError(f"cp_tolerance must be >= 0, got {cp_tolerance}")
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[stage] = now - clock
        clock = now

    if target_clusters is None and min_cluster_cost_fraction is None:
        target_clusters = (policy.target_clusters if cp_tolerance is None
                           else solver_size_target(max(1, inst.num_devices), policy.placement_cells))
    limit = max_cluster_param_bytes if max_cluster_param_bytes is not None else default_max_param_bytes(inst, policy)
    adj = Adjacency.of(inst)
    cost = task_cost_estimate(inst).tolist()
    comm = edge_comm_estimate(inst).tolist()
    param = inst.param_bytes.tolist()
    masks = eligibility_masks(inst)
    lap("prepare")
    before = max(_b_levels(adj, cost, comm), default=0.0)
    linear = _linear_clustering(adj, cost, comm, masks)
    lap("linear")
    repaired = _repair(adj, linear)
    lap("repair")
    if cp_tolerance is not None:
        repaired = path_pieces(adj, repaired, masks)
    if limit is not None:
        repaired = _split(repaired, param, limit)
    if cp_tolerance is None:
        merged = merge_on_adjacency(adj, repaired, cost, comm, param, masks, num_devices=max(1, inst.num_devices),
                                    target_clusters=target_clusters,
                                    min_cluster_cost_fraction=min_cluster_cost_fraction,
                                    max_cluster_param_bytes=limit, policy=policy)
    else:
        merged = bounded_merge(adj, repaired, cost, comm, param, masks, num_devices=max(1, inst.num_devices),
                               target_clusters=target_clusters or 1, limit_tick=(1 + cp_tolerance) * before,
                               max_cluster_param_bytes=limit, policy=policy)
    lap("merge")
    coarse = _contract(adj, inst, merged, name)
    lap("contract")
    after = critical_path_length(coarse, task_cost_estimate(coarse), edge_comm_estimate(coarse))
    cut = int(coarse.edge_bytes.sum()) if coarse.edges else 0
    lap("measure")
    return CoarseningResult(
        fine=inst, instance=coarse, clusters=tuple(tuple(c) for c in merged), num_linear_clusters=len(linear),
        num_repaired_clusters=len(repaired), critical_path_before_tick=before, critical_path_after_tick=after,
        cut_bytes=cut, seconds=seconds)
