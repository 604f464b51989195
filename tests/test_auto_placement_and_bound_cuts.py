"""The planned pipeline's placement choice (`compare(opplan_placement="auto")`: one placement alone when it has both
the shortest warm start and the lowest bound) and the cut rounds scored by the cut's bound
(`refine_cut(score="bound")`, `pipeline_device_bound`)."""

from __future__ import annotations

import time

import pytest
from instances import moe_model_costs, uneven_cut

from formulations.pipeline import pipeline_device_bound, prepare_pipeline
from planner.compare.baselines import SPLIT, WARM_FROM, pipeline_of, scales_of, simulate_baseline
from planner.compare.compare_policy import ComparePolicy
from planner.compare.cut_search import refine_cut, single_moves, with_cut
from planner.compare.pipelines import compare
from planner.compare.placement_choice import choose
from planner.errors import OpplanError
from planner.pipeline.registry import GENERATORS, UnitCosts, pipeline_for
from planner.schedule.validate import validate_plan

P, M = 4, 8


@pytest.fixture(scope="module")
def costs():
    return moe_model_costs(P)


def _signals(p, m, costs):
    """Per placement (dualpipe, v): the shortest baseline within DualPipe's peak and the formulation's bound on
    the baselines' cut, computed here without `_dominant`."""
    sc = scales_of(costs)
    cap = simulate_baseline("dualpipe", p, m, costs, sc).figures.max_peak_memory_bytes
    out = {}
    for pl in ("dualpipe", "v"):
        rows = [simulate_baseline(n, p, m, costs, sc) for n in WARM_FROM[pl]]
        warm = min(r.figures.makespan_tick for r in rows if r.figures.max_peak_memory_bytes <= cap)
        out[pl] = (warm, prepare_pipeline(pipeline_of(SPLIT[pl], p, m, costs, sc), cap).trivial_tick)
    return out


def test_device_bound_without_pairs_is_the_solve_s_trivial_bound(costs):
    tick = scales_of(UnitCosts(f=1, b=1, w=1)).ticks_per_unit
    unit = pipeline_for("dualpipe", 4, 8, UnitCosts(f=1, b=1, w=1), scales_of(UnitCosts(f=1, b=1, w=1)))
    for pipe in (unit, costs.pipeline("dualpipe", P, M), costs.pipeline("zb-v", P, M)):
        bound, parts = pipeline_device_bound(pipe)
        assert bound == prepare_pipeline(pipe).trivial_tick
        assert len(parts) == pipe.num_devices and max(parts) <= bound
    # unit p = 4, m = 8, DualPipe's placement, F = B = W = 1: device 0 starts at 0 and does 2 stages x 4
    # micro-batches x (F + B + W) = 24; device 1 waits for one forward (head 1) and does 24 too: 25 (the proven
    # optimum of the Benchmarks table)
    assert pipeline_device_bound(unit) == (25 * tick, tuple(x * tick for x in (24, 25, 25, 24)))
    paired = UnitCosts(f=1, b=1, w=1, fb_overlap=0.5)
    with pytest.raises(OpplanError, match="pairs"):
        pipeline_device_bound(pipeline_for("dualpipe", 4, 8, paired, scales_of(paired)))


def test_auto_solves_the_dominant_placement_alone_and_both_when_the_signals_disagree():
    # unit costs with DualPipe's overlapped pairs and all-to-alls, p = 4, m = 8: DualPipe's placement has the
    # shorter warm start (35 against ZB-V's 37.25) and the lower bound (20.5 against 22.25): solved alone
    paired = UnitCosts(f=1, b=1, w=1, fb_overlap=0.5, a2a=0.5)
    sig = _signals(4, 8, paired)
    assert sig["dualpipe"][0] < sig["v"][0] and sig["dualpipe"][1] < sig["v"][1]
    cmp = compare(4, 8, paired, schedules=("dualpipe", "zb-v", "dualpipev"), time_limit_s=4)
    opp = cmp.row("opplan")
    assert list(opp.notes["tried"]) == ["dualpipe"]
    assert "dualpipe alone" in str(opp.notes["placement_why"]) and "dualpipe alone" in cmp.table()
    assert opp.figures.max_peak_memory_bytes <= cmp.row("dualpipe").figures.max_peak_memory_bytes
    # the old auto, kept as "both": every placement, half the time each
    both = compare(4, 8, paired, schedules=("dualpipe", "zb-v", "dualpipev"), time_limit_s=4,
                   opplan_placement="both")
    assert sorted(both.row("opplan").notes["tried"]) == ["dualpipe", "v"]
    # plain unit costs: ZB-V's warm start is shorter (25.5 < 26) but DualPipe's bound is lower (25 < 25.5), so
    # auto solves both (and DualPipe's placement reaches the proven 25)
    unit = UnitCosts(f=1, b=1, w=1)
    sig = _signals(4, 8, unit)
    assert sig["v"][0] < sig["dualpipe"][0] and sig["dualpipe"][1] < sig["v"][1]
    cmp = compare(4, 8, unit, schedules=("dualpipe", "zb-v", "dualpipev"), time_limit_s=4)
    opp = cmp.row("opplan")
    assert sorted(opp.notes["tried"]) == ["dualpipe", "v"]
    assert "disagree" in str(opp.notes["placement_why"])
    with pytest.raises(OpplanError, match="both"):
        compare(4, 8, unit, time_limit_s=1, opplan_placement="nowhere")


