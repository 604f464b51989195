"""Critical-path linear clustering: peel the heaviest path off the graph again and again.

Kim & Browne's linear clustering recomputes the levels after every peeled path (the peeled path's edges zeroed),
which costs O(tasks x (tasks + edges)).  We use the standard fast variant with **static levels**:

1. compute b-levels once on the full graph (`task_cost_estimate`, `edge_comm_estimate`; edges into and out of
   already-clustered tasks keep counting: a level is never updated);
2. visit the tasks in decreasing b-level (ties: earlier in the topological order first); the first unclustered
   task starts a new cluster;
3. from there, walk to the unclustered successor with the largest comm + b-level (ties: earlier in the topological
   order) among those that share an eligible device with every task of the path so far (a cluster must be able
   to run somewhere), until there is none; the walked path is the cluster.

Since b_level[u] >= b_level[v] for every edge u -> v, the start task of every path has all its predecessors
already clustered, so each path is the heaviest remaining path *as measured by the static levels* (the
approximation: a level may count a tail through clustered tasks).  Each cluster is a chain u1 -> u2 -> ... of
edges of the DAG, whose internal edges then cost nothing.

Cost: one sort (O(n log n)) plus one scan of every task's successor list (each task is the walk's current task
at most once): O(n log n + edges), near-linear.

Two linear clusters can still form a cycle in the quotient graph (paths crossing); `repair_cycles` fixes that.
"""

from __future__ import annotations

import numpy as np

from planner.coarsen.adjacency import Adjacency
from planner.coarsen.levels import _b_levels, edge_comm_estimate, eligibility_masks, task_cost_estimate
from planner.cost.instance import SchedulingInstance


def _linear_clustering(adj: Adjacency, cost: list[float], comm: list[float], masks: list[int]) -> list[list[int]]:
    b = _b_levels(adj, cost, comm)
    pos = adj.pos
    # decreasing b-level, ties by topological position
    order = np.lexsort((np.asarray(pos), -np.asarray(b))).tolist() if adj.n else []
    done = bytearray(adj.n)
    succ = adj.succ
    clusters: list[list[int]] = []
    for v in order:
        if done[v]:
            continue
        done[v] = 1
        path = [v]
        cur = v
        mask = masks[v]
        while True:
            best = -1
            best_val = -1.0
            best_pos = 0
            for w, e in succ[cur]:
                if done[w] or not mask & masks[w]:
                    continue
                val = comm[e] + b[w]
                if val > best_val or (val == best_val and pos[w] < best_pos):
                    best, best_val, best_pos = w, val, pos[w]
            if best < 0:
                break
            done[best] = 1
            mask &= masks[best]
            path.append(best)
            cur = best
        clusters.append(path)
    return clusters


def linear_clustering(inst: SchedulingInstance) -> list[list[int]]:
    """Partition the tasks into chains of the DAG by critical-path peeling (static-level variant, see module).

    Returns the clusters in peeling order, each listed along its chain (source end first).  The quotient graph
    may contain cycles; pass the result through `repair_cycles` before contracting.
    """
    adj = Adjacency.of(inst)
    return _linear_clustering(adj, task_cost_estimate(inst).tolist(), edge_comm_estimate(inst).tolist(),
                              eligibility_masks(inst))
