"""Assignment search: a local search over (device per task, task order), decoded by a list schedule that follows
the given devices.

The iterated list scheduler (`planner.heuristics.iterated`) searches task priorities only; its devices are chosen
greedily (earliest finish), which on a comm-heavy graph spreads the work over every device and pays the transfers.
This search moves the *devices*, aimed at what makes the current plan long.

**Decoder** (`Decoder.decode(dev, priority)`).  The tasks are taken in the order `list_schedule` takes them
(highest priority first among the ready ones, ties by topological position); a task with a device (dev >= 0) goes
to that device at the earliest slot after its inputs have arrived, with `list_schedule`'s insertion policy (gaps,
`max_gap_scan`); a task without one (dev = -1) goes where it finishes earliest, as in HEFT.  So it equals
`list_schedule` with a device policy that allows only the given device (earliest finish where none is given), in
O(tasks + edges) when every device is given.  Where memory can bind (`memory_never_binds` is false) the decoder
is `list_schedule` itself with that policy, whose tracker keeps every plan within capacity; a state the tracker
finds no slot for is a rejected move.

**State.**  A plan: its devices, all given, and its own start order as the priority (minus the start tick).
Decoding a plan's devices in its own start order gives every task a start no later than in the plan (induction over
that order: inputs arrive no later, and the tasks placed before it on its device end no later), so the search
starts from any valid plan (a solver's, a decomposition's) no longer than it.  (Starting instead from the
iterated scheduler's priority with every device left to earliest finish, the same plan, was measured worse: a move
that gives one task a device lets every other one choose again.)

**Moves** (`propose_move`), each drawn at a task t of the plan's critical chain (`critical_chain`: walked back from
the last task to finish, through the input that arrived last when a task started at its ready tick, else through
the task before it on its device), with the shares of the policy (`planner.heuristics.policy.AssignmentPolicy`):

    window    (window_share) ruin and recreate: the tasks that start within `window_span` mean durations of t lose
              their devices and choose again by earliest finish, the rest of the plan staying as it is
    segment   (segment_share) up to `segment_max` consecutive tasks of the critical chain onto one device (one of
              theirs, or at random): the transfers between them vanish
    cluster   (cluster_share) t's whole linear cluster (`planner.coarsen.linear`: a chain of the DAG whose
              internal edges then cost nothing) onto the device of t's critical input or another one
    free      (unforce_share) t alone chooses again by earliest finish
    reorder   (priority_share) noise on the priorities of the `local_tasks` tasks around t in the order (the
              iterated scheduler's move; off by default: measured no better)
    otherwise, single-task moves: the chain enters t through a transfer from p: t goes to p's device or p to t's
              (kills the transfer); t waited for its device: t is ordered just before the task it waited for, or
              goes to the device of one of its inputs or outputs, or to another eligible device at random

**Acceptance.**  A move is kept when the plan's profile — the devices' last end ticks, latest first — is
lexicographically no larger: no longer makespan, and progress also while another device holds it (tight plans end
every device within a few ticks of the makespan, where no single move can shorten it); equal ones are kept too, to
cross plateaus.  The kept plan becomes the state (its devices, its own start order).  After `stall_moves` moves
without a better plan the best state is kicked: `perturb_tasks` random tasks on random eligible devices, kept
whatever it costs (iterated local search).

Every plan is a list schedule with eligible devices, hence valid (precedence, transfers, one task at a time,
memory where it binds).  Deterministic for a seed and a number of moves (`numpy.random.default_rng(seed)`); a time
budget cuts the number of moves.  Cost: one decode per move, about 1 ms per 300 tasks on 8 devices with every device
given (a window move decodes its tasks on every device).
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
    _heap_sequence,  # the same task order as list_schedule's: the decoder must equal it with the devices fixed
    _sequence,
    heuristic_plan,
    list_schedule,
    occupy,
)
from planner.heuristics.memory import memory_never_binds
from planner.heuristics.policy import DEFAULT_ASSIGNMENT_POLICY, DEFAULT_LIST_POLICY, AssignmentPolicy
from planner.schedule.plan import Plan

__all__ = ["ASSIGNMENT_METHOD", "AssignmentResult", "Decoded", "Decoder", "MoveContext", "assignment_search",
           "critical_chain", "decoded_of", "propose_move", "start_order_priority"]

ASSIGNMENT_METHOD = "assignment-search"
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
                 max_gap_scan: int = DEFAULT_LIST_POLICY.max_gap_scan) -> None:
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
        """The plan of (devices, priority) (module docstring), or None when the memory tracker finds no slot for
        some task.  dev[t] >= 0: that device, which must be eligible for t; -1: t's earliest-finish device."""
        if self.tracked:
            return self._decode_tracked(dev, priority)
        inst = self.instance
        seq = _sequence(inst, priority)
        sequence = seq if seq is not None else _heap_sequence(inst, priority)
        n, num_dev = inst.num_tasks, inst.num_devices
        dur_rows, min_gap = self.dur_rows, self.min_gap
        start = [0] * n
        end = [0] * n
        free = [0] * num_dev
        gap_s: list[list[int]] = [[] for _ in range(num_dev)]
        gap_e: list[list[int]] = [[] for _ in range(num_dev)]
        placed = list(dev)
        eligible = self.eligible
        for t in sequence:
            d = dev[t]
            if d >= 0:
                st, j = self._slot(t, d, placed, end, free, gap_s, gap_e)
            else:  # earliest finish over the eligible devices (ties: the lowest index, as list_schedule)
                best = None
                for dd in eligible[t]:
                    s_dd, j_dd = self._slot(t, dd, placed, end, free, gap_s, gap_e)
                    f_dd = s_dd + dur_rows[t][dd]
                    if best is None or f_dd < best[0]:
                        best = (f_dd, dd, s_dd, j_dd)
                assert best is not None  # every task has an eligible device (checked by `assignment_search`)
                _, d, st, j = best
                placed[t] = d
            fin = st + dur_rows[t][d]
            occupy(gap_s[d], gap_e[d], free, d, j, st, fin, min_gap[d])  # list_schedule's own booking
            start[t] = st
            end[t] = fin
        return Decoded(placed, start, end, max(end, default=0))

    def _slot(self, t: int, d: int, placed: list[int], end: list[int], free: list[int], gap_s: list[list[int]],
              gap_e: list[list[int]]) -> tuple[int, int]:
        """(start, gap index or -1 for after the device's last task) of t on d: list_schedule's slot search."""
        comm_rows, lc_rows = self.comm_rows, self.lc_rows
        ready = 0
        for p, e in self.preds[t]:
            a = end[p] + comm_rows[e][lc_rows[placed[p]][d]]
            if a > ready:
                ready = a
        length = self.dur_rows[t][d]
        ge = gap_e[d]
        if ge and ge[-1] > ready:  # bisection, then at most `scan` gaps
            gs = gap_s[d]
            i = bisect_right(ge, ready)
            for k in range(i, min(len(ge), i + self.scan)):
                st = gs[k] if gs[k] > ready else ready
                if st + length <= ge[k]:
                    return st, k
        return (free[d] if free[d] > ready else ready), -1

    def _decode_tracked(self, dev: list[int], priority: np.ndarray) -> Decoded | None:
        def only_given(task: int, _k: int, device: int, finish: int) -> int | None:
            if dev[task] < 0:
                return finish
            return 0 if device == dev[task] else None

        try:
            plan = list_schedule(self.instance, priority, only_given, max_gap_scan=self.max_gap_scan,
                                 method=ASSIGNMENT_METHOD)
        except InfeasibleError:  # no slot fits memory under this state: a rejected move
            return None
        return decoded_of(self.instance, plan)