def test_the_bound_score_ends_at_a_local_optimum_of_the_cut_s_bound(costs):
    uneven = with_cut(costs, 1, uneven_cut(costs, 12))
    refs = [GENERATORS["dualpipe"](P, M)]
    start_bound, _ = pipeline_device_bound(uneven.pipeline("dualpipe", P, M))
    got = refine_cut(uneven, 1, "dualpipe", P, M, refs, None, deadline_s=time.monotonic() + 300,
                     max_evaluations=100_000, score="bound")
    end_bound, parts = pipeline_device_bound(got.costs.pipeline("dualpipe", P, M))
    assert got.best is not None and got.best.bound_tick == end_bound and got.best.bound_parts == parts
    assert end_bound < start_bound  # the uneven cut's bound comes down
    # no single move from the final cut lowers the bound (the search ran to its end, not to a limit)
    final = got.costs.stage_positions
    for cand in single_moves(final, range(len(final))):
        assert pipeline_device_bound(with_cut(costs, 1, cand).pipeline("dualpipe", P, M))[0] >= end_bound
    # the makespan score (the default) ranks cuts by the replay and computes no bound
    by_replay = refine_cut(uneven, 1, "dualpipe", P, M, refs, None, deadline_s=time.monotonic() + 300,
                           max_evaluations=100_000)
    assert by_replay.best is not None and by_replay.best.bound_tick is None
    with pytest.raises(OpplanError, match="score"):
        refine_cut(uneven, 1, "dualpipe", P, M, refs, None, deadline_s=time.monotonic() + 1, score="nothing")


def test_a_round_by_the_bound_follows_a_solve_at_its_cut_s_bound(costs):
    # the bundled MoE at p = 4, m = 8 on DualPipe's placement: small enough that the first solve closes its gap
    # within seconds, so the next cut round is scored by the bound; every schedule stays valid and within the cap
    moe = costs
    cmp = compare(P, M, moe, schedules=("dualpipe",), opplan_placement="dualpipe", time_limit_s=20)
    opp = cmp.row("opplan")
    cut = opp.notes["cut"]
    assert cut["bound_rounds"] >= 1, opp.notes
    assert opp.figures.max_peak_memory_bytes <= cmp.row("dualpipe").figures.max_peak_memory_bytes
    from planner.pipeline.streams import simulate_pipeline

    inst, tl = simulate_pipeline(opp.pipeline, opp.schedule)
    validate_plan(inst, tl.to_plan(method="opplan"))
    off = compare(P, M, moe, schedules=("dualpipe",), opplan_placement="dualpipe", time_limit_s=20,
                  policy=ComparePolicy(bound_round=False))
    assert off.row("opplan").notes["cut"]["bound_rounds"] == 0


def test_a_bound_lower_by_a_small_part_of_the_gap_does_not_split_the_time():
    # the preset at p = 16 (ms x 100 ticks): DualPipe's placement has the shorter list schedule (7175 against 7324)
    # and a bound 0.2 % above the V's (5670 against 5660), 10 ms against its 1505 ms gap: solved alone
    warm, bound = {"dualpipe": 717539, "v": 732430}, {"dualpipe": 566993, "v": 566023}
    assert choose(["dualpipe", "v"], warm, bound) == \
        ("dualpipe", "dualpipe alone, the shortest warm start, its bound within 5% of its gap of the lowest")
    # the unit rows: the V's warm start is its bound (no gap), DualPipe's bound lower: both
    assert choose(["dualpipe", "v"], {"dualpipe": 26, "v": 25.5}, {"dualpipe": 25, "v": 25.5})[0] is None
    # a bound lower by more than the tie: both
    assert choose(["dualpipe", "v"], {"dualpipe": 100, "v": 110}, {"dualpipe": 90, "v": 89})[0] is None
    assert choose(["dualpipe", "v"], {"dualpipe": 100, "v": 110}, {"dualpipe": 90, "v": 89.6})[0] == "dualpipe"
    # the plain rule first; with no warm start anywhere (every one inf) the plain rule takes the lowest bound
    assert choose(["dualpipe", "v"], warm, {"dualpipe": 1, "v": 2})[1].endswith("and the lowest bound")
    inf = float("inf")
    assert choose(["dualpipe", "v"], {"dualpipe": inf, "v": inf}, {"dualpipe": 3, "v": 2}) == \
        ("v", "v alone, the shortest warm start and the lowest bound")


def test_auto_hands_its_list_schedules_to_the_solve(monkeypatch):
    # unit costs with pairs and all-to-alls (communication streams): the placement choice computes each placement's
    # list schedule once, and the solve of the chosen placement (same pipeline) takes it instead of computing again
    import planner.compare.placement_choice as choice
    import planner.compare.planned_row as planned

    paired = UnitCosts(f=1, b=1, w=1, fb_overlap=0.5, a2a=0.5)
    seen: list[int] = []
    real = choice.best_stream_list
    monkeypatch.setattr(choice, "best_stream_list", lambda pipe, cap: seen.append(pipe.num_stages) or real(pipe, cap))

    def recomputed(*_args, **_kwargs):
        raise AssertionError("the solve computed the list schedule again")
    monkeypatch.setattr(planned, "best_greedy", recomputed)
    cmp = compare(4, 8, paired, schedules=("dualpipe", "zb-v", "dualpipev"), time_limit_s=4)
    opp = cmp.row("opplan")
    assert sorted(seen) == [8, 8]  # DualPipe's placement (2 x 4 stages) and the V (8 chunks), once each
    assert list(opp.notes["tried"]) == ["dualpipe"] and opp.notes["warm_start"] == "greedy"
