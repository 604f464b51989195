"""Large-neighbourhood search on an op-level plan: free a window, fix the rest, solve the window exactly.

One move, on the incumbent plan P of the op graph:

1. **Window.**  Pick a start tick a and take the `window_ops` ops of P that start at or after a, in order of start
   (ties by topological position): the set W.  Two kinds alternate: a uniformly random a, and a just before a
   random op of P's critical chain (`planner.coarsen.refine.critical_tasks`), so that most windows hold ops that
   made the plan as long as it is.  Every predecessor of an op of W that is not in W starts before a.
2. **Neighbourhood instance.**  W, plus the *frozen* ops: the predecessors of W outside W and, per device, the op
   of P that ends last among those that start before a (it holds the device when the window opens) and the first
   op of P after the window (what a window op put on that device delays, a *sentinel*).  A frozen op is pinned
   to its device in P (ineligible elsewhere) and released at its start in P, except a sentinel: released at a (or
   when a predecessor that ran before a delivers); an op of W is released at a.  Each op's tail is the work P does
   after it through the ops after the window outside the neighbourhood (`_delivery`).  Device memory is the
   capacity less the parameters of the ops outside the neighbourhood that P puts there.
3. **Solve** it with the placement model (`formulations.solve_instance.solve_placement`, release times), warm
   started from P restricted to the neighbourhood (valid there), for a short time.
4. **Put back.**  Per device: the ops of P that start before a and are not in W (P's order), then W's ops the
   solution put there and the device's first op after the window (the solution's order), then the ops of P after
   the window (P's order).  These orders are replayed on the whole op graph (earliest starts, as the simulator
   computes them; they cannot deadlock: no path leads from a later part back to an earlier one); when memory may
   bind the validator checks the result.  A result no longer than P is accepted (equal ones too, to move across
   plateaus); a deadlock, an invalid plan or a solver failure is a rejected move.

The neighbourhood's objective is the end of its last op, a proxy for the plan's makespan: the acceptance test is
on the whole plan.  The window starts at 2 ops per device (within the policy's `lns_min_window_ops` ..
`lns_max_window_ops`), grows by a quarter after every `lns_stale_moves` moves in a row that found no shorter plan
(up to the most) and goes back to its first size after one that did.  The search stops when the budget is spent,
or the plan meets `bound_tick`, or (with `stall_moves`, for callers that alternate searches; the planner's phase 3
does not: alternating with the iterated list scheduler gains nothing on the engine bench) that many moves in a row
found no shorter plan.
Moves are drawn from `numpy.random.default_rng(seed)`; with CP-SAT's deterministic mode the sequence of moves
repeats when the solves do not hit their time limits.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from formulations.model_api import DEFAULT_SOLVE_POLICY, SolveParams, SolvePolicy
from formulations.placement import memory_may_bind
from formulations.solve_instance import solve_placement
from planner.coarsen.refine import critical_tasks
from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.decompose import induced_instance
from planner.errors import OpplanError
from planner.schedule.errors import PlanInvalidError
from planner.schedule.plan import Plan, TaskPlacement
from planner.schedule.simulate import plan_orders, simulate
from planner.schedule.validate import validate_plan
from planner.search.budget import Budget
from planner.search.phases import Candidate
from planner.search.policy import SearchPolicy
from planner.search.state import SearchState

__all__ = ["LnsResult", "lns", "lns_phase", "neighbourhood_move"]

log = logging.getLogger(__name__)
ProgressFn = Callable[[str], None]

DEFAULT_POLICY = SearchPolicy()


@dataclass(frozen=True)
class LnsResult:
    """The best plan found (the start plan when nothing improved), and how the search went."""

    plan: Plan
    start_makespan_tick: int
    moves: int
    improving_moves: int
    rejected_moves: int  # the result was longer, invalid (deadlock, memory) or the solve failed
    seconds: float


def _window(fine: SchedulingInstance, plan: Plan, a_tick: int, size: int) -> list[int]:
    by = plan.by_task()
    pos = {t: i for i, t in enumerate(fine.topological_order)}
    later = [(by[fine.task_names[t]].start_tick, pos[t], t) for t in range(fine.num_tasks)
             if by[fine.task_names[t]].start_tick >= a_tick]
    later.sort()
    return [t for _, _, t in later[:size]]


def _delivery(fine: SchedulingInstance, plan: Plan, tasks: Sequence[int], start: np.ndarray, end: np.ndarray,
              device: np.ndarray, a_tick: int | None, chained: Collection[int] = ()) -> list[int]:
    """Per neighbourhood task, the work P still has to do after it outside the neighbourhood: the longest path
    from it through the ops after the window that are outside the neighbourhood (start >= `a_tick` in P), in P's
    graph of data edges (with P's transfer delays) and device orders.  From a task itself only its data edges
    count, unless it is in `chained` (its device successor in P stays after it).  `a_tick` None: every op outside
    the neighbourhood counts (`SearchPolicy.lns_tails_after_window` False).

    Paths through the neighbourhood's own ops or through ops before the window do not count: the model holds the
    first itself, and the second ran before the window opened (what they feed is released at its time in P).
    Counting them would be wrong: a frozen op before the window would have for tail P's whole schedule after it,
    window included, so every neighbourhood's objective would be at least P's makespan and the solver could not
    see a shorter window."""
    n = fine.num_tasks
    dur = end - start
    inside = set(tasks)
    after = np.array([t not in inside and (a_tick is None or start[t] >= a_tick) for t in range(n)], dtype=bool)
    nxt = np.full(n, -1, dtype=np.int64)
    for order in plan_orders(fine, plan):
        for u, v in zip(order, order[1:]):
            nxt[u] = v
    pos = {t: i for i, t in enumerate(fine.topological_order)}
    # the ops a path may go through (before the fix: every op, the neighbourhood's too)
    through = after if a_tick is not None else np.ones(n, dtype=bool)
    q = np.zeros(n, dtype=np.int64)  # longest path after t (t excluded) through the ops after the window
    for t in sorted(range(n), key=lambda t: (start[t], end[t], pos[t]), reverse=True):
        best = 0
        for v, e in fine.successors[t]:
            if through[v]:
                best = max(best, fine.comm(e, int(device[t]), int(device[v])) + int(dur[v]) + int(q[v]))
        if nxt[t] >= 0 and through[nxt[t]]:
            best = max(best, int(dur[nxt[t]]) + int(q[nxt[t]]))
        q[t] = best
    out = []
    for t in tasks:
        best = 0
        for v, e in fine.successors[t]:
            if after[v]:
                best = max(best, fine.comm(e, int(device[t]), int(device[v])) + int(dur[v]) + int(q[v]))
        if t in chained and nxt[t] >= 0 and after[nxt[t]]:
            best = max(best, int(dur[nxt[t]]) + int(q[nxt[t]]))
        out.append(best)
    return out


def neighbourhood_move(fine: SchedulingInstance, plan: Plan, window: Sequence[int], *, time_limit_s: float,
                       backend: str = "cpsat", threads: int = 8, seed: int = 0,
                       tails_after_window: bool = True,
                       solve: SolvePolicy = DEFAULT_SOLVE_POLICY) -> tuple[Plan | None, bool]:
    """One move (module docstring, steps 2-4) on the window `window` (op indices, all starting at or after the
    earliest of them): (the replayed, validated plan or None when the move is rejected, whether the neighbourhood
    was solved to optimality).  `tails_after_window`: `SearchPolicy.lns_tails_after_window`; `solve`:
    `SearchPolicy.solve`."""
    if not window:
        return None, True
    by = plan.by_task()
    names = fine.task_names
    start = np.array([by[n].start_tick for n in names], dtype=np.int64)
    end = np.array([by[n].end_tick for n in names], dtype=np.int64)
    device = np.array([by[n].device for n in names], dtype=np.int64)
    free = set(window)
    a_tick = int(min(start[list(window)]))
    frozen, sentinels = _frozen(fine, free, a_tick, start, end, device)
    tasks = sorted(free | frozen, key=lambda t: (start[t], t))
    sub = induced_instance(fine, tasks, f"{fine.name}[lns@{a_tick}]")
    dur = sub.duration_tick.copy()
    for i, t in enumerate(tasks):
        if t in frozen:
            keep = dur[i, device[t]]
            dur[i, :] = INELIGIBLE
            dur[i, device[t]] = keep
    inside = np.zeros(fine.num_tasks, dtype=bool)
    inside[tasks] = True
    outside_params = np.bincount(device[~inside], weights=fine.param_bytes[~inside], minlength=fine.num_devices)
    capacity = np.maximum(0, fine.capacity_bytes - outside_params.astype(np.int64))
    sub = dataclasses.replace(sub, duration_tick=dur, capacity_bytes=capacity)
    if tails_after_window:
        release = [_sentinel_release(fine, t, a_tick, start, end, device, free | frozen) if t in sentinels
                   else int(start[t]) if t in frozen else a_tick for t in tasks]
        tail = _delivery(fine, plan, tasks, start, end, device, a_tick, chained=sentinels)
    else:
        release = [int(start[t]) if t in frozen else a_tick for t in tasks]
        tail = _delivery(fine, plan, tasks, start, end, device, None, chained=sentinels)
    warm = dataclasses.replace(plan, instance_name=sub.name, task_ops={},
                               placements=tuple(by[names[t]] for t in tasks))
    # No symmetry rows: the frozen ops pin devices, so few devices stay interchangeable, and the rows are a large
    # part of building a small model.
    solved = solve_placement(sub, backend=backend, time_limit_s=time_limit_s, threads=threads, seed=seed,
                             warm_start=warm, release_tick=release, tail_tick=tail, symmetry_breaking=False,
                             policy=solve)
    sub_by = solved.by_task()
    placed = {t: sub_by[names[t]] for t in (*window, *sentinels)}
    optimal = solved.status == "optimal"
    times = _replay(fine, _put_back(fine, placed, free, sentinels, a_tick, start, end, device))
    if times is None:
        log.debug("LNS move at tick %d rejected: the orders deadlock", a_tick)
        return None, optimal
    new_start, new_end, new_device = times
    if max(new_end, default=0) > plan.makespan_tick:
        return None, optimal  # no better: no need to build and check the plan
    # The replay's times are the simulator's (earliest starts under the orders), so the plan is built from them
    # directly: a full simulation per move costs as much as the solve.
    rows = tuple(TaskPlacement(names[t], new_device[t], new_start[t], new_end[t]) for t in range(fine.num_tasks))
    new = dataclasses.replace(plan, placements=rows, makespan_tick=max(new_end, default=0) - min(new_start, default=0))
    if memory_may_bind(fine):  # the replay keeps precedence, delays and device order by construction
        try:
            validate_plan(fine, new)
        except PlanInvalidError as exc:
            log.debug("LNS move at tick %d rejected: %s", a_tick, exc)
            return None, optimal
    return new, optimal


def _frozen(fine: SchedulingInstance, free: set[int], a_tick: int, start: np.ndarray, end: np.ndarray,
            device: np.ndarray) -> tuple[set[int], set[int]]:
    """The frozen ops of the neighbourhood of the window `free` opening at `a_tick` (module docstring, step 2), and
    among them the sentinels.  The first op after the window on each device (P's) is frozen too: without it the
    model sees a device as idle after the window, while the put-back runs that device's later ops after whatever
    the window puts there, so a move could load a device the model thought free.  Its delivery tail follows its
    device's order, which the put-back keeps."""
    frozen: set[int] = set()
    for v in free:
        frozen.update(u for u, _ in fine.predecessors[v] if u not in free)
    for d in range(fine.num_devices):
        before = [t for t in range(fine.num_tasks) if device[t] == d and start[t] < a_tick and t not in free]
        if before:
            frozen.add(max(before, key=lambda t: (end[t], start[t])))
    sentinels: set[int] = set()
    for d in range(fine.num_devices):
        after = [t for t in range(fine.num_tasks) if device[t] == d and start[t] >= a_tick and t not in free]
        if after:
            sentinels.add(min(after, key=lambda t: (start[t], end[t])))
    return frozen | sentinels, sentinels


def _put_back(fine: SchedulingInstance, placed: Mapping[int, TaskPlacement], free: set[int], sentinels: set[int],
              a_tick: int, start: np.ndarray, end: np.ndarray, device: np.ndarray) -> list[list[int]]:
    """Per device (module docstring, step 4): P's ops before the window, then the solution's `placed` ops (the
    window and the sentinels) in its order, then P's ops after the window."""
    orders: list[list[int]] = [[] for _ in range(fine.num_devices)]
    pre = [t for t in range(fine.num_tasks) if t not in free and start[t] < a_tick]
    post = [t for t in range(fine.num_tasks) if t not in free and t not in sentinels and start[t] >= a_tick]
    for t in sorted(pre, key=lambda t: (start[t], end[t])):
        orders[device[t]].append(t)
    for t in sorted(placed, key=lambda t: (placed[t].start_tick, placed[t].end_tick)):
        orders[placed[t].device].append(t)
    for t in sorted(post, key=lambda t: (start[t], end[t])):
        orders[device[t]].append(t)
    return orders


def _sentinel_release(fine: SchedulingInstance, t: int, a_tick: int, start: np.ndarray, end: np.ndarray,
                      device: np.ndarray, inside: Collection[int]) -> int:
    """When the first op after the window on a device (a sentinel) may start: at the window's start, or later when
    a predecessor outside the neighbourhood delivers later in P (its end plus the transfer to the sentinel's
    device).  Not its start in P: released there, the sentinel would hold the neighbourhood's objective at P's
    makespan whenever it lies on P's critical chain, so the model could not see a shorter window (every move
    would end "optimal" at P's makespan while the segment alone has a shorter schedule)."""
    ready = a_tick
    for u, e in fine.predecessors[t]:
        if u not in inside and start[u] < a_tick:
            ready = max(ready, int(end[u]) + fine.comm(e, int(device[u]), int(device[t])))
    return ready


def _replay(fine: SchedulingInstance, orders: Sequence[Sequence[int]]
            ) -> tuple[list[int], list[int], list[int]] | None:
    """Earliest start and end of every op under the per-device orders (what the simulator computes, without the
    timeline), or None when the orders deadlock."""
    n = fine.num_tasks
    device = [0] * n
    for d, row in enumerate(orders):
        for t in row:
            device[t] = d
    start, end = [-1] * n, [-1] * n
    done = 0
    pos = [0] * len(orders)
    free = [0] * len(orders)
    progress = True
    while progress:
        progress = False
        for d, row in enumerate(orders):
            while pos[d] < len(row):
                t = row[pos[d]]
                ready = free[d]
                for u, e in fine.predecessors[t]:
                    if end[u] < 0:
                        break
                    ready = max(ready, end[u] + fine.comm(e, device[u], d))
                else:
                    start[t], end[t] = ready, ready + int(fine.duration_tick[t, d])
                    free[d] = end[t]
                    pos[d] += 1
                    done += 1
                    progress = True
                    continue
                break
    return (start, end, device) if done == n else None


def lns(fine: SchedulingInstance, plan: Plan, params: SolveParams, *, bound_tick: int = 0, backend: str = "cpsat",
        window_ops: int | None = None, stall_moves: int | None = None,
        progress: ProgressFn | None = None, unit: Callable[[int], str] = str,
        policy: SearchPolicy = DEFAULT_POLICY) -> LnsResult:
    """Improve `plan` (a valid plan of `fine`) by large-neighbourhood search until `params.time_limit_s` is spent,
    or `stall_moves` moves in a row did not shorten the plan, or it meets `bound_tick` (module docstring); each
    move's solve gets `params.threads` and the seed `params.seed` plus the move's number.  Never raises for a
    failed move: a move that fails in the solver is logged with its traceback and rejected."""
    time_limit_s, threads, seed = params.time_limit_s, params.threads, params.seed
    say = progress or (lambda _msg: None)
    t0 = time.monotonic()
    rng = np.random.default_rng(seed)
    best = simulate(fine, plan_orders(fine, plan)).to_plan(method=plan.method, lower_bound_tick=plan.lower_bound_tick)
    try:
        validate_plan(fine, best)
        if best.makespan_tick > plan.makespan_tick:
            best = plan
    except PlanInvalidError:
        best = plan
    first = best.makespan_tick
    max_window = policy.lns_max_window_ops
    base = min(fine.num_tasks, window_ops or max(policy.lns_min_window_ops, min(max_window, 2 * fine.num_devices)))
    size = base
    stale = 0
    moves = improving = rejected = 0
    last_say = t0
    critical: list[int] = []
    changed = True
    finite = np.where(fine.duration_tick < INELIGIBLE, fine.duration_tick, 0)
    mean_tick = float(finite.max(axis=1).mean()) if fine.num_tasks else 1.0
    while best.makespan_tick > bound_tick:
        left = time_limit_s - (time.monotonic() - t0)
        if left < policy.lns_min_left_s or (stall_moves is not None and stale >= stall_moves):
            break
        moves += 1
        by = best.by_task()
        if changed or not critical:
            critical = sorted(critical_tasks(fine, best))
            changed = False
        if moves % policy.lns_random_move_every and critical:  # the other moves start just before a critical op
            c = critical[int(rng.integers(len(critical)))]
            span = int(mean_tick * size / max(1, fine.num_devices))
            a_tick = max(0, by[fine.task_names[c]].start_tick - int(rng.integers(0, span // 2 + 1)))
        else:
            a_tick = int(rng.integers(0, best.makespan_tick))
        window = _window(fine, best, a_tick, size)
        before = best.makespan_tick
        if not window:
            continue
        try:
            new, _optimal = neighbourhood_move(fine, best, window, time_limit_s=min(policy.lns_move_time_s, left),
                                              backend=backend, threads=threads, seed=seed + moves,
                                              tails_after_window=policy.lns_tails_after_window, solve=policy.solve)
        except OpplanError as exc:  # no plan within the move's time: a rejected move
            log.debug("LNS move rejected: %s", exc)
            new, _optimal = None, False
        except Exception:  # noqa: BLE001 - a bug in one move must not lose the incumbent; it is logged
            log.exception("LNS move at tick %d failed (a bug; the move is rejected)", a_tick)
            new, _optimal = None, False
        if new is None:
            rejected += 1
        elif new.makespan_tick <= best.makespan_tick:
            if new.makespan_tick < best.makespan_tick:
                improving += 1
                now = time.monotonic()
                if now - last_say >= policy.lns_progress_every_s:
                    say(f"LNS: {unit(new.makespan_tick)} after {moves} moves ({now - t0:.1f}s)")
                    last_say = now
            changed = changed or new.placements != best.placements
            best = new
        if new is not None and new.makespan_tick < before:
            stale, size = 0, base
        else:
            stale += 1
            if stale % policy.lns_stale_moves == 0:  # stuck: look at larger neighbourhoods
                size = min(max_window, fine.num_tasks, int(size * policy.lns_window_growth) + 1)
    return LnsResult(best, first, moves, improving, rejected, time.monotonic() - t0)


def lns_phase(state: SearchState, budget: Budget) -> Candidate | None:
    """Phase 3b of the placement search: `lns` from the incumbent with the time left."""
    start, unit, params = state.plan, state.unit, state.params
    left = budget.left_s()
    state.say(f"LNS on the op plan from {unit(start.makespan_tick)} ({left:.0f}s left; bound "
              f"{unit(state.bound_tick)})")
    searched = lns(state.fine, start, dataclasses.replace(params, time_limit_s=left), bound_tick=state.bound_tick,
                   backend=state.options.backend, progress=state.say, unit=unit, policy=state.policy)
    summary = (f"LNS: {searched.moves} moves ({searched.improving_moves} improving, {searched.rejected_moves}"
               f" rejected) in {searched.seconds:.1f}s: {unit(start.makespan_tick)} -> "
               f"{unit(searched.plan.makespan_tick)}")
    return Candidate(searched.plan, searched.plan.makespan_tick, "LNS", seconds=searched.seconds, summary=summary)
