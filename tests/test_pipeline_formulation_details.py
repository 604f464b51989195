"""The pipeline formulation's data, bounds and defaults pinned by hand on small pipelines: the horizon without a
known schedule, the list schedule taken when no warm start is given, the pair window around a warm start, the
model's default family 5 and its memory family only where activations are held, the device bound against the
instance's trivial bound, the pair bound's work saving (the smaller of the forwards' and the backwards' savings),
and the fit check of a device that hosts no stage.  Every expected value is derived in the comment above it.
"""

from __future__ import annotations

import inspect

import pytest

from formulations.backends import get_backend
from formulations.pipeline import (
    build_pipeline_model,
    pipeline_device_bound,
    prepare_pipeline,
    solve_pipeline,
    warm_by_action,
)
from formulations.pipeline_bounds import PairCandidate, check_fits, pair_bound
from planner.errors import InfeasibleError
from planner.pipeline.greedy import best_greedy
from planner.pipeline.unroll import StageCost, TrainingPipeline, unroll_actions
from planner.schedule.actions import Action, ActionKind, OverlapAction

F, B, W = ActionKind.F, ActionKind.B, ActionKind.W


def two_devices() -> TrainingPipeline:
    """Stage 0 (F 2, B 3, W 1) on device 0, stage 1 (F 1, B 2, W 2) on device 1, one chain, two micro-batches,
    a hop of 1 tick between the devices."""
    st = (StageCost(2, 3, 1, activation_bytes=4), StageCost(1, 2, 2, activation_bytes=4))
    return TrainingPipeline(st, 2, 2, (0, 1), ((0, 1),), comm_tick=1)


def one_stage(num_microbatches: int, *, activation_bytes: int = 1) -> TrainingPipeline:
    """One stage (F 2, B 2, W 1) on one device whose pairs last half their halves (fb_overlap 0.5)."""
    return TrainingPipeline((StageCost(2, 2, 1, activation_bytes=activation_bytes),), num_microbatches, 1, (0,),
                            ((0,),), fb_overlap=0.5)


def test_the_horizon_without_a_known_schedule_is_the_work_plus_every_hop():
    # work: 2 micro-batches x (2 + 3 + 1) on device 0 and x (1 + 2 + 2) on device 1 = 12 + 10 = 22; hops: F0 -> F1
    # and B1 -> B0 of each micro-batch cross the devices, 4 edges of 1 tick: 22 + 4 = 26
    setup = prepare_pipeline(two_devices(), constructive=False)
    assert setup.known is None
    assert setup.horizon == 26


def test_without_a_warm_start_the_list_schedule_is_the_known_schedule_and_sets_the_horizon():
    pipe = two_devices()
    setup = prepare_pipeline(pipe)
    greedy = best_greedy(pipe, [2**40] * 2)
    assert greedy is not None and setup.known is not None
    by_action = warm_by_action(setup.tasks, greedy[0])
    assert setup.known.start == tuple(by_action[a] for a in setup.tasks.actions)
    assert setup.known.pairs == ()
    # the horizon is the list schedule's makespan, below the serial 26 of the test above
    assert setup.horizon == setup.makespan_tick(setup.known) == greedy[1] < 26


def test_the_device_bound_beats_the_trivial_bound_on_the_far_device():
    # device 0: head 0 + work 12 + tail 0 (its last W is a sink) = 12; device 1: its first F waits for F(0, 0)
    # (2) and the hop (1), so 3 + work 10 + tail 0 = 13; trivial bound: critical path
    # F(0,0) 2 + 1 + F(1,0) 1 + B(1,0) 2 + 1 + B(0,0) 3 + W(0,0) 1 = 11, work / devices = 22 / 2 = 11
    pipe = two_devices()
    assert unroll_actions(pipe).instance.trivial_lower_bound_tick() == 11
    assert pipeline_device_bound(pipe) == (13, (12, 13))
    assert prepare_pipeline(pipe, constructive=False).trivial_tick == 13


def serial_warm_start(num_microbatches: int) -> dict[str, int]:
    """F, B, W of micro-batch k at 5k, 5k + 2, 5k + 4: the B that starts nearest to F(0, m) (at 5m) is B(0, m)
    (2 ticks after it; B(0, m - 1) is 3 before)."""
    out: dict[str, int] = {}
    for k in range(num_microbatches):
        out |= {f"0F{k}": 5 * k, f"0B{k}": 5 * k + 2, f"0W{k}": 5 * k + 4}
    return out


