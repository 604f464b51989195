"""Simulate a baseline schedule on its pipeline, communication streams included.

A `Schedule` gives the order of each device's compute actions; it says nothing about the order of the sends on
a device's communication stream (`unroll` module docstring).  `stream_orders` fixes that order the way a
runtime's communication stream does — first come, first served: whenever a stream is free it starts, among its
sends whose source has ended, the one that became ready first (ties: lower task index) — by a discrete-event
replay, and `simulate_pipeline` then hands the complete per-stream orders to the ordinary simulator
(`planner.schedule.simulate.simulate`), which reproduces the same times (each task as early as its order allows).
Without communication streams it is `simulate_schedule`.
"""

from __future__ import annotations

import heapq

from planner.cost.instance import SchedulingInstance
from planner.pipeline.unroll import TrainingPipeline, instance_for_schedule
from planner.schedule.actions import OverlapAction
from planner.schedule.errors import DeadlockError, ScheduleError
from planner.schedule.program import Schedule
from planner.schedule.simulate import simulate, simulate_schedule
from planner.schedule.timeline import Timeline


def compute_orders(schedule: Schedule, inst: SchedulingInstance) -> list[list[int]]:
    """Per compute device, the instance tasks of the schedule's compute actions (a pair maps to its own task if
    the instance has one, else to its two halves); SEND/RECV actions are ignored."""
    index = inst.task_index
    out: list[list[int]] = []
    for row in schedule.actions:
        order: list[int] = []
        for a in row:
            if a.is_comm:
                continue
            names = [str(a)] if str(a) in index or not isinstance(a, OverlapAction) else \
                [str(a.forward), str(a.backward)]
            for n in names:
                if n not in index:
                    raise ScheduleError(f"schedule {schedule.name!r}: action {n!r} has no task in {inst.name!r}")
                order.append(index[n])
        out.append(order)
    return out


def stream_orders(inst: SchedulingInstance, orders: list[list[int]], num_compute: int) -> list[list[int]]:
    """Complete `orders` (compute streams 0..num_compute-1) with first-come-first-served communication streams."""
    n, nd = inst.num_tasks, inst.num_devices
    device_of = [-1] * n
    for d, row in enumerate(orders):
        for t in row:
            device_of[t] = d
    for t in range(n):
        if device_of[t] < 0:
            device_of[t] = next(d for d in range(num_compute, nd) if inst.eligible(t, d))
    pending = [len(p) for p in inst.predecessors]
    ready_at = [0] * n
    pos = [0] * nd
    free_at = [0] * nd
    busy = [False] * nd
    ready_q: list[list[tuple[int, int]]] = [[] for _ in range(nd)]  # comm streams: (ready tick, task)
    out: list[list[int]] = [list(r) for r in orders] + [[] for _ in range(nd - len(orders))]
    heap: list[tuple[int, int, int]] = []
    done = 0

    def try_start(d: int) -> None:
        if busy[d]:
            return
        if d < num_compute:
            if pos[d] >= len(orders[d]) or pending[orders[d][pos[d]]]:
                return
            t = orders[d][pos[d]]
            pos[d] += 1
        else:
            if not ready_q[d]:
                return
            _, t = heapq.heappop(ready_q[d])
            out[d].append(t)
        s = max(free_at[d], ready_at[t])
        busy[d] = True
        heapq.heappush(heap, (s + int(inst.duration_tick[t, d]), d, t))

    for t in range(n):  # communication tasks with no predecessor (an all-to-all of the first stage) are ready
        if device_of[t] >= num_compute and not pending[t]:
            heapq.heappush(ready_q[device_of[t]], (0, t))
    for d in range(nd):
        try_start(d)
    while heap:
        now, d, u = heapq.heappop(heap)
        busy[d] = False
        free_at[d] = now
        done += 1
        touched = {d}
        for v, _e in inst.successors[u]:
            ready_at[v] = max(ready_at[v], now)
            pending[v] -= 1
            if pending[v] == 0:
                touched.add(device_of[v])
                if device_of[v] >= num_compute:
                    heapq.heappush(ready_q[device_of[v]], (ready_at[v], v))
        for x in sorted(touched):
            try_start(x)
    if done < n:
        raise DeadlockError(f"the compute orders of {inst.name!r} deadlock ({n - done} tasks never start)")
    return out


def simulate_pipeline(pipeline: TrainingPipeline, schedule: Schedule) -> tuple[SchedulingInstance, Timeline]:
    """(the instance `schedule` runs on, its simulated timeline), communication streams included."""
    inst = instance_for_schedule(pipeline, schedule)
    if not pipeline.streams_on:
        return inst, simulate_schedule(inst, schedule)
    orders = stream_orders(inst, compute_orders(schedule, inst), pipeline.num_devices)
    return inst, simulate(inst, orders)
