"""The mirror fold (`planner/pipeline/mirror.py`): DualPipe's placement of a symmetric pipeline folds onto
half its devices, with the hop across the middle kept as a send; every schedule of the half unfolds to a valid
schedule of the whole pipeline within the caps and with the same makespan; asymmetric pipelines do not fold; and
the search runs on the half where the pipeline is too large for the full model."""

from __future__ import annotations

import dataclasses

import pytest

import planner.search.pipeline.solve as solve_module
from formulations.pipeline import finish_pipeline, prepare_pipeline
from planner.compare.baselines import pipeline_of, simulate_baseline
from planner.errors import InputError
from planner.pipeline.metrics import figures
from planner.pipeline.mirror import fold
from planner.pipeline.registry import Scales, UnitCosts
from planner.pipeline.stream_greedy import best_stream_list
from planner.pipeline.unroll import unroll_actions
from planner.schedule.actions import Action, ActionKind
from planner.schedule.plan import PlanStatus
from planner.search.pipeline.half import improve_folded
from planner.search.pipeline.lns import improve_pipeline
from planner.search.pipeline.policy import HalfSearchPolicy, PipelineLnsPolicy, PipelineSearchPolicy
from planner.search.pipeline.solve import solve_pipeline_lns

P, M = 4, 8
COSTS = UnitCosts(f=2, b=2, w=1, comm=1, comm_stream=True, a2a=1.0)


def _dualpipe():
    """DualPipe's placement with sends and all-to-alls on communication streams, and DualPipe's peak as the cap."""
    sc = Scales.of(COSTS)
    cap = simulate_baseline("dualpipe", P, M, COSTS, sc).figures.max_peak_memory_bytes
    return pipeline_of("dualpipe", P, M, COSTS, sc), cap


def _valid(pipe, times: dict[str, int], cap: int) -> tuple[int, list[int]]:
    """Validate `times` as a plan of `pipe` (`finish_pipeline`'s independent checks) and return its makespan and
    per-device peak memory, every peak within `cap`."""
    setup = prepare_pipeline(pipe, cap, warm_start=times)
    assert setup.known is not None and setup.warm_rejected is None
    sol = finish_pipeline(setup, setup.known, 0, PlanStatus.FEASIBLE, solver="test", solver_version="",
                          started_s=0.0, time_to_best_s=0.0)
    peaks = list(figures(pipe, sol.timeline).peak_memory_bytes)
    assert max(peaks) <= cap
    return sol.plan.makespan_tick, peaks


