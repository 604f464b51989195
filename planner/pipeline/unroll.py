"""Unrolled training tasks: stages x micro-batches -> a `SchedulingInstance` of F, B, W (or BW) tasks.

Words (docs/architecture.md; the string forms are those of `planner.schedule.actions`): ``sFm`` is the forward of
stage s on micro-batch m, ``sBm`` its input-gradient backward (PyTorch's ``I``), ``sWm`` its weight-gradient
backward, ``sBWm`` the full backward (B and W fused, PyTorch's ``B``), ``sFm&tBWk`` an overlapped pair run as one
task (DualPipe's F&B, only when the pipeline gives the pair a duration of its own).

**Chains.**  A micro-batch walks a *chain* of stages: forward along it, backward back along it.  An ordinary
pipeline has one chain ``(0, 1, ..., S-1)``.  DualPipe has two: ``(0..p-1)`` from the first device down and
``(p..2p-1)`` from the last device up (stage p+j is the second copy of model chunk j, on device p-1-j); every chain
carries all `num_microbatches` micro-batches, so DualPipe with m micro-batches in total is a pipeline with
m/2 micro-batches per chain.

**Dependencies** (per chain c = (c_0, ..., c_{k-1}) and micro-batch m; "back" is B, or BW when fused):

    F(c_i, m)      -> F(c_{i+1}, m)     activation to the next stage   (costs `hop_tick(c_i)` across devices)
    F(c_{k-1}, m)  -> back(c_{k-1}, m)  the loss turns forward into backward (local)
    back(c_{i+1},m)-> back(c_i, m)      gradient to the previous stage (costs `hop_tick(c_i)` across devices)
    F(s, m)        -> back(s, m)        the backward needs the stage's own saved activations (local)
    B(s, m)        -> W(s, m)           weight gradient after input gradient (local)
    F(s, m)        -> W(s, m)           no new ordering; it carries the saved activations to W (see Memory)

**Backward-cost rule.**  For a stage made of matrix products Y = X A, the forward costs one product; the input
gradient dX = dY A^T costs one product and the weight gradient dA = X^T dY one more, so B ~ W ~ F and the full
backward BW ~ 2F.  `StageCost.from_forward(f)` applies that rule; `StageCost.full_backward_tick` is B + W unless
given (a fused kernel may be cheaper).

**Memory.**  Activation memory of (s, m) is allocated when F(s, m) starts, partly released when B(s, m) ends
(`StageCost.activation_freed_by_b_bytes`) and the rest when W(s, m) ends (or all at once when BW ends).  In the
`SchedulingInstance` an activation lives from its producer's start until its last consumer on the same device
ends, so F(s, m) gets `activation_bytes` = the whole activation and the local edge F(s, m) -> W(s, m) keeps it
alive until W ends: "allocated at F, freed at W".  Two differences from the pipeline accounting remain in the
instance's generic memory model: the part B frees is held until W (one output per task cannot shrink), and the
receiving device also counts a copy of F(s, m)'s output from its arrival until F(s+1, m) ends (the receive
buffer).  `metrics.pipeline_memory` is the exact pipeline accounting (what compare.csv and the formulation use).
Parameter memory is held per stage *copy*: `param_bytes` sits on the task F(s, 0) of each stage (the instance
holds a task's parameters for the whole step), so a device hosting two stages (DualPipe's two copies of a
chunk, or a V's two chunks) counts both.

**Communication streams** (`TrainingPipeline.comm_stream`).  Without them a hop between devices is an edge
delay: every transfer overlaps compute and any number of transfers run at once.  With them, every hop whose
two stages sit on different devices (and whose delay is > 0) becomes a task on the *sender's* communication
stream — device d has one compute stream (instance device d) and one communication stream (instance device
p + d, named ``p<d>/comm``) — so a device's sends run one at a time, overlapping its compute but not each other:

    F(c_i, m) -> ``c_iSEND_Fm`` (on comm stream of dev(c_i), lasts hop_tick(c_i)) -> F(c_{i+1}, m)
    back(c_{i+1}, m) -> ``c_{i+1}SEND_Bm`` (on comm stream of dev(c_{i+1}), lasts hop_tick(c_i)) -> back(c_i, m)

(the edges themselves then cost nothing).  The receive is the send's end (a recv posted in advance, as
torch.distributed.pipelining does).  The same instance serves the baselines (their compute orders are given, the
streams run their sends first come, first served: `streams.simulate_pipeline`) and the formulation (the sends
are intervals of a no-overlap per stream, ordered by the solver).  Figures (bubble, memory) count compute streams
only.

**MoE all-to-all** (`StageCost.a2a_tick` > 0, placement given; turns the communication streams on).  A stage with
MoE layers exchanges its tokens with the expert ranks before and after its experts, forward and backward.  Simple
model: per (stage, micro-batch) four tasks on the communication stream of the stage's device, each lasting
`a2a_tick` (all of the stage's MoE layers' dispatches, or combines, together):

    preds of F(s, m)    -> ``sDISPATCH_Fm`` -> F(s, m)    -> ``sCOMBINE_Fm`` -> succs of F(s, m)
    preds of back(s, m) -> ``sDISPATCH_Bm`` -> back(s, m) -> ``sCOMBINE_Bm`` -> succs of back(s, m) (not W)

(the weight gradient needs only the dispatched gradient, so back -> W stays direct).  The all-to-all of one
micro-batch thus runs on the communication stream while the compute stream runs another micro-batch's F or B — the
overlap DualPipe is built on — for the baselines (first come, first served, `streams`) and the formulation
(ordered by the solver) alike.  An overlapped pair F&B waits for both halves' dispatches and both combines wait
for the pair.  The split of F and B around the experts (attention before, combine after) is modelled by
cutting the stage into sub-stages on one device (`planner.compare.subchunks`): the experts' sub-stage then
carries the all-to-alls.  A stage may run only some of the four kinds (`StageCost.a2a_kinds`; e.g. a piece's
first sub-stage its dispatch before F and its combine after B, its last sub-stage the other two, so that the
sub-stages of a piece exchange tokens where the whole piece did).

Placement: `stage_to_device` pins every stage to a device (fixed, looping, V-shape); None leaves every task
eligible on every device (free; keeping a stage's tasks together is then the formulation's business).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.pipeline.training_pipeline import (
    A2A_KINDS,
    StageCost,
    TrainingPipeline,
    fixed_placement,
    uniform_pipeline,
    v_placement,
)
from planner.schedule.actions import Action, ActionKind, OverlapAction, parse_action
from planner.schedule.program import Schedule

# The pipeline's description lives in `planner.pipeline.training_pipeline`; its names stay importable from here.
__all__ = [
    "A2A_KINDS", "AllToAll", "StageCost", "TrainingPipeline", "Unrolled", "UnrolledAction", "action_of",
    "fixed_placement", "instance_for_schedule", "uniform_pipeline", "unroll", "unroll_actions", "v_placement",
]


# ------------------------------------------------------------------------------------------- unrolling
def _fused_and_pairs(schedule: Schedule | None) -> tuple[set[tuple[int, int]], list[OverlapAction]]:
    fused: set[tuple[int, int]] = set()
    pairs: list[OverlapAction] = []
    if schedule is None:
        return fused, pairs
    for row in schedule.actions:
        for a in row:
            parts = (a.forward, a.backward) if isinstance(a, OverlapAction) else (a,)
            if isinstance(a, OverlapAction):
                pairs.append(a)
            for x in parts:
                if x.kind is ActionKind.BW:
                    fused.add((x.stage, x.microbatch))
    return fused, pairs


@dataclass(frozen=True, slots=True)
class AllToAll:
    """One MoE all-to-all task of an unrolled instance (`kind` one of `A2A_KINDS`): ``sDISPATCH_Fm`` ..."""

    stage: int
    kind: str
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"


UnrolledAction = Action | OverlapAction | AllToAll
"""What one task of an unrolled instance does: a compute action (F, B, W, BW), an overlapped pair, a send
(SEND_F / SEND_B, keyed by the stage that sends it), or an all-to-all."""


@dataclass(frozen=True)
class Unrolled:
    """An unrolled instance and the action of each of its tasks (``str(actions[t]) == instance.task_names[t]``),
    so that code working on the instance keys its tasks by `Action` values instead of parsing names."""

    instance: SchedulingInstance
    actions: tuple[UnrolledAction, ...]

    @cached_property
    def index(self) -> Mapping[UnrolledAction, int]:
        """Task index of each action."""
        return {a: t for t, a in enumerate(self.actions)}

    def task(self, stage: int, kind: ActionKind, microbatch: int) -> int:
        """Index of the task running Action(stage, kind, microbatch)."""
        return self.index[Action(stage, kind, microbatch)]

    def stage_of(self, task: int) -> int:
        """The task's stage: an action's own, a pair's forward's, a send's sending stage, an all-to-all's."""
        a = self.actions[task]
        return a.forward.stage if isinstance(a, OverlapAction) else a.stage


def unroll(
    pipeline: TrainingPipeline,
    *,
    fused: Iterable[tuple[int, int]] = (),
    pairs: Sequence[OverlapAction] = (),
) -> SchedulingInstance:
    """The instance of `pipeline`: tasks F, B, W per (stage, micro-batch), or BW for the (stage, micro-batch)
    pairs in `fused`; each overlapped pair in `pairs` becomes one task of duration `pipeline.pair_tick` (only
    when that is set; otherwise the pair runs as its two halves)."""
    return unroll_actions(pipeline, fused=fused, pairs=pairs).instance


@dataclass
class _TaskRows:
    """The unrolled tasks in index order, one entry per task in each list; `stream_of`: communication task ->
    its stream."""

    acts: list[UnrolledAction] = field(default_factory=list)
    dur: list[int] = field(default_factory=list)
    act: list[int] = field(default_factory=list)
    par: list[int] = field(default_factory=list)
    stage_of: list[int] = field(default_factory=list)  # -1 for a communication task
    stream_of: dict[int, int] = field(default_factory=dict)


def _compute_tasks(pipeline: TrainingPipeline, fused: set[tuple[int, int]]) -> _TaskRows:
    """F, then BW (fused) or B and W, of every stage and microbatch, stage-major; a stage's parameters are
    counted on its first F."""
    rows = _TaskRows()
    acts, dur, act, par, stage_of = rows.acts, rows.dur, rows.act, rows.par, rows.stage_of
    F, B, W, BW = ActionKind.F, ActionKind.B, ActionKind.W, ActionKind.BW
    for s, cost in enumerate(pipeline.stages):
        for m in range(pipeline.num_microbatches):
            acts.append(Action(s, F, m))
            dur.append(int(cost.forward_tick))
            act.append(int(cost.activation_bytes))
            par.append(int(cost.param_bytes) if m == 0 else 0)
            stage_of.append(s)
            if (s, m) in fused:
                acts.append(Action(s, BW, m))
                dur.append(cost.bw_tick)
                act.append(0)
                par.append(0)
                stage_of.append(s)
            else:
                acts += [Action(s, B, m), Action(s, W, m)]
                dur += [int(cost.input_grad_tick), int(cost.weight_grad_tick)]
                act += [0, 0]
                par += [0, 0]
                stage_of += [s, s]
    return rows


def _comm_tasks(pipeline: TrainingPipeline, rows: _TaskRows) -> list[int]:
    """Append the sends of the hops on a communication stream, then the all-to-alls; returns the all-to-all
    stages."""
    acts, dur, act, par, stage_of, stream_of = rows.acts, rows.dur, rows.act, rows.par, rows.stage_of, rows.stream_of
    p = pipeline.num_devices
    std = pipeline.stage_to_device
    for chain in pipeline.chains:
        for i, s in enumerate(chain[:-1]):
            if not pipeline.sends_on_stream(s, chain[i + 1]):
                continue
            assert std is not None
            for m in range(pipeline.num_microbatches):
                nxt = chain[i + 1]
                for send, dev in ((Action(s, ActionKind.SEND_F, m), std[s]),
                                  (Action(nxt, ActionKind.SEND_B, m), std[nxt])):
                    stream_of[len(acts)] = p + dev
                    acts.append(send)
                    dur.append(pipeline.hop_tick(s))
                    act.append(0)
                    par.append(0)
                    stage_of.append(-1)
    a2a_stages = [s for s, c in enumerate(pipeline.stages) if int(c.a2a_tick) > 0] if pipeline.has_a2a else []
    for s in a2a_stages:
        assert std is not None
        for m in range(pipeline.num_microbatches):
            for kind in pipeline.stages[s].a2a_kind_set:
                stream_of[len(acts)] = p + std[s]
                acts.append(AllToAll(s, kind, m))
                dur.append(int(pipeline.stages[s].a2a_tick))
                act.append(0)
                par.append(0)
                stage_of.append(-1)
    return a2a_stages


def _chain_edges(pipeline: TrainingPipeline, idx: Mapping[UnrolledAction, int], fused: set[tuple[int, int]],
                 back: Callable[[int, int], int]) -> list[tuple[int, int, int]]:
    """The dependencies along every chain, per microbatch: F -> back within a stage, F forward and back backward
    across a hop (through its sends when on a stream, else with the hop's delay), B -> W and F -> W."""
    F, B, W = ActionKind.F, ActionKind.B, ActionKind.W
    edges: list[tuple[int, int, int]] = []
    for chain in pipeline.chains:
        for m in range(pipeline.num_microbatches):
            for i, s in enumerate(chain):
                f = idx[Action(s, F, m)]
                edges.append((f, back(s, m), 0))
                if i + 1 < len(chain) and pipeline.sends_on_stream(s, chain[i + 1]):
                    nxt = chain[i + 1]
                    sf, sb = idx[Action(s, ActionKind.SEND_F, m)], idx[Action(nxt, ActionKind.SEND_B, m)]
                    edges += [(f, sf, 0), (sf, idx[Action(nxt, F, m)], 0),
                              (back(nxt, m), sb, 0), (sb, back(s, m), 0)]
                elif i + 1 < len(chain):
                    c = pipeline.hop_tick(s)
                    edges.append((f, idx[Action(chain[i + 1], F, m)], c))
                    edges.append((back(chain[i + 1], m), back(s, m), c))
                if (s, m) not in fused:
                    edges.append((idx[Action(s, B, m)], idx[Action(s, W, m)], 0))
                    edges.append((f, idx[Action(s, W, m)], 0))
    return edges


def _pin_streams(pipeline: TrainingPipeline, inst: SchedulingInstance, rows: _TaskRows) -> SchedulingInstance:
    """Name the streams and make every task eligible only where it runs: its stage's device (or its
    communication stream) under a placement, any compute stream without one."""
    p = pipeline.num_devices
    if pipeline.streams_on:
        inst = dataclasses.replace(inst, device_names=tuple(f"p{d}" for d in range(p))
                                   + tuple(f"p{d}/comm" for d in range(p)))
    if pipeline.stage_to_device is not None:
        pinned = np.full_like(inst.duration_tick, INELIGIBLE)
        for t, s in enumerate(rows.stage_of):
            d = rows.stream_of[t] if s < 0 else pipeline.stage_to_device[s]
            pinned[t, d] = inst.duration_tick[t, 0]
        inst = dataclasses.replace(inst, duration_tick=pinned)
    elif pipeline.streams_on:
        pinned = inst.duration_tick.copy()
        pinned[:, p:] = INELIGIBLE  # free placement: compute tasks on compute streams only
        inst = dataclasses.replace(inst, duration_tick=pinned)
    return inst


def unroll_actions(
    pipeline: TrainingPipeline,
    *,
    fused: Iterable[tuple[int, int]] = (),
    pairs: Sequence[OverlapAction] = (),
) -> Unrolled:
    """`unroll`, with the action of every task."""
    fused = set(fused)
    rows = _compute_tasks(pipeline, fused)
    a2a_stages = _comm_tasks(pipeline, rows)
    acts = rows.acts
    idx: dict[UnrolledAction, int] = {a: i for i, a in enumerate(acts)}
    B, BW = ActionKind.B, ActionKind.BW

    def back(s: int, m: int) -> int:
        return idx[Action(s, BW, m)] if (s, m) in fused else idx[Action(s, B, m)]

    edges = _chain_edges(pipeline, idx, fused, back)
    if a2a_stages:
        edges = _through_a2a(edges, idx, a2a_stages, pipeline.num_microbatches, back,
                             {s: pipeline.stages[s].a2a_kind_set for s in a2a_stages})
    names = [str(a) for a in acts]
    inst = SchedulingInstance.uniform(pipeline.name, rows.dur, edges, pipeline.num_streams, task_names=names,
                                      param_bytes=rows.par, activation_bytes=rows.act)
    inst = _pin_streams(pipeline, inst, rows)
    maybe_timed = [(pr, pipeline.pair_tick(pr.forward.stage, pr.backward.stage, pr.backward.kind is ActionKind.BW))
                   for pr in pairs]
    timed = [(pr, t) for pr, t in maybe_timed if t is not None]
    if not timed:
        return Unrolled(inst, tuple(acts))
    return _merge_pairs(Unrolled(inst, tuple(acts)), [pr for pr, _ in timed], [t for _, t in timed])


def _through_a2a(edges: list[tuple[int, int, int]], idx: Mapping[UnrolledAction, int], stages: Sequence[int],
                 num_mb: int, back: Callable[[int, int], int],
                 kinds: Mapping[int, Sequence[str]]) -> list[tuple[int, int, int]]:
    """Route every edge into F(s, m) / back(s, m) of an all-to-all stage through its dispatch and every edge out
    of them through its combine (except back -> W: the weight gradient needs only the dispatched gradient); only
    for the kinds the stage runs (`kinds[s]`)."""
    into: dict[int, int] = {}
    out_of: dict[int, int] = {}
    local: set[tuple[int, int]] = set()
    extra: list[tuple[int, int, int]] = []
    for s in stages:
        for m in range(num_mb):
            f, bk = idx[Action(s, ActionKind.F, m)], back(s, m)
            for kind, task, entering in (("DISPATCH_F", f, True), ("COMBINE_F", f, False),
                                         ("DISPATCH_B", bk, True), ("COMBINE_B", bk, False)):
                if kind not in kinds[s]:
                    continue
                a2a = idx[AllToAll(s, kind, m)]
                if entering:
                    into[task] = a2a
                    extra.append((a2a, task, 0))
                else:
                    out_of[task] = a2a
                    extra.append((task, a2a, 0))
            w = Action(s, ActionKind.W, m)
            if w in idx:
                local.add((bk, idx[w]))
    out = []
    for u, v, c in edges:
        if (u, v) in local:
            out.append((u, v, c))
        else:
            out.append((out_of.get(u, u), into.get(v, v), c))
    return out + extra


def _merge_pairs(unrolled: Unrolled, pairs: Sequence[OverlapAction], ticks: Sequence[int]) -> Unrolled:
    """Replace each pair's two tasks by one task named ``F&B`` lasting its tick (edges, memory, eligibility
    united)."""
    inst, idx = unrolled.instance, unrolled.index
    group = list(range(inst.num_tasks))
    merged: dict[int, OverlapAction] = {}
    tick_of: dict[int, int] = {}
    for pr, tick in zip(pairs, ticks, strict=True):
        f, b = idx[pr.forward], idx[pr.backward]
        group[b] = f
        merged[f] = pr
        tick_of[f] = int(tick)
    keep = [t for t in range(inst.num_tasks) if group[t] == t]
    pos = {t: i for i, t in enumerate(keep)}
    acts = tuple(merged.get(t, unrolled.actions[t]) for t in keep)
    names = [str(a) for a in acts]
    dur = inst.duration_tick[keep].copy()
    for f in merged:
        row = dur[pos[f]]
        row[row < INELIGIBLE] = tick_of[f]
    # Two edges can join the same two merged tasks (a pair's forward and its backward both feed the next pair on
    # the other device: the activation one way, the gradient the other way round the V); each is its own delay, so
    # the merged edge waits for the longer one, not for their sum (a summed edge made the validator reject the
    # formulation's schedules with sends as edge delays and overlapped pairs)
    delay_of: dict[tuple[int, int], int] = {}
    for e, (u, v) in enumerate(inst.edges):
        gu, gv = pos[group[u]], pos[group[v]]
        if gu != gv:
            delay_of[gu, gv] = max(delay_of.get((gu, gv), 0), int(inst.edge_fixed_tick[e]))
    edges = [(gu, gv, tick) for (gu, gv), tick in delay_of.items()]
    act = [int(inst.activation_bytes[t]) + sum(int(inst.activation_bytes[x]) for x in range(inst.num_tasks)
                                               if group[x] == t and x != t) for t in keep]
    par = [int(inst.param_bytes[t]) + sum(int(inst.param_bytes[x]) for x in range(inst.num_tasks)
                                          if group[x] == t and x != t) for t in keep]
    out = SchedulingInstance.uniform(inst.name, [0] * len(keep), edges, inst.num_devices, task_names=names,
                                     param_bytes=par, activation_bytes=act)
    return Unrolled(dataclasses.replace(out, duration_tick=dur), acts)


def instance_for_schedule(pipeline: TrainingPipeline, schedule: Schedule) -> SchedulingInstance:
    """The instance on which `schedule` runs: BW tasks where it runs full backwards, pair tasks where it
    overlaps F&B (when the pipeline gives pairs a duration)."""
    fused, pairs = _fused_and_pairs(schedule)
    return unroll(pipeline, fused=fused, pairs=pairs)


def action_of(task_name: str) -> tuple[Action, ...]:
    """The compute actions a task named `task_name` performs (two for a pair task); for code that holds only
    names (a timeline, a plan file).  Code that unrolled the pipeline itself reads `Unrolled.actions`."""
    a = parse_action(task_name)
    return (a.forward, a.backward) if isinstance(a, OverlapAction) else (a,)
