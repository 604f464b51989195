"""The periodic schedule (`formulations.pipeline_periodic`) and the search's periodic start: unrolled it
is a valid schedule within the caps, its period is at least the busiest stream's work, memory limits the period,
and the search starts from it only where it replays shorter."""

from __future__ import annotations

import dataclasses

import pytest

from formulations.pipeline import device_of, finish_pipeline, prepare_pipeline
from formulations.pipeline_periodic import period_lower_bound_tick, solve_periodic
from planner.compare.baselines import pipeline_of, simulate_baseline
from planner.pipeline.metrics import figures
from planner.pipeline.mirror import fold
from planner.pipeline.registry import Scales, UnitCosts
from planner.pipeline.stream_greedy import best_stream_list
from planner.pipeline.unroll import unroll_actions
from planner.schedule.plan import PlanStatus
from planner.search.pipeline.lns import replayed_tick
from planner.search.pipeline.periodic import periodic_start
from planner.search.pipeline.policy import PeriodicPolicy, PipelineSearchPolicy
from planner.search.pipeline.solve import solve_pipeline_lns

P, M = 4, 8
COSTS = UnitCosts(f=2, b=2, w=1, comm=1, comm_stream=True, a2a=1.0)


def _half():
    """DualPipe's placement with sends and all-to-alls on communication streams, DualPipe's peak as the cap, and
    its mirror fold."""
    sc = Scales.of(COSTS)
    cap = simulate_baseline("dualpipe", P, M, COSTS, sc).figures.max_peak_memory_bytes
    pipe = pipeline_of("dualpipe", P, M, COSTS, sc)
    folded = fold(pipe, [cap] * P)
    assert folded is not None
    return pipe, cap, folded


def _check(pipe, times: dict[str, int], caps) -> tuple[int, list[int]]:
    """`times` as a plan of `pipe`, checked by `finish_pipeline`'s independent validation: (makespan, peaks), every
    peak within its cap."""
    setup = prepare_pipeline(pipe, caps, warm_start=times)
    assert setup.known is not None and setup.warm_rejected is None
    sol = finish_pipeline(setup, setup.known, 0, PlanStatus.FEASIBLE, solver="test", solver_version="",
                          started_s=0.0, time_to_best_s=0.0)
    peaks = list(figures(pipe, sol.timeline).peak_memory_bytes)
    assert all(peak <= cap for peak, cap in zip(peaks, setup.cap, strict=True))
    return sol.plan.makespan_tick, peaks


def test_the_unrolled_periodic_schedule_is_valid_within_the_caps_and_repeats_every_period():
    _, cap, folded = _half()
    half, caps = folded.half, folded.half_caps([cap] * P)
    lower = period_lower_bound_tick(half)
    found = solve_periodic(half, caps, lower + 2, time_limit_s=20, threads=1)
    assert found is not None and found.period_tick == lower + 2
    starts = found.unrolled(half)
    assert set(starts) == set(unroll_actions(half).instance.task_names)
    span, _ = _check(half, starts, caps)
    last = half.num_microbatches - 1  # of its one chain: M / 2, DualPipe's two chains folded onto one
    assert span == last * found.period_tick + found.span_tick  # the last micro-batch ends one span after its start
    for name, offset in found.offsets.items():
        assert name.endswith("0")
        assert starts[name[:-1] + str(last)] == offset + last * found.period_tick


def test_no_period_is_shorter_than_the_busiest_stream_s_work():
    _, cap, folded = _half()
    half, caps = folded.half, folded.half_caps([cap] * P)
    lower = period_lower_bound_tick(half)
    assert lower > 0
    assert solve_periodic(half, caps, lower - 1, time_limit_s=20, threads=1) is None
    assert solve_periodic(half, caps, lower, time_limit_s=20, threads=1) is not None  # the bound is met here