def test_dualpipe_s_placement_folds_onto_half_the_devices_with_a_send_at_the_turn():
    pipe, cap = _dualpipe()
    folded = fold(pipe, [cap] * P)
    assert folded is not None
    half = folded.half
    assert half.num_devices == P // 2 and half.chains == ((0, 1, 2, 3),)
    assert half.stage_to_device == (0, 1, 1, 0)  # chunks 2 and 3 stand in for chain 1's copies on devices 1 and 0
    assert folded.copies == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert half.turn_sends == (1,)  # chunk 1 -> 2 crosses from device 1 to device 2 in the whole pipeline
    tasks = unroll_actions(half)
    inst = tasks.instance
    names = inst.task_names
    for kind, stage in ((ActionKind.SEND_F, 1), (ActionKind.SEND_B, 2)):
        t = names.index(str(Action(stage, kind, 0)))
        assert inst.eligible(t, P // 2 + 1)  # on device 1's communication stream
        assert int(inst.duration_tick[t, P // 2 + 1]) == pipe.hop_tick(1)
    assert len(names) * 2 == unroll_actions(pipe).instance.num_tasks


def test_every_schedule_of_the_half_unfolds_to_a_valid_schedule_of_the_whole_with_the_same_makespan():
    pipe, cap = _dualpipe()
    folded = fold(pipe, [cap] * P)
    assert folded is not None
    found = best_stream_list(folded.half, folded.half_caps([cap] * P))
    assert found is not None
    half_times, half_span = found
    half_setup = prepare_pipeline(folded.half, cap, warm_start=half_times)
    assert half_setup.known is not None
    improved = improve_pipeline(half_setup, half_setup.known, time_limit_s=20, max_steps=6, threads=1)
    for times in (half_times, dict(zip(half_setup.tasks.instance.task_names, improved.times.start, strict=True))):
        whole = folded.unfold_times(times)
        span, peaks = _valid(pipe, whole, cap)
        half_span = half_setup.makespan_tick(prepare_pipeline(folded.half, cap, warm_start=times).known)
        assert span == half_span
        assert peaks == peaks[::-1]  # device d holds what device p - 1 - d holds
        assert folded.fold_times(whole) == times  # and it folds back


def test_an_asymmetric_schedule_does_not_fold():
    pipe, cap = _dualpipe()
    folded = fold(pipe, [cap] * P)
    assert folded is not None
    found = best_stream_list(folded.half, [cap] * (P // 2))
    assert found is not None
    whole = folded.unfold_times(found[0])
    moved = dict(whole)
    moved[str(Action(P + 1, ActionKind.W, pipe.num_microbatches - 1))] += 1  # chain 1: one W a tick later
    assert folded.fold_times(moved) is None


@pytest.mark.parametrize("change", ["v placement", "caps", "stage cost", "hop"])
def test_asymmetric_pipelines_do_not_fold(change):
    pipe, cap = _dualpipe()
    caps = [cap] * P
    if change == "v placement":
        pipe = pipeline_of("zb-v", P, M, COSTS, Scales.of(COSTS))
    elif change == "caps":
        caps = [cap, cap, cap, cap + 1]
    elif change == "stage cost":
        stages = list(pipe.stages)
        stages[P + 1] = dataclasses.replace(stages[P + 1], weight_grad_tick=stages[P + 1].weight_grad_tick + 1)
        pipe = dataclasses.replace(pipe, stages=tuple(stages))
    else:
        hops = [pipe.hop_tick(s) for s in range(pipe.num_stages)]
        hops[P] += 1  # chain 1's first hop, device 3 -> 2, longer than its mirror, device 0 -> 1
        pipe = dataclasses.replace(pipe, stage_comm_tick=tuple(hops))
    assert fold(pipe, caps) is None


def test_a_half_does_not_fold_again():
    pipe, cap = _dualpipe()
    folded = fold(pipe, [cap] * P)
    assert folded is not None and fold(folded.half, [cap] * (P // 2)) is None


def test_a_pipeline_too_large_for_the_full_model_is_searched_on_its_half():
    """Above `full_solve_max_tasks` (lowered here) a symmetric pipeline with a symmetric warm start is searched on
    its half: the schedule that comes back is valid (`finish_pipeline` checks it), within the cap, symmetric and no
    longer than the warm start; an asymmetric warm start is searched on the whole pipeline."""
    pipe, cap = _dualpipe()
    folded = fold(pipe, [cap] * P)
    assert folded is not None
    half_times, _ = best_stream_list(folded.half, [cap] * (P // 2))
    warm = folded.unfold_times(half_times)
    warm_span, _ = _valid(pipe, warm, cap)
    # no hand-back to the full model (no stall limit): the search's own result
    policy = PipelineSearchPolicy(full_solve_max_tasks=10, stall_steps=10**6)
    sol, lns = solve_pipeline_lns(pipe, cap, warm_start=warm, time_limit_s=6, threads=1, policy=policy)
    assert lns is not None and lns.folded and not lns.after_full_solve and lns.resolve is None
    times = {x.task: x.start_tick for x in sol.timeline.placements}
    assert folded.fold_times(times) is not None
    assert sol.plan.makespan_tick == lns.best_tick <= warm_span
    assert max(figures(pipe, sol.timeline).peak_memory_bytes) <= cap

    moved = dict(warm)
    last_w = str(Action(P + 1, ActionKind.W, pipe.num_microbatches - 1))
    moved[last_w] += 1  # chain 1's last weight gradient of stage 5 one tick later: no longer symmetric
    setup = prepare_pipeline(pipe, cap, warm_start=moved)
    assert setup.known is not None
    assert improve_folded(setup, folded, setup.known, lambda *_: pytest.fail("searched")) is None
    _, lns = solve_pipeline_lns(pipe, cap, warm_start=moved, time_limit_s=4, threads=1, policy=policy)
    assert lns is not None and not lns.folded


@pytest.mark.parametrize("rounds", [1, 2])
def test_the_half_is_searched_in_short_steps_then_long_ones_then_its_ends_without_a_stall_limit(monkeypatch, rounds):
    """The search on a half runs `first_share` of its time in steps of the half's `step_s` on at most its `threads`
    CP-SAT workers, then the rest from that schedule in half the step limit on the caller's workers
    (`HalfSearchPolicy`), split into `ends_rounds` parts each followed by one step on the fill and one on the drain
    (``head``, ``tail``, each within `ends_time_share` of the time, kept back from the phases), then the second phase
    again in the time they left, with no stall limit (above `full_solve_max_tasks` there is no full model to hand
    the time back to); the steps of all parts reach `progress` and the result numbered in one sequence, timed from
    the search's start."""
    half = HalfSearchPolicy(ends_rounds=rounds)
    lns_policy = PipelineLnsPolicy(step_s=1.0, min_step_s=0.2)  # steps in both phases of this short run
    policy = PipelineSearchPolicy(lns=lns_policy, half=half, full_solve_max_tasks=10)
    pipe, cap = _dualpipe()
    folded = fold(pipe, [cap] * P)
    assert folded is not None
    half_times, _ = best_stream_list(folded.half, [cap] * (P // 2))
    seen: list[dict] = []

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return improve_pipeline(*args, **kwargs)

    monkeypatch.setattr(solve_module, "improve_pipeline", spy)
    reported = []
    sol, lns = solve_pipeline_lns(pipe, cap, warm_start=folded.unfold_times(half_times), time_limit_s=6, threads=8,
                                  policy=policy, progress=reported.append)
    assert lns is not None and lns.folded and lns.resolve is None
    ends_s = seen[2]["policy"].step_s  # the share of the time the search got (6 s less what came before it)
    assert 0 < ends_s <= min(half.ends_step_s, half.ends_time_share * 6)
    second = (1.0 * half.step_share, 8, None, None, None)
    ends = [(ends_s, 8, None, ("head",), 1), (ends_s, 8, None, ("tail",), 1)]
    assert [(k["policy"].step_s, k["threads"], k["stall_steps"], k.get("kinds"), k.get("max_steps")) for k in seen] \
        == [(half.step_s, half.threads, None, None, None)] + [second, *ends] * rounds + [second]
    # every part's steps in CP-SAT's mode for the half (`HalfSearchPolicy.deterministic`: the default portfolio)
    assert [k["deterministic"] for k in seen] == [half.deterministic] * len(seen)
    assert half.deterministic is False
    assert all(k["policy"].min_step_s == lns_policy.min_step_s for k in seen)  # the rest of the caller's policy
    # the ends' time is kept back from the phases; the rounds split the second phase's time evenly
    assert seen[0]["time_limit_s"] <= (6 - 2 * rounds * ends_s) * half.first_share + 1e-9
    assert all(seen[i + j]["time_limit_s"] <= ends_s for i in range(2, 3 * rounds + 1, 3) for j in (0, 1))
    if rounds == 2:  # half of what the first phase and the ends left (it may stop up to MIN_STEP_S early)
        searched_s = ends_s / half.ends_time_share  # the half's search's own limit, a little under 6 s
        left_s = searched_s - 4 * ends_s - seen[0]["time_limit_s"] + lns_policy.min_step_s
        assert seen[1]["time_limit_s"] <= left_s / 2 + 1e-9
    if sol.plan.status is not PlanStatus.OPTIMAL:  # a search at its bound takes no more steps
        assert [s.kind for s in lns.steps].count("head") == [s.kind for s in lns.steps].count("tail") == rounds
    # the periodic start (`periodic_start`, before the search) reaches `progress` too, as its own kind
    searched = [s for s in reported if s.kind != "periodic"]
    assert all(s.period_tick is not None for s in reported if s.kind == "periodic")
    assert list(lns.steps) == searched and [s.step for s in lns.steps] == list(range(len(lns.steps)))
    walls = [s.wall_s for s in lns.steps]
    assert walls == sorted(walls)
    # the second phase stepped, unless the first reached the bound
    assert walls[-1] > seen[0]["time_limit_s"] or sol.plan.status is PlanStatus.OPTIMAL


def test_a_turn_send_must_name_a_stage_with_a_next_stage():
    pipe, _ = _dualpipe()
    with pytest.raises(InputError, match="turn_sends"):
        dataclasses.replace(pipe, turn_sends=(P - 1,))  # the last stage of chain 0 has no hop after it
