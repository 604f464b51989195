"""Iterated list scheduling: search the space of task priorities, with the list scheduler as the decoder.

A list scheduler is a map from a priority vector (and a device policy) to a valid plan (`list_schedule`); the
classic ones (HEFT, CPoP's priority, PEFT) are a few points of that space chosen by a formula.  This search walks
it: a (1+1) evolution strategy over priority vectors.

    parent = the best (priority, policy) of the starting points (the classic schedulers')
    repeat until the budget ends, the plan meets `bound_tick`, or `stall_moves` moves in a row found no better plan:
        child = parent's priority + sigma * scale * N(0, 1) per task   (scale: the mean task duration, in ticks);
                every other move perturbs only `local_tasks` tasks consecutive in the parent's priority order (on
                large graphs a change everywhere is almost never better everywhere: local moves are accepted
                far more often)
        decode the child with the parent's device policy (insertion, memory: `list_schedule`)
        if the child's makespan <= the parent's: it becomes the parent (equal ones too, to cross plateaus)
        sigma: x 1.5 after an improvement, x 0.95 after a move that was no better (the one-fifth rule's spirit:
               large steps while they pay, small ones near a local optimum), kept in [least, most]
    every `restart_every` moves without improvement, the parent goes back to the next starting point, or to the
    best plan's priority (in turn)

Alternatives that search worse on the engine bench's layered graphs: threshold acceptance (accept a child up to a
few per cent longer, the threshold shrinking to 0 over the budget), and perturbing every task on every move (no
local moves).

The noise is in ticks, so it reorders tasks whose priorities are within a few task lengths of each other (tasks
of the same layer or of neighbouring ones) and leaves the coarse order (sources before sinks) alone.  Every plan is
a list schedule, so it is valid (precedence, transfers, one task at a time, memory: the list scheduler's
conservative tracker); a priority for which the tracker finds no device is a rejected move.  Deterministic for a
seed and a number of moves (`numpy.random.default_rng(seed)`); a time budget cuts the number of moves.

Cost: one list schedule per move (about 10 ms for 300 tasks and 50 ms for 2,000 on 8 devices).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics.list_schedule import (
    DevicePolicy,
    downward_rank,
    earliest_finish,
    list_schedule,
    upward_rank,
)
from planner.heuristics.peft import optimistic_cost_table, peft_rank
from planner.heuristics.policy import DEFAULT_ITERATED_POLICY, IteratedPolicy
from planner.schedule.plan import Plan

__all__ = ["ITERATED_METHOD", "IteratedResult", "Start", "classic_starts", "iterated_list_schedule", "order_start"]

ITERATED_METHOD = "iterated-list"
ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class Start:
    """A starting point of the search: a priority vector and the device policy that decodes it."""

    name: str
    priority: np.ndarray
    policy: DevicePolicy


@dataclass(frozen=True)
class IteratedResult:
    """The best plan found (method `ITERATED_METHOD` when a move improved on the starts, else the best start's
    plan), the starting point it descends from, and how the search went.  `priority` and `policy`: what `plan` is
    the list schedule of (`list_schedule(instance, priority, policy)`)."""

    plan: Plan
    start_name: str
    start_makespan_tick: int
    moves: int
    improving_moves: int
    seconds: float
    priority: np.ndarray | None = None
    policy: DevicePolicy | None = None


def classic_starts(instance: SchedulingInstance) -> list[Start]:
    """HEFT (upward rank, earliest finish), CPoP's priority (upward + downward rank) and PEFT's (OCT rank and
    key)."""
    up = upward_rank(instance)
    table = optimistic_cost_table(instance)
    rows = table.tolist()

    def peft_key(task: int, _k: int, device: int, finish: int) -> float:
        return finish + rows[task][device]

    return [Start("heft", up, earliest_finish), Start("heft-sum", up + downward_rank(instance), earliest_finish),
            Start("peft", peft_rank(table), peft_key)]


def order_start(instance: SchedulingInstance, plan: Plan, name: str = "incumbent order") -> Start:
    """A plan's order as a starting point: priority = minus the start tick (earlier first), decoded by earliest
    finish, so a plan that is no list schedule (a solver's, a decomposition's) seeds the search too.  Its decoding
    need not reproduce the plan (devices are chosen again), so the caller keeps the plan itself as well."""
    by = plan.by_task()
    return Start(name, np.array([-by[n].start_tick for n in instance.task_names], dtype=np.float64), earliest_finish)


def _decode(instance: SchedulingInstance, priority: np.ndarray, policy: DevicePolicy) -> Plan | None:
    try:
        return list_schedule(instance, priority, policy, method=ITERATED_METHOD)
    except InfeasibleError:  # the memory tracker found no device for some task under this order: a rejected move
        return None


def iterated_list_schedule(instance: SchedulingInstance, *, time_limit_s: float, starts: Sequence[Start] | None = None,
                           bound_tick: int = 0, seed: int = 0, max_moves: int | None = None,
                           stall_moves: int | None = None, progress: ProgressFn | None = None,
                           unit: Callable[[int], str] = str,
                           tuning: IteratedPolicy = DEFAULT_ITERATED_POLICY) -> IteratedResult:
    """The search of the module docstring from `starts` (default `classic_starts`) until `time_limit_s`, or `max_moves`
    moves, or `stall_moves` moves in a row that did not improve on the best plan, or a plan that meets `bound_tick`; its
    step, local moves and restarts as `tuning` says (not a device policy).  Raises `InfeasibleError` only when no start
    decodes."""
    say = progress or (lambda _msg: None)
    t0 = time.monotonic()
    rng = np.random.default_rng(seed)
    starts = list(starts) if starts is not None else classic_starts(instance)
    decoded = [(s, _decode(instance, s.priority, s.policy)) for s in starts]
    alive = [(s, p) for s, p in decoded if p is not None]
    if not alive:
        raise InfeasibleError(f"no list schedule of {instance.name!r} fits (every starting priority failed)")
    start, best = min(alive, key=lambda sp: sp[1].makespan_tick)
    first = best.makespan_tick
    best_prio, best_policy, best_name = start.priority, start.policy, start.name
    parent_prio, parent_policy, parent_tick = best_prio, best_policy, best.makespan_tick
    finite = np.where(instance.duration_tick < INELIGIBLE, instance.duration_tick, 0)
    scale = float(finite.max(axis=1, initial=0).mean()) if instance.num_tasks else 1.0
    n = instance.num_tasks
    step, local_tasks = tuning.step, tuning.local_tasks
    sigma = step.start
    moves = improving = stale = 0
    since_best = 0  # moves since the best plan last improved (`stall_moves`)
    next_start = 0
    last_say = t0
    while best.makespan_tick > bound_tick and n > 1:
        if time.monotonic() - t0 >= time_limit_s or (max_moves is not None and moves >= max_moves):
            break
        if stall_moves is not None and since_best >= stall_moves:
            break
        moves += 1
        since_best += 1
        child = parent_prio.copy()
        if moves % 2 and n > 2 * local_tasks:  # a local move: only the tasks around one point of the order
            order = np.argsort(-parent_prio, kind="stable")
            at = int(rng.integers(0, n - local_tasks))
            picked = order[at:at + local_tasks]
            child[picked] += sigma * scale * rng.standard_normal(len(picked))
        else:
            child += sigma * scale * rng.standard_normal(n)
        plan = _decode(instance, child, parent_policy)
        if plan is not None and plan.makespan_tick <= parent_tick:
            better = plan.makespan_tick < parent_tick
            parent_prio, parent_tick = child, plan.makespan_tick
            if plan.makespan_tick < best.makespan_tick:
                improving += 1
                since_best = 0
                best, best_prio, best_policy = plan, child, parent_policy
                now = time.monotonic()
                if now - last_say >= tuning.progress_every_s:
                    say(f"iterated list scheduling: {unit(best.makespan_tick)} after {moves} moves "
                        f"({now - t0:.1f}s)")
                    last_say = now
            sigma = step.after(sigma, better)
            stale = 0 if better else stale + 1
        else:
            sigma = step.after(sigma, False)
            stale += 1
        if stale >= tuning.restart_every:  # a local optimum: start again from another classic point (or the best)
            stale = 0
            next_start = (next_start + 1) % (len(alive) + 1)
            if next_start < len(alive):
                s, p = alive[next_start]
                parent_prio, parent_policy, parent_tick = s.priority, s.policy, p.makespan_tick
            else:
                parent_prio, parent_policy, parent_tick = best_prio, best_policy, best.makespan_tick
            sigma = step.start
    return IteratedResult(best, best_name, first, moves, improving, time.monotonic() - t0, best_prio, best_policy)
