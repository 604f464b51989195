"""The outer level of the planned pipeline on a model: choose where the chunks are cut for the schedule, not only
for the bottleneck stage (issue 11's "joint partition and schedule", first step).

`model_costs.model_costs` cuts the op graph into p stages that minimise the bottleneck stage time, and each stage
into two halves of equal compute.  That cut is what the baselines run on (it is what their users do), but it is
not the cut a schedule needs: a stage's forward, backward and its hops weigh differently in a pipeline than in a
bottleneck, a V shape puts two chunks on a device, DualPipe runs every stage on two devices.  This module moves the
boundaries between neighbouring pieces of the cut (`ModelCosts.cut(split)`: pieces of positions in the
instance's topological order) and keeps a move when the schedules it knows run shorter on the new cut.

**Moves.**  Piece c gives its last k ops (by position) to piece c+1, or its first k ops to piece c-1, k in
`STEP_OPS`, and it keeps at least one op.  Every piece of the starting cut sends its edges forward only (an edge goes
from a piece to the same or a later one: the stage formulation's contiguous stages and their halves do); a move
keeps that: piece c's last op has all its successors at later positions, so in pieces > c, and piece c's first op
all its predecessors at earlier positions, so in pieces < c.  So every cut the search visits is a valid stage
cut, and hop costs are recomputed by `ModelCosts.hop_ticks` (edges that skip pieces are forwarded piece by piece).

**Evaluation.**  A cut is worth the shortest makespan of the reference schedules (the baselines of the placement,
and every schedule the inner model has returned) re-simulated on it (`planner.pipeline.streams.simulate_pipeline`:
the same per-device order of F, B and W, with the new costs, sends and all-to-alls on the communication streams),
among those whose peak memory stays under the cap.  That is an upper bound on what the inner model can reach on the
cut (it is warm-started from the best of them), and it costs one simulation per schedule.

**Search.**  First improvement over the moves of the pieces on the device that is busiest in the best simulated
timeline (largest step first), then over every piece once none of those improves; ends when no move improves,
after `max_evaluations` simulations or at the deadline.  Deterministic.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner.compare.model_costs import ModelCosts
from planner.errors import OpplanError
from planner.pipeline.metrics import figures
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import TrainingPipeline
from planner.schedule.program import Schedule
from planner.schedule.timeline import Timeline

__all__ = ["CutSearch", "STEP_OPS", "any_cut_bound_tick", "evaluate_cut", "refine_cut", "with_cut"]

STEP_OPS = (8, 4, 2, 1)  # ops moved across a boundary by one move, largest first
Cut = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class CutEvaluation:
    """The best reference schedule on a cut: its makespan (ticks), its timeline, and its pipeline."""

    makespan_tick: int
    schedule: Schedule
    timeline: Timeline
    pipeline: TrainingPipeline


@dataclass(frozen=True)
class CutSearch:
    """Result of `refine_cut`: the best cut found (`costs` carries it), its best reference schedule, and how the
    search went (start and final makespan in ticks, simulations run, moves kept, seconds)."""

    costs: ModelCosts
    best: CutEvaluation | None
    start_makespan_tick: int | None
    evaluations: int
    moves_kept: int
    seconds: float


def with_cut(costs: ModelCosts, split: int, cut: Cut) -> ModelCosts:
    """`costs` with its p-stage cut (`split` 1) or its 2p-chunk cut (`split` 2) replaced by `cut`."""
    if split == 1:
        return dataclasses.replace(costs, stage_positions=cut)
    return dataclasses.replace(costs, chunk_positions=cut)


def any_cut_bound_tick(costs: ModelCosts, pipeline: TrainingPipeline) -> int | None:
    """A lower bound on the makespan of `pipeline` under *every* cut of `costs`' ops, or None where this argument
    does not hold: the compute work of all micro-batches (each stage runs F and then B + W, or its fused BW when
    shorter, of every micro-batch) spread evenly over the p devices.  It needs identical devices (the work of an
    op then does not depend on where a cut puts it, so every cut has the same total) and no overlapped F&B pairs
    (a pair can be shorter than its halves)."""
    dur = costs.instance.duration_tick
    if pipeline.pairs_gain or not bool((dur == dur[:, :1]).all()):
        return None
    work = sum(int(st.forward_tick) + min(int(st.input_grad_tick) + int(st.weight_grad_tick), st.bw_tick)
               for st in pipeline.stages) * int(pipeline.num_microbatches)
    return -(-work // int(pipeline.num_devices))


def evaluate_cut(costs: ModelCosts, pipeline_name: str, p: int, m: int, schedules: Sequence[Schedule],
                 cap_bytes: int | None) -> CutEvaluation | None:
    """The shortest of `schedules` simulated on `costs`' pipeline `pipeline_name` whose peak memory is at most
    `cap_bytes` (None: no cap), or None when none fits."""
    pipe = costs.pipeline(pipeline_name, p, m)
    best: CutEvaluation | None = None
    for schedule in schedules:
        try:
            _inst, tl = simulate_pipeline(pipe, schedule)
        except OpplanError:
            continue  # a schedule that does not run on this pipeline (e.g. another placement's) is no reference
        fig = figures(pipe, tl)
        if cap_bytes is not None and fig.max_peak_memory_bytes > cap_bytes:
            continue
        if best is None or fig.makespan_tick < best.makespan_tick:
            best = CutEvaluation(fig.makespan_tick, schedule, tl, pipe)
    return best


def _moves(cut: Cut, pieces: Sequence[int]) -> list[Cut]:
    """The cuts one move away (module docstring) that take ops out of `pieces`, largest step first."""
    out: list[Cut] = []
    for k in STEP_OPS:
        for c in pieces:
            piece = cut[c]
            if len(piece) <= k:
                continue
            if c + 1 < len(cut):  # the last k ops of c go to c+1
                new = list(cut)
                new[c], new[c + 1] = piece[:-k], tuple(sorted(piece[-k:] + cut[c + 1]))
                out.append(tuple(new))
            if c > 0:  # the first k ops of c go to c-1
                new = list(cut)
                new[c], new[c - 1] = piece[k:], tuple(sorted(cut[c - 1] + piece[:k]))
                out.append(tuple(new))
    return out


def _busiest_device(best: CutEvaluation) -> int:
    p = best.pipeline.num_devices
    busy = [best.timeline.makespan_tick - int(best.timeline.idle_tick[d]) for d in range(p)]
    return max(range(p), key=lambda d: busy[d])


def refine_cut(costs: ModelCosts, split: int, pipeline_name: str, p: int, m: int, schedules: Sequence[Schedule],
               cap_bytes: int | None, *, deadline_s: float, max_evaluations: int = 400,
               progress: Callable[[str], None] | None = None) -> CutSearch:
    """Search the cut of `costs` (`split` 1: the p stages; 2: the 2p chunks) for the pipeline `pipeline_name`
    (module docstring); `deadline_s` is a `time.monotonic()` instant.  The returned costs hold the best cut found
    (the start cut when nothing improved or nothing fits the cap)."""
    t0 = time.monotonic()
    cut = costs.cut(split)
    best = evaluate_cut(costs, pipeline_name, p, m, schedules, cap_bytes)
    evaluations, kept = 1, 0
    start = best.makespan_tick if best else None
    if best is None:
        return CutSearch(costs, None, None, evaluations, 0, time.monotonic() - t0)
    std = best.pipeline.stage_to_device or tuple(range(len(cut)))
    # stage s runs piece s mod len(cut) (DualPipe's second copy runs the same pieces on other devices)
    piece_devices = [{std[s] for s in range(len(std)) if s % len(cut) == c} for c in range(len(cut))]
    improved = True
    while improved and evaluations < max_evaluations and time.monotonic() < deadline_s:
        improved = False
        busiest = _busiest_device(best)
        focus = [c for c in range(len(cut)) if busiest in piece_devices[c]]
        for pieces in (focus, list(range(len(cut)))):
            for candidate in _moves(cut, pieces):
                if evaluations >= max_evaluations or time.monotonic() >= deadline_s:
                    break
                trial = with_cut(costs, split, candidate)
                got = evaluate_cut(trial, pipeline_name, p, m, schedules, cap_bytes)
                evaluations += 1
                if got is not None and got.makespan_tick < best.makespan_tick:
                    cut, costs, best, improved = candidate, trial, got, True
                    kept += 1
                    break
            if improved:
                break
        if progress is not None and improved:
            progress(f"cut search ({pipeline_name}): {best.makespan_tick} ticks after {evaluations} simulations")
    return CutSearch(costs, best, start, evaluations, kept, time.monotonic() - t0)