def decoded_of(instance: SchedulingInstance, plan: Plan) -> Decoded:
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


@dataclass
class MoveContext:
    """What the moves need: the decoder, the linear clusters, the random source, the priority step, the tuning."""

    decoder: Decoder
    clusters: list[list[int]]
    member: list[int]
    rng: np.random.Generator
    scale: float  # ticks: the mean of each task's longest duration (the priority noise's unit)
    sigma: float = DEFAULT_ASSIGNMENT_POLICY.step.start
    policy: AssignmentPolicy = DEFAULT_ASSIGNMENT_POLICY


def propose_move(sx: MoveContext, state: Decoded, forced: list[int], priority: np.ndarray,
                 chain: list[tuple[int, int, bool]]) -> tuple[list[int], np.ndarray, bool] | None:
    """A neighbour of the state (module docstring, "Moves"): (forced devices, priority, whether it is a priority
    move), or None when the drawn move changes nothing."""
    rng, eligible = sx.rng, sx.decoder.eligible
    at = int(rng.integers(len(chain)))
    t, other, data = chain[at]
    dev = state.dev
    out = list(forced)
    tune = sx.policy
    roll = rng.random()
    if roll < tune.priority_share:  # reorder: noise on the priorities of the tasks next to t in the order
        order = np.argsort(-priority, kind="stable")
        pos = int(np.flatnonzero(order == t)[0])
        lo = max(0, pos - tune.local_tasks // 2)
        picked = order[lo:lo + tune.local_tasks]
        child = priority.copy()
        child[picked] += sx.sigma * sx.scale * rng.standard_normal(len(picked))
        return out, child, True
    roll -= tune.priority_share
    if roll < tune.window_share:  # ruin and recreate: the tasks that start near t choose again, by earliest finish
        lo_tick, hi_tick = state.start[t] - tune.window_span * sx.scale, state.end[t] + tune.window_span * sx.scale
        for u, s_u in enumerate(state.start):
            if lo_tick <= s_u <= hi_tick:
                out[u] = -1
        if other >= 0:
            out[other] = -1
        return out, priority, False
    roll -= tune.window_share
    if roll < tune.unforce_share:  # give a device choice back to earliest finish
        if out[t] < 0:
            return None
        out[t] = -1
        return out, priority, False
    roll -= tune.unforce_share
    if roll < tune.segment_share:  # a piece of the critical chain onto one device: its transfers vanish
        length = int(rng.integers(2, tune.segment_max + 1))
        seg = [u for u, _, _ in chain[at:at + length]]
        target = dev[seg[int(rng.integers(len(seg)))]] if rng.random() < tune.segment_own_device \
            else int(rng.choice(eligible[t]))
        moved = [u for u in seg if target in eligible[u] and out[u] != target]
        if not moved:
            return None
        for u in moved:
            out[u] = target
        return out, priority, False
    roll -= tune.segment_share
    if roll < tune.cluster_share:  # t's linear cluster, all of it, onto one device
        target = dev[other] if other >= 0 and data and rng.random() < tune.cluster_input_device \
            else int(rng.choice(eligible[t]))
        moved = [u for u in sx.clusters[sx.member[t]] if target in eligible[u] and out[u] != target]
        if not moved:
            return None
        for u in moved:
            out[u] = target
        return out, priority, False
    if data and other >= 0 and dev[other] != dev[t]:  # kill the transfer other -> t
        if rng.random() < tune.kill_by_moving_t and dev[other] in eligible[t]:
            out[t] = dev[other]
        elif dev[t] in eligible[other]:
            out[other] = dev[t]
        else:
            return None
        return out, priority, False
    if not data and other >= 0 and rng.random() < tune.wait_reorder:  # t first, before the task it waited for
        child = priority.copy()
        child[t] = priority[other] + 1e-3 * sx.scale
        return out, child, True
    if rng.random() < tune.near_neighbour:  # next to a neighbour: a device that holds one of its inputs or outputs
        near = [dev[p] for p, _ in sx.decoder.preds[t]] + [dev[u] for u, _ in sx.decoder.succs[t]]
        near = [d for d in near if d != dev[t] and d in eligible[t]]
        if near:
            out[t] = near[int(rng.integers(len(near)))]
            return out, priority, False
    options = [d for d in eligible[t] if d != dev[t]]
    if not options:
        return None
    out[t] = options[int(rng.integers(len(options)))]
    return out, priority, False


def assignment_search(instance: SchedulingInstance, plan: Plan, *, time_limit_s: float, bound_tick: int = 0,
                      seed: int = 0, max_moves: int | None = None,
                      stall_moves: int | None = None, progress: ProgressFn | None = None,
                      unit: Callable[[int], str] = str,
                      policy: AssignmentPolicy = DEFAULT_ASSIGNMENT_POLICY) -> AssignmentResult:
    """The search of the module docstring from `plan` (a valid plan of `instance`) until `time_limit_s`, or
    `max_moves` moves, or `stall_moves` moves in a row that did not improve on the best plan, or a plan that meets
    `bound_tick`; its moves, kicks and priority step as `policy` says.

    The first state is `plan`'s devices in `plan`'s start order, whose decoding is no longer than `plan`; the
    result's plan is never longer than that decoding.  Raises `InfeasibleError` only when it does not decode
    (memory: the tracker is more conservative than the validator)."""
    say = progress or (lambda _msg: None)
    t0 = time.monotonic()
    n = instance.num_tasks
    decoder = Decoder(instance)
    if any(not e for e in decoder.eligible):
        raise InfeasibleError(f"{instance.name!r}: a task may run on no device")
    given = decoded_of(instance, plan)
    forced, prio = list(given.dev), start_order_priority(given)
    first = decoder.decode(forced, prio)
    if first is None:
        raise InfeasibleError(f"{instance.name!r}: the starting plan does not decode within the memory tracker")
    finite = np.where(instance.duration_tick < INELIGIBLE, instance.duration_tick, 0)
    scale = float(finite.max(axis=1, initial=0).mean()) if n else 1.0
    clusters, member = _clusters_of(instance)
    sx = MoveContext(decoder, clusters, member, np.random.default_rng(seed), scale, policy.step.start, policy)
    current, best, best_forced, best_prio = first, first, forced, prio
    chain = critical_chain(decoder, current)
    moves = improving = stale = 0
    since_best = 0  # moves since the best plan last improved (`stall_moves`)
    last_say = t0
    while best.makespan_tick > bound_tick and n > 1 and chain:
        if (max_moves is not None and moves >= max_moves) or time.monotonic() - t0 >= time_limit_s:
            break
        if stall_moves is not None and since_best >= stall_moves:
            break
        moves += 1
        stale += 1
        since_best += 1
        proposal = propose_move(sx, current, forced, prio, chain)
        if proposal is not None:
            child_forced, child_prio, reorder = proposal
            child = decoder.decode(child_forced, child_prio)
            better = child is not None and child.makespan_tick < current.makespan_tick
            if child is not None and _profile(child) <= _profile(current):
                # the kept plan is the state: its devices, in its own order (module docstring)
                current, forced, prio = child, list(child.dev), start_order_priority(child)
                chain = critical_chain(decoder, current)
                if child.makespan_tick < best.makespan_tick:
                    best, best_forced, best_prio = child, forced, prio
                    improving += 1
                    stale = since_best = 0
                    now = time.monotonic()
                    if now - last_say >= policy.progress_every_s:
                        say(f"assignment search: {unit(best.makespan_tick)} after {moves} moves ({now - t0:.1f}s)")
                        last_say = now
            if reorder:  # the step rule of the iterated list scheduler: large steps while they pay
                sx.sigma = policy.step.after(sx.sigma, better)
        if stale >= policy.stall_moves:  # a local optimum: kick the best state and go on from there
            stale = 0
            kick = list(best_forced)
            for t in sx.rng.choice(n, size=min(policy.perturb_tasks, n), replace=False):
                kick[int(t)] = int(sx.rng.choice(decoder.eligible[int(t)]))
            kicked = decoder.decode(kick, best_prio)
            if kicked is not None:
                current, forced, prio = kicked, kick, best_prio
                chain = critical_chain(decoder, current)
                sx.sigma = policy.step.start
    elapsed = time.monotonic() - t0
    found = heuristic_plan(instance, best.dev, best.start, best.end, ASSIGNMENT_METHOD, elapsed)
    return AssignmentResult(found, first.makespan_tick, moves, improving, elapsed)


def _profile(state: Decoded) -> list[int]:
    """The devices' last end ticks, latest first: compared lexicographically, a move that ends one of the devices
    that end last earlier is progress even while another device holds the makespan (tight plans end every device
    within a few ticks of the makespan, where no single move shortens it)."""
    last: dict[int, int] = {}
    for d, e in zip(state.dev, state.end, strict=True):
        if e > last.get(d, -1):
            last[d] = e
    return sorted(last.values(), reverse=True)


def start_order_priority(state: Decoded) -> np.ndarray:
    """A plan's own start order as a priority (module docstring): minus the start tick, and among equal starts the
    earlier end first (a zero-length task before the task that starts with it on its device), within half a tick."""
    start = np.asarray(state.start, dtype=np.float64)
    end = np.asarray(state.end, dtype=np.float64)
    return -start - end / (2.0 * (state.makespan_tick + 1))
