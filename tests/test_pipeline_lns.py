"""The large-neighbourhood search over pipeline schedules (`planner.search.pipeline`): it never
returns a longer or an invalid schedule, keeps every memory cap, keeps the incumbent's pairs, works with
communication streams, and is wired into plan-compare.  Small cases only; nothing here asserts on speed."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from random_pipelines import uneven_pipeline

import formulations.pipeline_step as step_module
import planner.compare.planned_row as planned_row_module
import planner.search.pipeline.solve as solve_module
from formulations.backends import get_backend
from formulations.model_api import SolveParams
from formulations.pipeline import finish_pipeline, prepare_pipeline, split_start_times
from formulations.pipeline_units import Units, in_order
from planner.cli_compare import compare_main
from planner.compare.pipelines import compare, simulate_baseline
from planner.compare.presets import preset_costs
from planner.data import PROFILES_DIR
from planner.errors import OpplanError
from planner.ir.hardware import load_topology
from planner.pipeline.generators import gpipe
from planner.pipeline.metrics import figures
from planner.pipeline.registry import Scales, UnitCosts
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import uniform_pipeline
from planner.schedule.plan import PlanStatus
from planner.search.pipeline.lns import improve_pipeline
from planner.search.pipeline.neighbourhoods import KINDS, critical_chain, neighbourhood
from planner.search.pipeline.policy import PipelineLnsPolicy, PipelineSearchPolicy
from planner.search.pipeline.solve import solve_pipeline_lns


def _baseline(name: str, p: int, m: int, costs: UnitCosts):
    row = simulate_baseline(name, p, m, costs, Scales.of(costs))
    return row.pipeline, row.timeline, row.figures


def _check(setup, result, cap) -> None:
    """The search's schedule: no longer than its start, no step ever longer, valid, and within every cap."""
    assert result.best_tick <= result.start_tick
    assert all(s.after_tick <= s.before_tick for s in result.steps)
    sol = finish_pipeline(setup, result.times, 0, PlanStatus.FEASIBLE, solver="test", solver_version="",
                          started_s=0.0, time_to_best_s=0.0)  # validates the plan (precedence, streams)
    assert sol.plan.makespan_tick == result.best_tick
    fig = figures(setup.pipeline, sol.timeline)
    assert all(peak <= c for peak, c in zip(fig.peak_memory_bytes, cap, strict=True))


@pytest.mark.parametrize("fix_untouched", [False, True])
@pytest.mark.parametrize("placement,seed", [("fixed", 0), ("v", 1), ("dualpipe", 2)])
def test_never_longer_valid_and_within_the_memory_cap(placement, seed, fix_untouched):
    p, m = 3, 6
    pipe = uneven_pipeline(2 * p if placement != "fixed" else p, m, placement, seed)
    heaviest = max(int(c.activation_bytes) for c in pipe.stages)
    per_device = 2 if placement != "fixed" else 1  # stages per device
    cap = [3 * per_device * heaviest] * p  # binds: about three micro-batches of the heaviest stages in flight
    setup = prepare_pipeline(pipe, cap)  # warm start: the greedy list schedule under the cap
    assert setup.known is not None
    result = improve_pipeline(setup, setup.known, time_limit_s=60, policy=PipelineLnsPolicy(step_s=5), max_steps=12,
                              seed=seed, fix_untouched=fix_untouched)
    assert len(result.steps) >= 1
    _check(setup, result, cap)


def test_fixed_streams_keep_their_times_and_only_the_touched_streams_are_modelled():
    # DualPipe with all-to-alls (compute and communication streams) under a binding cap: a ``devices``
    # neighbourhood touches two devices' streams; with fix_untouched the other streams' middles are fixed (region
    # "f", no variables), and the step's schedule, replayed, keeps every fixed stream's order, is valid and fits.
    costs = UnitCosts(f=1, b=2, w=1, a2a=0.5)
    pipe, tl, fig = _baseline("dualpipe", 4, 8, costs)
    cap = [fig.max_peak_memory_bytes] * 4
    setup = prepare_pipeline(pipe, cap, warm_start=split_start_times(pipe, tl))
    assert setup.known is not None
    units = Units(setup, setup.known.pairs)
    order = units.order(setup.known.start)
    start, tail = units.replay(order)  # type: ignore[misc]
    free = frozenset(units.rep[t] for t in neighbourhood("devices", setup, units.times(start), 12,
                                                          random.Random(1)))
    touched = {units.stream[r] for r in free}
    sizes = {}
    for fix in (False, True):
        builder = get_backend("cpsat").new_builder()
        step = step_module._step_model(units, builder, start, tail, order, free, True, fix)
        assert step is not None
        sizes[fix] = len(step.start)
        fixed = [r for r, g in step.region.items() if g == "f"]
        assert bool(fixed) == fix and all(units.stream[r] not in touched for r in fixed)
        assert all(units.stream[r] in touched for r in step.start) or not fix
    assert sizes[True] < sizes[False]
    for seed in range(3):
        result = improve_pipeline(setup, setup.known, time_limit_s=60, policy=PipelineLnsPolicy(step_s=5),
                                  max_steps=8, seed=seed, kinds=("devices",), fix_untouched=True)
        _check(setup, result, cap)


