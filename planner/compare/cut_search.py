"""The outer level of the planned pipeline on a model: choose where the chunks are cut for the schedule, not only
for the bottleneck stage (the partition chosen jointly with the schedule).

`model_costs.model_costs` cuts the op graph into p stages that minimise the bottleneck stage time, and each stage
into two halves of equal compute.  That cut is what the baselines run on (it is what their users do), but it is
not the cut a schedule needs: a stage's forward, backward and its hops weigh differently in a pipeline than in a
bottleneck, a V shape puts two chunks on a device, DualPipe runs every stage on two devices.  This module moves the
boundaries between neighbouring pieces of the cut (`ModelCosts.cut(split)`: pieces of positions in the
instance's topological order) and keeps a move when the schedules it knows run shorter on the new cut.

**Moves.**  A *single move*: piece c gives its last k ops (by position) to piece c+1, or its first k ops to piece c-1, k
in `ComparePolicy.cut_step_ops`, and it keeps at least one op.  A *chain move* (`ComparePolicy.cut_chain_moves`) shifts
work along several boundaries at once: piece c gives k ops towards a piece j two or more pieces away, and every piece
between passes on the k' ops at its far end whose work (F + B + W, `op_work_ticks`) is closest to the work it received
(1 <= k' <= its own ops), so it keeps about its own work and piece j gains about what c lost.  Single moves pass through
the worse cuts in between (the middle piece grows first) and stop there: at 8 stages the pieces of the device that sets
the bound sit next to pieces about as busy, and the end devices stay light.  Every piece of the starting cut is a run of
consecutive positions of the instance's topological order (the stage formulation's contiguous stages and their halves);
both kinds of move keep that (an op leaves a piece at its end that faces the receiving piece and joins it at the end
facing back), so an edge still goes from a piece to the same or a later one: every cut the search visits is a valid
stage cut with no empty piece, and hop costs are recomputed by `ModelCosts.hop_ticks` (edges that skip pieces are
forwarded piece by piece).

**Evaluation.**  A cut is worth the shortest makespan of the reference schedules (the baselines of the placement,
and every schedule the inner model has returned) re-simulated on it (`planner.pipeline.streams.simulate_pipeline`:
the same per-device order of F, B and W, with the new costs, sends and all-to-alls on the communication streams),
among those whose peak memory stays under the cap.  That is an upper bound on what the inner model can reach on the
cut (it is warm-started from the best of them), and it costs one simulation per schedule.

**Search.**  First improvement, in rounds: the single moves of the pieces on the device that is busiest in the best
simulated timeline (largest step first), then the single moves of every piece; only when none of those improves
(a local optimum of single moves), the chain moves from the busiest device's pieces to the pieces of devices less
busy (lightest first, largest step first).  A kept move starts the next round.  Ends when no move improves, after
`max_evaluations` simulations (chain moves count as one each) or at the deadline.  Deterministic.  Because chain
moves are tried only where single moves have stopped, the search with them visits the same cuts as without them
until that point and keeps the best cut: at the same evaluation budget it never ends on a longer schedule than the
single moves alone (`refine_cut(chain=False)`, the module's behaviour before chain moves, kept for side-by-side
runs: `experiments.bench_pipeline --cut`).

**Scoring by the bound** (`refine_cut(score="bound")`).  Where the inner model has closed its gap on a cut (its
schedule is at or near the cut's bound, as on 4 stages), no reorder shortens it further and the replayed makespan
is a poor guide: a move that lowers the cut's bound replays the old order longer at first.  A cut is then worth
its *bound* (`formulations.pipeline.pipeline_device_bound`: the device bound — per device the earliest head + work
+ shortest tail — or the instance's trivial bound, the larger) first and the reference schedules' shortest replay
second (`BOUND_WEIGHT`), among cuts where some reference schedule still fits the cap (so the inner model keeps a
warm start there); the busiest device is the one whose head + work + tail sets the bound.  Not for pipelines whose
overlapped pairs gain (the bound without pairs does not hold there): those keep the makespan score.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from formulations.pipeline import pipeline_device_bound
from formulations.stop import stop_requested
from planner.compare.compare_policy import DEFAULT_COMPARE_POLICY, ComparePolicy
from planner.compare.model_costs import ModelCosts
from planner.errors import OpplanError
from planner.pipeline.metrics import figures
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import TrainingPipeline
from planner.schedule.program import Schedule
from planner.schedule.timeline import Timeline

__all__ = ["CutDescent", "CutSearch", "SCORES", "any_cut_bound_tick", "chain_move",
           "chain_moves", "descend_cut", "evaluate_cut", "op_work_ticks", "refine_cut", "single_moves", "with_cut"]

SCORES = ("makespan", "bound")  # what refine_cut minimises (module docstring)
BOUND_WEIGHT = 2**40  # score = bound x this + replayed makespan: one tick of bound outweighs any makespan
Cut = tuple[tuple[int, ...], ...]
E = TypeVar("E")


@dataclass(frozen=True)
class CutEvaluation:
    """The best reference schedule on a cut: its makespan (ticks), its timeline, and its pipeline."""

    makespan_tick: int
    schedule: Schedule
    timeline: Timeline
    pipeline: TrainingPipeline
    bound_tick: int | None = None  # the cut's bound, when the search scores by it (module docstring)
    bound_parts: tuple[int, ...] = ()  # the device bound's term per device, likewise

    @property
    def busy_ticks(self) -> tuple[int, ...]:
        """Per device, the ticks its compute stream is busy in the timeline."""
        return tuple(self.timeline.makespan_tick - int(self.timeline.idle_tick[d])
                     for d in range(self.pipeline.num_devices))


@dataclass(frozen=True)
class CutSearch:
    """Result of `refine_cut`: the best cut found (`costs` carries it), its best reference schedule, and how the
    search went (start and final makespan in ticks, simulations run, moves kept — `chain_moves_kept` of them chain
    moves —, seconds)."""

    costs: ModelCosts
    best: CutEvaluation | None
    start_makespan_tick: int | None
    evaluations: int
    moves_kept: int
    seconds: float
    chain_moves_kept: int = 0


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


def op_work_ticks(costs: ModelCosts, split: int, devices: Sequence[int]) -> tuple[int, ...]:
    """Per position of the topological order, the F + B + W ticks of its op on the device of the piece of `costs`'
    cut that holds it (`devices[c]` for piece c; B = W = F without per-op training costs): the weights chain moves
    balance with (`chain_moves`)."""
    inst = costs.instance
    order = inst.topological_order
    tr = costs.training
    out = [0] * inst.num_tasks
    for c, piece in enumerate(costs.cut(split)):
        d = int(devices[c])
        for i in piece:
            t = order[i]
            if tr is None:
                out[i] = 3 * int(inst.duration_tick[t, d])
            else:
                out[i] = int(tr.forward_tick[t, d]) + int(tr.input_grad_tick[t, d]) + int(tr.weight_grad_tick[t, d])
    return tuple(out)
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


def single_moves(cut: Cut, pieces: Sequence[int],
                 steps: Sequence[int] = DEFAULT_COMPARE_POLICY.cut_step_ops) -> list[Cut]:
    """The cuts one single move of `steps` ops away (module docstring) that take ops out of `pieces`, largest step
    first."""
    out: list[Cut] = []
    for k in steps:
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


def chain_move(cut: Cut, source: int, target: int, k: int, work: Sequence[int]) -> Cut | None:
    """The chain move (module docstring) of k ops from piece `source` to piece `target` (two or more pieces
    away), each piece between passing on the ops at its far end whose work (`work`: ticks per position) is closest
    to the work it received (ties: fewer ops); None when `source` cannot give k ops and keep one."""
    if len(cut[source]) <= k or abs(target - source) < 2:
        return None
    step = 1 if target > source else -1
    new = list(cut)
    # ops leave a piece at the end that faces `target`: its last ops going up, its first ops going down
    moving = cut[source][-k:] if step > 0 else cut[source][:k]
    new[source] = cut[source][:-k] if step > 0 else cut[source][k:]
    for c in range(source + step, target, step):
        piece = cut[c]
        received = sum(work[i] for i in moving)
        far = piece[::-1] if step > 0 else piece  # the piece's ops from the end that faces `target`
        best_n, best_miss, acc = 1, None, 0
        for n, i in enumerate(far, start=1):  # 1 <= n <= its own ops: it keeps what it received
            acc += work[i]
            miss = abs(acc - received)
            if best_miss is None or miss < best_miss:
                best_n, best_miss = n, miss
            if acc >= received:
                break  # further ops only miss by more
        give = piece[-best_n:] if step > 0 else piece[:best_n]
        kept = piece[:-best_n] if step > 0 else piece[best_n:]
        new[c] = tuple(sorted(kept + moving))
        moving = give
    new[target] = tuple(sorted(cut[target] + moving))
    return tuple(new)


def chain_moves(cut: Cut, sources: Sequence[int], targets: Sequence[int], work: Sequence[int],
                steps: Sequence[int] = DEFAULT_COMPARE_POLICY.cut_step_ops) -> Iterator[Cut]:
    """The chain moves of `steps` ops from `sources` to `targets` (in the order given), largest step first."""
    for k in steps:
        for target in targets:
            for source in sources:
                got = chain_move(cut, source, target, k, work)
                if got is not None:
                    yield got


@dataclass(frozen=True)
class CutDescent(Generic[E]):
    """Where `descend_cut` ended: the best cut, its evaluation, evaluations run (the start's included), moves kept
    and how many of them were chain moves."""

    cut: Cut
    best: E
    evaluations: int
    kept: int
    chain_kept: int


def descend_cut(cut: Cut, best: E, evaluate: Callable[[Cut], E | None], makespan: Callable[[E], int],
                busy: Callable[[E], Sequence[int]], piece_devices: Sequence[frozenset[int]], work: Sequence[int], *,
                chain: bool, deadline_s: float, max_evaluations: int,
                progress: Callable[[int, int], None] | None = None,
                steps: Sequence[int] = DEFAULT_COMPARE_POLICY.cut_step_ops) -> CutDescent[E]:
    """The search of the module docstring from `cut`, evaluated `best`: `evaluate` gives a cut's evaluation (None:
    nothing fits), `makespan` its score (lower is better), `busy` its busy ticks per device; piece c runs on the
    devices `piece_devices[c]`; `work` weighs positions for chain moves; a move carries `steps` ops.
    `progress(makespan, evaluations)` is called after every kept move."""
    evaluations, kept, chain_kept = 1, 0, 0
    pieces = list(range(len(cut)))

    def budget_left() -> bool:
        # the user's Ctrl-C ends the descent as its deadline would (the best cut so far stands)
        return evaluations < max_evaluations and time.monotonic() < deadline_s and not stop_requested()

    improved = True
    while improved and budget_left():
        improved = False
        load = busy(best)
        busiest = max(range(len(load)), key=lambda d: load[d])
        focus = [c for c in pieces if busiest in piece_devices[c]]
        # a piece is as light as its busiest device; targets lighter than the busiest device, lightest first
        light = sorted((c for c in pieces if max(load[d] for d in piece_devices[c]) < load[busiest]),
                       key=lambda c: (max(load[d] for d in piece_devices[c]), c))
        phases: list[tuple[bool, Iterable[Cut]]] = [(False, single_moves(cut, focus, steps)),
                                                    (False, single_moves(cut, pieces, steps))]
        if chain:  # only once every single move has failed: the same trajectory as single moves until they stall
            phases.append((True, chain_moves(cut, focus, light, work, steps)))
        for is_chain, candidates in phases:
            for candidate in candidates:
                if not budget_left():
                    break
                got = evaluate(candidate)
                evaluations += 1
                if got is not None and makespan(got) < makespan(best):
                    cut, best, improved = candidate, got, True
                    kept += 1
                    chain_kept += int(is_chain)
                    break
            if improved:
                break
        if progress is not None and improved:
            progress(makespan(best), evaluations)
    return CutDescent(cut, best, evaluations, kept, chain_kept)


def refine_cut(costs: ModelCosts, split: int, pipeline_name: str, p: int, m: int, schedules: Sequence[Schedule],
               cap_bytes: int | None, *, deadline_s: float, max_evaluations: int | None = None,
               progress: Callable[[str], None] | None = None, chain: bool | None = None,
               score: str = "makespan", policy: ComparePolicy = DEFAULT_COMPARE_POLICY) -> CutSearch:
    """Search the cut of `costs` (`split` 1: the p stages; 2: the 2p chunks) for the pipeline `pipeline_name` (module
    docstring); `deadline_s` is a `time.monotonic()` instant; `chain`: try chain moves once single moves stall (None:
    `policy.cut_chain_moves`); `max_evaluations` (None: `policy.cut_max_evaluations`); `score` (`SCORES`): ``makespan``,
    the reference schedules' shortest replay, or ``bound``, the cut's bound first (module docstring, "Scoring by the
    bound"; the makespan score where pairs gain).  The returned costs hold the best cut found (the start cut when
    nothing improved or nothing fits the cap)."""
    if score not in SCORES:
        raise OpplanError(f"unknown cut score {score!r}", fix=f"use one of {', '.join(SCORES)}")
    t0 = time.monotonic()
    use_chain = policy.cut_chain_moves if chain is None else bool(chain)
    if max_evaluations is None:
        max_evaluations = policy.cut_max_evaluations
    by_bound = score == "bound" and not costs.pipeline(pipeline_name, p, m).pairs_gain
    cut = costs.cut(split)

    def evaluate_at(at: ModelCosts) -> CutEvaluation | None:
        got = evaluate_cut(at, pipeline_name, p, m, schedules, cap_bytes)
        if got is None or not by_bound:
            return got
        bound, parts = pipeline_device_bound(got.pipeline)
        return dataclasses.replace(got, bound_tick=bound, bound_parts=parts)

    def scored(e: CutEvaluation) -> int:
        return e.makespan_tick if e.bound_tick is None else e.bound_tick * BOUND_WEIGHT + e.makespan_tick

    def load(e: CutEvaluation) -> Sequence[int]:
        return e.bound_parts if e.bound_tick is not None else e.busy_ticks

    best = evaluate_at(costs)
    if best is None:
        return CutSearch(costs, None, None, 1, 0, time.monotonic() - t0)
    start = best.makespan_tick
    std = best.pipeline.stage_to_device or tuple(range(len(cut)))
    # stage s runs piece s mod len(cut) (DualPipe's second copy runs the same pieces on other devices)
    piece_devices = [frozenset(std[s] for s in range(len(std)) if s % len(cut) == c) for c in range(len(cut))]
    work = op_work_ticks(costs, split, [min(ds) for ds in piece_devices])

    def evaluate(candidate: Cut) -> CutEvaluation | None:
        return evaluate_at(with_cut(costs, split, candidate))

    def line(value: int, evaluations: int) -> None:
        if progress is not None:
            what = f"bound {value // BOUND_WEIGHT} ticks" if by_bound else f"{value} ticks"
            progress(f"cut search ({pipeline_name}): {what} after {evaluations} simulations")

    got = descend_cut(cut, best, evaluate, scored, load, piece_devices, work,
                      chain=use_chain, deadline_s=deadline_s, max_evaluations=max_evaluations, progress=line,
                      steps=policy.cut_step_ops)
    out_costs = costs if got.kept == 0 else with_cut(costs, split, got.cut)
    return CutSearch(out_costs, got.best, start, got.evaluations, got.kept, time.monotonic() - t0, got.chain_kept)
