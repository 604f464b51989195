"""The budget and timing paths of the planned row (`planner.compare.planned_row`) made deterministic: the policy's
cut-round threshold, a spy on the cut search and the solves, and the solver's answer altered where only a slow or
stopped solve would reach a path (its time to best, a schedule with slack, a weak bound)."""

from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace

import pytest
from test_model_costs_details import chain_costs

import planner.compare.planned_row as planned_row
from formulations.pipeline import PipelineTimes
from planner.compare.baselines import SPLIT, pipeline_of, scales_of, simulate_baseline
from planner.compare.compare_policy import ComparePolicy
from planner.compare.cut_search import CutSearch
from planner.compare.planned_row import PlacementJob, _lns_note, _solve_fine, _solve_opplan, plan_placement
from planner.pipeline.generators import gpipe
from planner.pipeline.registry import Scales, UnitCosts
from planner.pipeline.streams import simulate_pipeline
from planner.schedule.plan import PlanStatus
from planner.search.pipeline.results import LnsResult, LnsStep

UNIT = UnitCosts()
REAL_SOLVE = planned_row.solve_pipeline_lns


def _model_job(placement: str = "dualpipe", **kw) -> PlacementJob:
    mc = chain_costs(comm_stream=True)
    return PlacementJob(placement, 2, 4, mc, scales_of(mc), {}, None, granularity=1, **kw)


