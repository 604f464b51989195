"""List scheduling on heterogeneous devices with communication delays and memory, and HEFT on top of it.

**List scheduling** (`list_schedule`).  Tasks are taken one at a time, highest `priority` first among the tasks whose
predecessors are all placed (ties: earlier in the instance's topological order).  For each task t and eligible
device d (duration < INELIGIBLE):

    ready(t, d) = max over edges e = (p, t) of end(p) + inst.comm(e, dev(p), d)          (0 for a source)
    start(t, d) = the earliest idle slot on d at or after ready(t, d) that holds duration(t, d)
    finish(t, d) = start(t, d) + duration(t, d)

A `DevicePolicy` ranks the devices (lower key first, None = not allowed); t goes to the best-ranked device whose
memory check passes.  The policy `earliest_finish` is HEFT's choice.

**Insertion policy.**  With `insertion=True` each device keeps its idle gaps (sorted, disjoint; gaps shorter than
the shortest task that device can run are dropped) and a task may fill a gap if it fits there entirely after its
inputs have arrived (Topcuoglu et al. 2002).  To stay near-linear the search looks at no more than `max_gap_scan`
gaps at or after the ready time (found by bisection) and otherwise appends after the device's last task; appending
is always valid, so the bound only costs quality, never validity.  With `insertion=False` a task starts at
max(ready, end of the device's last task).

**Memory** (`respect_memory=True`): the conservative tracker of `planner/heuristics/memory.py` — params held all
step, outputs treated as live until all consumers of their producer are placed, then released at their true end.
Every plan it accepts fits capacity in the validator's memory model.  If the preferred slot on a device fails the
check (insertion), the slot after the device's last task is tried too (later starts see more memory released).  When
no device passes, `InfeasibleError` names the task, what it needs and the best device's free memory; this is a
heuristic's failure, so the message also gives the proven lower bound on capacity.  The tracker is skipped when
holding everything at once fits every device (`memory_never_binds`).

**HEFT** (`heft`): priority = upward rank

    rank_u(t) = w(t) + max over edges e = (t, s) of (c(e) + rank_u(s))

with w(t) the mean duration over t's eligible devices and c(e) the mean delay of e over ordered pairs of distinct
devices (each link class weighted by how many device pairs use it; 0 with one device).  `Rank.SUM` uses
rank_u + rank_d (CPOP's priority; downward rank rank_d(t) = max over (p, t) of rank_d(p) + w(p) + c(p, t)) with the
same earliest-finish placement (not CPOP's critical-path processor).

Cost: O((tasks + edges) x devices) Python steps plus O(log) per gap search and memory check; about 30 us per task
on 8 devices (see `experiments/bench_heft.py`).
"""

from __future__ import annotations

import dataclasses
import heapq
import time
import weakref
from bisect import bisect_right
from collections.abc import Callable, Sequence
from enum import Enum

import numpy as np

from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics.memory import (
    MemoryTracker,
    capacity_lower_bound,
    memory_never_binds,
    show_bytes,
    task_alone_bytes,
)
from planner.heuristics.policy import DEFAULT_LIST_POLICY
from planner.schedule.plan import Plan, PlanMethod, PlanStatus, TaskPlacement

DevicePolicy = Callable[[int, int, int, int], "float | int | None"]
"""key(task, k, device, finish) -> a sort key (lower is preferred) or None (device not allowed).

`k` is the task's position in the scheduling sequence (0, 1, ...), `finish` its finish tick on that device."""


def earliest_finish(task: int, k: int, device: int, finish: int) -> int:
    """HEFT's device choice: the earliest finish time."""
    return finish


class Rank(Enum):
    """Task priorities of `heft`."""

    UPWARD = "upward"  # classic HEFT
    SUM = "sum"  # upward + downward rank (CPOP's priority)


# ----------------------------------------------------------------------------------------------------- estimates --


def mean_duration(instance: SchedulingInstance) -> np.ndarray:
    """float64 [n_tasks]: mean duration over the eligible devices (0 where none)."""
    return instance.mean_duration_tick()


def mean_comm(instance: SchedulingInstance) -> np.ndarray:
    """float64 [n_edges]: mean delay of each edge over ordered pairs of distinct devices."""
    num_dev, n_edges = instance.num_devices, len(instance.edges)
    if num_dev < 2 or n_edges == 0:
        return np.zeros(n_edges)
    classes = instance.link_class[~np.eye(num_dev, dtype=bool)]
    weight = np.bincount(classes, minlength=instance.num_link_classes).astype(np.float64)
    weight /= weight.sum()
    return instance.comm_tick.astype(np.float64) @ weight


