"""Assignment search: a local search over (device per task, task order), decoded by a list schedule that follows
the given devices.

The iterated list scheduler (`planner.heuristics.iterated`) searches task priorities only; its devices are chosen
greedily (earliest finish), which on a comm-heavy graph spreads the work over every device and pays the transfers.
This search moves the *devices*, aimed at what makes the current plan long.

**State and decoder.**  A state is a device per task and a priority per task.  `decode` list-schedules the tasks in
the order `list_schedule` would take them (highest priority first among the ready ones, ties by topological
position), each on its given device at the earliest slot after its inputs have arrived, with the same insertion
policy (gaps, `max_gap_scan`); so it equals `list_schedule` with a device policy that allows only the given device,
in O(tasks + edges) instead of O((tasks + edges) x devices).  Where memory can bind (`memory_never_binds` is false)
the decoder is `list_schedule` itself with that policy, whose tracker keeps every plan within capacity; a state
the tracker finds no slot for is a rejected move.

The priority of an accepted state is minus its plan's start ticks.  Decoding a plan's devices in its own start
order gives every task a start no later than in the plan (induction over that order: inputs arrive no later, and
the tasks placed before it on its device end no later), so the search starts from any valid plan (a solver's, a
decomposition's) no longer than it, and a move changes the plan only around the tasks it touches.

**Moves** (`_propose`), each on a task of the plan's critical chain (walked back from the last task to finish:
through the input that arrived last when a task started at its ready tick, else through the task before it on its
device):

    kill a transfer:  the chain enters t from p on another device: t goes to p's device, or p to t's
    leave a device:   t waited for its device: t goes to the device of one of its neighbours or to another
                      eligible device (at random), or t is ordered just before the task it waited for
    move a chain:     t with its whole linear cluster (`planner.coarsen.linear`: a chain of the DAG whose internal
                      edges then cost nothing) to the device of t's critical input or to another device

A move is accepted when the decoded makespan is no longer than the current one (equal ones too, to cross
plateaus).  After STALL_MOVES moves in a row without a better plan, the current state becomes the best one with
PERTURB_TASKS random tasks on random eligible devices (accepted whatever it costs: iterated local search).

Every plan is a list schedule with valid devices, hence valid (precedence, transfers, one task at a time, memory
where it binds).  Deterministic for a seed and a number of moves (`numpy.random.default_rng(seed)`); a time budget
cuts the number of moves.  Cost: one decode per move, O(tasks + edges) Python steps (about 1 ms per 300 tasks).
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.coarsen.linear import linear_clustering
from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics.list_schedule import (
    DEFAULT_MAX_GAP_SCAN,
    _heap_sequence,  # the same task order as list_schedule's: the decoder must equal it with the devices fixed
    _sequence,
    heuristic_plan,
    list_schedule,
)
from planner.heuristics.memory import memory_never_binds
from planner.schedule.plan import Plan

__all__ = ["ASSIGNMENT_METHOD", "AssignmentResult", "Decoder", "assignment_search", "critical_chain"]

ASSIGNMENT_METHOD = "assignment-search"
STALL_MOVES = 400  # moves without a better plan before a perturbation of the best state
PERTURB_TASKS = 4  # tasks a perturbation moves to random devices
ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class Decoded:
    """A decoded state: per task its device, start and end tick; the makespan."""

    dev: list[int]
    start: list[int]
    end: list[int]
    makespan_tick: int


@dataclass(frozen=True)
class AssignmentResult:
    """The best plan found (method ASSIGNMENT_METHOD), the makespan of the decoded starting plan, and how the
    search went."""

    plan: Plan
    start_makespan_tick: int
    moves: int
    improving_moves: int
    seconds: float


class Decoder:
    """`decode(dev, priority)`: the list schedule of the module docstring for one instance (its tables built once).

    `respect_memory`: decode through `list_schedule`'s memory tracker where memory can bind (else it is skipped,
    as `list_schedule` skips it)."""

    def __init__(self, instance: SchedulingInstance, *, respect_memory: bool = True,
                 max_gap_scan: int = DEFAULT_MAX_GAP_SCAN) -> None:
        self.instance = instance
        n, num_dev = instance.num_tasks, instance.num_devices
        dur = instance.duration_tick
        self.dur_rows: list[list[int]] = dur.tolist()
        self.eligible: list[list[int]] = [np.flatnonzero(dur[t] < INELIGIBLE).tolist() for t in range(n)]
        self.preds = instance.predecessors
        self.succs = instance.successors
        self.comm_rows: list[list[int]] = instance.comm_tick.tolist()
        self.lc_rows: list[list[int]] = instance.link_class.tolist()
        self.min_gap = [max(1, int(np.where(dur[:, d] < INELIGIBLE, dur[:, d], INELIGIBLE).min(initial=INELIGIBLE)))
                        for d in range(num_dev)]
        self.scan = max(0, int(max_gap_scan))
        self.max_gap_scan = max_gap_scan
        self.tracked = respect_memory and not memory_never_binds(instance)

    def decode(self, dev: list[int], priority: np.ndarray) -> Decoded | None:
        """The plan of (devices, priority), or None when the memory tracker finds no slot for some task.  Every
        device must be eligible for its task."""
        if self.tracked:
            return self._decode_tracked(dev, priority)
        inst = self.instance
        seq = _sequence(inst, priority)
        sequence = seq if seq is not None else _heap_sequence(inst, priority)
        n, num_dev = inst.num_tasks, inst.num_devices
        dur_rows, preds, comm_rows, lc_rows, min_gap, scan = (self.dur_rows, self.preds, self.comm_rows, self.lc_rows,
                                                              self.min_gap, self.scan)
        start = [0] * n
        end = [0] * n
        free = [0] * num_dev
        gap_s: list[list[int]] = [[] for _ in range(num_dev)]
        gap_e: list[list[int]] = [[] for _ in range(num_dev)]
        for t in sequence:
            d = dev[t]
            ready = 0
            for p, e in preds[t]:
                a = end[p] + comm_rows[e][lc_rows[dev[p]][d]]
                if a > ready:
                    ready = a
            length = dur_rows[t][d]
            ge = gap_e[d]
            j = -1
            if ge and ge[-1] > ready:  # list_schedule's gap search (bisection, at most `scan` gaps)
                gs = gap_s[d]
                i = bisect_right(ge, ready)
                for k in range(i, min(len(ge), i + scan)):
                    st = gs[k] if gs[k] > ready else ready
                    if st + length <= ge[k]:
                        j = k
                        break
            if j < 0:
                st = free[d] if free[d] > ready else ready
            fin = st + length
            if j >= 0:  # fill gap j, keeping the pieces long enough to be useful (as list_schedule does)
                gs = gap_s[d]
                g0, g1 = gs[j], ge[j]
                keep_s, keep_e = [], []
                if st - g0 >= min_gap[d]:
                    keep_s.append(g0)
                    keep_e.append(st)
                if g1 - fin >= min_gap[d]:
                    keep_s.append(fin)
                    keep_e.append(g1)
                gs[j:j + 1] = keep_s
                ge[j:j + 1] = keep_e
            else:
                if st - free[d] >= min_gap[d]:
                    gap_s[d].append(free[d])
                    ge.append(st)
                if fin > free[d]:
                    free[d] = fin
            start[t] = st
            end[t] = fin
        return Decoded(list(dev), start, end, max(end, default=0))

    def _decode_tracked(self, dev: list[int], priority: np.ndarray) -> Decoded | None:
        def only_given(task: int, _k: int, device: int, _finish: int) -> int | None:
            return 0 if device == dev[task] else None

        try:
            plan = list_schedule(self.instance, priority, only_given, max_gap_scan=self.max_gap_scan,
                                 method=ASSIGNMENT_METHOD)
        except InfeasibleError:  # no slot fits memory under this state: a rejected move
            return None
        return _decoded_of(self.instance, plan)


def _decoded_of(instance: SchedulingInstance, plan: Plan) -> Decoded:
    by = plan.by_task()
    places = [by[name] for name in instance.task_names]
    dev = [int(p.device) for p in places]
    start = [p.start_tick for p in places]
    end = [p.end_tick for p in places]
    return Decoded(dev, start, end, max(end, default=0))


def critical_chain(decoder: Decoder, state: Decoded) -> list[tuple[int, int, bool]]:
    """The plan's critical chain, last task first: (task, the task it waited for or -1, whether it waited for that
    task's data (True) or for its device (False)).  A task waited for data when it started at its ready tick (the
    input that arrived last, the earliest such on ties), else for the task on its device that ended at its start."""
    inst = decoder.instance
    dev, start, end = state.dev, state.start, state.end
    if not end:
        return []
    by_dev: list[list[tuple[int, int]]] = [[] for _ in range(inst.num_devices)]  # (end tick, task) per device
    for t, d in enumerate(dev):
        by_dev[d].append((end[t], t))
    for lst in by_dev:
        lst.sort()
    chain: list[tuple[int, int, bool]] = []
    t = int(np.argmax(end))
    seen = set()
    while t >= 0 and t not in seen:
        seen.add(t)
        d = dev[t]
        ready, via = 0, -1
        for p, e in decoder.preds[t]:
            a = end[p] + decoder.comm_rows[e][decoder.lc_rows[dev[p]][d]]
            if a > ready:
                ready, via = a, p
        if start[t] <= ready:
            chain.append((t, via, True))
            t = via
            continue
        lst = by_dev[d]
        i = bisect_left(lst, (start[t], -1))
        blocker = lst[i][1] if i < len(lst) and lst[i][0] == start[t] and lst[i][1] != t else -1
        chain.append((t, blocker, False))
        t = blocker
    return chain


def _clusters_of(instance: SchedulingInstance) -> tuple[list[list[int]], list[int]]:
    clusters = linear_clustering(instance)
    member = [0] * instance.num_tasks
    for i, c in enumerate(clusters):
        for t in c:
            member[t] = i
    return clusters, member


def _propose(decoder: Decoder, state: Decoded, chain: list[tuple[int, int, bool]], priority: np.ndarray,
             clusters: list[list[int]], member: list[int], rng: np.random.Generator
             ) -> tuple[list[int], np.ndarray] | None:
    """A neighbour of the state (module docstring, "Moves"): (devices, priority), or None when the drawn move
    changes nothing."""
    at = int(rng.integers(len(chain)))
    t, other, data = chain[at]
    dev = list(state.dev)
    if rng.random() < SEG_SHARE:  # a piece of the critical chain onto one device: its transfers vanish
        length = int(rng.integers(2, SEG_MAX + 1))
        seg = [u for u, _, _ in chain[at:at + length]]
        target = dev[seg[int(rng.integers(len(seg)))]] if rng.random() < 0.7 else int(rng.choice(decoder.eligible[t]))
        moved = [u for u in seg if target in decoder.eligible[u] and dev[u] != target]
        if not moved:
            return None
        for u in moved:
            dev[u] = target
        return dev, priority
    if rng.random() < PRIO_SHARE:  # reorder: noise on the priorities of the tasks that start near t
        near = np.flatnonzero(np.abs(priority - priority[t]) <= PRIO_WINDOW)
        child = priority + 0.0
        child[near] += PRIO_SIGMA * rng.standard_normal(len(near))
        return dev, child
    eligible = decoder.eligible
    roll = rng.random()
    if roll < 0.2:  # move t's linear cluster, all of it
        target = dev[other] if other >= 0 and data and rng.random() < 0.5 else int(rng.choice(eligible[t]))
        moved = [u for u in clusters[member[t]] if target in eligible[u]]
        if all(dev[u] == target for u in moved):
            return None
        for u in moved:
            dev[u] = target
        return dev, priority
    if data and other >= 0 and dev[other] != dev[t]:  # kill the transfer other -> t
        if rng.random() < 0.5 and dev[other] in eligible[t]:
            dev[t] = dev[other]
        elif dev[t] in eligible[other]:
            dev[other] = dev[t]
        else:
            return None
        return dev, priority
    if not data and other >= 0 and rng.random() < 0.3:  # t first, before the task it waited for
        child = priority.copy()
        child[t] = priority[other] + 0.5
        return dev, child
    if rng.random() < 0.5:  # next to a neighbour: a device that holds one of its inputs or outputs
        near = [dev[p] for p, _ in decoder.preds[t]] + [dev[s] for s, _ in decoder.succs[t]]
        near = [d for d in near if d != dev[t] and d in eligible[t]]
        if near:
            dev[t] = near[int(rng.integers(len(near)))]
            return dev, priority
    options = [d for d in eligible[t] if d != dev[t]]
    if not options:
        return None
    dev[t] = options[int(rng.integers(len(options)))]
    return dev, priority


def assignment_search(instance: SchedulingInstance, plan: Plan, *, time_limit_s: float, bound_tick: int = 0,
                      seed: int = 0, max_moves: int | None = None, progress: ProgressFn | None = None,
                      unit: Callable[[int], str] = str) -> AssignmentResult:
    """The search of the module docstring from `plan` (a valid plan of `instance`) until `time_limit_s`, or
    `max_moves` moves, or a plan that meets `bound_tick`.  The result's plan is never longer than `plan`'s
    decoding, which is never longer than `plan`.  Raises `InfeasibleError` only when `plan` itself does not decode
    (memory: the tracker is more conservative than the validator)."""
    say = progress or (lambda _msg: None)
    t0 = time.monotonic()
    rng = np.random.default_rng(seed)
    decoder = Decoder(instance)
    given = _decoded_of(instance, plan)
    first = decoder.decode(given.dev, _priority_of(given))
    if first is None:
        raise InfeasibleError(f"{instance.name!r}: the starting plan does not decode within the memory tracker")
    clusters, member = _clusters_of(instance)
    current, cur_prio = first, _priority_of(first)
    best = current
    chain = critical_chain(decoder, current)
    moves = improving = stale = 0
    last_say = t0
    while best.makespan_tick > bound_tick and instance.num_tasks > 1 and chain:
        if (max_moves is not None and moves >= max_moves) or time.monotonic() - t0 >= time_limit_s:
            break
        moves += 1
        stale += 1
        proposal = _propose(decoder, current, chain, cur_prio, clusters, member, rng)
        if proposal is None:
            continue
        child = decoder.decode(*proposal)
        thresh = int(TAU * best.makespan_tick * max(0.0, 1.0 - (time.monotonic() - t0) / time_limit_s))
        if child is not None and child.makespan_tick <= current.makespan_tick + thresh:
            current, cur_prio = child, _priority_of(child)
            chain = critical_chain(decoder, current)
            if child.makespan_tick < best.makespan_tick:
                best = child
                improving += 1
                stale = 0
                now = time.monotonic()
                if now - last_say >= 1.0:
                    say(f"assignment search: {unit(best.makespan_tick)} after {moves} moves ({now - t0:.1f}s)")
                    last_say = now
        if stale >= STALL_MOVES and not TAU:  # a local optimum: kick the best state and go on from there
            stale = 0
            dev = list(best.dev)
            for t in rng.choice(instance.num_tasks, size=min(PERTURB_TASKS, instance.num_tasks), replace=False):
                dev[int(t)] = int(rng.choice(decoder.eligible[int(t)]))
            kicked = decoder.decode(dev, _priority_of(best))
            if kicked is not None:
                current, cur_prio = kicked, _priority_of(kicked)
                chain = critical_chain(decoder, current)
    elapsed = time.monotonic() - t0
    found = heuristic_plan(instance, best.dev, best.start, best.end, ASSIGNMENT_METHOD, elapsed)
    return AssignmentResult(found, first.makespan_tick, moves, improving, elapsed)


def _key(state: Decoded) -> tuple[int, int]:
    return (state.makespan_tick, sum(state.end) if SECONDARY else 0)


import os
SECONDARY = int(os.environ.get("LS16_SEC", "1"))
PRIO_SHARE = float(os.environ.get("LS16_PS", "0"))
PRIO_WINDOW = float(os.environ.get("LS16_PW", "100"))
PRIO_SIGMA = float(os.environ.get("LS16_PSIG", "30"))
SEG_SHARE = float(os.environ.get("LS16_SS", "0.3"))
SEG_MAX = int(os.environ.get("LS16_SM", "6"))
TAU = float(os.environ.get("LS16_TAU", "0"))


def _priority_of(state: Decoded) -> np.ndarray:
    """The plan's own start order (module docstring): minus the start tick, and among equal starts the earlier end
    first (a zero-length task before the task that starts with it on its device), within half a tick."""
    start = np.asarray(state.start, dtype=np.float64)
    end = np.asarray(state.end, dtype=np.float64)
    return -start - end / (2.0 * (state.makespan_tick + 1))