def test_the_default_pair_window_keeps_two_microbatches_either_side_of_the_nearest_backward():
    # one stage: F(0, m) is an ancestor of B(0, k) only for k = m.  The window around the nearest B (k = m) keeps
    # k in [m - 2, m + 2] less m: 2, 3, 4, 4, 3, 2 backwards for m = 0..5, 18 pairs, each alone (F&B: round(0.5 x 4)
    # = 2 < 4) and full (F&BW: round(0.5 x 5) = 2 < 5): 36.  A window of 3 gives 3 + 4 + 5 + 5 + 4 + 3 = 24, so 48;
    # no window 6 x 5 x 2 = 60.
    pipe = one_stage(6)
    warm = serial_warm_start(6)
    setup = prepare_pipeline(pipe, warm_start=warm)
    got = sorted((setup.tasks.actions[q.f].microbatch, setup.tasks.actions[q.b].microbatch, q.w is not None)
                 for q in setup.pairs)
    want = sorted((m, k, full) for m in range(6) for k in range(max(0, m - 2), min(6, m + 3)) if k != m
                  for full in (False, True))
    assert len(want) == 36
    assert got == want
    assert len(prepare_pipeline(pipe, warm_start=warm, pair_window=3).pairs) == 48
    assert len(prepare_pipeline(pipe, warm_start=warm, pair_window=None).pairs) == 60


def test_the_pipeline_solve_keeps_microbatch_order_by_default():
    # family 5 is on unless a caller turns it off, in the model builder and in the solve
    assert inspect.signature(solve_pipeline).parameters["fifo"].default is True
    pipe = two_devices()
    setup = prepare_pipeline(pipe, constructive=False)
    builder = get_backend("cpsat").new_builder()
    build_pipeline_model(setup.tasks, pipe, builder, setup.device, [], setup.cap, horizon=setup.horizon,
                         lower_bound=0)
    # 2 stages x (F, B, W) x 1 step between the 2 micro-batches
    assert builder.family_counts()["fifo"] == 6


@pytest.mark.parametrize(("activation", "cumulatives"), [(0, 0), (3, 1)])
def test_the_memory_family_has_a_cumulative_only_where_activations_are_held(activation, cumulatives):
    pipe = one_stage(2, activation_bytes=activation)
    setup = prepare_pipeline(pipe, constructive=False)
    builder = get_backend("cpsat").new_builder()
    build_pipeline_model(setup.tasks, pipe, builder, setup.device, [], setup.cap, horizon=setup.horizon,
                         lower_bound=0, fifo=False)
    assert builder.family_counts().get("memory", 0) == cumulatives


def pair(tasks, f_mb: int, b_mb: int) -> PairCandidate:
    fa, ba = Action(0, F, f_mb), Action(0, B, b_mb)
    return PairCandidate(tasks.index[fa], tasks.index[ba], None, 2, OverlapAction(fa, ba))


@pytest.mark.parametrize(("pairs", "bound"), [(((0, 1), (2, 1)), 13), (((0, 1), (0, 2)), 13), (((0, 1),), 13),
                                              (((0, 1), (2, 0)), 11)])
def test_the_pair_bound_saves_the_smaller_of_the_forwards_and_the_backwards_savings(pairs, bound):
    # one stage, 3 micro-batches on one device: work 3 x (2 + 2 + 1) = 15, every F a source and every W a sink, so
    # the device bound is the work.  Each F&B pair lasts 2 and saves 2 + 2 - 2 = 2.  F0&B1 and F2&B1: forwards
    # save 2 + 2 = 4, backwards 2 (B1 counted once), 15 - 2 = 13; F0&B1 and F0&B2: 2 and 4, 13; F0&B1 alone 13;
    # F0&B1 and F2&B0: 4 and 4, 11.  The critical path (at most 2 + 2 + 1) stays below.
    tasks = unroll_actions(one_stage(3))
    inst = tasks.instance
    assert pair_bound(inst, [0] * inst.num_tasks, [pair(tasks, f, b) for f, b in pairs]) == bound


def test_a_device_without_stages_fits_a_zero_cap():
    # stage 0 (parameters 5, activation 4) on device 0, nothing on device 1: device 0 needs 9, device 1 nothing
    pipe = TrainingPipeline((StageCost(1, 1, 1, activation_bytes=4, param_bytes=5),), 1, 2, (0,), ((0,),))
    check_fits(pipe, [9, 0])
    with pytest.raises(InfeasibleError, match=r"device 0: parameters \(5\) plus one micro-batch's activation \(4\) "
                                              r"need 9, 1 more than its memory cap 8"):
        check_fits(pipe, [8, 0])
