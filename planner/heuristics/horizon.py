"""Cheap schedules that give the placement formulation a horizon and a first hint when no warm start is passed.

Not a competitor of HEFT (`planner.heuristics.list_schedule`; pass its plan as `warm_start`): a plain
critical-path list schedule, ignoring memory, and the serial bound.

* `critical_path_schedule`: repeatedly take the ready task with the longest remaining path (bottom level: its fastest
  duration plus the longest such path below it, communication ignored) and put it on the eligible device where it
  finishes first (after its device is free and its inputs have arrived); no insertion into idle gaps.
* `serial_bound_tick`: every task one after another in topological order, each on its fastest eligible device,
  waiting for every incoming transfer at its slowest: no schedule of a memory-unconstrained instance needs more.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from planner.cost.instance import INELIGIBLE, SchedulingInstance


@dataclass(frozen=True)
class TimedAssignment:
    """Per task: device index, start tick, end tick."""

    device: tuple[int, ...]
    start: tuple[int, ...]
    end: tuple[int, ...]

    @property
    def makespan_tick(self) -> int:
        return max(self.end, default=0)


def bottom_levels(instance: SchedulingInstance) -> np.ndarray:
    """Per task, its fastest duration plus the longest such chain of successors (communication ignored)."""
    fastest = instance.min_duration_tick()
    level = np.zeros(instance.num_tasks, dtype=np.int64)
    for t in reversed(instance.topological_order):
        level[t] = fastest[t] + max((level[v] for v, _ in instance.successors[t]), default=0)
    return level


def critical_path_schedule(instance: SchedulingInstance) -> TimedAssignment:
    """The list schedule of the module docstring (memory ignored)."""
    n, nd = instance.num_tasks, instance.num_devices
    level = bottom_levels(instance)
    indeg = [len(p) for p in instance.predecessors]
    ready = [(-int(level[t]), t) for t in range(n) if indeg[t] == 0]
    heapq.heapify(ready)
    free = [0] * nd
    device = [-1] * n
    start = [0] * n
    end = [0] * n
    while ready:
        _, t = heapq.heappop(ready)
        best: tuple[int, int, int] | None = None
        for d in range(nd):
            if not instance.eligible(t, d):
                continue
            est = free[d]
            for u, e in instance.predecessors[t]:
                est = max(est, end[u] + instance.comm(e, device[u], d))
            fin = est + int(instance.duration_tick[t, d])
            if best is None or (fin, est, d) < best:
                best = (fin, est, d)
        if best is None:
            raise ValueError(f"task {instance.task_names[t]!r} has no eligible device")
        fin, est, d = best
        device[t], start[t], end[t] = d, est, fin
        free[d] = fin
        for v, _ in instance.successors[t]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, (-int(level[v]), v))
    return TimedAssignment(tuple(device), tuple(start), tuple(end))


def serial_bound_tick(instance: SchedulingInstance, *, slowest: bool = False) -> int:
    """Makespan of running every task alone in topological order (on its fastest eligible device, or with
    `slowest` at its slowest eligible duration), each waiting for the slowest transfer of each incoming edge."""
    dur = instance.duration_tick
    if slowest:
        per_task = np.where(dur < INELIGIBLE, dur, 0).max(axis=1, initial=0)
    else:
        per_task = instance.min_duration_tick()
    comm = instance.comm_tick.max(axis=1, initial=0) if len(instance.edges) else np.zeros(0, dtype=np.int64)
    return int(per_task.sum() + comm.sum())