# upward ranks per instance (instances are immutable and hashed by identity): phase 0 runs HEFT, HEFT/CPoP and the
# iterated scheduler's starts on one instance, and each rank costs ~1.4 s at 100k ops; entries go with the instance
_UPWARD_RANKS: weakref.WeakKeyDictionary[SchedulingInstance, np.ndarray] = weakref.WeakKeyDictionary()


def upward_rank(instance: SchedulingInstance) -> np.ndarray:
    """float64 [n_tasks]: HEFT's upward rank (module docstring): the b-level with mean durations and mean delays.
    Computed once per instance; each call returns a fresh copy."""
    from planner.coarsen.levels import b_levels

    rank = _UPWARD_RANKS.get(instance)
    if rank is None:
        rank = _UPWARD_RANKS[instance] = b_levels(instance, mean_duration(instance), mean_comm(instance))
    return rank.copy()


def downward_rank(instance: SchedulingInstance) -> np.ndarray:
    """float64 [n_tasks]: longest mean-cost path from a source to the task's start."""
    w = mean_duration(instance).tolist()
    c = mean_comm(instance).tolist()
    pred = instance.predecessors
    rank = [0.0] * instance.num_tasks
    for t in instance.topological_order:
        best = 0.0
        for p, e in pred[t]:
            v = rank[p] + w[p] + c[e]
            if v > best:
                best = v
        rank[t] = best
    return np.asarray(rank, dtype=np.float64)


# ------------------------------------------------------------------------------------------------ the scheduler --


def _sequence(instance: SchedulingInstance, priority: np.ndarray) -> list[int] | None:
    """The order tasks are placed in, if highest-priority-first is already topological (else None: use a heap)."""
    n = instance.num_tasks
    topo = np.asarray(instance.topological_order, dtype=np.int64)
    topo_pos = np.empty(n, dtype=np.int64)
    topo_pos[topo] = np.arange(n)
    order = np.lexsort((topo_pos, -priority))
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    if instance.edges:
        e = np.asarray(instance.edges, dtype=np.int64)
        if np.any(pos[e[:, 0]] >= pos[e[:, 1]]):
            return None
    return order.tolist()


def _heap_sequence(instance: SchedulingInstance, priority: np.ndarray):
    """Yield tasks highest priority first among ready ones; the caller sends nothing, just iterates."""
    n = instance.num_tasks
    topo_pos = [0] * n
    for i, t in enumerate(instance.topological_order):
        topo_pos[t] = i
    prio = priority.tolist()
    indeg = [len(p) for p in instance.predecessors]
    heap = [(-prio[t], topo_pos[t], t) for t in range(n) if indeg[t] == 0]
    heapq.heapify(heap)
    succ = instance.successors
    while heap:
        t = heapq.heappop(heap)[2]
        yield t
        for s, _ in succ[t]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (-prio[s], topo_pos[s], s))


def _horizon(instance: SchedulingInstance) -> int:
    """An upper bound on any end tick a list schedule can produce (sum of longest durations and delays)."""
    dur = instance.duration_tick
    longest = np.where(dur < INELIGIBLE, dur, 0).max(axis=1, initial=0)
    comm = instance.comm_tick.max(axis=1, initial=0) if len(instance.edges) else np.zeros(0, dtype=np.int64)
    return int(longest.sum()) + int(comm.sum()) + 1



def occupy(gs: list[int], ge: list[int], free: list[int], d: int, j: int, st: int, fin: int, min_gap: int,
           insertion: bool = True) -> None:
    """Book [st, fin) on device d: inside its idle gap j (`gs`/`ge`: the device's gap starts and ends), keeping
    the pieces left over that are at least `min_gap` long, or (j = -1) after its last task, remembering the idle
    time skipped as a new gap when `insertion`; `free[d]` is the device's end."""
    if j >= 0:
        g0, g1 = gs[j], ge[j]
        keep_s, keep_e = [], []
        if st - g0 >= min_gap:
            keep_s.append(g0)
            keep_e.append(st)
        if g1 - fin >= min_gap:
            keep_s.append(fin)
            keep_e.append(g1)
        gs[j:j + 1] = keep_s
        ge[j:j + 1] = keep_e
        return
    if insertion and st - free[d] >= min_gap:
        gs.append(free[d])
        ge.append(st)
    if fin > free[d]:
        free[d] = fin


