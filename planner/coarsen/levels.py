"""Cost estimates, t-levels, b-levels and the critical path of a `SchedulingInstance`.

Coarsening has to reason about time before anything is placed, so it uses one representative number per task and
per edge (both in ticks, as floats):

* `task_cost_estimate`: a task's **mean duration over the devices it is eligible on** (the usual choice of HEFT and
  of list schedulers on heterogeneous machines: it neither assumes the task lands on the fastest device nor
  penalises it for devices it cannot use).  A task eligible nowhere gets 0 (the formulation reports it).
* `edge_comm_estimate`: an edge's delay over the **most common link class among ordered pairs of distinct
  devices** (what a cross-device edge most likely pays); ties go to the slower class.  On one device every
  estimate is 0.

With cost c and comm w (both >= 0):

    t_level[v] = max over edges (u, v) of t_level[u] + c[u] + w[u, v]      (0 for a source): earliest start
    b_level[v] = c[v] + max over edges (v, x) of w[v, x] + b_level[x]       (c[v] for a sink): longest tail
    critical path length = max_v t_level[v] + b_level[v] = max over sources of b_level

Every function is one pass over the edges in a topological order: O(tasks + edges).
"""

from __future__ import annotations

import numpy as np

from planner.coarsen.adjacency import Adjacency
from planner.cost.instance import INELIGIBLE, SchedulingInstance


def task_cost_estimate(inst: SchedulingInstance) -> np.ndarray:
    """float64 [n_tasks]: each task's mean duration over its eligible devices (0 where none), in ticks."""
    return inst.mean_duration_tick()


def eligibility_masks(inst: SchedulingInstance) -> list[int]:
    """Per task, a bit mask of the devices it may run on (bit d set iff eligible on device d)."""
    ok = inst.duration_tick < INELIGIBLE
    d = inst.num_devices
    if d <= 62:
        return (ok.astype(np.int64) << np.arange(d, dtype=np.int64)).sum(axis=1).tolist() if d else [0] * len(ok)
    masks = [0] * inst.num_tasks
    for j in range(d):
        for v in np.flatnonzero(ok[:, j]).tolist():
            masks[v] |= 1 << j
    return masks


def representative_link_class(inst: SchedulingInstance) -> int:
    """The most common link class among ordered pairs of distinct devices (ties: the slower); 0 if one device."""
    d = inst.num_devices
    if d < 2:
        return 0
    classes = inst.link_class[~np.eye(d, dtype=bool)]
    counts = np.bincount(classes, minlength=inst.num_link_classes)
    counts[0] = 0
    best = np.flatnonzero(counts == counts.max())
    if len(best) == 1 or len(inst.edges) == 0:
        return int(best[0])
    slowness = inst.comm_tick[:, best].sum(axis=0)
    return int(best[int(np.argmax(slowness))])


def edge_comm_estimate(inst: SchedulingInstance) -> np.ndarray:
    """float64 [n_edges]: each edge's delay over `representative_link_class` (fixed ticks included), in ticks."""
    c = representative_link_class(inst)
    if c == 0:
        return np.zeros(len(inst.edges))
    return inst.comm_tick[:, c].astype(np.float64)


def _t_levels(adj: Adjacency, cost: list[float], comm: list[float]) -> list[float]:
    t = [0.0] * adj.n
    succ = adj.succ
    for v in adj.topo:
        end = t[v] + cost[v]
        for w, e in succ[v]:
            x = end + comm[e]
            if x > t[w]:
                t[w] = x
    return t


def _b_levels(adj: Adjacency, cost: list[float], comm: list[float]) -> list[float]:
    b = [0.0] * adj.n
    succ = adj.succ
    for v in reversed(adj.topo):
        tail = 0.0
        for w, e in succ[v]:
            x = comm[e] + b[w]
            if x > tail:
                tail = x
        b[v] = cost[v] + tail
    return b


def _critical_path(adj: Adjacency, cost: list[float], comm: list[float], b: list[float]) -> list[int]:
    sources = [v for v in adj.topo if not adj.pred[v]]
    if not sources:
        return []
    v = max(sources, key=lambda s: (b[s], -adj.pos[s]))
    path = [v]
    while adj.succ[v]:
        v = max(adj.succ[v], key=lambda we: (comm[we[1]] + b[we[0]], -adj.pos[we[0]]))[0]
        path.append(v)
    return path


def _check(inst: SchedulingInstance, cost: np.ndarray, comm: np.ndarray) -> tuple[list[float], list[float]]:
    cost = np.asarray(cost, dtype=np.float64)
    comm = np.asarray(comm, dtype=np.float64)
    if cost.shape != (inst.num_tasks,) or comm.shape != (len(inst.edges),):
        raise ValueError(f"cost has shape {cost.shape} and comm {comm.shape}, "
                         f"expected {(inst.num_tasks,)} and {(len(inst.edges),)}")
    return cost.tolist(), comm.tolist()


def t_levels(inst: SchedulingInstance, cost: np.ndarray, comm: np.ndarray) -> np.ndarray:
    """float64 [n_tasks]: earliest start of each task with unbounded devices and `comm` paid on every edge."""
    c, w = _check(inst, cost, comm)
    return np.array(_t_levels(Adjacency.of(inst), c, w))


def b_levels(inst: SchedulingInstance, cost: np.ndarray, comm: np.ndarray) -> np.ndarray:
    """float64 [n_tasks]: longest path from each task to an exit, its own cost and every edge's comm included."""
    c, w = _check(inst, cost, comm)
    return np.array(_b_levels(Adjacency.of(inst), c, w))


def critical_path(inst: SchedulingInstance, cost: np.ndarray, comm: np.ndarray) -> list[int]:
    """The tasks of one longest source-to-sink path (cost of tasks + comm of edges), in order; [] if no tasks.

    Ties go to the task earliest in the topological order, so the answer is deterministic.
    """
    c, w = _check(inst, cost, comm)
    adj = Adjacency.of(inst)
    return _critical_path(adj, c, w, _b_levels(adj, c, w))


def critical_path_length(inst: SchedulingInstance, cost: np.ndarray, comm: np.ndarray) -> float:
    """Length (ticks) of the critical path: max over tasks of t_level + b_level; 0.0 if no tasks."""
    c, w = _check(inst, cost, comm)
    b = _b_levels(Adjacency.of(inst), c, w)
    return max(b, default=0.0)