def test_a_poor_order_is_improved_and_the_step_log_says_so():
    # Two stages, two micro-batches, F = B = W = 1, GPipe's order (every F, then every backward B W): device 1
    # runs F0 [1,2), F1 [2,3), B0 W0 [3,5), B1 W1 [5,7); device 0 idles from 2 to 5 and ends at 9.  Running W0 on
    # device 1 after B1 (so that B1 reaches device 0 sooner) does better.  One neighbourhood holds all 12 tasks
    # (`PipelineLnsPolicy.initial_size` > 12), so the first step solves the whole instance.
    pipe = uniform_pipeline(2, 2)
    _, tl = simulate_pipeline(pipe, gpipe(2, 2))
    setup = prepare_pipeline(pipe, warm_start=split_start_times(pipe, tl))
    assert setup.known is not None and setup.makespan_tick(setup.known) == 9
    seen = []
    result = improve_pipeline(setup, setup.known, time_limit_s=60, policy=PipelineLnsPolicy(step_s=30), max_steps=3,
                              progress=seen.append)
    assert result.best_tick < 9 and result.gains >= 1 and seen and seen[0].gained
    assert result.time_to_best_s >= 0
    _check(setup, result, [2**40] * 2)


def test_pairs_are_kept_and_the_schedule_stays_valid():
    # DualPipe's own setting: F&B pairs at X = 0.5 on DualPipe's two-direction placement; the search keeps them.
    costs = UnitCosts(fb_overlap=0.5)
    pipe, tl, fig = _baseline("dualpipe", 4, 8, costs)
    cap = [fig.max_peak_memory_bytes] * 4
    setup = prepare_pipeline(pipe, cap, warm_start=split_start_times(pipe, tl))
    assert setup.known is not None and setup.known.pairs
    result = improve_pipeline(setup, setup.known, time_limit_s=60, policy=PipelineLnsPolicy(step_s=5), max_steps=10)
    assert result.times.pairs == setup.known.pairs
    _check(setup, result, cap)


def test_communication_streams_all_to_all_and_pairs():
    costs = UnitCosts(a2a=0.5, fb_overlap=0.75)
    pipe, tl, fig = _baseline("dualpipe", 4, 8, costs)
    assert pipe.streams_on
    cap = [fig.max_peak_memory_bytes] * 4
    setup = prepare_pipeline(pipe, cap, warm_start=split_start_times(pipe, tl))
    assert setup.known is not None and max(setup.device) >= 4  # tasks on the communication streams
    result = improve_pipeline(setup, setup.known, time_limit_s=60, policy=PipelineLnsPolicy(step_s=5), max_steps=10)
    _check(setup, result, cap)


def test_replay_keeps_each_streams_order_and_is_never_longer():
    pipe, tl, _ = _baseline("zb-v", 3, 6, UnitCosts(f=1, b=2, w=1))
    setup = prepare_pipeline(pipe, warm_start=split_start_times(pipe, tl))
    assert setup.known is not None
    units = Units(setup, setup.known.pairs)
    order = units.order(setup.known.start)
    timed = units.replay(order)
    assert timed is not None
    start, tail = timed
    assert units.order(start) == order
    again = units.times(start)
    assert setup.makespan_tick(again) <= setup.makespan_tick(setup.known)
    assert max(tail) == setup.makespan_tick(again)  # the longest tail runs from time 0 to the end