def _checked_sequence(instance: SchedulingInstance, priority: np.ndarray | Sequence[float]) -> list[int]:
    """The tasks in scheduling order (a topological order by priority); raises on a priority of the wrong shape
    and on tasks without devices."""
    n, num_dev = instance.num_tasks, instance.num_devices
    priority = np.asarray(priority, dtype=np.float64)
    if priority.shape != (n,):
        raise ValueError(f"priority has shape {priority.shape}, expected {(n,)}")
    if n and num_dev == 0:
        raise InfeasibleError(f"instance {instance.name!r} has tasks but no devices")
    seq = _sequence(instance, priority)
    return seq if seq is not None else _heap_sequence(instance, priority)


def _eligible_devices(instance: SchedulingInstance) -> list[list[int]]:
    """Each task's eligible devices in increasing order (one shared list for the tasks eligible everywhere)."""
    n, num_dev = instance.num_tasks, instance.num_devices
    everywhere = list(range(num_dev))
    ok = instance.duration_tick < INELIGIBLE
    all_ok: list[bool] = np.all(ok, axis=1).tolist()  # one flag per task: eligible on every device
    return [everywhere if all_ok[t] else np.flatnonzero(ok[t]).tolist() for t in range(n)]


def _min_gaps(instance: SchedulingInstance) -> list[int]:
    """Per device, the shortest duration of a task eligible there (at least 1): a shorter gap is never kept."""
    dur_arr = instance.duration_tick
    min_gap = [max(1, int(np.where(dur_arr[:, d] < INELIGIBLE, dur_arr[:, d], INELIGIBLE).min(initial=INELIGIBLE)))
               for d in range(instance.num_devices)]
    return min_gap


def _memory_tracker(instance: SchedulingInstance, respect_memory: bool) -> MemoryTracker | None:
    """A tracker of every device's memory, or None when memory is not respected or can never bind."""
    tracker = None
    if respect_memory and not memory_never_binds(instance):
        tracker = MemoryTracker(instance, 2 * _horizon(instance))
    return tracker


def _slot_finder(insertion: bool, gap_s: list[list[int]], gap_e: list[list[int]], free: list[int],
                 scan: int) -> Callable[[int, int, int], tuple[int, int]]:
    """slot(d, ready, length): (start, gap index or -1 for after the last task) of the earliest fitting slot on d,
    scanning at most `scan` gaps.  The lists are the scheduler's own, read as they change."""

    def slot(d: int, ready: int, length: int) -> tuple[int, int]:
        """(start, gap index or -1 for after the last task) of the earliest fitting slot on d."""
        if insertion and gap_e[d]:
            gs, ge = gap_s[d], gap_e[d]
            i = bisect_right(ge, ready)
            for j in range(i, min(len(ge), i + scan)):
                st = gs[j] if gs[j] > ready else ready
                if st + length <= ge[j]:
                    return st, j
        f = free[d]
        return (ready if ready > f else f), -1

    return slot


def _arrivals_fn(preds: Sequence[Sequence[tuple[int, int]]], dev: list[int], end: list[int],
                 comm_rows: list[list[int]], lc_rows: list[list[int]]
                 ) -> Callable[[int, int], list[tuple[int, int, int]]]:
    """arrivals_on(t, d): (predecessor, its device, arrival tick on d) of each input of a task whose predecessors
    are placed.  The lists are the scheduler's own, read as they change."""

    def arrivals_on(t: int, d: int) -> list[tuple[int, int, int]]:
        return [(p, dev[p], end[p] + comm_rows[e][lc_rows[dev[p]][d]]) for p, e in preds[t]]

    return arrivals_on


def _row_lists(instance: SchedulingInstance) -> tuple[list, list, list]:
    """The instance's durations, comm ticks and link classes as nested lists (list indexing is the hot loop's
    fastest lookup)."""
    return instance.duration_tick.tolist(), instance.comm_tick.tolist(), instance.link_class.tolist()


def _empty_schedule(n: int, num_dev: int) -> tuple[list[int], list[int], list[int], list[int], list[list[int]],
                                                   list[list[int]]]:
    """(device, start, end of each task; free tick, gap starts, gap ends of each device) before any task is
    placed."""
    devices = range(num_dev)
    dev = [-1] * n
    start = [0] * n
    end = [0] * n
    free = [0] * num_dev  # end of the last task on each device (in time)
    gap_s: list[list[int]] = [[] for _ in devices]
    gap_e: list[list[int]] = [[] for _ in devices]
    return dev, start, end, free, gap_s, gap_e


