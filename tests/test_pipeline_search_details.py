"""The pipeline search (`planner.search.pipeline`) rule by rule on small pipelines: which tasks each neighbourhood
frees (drawn the way the module says, from the same seeded generator), the critical chain of a GPipe schedule, how
the search's loop stops, counts its steps and fits its neighbourhood's size, the replay it starts from, the step
records and the default tuning."""

from __future__ import annotations

import dataclasses
import math
import random
import time
import types

import pytest

import formulations.pipeline_step as step_module
from formulations.pipeline import PipelineTimes, prepare_pipeline, split_start_times
from planner.compare.pipelines import simulate_baseline
from planner.pipeline.generators import gpipe
from planner.pipeline.registry import Scales, UnitCosts
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import uniform_pipeline
from planner.schedule.plan import PlanStatus
from planner.search.pipeline.lns import improve_pipeline, replayed_tick
from planner.search.pipeline.neighbourhoods import KINDS, _nearest, critical_chain, neighbourhood
from planner.search.pipeline.policy import (
    HalfSearchPolicy,
    PeriodicPolicy,
    PipelineLnsPolicy,
    PipelineSearchPolicy,
)
from planner.search.pipeline.results import LnsResult, LnsStep


def _gpipe_2x2():
    """Two stages, two micro-batches, F = B = W = 1, GPipe's order: makespan 9 (8 replayed)."""
    pipe = uniform_pipeline(2, 2)
    _, tl = simulate_pipeline(pipe, gpipe(2, 2))
    setup = prepare_pipeline(pipe, warm_start=split_start_times(pipe, tl))
    assert setup.known is not None and setup.makespan_tick(setup.known) == 9
    return setup


@pytest.fixture(scope="module")
def wide():
    """Four stages, eight micro-batches: 96 tasks, more than a first neighbourhood."""
    setup = prepare_pipeline(uniform_pipeline(4, 8))
    assert setup.known is not None and setup.tasks.instance.num_tasks == 96
    return setup


# ----------------------------------------------------------------------------------------------- neighbourhoods
def test_nearest_takes_the_closest_starts_ties_by_task() -> None:
    start = [10, 4, 6, 5, 5, 0]
    assert _nearest(range(6), start, 5, 3) == {3, 4, 1}
    assert _nearest(range(6), start, 5, 4) == {3, 4, 1, 2}
    assert _nearest([0, 5], start, 6, 1) == {0}  # 10 is 4 away, 0 is 6 away


def _names(setup, tasks) -> list[str]:
    names = setup.tasks.instance.task_names
    return [names[t] for t in tasks]


def test_the_critical_chain_of_gpipe_runs_back_from_the_last_end_through_tight_tasks() -> None:
    setup = _gpipe_2x2()
    assert _names(setup, critical_chain(setup, setup.known)) == ["0B0", "0W0", "0B1", "0W1"]


def test_the_critical_chain_follows_graph_edges_with_their_delays_and_stream_order() -> None:
    setup = _gpipe_2x2()
    names = setup.tasks.instance.task_names
    idx = {n: i for i, n in enumerate(names)}
    # pack device 0's backward work right after device 1's: every task now waits on the one before it
    start = list(setup.known.start)
    for name, at in (("0B0", 4), ("0W0", 5), ("0B1", 6), ("0W1", 7)):
        start[idx[name]] = at
    times = PipelineTimes(tuple(start))
    chain = critical_chain(setup, times)
    ends = setup.ends(times)
    assert ends[chain[-1]] == setup.makespan_tick(times) == 8
    assert _names(setup, chain)[0] == "0F0"
    for a, b in zip(chain, chain[1:]):
        delays = [setup.tasks.instance.comm(e, setup.device[a], setup.device[b])
                  for u, e in setup.tasks.instance.predecessors[b] if u == a]
        assert ends[a] + (delays[0] if delays else 0) == times.start[b]


def _draw(kind: str, setup, size: int, seed: int, policy: PipelineLnsPolicy | None = None):
    return neighbourhood(kind, setup, setup.known, size, random.Random(seed), policy or PipelineLnsPolicy())


def test_a_window_frees_the_tasks_starting_nearest_a_random_tick(wide) -> None:
    start = wide.known.start
    for seed in range(3):
        rng = random.Random(seed)
        tick = rng.randrange(max(wide.ends(wide.known)))
        assert _draw("window", wide, 10, seed) == _nearest(range(96), start, tick, 10)


def test_microbatches_frees_whole_consecutive_micro_batches(wide) -> None:
    acts = wide.tasks.actions
    for seed in range(4):
        first = random.Random(seed).randrange(8)
        chosen = {(first + k) % 8 for k in range(PipelineLnsPolicy().microbatches)}
        assert _draw("microbatches", wide, 96, seed) == {t for t in range(96) if acts[t].microbatch in chosen}
    two = dataclasses.replace(PipelineLnsPolicy(), microbatches=2)
    first = random.Random(0).randrange(8)
    assert {acts[t].microbatch for t in _draw("microbatches", wide, 96, 0, two)} == {first, (first + 1) % 8}


