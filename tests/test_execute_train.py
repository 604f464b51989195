"""Pipeline training runtime: planned and hand-designed schedules run on gloo ranks match a one-process reference.

Tolerance (planner/execute/train/reference.py): |got - want| <= 1e-7 + 1e-5 |want| elementwise, fp32; the loss to
1e-6 relative.  Run with ``-s`` to see each case's measured max abs / rel error.

Schedules covered (all from the library's generators or planner, none written here):
* 1F1B (`planner.pipeline.generators.one_f_one_b`), p = 2, m = 4 and p = 4, m = 8 — full backwards (BW)
* DualPipeV (`planner.pipeline.dualpipe.dualpipe_v`), p = 2, m = 4 (its minimum, m >= 2p) — V placement, B/W split,
  F&B pairs, a stage-to-stage hand-off inside one rank
* planned: CP-SAT's optimal placement-and-order of the unrolled V-shape instance (2 ranks, 4 stages, m = 4, split
  B/W; `formulations.solve_instance.solve_placement` -> `planner.schedule.program.schedule_from_plan`).  The
  pipeline formulation proper (order of F/B/W under memory) is not there yet; this is the task-level MILP's plan.
* also: interleaved 1F1B, ZB-V, DualPipe (two parameter copies, gradients summed)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from planner.execute.train.launch import TrainRunFailed, run_training_schedule  # noqa: E402
from planner.execute.train.model import (  # noqa: E402
    TRAIN_CONFIG,
    build_model,
    chunk_param_names,
    make_batches,
)
from planner.execute.train.reference import (  # noqa: E402
    LOSS_RTOL,
    compare_gradients,
    reference_step,
)
from planner.execute.train.runtime import StageLayout, TrainFault, run_rank_actions  # noqa: E402
from planner.pipeline.dualpipe import dualpipe, dualpipe_v  # noqa: E402
from planner.pipeline.generators import interleaved_1f1b, one_f_one_b  # noqa: E402
from planner.pipeline.unroll import uniform_pipeline, unroll  # noqa: E402
from planner.pipeline.zero_bubble import zb_v  # noqa: E402
from planner.schedule.program import Schedule, schedule_from_plan  # noqa: E402

CFG = TRAIN_CONFIG  # 4 layers, 4 experts top-2, d 32, micro-batches of 2 x 8 tokens


def _check(result_loss: float, grads: dict, num_microbatches: int, label: str) -> None:
    ref = reference_step(CFG, num_microbatches)
    cmp = compare_gradients(grads, ref.grads)
    print(f"\n{label}: loss {result_loss:.9g} vs {ref.loss:.9g}; {cmp}")
    assert cmp.ok, f"{label}: {cmp}"
    assert abs(result_loss - ref.loss) <= LOSS_RTOL * abs(ref.loss)
    # the run really trained every parameter (not an all-zero or empty comparison)
    assert set(grads) == {n for n, _ in build_model(CFG).named_parameters()}
    assert sum(float(np.abs(g).sum()) for g in grads.values()) > 1e-2


# ----------------------------------------------------------------------------------------- in one process
def test_chunks_compose_to_the_whole_model() -> None:
    model = build_model(CFG)
    tokens, _ = make_batches(CFG, 1)
    with torch.no_grad():
        whole = model(tokens[0])
        for chunks in (2, 4):
            x = tokens[0]
            for c in range(chunks):
                x = model.forward_chunk(c, chunks, x)
            assert torch.equal(x, whole)
    names = [n for c in range(4) for n in chunk_param_names(model, c, 4)]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())  # every parameter in one chunk
    with pytest.raises(ValueError, match="layers"):
        model.forward_chunk(0, 5, tokens[0])


def test_build_is_deterministic() -> None:
    a, b = build_model(CFG), build_model(CFG)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    c = build_model(dataclasses.replace(CFG, seed=1))
    assert not torch.equal(a.head.weight, c.head.weight)


def test_layout_of_dualpipe_chains() -> None:
    sch = dualpipe(2, 4)  # 4 stage copies, 2 micro-batches per direction
    chains = uniform_pipeline(4, 2, placement="dualpipe").chains
    lay = StageLayout.of(sch, chains)
    assert lay.chunk_of == (0, 1, 0, 1) and lay.total_microbatches == 4
    assert lay.next_of == (1, None, 3, None) and lay.prev_of == (None, 0, None, 2)
    assert lay.global_microbatch(2, 1) == 3
    with pytest.raises(ValueError, match="cover"):
        StageLayout.of(sch, ((0, 1),))


def test_reordered_accumulation_is_within_tolerance() -> None:
    """The measurement behind the tolerance: the same gradients summed in reverse micro-batch order."""
    m = 8
    fwd, rev = reference_step(CFG, m), reference_step(CFG, m, order=range(m - 1, -1, -1))
    cmp = compare_gradients(rev.grads, fwd.grads)
    print(f"\nreversed accumulation order, m = {m}: {cmp}")
    assert cmp.ok and cmp.worst_ratio < 0.2  # the tolerance leaves >= 5x over plain reordering
    assert cmp.max_abs_error > 0  # reordering really changes the fp32 sums, the check is not vacuous


def test_compare_gradients_catches_real_errors() -> None:
    m = 4
    ref = reference_step(CFG, m)
    fewer = reference_step(CFG, m - 1)  # a micro-batch missing (and the others weighted 1/3)
    assert not compare_gradients(fewer.grads, ref.grads).ok
    bumped = {k: v.copy() for k, v in ref.grads.items()}
    g = bumped["layers.2.moe.router.weight"]
    g.flat[np.abs(g).argmax()] *= 1.0 + 1e-4  # 10x the relative tolerance on one entry
    cmp = compare_gradients(bumped, ref.grads)
    assert not cmp.ok and cmp.worst == "layers.2.moe.router.weight"
    missing = dict(ref.grads)
    del missing["head.weight"]
    assert not compare_gradients(missing, ref.grads).ok


def test_two_stages_on_one_rank_without_processes() -> None:
    """p = 1: both stages on one rank (a local hand-off, no process group), split B/W in a shuffled order."""
    sch = Schedule.build([["0F0", "0F1", "1F1", "1F0", "1B1", "1B0", "0B1", "1W0", "0B0", "0W1", "0W0", "1W1"]])
    lay = StageLayout.of(sch)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = run_rank_actions(0, sch, lay, CFG)
    finally:
        torch.set_num_threads(threads)
    assert [t.action for t in out.timings][:3] == ["0F0", "0F1", "1F1"]
    _check(sum(out.microbatch_losses[k] for k in range(2)), out.grads, 2, "one rank, 2 stages, m=2")


def test_incomplete_schedule_is_refused_before_starting() -> None:
    from planner.schedule.errors import ScheduleError

    sch = Schedule.build([["0F0", "0B0"], ["1F0", "1BW0"]])  # 0W0 missing
    with pytest.raises(ScheduleError, match="0W0"):
        run_training_schedule(sch, CFG, timeout_s=5)


# ----------------------------------------------------------------------------------------- on gloo ranks
@pytest.mark.dist
@pytest.mark.parametrize("p,m,warmup", [(2, 4, 1), (4, 8, 0)])
def test_1f1b_matches_reference(p: int, m: int, warmup: int) -> None:
    # with a warm-up step the returned step's gradients must still be one step's (the warm-up's are discarded)
    res = run_training_schedule(one_f_one_b(p, m), CFG, world_size=p, timeout_s=30, warmup_steps=warmup)
    assert len(res.ranks) == p and all(r.step_s > 0 and len(r.timings) == 2 * m for r in res.ranks)
    _check(res.loss, res.grads, m, f"1F1B p={p} m={m}")


@pytest.mark.dist
def test_dualpipev_matches_reference() -> None:
    sch = dualpipe_v(2, 4)
    strings = [s for row in sch.strings() for s in row]
    assert any("&" in s for s in strings) and any("W" in s for s in strings)  # pairs and split B/W are exercised
    res = run_training_schedule(sch, CFG, world_size=2, timeout_s=30)
    assert res.ranks[0].stages == (0, 3) and res.ranks[1].stages == (1, 2)
    _check(res.loss, res.grads, 4, "DualPipeV p=2 m=4")


@pytest.mark.dist
def test_planned_schedule_matches_reference() -> None:
    """A schedule planned by opplan: the CP-SAT placement MILP's optimal order of the unrolled V-shape pipeline
    (2 ranks, 4 stages, 4 micro-batches, F/B/W tasks with F = B = 2, W = 1, 1 tick per hop)."""
    from formulations.solve_instance import solve_placement

    pipe = uniform_pipeline(4, 4, placement="v", forward_tick=2, input_grad_tick=2, weight_grad_tick=1,
                            comm_tick=1)
    plan = solve_placement(unroll(pipe), backend="cpsat", time_limit_s=10, threads=1)
    sch = schedule_from_plan(plan, num_stages=4, num_microbatches=4, name="planned-v-cpsat")
    sch.check_complete()
    assert sch.stage_to_device == (0, 1, 1, 0)
    res = run_training_schedule(sch, CFG, world_size=2, timeout_s=30)
    _check(res.loss, res.grads, 4, f"planned ({plan.status}, makespan {plan.makespan_tick} ticks)")


@pytest.mark.dist
def test_pipeline_formulation_schedule_matches_reference() -> None:
    """The schedule `plan-compare` reports as `opplan`: the pipeline formulation's order of the V-shape pipeline
    (2 ranks, 4 stages, 4 micro-batches, F = B = W = 1, no memory cap), run for real."""
    from formulations.pipeline import solve_pipeline

    pipe = uniform_pipeline(4, 4, placement="v", forward_tick=1, input_grad_tick=1, weight_grad_tick=1)
    solution = solve_pipeline(pipe, time_limit_s=10, threads=1)
    sch = solution.schedule
    sch.check_complete()
    res = run_training_schedule(sch, CFG, world_size=2, timeout_s=30)
    _check(res.loss, res.grads, 4, f"pipeline formulation ({solution.status}, makespan {solution.plan.makespan_tick})")


@pytest.mark.dist
@pytest.mark.parametrize("name", ["interleaved-1f1b", "zb-v", "dualpipe"])
def test_more_baselines_match_reference(name: str) -> None:
    chains = None
    if name == "interleaved-1f1b":
        sch = interleaved_1f1b(2, 4)
    elif name == "zb-v":
        sch = zb_v(2, 4)
    else:
        sch = dualpipe(2, 4)  # 4 micro-batches in total, 2 entering at each end
        chains = uniform_pipeline(4, 2, placement="dualpipe").chains
    res = run_training_schedule(sch, CFG, timeout_s=30, chains=chains)
    _check(res.loss, res.grads, len(res.microbatch_losses), name)


@pytest.mark.dist
@pytest.mark.parametrize("kind", ["raise", "kill"])
def test_failing_rank_ends_the_run_with_its_name(kind: str) -> None:
    with pytest.raises(TrainRunFailed, match=r"^rank 1 ") as err:
        run_training_schedule(one_f_one_b(2, 4), CFG, timeout_s=15, fault=TrainFault(1, "1F2", kind))
    # bounded without a clock: the run ended on the fault itself (named first), not on a timeout
    assert "timed out" not in str(err.value).split("; then")[0]
    if kind == "raise":
        assert "injected fault before action 1F2" in str(err.value)
    else:
        assert "SIGKILL" in str(err.value)


@pytest.mark.dist
def test_cyclic_order_times_out_naming_the_wait() -> None:
    """An invalid order (each rank waits for the other's later output) is reported, not hung."""
    sch = Schedule.build([["0F0", "0BW0", "0F1", "0BW1"], ["1F1", "1BW1", "1F0", "1BW0"]])
    with pytest.raises(TrainRunFailed, match=r"rank \d failed: .*receiving the (activation|gradient)"):
        run_training_schedule(sch, CFG, timeout_s=20, comm_timeout_s=2)