def _no_device(instance: SchedulingInstance, method: PlanMethod | str, t: int, eligible: list[int]
               ) -> InfeasibleError:
    """The error for a task that no allowed device takes."""
    allowed = ", ".join(instance.device_names[d] for d in eligible) or "none"
    return InfeasibleError(
        f"{method}: task {instance.task_names[t]!r} may run on no allowed device (eligible: {allowed})")


def list_schedule(
    instance: SchedulingInstance,
    priority: np.ndarray | Sequence[float],
    device_policy: DevicePolicy = earliest_finish,
    *,
    insertion: bool = True,
    respect_memory: bool = True,
    max_gap_scan: int = DEFAULT_LIST_POLICY.max_gap_scan,
    method: PlanMethod | str = PlanMethod.LIST_SCHEDULE,
) -> Plan:
    """Schedule every task (module docstring); returns a Plan with status 'heuristic' and the trivial lower bound.

    Raises `InfeasibleError` when a task may run on no allowed device or (with `respect_memory`) fits on none.
    """
    t0 = time.perf_counter()
    n, num_dev = instance.num_tasks, instance.num_devices
    sequence = _checked_sequence(instance, priority)

    eligible = _eligible_devices(instance)
    preds = instance.predecessors
    dur_rows, comm_rows, lc_rows = _row_lists(instance)
    devices = range(num_dev)
    fast_eft = device_policy is earliest_finish

    dev, start, end, free, gap_s, gap_e = _empty_schedule(n, num_dev)
    min_gap = _min_gaps(instance)
    tracker = _memory_tracker(instance, respect_memory)
    slot = _slot_finder(insertion, gap_s, gap_e, free, max(0, int(max_gap_scan)))
    arrivals_on = _arrivals_fn(preds, dev, end, comm_rows, lc_rows)
    # The loop below is the scheduler's hot path (100k tasks x devices): `slot` is called only for devices with a
    # gap ending after the ready time, and under HEFT's policy without the memory tracker only the best candidate is
    # kept (the same choice as min() over (key, device, ...): devices are visited in increasing order and only a
    # strictly smaller key wins).
    pick_best = fast_eft and tracker is None
    for k, t in enumerate(sequence):
        row = dur_rows[t]
        ready = [0] * num_dev
        for p, e in preds[t]:
            ep = end[p]
            crow = comm_rows[e]
            lrow = lc_rows[dev[p]]
            for d in devices:
                a = ep + crow[lrow[d]]
                if a > ready[d]:
                    ready[d] = a
        cands: list[tuple[float | int, int, int, int]] = []  # (key, device, start, gap)
        best: tuple[float | int, int, int, int] | None = None
        for d in eligible[t]:
            ge = gap_e[d]
            if insertion and ge and ge[-1] > ready[d]:  # else no gap ends after the ready time: append
                st, j = slot(d, ready[d], row[d])
            else:
                st, f = ready[d], free[d]
                if f > st:
                    st = f
                j = -1
            if pick_best:
                key = st + row[d]
                if best is None or key < best[0]:
                    best = (key, d, st, j)
                continue
            key = st + row[d] if fast_eft else device_policy(t, k, d, st + row[d])
            if key is not None:
                cands.append((key, d, st, j))
        if best is not None:
            cands.append(best)
        if not cands:
            raise _no_device(instance, method, t, eligible[t])
        if tracker is None:
            _, d, st, j = min(cands)
        else:
            d, st, j, chk = _choose_with_memory(instance, tracker, t, k, cands, row, free, arrivals_on,
                                                device_policy, fast_eft, method)
        fin = st + row[d]
        occupy(gap_s[d], gap_e[d], free, d, j, st, fin, min_gap[d], insertion)
        if tracker is not None:
            tracker.place(t, d, st, fin, chk, arrivals_on(t, d))
        dev[t], start[t], end[t] = d, st, fin

    return heuristic_plan(instance, dev, start, end, method, time.perf_counter() - t0)