def test_neighbourhoods_have_their_size_and_the_critical_chain_is_tight():
    pipe = uneven_pipeline(6, 6, "v", 4)
    setup = prepare_pipeline(pipe)
    assert setup.known is not None
    units = Units(setup, setup.known.pairs)
    start, _ = units.replay(units.order(setup.known.start))  # type: ignore[misc]
    times = units.times(start)
    rng = random.Random(0)
    for kind in KINDS:
        free = neighbourhood(kind, setup, times, 10, rng)
        assert 1 <= len(free) <= 10
    chain = critical_chain(setup, times)
    ends = setup.ends(times)
    assert ends[chain[-1]] == setup.makespan_tick(times)
    assert all(ends[a] <= times.start[b] for a, b in zip(chain, chain[1:]))
    by_start = sorted(range(len(times.start)), key=lambda t: (times.start[t], t))
    count = math.ceil(PipelineLnsPolicy().ends_share * len(by_start))
    assert count > 10  # the ends are larger than the drawn kinds' size
    assert neighbourhood("head", setup, times, 10, rng) == frozenset(by_start[:count])  # the fill
    assert neighbourhood("tail", setup, times, 10, rng) == frozenset(by_start[-count:])  # the drain
    with pytest.raises(ValueError):
        neighbourhood("nowhere", setup, times, 10, rng)


def test_same_seed_same_schedule():
    pipe = uneven_pipeline(3, 6, "fixed", 5)
    setup = prepare_pipeline(pipe)
    assert setup.known is not None
    runs = [improve_pipeline(setup, setup.known, time_limit_s=120, policy=PipelineLnsPolicy(step_s=60), max_steps=6,
                             seed=3, threads=1)
            for _ in range(2)]
    assert runs[0].times == runs[1].times and runs[0].best_tick == runs[1].best_tick


@pytest.mark.parametrize("deterministic", [True, False])
def test_each_step_solves_in_the_mode_asked(monkeypatch, deterministic):
    # the search's `deterministic` reaches every step's CP-SAT parameters (the half's search asks for the default
    # portfolio, `HalfSearchPolicy.deterministic`; other searches keep the deterministic mode); either way the
    # schedule is valid
    pipe = uneven_pipeline(3, 6, "fixed", 5)
    heaviest = max(int(c.activation_bytes) for c in pipe.stages)
    cap = [3 * heaviest] * 3
    setup = prepare_pipeline(pipe, cap)
    assert setup.known is not None
    asked: list = []

    def params(**kwargs):
        asked.append(kwargs["deterministic"])
        return SolveParams(**kwargs)

    monkeypatch.setattr(step_module, "SolveParams", params)
    result = improve_pipeline(setup, setup.known, time_limit_s=60, policy=PipelineLnsPolicy(step_s=2), max_steps=4,
                              threads=2, deterministic=deterministic)
    assert asked and asked == [deterministic] * len(result.steps)
    _check(setup, result, cap)


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_full_solves_and_the_steps_run_in_the_policys_mode(monkeypatch, deterministic):
    # `PipelineSearchPolicy.deterministic` reaches every CP-SAT solve of the call: the full model's and each step's
    # (plan-compare's planned row keeps the default, the deterministic mode: `ComparePolicy.search`)
    import formulations.backends.cpsat as cpsat
    from planner.compare.compare_policy import ComparePolicy
    from planner.search.pipeline.policy import PipelineSearchPolicy

    asked: list[bool] = []
    real = cpsat.CpSatBuilder.solve

    def spy(self, params):
        asked.append(params.deterministic)
        return real(self, params)

    monkeypatch.setattr(cpsat.CpSatBuilder, "solve", spy)
    pipe = uneven_pipeline(3, 4, "fixed", 3)
    # the search from the warm start at once (a size limit lowered below the pipeline's), then the stalled search's
    # hand-back to the full model
    policy = PipelineSearchPolicy(stall_steps=1, full_solve_max_tasks=10, deterministic=deterministic)
    sol, lns = solve_pipeline_lns(pipe, time_limit_s=30, lns_share=0.5, threads=1, policy=policy)
    assert lns is not None and lns.steps and lns.resolve is not None
    assert len(asked) > len(lns.steps) and set(asked) == {deterministic}
    assert sol.lower_bound_tick <= sol.plan.makespan_tick
    assert PipelineSearchPolicy().deterministic and ComparePolicy().search.deterministic


@pytest.mark.parametrize("fifo_inside", [True, False])
def test_solve_with_search_bound_never_above_the_makespan(fifo_inside):
    pipe = uneven_pipeline(6, 8, "v", 6)
    sol, lns = solve_pipeline_lns(pipe, time_limit_s=4, lns_share=0.5, fifo_inside=fifo_inside)
    assert sol.lower_bound_tick <= sol.plan.makespan_tick
    assert (sol.status == "optimal") == (sol.lower_bound_tick >= sol.plan.makespan_tick)
    if lns is not None:
        assert sol.plan.makespan_tick <= lns.best_tick <= lns.start_tick
        assert lns.best_tick == sol.plan.makespan_tick or lns.resolve is not None  # only the second full solve
        if lns.resolve is not None:
            assert lns.resolve[1] == sol.plan.makespan_tick
        setup = prepare_pipeline(pipe)
        # out of micro-batch order inside a neighbourhood or not, the schedule comes back in order (renamed when
        # the search left it: no pairs here), so the full solve's bound holds for it
        assert not setup.pairs and lns.in_order and in_order(setup, lns.times)