def test_devices_frees_two_adjacent_devices_wrapping_around(wide) -> None:
    for seed in range(6):
        d = random.Random(seed).randrange(4)
        pair = {d, (d + 1) % 4}
        assert _draw("devices", wide, 96, seed) == {t for t in range(96) if wide.device[t] in pair}
    assert _draw("devices", wide, 10, 0) <= {t for t in range(96)
                                              if wide.device[t] in {random.Random(0).randrange(4),
                                                                    (random.Random(0).randrange(4) + 1) % 4}}


def test_critical_frees_a_stretch_of_the_chain_and_the_tasks_around_its_middle(wide) -> None:
    chain = critical_chain(wide, wide.known)
    start = wide.known.start
    for size, seed in ((16, 0), (16, 5), (40, 1), (2, 3)):
        length = max(1, min(len(chain), size // PipelineLnsPolicy().critical_part))
        at = random.Random(seed).randrange(max(1, len(chain) - length + 1))
        stretch = chain[at:at + length]
        streams = {wide.device[t] for t in stretch}
        middle = start[stretch[len(stretch) // 2]]
        expected = set(stretch) | _nearest([t for t in range(96) if wide.device[t] in streams], start, middle,
                                           max(0, size - len(stretch)))
        assert _draw("critical", wide, size, seed) == expected


def test_the_ends_free_at_least_the_size_asked(wide) -> None:
    by_start = sorted(range(96), key=lambda t: (wide.known.start[t], t))
    share = math.ceil(PipelineLnsPolicy().ends_share * 96)
    assert _draw("head", wide, 5, 0) == set(by_start[:share])
    assert _draw("tail", wide, 5, 0) == set(by_start[-share:])
    assert _draw("head", wide, 30, 0) == set(by_start[:30]) and share < 30
    assert _draw("tail", wide, 30, 0) == set(by_start[-30:])


def test_a_chosen_pair_is_freed_whole() -> None:
    costs = UnitCosts(fb_overlap=0.5)
    row = simulate_baseline("dualpipe", 2, 4, costs, Scales.of(costs))
    assert row.pipeline is not None and row.timeline is not None
    setup = prepare_pipeline(row.pipeline, warm_start=split_start_times(row.pipeline, row.timeline))
    assert setup.known is not None and setup.known.pairs
    cut = 0
    for seed in range(12):
        rng = random.Random(seed)
        tick = random.Random(seed).randrange(max(setup.ends(setup.known)))
        nearest = _nearest(range(len(setup.known.start)), setup.known.start, tick, 3)
        free = neighbourhood("window", setup, setup.known, 3, rng)
        for i in setup.known.pairs:
            tasks = set(setup.pairs[i].tasks)
            assert tasks <= free or not tasks & free
            cut += bool(tasks & nearest) and not tasks <= nearest
        assert nearest <= free
    assert cut > 0  # some windows did cut a pair, which the closure made whole


# ------------------------------------------------------------------------------------------------------ the loop
def test_the_search_stops_at_its_step_count_and_reports_every_step(wide) -> None:
    seen: list[LnsStep] = []
    result = improve_pipeline(wide, wide.known, time_limit_s=60, max_steps=3, threads=1, kinds=("window",),
                              policy=dataclasses.replace(PipelineLnsPolicy(), step_s=0.1), progress=seen.append)
    assert [s.step for s in result.steps] == [0, 1, 2] and list(result.steps) == seen
    assert result.steps[0].size == 64  # the first neighbourhood: `initial_size` of the 96 tasks
    assert all(0 <= s.wall_s < 60 for s in result.steps)
    assert result.start_tick == wide.makespan_tick(wide.known) == result.steps[0].before_tick


def test_the_neighbourhood_grows_when_proven_and_shrinks_when_cut_without_a_gain(wide) -> None:
    policy = dataclasses.replace(PipelineLnsPolicy(), step_s=0.1)
    result = improve_pipeline(wide, wide.known, time_limit_s=60, max_steps=4, threads=1, kinds=("window",),
                              policy=policy)
    for a, b in zip(result.steps, result.steps[1:]):
        if a.proven:
            assert b.size == min(96, math.ceil(a.size * policy.grow))
        elif not a.gained:
            assert b.size == max(policy.min_size, int(a.size * policy.shrink))
        else:
            assert b.size == a.size


def test_a_search_without_gains_stops_after_its_stall_steps() -> None:
    setup = _gpipe_2x2()
    result = improve_pipeline(setup, setup.known, time_limit_s=60, stall_steps=2, threads=1)
    gained = [s.gained for s in result.steps]
    assert len(gained) >= 2 and gained[-2:] == [False, False]
    assert all(a or b for a, b in zip(gained[:-2], gained[1:-2]))  # no two gainless steps in a row before
    assert result.gains == sum(gained)


def test_a_search_at_its_bound_takes_no_step() -> None:
    setup = _gpipe_2x2()
    # GPipe's 9 replays to 8 before any step
    result = improve_pipeline(setup, setup.known, time_limit_s=60, bound_tick=8, max_steps=3)
    assert result.steps == () and result.best_tick == 8
    below = improve_pipeline(setup, setup.known, time_limit_s=60, bound_tick=7, max_steps=1, threads=1)
    assert len(below.steps) == 1


def test_a_search_without_time_for_a_step_returns_its_start_and_still_checks_the_backend() -> None:
    setup = _gpipe_2x2()
    result = improve_pipeline(setup, setup.known, time_limit_s=0.5)  # below `min_step_s`
    assert result.steps == () and (result.start_tick, result.best_tick, result.time_to_best_s) == (9, 8, 0.0)
    with pytest.raises(Exception, match="nope"):
        improve_pipeline(setup, setup.known, time_limit_s=0.0, backend="nope")


def test_the_search_starts_from_the_replay_of_its_start() -> None:
    setup = _gpipe_2x2()
    names = setup.tasks.instance.task_names
    late = list(setup.known.start)
    late[names.index("0W1")] += 3  # the last task three ticks late: the replay takes them back, and one more
    times = PipelineTimes(tuple(late), setup.known.pairs)
    assert setup.makespan_tick(times) == 12 and replayed_tick(setup, times) == replayed_tick(setup, setup.known) == 8
    result = improve_pipeline(setup, times, time_limit_s=60, max_steps=0)
    assert (result.start_tick, result.replayed_tick, result.best_tick) == (12, 8, 8)


def test_the_defaults_are_seed_zero_and_the_deterministic_mode(monkeypatch, wide) -> None:
    policy = dataclasses.replace(PipelineLnsPolicy(), step_s=0.1)
    asked: list[dict] = []
    real = step_module.solve_step

    def spy(*args, **kwargs):
        asked.append({**kwargs, "free": args[5]})
        return real(*args, **kwargs)

    monkeypatch.setattr("planner.search.pipeline.lns.solve_step", spy)
    improve_pipeline(wide, wide.known, time_limit_s=60, max_steps=3, threads=1, policy=policy)
    assert [(k["seed"], k["deterministic"], k["fifo_inside"], k["fix_untouched"]) for k in asked] == [
        (0, True, True, False), (1, True, True, False), (2, True, True, False)]
    assert [k["time_limit_s"] for k in asked] == [0.1] * 3  # each step its step_s, far below the time left
    improve_pipeline(wide, wide.known, time_limit_s=60, max_steps=1, threads=1, policy=policy, seed=0)
    assert asked[3]["free"] == asked[0]["free"]  # the first draw is the seed's alone


# -------------------------------------------------------------------------------------------- records and tuning
def test_a_step_gains_only_when_strictly_shorter() -> None:
    assert LnsStep(0, "window", 8, 10, 9, 0.0, False).gained
    assert not LnsStep(0, "window", 8, 10, 10, 0.0, True).gained
    result = LnsResult(PipelineTimes((0,)), 10, 9, (LnsStep(0, "w", 8, 10, 9, 0.0, False),
                                                    LnsStep(1, "w", 8, 9, 9, 0.0, False)), True, 0.0)
    assert result.gains == 1
    assert (result.replayed_tick, result.after_full_solve, result.folded, result.resolve, result.periodic) == (
        0, True, False, None, None)


def test_the_default_pipeline_tuning_is_the_one_measured() -> None:
    """A change detector on purpose: each knob's reason is written beside it, and the recorded pipeline comparisons
    ran with these values; changing one is a deliberate retuning that updates this list."""
    lns = PipelineLnsPolicy()
    assert (lns.step_s, lns.min_step_s, lns.initial_size, lns.min_size, lns.grow, lns.shrink, lns.decay,
            lns.min_weight, lns.microbatches, lns.ends_share, lns.critical_part) == (
        4.0, 1.0, 64, 8, 1.25, 0.8, 0.9, 0.05, 4, 0.17, 4)
    half = HalfSearchPolicy()
    assert (half.step_s, half.threads, half.first_share, half.step_share, half.second_threads, half.ends,
            half.ends_step_s, half.ends_time_share, half.ends_rounds, half.deterministic) == (
        0.5, 4, 0.5, 0.5, None, True, 60.0, 0.1, 2, False)
    assert PeriodicPolicy() == PeriodicPolicy(margins=(0.01, 0.025), share=0.15)
    search = PipelineSearchPolicy()
    assert (search.stall_steps, search.min_resolve_s, search.full_solve_max_tasks) == (40, 2.0, 5_000)


# ---------------------------------------------------------------------------------------------- the mirror half
class _Clock:
    """time.monotonic of `half`, moved by the recording search below by each part's time limit."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def monotonic(self) -> float:
        return self.now_s


def _recording_search(clock: _Clock, calls: list[dict]):
    """A stand-in for `improve_pipeline` with its limits bound: records each part's arguments, spends its whole
    time limit on the clock, and gains one tick in one step of 0.25 s."""
    def search(half, incumbent, **kwargs):
        calls.append({"incumbent": incumbent, **kwargs})
        clock.now_s += kwargs["time_limit_s"]
        before = 100 - len(calls) + 1
        step = LnsStep(0, (kwargs.get("kinds") or ("window",))[0], 8, before, before - 1, 0.25, False)
        if kwargs["progress"] is not None:
            kwargs["progress"](step)
        return LnsResult(PipelineTimes((len(calls),)), before, before - 1, (step,), True, 0.25,
                         replayed_tick=before - (len(calls) == 1))
    return search


def test_the_half_runs_its_phases_and_ends_in_the_time_they_are_given(monkeypatch) -> None:
    import planner.search.pipeline.half as half_module

    clock, calls, seen = _Clock(), list[dict](), list[LnsStep]()
    monkeypatch.setattr(half_module, "time", clock)
    run = half_module.two_phases(_recording_search(clock, calls), 10.0, 8, seen.append,
                                 PipelineLnsPolicy(step_s=4.0), HalfSearchPolicy())
    result = run(_gpipe_2x2(), PipelineTimes((0,)))
    # ends: 0.1 of 10 s each, 2 rounds x head and tail kept back (4 s); the first phase gets half of the other 6 s
    assert [(c["time_limit_s"], c["policy"].step_s, c["threads"], c.get("kinds"), c.get("max_steps"))
            for c in calls] == [
        (3.0, 0.5, 4, None, None),
        (1.5, 2.0, 8, None, None), (1.0, 1.0, 8, ("head",), 1), (1.0, 1.0, 8, ("tail",), 1),
        (1.5, 2.0, 8, None, None), (1.0, 1.0, 8, ("head",), 1), (1.0, 1.0, 8, ("tail",), 1),
        (0.0, 2.0, 8, None, None)]
    assert all(c["stall_steps"] is None and c["deterministic"] is False for c in calls)
    assert [c["incumbent"].start for c in calls] == [(0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,)]
    # one sequence of steps, timed from the first part's start
    starts = [0.0, 3.0, 4.5, 5.5, 6.5, 8.0, 9.0, 10.0]
    assert [(s.step, s.wall_s) for s in result.steps] == [(i, at + 0.25) for i, at in enumerate(starts)]
    assert seen == list(result.steps)
    assert (result.start_tick, result.replayed_tick, result.best_tick) == (100, 99, 92)
    assert result.time_to_best_s == 10.25 and result.times == PipelineTimes((8,))


def test_the_half_without_ends_and_with_fewer_second_phase_workers(monkeypatch) -> None:
    import planner.search.pipeline.half as half_module

    clock, calls = _Clock(), list[dict]()
    monkeypatch.setattr(half_module, "time", clock)
    policy = HalfSearchPolicy(ends=False, second_threads=2, threads=16, step_s=9.0)
    result = half_module.two_phases(_recording_search(clock, calls), 10.0, 8, None, PipelineLnsPolicy(step_s=4.0),
                                    policy)(_gpipe_2x2(), PipelineTimes((0,)))
    assert [(c["time_limit_s"], c["policy"].step_s, c["threads"], c["progress"]) for c in calls] == [
        (5.0, 4.0, 8, None), (5.0, 2.0, 2, None)]
    assert result.time_to_best_s == 5.25 and [s.step for s in result.steps] == [0, 1]


def test_a_symmetric_schedule_is_searched_on_its_half_and_unfolded() -> None:
    from formulations.pipeline_units import in_order
    from planner.compare.baselines import pipeline_of
    from planner.compare.baselines import simulate_baseline as simulate_row
    from planner.pipeline.mirror import fold
    from planner.pipeline.stream_greedy import best_stream_list
    from planner.search.pipeline.half import improve_folded

    costs = UnitCosts(f=2, b=2, w=1, comm=1, comm_stream=True, a2a=1.0)
    row = simulate_row("dualpipe", 4, 8, costs, Scales.of(costs))
    assert row.figures is not None
    cap = row.figures.max_peak_memory_bytes
    pipe = pipeline_of("dualpipe", 4, 8, costs, Scales.of(costs))
    mirror = fold(pipe, [cap] * 4)
    assert mirror is not None
    listed = best_stream_list(mirror.half, [cap] * 2)
    assert listed is not None
    half_times = listed[0]
    setup = prepare_pipeline(pipe, [cap] * 4, warm_start=mirror.unfold_times(half_times))
    assert setup.known is not None
    searched: list = []

    def search(half, incumbent):  # the half's own start back, as a search that found nothing better would
        searched.append(half)
        return LnsResult(incumbent, 7, 7, (), False, 0.0)

    result = improve_folded(setup, mirror, setup.known, search)
    assert result is not None and len(searched) == 1
    assert searched[0].tasks.instance.num_tasks * 2 <= setup.tasks.instance.num_tasks
    assert searched[0].known is not None and searched[0].pipeline == mirror.half
    assert result.times.start == setup.known.start and result.folded
    assert result.best_tick == setup.makespan_tick(setup.known) and result.start_tick == 7
    assert result.in_order == in_order(setup, setup.known)
    moved = list(setup.known.start)
    moved[max(range(len(moved)), key=lambda t: (moved[t], t))] += 1  # one task later: no longer symmetric
    assert improve_folded(setup, mirror, PipelineTimes(tuple(moved)), search) is None and len(searched) == 1


# ---------------------------------------------------------------------------------------------- the full solve
def _spied_solve(monkeypatch):
    """`solve_pipeline_lns`'s calls to prepare, the full model and the search, recorded (each still runs)."""
    import planner.search.pipeline.solve as solve_module

    seen: dict[str, list[dict]] = {"prepare": [], "full": [], "search": []}
    real = {name: getattr(solve_module, name) for name in ("prepare_pipeline", "solve_formulation",
                                                           "improve_pipeline")}

    def spy(name: str, key: str):
        def call(*args, **kwargs):
            seen[key].append({**kwargs, "called_at_s": time.monotonic()})
            return real[name](*args, **kwargs)
        return call

    for name, key in (("prepare_pipeline", "prepare"), ("solve_formulation", "full"), ("improve_pipeline", "search")):
        monkeypatch.setattr(solve_module, name, spy(name, key))
    return solve_module.solve_pipeline_lns, seen


def test_the_full_solve_gets_its_share_and_the_defaults_reach_every_part(monkeypatch) -> None:
    solve, seen = _spied_solve(monkeypatch)
    pipe = uniform_pipeline(2, 2)
    sol, lns = solve(pipe, time_limit_s=8.0, lns_share=0.25)
    assert [(k["fifo"], k["pair_window"]) for k in seen["prepare"]] == [(True, 2)]
    first = seen["full"][0]
    assert (first["time_limit_s"], first["threads"], first["seed"]) == (6.0, 8, 0)
    assert first["lower_bound_tick"] == prepare_pipeline(pipe).trivial_tick
    # this small pipeline is proven optimal by the full model: no search
    assert sol.status == "optimal" and lns is None and seen["search"] == []
    assert sol.lower_bound_tick == sol.plan.makespan_tick


def test_without_a_search_share_only_the_full_model_runs(monkeypatch) -> None:
    solve, seen = _spied_solve(monkeypatch)
    pipe = uniform_pipeline(4, 8)
    sol, lns = solve(pipe, time_limit_s=2.0, lns_share=0.0, threads=1)
    assert lns is None and seen["search"] == [] and len(seen["full"]) == 1
    assert seen["full"][0]["time_limit_s"] == 2.0
    assert sol.lower_bound_tick <= sol.plan.makespan_tick


def test_a_pipeline_at_the_size_limit_still_gets_the_full_solve(monkeypatch) -> None:
    solve, seen = _spied_solve(monkeypatch)
    pipe = uniform_pipeline(2, 2)  # 12 tasks
    solve(pipe, time_limit_s=4.0, lns_share=0.5, threads=1, policy=PipelineSearchPolicy(full_solve_max_tasks=12))
    assert len(seen["full"]) >= 1 and seen["full"][0]["time_limit_s"] == 2.0
    seen["full"].clear()
    sol, lns = solve(pipe, time_limit_s=4.0, lns_share=0.5, threads=1,
                     policy=PipelineSearchPolicy(full_solve_max_tasks=11, stall_steps=2, min_resolve_s=100.0))
    assert seen["full"] == [] and lns is not None and not lns.after_full_solve
    assert [(k["fifo_inside"], k["fix_untouched"], k["threads"], k["seed"], k["stall_steps"]) for k in seen["search"]] \
        == [(True, False, 1, 0, 2)]
    # no full solve: the bound is the setup's trivial bound, never above the plan
    assert sol.lower_bound_tick == min(prepare_pipeline(pipe).trivial_tick, sol.plan.makespan_tick)
    assert (sol.status == "optimal") == (sol.lower_bound_tick == sol.plan.makespan_tick)


# -------------------------------------------------------------------------------------------- the periodic start
def test_the_periodic_start_tries_each_margin_above_the_bound_in_its_share_of_the_time(monkeypatch) -> None:
    import planner.search.pipeline.periodic as periodic_module
    from formulations.pipeline_periodic import period_lower_bound_tick
    from planner.compare.baselines import pipeline_of
    from planner.compare.baselines import simulate_baseline as simulate_row
    from planner.pipeline.mirror import fold
    from planner.pipeline.stream_greedy import best_stream_list

    # DualPipe on 4 devices, 16 micro-batches: long enough for a steady state that replays shorter than the list
    # schedule's (246 ticks replayed)
    costs = UnitCosts(f=2, b=2, w=1, comm=1, comm_stream=True, a2a=1.0)
    row = simulate_row("dualpipe", 4, 16, costs, Scales.of(costs))
    assert row.figures is not None
    cap = row.figures.max_peak_memory_bytes
    pipe = pipeline_of("dualpipe", 4, 16, costs, Scales.of(costs))
    mirror = fold(pipe, [cap] * 4)
    assert mirror is not None
    listed = best_stream_list(mirror.half, mirror.half_caps([cap] * 4))
    assert listed is not None
    setup = prepare_pipeline(pipe, cap, warm_start=mirror.unfold_times(listed[0]))
    assert setup.known is not None and replayed_tick(setup, setup.known) == 246
    asked: list[tuple[int, float]] = []
    real = periodic_module.solve_periodic

    def spy(half, caps, period, **kwargs):
        asked.append((period, kwargs["time_limit_s"]))
        return real(half, caps, period, **kwargs)

    monkeypatch.setattr(periodic_module, "solve_periodic", spy)
    said: list[tuple[int, int, int]] = []
    lower = period_lower_bound_tick(mirror.half)
    times, periodic = periodic_module.periodic_start(
        setup, mirror, setup.known, time_limit_s=8.0, threads=1, seed=0, progress=lambda *a: said.append(a),
        policy=PeriodicPolicy(margins=(0.01, 0.1)))
    assert lower == 24
    assert asked == [(math.ceil(lower * 1.01), 4.0), (math.ceil(lower * 1.1), 4.0)] == [(25, 4.0), (27, 4.0)]
    # each find is reported against the best start before it: the list schedule's, then the first period's
    assert said == [(246, 25, 244), (244, 27, 258)]
    assert periodic == (25, 244) and replayed_tick(setup, times) == 244
    assert mirror.fold_times(dict(zip(setup.tasks.instance.task_names, times.start, strict=True))) is not None
    # a period below the bound has no schedule: the next margin is still tried
    again, periodic = periodic_module.periodic_start(setup, mirror, setup.known, time_limit_s=4.0, threads=1, seed=0,
                                                     policy=PeriodicPolicy(margins=(-0.5, 0.01)))
    assert asked[2:] == [(12, 2.0), (25, 2.0)] and periodic == (25, 244) and replayed_tick(setup, again) == 244

def test_a_kind_that_gains_weighs_one_more_and_a_tie_moves_the_search(monkeypatch) -> None:
    import planner.search.pipeline.lns as lns_module

    drawn: list[list[float]] = []

    class Recording(random.Random):
        def choices(self, population, weights=None, **kwargs):  # type: ignore[override]
            drawn.append(list(weights or []))
            return super().choices(population, weights=weights, **kwargs)

    calls: list[tuple] = []
    real = step_module.solve_step

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append((list(args[3]), out[1]))
        return out

    monkeypatch.setattr(lns_module, "random", types.SimpleNamespace(Random=Recording))
    monkeypatch.setattr(lns_module, "solve_step", spy)
    policy = PipelineLnsPolicy()
    setup = _gpipe_2x2()  # the first step solves the whole pipeline and gains; the others tie
    result = improve_pipeline(setup, setup.known, time_limit_s=60, max_steps=5, threads=1, policy=policy)
    kinds = list(KINDS)
    assert len(drawn) == len(result.steps) == 5 and drawn[0] == [1.0] * len(kinds)
    assert result.steps[0].gained and result.gains == 1
    for i, step in enumerate(result.steps[:-1]):
        k = kinds.index(step.kind)
        expected = drawn[i][k] + 1.0 if step.gained else max(policy.min_weight, drawn[i][k] * policy.decay)
        assert drawn[i + 1][k] == pytest.approx(expected)
        assert all(drawn[i + 1][j] == drawn[i][j] for j in range(len(kinds)) if j != k)
    # a step whose replay is no longer is taken, ties included: the next step starts from it
    for (_, stepped), (next_start, _), step in zip(calls, calls[1:], result.steps):
        if stepped is not None and step.after_tick <= step.before_tick:
            assert next_start == list(stepped[1][0])


def test_the_search_stops_when_less_than_a_step_is_left(wide) -> None:
    policy = dataclasses.replace(PipelineLnsPolicy(), step_s=0.3, min_step_s=1.0)
    result = improve_pipeline(wide, wide.known, time_limit_s=1.2, max_steps=6, threads=1, policy=policy)
    assert 1 <= len(result.steps) < 6


def test_no_search_share_keeps_the_full_solve_even_above_the_size_limit(monkeypatch) -> None:
    solve, seen = _spied_solve(monkeypatch)
    sol, lns = solve(uniform_pipeline(2, 2), time_limit_s=4.0, lns_share=0.0, threads=1,
                     policy=PipelineSearchPolicy(full_solve_max_tasks=11))
    assert lns is None and [k["time_limit_s"] for k in seen["full"]] == [4.0] and seen["search"] == []


def test_the_hand_back_solves_from_the_searchs_schedule_with_the_next_seed(monkeypatch) -> None:
    from random_pipelines import uneven_pipeline

    solve, seen = _spied_solve(monkeypatch)
    pipe = uneven_pipeline(3, 4, "fixed", 3)
    sol, lns = solve(pipe, time_limit_s=30, lns_share=0.5, threads=1, seed=5,
                     policy=PipelineSearchPolicy(stall_steps=1, full_solve_max_tasks=10))
    assert lns is not None and lns.resolve is not None and not lns.after_full_solve
    (again,) = seen["full"]  # no first full solve above the size limit: the hand-back only
    assert again["seed"] == 6 and again["known"] is not None
    assert again["lower_bound_tick"] == prepare_pipeline(pipe).trivial_tick
    assert 0 < again["time_limit_s"] <= 30


def test_the_time_to_best_counts_from_the_call_when_the_search_gains(monkeypatch) -> None:
    solve, _seen = _spied_solve(monkeypatch)
    setup = _gpipe_2x2()
    warm = dict(zip(setup.tasks.instance.task_names, setup.known.start, strict=True))
    sol, lns = solve(setup.pipeline, warm_start=warm, time_limit_s=20.0, lns_share=0.5, threads=1,
                     policy=PipelineSearchPolicy(full_solve_max_tasks=11, min_resolve_s=100.0))
    assert lns is not None and lns.best_tick < lns.start_tick == 9 and lns.resolve is None
    assert sol.time_to_best_s >= lns.time_to_best_s > 0


def test_a_half_searched_starts_from_the_periodic_schedule_when_it_replays_shorter(monkeypatch) -> None:
    import planner.search.pipeline.solve as solve_module
    from planner.compare.baselines import pipeline_of
    from planner.compare.baselines import simulate_baseline as simulate_row
    from planner.pipeline.mirror import fold
    from planner.pipeline.stream_greedy import best_stream_list

    costs = UnitCosts(f=2, b=2, w=1, comm=1, comm_stream=True, a2a=1.0)
    row = simulate_row("dualpipe", 4, 16, costs, Scales.of(costs))
    assert row.figures is not None
    cap = row.figures.max_peak_memory_bytes
    pipe = pipeline_of("dualpipe", 4, 16, costs, Scales.of(costs))
    mirror = fold(pipe, [cap] * 4)
    assert mirror is not None
    listed = best_stream_list(mirror.half, mirror.half_caps([cap] * 4))
    assert listed is not None
    asked: list[float] = []
    real = solve_module.periodic_start

    def spy(*args, **kwargs):
        asked.append(kwargs["time_limit_s"])
        return real(*args, **kwargs)

    monkeypatch.setattr(solve_module, "periodic_start", spy)
    reported: list[LnsStep] = []
    policy = PipelineSearchPolicy(full_solve_max_tasks=10, periodic=PeriodicPolicy(margins=(0.01,), share=0.6),
                                  half=HalfSearchPolicy(ends=False))
    sol, lns = solve_module.solve_pipeline_lns(pipe, cap, warm_start=mirror.unfold_times(listed[0]), time_limit_s=4.0,
                                               threads=1, policy=policy, progress=reported.append)
    assert lns is not None and lns.folded and not lns.after_full_solve
    assert len(asked) == 1 and 1.2 < asked[0] <= 2.4  # 0.6 of the time left after the setup (under two seconds)
    assert lns.periodic == (25, 244)
    (first, *_) = reported
    assert (first.step, first.kind, first.size, first.before_tick, first.after_tick, first.proven,
            first.period_tick) == (0, "periodic", 0, 246, 244, False, 25)
    assert 0 < first.wall_s < 4.0
    assert 0 < sol.time_to_best_s < 4.0 and sol.plan.makespan_tick <= 244


def test_a_hand_back_that_gains_times_its_best_from_the_call(monkeypatch) -> None:
    from random_pipelines import uneven_pipeline

    # small first neighbourhoods: the search stalls at 46, the full model solved again reaches 45
    solve, seen = _spied_solve(monkeypatch)
    policy = PipelineSearchPolicy(stall_steps=1, full_solve_max_tasks=10, lns=PipelineLnsPolicy(initial_size=8))
    sol, lns = solve(uneven_pipeline(3, 4, "fixed", 3), time_limit_s=30, lns_share=0.5, threads=1, policy=policy)
    assert lns is not None and lns.resolve is not None
    assert (lns.start_tick, lns.best_tick, lns.resolve[1], sol.plan.makespan_tick) == (49, 46, 45, 45)
    (again,) = seen["full"]
    called_s = seen["prepare"][0]["called_at_s"]  # the call starts its clock just before it prepares
    assert sol.time_to_best_s >= again["started_s"] - called_s >= lns.steps[-1].wall_s


def test_a_search_that_gains_nothing_leaves_the_time_to_best_at_the_start(monkeypatch) -> None:
    from random_pipelines import uneven_pipeline

    # above the size limit the warm start is the best from the call's start; this search finds nothing shorter
    solve, _seen = _spied_solve(monkeypatch)
    policy = PipelineSearchPolicy(stall_steps=1, full_solve_max_tasks=10, min_resolve_s=100.0)
    sol, lns = solve(uneven_pipeline(3, 4, "fixed", 4), time_limit_s=30, lns_share=0.5, threads=1, policy=policy)
    assert lns is not None and lns.best_tick == lns.start_tick == sol.plan.makespan_tick == 38
    assert sol.time_to_best_s == 0.0


def test_a_schedule_the_search_leaves_out_of_order_comes_back_renamed_in_order(monkeypatch) -> None:
    from random_pipelines import uneven_pipeline

    import planner.search.pipeline.solve as solve_module
    from formulations.pipeline_units import in_order

    left: list[bool] = []
    real = solve_module.improve_pipeline

    def spy(*args, **kwargs):
        found = real(*args, **kwargs)
        left.append(found.in_order)
        return found

    monkeypatch.setattr(solve_module, "improve_pipeline", spy)
    pipe = uneven_pipeline(3, 4, "fixed", 3)
    policy = PipelineSearchPolicy(stall_steps=2, full_solve_max_tasks=10, min_resolve_s=100.0,
                                  lns=PipelineLnsPolicy(initial_size=12, step_s=1.0))
    sol, lns = solve_module.solve_pipeline_lns(pipe, time_limit_s=10, lns_share=0.5, threads=1, fifo_inside=False,
                                               policy=policy)
    assert left == [False]  # reordered inside a neighbourhood: out of micro-batch order
    assert lns is not None and lns.in_order and in_order(prepare_pipeline(pipe), lns.times)
    assert lns.best_tick == sol.plan.makespan_tick < lns.start_tick


def test_without_micro_batch_order_the_hand_back_runs_on_any_order(monkeypatch) -> None:
    from random_pipelines import uneven_pipeline

    from formulations.pipeline_units import in_order

    # fifo off: the search's schedule (out of order here) needs no renaming for the full model to start from it
    solve, seen = _spied_solve(monkeypatch)
    pipe = uneven_pipeline(3, 4, "fixed", 3)
    policy = PipelineSearchPolicy(stall_steps=2, full_solve_max_tasks=10,
                                  lns=PipelineLnsPolicy(initial_size=12, step_s=1.0))
    sol, lns = solve(pipe, time_limit_s=10, lns_share=0.5, threads=1, fifo=False, policy=policy)
    assert lns is not None and not lns.in_order and not in_order(prepare_pipeline(pipe, fifo=False), lns.times)
    assert lns.resolve is not None and len(seen["full"]) == 1
    assert sol.lower_bound_tick == sol.plan.makespan_tick == lns.resolve[1]


def test_the_full_solves_bound_survives_a_search_that_keeps_order(monkeypatch) -> None:
    from random_pipelines import uneven_pipeline

    import planner.search.pipeline.solve as solve_module

    # the first full solve is forced to stop unproven (what a time limit does on a large model), keeping the bound
    # it reached; the search that follows keeps micro-batch order, so that bound still holds for its schedule
    real = solve_module.solve_formulation

    def unproven(formulation, **kw):
        return dataclasses.replace(real(formulation, **kw), status=PlanStatus.FEASIBLE)

    monkeypatch.setattr(solve_module, "solve_formulation", unproven)
    pipe = uneven_pipeline(4, 8, "fixed", 3)
    sol, lns = solve_module.solve_pipeline_lns(pipe, time_limit_s=4, lns_share=0.5, threads=1,
                                               policy=PipelineSearchPolicy(min_resolve_s=100.0))
    assert prepare_pipeline(pipe).trivial_tick == 74
    assert lns is not None and lns.in_order and lns.resolve is None
    assert sol.lower_bound_tick == sol.plan.makespan_tick == 82 and sol.status == "optimal"


def test_no_periodic_share_no_periodic_start(monkeypatch) -> None:
    import planner.search.pipeline.solve as solve_module
    from planner.compare.baselines import pipeline_of
    from planner.compare.baselines import simulate_baseline as simulate_row
    from planner.pipeline.mirror import fold
    from planner.pipeline.stream_greedy import best_stream_list

    costs = UnitCosts(f=2, b=2, w=1, comm=1, comm_stream=True, a2a=1.0)
    row = simulate_row("dualpipe", 4, 8, costs, Scales.of(costs))
    assert row.figures is not None
    cap = row.figures.max_peak_memory_bytes
    pipe = pipeline_of("dualpipe", 4, 8, costs, Scales.of(costs))
    mirror = fold(pipe, [cap] * 4)
    assert mirror is not None
    listed = best_stream_list(mirror.half, mirror.half_caps([cap] * 4))
    assert listed is not None
    called: list[float] = []
    real = solve_module.periodic_start

    def spy(*args, **kwargs):
        called.append(kwargs["time_limit_s"])
        return real(*args, **kwargs)

    monkeypatch.setattr(solve_module, "periodic_start", spy)
    policy = PipelineSearchPolicy(full_solve_max_tasks=10, periodic=PeriodicPolicy(share=0.0),
                                  half=HalfSearchPolicy(ends=False))
    _sol, lns = solve_module.solve_pipeline_lns(pipe, cap, warm_start=mirror.unfold_times(listed[0]),
                                                time_limit_s=1.2, threads=1, policy=policy)
    assert lns is not None and lns.folded and lns.periodic is None and called == []
