"""The large-graph paths (graphs of 10^5 ops and more): phase 0 within the time limit, the plan file written with
one task per line, the Gantt chart of more tasks than pixels, and the plan writer's single replay — each giving
what the slow path gave.  No test here measures time: a deadline already past is what makes a step skip."""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
from checks import check_plan_valid
from matplotlib.collections import PolyCollection

import planner.search.list_scheduling as list_scheduling
from experiments.layered import layered_dag
from planner.cli import as_early_as_possible
from planner.heuristics.list_schedule import Rank, heft, upward_rank
from planner.plot import gantt_figure, merged_bars
from planner.schedule.actions import parse_action, try_parse_action
from planner.schedule.plan_io import load_plan, plan_json, plan_to_dict, save_plan
from planner.schedule.simulate import retime_plan, simulate_plan
from planner.search.list_scheduling import best_list_schedule
from planner.search.policy import SearchPolicy
from planner.solve import PhaseLog, SolveOptions, _history, plan_instance


def test_past_deadline_runs_heft_only_and_says_what_was_skipped() -> None:
    inst = layered_dag(60, 3, seed=2, comm_ratio=2.0)
    said: list[str] = []
    seconds: list[float] = []
    computed: dict[str, int] = {}
    best = best_list_schedule(inst, computed, deadline=time.monotonic() - 1.0, progress=said.append,
                               seconds=seconds)
    assert best.makespan_tick == heft(inst).makespan_tick == computed["heft"]
    assert len(seconds) == 1
    assert said == [s for s in said if "heft-sum, peft skipped for time" in s] and len(said) == 1


def test_without_deadline_phase_zero_is_unchanged() -> None:
    inst = layered_dag(60, 3, seed=2, comm_ratio=2.0)
    seconds: list[float] = []
    best = best_list_schedule(inst, seconds=seconds)
    assert len(seconds) == 3
    assert best.makespan_tick == min(heft(inst).makespan_tick, heft(inst, rank=Rank.SUM).makespan_tick,
                                     list_scheduling.peft(inst).makespan_tick)


def test_no_time_left_skips_the_bound_and_the_decomposition_but_plans() -> None:
    inst = layered_dag(200, 4, seed=3, comm_ratio=2.0)
    # every unstoppable step is estimated far above any budget: phase 0 keeps HEFT, the rest is skipped for time
    policy = dataclasses.replace(SearchPolicy(), comm_bound_cost=1e9, decomposition_cost=1e9, cluster_runs_cost=1e9)
    said: list[str] = []
    out = plan_instance(inst, SolveOptions(time_limit_s=2.0), progress=said.append, policy=policy)
    check_plan_valid(inst, out.op_plan)
    assert any("communication-aware bound skipped for time" in s for s in said)
    assert any("decomposition skipped for time" in s for s in said)
    assert out.decomposition is None
    assert any("cluster rounds skipped for time" in s for s in said) or any("meets the lower bound" in s for s in said)
    assert not out.rounds
    assert out.lower_bound_tick >= inst.trivial_lower_bound_tick()


def test_upward_rank_is_cached_but_never_shared() -> None:
    inst = layered_dag(50, 3, seed=4)
    first = upward_rank(inst)
    first[:] = -1.0  # a caller writing into its copy changes nothing for the next caller
    again = upward_rank(inst)
    assert (again >= 0).all()
    assert heft(inst).makespan_tick == heft(inst).makespan_tick


def test_plan_file_is_the_same_json(tmp_path) -> None:
    inst = layered_dag(120, 3, seed=5)
    plan = dataclasses.replace(heft(inst), clusters={"c0": ("t0", "t1")}, task_ops={"x": ("t2",)},
                               input_shapes={"x": (1, 2)}, search=(("heft", 7),))
    text = plan_json(plan)
    assert json.loads(text) == json.loads(json.dumps(plan_to_dict(plan), indent=1))
    assert text.count("\n") < 80 + len(plan.placements)  # one line per task, not one per field
    empty = dataclasses.replace(plan, placements=(), clusters={}, task_ops={})
    assert json.loads(plan_json(empty)) == plan_to_dict(empty)
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    assert load_plan(path).placements == plan.placements


def test_action_names_still_parse_and_op_names_do_not() -> None:
    for text in ("3F4", " 0BW1", "2F0&3B1", "1SEND_F2"):
        assert try_parse_action(text) == parse_action(text)
    for text in ("/layer1/attn/MatMul", "t12", "", "F4", "cluster#3"):
        assert try_parse_action(text) is None


def test_merged_bars_cover_the_same_time_per_colour() -> None:
    spans = [(0.0, 1.0), (1.0, 1.0), (2.05, 1.0), (5.0, 1.0), (6.0, 1.0)]
    colours = ["a", "a", "a", "b", "a"]
    merged, merged_colours = merged_bars(spans, colours, gap=0.1)
    assert merged == [(0.0, 3.05), (5.0, 1.0), (6.0, 1.0)]
    assert merged_colours == ["a", "b", "a"]
    assert merged_bars(spans, colours, gap=-1.0) == (spans, colours)  # nothing closer than a negative gap


def test_dense_gantt_draws_fewer_bars_than_tasks() -> None:
    inst = layered_dag(3000, 2, seed=6)
    timeline = simulate_plan(inst, heft(inst))
    fig = gantt_figure(timeline, show_memory=False)
    tall = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)
            and any(np.ptp(p.vertices[:, 1]) > 0.5 for p in c.get_paths())]  # task bars, not the transfers
    bars = sum(len(c.get_paths()) for c in tall)
    assert len(tall) == timeline.num_devices
    assert 0 < bars < inst.num_tasks


def test_writer_replays_once_and_states_the_replayed_times() -> None:
    inst = layered_dag(150, 3, seed=7, comm_ratio=2.0)
    plan = heft(inst)
    kept, timeline = as_early_as_possible(plan, inst)
    replay = simulate_plan(inst, kept)
    assert [(p.device, p.start_tick, p.end_tick) for p in timeline.placements] == \
        [(p.device, p.start_tick, p.end_tick) for p in replay.placements]
    assert kept.makespan_tick <= plan.makespan_tick
    assert retime_plan(plan, inst).makespan_tick == timeline.makespan_tick


def test_assignment_search_is_skipped_when_its_setup_would_overrun() -> None:
    inst = layered_dag(200, 4, seed=3, comm_ratio=2.0)
    said: list[str] = []
    out = plan_instance(inst, SolveOptions(time_limit_s=8.0), progress=said.append,
                        policy=dataclasses.replace(SearchPolicy(), assignment_start_cost=1e9))
    check_plan_valid(inst, out.op_plan)
    assert any("assignment search skipped for time" in s for s in said) or any("meets the lower bound" in s
                                                                                for s in said)
    assert all(p.source != "assignment search" for p in out.phases)


def test_found_by_line_says_what_each_step_took_off() -> None:
    line = _history([PhaseLog("heft", 1000, 0.1), PhaseLog("decomposition", 900, 1.0),
                     PhaseLog("assignment search", 899, 2.0)], lambda t: f"{t // 100}00 tick")
    # the last step's gain is visible although its time rounds to the previous one's
    assert line == "heft 1000 tick -> decomposition 900 tick (-10%) -> assignment search 800 tick (-0.11%)"
