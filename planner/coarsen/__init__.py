"""Coarsening: critical-path linear clustering, cycle repair, merging and contraction of a `SchedulingInstance`.

Modules, one idea each: `levels` (estimates, t/b-levels, critical path), `linear` (linear clustering), `repair`
(acyclic cluster graph), `split` (memory limit), `merge` (granularity), `contract` (the coarse instance),
`bounded` (merging that keeps the coarse critical path within a tolerance of the op graph's), `policy` (the knobs,
`CoarsenPolicy`), `expand` (cluster plan -> op plan), `pipeline` (`coarsen`), `refine` (cluster surgery between
rounds of the bi-level search: split to a target size, refine on the critical path, carry plans across
clusterings), `adjacency`, `dot` (Graphviz).  Timings are in `experiments/bench_coarsen.py`.
"""

from planner.coarsen.bounded import critical_paths, solver_size_target
from planner.coarsen.contract import cluster_name, contract
from planner.coarsen.expand import expand_plan
from planner.coarsen.levels import (
    b_levels,
    critical_path,
    critical_path_length,
    edge_comm_estimate,
    eligibility_masks,
    representative_link_class,
    t_levels,
    task_cost_estimate,
)
from planner.coarsen.linear import linear_clustering
from planner.coarsen.merge import merge_clusters
from planner.coarsen.pipeline import CoarseningResult, coarsen, default_max_param_bytes
from planner.coarsen.policy import DEFAULT_COARSEN_POLICY, CoarsenPolicy
from planner.coarsen.repair import quotient_is_acyclic, repair_cycles
from planner.coarsen.split import split_by_param_bytes

__all__ = [
    "DEFAULT_COARSEN_POLICY",
    "CoarseningResult",
    "CoarsenPolicy",
    "b_levels",
    "cluster_name",
    "coarsen",
    "contract",
    "critical_path",
    "critical_path_length",
    "critical_paths",
    "default_max_param_bytes",
    "edge_comm_estimate",
    "eligibility_masks",
    "expand_plan",
    "linear_clustering",
    "merge_clusters",
    "quotient_is_acyclic",
    "repair_cycles",
    "representative_link_class",
    "solver_size_target",
    "split_by_param_bytes",
    "t_levels",
    "task_cost_estimate",
]