def test_memory_lengthens_the_period():
    """A cap with room for one activation of each stage (parameters aside) lets no two copies of a part be alive
    at once: every part's lifetime must fit in one period, so a period at the stream bound has no schedule (the
    memory model bites), and one as long as a micro-batch's whole pass has."""
    _, _, folded = _half()
    half = folded.half
    one = [sum(int(half.stages[s].param_bytes) + int(half.stages[s].activation_bytes)
               for s in half.device_stages(d)) for d in range(half.num_devices)]
    lower = period_lower_bound_tick(half)
    assert solve_periodic(half, one, lower, time_limit_s=20, threads=1) is None
    assert solve_periodic(half, [2**40] * half.num_devices, lower, time_limit_s=20, threads=1) is not None
    inst = unroll_actions(dataclasses.replace(half, num_microbatches=1)).instance
    # longer than any path through one micro-batch: all its work and every edge's delay
    whole_pass = sum(int(inst.duration_tick[t, d]) for t, d in enumerate(device_of(inst))) + \
        int(inst.comm_tick.max(axis=1).sum())
    found = solve_periodic(half, one, whole_pass, time_limit_s=20, threads=1)
    assert found is not None
    _check(half, found.unrolled(half), one)


def test_the_search_starts_from_the_periodic_schedule_only_where_it_replays_shorter():
    pipe, cap, folded = _half()
    half_times, _ = best_stream_list(folded.half, folded.half_caps([cap] * P))
    warm = folded.unfold_times(half_times)
    setup = prepare_pipeline(pipe, cap, warm_start=warm)
    assert setup.known is not None
    listed = replayed_tick(setup, setup.known)
    # a period this long replays to a longer schedule than the list schedule's: the list schedule stays
    times, periodic = periodic_start(setup, folded, setup.known, time_limit_s=10, threads=1, seed=0,
                                     policy=PeriodicPolicy(margins=(3.0,)))
    assert periodic is None and times == setup.known
    # a period at the stream bound: the start taken is the shorter of the two, and it is valid
    times, periodic = periodic_start(setup, folded, setup.known, time_limit_s=20, threads=1, seed=0,
                                     policy=PeriodicPolicy(margins=(0.0, 0.2)))
    if periodic is None:
        assert times == setup.known
    else:
        period, tick = periodic
        assert tick < listed and tick == replayed_tick(setup, times)
        assert period >= period_lower_bound_tick(folded.half)
        _check(pipe, dict(zip(setup.tasks.instance.task_names, times.start, strict=True)), cap)
        assert folded.fold_times(dict(zip(setup.tasks.instance.task_names, times.start, strict=True))) is not None


@pytest.mark.parametrize("share", [0.0, 0.2])
def test_solve_pipeline_lns_reports_its_periodic_start(share):
    pipe, cap, folded = _half()
    half_times, _ = best_stream_list(folded.half, folded.half_caps([cap] * P))
    warm = folded.unfold_times(half_times)
    warm_span, _ = _check(pipe, warm, cap)
    policy = PipelineSearchPolicy(periodic=PeriodicPolicy(margins=(0.0,), share=share), full_solve_max_tasks=10)
    seen = []
    sol, lns = solve_pipeline_lns(pipe, cap, warm_start=warm, time_limit_s=8, threads=1, progress=seen.append,
                                  policy=policy)
    assert lns is not None and lns.folded
    periodic_steps = [s for s in seen if s.kind == "periodic"]
    if share == 0.0:
        assert lns.periodic is None and not periodic_steps
    else:
        assert len(periodic_steps) >= 1  # the toy's stream bound admits a periodic schedule (test above)
        assert all(s.period_tick == period_lower_bound_tick(folded.half) for s in periodic_steps)
    if lns.periodic is not None:
        assert lns.periodic[1] < warm_span and sol.plan.makespan_tick <= lns.periodic[1]
        assert (lns.periodic[0], lns.periodic[1]) == (periodic_steps[-1].period_tick, periodic_steps[-1].after_tick)
    assert sol.plan.makespan_tick <= warm_span
    assert max(figures(pipe, sol.timeline).peak_memory_bytes) <= cap
