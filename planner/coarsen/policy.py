"""The coarsening's tuning, as data: one frozen record (`CoarsenPolicy`), each field a knob with the value the
coarsening runs with by default.

`coarsen(..., policy=...)` passes it down to the merges (`planner.coarsen.merge`, `planner.coarsen.bounded`); the
placement search nests one (`planner.search.policy.SearchPolicy.coarsen`).  A study or a test that tries another
value builds one with `dataclasses.replace`, never by patching a module.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_COARSEN_POLICY", "CoarsenPolicy"]


@dataclass(frozen=True)
class CoarsenPolicy:
    """Every knob of the coarsening (`planner.coarsen.pipeline.coarsen` and the merges below it)."""

    # the tolerance the search's linear rounds pass as `cp_tolerance`: the coarse critical path stays within
    # 1.05 x the op graph's, so a plan of the clusters loses little to the clustering
    cp_tolerance: float = 0.05
    # clusters when no target is given and the critical path is not bounded: few enough for a placement round
    target_clusters: int = 256
    # no cluster above this share of the largest device memory in parameter bytes: a cluster must fit a device
    # beside the activations of others
    param_fraction: float = 0.5
    # clusters x devices the placement model handles in a round's budget (`planner.coarsen.bounded`, its module
    # docstring): 96 clusters on 8 devices, what CP-SAT solves or improves well within a round on the benchmarks
    placement_cells: int = 768
    # at most this share of the live clusters merges in one round of the count-target merge: later merges then see
    # the costs and edges the earlier ones made
    merge_round_fraction: float = 0.5
    # the same for a round of the bounded merge, whose candidates are ordered by the critical-path bounds of the
    # round's start
    bounded_round_fraction: float = 0.5
    # a bounded round that merges less than this share of the live clusters is the last: later rounds merged 1-2 %
    # each on layered DAGs, at the cost of a whole round
    min_round_fraction: float = 0.02
    max_rounds: int = 64  # bounded rounds at most: with the shares above, far more than a graph ever needs
    # clusters a raise is pushed to one by one before the rest becomes a shift (`planner.coarsen.bounded`): a
    # longer push keeps tighter bounds at a cost linear in it per merge
    push_limit: int = 64


DEFAULT_COARSEN_POLICY = CoarsenPolicy()  # for argument defaults
