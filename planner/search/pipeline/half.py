"""The pipeline search on a mirror half (`planner.pipeline.mirror`): a pipeline that is its own mirror image is
searched on its half (half the tasks, so the neighbourhoods cover the schedule twice as often) and the schedule
unfolded (`improve_folded`); the symmetric schedules are a subset, so the caller folds only where no full solve would
prove anything anyway.  On the half the search runs in phases (`two_phases`, `HalfSearchPolicy`): short steps on few
workers first, longer steps on the caller's workers after, with rounds of one step on each end of the schedule
between parts of the second phase.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from formulations.pipeline import PipelineSetup, PipelineTimes, prepare_pipeline
from formulations.pipeline_units import in_order
from planner.pipeline.mirror import Fold
from planner.search.pipeline.neighbourhoods import ENDS_KINDS
from planner.search.pipeline.policy import HalfSearchPolicy, PipelineLnsPolicy
from planner.search.pipeline.results import LnsResult, LnsStep


def improve_folded(setup: PipelineSetup, fold: Fold, incumbent: PipelineTimes,
                   search: Callable[[PipelineSetup, PipelineTimes], LnsResult]) -> LnsResult | None:
    """`search` (`planner.search.pipeline.lns.improve_pipeline` with its limits bound) on the mirror half of
    `setup`'s pipeline (`planner.pipeline.mirror`: `fold` is its `Fold` under `setup.cap`), from `incumbent` folded,
    with the best schedule unfolded: a schedule of `setup` within its caps (the fold is exact), symmetric, never
    longer than `incumbent`.  None when `incumbent` is not symmetric (it has no half to start from)."""
    names = setup.tasks.instance.task_names
    folded = fold.fold_times(dict(zip(names, incumbent.start, strict=True)))
    if folded is None:
        return None
    half = prepare_pipeline(fold.half, fold.half_caps(setup.cap), warm_start=folded, fifo=setup.fifo,
                            pair_window=None, constructive=False)
    if half.known is None:  # the half's caps refused the folded schedule: cannot happen for an exact fold
        return None
    found = search(half, half.known)
    unfolded = fold.unfold_times(dict(zip(half.tasks.instance.task_names, found.times.start, strict=True)))
    times = PipelineTimes(tuple(unfolded[n] for n in names))
    return dataclasses.replace(found, times=times, best_tick=setup.makespan_tick(times),
                               in_order=in_order(setup, times), folded=True)



def two_phases(search: Callable[..., LnsResult], time_limit_s: float, threads: int,
               progress: Callable[[LnsStep], None] | None, lns: PipelineLnsPolicy,
               policy: HalfSearchPolicy) -> Callable[[PipelineSetup, PipelineTimes], LnsResult]:
    """The search on a mirror half (for `improve_folded`), in two phases and the ends (`policy`): `first_share` of
    the time in steps of `step_s` on at most `threads` workers, the rest in steps of `step_share` x the caller's
    step limit (`lns.step_s`) on `threads` (at most `second_threads`), split evenly into `ends_rounds` parts, each
    followed by one step on each end of the schedule (``head``, then ``tail``: `ENDS_KINDS`, each within
    `ends_step_s` and `ends_time_share` of `time_limit_s`, kept back from the phases; with `ends`), then more of the
    second phase's steps in whatever time the ends left.  No phase has a stall limit: the full model it would hand
    the time back to is the whole pipeline, too large to gain anything in that time, and with short steps a streak
    of gainless steps is likely while the search still gains.  One `LnsResult` for all: its steps numbered and
    timed from the first phase's start, as `progress` sees them."""

    def run(half: PipelineSetup, incumbent: PipelineTimes) -> LnsResult:
        t0 = time.monotonic()
        parts: list[LnsResult] = []
        ends_s = min(policy.ends_step_s, policy.ends_time_share * time_limit_s) if policy.ends else 0.0
        rounds = policy.ends_rounds if policy.ends else 0
        kept_s = ends_s * len(ENDS_KINDS) * rounds
        second = {"step_s": lns.step_s * policy.step_share,
                  "threads": threads if policy.second_threads is None else min(threads, policy.second_threads)}

        def left_s(keep_s: float = 0.0) -> float:
            return max(0.0, time_limit_s - keep_s - (time.monotonic() - t0))

        def part(step_s: float, **limits) -> None:
            offset_s, offset_steps = time.monotonic() - t0, sum(len(r.steps) for r in parts)

            def shifted(s: LnsStep) -> LnsStep:
                return dataclasses.replace(s, step=s.step + offset_steps, wall_s=s.wall_s + offset_s)

            found = search(half, parts[-1].times if parts else incumbent, stall_steps=None,
                           deterministic=policy.deterministic, policy=dataclasses.replace(lns, step_s=step_s),
                           progress=None if progress is None else (lambda s: progress(shifted(s))), **limits)
            parts.append(dataclasses.replace(found, steps=tuple(shifted(s) for s in found.steps),
                                             time_to_best_s=offset_s + found.time_to_best_s))

        part(time_limit_s=(time_limit_s - kept_s) * policy.first_share, step_s=min(lns.step_s, policy.step_s),
             threads=min(threads, policy.threads))
        for r in range(rounds):
            still_kept_s = ends_s * len(ENDS_KINDS) * (rounds - r)
            part(time_limit_s=left_s(still_kept_s) / (rounds - r), **second)
            for kind in ENDS_KINDS:
                part(time_limit_s=min(ends_s, left_s(still_kept_s - ends_s * (1 + ENDS_KINDS.index(kind)))),
                     step_s=ends_s, threads=threads, kinds=(kind,), max_steps=1)
        part(time_limit_s=left_s(), **second)
        to_best = next((r.time_to_best_s for r in parts if r.gains and r.best_tick == parts[-1].best_tick), 0.0)
        return dataclasses.replace(parts[-1], start_tick=parts[0].start_tick, replayed_tick=parts[0].replayed_tick,
                                   steps=tuple(s for r in parts for s in r.steps), time_to_best_s=to_best)

    return run

