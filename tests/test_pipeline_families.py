"""One instance per constraint family of `formulations/pipeline.py`, built so that the family is the only thing
between the solver and a wrong answer (so a dropped family fails a test).  The model is built and solved directly
(`build_pipeline_model`: no warm start, lower bound 0), on every backend; every schedule read back is checked by
hand (durations, pairs, precedence with delays, one task at a time per device) and each expected optimum is
derived in the comment above its test, with what the solver would return without the family.

On MILP backends the memory family becomes the documented safe bound (every activation that may be held on a
device fits at once), so a cap that binds only over time is infeasible there; that is asserted too.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import pytest
from family_fixtures import BACKENDS

from formulations import pipeline as pipeline_module
from formulations.backends import get_backend
from formulations.model_api import SolveParams, SolveStatus
from formulations.pipeline import (
    PipelineTimes,
    build_pipeline_model,
    device_bound_tick,
    hint_pipeline,
    pair_candidates,
    solve_pipeline,
    split_start_times,
)
from formulations.pipeline_bounds import pair_bound
from planner.compare.pipelines import simulate_baseline
from planner.errors import InfeasibleError
from planner.pipeline.generators import gpipe
from planner.pipeline.registry import Scales, UnitCosts
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import TrainingPipeline, uniform_pipeline, unroll_actions
from planner.schedule.actions import Action, ActionKind

F, B, W = ActionKind.F, ActionKind.B, ActionKind.W
CPSAT_ONLY = ("cpsat",)
MILP = tuple(b for b in BACKENDS if b != "cpsat")


@dataclass(frozen=True)
class PipeSol:
    makespan: int
    start: dict[str, int]
    end: dict[str, int]
    pairs: tuple[str, ...]


def solve_pipe(pipe: TrainingPipeline, backend: str, *, cap=None, fifo: bool = True, pairs: bool = False,
               fix=None) -> PipeSol | None:
    """Build the pipeline model and solve it to optimality (None: infeasible); check the schedule by hand.

    `fix(model, builder)` may add constraints before the solve."""
    tasks = unroll_actions(pipe)
    inst = tasks.instance
    device = [next(d for d in range(inst.num_devices) if inst.eligible(t, d)) for t in range(inst.num_tasks)]
    dur = [int(inst.duration_tick[t, device[t]]) for t in range(inst.num_tasks)]
    cand = pair_candidates(pipe, tasks, device) if pairs else []
    horizon = sum(dur) + sum(int(c) for c in inst.edge_fixed_tick)
    builder = get_backend(backend).new_builder()
    caps = [2**40] * pipe.num_devices if cap is None else list(cap)
    m = build_pipeline_model(tasks, pipe, builder, device, cand, caps, horizon=horizon, lower_bound=0, fifo=fifo)
    if fix is not None:
        fix(m, builder)
    # a ceiling, not a speed claim: CBC needs ~10 s on the pair models on a quiet machine, far more under load
    res = builder.solve(SolveParams(time_limit_s=180, threads=1, seed=0))
    if not res.has_solution:
        assert res.status is SolveStatus.INFEASIBLE, res.status
        return None
    assert res.status is SolveStatus.OPTIMAL, res.status
    start = [res.int_value(s) for s in m.start]
    end = [start[t] + dur[t] for t in range(inst.num_tasks)]
    chosen = [q for q, x in zip(cand, m.chosen, strict=True) if res.bool_value(x)]
    together: dict[int, int] = {}  # task -> index of the chosen pair it runs in
    for i, q in enumerate(chosen):
        for t in q.tasks:
            assert t not in together, f"{inst.task_names[t]} runs in two pairs"
            together[t] = i
            assert start[t] == start[q.f], "a pair's halves start together"
            end[t] = start[q.f] + q.tick
    for e, (u, v) in enumerate(inst.edges):
        if u in together and together.get(v) == together[u]:
            continue  # B -> W inside one full pair: one task
        assert start[v] >= end[u] + inst.comm(e, device[u], device[v]), (inst.task_names[u], inst.task_names[v])
    # one task (or pair) at a time on every stream
    runs = {}
    for t in range(inst.num_tasks):
        key = ("pair", together[t]) if t in together else ("task", t)
        runs[key] = (device[t], start[t], end[t])
    for d in range(inst.num_devices):
        spans = sorted((s, e) for dd, s, e in runs.values() if dd == d)
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:])), (d, spans)
    makespan = res.int_value(m.makespan)
    assert makespan == max(end) - 0
    names = inst.task_names
    return PipeSol(makespan, {names[t]: start[t] for t in range(inst.num_tasks)},
                   {names[t]: end[t] for t in range(inst.num_tasks)}, tuple(q.name for q in chosen))


def _with_costs(pipe: TrainingPipeline, **changes) -> TrainingPipeline:
    return dataclasses.replace(pipe, stages=tuple(dataclasses.replace(c, **changes) for c in pipe.stages))


# 1. prec and 4. makespan.  Two stages on two devices, one micro-batch, F = B = W = 1, hops of 3 ticks:
# 0F0 [0,1), 1F0 [4,5), 1B0 [5,6), 0B0 [9,10), 0W0 [10,11): makespan 11.  Without prec every task starts at 0 and
# only one-at-a-time per device remains: 3.  Without makespan C drops to its lower bound 0.
@pytest.mark.parametrize("backend", BACKENDS)
def test_prec_and_makespan_hops_delay_the_chain(backend: str) -> None:
    sol = solve_pipe(uniform_pipeline(2, 1, comm_tick=3), backend)
    assert sol is not None and sol.makespan == 11
    assert (sol.start["1F0"], sol.start["0B0"], sol.end["0W0"]) == (4, 9, 11)


# 2. device.  Two stages on ONE device, one micro-batch, unit tasks: six tasks one after the other, makespan 6.
# Without the no-overlap family 1W0 runs beside 0B0 and the chain 0F0 1F0 1B0 0B0 0W0 gives 5.
@pytest.mark.parametrize("backend", BACKENDS)
def test_device_one_task_at_a_time(backend: str) -> None:
    sol = solve_pipe(uniform_pipeline(2, 1, num_devices=1), backend)
    assert sol is not None and sol.makespan == 6


# 3. memory.  Two stages on two devices, two micro-batches, unit tasks, activation 1 byte per micro-batch.
# Unbounded: 7 (device 1 runs six tasks from tick 1: 1F0 1B0 1F1 1B1 1W0 1W1, device 0 fits around it).
# Cap 1 byte per device: 0F1 may only start once 0F0's activation is freed, at 0W0's end; each micro-batch then
# runs its whole chain 0F 1F 1B 0B 0W (5 ticks) alone: 10.  If B frees the whole activation
# (activation_freed_by_b_bytes = 1) 0F1 may start at 0B0's end (4) and 0W0 fills device 0's wait: 9.
# Without the family every cap gives 7; a family that frees at B what W frees (or the reverse) gives 9 for 10 or
# 10 for 9.  MILP backends bound the family by the sum of every activation on a device (2 > 1): infeasible.
@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_cap_serializes_micro_batches(backend: str) -> None:
    pipe = uniform_pipeline(2, 2)
    assert solve_pipe(pipe, backend).makespan == 7
    assert solve_pipe(pipe, backend, cap=[2, 2]).makespan == 7
    held_to_w = solve_pipe(pipe, backend, cap=[1, 1])
    freed_at_b = solve_pipe(_with_costs(pipe, activation_freed_by_b_bytes=1), backend, cap=[1, 1])
    if backend in MILP:
        assert held_to_w is None and freed_at_b is None
        return
    assert held_to_w is not None and held_to_w.makespan == 10
    assert held_to_w.start["0F1"] >= held_to_w.end["0W0"]
    assert freed_at_b is not None and freed_at_b.makespan == 9
    assert freed_at_b.start["0F1"] >= freed_at_b.end["0B0"]


# 3'. memory with parameters: the device's parameters take their part of the cap.  Same pipeline, 5 bytes of
# parameters per stage and a cap of 6: one activation byte is left, as with cap 1 above: 10 (CP-SAT); a cap of 7
# leaves 2: 7.
@pytest.mark.parametrize("backend", CPSAT_ONLY)
def test_memory_parameters_take_their_part_of_the_cap(backend: str) -> None:
    pipe = _with_costs(uniform_pipeline(2, 2), param_bytes=5)
    assert solve_pipe(pipe, backend, cap=[6, 6]).makespan == 10
    assert solve_pipe(pipe, backend, cap=[7, 7]).makespan == 7


# 5. fifo.  One stage, three micro-batches, unit tasks.  Forcing micro-batch k+1 of one kind to end before
# micro-batch k of that kind starts is infeasible with fifo and feasible without it (the control): every kind,
# every adjacent pair, so a family that skips the last pair or one kind fails.
@pytest.mark.parametrize("backend", BACKENDS)
def test_fifo_micro_batches_run_in_order(backend: str) -> None:
    pipe = uniform_pipeline(1, 3)
    for kind in (F, B, W):
        for k in range(2):
            def swap(m, builder, kind=kind, k=k):
                a, b = m.tasks.task(0, kind, k), m.tasks.task(0, kind, k + 1)
                builder.add(m.start[a] - m.end[b] >= 0, "swap")

            assert solve_pipe(pipe, backend, fix=swap) is None, (kind, k)
            assert solve_pipe(pipe, backend, fix=swap, fifo=False) is not None, (kind, k)
    assert solve_pipe(pipe, backend).makespan == 9


# 6. pair_one, alone, pair (and 1.'s B -> W edge inside a full pair).  Two stages on ONE device, two micro-batches,
# F = B = 1, W = 2, X = 0.5: an F&B pair lasts round(0.5 * 2) = 1 (saves 1), an F&BW pair round(0.5 * 4) = 2
# (saves 2).  Serially the 12 tasks take 16.  Only F(., 1) & B(., 0) can pair (the other way round the B waits
# for the F it starts with), so at most two pairs: [0F1 & 1BW0], [1F1 & 0BW0] after 0F0, 1F0, then 1B1, 0B1,
# 1W1, 0W1: 1 + 1 + 2 + 2 + 1 + 1 + 2 + 2 = 12, and 16 - 2 x 2 is the bound.  Without pair_one a half may run
# nowhere; without pair its halves need not sit in the pair; a B -> W row that also binds inside the full pair
# leaves only F&B pairs: 14.
@pytest.mark.parametrize("backend", BACKENDS)
def test_pairs_run_as_one_task(backend: str) -> None:
    pipe = uniform_pipeline(2, 2, num_devices=1, weight_grad_tick=2, fb_overlap=0.5)
    assert solve_pipe(pipe, backend).makespan == 16  # no candidates: every task alone
    sol = solve_pipe(pipe, backend, pairs=True)
    assert sol is not None and sol.makespan == 12
    assert sorted(sol.pairs) == ["0F1&0BW0", "1F1&1BW0"] or sorted(sol.pairs) == ["0F1&1BW0", "1F1&0BW0"]


# 6'. alone.  The same pipeline with every candidate pair forced off (x_q = 0): every task runs alone and lasts
# its own duration, 16 again.  Without pair_one / alone a task in some candidate pair could end early.
@pytest.mark.parametrize("backend", BACKENDS)
def test_alone_a_task_outside_every_pair_lasts_its_duration(backend: str) -> None:
    pipe = uniform_pipeline(2, 2, num_devices=1, weight_grad_tick=2, fb_overlap=0.5)

    def no_pairs(m, builder):
        for i, x in enumerate(m.chosen):
            builder.add(x <= 0, f"off[q={i}]")

    sol = solve_pipe(pipe, backend, pairs=True, fix=no_pairs)
    assert sol is not None and sol.makespan == 16 and sol.pairs == ()



# A baseline's timeline as the formulation's warm start: every task of the split instance gets a start, and each
# overlapped pair of DualPipe (pairs gain at X = 0.5) is kept by name, at its forward's start.
def test_split_start_times_cover_every_task_and_keep_every_pair() -> None:
    c = UnitCosts(fb_overlap=0.5)
    dp = simulate_baseline("dualpipe", 2, 4, c, Scales.of(c))
    times = split_start_times(dp.pipeline, dp.timeline)
    assert times is not None
    split_names = set(unroll_actions(dp.pipeline).instance.task_names)
    assert split_names <= set(times)
    run_pairs = {p.task for p in dp.timeline.placements if "&" in p.task}
    assert run_pairs and {k for k in times if "&" in k} == run_pairs
    assert all(times[k] == times[str(k.split("&")[0])] for k in run_pairs)


# The same timeline read by a pipeline whose pairs do not gain (no fb_overlap): its pairs are shorter than their
# halves, which the split model cannot hold: no warm start (None).  A pair-free baseline (GPipe) always splits:
# BW at t -> B at t, W at t + B.
def test_split_start_times_refuses_pairs_shorter_than_their_halves() -> None:
    c = UnitCosts(fb_overlap=0.5)
    dp = simulate_baseline("dualpipe", 2, 4, c, Scales.of(c))
    assert split_start_times(dataclasses.replace(dp.pipeline, fb_overlap=None), dp.timeline) is None
    gp = simulate_baseline("gpipe", 2, 2, UnitCosts(b=2.0), Scales.of(UnitCosts(b=2.0)))
    times = split_start_times(gp.pipeline, gp.timeline)
    bw = {p.task: p.start_tick for p in gp.timeline.placements if "BW" in p.task}
    b_tick = [int(st.input_grad_tick) for st in gp.pipeline.stages]
    assert times is not None and len(bw) == 4 and b_tick[0] > 0
    assert all(times[k.replace("BW", "B")] == t and times[k.replace("BW", "W")] == t + b_tick[int(k[0])]
               for k, t in bw.items())


# Warm starts: `hint_pipeline` hints every variable, and the hinted values are one consistent solution.  The
# optimum of the pairs instance (12 ticks, two F&BW pairs) is read back, hinted into a fresh model, and every
# hint turned into an equality: still feasible, makespan 12.
def test_hint_is_one_consistent_solution() -> None:
    pipe = uniform_pipeline(2, 2, num_devices=1, weight_grad_tick=2, fb_overlap=0.5)
    tasks = unroll_actions(pipe)
    inst = tasks.instance
    device = [0] * inst.num_tasks
    cand = pair_candidates(pipe, tasks, device)

    def build():
        b = get_backend("cpsat").new_builder()
        return b, build_pipeline_model(tasks, pipe, b, device, cand, [2**40], horizon=16, lower_bound=0)

    b1, m1 = build()
    res = b1.solve(SolveParams(time_limit_s=30, threads=1, seed=0))
    times = PipelineTimes(tuple(res.int_value(s) for s in m1.start),
                          tuple(i for i, x in enumerate(m1.chosen) if res.bool_value(x)))
    b2, m2 = build()
    hints: dict[int, int] = {}
    b2.hint = lambda var, value: hints.__setitem__(var.index, value)  # record instead of hinting
    hint_pipeline(m2, times)
    by_index = {v.index: v for v in b2._vars}
    assert set(hints) == set(by_index)
    for idx, value in hints.items():
        b2.add(by_index[idx] + 0 == value, f"fixed[{idx}]")
    res2 = b2.solve(SolveParams(time_limit_s=30, threads=1, seed=0))
    assert res2.status is SolveStatus.OPTIMAL and res2.int_value(m2.makespan) == 12 == res.int_value(m1.makespan)


# The device bound (module docstring): per device, earliest head + its work + shortest tail.  Two stages on two
# devices, one micro-batch, unit tasks, 3-tick hops: d0 runs 0F0 (head 0), 0B0, 0W0 (tail 0): 0 + 3 + 0 = 3; d1's
# earliest task 1F0 has head 1 + 3 = 4, work 3, 1W0 has tail 0: 7.  The bound is 7 (the critical path is 11).
def test_device_bound_is_head_plus_work_plus_tail() -> None:
    tasks = unroll_actions(uniform_pipeline(2, 1, comm_tick=3))
    inst = tasks.instance
    device = [next(d for d in range(inst.num_devices) if inst.eligible(t, d)) for t in range(inst.num_tasks)]
    assert device_bound_tick(inst, device) == 7
    # with the work of d1 given as 10 instead: 4 + 10 + 0
    assert device_bound_tick(inst, device, work=[3, 10]) == 14


# The bound with pairs (module docstring): the pairs instance's 16 ticks of work less, per device, the smaller of
# the best savings summed over its forwards (4 x 2) and over its backwards (4 x 2): 8; the critical path with
# pair-shortened durations is 6: bound 8.
def test_pair_bound_subtracts_the_best_savings() -> None:
    pipe = uniform_pipeline(2, 2, num_devices=1, weight_grad_tick=2, fb_overlap=0.5)
    tasks = unroll_actions(pipe)
    device = [0] * tasks.instance.num_tasks
    assert pair_bound(tasks.instance, device, pair_candidates(pipe, tasks, device)) == 8


# A cap below the parameters plus the largest single activation on a device is refused before solving: a V on one
# device hosts stage 0 (activation 1) and stage 1 (activation 5): a cap of 4 fits the smaller, not the larger.
def test_a_cap_below_one_micro_batch_is_refused_naming_the_device() -> None:
    pipe = uniform_pipeline(2, 1, num_devices=1)
    pipe = dataclasses.replace(pipe, stages=(pipe.stages[0], dataclasses.replace(pipe.stages[1], activation_bytes=5)))
    with pytest.raises(InfeasibleError, match=r"device 0: parameters \(0\) plus one micro-batch's activation \(5\)"):
        solve_pipeline(pipe, 4, time_limit_s=5, threads=1)


# The bound with pairs where the critical path decides: two stages on two devices, two micro-batches, 5-tick hops.
# 0F0 -> (5) -> 1F0 -> 1B0 -> (5) -> 0B0 -> 0W0 is 1 + 5 + 1 + 1 + 5 + 1 + 2 = 16 (no pair shortens a task on it:
# F&B takes 1 tick, F&BW 2); each device's work is at most 8 and d1's head 6, so the bound is the critical path.
def test_pair_bound_takes_the_critical_path_with_pair_durations() -> None:
    pipe = uniform_pipeline(2, 2, num_devices=2, weight_grad_tick=2, fb_overlap=0.5, comm_tick=5)
    tasks = unroll_actions(pipe)
    inst = tasks.instance
    device = [next(d for d in range(inst.num_devices) if inst.eligible(t, d)) for t in range(inst.num_tasks)]
    pairs = pair_candidates(pipe, tasks, device)
    assert pairs
    assert pair_bound(inst, device, pairs) == 16
    # one micro-batch: no pair, each F is an ancestor of every B on its device
    one = uniform_pipeline(2, 1, num_devices=2, weight_grad_tick=2, fb_overlap=0.5, comm_tick=1)
    tasks1 = unroll_actions(one)
    dev1 = [next(d for d in range(tasks1.instance.num_devices) if tasks1.instance.eligible(t, d))
            for t in range(tasks1.instance.num_tasks)]
    assert pair_candidates(one, tasks1, dev1) == []


def _pairs_by_microbatch(tasks, cands) -> set[tuple[int, int, int, int]]:
    """(forward stage, forward micro-batch, backward stage, backward micro-batch) of each candidate pair."""
    out = set()
    for q in cands:
        fa, ba = tasks.actions[q.f], tasks.actions[q.b]
        out.add((fa.stage, fa.microbatch, ba.stage, ba.microbatch))
    return out


# Candidate pairs (module docstring): a forward pairs with a backward on its device that is neither its ancestor
# nor its descendant; with a warm start, only with the `pair_window` micro-batches around the backward that
# starts nearest to it.  One stage, six micro-batches: F(m) at 10 m, B(k) at 10 k + 3, so B(m) is the nearest
# backward of F(m) - and is its own descendant, hence never a pair.
def test_pair_candidates_window_around_the_nearest_backward() -> None:
    nmb = 6
    pipe = uniform_pipeline(1, nmb, num_devices=1, weight_grad_tick=2, fb_overlap=0.5)
    tasks = unroll_actions(pipe)
    device = [0] * tasks.instance.num_tasks
    offset = {F: 0, B: 3, W: 6}
    warm = {a: 10 * a.microbatch + offset[a.kind] for a in tasks.actions if isinstance(a, Action)}
    every = {(0, m, 0, k) for m in range(nmb) for k in range(nmb) if k != m}
    assert _pairs_by_microbatch(tasks, pair_candidates(pipe, tasks, device)) == every
    assert _pairs_by_microbatch(tasks, pair_candidates(pipe, tasks, device, warm, pair_window=None)) == every
    for window in (0, 1, 2):
        got = _pairs_by_microbatch(tasks, pair_candidates(pipe, tasks, device, warm, pair_window=window))
        assert got == {(0, m, 0, k) for (_, m, _, k) in every if abs(k - m) <= window}, window
    # the nearest backward is the earliest one on a tie: B(k) at 10 k + 5 ties B(m - 1) and B(m) for F(m)
    warm_tie = {a: 10 * a.microbatch + (5 if a.kind is B else offset[a.kind]) for a in warm}
    got = _pairs_by_microbatch(tasks, pair_candidates(pipe, tasks, device, warm_tie, pair_window=1))
    near = [max(0, m - 1) for m in range(nmb)]
    assert got == {(0, m, 0, k) for (_, m, _, k) in every if abs(k - near[m]) <= 1}


# Two stages on one device: F(s, m) is an ancestor of B(s2, m) for both s2 (0F0 -> 1F0 -> 1B0 -> 0B0), of no other
# backward, and no backward is an ancestor of a forward: every pair with another micro-batch is a candidate.
def test_pair_candidates_skip_exactly_the_ancestors() -> None:
    nmb = 3
    pipe = uniform_pipeline(2, nmb, num_devices=1, weight_grad_tick=2, fb_overlap=0.5)
    tasks = unroll_actions(pipe)
    device = [0] * tasks.instance.num_tasks
    got = _pairs_by_microbatch(tasks, pair_candidates(pipe, tasks, device))
    assert got == {(s, m, s2, k) for s in range(2) for s2 in range(2) for m in range(nmb) for k in range(nmb)
                   if k != m}


# The plan's makespan is the span from the first start to the last end: a solution that starts later than tick 0
# (a time-limited solve may return one; an optimal one never does) reports the same makespan, shifted.
def test_a_late_first_start_does_not_lengthen_the_makespan(monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = uniform_pipeline(2, 2, num_devices=2)
    before_s = time.monotonic()
    base = solve_pipeline(pipe, None, time_limit_s=10, threads=1)
    # an optimal schedule starts at tick 0 (every task follows 0F0), and the reported solve time is this call's
    assert min(x.start_tick for x in base.plan.placements) == 0
    assert 0 <= base.plan.solve_time_s <= base.solve_time_s <= time.monotonic() - before_s
    real = pipeline_module.solve_formulation

    def shifted(*args, **kwargs):
        solved = real(*args, **kwargs)
        times = solved.solution
        return dataclasses.replace(solved, solution=dataclasses.replace(times, start=tuple(s + 3 for s in
                                                                                        times.start)))

    monkeypatch.setattr(pipeline_module, "solve_formulation", shifted)
    late = solve_pipeline(pipe, None, time_limit_s=10, threads=1)
    assert min(x.start_tick for x in late.plan.placements) == 3
    assert late.plan.makespan_tick == base.plan.makespan_tick


# The formulation's value of a schedule is its span too: the same schedule 3 ticks later has the same value.
def test_formulation_value_is_the_span() -> None:
    pipe = uniform_pipeline(2, 2, num_devices=2)
    base = solve_pipeline(pipe, None, time_limit_s=10, threads=1)
    tasks = unroll_actions(pipe)
    device = [next(d for d in range(tasks.instance.num_devices) if tasks.instance.eligible(t, d))
              for t in range(tasks.instance.num_tasks)]
    form = pipeline_module.PipelineFormulation(tasks, pipe, device, [], [2**40] * 2, horizon=100, lower_bound=0,
                                               fifo=True)
    start = {p.task: p.start_tick for p in base.plan.placements}
    times = PipelineTimes(tuple(start[n] for n in tasks.instance.task_names))
    late = PipelineTimes(tuple(s + 3 for s in times.start))
    assert form.value_tick(times) == form.value_tick(late) == base.plan.makespan_tick


# A cap of exactly the parameters plus one micro-batch's activation is enough (the refusal is for less): two
# stages on two devices, one micro-batch, activation 1 each, cap 1.
def test_a_cap_of_exactly_one_micro_batch_is_accepted() -> None:
    sol = solve_pipeline(uniform_pipeline(2, 1, num_devices=2), 1, time_limit_s=10, threads=1)
    assert sol.plan.makespan_tick == 5


# A pair that gains nothing is dropped and the search goes on: F&B takes 2 ticks = its halves (dropped), F&BW 4 of
# 6 (kept): one stage, three micro-batches, so all six non-ancestor (F, B) pairs come as F&BW only.
def test_pairs_without_gain_are_skipped_not_the_rest() -> None:
    pipe = uniform_pipeline(1, 3, num_devices=1, weight_grad_tick=4, fb_overlap=0.75)
    tasks = unroll_actions(pipe)
    cands = pair_candidates(pipe, tasks, [0] * tasks.instance.num_tasks)
    assert pipe.pair_tick(0, 0, False) == 2 and pipe.pair_tick(0, 0, True) == 4
    assert len(cands) == 6 and all(q.w is not None and q.tick == 4 for q in cands)


# The default candidate window is 2 micro-batches, in `pair_candidates` and in `solve_pipeline` (which passes its
# own default on).  Same instance as the window test: F(m) at 10 m, B(k) at 10 k + 3, so the window w around B(m)
# keeps exactly the pairs with |k - m| <= w, and windows 2 and 3 differ (e.g. F0 with B3).
def test_the_default_pair_window_is_two(monkeypatch: pytest.MonkeyPatch) -> None:
    nmb = 6
    pipe = uniform_pipeline(1, nmb, num_devices=1, weight_grad_tick=2, fb_overlap=0.5)
    tasks = unroll_actions(pipe)
    device = [0] * tasks.instance.num_tasks
    offset = {F: 0, B: 3, W: 6}
    warm = {a: 10 * a.microbatch + offset[a.kind] for a in tasks.actions if isinstance(a, Action)}
    got = _pairs_by_microbatch(tasks, pair_candidates(pipe, tasks, device, warm))
    assert got == {(0, m, 0, k) for m in range(nmb) for k in range(nmb) if k != m and abs(k - m) <= 2}
    seen: list[object] = []
    real = pipeline_module.pair_candidates

    def record(*args, **kwargs):
        seen.append(args[4] if len(args) > 4 else kwargs.get("pair_window", "default"))
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline_module, "pair_candidates", record)
    solve_pipeline(uniform_pipeline(1, 2, num_devices=1), None, time_limit_s=10, threads=1)
    assert seen == [2]


# Start bounds (module docstring: S_t in [0, H]): a task in no candidate pair must end by the horizon, so its start
# is at most H - d_t; a task in some pair may start as late as H (its pair may be shorter than the task).  One stage,
# two micro-batches, W = 2, X = 0.5, and one candidate kept: F1 with B0 and W0; F0, B1, W1 are in no pair.
# Horizon 20.
def test_start_bounds_leave_room_for_pairs_only_to_paired_tasks() -> None:
    pipe = uniform_pipeline(1, 2, num_devices=1, weight_grad_tick=2, fb_overlap=0.5)
    tasks = unroll_actions(pipe)
    inst = tasks.instance
    device = [0] * inst.num_tasks
    cand = [q for q in pair_candidates(pipe, tasks, device) if q.name == "0F1&0BW0"]
    paired = {inst.task_names[t] for q in cand for t in q.tasks}
    assert paired == {"0F1", "0B0", "0W0"}
    m = build_pipeline_model(tasks, pipe, get_backend("cpsat").new_builder(), device, cand, [2**40], horizon=20,
                             lower_bound=0)
    ub = {inst.task_names[t]: m.start[t].ub for t in range(inst.num_tasks)}
    assert ub == {"0F0": 19, "0F1": 20, "0B0": 20, "0B1": 19, "0W0": 20, "0W1": 18}


# The device bound's tail: two stages, one micro-batch, F = B = 1, W = 3, no communication delay, with 0F0 alone
# on device 0 and every other task on device 1 (a device list of our choosing).  0F0's tail is the longest path out
# of it, 1F0 -> 1B0 -> 0B0 -> 0W0: 1 + 1 + 1 + 3 = 6, so d0 gives head 0 + work 1 + tail 6 = 7 (1 without its
# tail); d1 gives head 1 + work 9 + tail 0 = 10.  With d1's work given as 0 (1 + 0 + 0), d0's 7 decides.  The
# durations are passed (`dur`): the instance has none for a stage's task on the other device.
def test_device_bound_adds_the_shortest_tail() -> None:
    tasks = unroll_actions(uniform_pipeline(2, 1, num_devices=2, weight_grad_tick=3))
    inst = tasks.instance
    device = [0 if inst.task_names[t] == "0F0" else 1 for t in range(inst.num_tasks)]
    dur = [1 if inst.task_names[t][1] in "FB" else 3 for t in range(inst.num_tasks)]
    assert device_bound_tick(inst, device, dur=dur) == 10
    assert device_bound_tick(inst, device, dur=dur, work=[1, 0]) == 7


# A pair the warm start runs stays a candidate even outside the window: F(m) at 10 m, B(k) at 10 k + 3 (window 0
# keeps no pair: B(m) is F(m)'s descendant), and the warm start runs F1 with B0 as F&B at tick 10.
def test_the_warm_starts_own_pairs_are_always_candidates() -> None:
    pipe = uniform_pipeline(1, 3, num_devices=1, weight_grad_tick=2, fb_overlap=0.5)
    tasks = unroll_actions(pipe)
    device = [0] * tasks.instance.num_tasks
    offset = {F: 0, B: 3, W: 6}
    warm = {a: 10 * a.microbatch + offset[a.kind] for a in tasks.actions if isinstance(a, Action)}
    assert pair_candidates(pipe, tasks, device, warm, pair_window=0) == []
    warm[pipeline_module.OverlapAction(Action(0, F, 1), Action(0, B, 0))] = 10
    got = pair_candidates(pipe, tasks, device, warm, pair_window=0)
    assert [q.name for q in got] == ["0F1&0B0"]


# Sends on the communication streams (device p and above) keep their own start; compute placements are split.
def test_split_start_times_keep_the_sends_on_the_communication_streams() -> None:
    pipe = uniform_pipeline(1, 1)
    pipe = dataclasses.replace(pipe, stages=tuple(dataclasses.replace(c, a2a_tick=1) for c in pipe.stages))
    _, tl = simulate_pipeline(pipe, gpipe(1, 1))
    times = split_start_times(pipe, tl)
    assert times is not None
    comm = {p.task: p.start_tick for p in tl.placements if p.device >= pipe.num_devices}
    assert comm and all(times[k] == v for k, v in comm.items())
