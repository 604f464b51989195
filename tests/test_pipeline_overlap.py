"""Overlapped F&B pairs in the pipeline formulation (formulations/pipeline.py, family 6) and `--fb-overlap`.

Bubble ratio here is the docs/architecture.md one: total idle time / (devices x makespan).  A pair lasts
round(X * (F + B [+ W when it runs the full backward])) ticks (`TrainingPipeline.pair_tick`).
"""

from __future__ import annotations

import dataclasses

import pytest

from formulations.pipeline import device_of, pair_candidates, solve_pipeline, split_start_times
from planner.compare.pipelines import compare, simulate_baseline
from planner.pipeline.generators import gpipe
from planner.pipeline.registry import Scales, UnitCosts
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import uniform_pipeline, unroll


def test_one_device_two_directions_one_microbatch_pairs_once():
    # One device holding two one-stage chains (DualPipe's placement with p = 1), one micro-batch each,
    # F = B = W = 1 tick, X = 0.5: a pair F&B lasts round(0.5 * 2) = 1, F&BW round(0.5 * 3) = 2, each saving
    # 1 tick over its halves.  Serial work 6.  No backward is ready before a forward has ended, so the first task
    # is a forward alone; the other forward is the only one left to pair: at most one pair, makespan >= 6 - 1 = 5,
    # reached e.g. by 0F0 [0,1), 1F0&0B0 [1,2), 1B0, 0W0, 1W0 -> 5.
    pipe = uniform_pipeline(2, 1, placement="dualpipe", fb_overlap=0.5)
    sol = solve_pipeline(pipe, time_limit_s=10)
    assert sol.plan.makespan_tick == 5 and sol.status == "optimal" and sol.lower_bound_tick == 5
    assert len(sol.pairs) == 1 and sol.pairs[0].startswith("1F0&0B")


def test_two_microbatches_each_way_pair_three_times():
    # Same device, two micro-batches per chain (4 F, 4 B, 4 W = 12 ticks), X = 0.5 (every pair saves 1).  The
    # first task is an unpaired forward, so at most 3 of the 4 forwards pair: makespan >= 12 - 3 = 9; reached
    # e.g. by 0F0, 1F0&0B0, 0F1&1B0, 1W0, 1F1&0B1, 1B1, 0W0, 1W1, 0W1.
    pipe = uniform_pipeline(2, 2, placement="dualpipe", fb_overlap=0.5)
    sol = solve_pipeline(pipe, time_limit_s=10)
    assert sol.plan.makespan_tick == 9 and sol.status == "optimal" and len(sol.pairs) == 3
    # without a gain (X = 1) there are no candidates and the split optimum (12 ticks of serial work) stands
    plain = uniform_pipeline(2, 2, placement="dualpipe", fb_overlap=1.0)
    inst = unroll(plain)
    assert pair_candidates(plain, inst, device_of(inst)) == []
    assert solve_pipeline(plain, time_limit_s=10).plan.makespan_tick == 12


def test_planned_pairs_replay_in_the_simulator():
    # The schedule the formulation returns, with its pairs as F&B / F&BW actions, simulates on the pipeline's own
    # instance to the same makespan (formulation and baselines share one model of pairs).
    pipe = uniform_pipeline(4, 3, placement="dualpipe", fb_overlap=0.5)
    sol = solve_pipeline(pipe, time_limit_s=5)
    assert sol.pairs and any("&" in str(a) for row in sol.schedule.actions for a in row)
    _, tl = simulate_pipeline(pipe, sol.schedule)
    assert tl.makespan_tick <= sol.plan.makespan_tick


def test_warm_start_keeps_dualpipes_pairs_when_they_gain():
    c = UnitCosts(fb_overlap=0.5)
    dp = simulate_baseline("dualpipe", 4, 8, c, Scales.of(c))
    times = split_start_times(dp.pipeline, dp.timeline)
    assert times is not None
    pairs = [k for k in times if "&" in k]
    assert pairs and all(times[k] == times[k.split("&")[0]] for k in pairs)
    sol = solve_pipeline(dp.pipeline, dp.figures.max_peak_memory_bytes, warm_start=times, time_limit_s=3)
    assert sol.plan.makespan_tick <= dp.figures.makespan_tick


@pytest.mark.parametrize("x", [0.5, 0.8])
def test_with_overlap_the_plan_is_never_longer_than_dualpipe_at_its_memory(x):
    cmp = compare(4, 8, UnitCosts(fb_overlap=x), time_limit_s=2)
    dp, opp = cmp.row("dualpipe"), cmp.row("opplan")
    assert opp.figures.max_peak_memory_bytes <= dp.figures.max_peak_memory_bytes
    assert opp.figures.makespan_tick <= dp.figures.makespan_tick


