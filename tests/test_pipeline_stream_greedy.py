"""The list schedule of pipelines with communication streams (`planner/pipeline/stream_greedy.py`): a
valid schedule of every task (compute, sends, all-to-alls) within the memory cap, shorter than every baseline where
the all-to-alls load the communication streams, and the warm start `best_greedy` hands such pipelines."""

from __future__ import annotations

import dataclasses

import pytest

from formulations.pipeline import finish_pipeline, prepare_pipeline
from planner.compare.baselines import pipeline_of, simulate_baseline
from planner.pipeline import stream_greedy
from planner.pipeline.greedy import best_greedy
from planner.pipeline.metrics import figures
from planner.pipeline.registry import Scales, UnitCosts
from planner.pipeline.stream_greedy import (
    PORTFOLIO,
    ListRule,
    best_stream_list,
    fitted_limits,
    little_limits,
    stream_list_times,
    stream_tasks,
)
from planner.pipeline.unroll import StageCost, uniform_pipeline, unroll_actions
from planner.schedule.plan import PlanStatus

BASELINES = ("1f1b", "zb-h1", "zb-v", "dualpipe", "dualpipev")


def _valid_makespan(pipe, times: dict[str, int], cap: int) -> int:
    """Validate `times` as a plan of `pipe` (precedence, one task at a time per stream: `finish_pipeline`'s
    checks), check every device's peak memory against `cap`, and return the makespan."""
    setup = prepare_pipeline(pipe, cap, warm_start=times)
    assert setup.known is not None
    sol = finish_pipeline(setup, setup.known, 0, PlanStatus.FEASIBLE, solver="test", solver_version="",
                          started_s=0.0, time_to_best_s=0.0)
    fig = figures(pipe, sol.timeline)
    assert fig.max_peak_memory_bytes <= cap
    return sol.plan.makespan_tick


@pytest.mark.parametrize("placement", ["dualpipe", "zb-v"])
def test_valid_within_the_cap_and_shorter_than_every_baseline_when_all_to_alls_load_the_streams(placement):
    # all-to-alls as long as a forward: a baseline's fixed compute order waits for them; the list schedule runs
    # another micro-batch meanwhile.  Measured here: 104 (DualPipe's placement) and 99 (V) ticks against the
    # shortest baseline's 109 (ZB-V).
    c = UnitCosts(f=1, b=1, w=1, a2a=1.0)
    sc = Scales.of(c)
    p, m = 4, 8
    rows = {n: simulate_baseline(n, p, m, c, sc) for n in BASELINES}
    cap = rows["dualpipe"].figures.max_peak_memory_bytes
    best_baseline = min(r.figures.makespan_tick for r in rows.values())
    pipe = pipeline_of(placement, p, m, c, sc)
    found = best_stream_list(pipe, [cap] * p)
    assert found is not None
    times, span = found
    assert set(times) == set(unroll_actions(pipe).instance.task_names)  # sends and all-to-alls included
    assert _valid_makespan(pipe, times, cap) == span < best_baseline


def test_every_rule_keeps_micro_batches_in_order_per_stage_and_kind():
    c = UnitCosts(f=1, b=2, w=1, a2a=0.5)
    sc = Scales.of(c)
    pipe = pipeline_of("zb-v", 3, 6, c, sc)
    cap = simulate_baseline("zb-v", 3, 6, c, sc).figures.max_peak_memory_bytes
    for rule in PORTFOLIO:
        times = stream_list_times(pipe, [cap] * 3, rule)
        assert times is not None, rule
        _valid_makespan(pipe, times, cap)
        for s in range(pipe.num_stages):
            for k in "FBW":
                starts = [times[f"{s}{k}{mb}"] for mb in range(pipe.num_microbatches)]
                assert starts == sorted(starts), (rule, s, k)


def test_the_reserve_keeps_a_v_from_filling_its_memory_with_first_chunk_forwards():
    # Device 0 of a V holds chunks 0 and 2p-1.  With room for four activations and no reserve, the first chunk's
    # forwards take all four slots and chunk 2p-1's forward (which the backward needs) never fits: stuck.  One
    # reserved slot leaves it room.
    c = UnitCosts(f=1, b=1, w=1, a2a=1.0)
    sc = Scales.of(c)
    pipe = pipeline_of("zb-v", 2, 8, c, sc)
    act = int(pipe.stages[0].activation_bytes)
    cap = [4 * act] * 2
    assert stream_list_times(pipe, cap, ListRule(True, 0, share=1.0)) is None
    times = stream_list_times(pipe, cap, ListRule(True, 1, share=1.0))
    assert times is not None
    _valid_makespan(pipe, times, 4 * act)