def test_a_stalled_search_hands_its_time_back_to_the_full_model(monkeypatch):
    """The first full solve is forced to stop at its warm start with only the trivial bound (what a time limit does
    on a large model); the search then stalls at once (`stall_steps` = 1 here) and the full model, solved again
    from the search's schedule with the time left, proves this small pipeline optimal."""
    pipe = uneven_pipeline(3, 4, "fixed", 3)
    real = solve_module.solve_formulation
    calls: list[int] = []

    def cut_short(formulation, **kw):
        calls.append(1)
        if len(calls) == 1:  # the first full solve: no search at all, the warm start back
            return dataclasses.replace(real(formulation, **dict(kw, time_limit_s=0.0)), status=PlanStatus.FEASIBLE,
                                       lower_bound_tick=kw["lower_bound_tick"])
        return real(formulation, **kw)

    monkeypatch.setattr(solve_module, "solve_formulation", cut_short)
    sol, lns = solve_pipeline_lns(pipe, time_limit_s=30, lns_share=0.5, threads=1,
                                  policy=PipelineSearchPolicy(stall_steps=1))
    assert len(calls) == 2 and lns is not None and lns.resolve is not None and lns.after_full_solve
    assert lns.resolve[1] == sol.plan.makespan_tick <= lns.best_tick
    assert sol.status == PlanStatus.OPTIMAL and sol.lower_bound_tick == sol.plan.makespan_tick


def test_a_pipeline_above_the_size_limit_starts_the_search_from_its_warm_start(monkeypatch):
    """Above `full_solve_max_tasks` (lowered here) the first full solve is skipped: the search starts from the warm
    start itself and the bound is the setup's trivial bound; the full model runs only as the stalled search's
    hand-back (`stall_steps` = 1 here), which then proves this small pipeline optimal."""
    pipe = uneven_pipeline(3, 4, "fixed", 3)
    setup = prepare_pipeline(pipe)
    assert setup.known is not None and setup.tasks.instance.num_tasks > 10
    real = solve_module.solve_formulation
    calls: list[float] = []

    def counted(formulation, **kw):
        calls.append(kw["lower_bound_tick"])
        return real(formulation, **kw)

    monkeypatch.setattr(solve_module, "solve_formulation", counted)
    sol, lns = solve_pipeline_lns(pipe, time_limit_s=30, lns_share=0.5, threads=1,
                                  policy=PipelineSearchPolicy(stall_steps=1, full_solve_max_tasks=10))
    assert lns is not None and lns.start_tick == setup.makespan_tick(setup.known)  # no full solve before it
    assert not lns.after_full_solve
    assert len(calls) == 1 and lns.resolve is not None  # the hand-back only
    assert sol.status == PlanStatus.OPTIMAL and sol.lower_bound_tick == sol.plan.makespan_tick


def test_compare_reports_the_search_and_prints_its_gains():
    lines: list[str] = []
    cmp = compare(4, 8, UnitCosts(f=1, b=2, w=1), time_limit_s=6, progress=lines.append)
    opp, dp = cmp.row("opplan"), cmp.row("dualpipe")
    assert opp.figures.max_peak_memory_bytes <= dp.figures.max_peak_memory_bytes
    lns = opp.notes["lns"]
    placement = opp.notes["placement"]
    if lns is not None:  # None when the full model proved its schedule optimal
        assert lns["to_units"] <= lns["from_units"] and "neighbourhood search" in cmp.table()
        # one line per gain of the kept placement's search (unit costs: no cut rounds, one solve per placement)
        assert sum(f"neighbourhood search ({placement})" in x for x in lines) == lns["gains"]
    # every solved placement opens with its warm start and time, the auto choice is told, and the full model's
    # incumbents come as lines, never worse than the line before nor than the warm start
    assert any(x.strip().startswith("auto: ") for x in lines)
    for pl in opp.notes["tried"]:
        opening = [x for x in lines if f"planned row ({pl}): starts from " in x]
        assert len(opening) == 1 and "s to solve" in opening[0]
        warm = float(opening[0].split("(")[2].split()[0])
        seen = [float(x.split("incumbent ")[1].split()[0]) for x in lines if f"full model ({pl}):" in x]
        assert seen and seen == sorted(seen, reverse=True) and len(set(seen)) == len(seen) and seen[0] <= warm
    off = compare(4, 8, UnitCosts(f=1, b=2, w=1), time_limit_s=2, lns_share=0.0, schedules=("dualpipe",))
    assert off.row("opplan").notes["lns"] is None and "neighbourhood search" not in off.table()


