"""The large-neighbourhood search over a pipeline schedule: CP-SAT stalls on the full pipeline formulation of large
pipelines (thousands of tasks), while re-solving a small part of the incumbent at a time, with the rest kept in its
order (`formulations.pipeline_step`), moves it.

The loop (`improve_pipeline`).  The search works on the incumbent's order of units per stream
(`formulations.pipeline_units.Units`).  Each step draws a neighbourhood kind by weight
(`planner.search.pipeline.neighbourhoods`), frees about `size` tasks around a seeded random point, solves the step's
compact model and replays its order; the replay replaces the incumbent when its makespan is no longer (ties
accepted: they move the search).

Adaptation (`PipelineLnsPolicy`).  The size grows by `grow` after a step that proved its neighbourhood's makespan
optimal (too easy; a step stops at that proof, the secondary term within half a makespan tick's weight) and shrinks
by `shrink` after one cut by its time limit (`step_s`) without a gain; a kind's weight grows by one with each gain
and decays by `decay` with each step without one.

The bound.  Never from a step (a restricted model bounds nothing): the caller's.  Every accepted schedule is a
replay of an order whose middle satisfied the memory rows, so it fits the caps.

Deterministic for a seed as far as CP-SAT is: the draws are seeded, and each step's CP-SAT solve runs with seed
`seed + step`, in the driver's deterministic mode by default (`deterministic`); a step cut by its wall-clock limit
can still differ.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence

from formulations.backends import get_backend
from formulations.pipeline import PipelineSetup, PipelineTimes
from formulations.pipeline_step import solve_step
from formulations.pipeline_units import Units, in_order
from formulations.stop import stop_requested
from planner.search.pipeline.neighbourhoods import KINDS, neighbourhood
from planner.search.pipeline.policy import DEFAULT_LNS_POLICY, PipelineLnsPolicy
from planner.search.pipeline.results import LnsResult, LnsStep


def improve_pipeline(setup: PipelineSetup, incumbent: PipelineTimes, *, time_limit_s: float,
                     bound_tick: int = 0, backend: str = "cpsat", fifo_inside: bool = True,
                     threads: int = 8, seed: int = 0, progress: Callable[[LnsStep], None] | None = None,
                     kinds: Sequence[str] = KINDS, max_steps: int | None = None,
                     stall_steps: int | None = None, fix_untouched: bool = False,
                     deterministic: bool = True, policy: PipelineLnsPolicy = DEFAULT_LNS_POLICY) -> LnsResult:
    """Run the search (module docstring) from `incumbent`, a valid schedule of `setup`, for `time_limit_s` (or
    `max_steps` steps, or until `stall_steps` steps in a row gained nothing), or until its makespan meets
    `bound_tick`, in steps of `policy.step_s`.  Never returns a longer schedule than `incumbent`; `progress` is
    called after every step."""
    t0 = time.monotonic()
    get_backend(backend)  # an unknown name fails here, before any step
    rng = random.Random(seed)
    start_tick = setup.makespan_tick(incumbent)
    units = Units(setup, incumbent.pairs)
    order = units.order(incumbent.start)
    timed = units.replay(order)
    if timed is None:  # zero-length ties ordered against an edge: nothing to search from
        return LnsResult(incumbent, start_tick, start_tick, (), in_order(setup, incumbent), 0.0, start_tick)
    start, tail = timed
    best = units.times(start)
    best_tick = replayed = min(start_tick, setup.makespan_tick(best))  # the replay is never longer
    to_best = 0.0
    size = min(len(units.reps), policy.initial_size)
    weight = {k: 1.0 for k in kinds}
    steps: list[LnsStep] = []
    since_gain = 0
    while best_tick > bound_tick and (max_steps is None or len(steps) < max_steps) and \
            (stall_steps is None or since_gain < stall_steps):
        left = time_limit_s - (time.monotonic() - t0)
        if left < policy.min_step_s or stop_requested():  # the user's Ctrl-C ends the search as its time would
            break
        kind = rng.choices(list(kinds), weights=[weight[k] for k in kinds])[0]
        free = frozenset(units.rep[t] for t in neighbourhood(kind, setup, best, max(policy.min_size, size), rng,
                                                                 policy))
        after = best_tick
        proven, stepped = solve_step(units, backend, order, start, tail, free, time_limit_s=min(left, policy.step_s),
                                     threads=threads, seed=seed + len(steps), deterministic=deterministic,
                                     fifo_inside=fifo_inside, fix_untouched=fix_untouched)
        if stepped is not None and setup.makespan_tick(units.times(stepped[1][0])) <= best_tick:
            order, (start, tail) = stepped
            best = units.times(start)
            after = setup.makespan_tick(best)
        record = LnsStep(len(steps), kind, len(free), best_tick, after, time.monotonic() - t0, proven)
        steps.append(record)
        since_gain = 0 if record.gained else since_gain + 1
        if record.gained:
            to_best = record.wall_s
            weight[kind] += 1.0
        else:
            weight[kind] = max(policy.min_weight, weight[kind] * policy.decay)
        best_tick = after
        if proven:
            size = min(len(units.reps), math.ceil(size * policy.grow))
        elif not record.gained:
            size = max(policy.min_size, int(size * policy.shrink))
        if progress is not None:
            progress(record)
    return LnsResult(best, start_tick, best_tick, tuple(steps), in_order(setup, best), to_best, replayed)


def replayed_tick(setup: PipelineSetup, times: PipelineTimes) -> int | None:
    """The makespan of `times`' stream orders replayed (`Units.replay`: every task as early as its predecessors and
    its stream's order allow), where the search starts; None when the order has a cycle of zero-length ties."""
    units = Units(setup, times.pairs)
    timed = units.replay(units.order(times.start))
    return None if timed is None else setup.makespan_tick(units.times(timed[0]))