def test_none_without_streams_or_when_nothing_fits_and_best_greedy_hands_streams_over():
    plain = uniform_pipeline(2, 2)
    assert stream_list_times(plain, [100, 100], PORTFOLIO[0]) is None  # no communication streams
    c = UnitCosts(f=1, b=1, w=1, a2a=1.0)
    sc = Scales.of(c)
    pipe = pipeline_of("dualpipe", 4, 8, c, sc)
    assert best_stream_list(pipe, [0] * 4) is None  # no forward fits
    cap = [10**9] * 4
    assert best_greedy(pipe, cap) == best_stream_list(pipe, cap)
    streams_only = dataclasses.replace(plain, comm_tick=1, comm_stream=True)
    assert best_greedy(streams_only, [9, 9]) == best_stream_list(streams_only, [9, 9])


def test_little_limits_by_hand():
    # Two stages on two devices, F = B = W = 1, every all-to-all 1 tick, no hop delay.  One micro-batch from F(s)
    # start to W(s) end: stage 1: F, COMBINE_F, DISPATCH_B, B, W = 5; stage 0: F, COMBINE_F, then stage 1's
    # DISPATCH_F, F, COMBINE_F, DISPATCH_B, B, COMBINE_B, then DISPATCH_B, B, W = 11.  The busiest stream (each
    # communication stream: 4 all-to-alls per micro-batch) takes 4 ticks per micro-batch, so factor 1.6 gives
    # round(1.6 x 11 / 4) = 4 and round(1.6 x 5 / 4) = 2.
    pipe = uniform_pipeline(2, 4, placement="fixed")
    pipe = dataclasses.replace(pipe, stages=tuple(StageCost(1, 1, 1, 1, 0, a2a_tick=1) for _ in pipe.stages),
                               comm_stream=True)
    prepared = stream_tasks(pipe)
    assert prepared is not None
    assert little_limits(prepared, 1.6) == [4, 2]
    assert little_limits(prepared, 1.0) == [3, 1]
    # fitted to a cap (activation 1 per micro-batch and stage, no parameters): a cap of 3 on device 0 lowers its
    # factor until round(g x 11/4) <= 3 (g = 1.26: 3); stage 1's 2 already fits; caps (2, 1) give 2 and 1
    assert fitted_limits(prepared, 1.6, [3, 3]) == [3, 2]
    assert fitted_limits(prepared, 1.6, [2, 1]) == [2, 1]
    assert fitted_limits(prepared, 1.6, [10, 10]) == little_limits(prepared, 1.6)
    # the schedule keeps those limits: at most 3 micro-batches of stage 0 and 1 of stage 1 between F's start and
    # W's end
    times = stream_list_times(pipe, [10**6] * 2, ListRule(True, 0, little=1.0))
    assert times is not None
    for s, limit in ((0, 3), (1, 1)):
        for mb in range(4 - limit):
            assert times[f"{s}F{mb + limit}"] >= times[f"{s}W{mb}"] + 1


def test_prepare_without_the_list_schedule_gives_the_same_bound_and_no_warm_start():
    # `compare`'s placement choice needs only the bound: it skips the list schedule (seconds on large pipelines)
    c = UnitCosts(f=1, b=1, w=1, a2a=1.0)
    pipe = pipeline_of("zb-v", 4, 8, c, Scales.of(c))
    with_list = prepare_pipeline(pipe, 10**9)
    without = prepare_pipeline(pipe, 10**9, constructive=False)
    assert with_list.known is not None and without.known is None
    assert without.trivial_tick == with_list.trivial_tick


def test_fitted_limits_keep_the_activations_in_flight_under_the_cap_and_memory_never_refuses(monkeypatch):
    # the unit V with all-to-alls as long as a forward, a cap of 5 activations per device: Little's law at 3.0
    # would keep more micro-batches in flight than that; fitted, params + limits x activations fit every device,
    # no limit grows, and the schedule is valid within the cap
    c = UnitCosts(f=1, b=1, w=1, a2a=1.0)
    sc = Scales.of(c)
    pipe = pipeline_of("zb-v", 4, 8, c, sc)
    prepared = stream_tasks(pipe)
    assert prepared is not None
    cap = 5 * int(pipe.stages[0].activation_bytes)
    loose, fitted = little_limits(prepared, 3.0), fitted_limits(prepared, 3.0, [cap] * 4)
    assert all(f <= lo for f, lo in zip(fitted, loose, strict=True)) and fitted != loose
    for d in range(4):
        held = sum(fitted[s] * int(pipe.stages[s].activation_bytes) + int(pipe.stages[s].param_bytes)
                   for s in pipe.device_stages(d))
        assert held <= cap
    times = stream_list_times(pipe, [cap] * 4, ListRule(True, 0, little=3.0, fit=True), prepared)
    assert times is not None
    _valid_makespan(pipe, times, cap)
    # memory never refused a forward: the same limits without any cap give the same schedule
    monkeypatch.setattr(stream_greedy, "little_limits", lambda _prepared, _factor: list(fitted))
    assert stream_list_times(pipe, [10**12] * 4, ListRule(True, 0, little=3.0), prepared) == times
    # while Little's law at 3.0 unfitted under the cap does get refused (a different, here longer, schedule)
    monkeypatch.undo()
    loose_times = stream_list_times(pipe, [cap] * 4, ListRule(True, 0, little=3.0), prepared)
    assert loose_times != times