def _spy(monkeypatch, name: str) -> list:
    """Record every call's result of the module's `name`, which still runs for real."""
    real, results = getattr(planned_row, name), []

    def spy(*args, **kwargs):
        results.append(real(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(planned_row, name, spy)
    return results


def test_no_second_cut_round_when_the_first_solve_leaves_no_more_than_the_threshold(monkeypatch):
    # the threshold is the whole budget: after the first solve less than it is left, however fast the solve was
    cuts = _spy(monkeypatch, "refine_cut")
    row = plan_placement(_model_job(policy=ComparePolicy(cut_round_min_left_s=4.0)), 4.0)
    assert row.figures is not None and len(cuts) == 1
    cut = row.notes["cut"]
    assert isinstance(cut, dict) and cut["simulations"] == cuts[0].evaluations and cut["moves"] == cuts[0].moves_kept


def test_a_later_round_as_long_as_the_first_is_not_kept(monkeypatch):
    # every cut round "moves" but hands back the same cut: the second solve, warm-started from the first's optimum,
    # is exactly as long, and the row stays the first solve's
    def same_cut(costs, *args, **kwargs):
        return CutSearch(costs, None, None, evaluations=3, moves_kept=1, seconds=0.0)

    monkeypatch.setattr(planned_row, "refine_cut", same_cut)
    solves = _spy(monkeypatch, "_solve_opplan")
    row = plan_placement(_model_job(policy=ComparePolicy(bound_round=False)), 4.0)
    assert len(solves) == 2 and all(s.notes["status"] is PlanStatus.OPTIMAL for s in solves)
    assert solves[0].figures.makespan_tick == solves[1].figures.makespan_tick
    assert row is solves[0]
    cut = row.notes["cut"]
    assert isinstance(cut, dict) and cut["moves"] == 2 and cut["simulations"] == 6 and cut["bound_rounds"] == 0


def _fixed_job(cap: int | None = None) -> PlacementJob:
    return PlacementJob("fixed", 2, 4, UNIT, scales_of(UNIT), {}, cap)


@pytest.mark.parametrize("cap", [None, 100])
def test_a_candidate_that_does_not_simulate_is_passed_over(cap):
    # GPipe at two micro-batches is not a schedule of the four-micro-batch pipeline; ZB-H1 after it is the warm start
    zbh1 = simulate_baseline("zb-h1", 2, 4, UNIT, scales_of(UNIT))
    assert zbh1.schedule is not None and zbh1.figures is not None
    row = _solve_opplan(_fixed_job(cap), UNIT, [("short", gpipe(2, 2)), ("zb-h1", zbh1.schedule)], 2)
    assert row.notes["warm_start"] == "zb-h1"
    assert row.notes["warm_units"] == zbh1.figures.makespan_tick / scales_of(UNIT).ticks_per_unit


def test_a_candidate_over_the_cap_is_passed_over():
    # GPipe (30 ticks) peaks at 8 bytes, over ZB-H1's 4, the cap; ZB-H1 after it is the warm start (the list
    # schedule under the cap is 26 ticks as well, and only a shorter one replaces it)
    rows = [simulate_baseline(n, 2, 4, UNIT, scales_of(UNIT)) for n in ("gpipe", "zb-h1")]
    peaks = [r.figures.max_peak_memory_bytes for r in rows if r.figures is not None]
    assert peaks[0] > peaks[1]
    row = _solve_opplan(_fixed_job(peaks[1]), UNIT, [(r.name, r.schedule) for r in rows], 2)
    assert row.notes["warm_start"] == "zb-h1" and row.notes["cap_bytes"] == peaks[1]


def test_the_gap_after_a_sub_chunk_replay_is_against_the_replayed_makespan(monkeypatch):
    # the solver stops with slack in its incumbent (the timeline it reports is GPipe's, longer than its order's
    # replay) and a bound below the optimum: the replay is kept and the gap measured against it
    scales = scales_of(UNIT)
    pipe = pipeline_of(SPLIT["fixed"], 2, 4, UNIT, scales)
    slow = simulate_baseline("gpipe", 2, 4, UNIT, scales)
    assert slow.schedule is not None
    _inst, slack = simulate_pipeline(pipe, slow.schedule)

    def stopped(*args, **kwargs):
        sol, lns = REAL_SOLVE(*args, **kwargs)
        return dataclasses.replace(sol, timeline=slack, lower_bound_tick=sol.lower_bound_tick - 4), lns

    monkeypatch.setattr(planned_row, "solve_pipeline_lns", stopped)
    row = _solve_opplan(_fixed_job(), UNIT, [], 2, pipe=pipe)
    assert row.figures is not None and row.timeline is not None
    made = row.figures.makespan_tick
    assert made < slack.makespan_tick and row.timeline.makespan_tick == made
    assert row.notes["gap"] == (made - row.notes["bound_tick"]) / made > 0


def test_the_lns_note_in_units():
    steps = (LnsStep(1, "window", 8, 50, 44, 0.75, False), LnsStep(2, "window", 8, 44, 44, 1.5, False))
    lns = LnsResult(PipelineTimes(()), start_tick=50, best_tick=40, steps=steps, in_order=True, time_to_best_s=1.0,
                    replayed_tick=46, resolve=(2.5, 42), after_full_solve=False, periodic=(6, 48))
    assert _lns_note(lns, Scales(4, 1)) == {
        "from_units": 12.5, "to_units": 10.0, "replayed_units": 11.5, "steps": 2, "gains": 1, "in_order": True,
        "after_full_solve": False, "folded": False, "periodic_period_units": 1.5, "periodic_replayed_units": 12.0,
        "seconds": 1.5, "resolve_s": 2.5, "resolve_units": 10.5}
    assert _lns_note(None, Scales(4, 1)) is None


def _stage_level_v_row():
    """The bundled MoE's job on the v placement, its costs, reference schedules and stage-level planned row."""
    job = _model_job("v")
    mc = job.costs
    assert not isinstance(mc, UnitCosts)
    refs = planned_row.reference_schedules(job)
    coarse = _solve_opplan(job, mc, refs, 2)
    assert coarse.figures is not None
    return job, mc, refs, coarse


def test_the_kept_sub_chunk_row_counts_its_time_to_best_from_the_placements_start(monkeypatch):
    # the sub-chunk solve finds its best 0.25 s in; it started 100 s into the placement
    job, mc, refs, coarse = _stage_level_v_row()
    # a stage-level row far longer than any sub-chunk schedule: the sub-chunk row is kept
    coarse.figures = dataclasses.replace(coarse.figures, makespan_tick=10**6)

    monkeypatch.setattr(planned_row, "solve_pipeline_lns", _found_at(0.25))
    row = _solve_fine(job, mc, coarse, [s for _, s in refs], 2, 2, started_s=100.0)
    gran = row.notes["granularity"]
    assert isinstance(gran, dict) and gran["kept"] == "k = 2" and row is not coarse
    assert row.notes["time_to_best_s"] == 100.25


def test_a_stage_level_row_kept_over_the_sub_chunks_keeps_its_time_to_best():
    job, mc, refs, coarse = _stage_level_v_row()
    coarse.figures = dataclasses.replace(coarse.figures, makespan_tick=1)  # nothing is shorter
    assert coarse.pipeline is not None and coarse.schedule is not None
    _inst, replay = simulate_pipeline(coarse.pipeline, coarse.schedule)
    before = coarse.notes["time_to_best_s"]
    job = dataclasses.replace(job, scales=Scales(4, 1))  # the notes' units: 4 ticks each
    row = _solve_fine(job, mc, coarse, [s for _, s in refs], 2, 2, started_s=100.0)
    assert row is coarse and row.notes["time_to_best_s"] == before
    gran = row.notes["granularity"]
    assert isinstance(gran, dict) and gran["kept"] == "stage level" and gran["fine_makespan_units"] is not None
    assert gran["stage_level_makespan_units"] == 0.25 and gran["stage_level_replayed_units"] == replay.makespan_tick / 4



def _found_at(seconds: float):
    """The real solve, its best reported found `seconds` into it."""
    def solve(*args, **kwargs):
        sol, lns = REAL_SOLVE(*args, **kwargs)
        return dataclasses.replace(sol, time_to_best_s=seconds), lns
    return solve


def test_a_shorter_later_round_is_kept_with_its_time_to_best_from_the_placements_start(monkeypatch):
    # the second round's solve is made one tick shorter than the first: it replaces the row; both solves report
    # their best 1000 s in, and each row's time to best adds when its solve started in the placement
    def same_cut(costs, *args, **kwargs):
        return CutSearch(costs, None, None, evaluations=3, moves_kept=1, seconds=0.0)

    real_opplan, solves = planned_row._solve_opplan, []

    def solve_opplan(*args, **kwargs):
        row = real_opplan(*args, **kwargs)
        if solves:
            row.figures = dataclasses.replace(row.figures, makespan_tick=solves[0].figures.makespan_tick - 1)
        solves.append(row)
        return row

    monkeypatch.setattr(planned_row, "refine_cut", same_cut)
    monkeypatch.setattr(planned_row, "solve_pipeline_lns", _found_at(1000.0))
    monkeypatch.setattr(planned_row, "_solve_opplan", solve_opplan)
    t0 = time.monotonic()
    row = plan_placement(_model_job(policy=ComparePolicy(bound_round=False)), 4.0)
    wall = time.monotonic() - t0
    assert len(solves) == 2 and row is solves[1]
    assert all(1000.0 <= s.notes["time_to_best_s"] <= 1000.0 + wall for s in solves)


def test_no_second_solve_when_the_cut_round_used_up_the_time(monkeypatch):
    # a clock the second cut round moves 10 s on: 4 s of budget, so nothing is left for its solve
    offset = [0.0]
    monkeypatch.setattr(planned_row, "time", SimpleNamespace(monotonic=lambda: time.monotonic() + offset[0]))

    def slow_same_cut(costs, *args, **kwargs):
        offset[0] += 10.0 if kwargs.get("score") is not None else 0.0  # the first search is not a round's
        return CutSearch(costs, None, None, evaluations=3, moves_kept=1, seconds=0.0)

    monkeypatch.setattr(planned_row, "refine_cut", slow_same_cut)
    solves = _spy(monkeypatch, "_solve_opplan")
    row = plan_placement(_model_job(policy=ComparePolicy(bound_round=False)), 4.0)
    assert len(solves) == 1 and row is solves[0] and offset[0] == 10.0
    cut = row.notes["cut"]
    assert isinstance(cut, dict) and cut["moves"] == 2 and cut["simulations"] == 6


def _ticking(monkeypatch) -> None:
    """The module's clock: one second later at every reading."""
    now = [0.0]

    def monotonic() -> float:
        now[0] += 1.0
        return now[0]

    monkeypatch.setattr(planned_row, "time", SimpleNamespace(monotonic=monotonic))


@pytest.mark.parametrize("fine,given", [(False, 9.0), (True, 6.0)])
def test_a_solve_is_given_its_limit_less_what_preparing_it_took(monkeypatch, fine, given):
    # readings: before the warm-start simulations, before the list schedules, after them (a second each); the
    # stage-level solve pays the list schedules (1 s), a sub-chunk one twice all of its preparation (2 x 2 s)
    _ticking(monkeypatch)
    limits: list[float] = []

    def solve(*args, **kwargs):
        limits.append(kwargs["time_limit_s"])
        return REAL_SOLVE(*args, **{**kwargs, "time_limit_s": 2.0})

    monkeypatch.setattr(planned_row, "solve_pipeline_lns", solve)
    pipe = pipeline_of(SPLIT["fixed"], 2, 4, UNIT, scales_of(UNIT)) if fine else None
    row = _solve_opplan(_fixed_job(), UNIT, [], 10.0, pipe=pipe)
    assert row.figures is not None and limits == [given]
