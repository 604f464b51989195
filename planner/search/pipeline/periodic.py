"""The periodic start of a mirror half's search: the periodic schedule of the half (`formulations.pipeline_periodic`)
unfolded, where its replay ends before the warm start's.

The search improves a schedule a few hundred tasks at a time; on a long pipeline whose busiest stream carries the
all-to-alls, a steady state where that stream idles between micro-batches needs every device's stream order changed
together to close, which no neighbourhood of that size reaches.  A periodic schedule plans exactly that steady state
across all devices at once, on one micro-batch's tasks; its fill and drain are the steady state's, slower than they
need to be, and the replay (`replayed_tick`) takes most of that back before the search's first step.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from formulations.pipeline import PipelineSetup, PipelineTimes
from formulations.pipeline_periodic import period_lower_bound_tick, solve_periodic
from formulations.stop import stop_requested
from planner.pipeline.mirror import Fold
from planner.search.pipeline.lns import replayed_tick
from planner.search.pipeline.policy import DEFAULT_PERIODIC_POLICY, PeriodicPolicy


def periodic_start(setup: PipelineSetup, mirror: Fold, times: PipelineTimes, *, time_limit_s: float, threads: int,
                   seed: int, progress: Callable[[int, int, int], None] | None = None,
                   policy: PeriodicPolicy = DEFAULT_PERIODIC_POLICY) -> tuple[PipelineTimes, tuple[int, int] | None]:
    """`times`, or the periodic schedule of the mirror half (`formulations.pipeline_periodic`, at each of
    `policy.margins` above its period bound, `time_limit_s` shared among them) unfolded, whichever replays shorter;
    with (period, replayed makespan) when the periodic one wins.  Symmetric, within the caps (checked).  `progress`
    gets (the best replayed makespan before, the period, its replayed makespan) after each periodic schedule found."""
    half, half_caps = mirror.half, mirror.half_caps(setup.cap)
    names = setup.tasks.instance.task_names
    best, best_tick, chosen = times, replayed_tick(setup, times), None
    lower = period_lower_bound_tick(half)
    for margin in policy.margins:
        if stop_requested():  # the user's Ctrl-C: the best start so far
            break
        found = solve_periodic(half, half_caps, math.ceil(lower * (1.0 + margin)),
                               time_limit_s=time_limit_s / len(policy.margins), threads=threads, seed=seed,
                               policy=policy.model)
        if found is None:
            continue
        unfolded = mirror.unfold_times(found.unrolled(half))
        candidate = PipelineTimes(tuple(unfolded[n] for n in names))
        if setup.over_cap(candidate) is not None:  # the model's memory count is an upper bound: cannot happen
            continue
        tick = replayed_tick(setup, candidate)
        if tick is not None and progress is not None and best_tick is not None:
            progress(best_tick, found.period_tick, tick)
        if tick is not None and (best_tick is None or tick < best_tick):
            best, best_tick, chosen = candidate, tick, (found.period_tick, tick)
    return best, chosen

