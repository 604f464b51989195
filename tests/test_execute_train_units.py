"""Operator-level pipeline training: the model cut into operator clusters (attention | dispatch | experts | combine),
sub-chunks of one device handing over locally, and planned schedules of those sub-chunks run on gloo ranks.

Tolerance: that of planner/execute/train/reference.py (|got - want| <= 1e-7 + 1e-5 |want| elementwise, fp32; the
loss to 1e-6 relative).  Run with ``-s`` to see each case's schedule and measured errors.

Planned cases: `formulations.pipeline.solve_pipeline` (CP-SAT, one thread, 30 s limit — it proves optimality in
about 0.1 s (fixed) and 2 s (V) here — micro-batch order left free: ``fifo=False``) on the `TrainingPipeline` of
`planner.execute.train.unit_costs.training_pipeline`: the test model's 16 units cut by `balanced_cut` of their
F + B + W FLOPs into 2K stages (p = 2, K = 2), F, B, W by the matrix-product rule from FlopCounterMode's forward
FLOPs, local hops 0 ticks, cross-device hops 1 tick, no memory cap, m = 4.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from planner.execute.train.launch import TrainRunFailed, run_training_schedule  # noqa: E402
from planner.execute.train.model import (  # noqa: E402
    TRAIN_CONFIG,
    UNIT_KINDS,
    balanced_cut,
    boundary_slots,
    build_model,
    check_cut,
    even_cut,
    layer_cut,
    make_batches,
    num_units,
    unit_param_names,
)
from planner.execute.train.reference import LOSS_RTOL, compare_gradients, reference_step  # noqa: E402
from planner.execute.train.runtime import StageLayout, run_rank_actions  # noqa: E402
from planner.execute.train.unit_costs import training_pipeline, unit_costs  # noqa: E402
from planner.schedule.actions import ActionKind  # noqa: E402
from planner.schedule.program import Schedule  # noqa: E402

CFG = TRAIN_CONFIG  # 4 layers = 16 units, 4 experts top-2, d 32, micro-batches of 2 x 8 tokens
FIXED_2X2 = (0, 0, 1, 1)  # fixed placement p = 2, K = 2 sub-chunks per stage
V_2X2 = (0, 0, 1, 1, 1, 1, 0, 0)  # V-shape p = 2, K = 2


def _check(loss: float, grads: dict, num_microbatches: int, label: str) -> None:
    ref = reference_step(CFG, num_microbatches)
    cmp = compare_gradients(grads, ref.grads)
    print(f"\n{label}: loss {loss:.9g} vs {ref.loss:.9g}; {cmp}")
    assert cmp.ok, f"{label}: {cmp}"
    assert abs(loss - ref.loss) <= LOSS_RTOL * abs(ref.loss)
    assert set(grads) == {n for n, _ in build_model(CFG).named_parameters()}
    assert sum(float(np.abs(g).sum()) for g in grads.values()) > 1e-2


def _serial_schedule(stage_to_device: tuple[int, ...], m: int, fused: frozenset[int] = frozenset()) -> Schedule:
    """A valid order written out by rule, not by a planner: micro-batch after micro-batch, F down the chain, then
    B (BW for the stages in `fused`) back up with each W right after its B; each device keeps its part of this
    one serial order (a serial order of the task graph, so the per-device orders cannot form a cycle)."""
    rows: list[list[str]] = [[] for _ in range(max(stage_to_device) + 1)]
    s_count = len(stage_to_device)
    for k in range(m):
        for s in range(s_count):
            rows[stage_to_device[s]].append(f"{s}F{k}")
        for s in reversed(range(s_count)):
            acts = [f"{s}BW{k}"] if s in fused else [f"{s}B{k}", f"{s}W{k}"]
            rows[stage_to_device[s]].extend(acts)
    return Schedule.build(rows, stage_to_device=stage_to_device, name="serial")


def _planned(stage_to_device: tuple[int, ...], m: int = 4):
    from formulations.pipeline import solve_pipeline  # test-only: the planner side of the round trip

    costs = unit_costs(CFG)
    cut = balanced_cut([c.forward_flops + c.input_grad_flops + c.weight_grad_flops for c in costs],
                       len(stage_to_device))
    pipe = training_pipeline(CFG, cut, stage_to_device, m, costs=costs)
    sol = solve_pipeline(pipe, time_limit_s=30, threads=1, fifo=False)
    sol.schedule.check_complete()
    assert sol.schedule.stage_to_device == stage_to_device
    return cut, pipe, sol


def _splits_a_microbatch(schedule: Schedule) -> bool:
    """Whether some device runs another micro-batch's action between the same action (F, B or W) of one
    micro-batch on two consecutive sub-chunks it holds — what a stage-level schedule (one task per stage) cannot."""
    std = schedule.stage_to_device
    for d, row in enumerate(schedule.actions):
        pos = {(a.stage, a.kind, a.microbatch): i for i, a in enumerate(row) if a.is_compute}
        for s in range(len(std) - 1):
            if std[s] != d or std[s + 1] != d:
                continue
            for (st, kind, k), i in pos.items():
                j = pos.get((s + 1, kind, k)) if st == s else None
                if j is None:
                    continue
                lo, hi = min(i, j), max(i, j)
                if any(row[x].is_compute and row[x].microbatch != k for x in range(lo + 1, hi)):
                    return True
    return False


def _out_of_order(schedule: Schedule) -> bool:
    """Whether some stage runs some kind of action for micro-batch k + j before micro-batch k."""
    for row in schedule.actions:
        last: dict[tuple[int, ActionKind], int] = {}
        for a in row:
            if not a.is_compute:
                continue
            key = (a.stage, a.kind)
            if key in last and a.microbatch < last[key]:
                return True
            last[key] = a.microbatch
    return False


# ----------------------------------------------------------------------------------------- in one process
@pytest.mark.parametrize("cut", [even_cut(CFG, 16), even_cut(CFG, 5), (0, 2, 3, 5, 8, 14, 16), layer_cut(CFG, 2)])
def test_any_cut_composes_to_the_whole_model(cut: tuple[int, ...]) -> None:
    model = build_model(CFG)
    tokens, _ = make_batches(CFG, 1)
    with torch.no_grad():
        whole = model(tokens[0])
        xs = tokens[0]
        for lo, hi in itertools.pairwise(cut):
            xs = model.forward_units(lo, hi, xs)
            if hi < num_units(CFG):  # what crosses the boundary is what boundary_slots promises
                slots = boundary_slots(CFG, hi)
                assert [(tuple(t.shape), t.dtype) for t in xs] == [(s.shape, s.dtype) for s in slots]
    assert torch.equal(xs[0], whole)  # bit for bit: the whole model's forward is the composition of the units
    names = [n for lo, hi in itertools.pairwise(cut) for n in unit_param_names(model, lo, hi)]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())  # each parameter in exactly one chunk


def test_cuts_are_checked_and_layer_cut_is_the_old_rule() -> None:
    assert layer_cut(CFG, 4) == (0, 4, 8, 12, 16) and layer_cut(CFG, 3) == (0, 4, 8, 16)
    assert even_cut(CFG, 3) == (0, 5, 10, 16)
    for bad in [(0, 16, 16), (1, 16), (0, 8), (0, 9, 4, 16)]:
        with pytest.raises(ValueError, match="rise strictly"):
            check_cut(CFG, bad)
    with pytest.raises(ValueError, match="17 chunks"):
        even_cut(CFG, 17)
    assert [len(boundary_slots(CFG, u)) for u in range(1, 5)] == [1, 5, 5, 1]
    assert UNIT_KINDS == ("attention", "dispatch", "experts", "combine")


def test_balanced_cut_is_optimal() -> None:
    costs = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    for chunks in range(1, len(costs) + 1):
        cut = balanced_cut(costs, chunks)
        got = max(sum(costs[a:b]) for a, b in itertools.pairwise(cut))
        best = min(max(sum(costs[a:b]) for a, b in itertools.pairwise((0, *inner, len(costs))))
                   for inner in itertools.combinations(range(1, len(costs)), chunks - 1))
        assert len(cut) == chunks + 1 and got == best


def test_unit_costs_follow_the_matrix_product_rule() -> None:
    costs = unit_costs(CFG)
    assert len(costs) == num_units(CFG)
    n, d, f, k, t = CFG.batch * CFG.seq_len, CFG.hidden, CFG.ffn, CFG.top_k, CFG.seq_len
    attn = costs[4]  # layer 1: no embedding
    assert attn.name == "layer1.attention"
    assert attn.weight_flops == 2 * n * d * 3 * d + 2 * n * d * d  # qkv and output projections
    assert attn.forward_flops - attn.weight_flops == 2 * 2 * CFG.batch * t * t * d  # Q K^T and P V
    assert attn.input_grad_flops == attn.weight_flops + 2 * (attn.forward_flops - attn.weight_flops)
    assert costs[5].forward_flops == 2 * n * d * CFG.experts  # the router
    assert costs[6].forward_flops == costs[6].weight_grad_flops == 2 * 2 * n * k * d * f  # every routed row
    assert costs[7].forward_flops == 0 and costs[7].param_bytes == 0  # combine: no product, no parameter
    assert costs[-1].forward_flops == 2 * n * d * CFG.vocab  # the last combine carries the head
    pipe = training_pipeline(CFG, (0, 3, 4, 8, 16), FIXED_2X2, 4, costs=costs)
    assert pipe.stage_comm_tick == (0, 1, 0, 0)  # local hops are free, the cross-device hop is not
    assert pipe.stages[1].weight_grad_tick == 0 and pipe.stages[1].forward_tick == 1  # a lone combine


def test_sub_chunks_on_one_rank_without_processes() -> None:
    """p = 1, four operator-level sub-chunks on one rank, every hand-off local, in a shuffled valid order."""
    cut = (0, 2, 3, 9, 16)  # boundaries before experts, combine, dispatch
    order = ["0F0", "0F1", "1F1", "1F0", "2F0", "2F1", "3F1", "3B1", "3F0", "3BW0", "2B0", "3W1", "2B1", "1B1",
             "1B0", "0B0", "2W0", "0B1", "1W0", "2W1", "1W1", "0W1", "0W0"]
    sch = Schedule.build([order])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = run_rank_actions(0, sch, StageLayout.of(sch), CFG, cut=cut)
    finally:
        torch.set_num_threads(threads)
    _check(sum(out.microbatch_losses[k] for k in range(2)), out.grads, 2, "one rank, 4 sub-chunks, m=2")


def test_cut_must_match_the_chains() -> None:
    with pytest.raises(ValueError, match="3 chunks"):
        run_training_schedule(_serial_schedule(FIXED_2X2, 1), CFG, cut=(0, 4, 8, 16), timeout_s=5)


# ----------------------------------------------------------------------------------------- on gloo ranks
@pytest.mark.dist
def test_local_and_cross_rank_hops_in_one_chain() -> None:
    """One chain of 6 sub-chunks on ranks (0, 0, 1, 1, 1, 0): local hops before experts, dispatch and attention,
    cross-rank hops before combine and experts (five tensors each way), BW fused on two sub-chunks."""
    std = (0, 0, 1, 1, 1, 0)
    cut = (0, 2, 3, 5, 8, 14, 16)
    sch = _serial_schedule(std, 3, fused=frozenset({1, 4}))
    res = run_training_schedule(sch, CFG, timeout_s=60, comm_timeout_s=30, cut=cut)
    assert res.ranks[0].stages == (0, 1, 5) and res.ranks[1].stages == (2, 3, 4)
    _check(res.loss, res.grads, 3, f"chain {std}, cut {cut}")


@pytest.mark.dist
@pytest.mark.parametrize("placement", ["fixed", "v"])
def test_planned_sub_chunk_schedule_matches_reference(placement: str) -> None:
    std = FIXED_2X2 if placement == "fixed" else V_2X2
    cut, pipe, sol = _planned(std)
    assert any(b % len(UNIT_KINDS) for b in cut)  # the cut falls inside layers: operator-level sub-chunks
    ticks = [(s.forward_tick, s.input_grad_tick, s.weight_grad_tick) for s in pipe.stages]
    print(f"\n{placement}: cut {cut}, F/B/W ticks {ticks}, {sol.status}, makespan {sol.plan.makespan_tick} "
          f"(bound {sol.lower_bound_tick}); micro-batches out of order: {_out_of_order(sol.schedule)}")
    for row in sol.schedule.strings():
        print("   ", " ".join(row))
    # not a stage-level order: a device interleaves another micro-batch between two sub-chunks of one
    assert _splits_a_microbatch(sol.schedule)
    if placement == "v":  # here the solver also reorders micro-batches (the fixed case's optimum keeps them)
        assert _out_of_order(sol.schedule)
    res = run_training_schedule(sol.schedule, CFG, timeout_s=60, comm_timeout_s=30, cut=cut)
    _check(res.loss, res.grads, 4, f"planned {placement} p=2 K=2 m=4")


@pytest.mark.dist
@pytest.mark.parametrize("what", ["activation", "gradient"])
def test_tensor_not_produced_in_time_is_a_clear_error(what: str) -> None:
    """A co-located consumer placed before its producer: the rank names what it lacks at once (no receive is
    posted for a local hop, so nothing can hang), and the run ends on that error, not on a timeout."""
    sch = _serial_schedule(FIXED_2X2, 2)
    row = list(sch.strings()[0])
    if what == "activation":  # 1F0 moved before 0F0
        row.insert(row.index("0F0"), row.pop(row.index("1F0")))
    else:  # 0B1 moved before 1B1, whose input gradient it needs
        row.insert(row.index("1B1"), row.pop(row.index("0B1")))
    bad = Schedule.build([row, list(sch.strings()[1])], stage_to_device=FIXED_2X2)
    with pytest.raises(TrainRunFailed, match=rf"^rank 0 .*no {what} for stage \d micro-batch \d is there when it is "
                                             r"needed") as err:
        run_training_schedule(bad, CFG, timeout_s=60, comm_timeout_s=30, cut=(0, 3, 7, 11, 16))
    assert "timed out" not in str(err.value).split("; then")[0]


# A valid order with overlapped pairs written out by hand (FIXED_2X2, m = 4): device 1 pairs its last stage's
# forward of micro-batch k + 1 with its backward of k; device 0 pairs a stage with itself (1F2&1B0) and two
# sub-chunks it holds (0F3&1B1: stage 0's forward with stage 1's backward).  Every pair's halves are independent.
PAIRED_2X2 = (
    ["0F0", "1F0", "0F1", "1F1", "0F2", "1F2&1B0", "0B0", "1W0", "0W0", "0F3&1B1", "1F3", "0B1", "1W1", "0W1",
     "1B2", "0B2", "1W2", "0W2", "1B3", "0B3", "1W3", "0W3"],
    ["2F0", "3F0", "2F1", "3F1&3B0", "2B0", "3W0", "2W0", "2F2", "3F2&3B1", "2B1", "3W1", "2W1", "2F3", "3F3&3B2",
     "2B2", "3W2", "2W2", "3B3", "2B3", "3W3", "2W3"],
)


def _paired_pipeline():
    costs = unit_costs(CFG)
    cut = balanced_cut([c.forward_flops + c.input_grad_flops + c.weight_grad_flops for c in costs], 4)
    pipe = dataclasses.replace(training_pipeline(CFG, cut, FIXED_2X2, 4, costs=costs), fb_overlap=0.7)
    return cut, pipe


@pytest.mark.dist
def test_overlapped_pairs_across_sub_chunks_match_reference() -> None:
    """The hand-written paired order above (pairs of one stage and of two sub-chunks of one device) runs on 2 gloo
    ranks and matches the single-process reference: deterministic, whatever a solver would find."""
    cut, _pipe = _paired_pipeline()
    sch = Schedule.build([list(r) for r in PAIRED_2X2], stage_to_device=FIXED_2X2, name="paired")
    sch.check_complete()
    assert {a for row in sch.strings() for a in row if "&" in a} >= {"0F3&1B1", "1F2&1B0", "3F1&3B0"}
    res = run_training_schedule(sch, CFG, timeout_s=60, comm_timeout_s=30, cut=cut)
    _check(res.loss, res.grads, 4, "hand-written fixed p=2 K=2 m=4 with F&B pairs")


@pytest.mark.dist
def test_planned_sub_chunks_with_overlapped_pairs_match_reference() -> None:
    """The fixed p = 2, K = 2 pipeline with F&B pairs worth 0.7 of their halves (`fb_overlap`), solved warm-started
    from the hand-written paired order (so the solver's schedule is never longer than it; time-limited, so the
    schedule run is whatever the solver kept — any valid one must match, paired or not)."""
    from formulations.pipeline import solve_pipeline, split_start_times  # test-only: the planner side
    from planner.pipeline.metrics import figures  # test-only, with the line above
    from planner.pipeline.streams import simulate_pipeline  # test-only, with the line above

    cut, pipe = _paired_pipeline()
    warm_sch = Schedule.build([list(r) for r in PAIRED_2X2], stage_to_device=FIXED_2X2, name="paired")
    _inst, warm_timeline = simulate_pipeline(pipe, warm_sch)
    warm = split_start_times(pipe, warm_timeline)
    assert warm is not None and any("&" in name for name in warm)
    sol = solve_pipeline(pipe, warm_start=warm, time_limit_s=20, threads=1, fifo=False)
    sol.schedule.check_complete()
    assert sol.plan.makespan_tick <= figures(pipe, warm_timeline).makespan_tick
    strings = [a for row in sol.schedule.strings() for a in row]
    print(f"\npaired: {sol.status}, makespan {sol.plan.makespan_tick} (bound {sol.lower_bound_tick}), pairs "
          f"{[a for a in strings if '&' in a]}")
    res = run_training_schedule(sol.schedule, CFG, timeout_s=60, comm_timeout_s=30, cut=cut)
    _check(res.loss, res.grads, 4, "planned fixed p=2 K=2 m=4 with F&B pairs")