def test_cli_takes_lns_share(tmp_path, capsys):
    assert compare_main(["--stages", "2", "--microbatches", "4", "--time-limit", "2", "--lns-share", "0.5",
                         "--schedules", "1f1b,dualpipe", "--no-pictures", "--out", str(tmp_path)]) == 0
    assert "opplan" in capsys.readouterr().out
    try:
        rc = compare_main(["--stages", "2", "--microbatches", "4", "--lns-share", "1.5", "--out", str(tmp_path)])
    except SystemExit as exc:  # argparse refuses the value
        rc = exc.code
    assert rc != 0


@pytest.mark.parametrize("mode,reorder", [("reorder", True), ("in-order", False)])
def test_compare_passes_the_search_mode(monkeypatch, mode, reorder):
    costs = UnitCosts(f=1, b=2, w=1)
    seen: list[dict] = []
    real = planned_row_module.solve_pipeline_lns

    def spy(*args, **kw):
        seen.append(kw)
        return real(*args, **kw)

    monkeypatch.setattr(planned_row_module, "solve_pipeline_lns", spy)
    cmp = compare(4, 8, costs, time_limit_s=2, lns_mode=mode, schedules=("dualpipe", "zb-v"))
    opp, dp = cmp.row("opplan"), cmp.row("dualpipe")
    assert opp.figures.max_peak_memory_bytes <= dp.figures.max_peak_memory_bytes
    assert seen and all(kw["fifo_inside"] is (not reorder) and kw["fix_untouched"] is reorder for kw in seen)


def test_compare_keeps_order_by_default_reorders_a_preset_when_asked_and_refuses_an_unknown_mode(monkeypatch):
    seen: list[dict] = []
    real = planned_row_module.solve_pipeline_lns
    monkeypatch.setattr(planned_row_module, "solve_pipeline_lns", lambda *a, **kw: seen.append(kw) or real(*a, **kw))
    costs = preset_costs("deepseek-v3", load_topology(PROFILES_DIR / "h100-2x8-ib.yaml"), 2, num_layers=4)
    compare(2, 4, costs, time_limit_s=2, schedules=("dualpipe",))
    assert seen and all(kw["fifo_inside"] is True and kw["fix_untouched"] is False for kw in seen)
    seen.clear()
    cmp = compare(2, 4, costs, time_limit_s=2, schedules=("dualpipe",), lns_mode="reorder")
    assert not cmp.row("opplan").skipped
    assert seen and all(kw["fifo_inside"] is False and kw["fix_untouched"] is True for kw in seen)
    with pytest.raises(OpplanError):
        compare(2, 4, UnitCosts(), time_limit_s=1, lns_mode="sideways")


def test_cli_takes_lns_mode(tmp_path, capsys):
    assert compare_main(["--stages", "2", "--microbatches", "4", "--time-limit", "2", "--lns-mode", "reorder",
                         "--schedules", "1f1b,dualpipe", "--no-pictures", "--out", str(tmp_path)]) == 0
    assert "opplan" in capsys.readouterr().out


def test_warm_placement_solves_only_the_placement_whose_baselines_run_shortest():
    # unit costs, p = 4, m = 8: DualPipe (the dualpipe placement's baseline) runs shorter than ZB-V and DualPipeV
    costs = UnitCosts(f=1, b=1, w=1)
    base = {n: simulate_baseline(n, 4, 8, costs, Scales.of(costs)) for n in ("dualpipe", "zb-v", "dualpipev")}
    dual = base["dualpipe"].figures.makespan_tick
    v = min(base["zb-v"].figures.makespan_tick, base["dualpipev"].figures.makespan_tick)
    cmp = compare(4, 8, costs, time_limit_s=2, opplan_placement="warm")
    opp = cmp.row("opplan")
    assert list(opp.notes["tried"]) == [opp.notes["placement"]]
    assert opp.notes["placement"] == ("dualpipe" if dual <= v else "v")
    assert opp.figures.max_peak_memory_bytes <= cmp.row("dualpipe").figures.max_peak_memory_bytes
