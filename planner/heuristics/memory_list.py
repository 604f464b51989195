"""A memory-aware list scheduler (the fair baseline under memory pressure), and the memory any plan uses.

`memory_list(instance)` is HEFT-like — tasks by upward rank, each on the device where it finishes earliest — with
two memory rules on top:

1. **Never over capacity.**  A device is a candidate only if the conservative tracker of
   `planner/heuristics/memory.py` accepts the task there (parameters held all step, outputs live until every
   consumer of their producer is placed, then until their true end).  The tracker only ever over-estimates, so
   every plan this returns fits capacity in the validator's memory model (`planner/schedule/validate.py`).
2. **Keep room for the parameters still to come** (what plain HEFT with the tracker lacks: it fills the fastest
   device first and runs into a dead end late in the graph).  Let R be the parameters of the tasks not yet placed
   (excluding t) and, per device d', room(d') = capacity(d') - max(params held on d' + reserve, tracker bound on
   d').  Placing t on d is *balanced* when room(d) - param(t) >= 0 and
   sum over d' of max(0, room(d') - [d' = d] param(t)) >= R, i.e. the parameters still to come can still be
   spread over what is left.  `reserve` is room kept on every device for activations: by default the largest
   non-parameter memory any one task needs while it runs (`task_alone_bytes - param_bytes`).  Among the devices
   the tracker accepts, the earliest-finishing balanced one wins; when none is balanced, the earliest-finishing one
   the tracker accepts (the rule is a look-ahead, not a proof).

Tasks are appended after the last task of a device (no insertion into idle gaps), so the scheduler is simple and
its plans are what a careful engineer's greedy placement would give.  When the tracker accepts the task on no
device, `InfeasibleError` names the task, what it needs, the device with the most free memory, and the proven
lower bound on the capacity any plan needs (`capacity_lower_bound`), so the reader can tell a heuristic's failure
from an impossible instance.

`peak_memory_bytes(instance, plan)` is the per-device peak memory of any plan in the validator's model — what
HEFT or round-robin *without* the memory rule would use (they ignore capacity; the study reports how far over).
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics.list_schedule import upward_rank
from planner.heuristics.memory import (
    MemoryCheck,
    MemoryTracker,
    capacity_lower_bound,
    show_bytes,
    task_alone_bytes,
)
from planner.schedule.plan import Plan, PlanStatus, TaskPlacement
from planner.schedule.validate import check_plan

METHOD = "memory-list"


def default_reserve_bytes(instance: SchedulingInstance) -> int:
    """Room kept on every device for activations: the largest non-parameter need of one task while it runs."""
    if instance.num_tasks == 0:
        return 0
    return int((task_alone_bytes(instance) - instance.param_bytes).max())


def _horizon_tick(instance: SchedulingInstance) -> int:
    """Upper bound on any end tick of an append-only list schedule: every task at its slowest, every transfer."""
    dur = instance.duration_tick
    longest = np.where(dur < INELIGIBLE, dur, 0).max(axis=1, initial=0)
    comm = instance.comm_tick.max(axis=1, initial=0) if len(instance.edges) else np.zeros(0, dtype=np.int64)
    return int(longest.sum()) + int(comm.sum()) + 1


def _ranked_order(instance: SchedulingInstance, priority: np.ndarray) -> list[int]:
    """Tasks, highest priority first among those whose predecessors are all taken (ties: topological order)."""
    position = np.empty(instance.num_tasks, dtype=np.int64)
    position[np.asarray(instance.topological_order, dtype=np.int64)] = np.arange(instance.num_tasks)
    waiting = [len(p) for p in instance.predecessors]
    heap = [(-float(priority[t]), int(position[t]), t) for t in range(instance.num_tasks) if not waiting[t]]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, _, t = heapq.heappop(heap)
        order.append(t)
        for s, _e in instance.successors[t]:
            waiting[s] -= 1
            if not waiting[s]:
                heapq.heappush(heap, (-float(priority[s]), int(position[s]), s))
    return order


def memory_list(instance: SchedulingInstance, *, reserve_bytes: int | None = None) -> Plan:
    """Schedule every task without exceeding any device's capacity (module docstring); status 'heuristic'.

    Raises `InfeasibleError` when a task fits on no device (the message gives the proven capacity bound)."""
    t0 = time.perf_counter()
    n, num_dev = instance.num_tasks, instance.num_devices
    if n and num_dev == 0:
        raise InfeasibleError(f"{METHOD}: instance {instance.name!r} has tasks but no devices")
    reserve = default_reserve_bytes(instance) if reserve_bytes is None else int(reserve_bytes)
    order = _ranked_order(instance, upward_rank(instance))
    tracker = MemoryTracker(instance, 2 * _horizon_tick(instance))
    dur = instance.duration_tick.tolist()
    ok = (instance.duration_tick < INELIGIBLE).tolist()
    comm = instance.comm_tick.tolist()
    link = instance.link_class.tolist()
    param = instance.param_bytes.tolist()
    cap = [int(c) for c in instance.capacity_bytes]
    held = [0] * num_dev  # parameters placed on each device
    to_come = int(instance.param_bytes.sum())
    dev, start, end = [-1] * n, [0] * n, [0] * n
    free = [0] * num_dev
    for t in order:
        to_come -= param[t]
        arrivals = {d: [(p, dev[p], end[p] + comm[e][link[dev[p]][d]]) for p, e in instance.predecessors[t]]
                    for d in range(num_dev) if ok[t][d]}
        if not arrivals:
            raise InfeasibleError(f"{METHOD}: task {instance.task_names[t]!r} may run on no device")
        cands = []
        for d, arr in arrivals.items():
            st = max([free[d], *(a for _, _, a in arr)])
            cands.append((st + dur[t][d], d, st))
        cands.sort()
        room = [cap[d] - max(held[d] + reserve, tracker.high[d]) for d in range(num_dev)]
        spare = sum(max(0, r) for r in room)
        chosen = fallback = None
        closest: tuple[int, int, MemoryCheck] | None = None  # (free - need, device, check): the closest miss
        for fin, d, st in cands:
            chk = tracker.check(t, d, st, arrivals[d])
            if not chk.fits:
                if closest is None or chk.free_bytes - chk.need_bytes > closest[0]:
                    closest = (chk.free_bytes - chk.need_bytes, d, chk)
                continue
            after = room[d] - param[t]
            balanced = after >= 0 and spare - max(0, room[d]) + after >= to_come
            if balanced:
                chosen = (d, st, fin, chk)
                break
            if fallback is None:
                fallback = (d, st, fin, chk)
        pick = chosen or fallback
        if pick is None:
            assert closest is not None
            raise _no_fit(instance, t, closest[1], closest[2])
        d, st, fin, chk = pick
        tracker.place(t, d, st, fin, chk, arrivals[d])
        held[d] += param[t]
        dev[t], start[t], end[t] = d, st, fin
        free[d] = max(free[d], fin)
    names = instance.task_names
    return Plan(
        instance_name=instance.name,
        placements=tuple(TaskPlacement(names[t], dev[t], start[t], end[t]) for t in range(n)),
        device_names=tuple(instance.device_names),
        makespan_tick=max(end, default=0),
        lower_bound_tick=instance.trivial_lower_bound_tick(),
        status=PlanStatus.HEURISTIC,
        method=METHOD,
        solve_time_s=time.perf_counter() - t0,
        tick_s=instance.tick_s,
        time_unit=instance.time_unit,
        task_ops={k: tuple(v) for k, v in instance.task_ops.items()},
    )


def _no_fit(instance: SchedulingInstance, t: int, d: int, chk: MemoryCheck) -> InfeasibleError:
    bound = capacity_lower_bound(instance)
    alone = int(task_alone_bytes(instance)[t])
    caps = instance.capacity_bytes.tolist()  # non-empty: the task had a device to try
    proven = alone > max(caps) or bound.capacity_bytes > min(caps)
    why = ("no plan exists at this capacity" if proven else
           "the tracker is conservative, so a plan may still exist (the MILP planner may find one)")
    return InfeasibleError(
        f"{METHOD}: task {instance.task_names[t]!r} fits on no device: it needs {show_bytes(chk.need_bytes)} there;"
        f" the closest, {instance.device_names[d]}, has {show_bytes(max(0, chk.free_bytes))} free of"
        f" {show_bytes(int(instance.capacity_bytes[d]))}",
        fix=f"{why}; no plan exists with less than {show_bytes(bound.capacity_bytes)} per device: {bound.reason}")


def peak_memory_bytes(instance: SchedulingInstance, plan: Plan) -> tuple[int, ...]:
    """Per device, the peak memory `plan` uses in the validator's model (whether or not it fits capacity)."""
    _, profile = check_plan(instance, plan)
    assert profile is not None  # memory is checked, so the profile is computed
    return tuple(int(b) for b in profile.peak_bytes)
