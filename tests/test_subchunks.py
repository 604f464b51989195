"""Operator-cluster granularity of the planned pipeline (planner/compare/subchunks.py) on the bundled MoE: sub-chunk
costs sum to their piece's, co-located hops cost nothing, the MoE all-to-alls sit where asked, and a stage-level
schedule expands into a valid sub-chunk schedule — exactly as long, on the same total work and memory, with the
all-to-alls at the piece boundaries."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from planner.compare.model_costs import model_costs
from planner.compare.subchunks import (
    auto_granularity,
    expand_schedule,
    fine_pipeline,
    moe_boundaries,
    split_piece,
    subchunk_costs,
)
from planner.pipeline.metrics import figures
from planner.pipeline.registry import GENERATORS
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import unroll_actions
from planner.schedule.actions import ActionKind
from planner.schedule.validate import validate_plan

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
HW = REPO / "hardware_profiles" / "h100-8-nvlink.yaml"
P, M = 4, 8
# (pipeline of `ModelCosts.pipeline`, a baseline that runs on it)
LAYOUTS = (("1f1b", "1f1b"), ("zb-h1", "zb-h1"), ("dualpipe", "dualpipe"), ("opplan-v", "zb-v"),
           ("opplan-v", "dualpipev"), ("interleaved-1f1b", "interleaved-1f1b"))


@pytest.fixture(scope="module")
def costs():
    from planner.cost.training_costs import training_costs
    from planner.ir.hardware import load_topology
    from planner.ir.moe_structure import find_moe_layers
    from planner.prepare import prepare

    prepared = prepare(MOE, load_topology(HW))
    inst = prepared.instance
    base = model_costs(inst, P, time_limit_s=10, training=training_costs(prepared.graph, prepared.topology, inst))
    return dataclasses.replace(base, moe=find_moe_layers(prepared.graph))


def _work(pipe) -> tuple[int, int, int]:
    return (sum(int(c.forward_tick) for c in pipe.stages), sum(int(c.input_grad_tick) for c in pipe.stages),
            sum(int(c.weight_grad_tick) for c in pipe.stages))


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("a2a_at", ["experts", "piece"])
def test_subchunk_costs_sum_to_the_piece(costs, k, a2a_at):
    order = costs.instance.topological_order
    for name in ("1f1b", "opplan-v", "dualpipe"):
        lay = costs.layout(name, P, M)
        for s, pos in enumerate(lay.pieces):
            dev = lay.stage_to_device[s]
            parts = split_piece(costs, pos, dev, k)
            assert len(parts) == min(k, len(pos)) and all(parts)
            assert tuple(i for part in parts for i in part) == tuple(pos)  # contiguous, in order, each op once
            whole = costs.stage_cost([order[i] for i in pos], dev)
            subs = subchunk_costs(costs, parts, dev, a2a_at=a2a_at)
            for field in ("forward_tick", "input_grad_tick", "weight_grad_tick", "activation_bytes",
                          "activation_freed_by_b_bytes", "param_bytes"):
                assert sum(int(getattr(c, field)) for c in subs) == int(getattr(whole, field)), field
            assert all(c.forward_tick >= 1 and c.input_grad_tick >= 1 and c.weight_grad_tick >= 1 for c in subs)
            if a2a_at == "piece":  # the piece's all-to-alls, at its boundaries: dispatch first, combine last
                assert subs[0].a2a_tick == subs[-1].a2a_tick == whole.a2a_tick
                kinds = sorted(kd for c in subs for kd in c.a2a_kind_set)
                assert kinds == (sorted(["DISPATCH_F", "COMBINE_F", "DISPATCH_B", "COMBINE_B"])
                                 if whole.a2a_tick else [])


def test_experts_get_their_own_subchunk_with_the_all_to_all(costs):
    # With a2a_at="experts" the cuts go at the MoE boundaries first: a piece holding a layer's dispatch op starts
    # a sub-chunk there, and that sub-chunk (not the attention before it) carries the all-to-all.
    names, order = costs.instance.task_names, costs.instance.topological_order
    dispatch = {n for layer in costs.moe.layers for n in layer.dispatch_ops}
    seen = 0
    for s, pos in enumerate(costs.stage_positions):
        parts = split_piece(costs, pos, s, 3)
        subs = subchunk_costs(costs, parts, s)
        bounds = moe_boundaries(costs, pos)
        for part, c in zip(parts, subs, strict=True):
            has_dispatch = any(names[order[i]] in dispatch for i in part)
            assert (c.a2a_tick > 0) == has_dispatch
            if has_dispatch and bounds:
                seen += 1
                first = pos.index(part[0])
                assert first == 0 or first in bounds  # the sub-chunk starts at a MoE boundary
        assert sum(c.a2a_tick for c in subs) >= costs.stage_cost([order[i] for i in pos], s).a2a_tick
    assert seen > 0


@pytest.mark.parametrize("a2a_at", ["experts", "piece"])
def test_colocated_hops_cost_nothing(costs, a2a_at):
    for name, _ in LAYOUTS:
        coarse = costs.pipeline(name, P, M)
        fine = fine_pipeline(costs, name, P, M, 3, a2a_at=a2a_at)
        pipe = fine.pipeline
        assert pipe.stage_to_device is not None
        for s, xs in enumerate(fine.subs):
            assert {pipe.stage_to_device[x] for x in xs} == {coarse.stage_to_device[s]}
            assert [pipe.hop_tick(x) for x in xs[:-1]] == [0] * (len(xs) - 1)
            assert pipe.hop_tick(xs[-1]) == coarse.hop_tick(s)
        # chains: each stage-level chain with every stage replaced by its sub-chunks
        assert pipe.chains == tuple(tuple(x for s in chain for x in fine.subs[s]) for chain in coarse.chains)
        sends = [a for a in unroll_actions(pipe).actions if getattr(a, "kind", None) in (ActionKind.SEND_F,
                                                                                      ActionKind.SEND_B)]
        last = {xs[-1] for xs in fine.subs}
        assert sends and all(a.stage in last or any(a.stage == xs[0] for xs in fine.subs) for a in sends)
        assert all(pipe.sends_on_stream(x, nxt) is False for xs in fine.subs for x, nxt in zip(xs, xs[1:]))


@pytest.mark.parametrize(("name", "baseline"), LAYOUTS)
@pytest.mark.parametrize("k", [2, 3])
def test_expansion_is_valid_and_equal_length(costs, name, baseline, k):
    coarse = costs.pipeline(name, P, M)
    schedule = GENERATORS[baseline](P, M)
    _, tl = simulate_pipeline(coarse, schedule)
    fc = figures(coarse, tl)
    fine = fine_pipeline(costs, name, P, M, k, a2a_at="piece")
    expanded = expand_schedule(schedule, fine)
    expanded.check_complete()
    inst, ftl = simulate_pipeline(fine.pipeline, expanded)
    validate_plan(inst, ftl.to_plan(method=baseline))
    ff = figures(fine.pipeline, ftl)
    assert ff.makespan_tick == fc.makespan_tick
    assert ff.peak_memory_bytes == fc.peak_memory_bytes and ff.param_bytes == fc.param_bytes
    # the same total work: F, B, W summed over stages, and busy time on the compute streams
    assert _work(fine.pipeline) == _work(coarse)
    assert ff.bubble_tick == fc.bubble_tick


@pytest.mark.parametrize(("name", "baseline"), LAYOUTS[2:4])
def test_expansion_with_the_all_to_all_between_subchunks_is_valid(costs, name, baseline):
    # With the all-to-alls around the experts' sub-chunk the expansion is still a valid schedule, on the same
    # work; it can only be longer: the compute stream waits for the all-to-all the stage level hid.
    coarse = costs.pipeline(name, P, M)
    schedule = GENERATORS[baseline](P, M)
    _, tl = simulate_pipeline(coarse, schedule)
    fine = fine_pipeline(costs, name, P, M, 3, a2a_at="experts")
    inst, ftl = simulate_pipeline(fine.pipeline, expand_schedule(schedule, fine))
    validate_plan(inst, ftl.to_plan(method=baseline))
    assert _work(fine.pipeline) == _work(coarse)
    assert ftl.makespan_tick >= tl.makespan_tick


def test_auto_granularity_stays_within_the_task_limit(costs):
    from planner.compare.compare_policy import ComparePolicy

    limit = ComparePolicy().fine_task_limit
    for m in (4, 16, 64):
        pipe = dataclasses.replace(costs.pipeline("dualpipe", P, M), num_microbatches=m)
        k = auto_granularity(pipe)
        assert k == 1 or 3 * k * pipe.num_stages * m <= limit
    # the policy's limit and candidates are the ones read: none fits a limit of one task, the only one fits a large
    pipe = costs.pipeline("dualpipe", P, M)
    assert auto_granularity(pipe, dataclasses.replace(ComparePolicy(), fine_task_limit=1)) == 1
    assert auto_granularity(pipe, dataclasses.replace(ComparePolicy(), auto_granularities=(5,),
                                                      fine_task_limit=10**9)) == 5


def test_the_fine_model_beats_the_stage_level_optimum():
    # The bundled MoE in 2 stages, 2 micro-batches (1F1B's placement): both models solved to proven optimality.
    # Sub-chunks (all-to-alls where the stage level has them) order the pieces' B and W finer and free
    # activations sub-chunk by sub-chunk, so the fine optimum is strictly below the stage-level one.
    from formulations.pipeline import solve_pipeline
    from planner.cost.training_costs import training_costs
    from planner.ir.hardware import load_topology
    from planner.ir.moe_structure import find_moe_layers
    from planner.prepare import prepare

    prepared = prepare(MOE, load_topology(HW))
    inst = prepared.instance
    small = dataclasses.replace(model_costs(inst, 2, time_limit_s=10, training=training_costs(
        prepared.graph, prepared.topology, inst)), moe=find_moe_layers(prepared.graph))
    coarse = solve_pipeline(small.pipeline("1f1b", 2, 2), time_limit_s=60)
    fine = fine_pipeline(small, "1f1b", 2, 2, 2, a2a_at="piece")
    sol = solve_pipeline(fine.pipeline, time_limit_s=60)
    assert coarse.status == "optimal" and sol.status == "optimal"
    assert _work(fine.pipeline) == _work(small.pipeline("1f1b", 2, 2))
    assert sol.plan.makespan_tick < coarse.plan.makespan_tick


def test_compare_reports_the_subchunk_row_on_the_baselines_basis(costs):
    # plan-compare's planned row at k = 2: the row is never longer than the stage level's (it keeps the shorter),
    # its figures count the same compute work as the baselines' (busy time on the compute streams equals
    # DualPipe's: the cut moves ops between pieces, never adds or drops work), and the table line says the
    # granularity.
    from planner.compare.pipelines import compare

    cmp = compare(P, M, costs, schedules=("dualpipe",), opplan_placement="dualpipe", time_limit_s=12,
                  granularity=2)
    row, dp = cmp.row("opplan"), cmp.row("dualpipe")
    gran = row.notes["granularity"]
    assert gran["k"] == 2 and gran["tasks"] > 0 and gran["a2a_at"] == "piece"
    assert row.figures.makespan_tick / cmp.scales.ticks_per_unit <= gran["stage_level_makespan_units"] + 1e-9
    assert row.figures.max_peak_memory_bytes <= dp.figures.max_peak_memory_bytes

    def busy(f):
        return P * f.makespan_tick - f.bubble_tick

    assert busy(row.figures) == busy(dp.figures)
    assert "granularity k = 2" in cmp.table()


def test_granularity_flag_takes_a_count_or_auto():
    import argparse

    from planner.cli_compare import parse_granularity

    assert parse_granularity("auto") is None and parse_granularity("3") == 3
    with pytest.raises(argparse.ArgumentTypeError):
        parse_granularity("0")


def test_a_stage_may_run_some_of_the_all_to_all_kinds():
    # StageCost.a2a_kinds: the dispatch before F and the combine after B only (a piece's first sub-chunk); the
    # edges F -> B and B -> W stay direct.  Without it all four, as before.
    from planner.errors import InputError
    from planner.pipeline.unroll import StageCost, TrainingPipeline

    def pipe(kinds):
        cost = StageCost(2, 2, 1, a2a_tick=3, a2a_kinds=kinds)
        return TrainingPipeline((cost,), 1, 1, (0,), ((0,),))

    un = unroll_actions(pipe(("DISPATCH_F", "COMBINE_B")))
    names = un.instance.task_names
    assert sorted(n for n in names if "DISPATCH" in n or "COMBINE" in n) == ["0COMBINE_B0", "0DISPATCH_F0"]
    edges = {(names[u], names[v]) for u, v in un.instance.edges}
    assert edges == {("0DISPATCH_F0", "0F0"), ("0F0", "0B0"), ("0B0", "0COMBINE_B0"), ("0B0", "0W0"),
                     ("0F0", "0W0")}
    assert len([n for n in unroll_actions(pipe(None)).instance.task_names if "_" in n]) == 4
    with pytest.raises(InputError, match="a2a_kinds"):
        StageCost(1, 1, 1, a2a_kinds=("SEND",))
