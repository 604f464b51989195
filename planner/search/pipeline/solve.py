"""The pipeline formulation solved with the large-neighbourhood search after it (`solve_pipeline_lns`): the full
model first (`formulations.pipeline`), then the search on its schedule, then the full model again where the search
stalled, each within one time limit.

The bound.  Never from a step of the search (a restricted model bounds nothing): the full solves'.  Without candidate
pairs it holds for every order (`formulations.pipeline`, family 5), and a schedule the search leaves out of
micro-batch order is renamed into order (`formulations.pipeline_units.renamed_in_order`: the same schedule).  With
pairs, the full solve's bound holds only while the schedule stays in micro-batch order per stage, else the setup's
trivial bound (device bound, critical path, work / devices: no order assumed).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from formulations.backends import get_backend
from formulations.driver import solve_formulation
from formulations.model_api import ProgressCallback
from formulations.pipeline import PipelineSetup, PipelineSolution, PipelineTimes, finish_pipeline, prepare_pipeline
from formulations.pipeline_units import renamed_in_order
from formulations.stop import stop_requested
from planner.pipeline.mirror import Fold, fold
from planner.pipeline.unroll import TrainingPipeline
from planner.schedule.plan import PlanStatus
from planner.search.pipeline.half import improve_folded, two_phases
from planner.search.pipeline.lns import improve_pipeline
from planner.search.pipeline.periodic import periodic_start
from planner.search.pipeline.policy import DEFAULT_SEARCH_POLICY, PipelineSearchPolicy
from planner.search.pipeline.results import LnsResult, LnsStep


@dataclass(frozen=True)
class _Call:
    """What one `solve_pipeline_lns` call fixes for all its parts."""

    setup: PipelineSetup
    t0: float  # the call's start (time.monotonic())
    time_limit_s: float
    backend: str
    threads: int
    seed: int
    policy: PipelineSearchPolicy
    progress: Callable[[LnsStep], None] | None
    full_progress: ProgressCallback | None

    def left_s(self) -> float:
        return self.time_limit_s - (time.monotonic() - self.t0)

    def solve_full(self, limit_s: float, known: PipelineTimes | None, bound_tick: int, run_seed: int,
                   started_s: float):
        """The full model, warm-started from `known`, its bound at least `bound_tick`."""
        return solve_formulation(self.setup.formulation(), backend=get_backend(self.backend), time_limit_s=limit_s,
                                 threads=self.threads, seed=run_seed, known=known, lower_bound_tick=bound_tick,
                                 started_s=started_s, progress=self.full_progress, policy=self.policy.solve,
                                 deterministic=self.policy.deterministic)


def solve_pipeline_lns(
    pipeline: TrainingPipeline,
    memory_cap_bytes: int | Sequence[int] | None = None,
    *,
    warm_start: dict[str, int] | None = None,
    time_limit_s: float = 60.0,
    lns_share: float = 0.5,
    backend: str = "cpsat",
    fifo: bool = True,
    fifo_inside: bool = True,
    fix_untouched: bool = False,
    threads: int = 8,
    seed: int = 0,
    pair_window: int | None = 2,
    policy: PipelineSearchPolicy = DEFAULT_SEARCH_POLICY,
    progress: Callable[[LnsStep], None] | None = None,
    full_progress: ProgressCallback | None = None,
) -> tuple[PipelineSolution, LnsResult | None]:
    """`formulations.pipeline.solve_pipeline` (same arguments), then the search on its schedule: the full solve gets (1
    - `lns_share`) of `time_limit_s`, the search the rest (none when the full solve proved its schedule optimal, or
    `lns_share` is 0); above `policy.full_solve_max_tasks` tasks with a warm start, the search starts at once from it
    with all the time, and the bound is the setup's trivial bound (and a pipeline that is its own mirror image is
    searched on its half, `planner.search.pipeline.half`). Below that size, a search that stalls
    (`policy.stall_steps` steps in a row without a gain: small pipelines, where the full model was close) hands the
    time left back to the full model, solved again warm-started from the search's schedule, so that the split costs
    no proof the full budget would have given; a schedule the search left out of micro-batch order is first renamed
    into order (`renamed_in_order`), and the second solve is skipped only where that cannot be done (pairs). The
    bound is the larger of the full solves' (module docstring; the trivial bound when no full solve ran); the
    `LnsResult` (None when the search did not run) says what the search and the second solve gained.  `progress`
    gets every step of the search, `full_progress` the full solves' solver progress (incumbent and bound in ticks,
    as they improve)."""
    t0 = time.monotonic()
    setup = prepare_pipeline(pipeline, memory_cap_bytes, warm_start=warm_start, fifo=fifo, pair_window=pair_window)
    call = _Call(setup, t0, time_limit_s, backend, threads, seed, policy, progress, full_progress)
    skip_full = lns_share > 0 and setup.known is not None and \
        setup.tasks.instance.num_tasks > policy.full_solve_max_tasks
    lns: LnsResult | None = None
    if skip_full:
        assert setup.known is not None
        be = get_backend(backend)
        times, bound, to_best = setup.known, setup.trivial_tick, 0.0
        solver, solver_version, optimal = be.name, be.version, False
    else:
        full = call.solve_full(time_limit_s * (1.0 - lns_share), setup.known, setup.trivial_tick, seed, t0)
        times, bound, to_best = full.solution, full.lower_bound_tick, full.time_to_best_s
        solver, solver_version = full.solver, full.solver_version
        optimal = full.status is PlanStatus.OPTIMAL
    left = call.left_s()
    if lns_share > 0 and not optimal and left >= policy.lns.min_step_s and not stop_requested():
        # a pipeline too large for the full model that is its own mirror image is searched on its half (half the
        # tasks: the neighbourhoods cover the schedule twice as often); the symmetric schedules are a subset, so
        # only where no full solve would prove anything anyway
        mirror = fold(pipeline, setup.cap) if skip_full else None
        times, bound, to_best, lns = _search(call, mirror, times, bound, to_best, left, skip_full=skip_full,
                                             fifo=fifo, fifo_inside=fifo_inside, fix_untouched=fix_untouched)
        times, bound, to_best, lns = _resolve(call, times, bound, to_best, lns, fifo=fifo)
    value = setup.makespan_tick(times)
    bound = min(bound, value)
    status = PlanStatus.OPTIMAL if bound >= value else PlanStatus.FEASIBLE
    sol = finish_pipeline(setup, times, bound, status, solver=solver, solver_version=solver_version,
                          started_s=t0, time_to_best_s=to_best)
    return sol, lns


def _search(call: _Call, mirror: Fold | None, times: PipelineTimes, bound: int, to_best: float, left: float, *,
            skip_full: bool, fifo: bool, fifo_inside: bool,
            fix_untouched: bool) -> tuple[PipelineTimes, int, float, LnsResult]:
    """The search from `times` with the time left (`left`, seconds): on the mirror half when `mirror` is given (a
    pipeline too large for the full model that is its own mirror image), from a periodic start where one replays
    shorter; the schedule renamed into micro-batch order where it can be.  (schedule, bound, time to best, what the
    search did)."""
    setup, policy = call.setup, call.policy
    periodic = None
    if mirror is not None and policy.periodic.share > 0 and mirror.fold_times(dict(zip(
            setup.tasks.instance.task_names, times.start, strict=True))) is not None:
        times, periodic = _periodic_start(call, mirror, times, left)
        if periodic is not None:
            to_best = time.monotonic() - call.t0
        left = call.left_s()
    began = time.monotonic() - call.t0
    search = functools.partial(improve_pipeline, time_limit_s=left, bound_tick=bound, backend=call.backend,
                               fifo_inside=fifo_inside, threads=call.threads, seed=call.seed,
                               progress=call.progress, stall_steps=policy.stall_steps, fix_untouched=fix_untouched,
                               deterministic=policy.deterministic, policy=policy.lns)
    lns = None
    if mirror is not None:
        lns = improve_folded(setup, mirror, times,
                             two_phases(search, left, call.threads, call.progress, policy.lns, policy.half))
    if lns is None:
        lns = search(setup, times)
    if skip_full:
        lns = dataclasses.replace(lns, after_full_solve=False, periodic=periodic)
    if lns.best_tick < setup.makespan_tick(times):
        to_best = began + lns.time_to_best_s
    times = lns.times
    if fifo and not lns.in_order and not setup.pairs:
        # the same schedule with micro-batches renamed: in order, so the full solve's bound holds for it and the
        # second solve can start from it (family 5 loses no schedule without pairs)
        times = renamed_in_order(setup, times)
        lns = dataclasses.replace(lns, times=times, in_order=True)
    if fifo and not lns.in_order:
        bound = setup.trivial_tick  # with pairs, the full solve's bound holds for in-order schedules only
    return times, bound, to_best, lns


def _periodic_start(call: _Call, mirror: Fold, times: PipelineTimes,
                    left_s: float) -> tuple[PipelineTimes, tuple[int, int] | None]:
    """`periodic_start` within `policy.periodic.share` of the time left, its finds reported to `progress` as steps
    of their own kind (``periodic``, step 0, before the search's first), timed from the call's start."""
    def periodic_progress(before: int, period: int, after: int) -> None:
        if call.progress is not None:
            call.progress(LnsStep(0, "periodic", 0, before, after, time.monotonic() - call.t0, False, period))

    return periodic_start(call.setup, mirror, times, time_limit_s=call.policy.periodic.share * left_s,
                          threads=call.threads, seed=call.seed, progress=periodic_progress,
                          policy=call.policy.periodic)


def _resolve(call: _Call, times: PipelineTimes, bound: int, to_best: float, lns: LnsResult, *,
             fifo: bool) -> tuple[PipelineTimes, int, float, LnsResult]:
    """The full model again, warm-started from the search's schedule with the time left, where that time is at least
    `policy.min_resolve_s`, the bound is not met and the bound would hold for the schedule."""
    setup = call.setup
    left = call.left_s()
    if left >= call.policy.min_resolve_s and lns.best_tick > bound and (lns.in_order or not fifo) and \
            not stop_requested():
        again_t0 = time.monotonic()
        again = call.solve_full(left, times, bound, call.seed + 1, again_t0)
        if setup.makespan_tick(again.solution) < setup.makespan_tick(times):
            times, to_best = again.solution, again_t0 - call.t0 + again.time_to_best_s
        bound = max(bound, again.lower_bound_tick)
        lns = dataclasses.replace(lns, times=times, resolve=(time.monotonic() - again_t0,
                                                             setup.makespan_tick(times)))
    return times, bound, to_best, lns