def _choose_with_memory(instance, tracker, t, k, cands, row, free, arrivals_on, device_policy, fast_eft, method):
    """Best-keyed candidate that passes the memory check; a failed gap slot is retried after the device's last task."""
    heapq.heapify(cands)
    worst_case = None  # (free - need, device, check) of the closest miss
    while cands:
        key, d, st, j = heapq.heappop(cands)
        chk = tracker.check(t, d, st, arrivals_on(t, d))
        if chk.fits:
            return d, st, j, chk
        miss = (chk.free_bytes - chk.need_bytes, d, chk)
        if worst_case is None or miss[0] > worst_case[0]:
            worst_case = miss
        if j >= 0:  # try the tail of this device: a later start sees more memory released
            ready = max((a for _, _, a in arrivals_on(t, d)), default=0)
            tail = max(ready, free[d])
            fin = tail + row[d]
            tkey = fin if fast_eft else device_policy(t, k, d, fin)
            if tkey is not None:
                heapq.heappush(cands, (tkey, d, tail, -1))
    assert worst_case is not None
    _, d, chk = worst_case
    raise InfeasibleError(_memory_message(instance, t, d, chk, method), fix=_memory_fix(instance, t))


def _memory_message(instance: SchedulingInstance, t: int, d: int, chk, method: PlanMethod | str) -> str:
    parts = {
        "params": int(instance.param_bytes[t]),
        "working": int(instance.peak_internal_bytes[t]),
        "output": int(instance.activation_bytes[t]),
    }
    parts["input copies"] = chk.need_bytes - sum(parts.values())
    detail = ", ".join(f"{k} {v}" for k, v in parts.items() if v)
    return (f"task {instance.task_names[t]!r} fits on no device: it needs {show_bytes(chk.need_bytes)}"
            f" ({detail or 'nothing'}); the best device, {instance.device_names[d]}, has"
            f" {show_bytes(max(0, chk.free_bytes))} free of {show_bytes(int(instance.capacity_bytes[d]))}")


def _memory_fix(instance: SchedulingInstance, t: int) -> str:
    bound = capacity_lower_bound(instance)
    alone = int(task_alone_bytes(instance)[t])
    eligible = instance.duration_tick[t] < INELIGIBLE
    if alone > int(instance.capacity_bytes[eligible].max(initial=0)):
        return f"no plan exists with less than {show_bytes(bound.capacity_bytes)} per device: {bound.reason}"
    return (f"the check is conservative (an output counts as live until all consumers of its producer are placed),"
            f" so a plan may still exist; none exists with less than {show_bytes(bound.capacity_bytes)} per device:"
            f" {bound.reason}")


def heuristic_plan(instance: SchedulingInstance, dev: list[int], start: list[int], end: list[int],
                   method: PlanMethod | str, elapsed_s: float) -> Plan:
    """A heuristic's plan from per-task device, start and end ticks (status 'heuristic', the trivial bound)."""
    placements = tuple(map(TaskPlacement, instance.task_names, dev, start, end))
    return Plan(
        instance_name=instance.name,
        placements=placements,
        device_names=tuple(instance.device_names),
        makespan_tick=max(end, default=0),
        lower_bound_tick=instance.trivial_lower_bound_tick(),
        status=PlanStatus.HEURISTIC,
        method=method,
        solve_time_s=elapsed_s,
        tick_s=instance.tick_s,
        time_unit=instance.time_unit,
        task_ops={k: tuple(v) for k, v in instance.task_ops.items()},
    )


def heft(
    instance: SchedulingInstance,
    *,
    rank: Rank | str = Rank.UPWARD,
    insertion: bool = True,
    respect_memory: bool = True,
    max_gap_scan: int = DEFAULT_LIST_POLICY.max_gap_scan,
) -> Plan:
    """HEFT (Topcuoglu, Hariri and Wu, 2002), memory-aware: rank tasks, place each at its earliest finish.

    `rank`: `Rank.UPWARD` (classic, method 'heft') or `Rank.SUM` (upward + downward, method 'heft-sum').
    """
    t0 = time.perf_counter()
    rank = Rank(rank)
    priority = upward_rank(instance)
    if rank is Rank.SUM:
        priority = priority + downward_rank(instance)
    plan = list_schedule(instance, priority, earliest_finish, insertion=insertion, respect_memory=respect_memory,
                         max_gap_scan=max_gap_scan,
                         method=PlanMethod.HEFT if rank is Rank.UPWARD else PlanMethod.HEFT_SUM)
    return with_solve_time(plan, time.perf_counter() - t0)


def with_solve_time(plan: Plan, elapsed_s: float) -> Plan:
    return dataclasses.replace(plan, solve_time_s=elapsed_s)