def test_overlap_fraction_is_not_lost_to_rounding():
    # X = 0.8, F = B = W = 1: F&BW of a half stage (V split) is 0.8 * 1.5 = 1.2 units; the tick scale makes it whole
    sc = Scales.of(UnitCosts(fb_overlap=0.8))
    assert (1.2 * sc.ticks_per_unit) == int(1.2 * sc.ticks_per_unit)


# ------------------------------------------------------------------------------- MoE all-to-all tasks
def _with_a2a(pipe, tick):
    return dataclasses.replace(pipe, stages=tuple(dataclasses.replace(c, a2a_tick=tick) for c in pipe.stages))


def test_a2a_tasks_wrap_forward_and_backward_on_the_comm_stream():
    pipe = _with_a2a(uniform_pipeline(2, 1), 1)
    inst = unroll(pipe)
    assert inst.device_names == ("p0", "p1", "p0/comm", "p1/comm")
    idx = inst.task_index
    assert inst.eligible(idx["1DISPATCH_F0"], 3) and inst.eligible(idx["0COMBINE_B0"], 2)
    edges = {(inst.task_names[u], inst.task_names[v]) for u, v in inst.edges}
    assert {("0DISPATCH_F0", "0F0"), ("0F0", "0COMBINE_F0"), ("0COMBINE_F0", "1DISPATCH_F0"),
            ("1COMBINE_B0", "0DISPATCH_B0"), ("0B0", "0COMBINE_B0"), ("0B0", "0W0")} <= edges
    assert ("0F0", "1F0") not in edges and ("0COMBINE_B0", "0W0") not in edges


def test_a2a_on_one_stage_hand_derived():
    # 1 stage, 1 micro-batch, F = B = W = 1, every all-to-all 1 tick.
    # GPipe (full backward BW = 2): DISPATCH_F [0,1), F [1,2), COMBINE_F [2,3), DISPATCH_B [3,4), BW [4,6),
    #   COMBINE_B [6,7) -> 7.
    # Formulation (split backward): ... DISPATCH_B [3,4), B [4,5), then COMBINE_B [5,6) and W [5,6) at once -> 6.
    pipe = _with_a2a(uniform_pipeline(1, 1), 1)
    _, tl = simulate_pipeline(pipe, gpipe(1, 1))
    assert tl.makespan_tick == 7
    sol = solve_pipeline(pipe, time_limit_s=10)
    assert sol.plan.makespan_tick == 6 and sol.status == "optimal"


def test_a2a_hides_under_other_microbatches_compute():
    # One device, two one-stage chains (two directions), two micro-batches each, F = B = W = 1, all-to-all 1:
    # 12 ticks of compute, 16 of all-to-all (4 per (stage, micro-batch)).  Run one after the other: 28.  The
    # communication stream is a lower bound (16) and the formulation reaches it: all compute hides under it.
    pipe = _with_a2a(uniform_pipeline(2, 2, placement="dualpipe"), 1)
    sol = solve_pipeline(pipe, time_limit_s=10)
    assert sol.plan.makespan_tick == 16 and sol.status == "optimal"


def test_compare_with_a2a_plans_no_longer_than_dualpipe():
    cmp = compare(4, 8, UnitCosts(a2a=0.5, fb_overlap=0.75), time_limit_s=2)
    dp, opp = cmp.row("dualpipe"), cmp.row("opplan")
    assert dp.timeline.num_devices == 8  # compute and communication streams
    assert any("DISPATCH" in p.task for p in dp.timeline.placements)
    assert opp.figures.max_peak_memory_bytes <= dp.figures.max_peak_memory_bytes
    assert opp.figures.makespan_tick <= dp.figures.makespan_tick


def test_cli_takes_fb_overlap_and_a2a(tmp_path, capsys):
    from planner.cli_compare import compare_main

    out = tmp_path / "cmp"
    rc = compare_main(["--stages", "4", "--microbatches", "8", "--fb-overlap", "0.5", "--a2a", "0.5",
                       "--time-limit", "2", "--schedules", "dualpipe,zb-v", "--no-pictures", "--out", str(out)])
    assert rc == 0
    text = (out / "compare.csv").read_text()
    assert "opplan" in text and "dualpipe" in text
    assert "opplan:" in capsys.readouterr().out
