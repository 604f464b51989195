"""A constructive schedule of a pipeline *with communication streams* (sends and MoE all-to-alls as tasks, `unroll`
module docstring) by list scheduling: a warm start for the pipeline formulation where `greedy` has none.

Why: on a pipeline whose all-to-alls load the communication streams about as much as the compute streams (the
DeepSeek-V3-like preset on two nodes, p = 16: 4.9 s of all-to-all against 4.3 s of compute per device), every
baseline keeps a fixed compute order, so a compute stream waits for the dispatch of the next task in its order
while another micro-batch's task is ready.  A list schedule runs whatever is ready.

Rule (event-driven over the 2p streams; every task is pinned to one stream by the placement):

* a free **compute stream** takes, among its stages' next micro-batch of each kind (micro-batches in order per
  stage and kind, as the formulation's ``fifo`` family), the first of these that is ready:
  with `ListRule.backward_first`: the B whose stage is latest in its chain (nearest the loss), else the F whose
  stage is latest, else the oldest W;  without it: F, then B, then W (same keys);
  an F starts only if its activation fits under the device's cap with `reserve_slots` activations of every
  later stage of the same device kept free (a V holds its first and its last chunk: forwards of the first must not
  fill the memory the last needs to turn micro-batches around), and fewer micro-batches of its stage than the
  rule's in-flight limit (`ListRule`: by Little's law, or a share of the micro-batches) are between F's start and
  W's end;
* a free **communication stream** starts, among its ready tasks, the one of the lowest micro-batch (backward
  before forward, then first ready): serving the oldest micro-batch first keeps the pipeline's front moving, where
  first come, first served (a runtime's order) lets later micro-batches' sends delay earlier ones.

Memory follows `metrics.pipeline_memory` (allocated at F's start, the part B frees at B's end, the rest at W's end;
parameters held throughout).  `best_stream_list` tries the few rules of its policy's portfolio
(`StreamListPolicy.portfolio`) and keeps the shortest: no one rule is best on every pipeline
(docs/layers/pipeline.md).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

from planner.cost.instance import SchedulingInstance
from planner.pipeline.unroll import AllToAll, TrainingPipeline, Unrolled, UnrolledAction, unroll_actions
from planner.schedule.actions import Action, ActionKind, OverlapAction

F, B, W = ActionKind.F, ActionKind.B, ActionKind.W


@dataclass(frozen=True)
class ListRule:
    """One rule of the list schedule (module docstring).  The in-flight limit of a stage: with `little` set,
    `little` x L_s / I (Little's law: L_s, one micro-batch's ticks from the stage's F start to its W end with no
    queueing; I, the busiest stream's ticks per micro-batch: the in-flight count that keeps the pipeline at that
    stream's rate), else `share` x the micro-batches of a chain; at least 1.  With `fit` (Little's law only; ignored
    with `share`), a device whose limits would hold more activations than its cap leaves after parameters gets a
    smaller factor, the same for all its stages (`fitted_limits`), so that with no reserve (`reserve_slots` 0, as
    every fitted rule of the default portfolio) memory never refuses a forward."""

    backward_first: bool
    reserve_slots: int
    little: float | None = None
    share: float = 1.0
    fit: bool = False


@dataclass(frozen=True)
class StreamListPolicy:
    """The stream list schedule's tuning (`best_stream_list`, `fitted_limits`)."""

    # The rules: Little's-law factors just above 1 (both compute orders), two shares of the micro-batches, and larger
    # factors fitted to the cap per device.  The makespan is a rugged function of the factor, so no single rule is
    # best on every pipeline and the portfolio keeps several; each rule is one list schedule, cheap beside the solve
    # it warm-starts.  Unfitted factors much above 1.4 hold more activations in flight than the cap allows, so
    # forwards are refused for memory and the schedule stalls; fitted to each device's cap (`fit`), larger factors
    # keep their gain without the stall.
    portfolio: tuple[ListRule, ...] = (
        *(ListRule(first, 1, little=f) for f in (1.25, 1.3, 1.35, 1.4, 1.45) for first in (True, False)),
        ListRule(True, 3, share=0.5), ListRule(False, 3, share=1.0),
        *(ListRule(first, 0, little=f, fit=True) for f in (1.4, 1.6, 1.8, 2.0, 2.5, 3.0) for first in (True, False)))
    # the factor decrement of `fitted_limits`: finer finds a factor nearer the cap at one pass over a device's stages
    # per step
    fit_step: float = 0.02


DEFAULT_STREAM_LIST_POLICY = StreamListPolicy()  # for argument defaults
PORTFOLIO = DEFAULT_STREAM_LIST_POLICY.portfolio  # the default rules, for the tests and studies that read them


@dataclass(frozen=True)
class StreamTasks:
    """What every rule of the portfolio schedules, built once (`stream_tasks`): the unrolled tasks, each one's
    stream (the placement pins it) and duration there."""

    pipeline: TrainingPipeline
    tasks: Unrolled
    stream: tuple[int, ...]
    dur: tuple[int, ...]

    @cached_property
    def residence_per_interval(self) -> tuple[float, ...]:
        """Per stage s, L_s / I (`ListRule`): L_s by a longest-path pass over micro-batch 0's tasks from F(s, 0) to
        the end of W(s, 0) (no task of another micro-batch between them), I = the largest stream load /
        micro-batches."""
        tasks, stream, dur = self.tasks, self.stream, self.dur
        inst = tasks.instance
        load = [0] * inst.num_devices
        for t in range(inst.num_tasks):
            load[stream[t]] += dur[t]
        interval = max(1.0, max(load) / self.pipeline.num_microbatches)
        first = {t for t, a in enumerate(tasks.actions) if not isinstance(a, OverlapAction) and a.microbatch == 0}
        order = [t for t in inst.topological_order if t in first]
        out = []
        for s in range(self.pipeline.num_stages):
            earliest = {tasks.index[Action(s, F, 0)]: 0}
            for t in order:
                if t in earliest:
                    for v, e in inst.successors[t]:
                        earliest[v] = max(earliest.get(v, 0),
                                          earliest[t] + dur[t] + inst.comm(e, stream[t], stream[v]))
            w = tasks.index[Action(s, W, 0)]
            out.append((earliest[w] + dur[w]) / interval)
        return tuple(out)


def stream_tasks(pipeline: TrainingPipeline) -> StreamTasks | None:
    """The `StreamTasks` of `pipeline`, or None when it has no communication streams or no placement."""
    if not pipeline.streams_on or pipeline.stage_to_device is None:
        return None
    tasks = unroll_actions(pipeline)
    inst = tasks.instance
    stream = tuple(next(d for d in range(inst.num_devices) if inst.eligible(t, d)) for t in range(inst.num_tasks))
    return StreamTasks(pipeline, tasks, stream, tuple(int(inst.duration_tick[t, d]) for t, d in enumerate(stream)))


def _in_flight_limits(pipeline: TrainingPipeline, prepared: StreamTasks, rule: ListRule, cap: Sequence[int],
                      fit_step: float) -> list[int]:
    """Each stage's limit on forwards in flight: a share of the micro-batches, or Little's law (fitted to the cap
    with `rule.fit`, in steps of `fit_step`)."""
    nmb = pipeline.num_microbatches
    if rule.little is None:
        return [max(1, round(rule.share * nmb))] * pipeline.num_stages
    if rule.fit:
        return fitted_limits(prepared, rule.little, cap, fit_step)
    return little_limits(prepared, rule.little)


def _comm_key_fn(acts: Sequence[UnrolledAction], ready_at: list[int]) -> Callable[[int], tuple[int, int, int, int]]:
    """comm_key(t): the order of ready communication tasks on a stream: micro-batch, backward first, ready tick,
    index.  `ready_at` is the loop's own list, read as it changes."""

    def comm_key(t: int) -> tuple[int, int, int, int]:
        a = acts[t]
        assert isinstance(a, (Action, AllToAll))
        backward = (a.kind if isinstance(a, AllToAll) else a.kind.name).endswith("_B")
        return (a.microbatch, 0 if backward else 1, ready_at[t], t)

    return comm_key


def _compute_picker(pipeline: TrainingPipeline, rule: ListRule, cap: Sequence[int], acts: Sequence[UnrolledAction],
                    stages_of: list[list[int]], task_of: dict[tuple[int, ActionKind], list[int]],
                    nxt: dict[tuple[int, ActionKind], int], pending: list[int], ready_at: list[int], mem: list[int],
                    act: list[int], reserve: list[int], in_flight: list[int], limits: list[int]
                    ) -> Callable[[int, int], int | None]:
    """compute_pick(d, now): the compute task device d starts at `now` under `rule`, or None.  The lists and dicts
    are the loop's own state, read as it changes."""
    nmb = pipeline.num_microbatches

    def compute_pick(d: int, now: int) -> int | None:
        best: dict[ActionKind, int] = {}
        for s in stages_of[d]:  # latest chain position first: the first ready F and B found are the keys' best
            for k in (F, B, W):
                m = nxt[(s, k)]
                if m >= nmb:
                    continue
                t = task_of[(s, k)][m]
                if pending[t] or ready_at[t] > now:
                    continue
                if k is F and (mem[d] + act[s] + reserve[s] > cap[d] or in_flight[s] >= limits[s]):
                    continue
                if k is W:
                    if W not in best or m < acts[best[W]].microbatch:  # type: ignore[union-attr]
                        best[W] = t
                elif k not in best:
                    best[k] = t
        for k in ((B, F, W) if rule.backward_first else (F, B, W)):
            if k in best:
                return best[k]
        return None

    return compute_pick


def _dispatcher(p: int, inst: SchedulingInstance, acts: Sequence[UnrolledAction], dur: Sequence[int],
                compute_pick: Callable[[int, int], int | None], nxt: dict[tuple[int, ActionKind], int],
                busy: list[bool], mem: list[int], act: list[int], in_flight: list[int],
                comm_ready: list[list[tuple[tuple[int, int, int, int], int]]], out: dict[str, int],
                ends: list[tuple[int, int, int]]) -> Callable[[int], None]:
    """dispatch(now): start a task on every idle compute stream that has one, then on every idle communication
    stream with a ready task, in stream order."""

    def start(d: int, t: int, now: int) -> None:
        busy[d] = True
        out[inst.task_names[t]] = now
        heapq.heappush(ends, (now + dur[t], d, t))

    def dispatch(now: int) -> None:
        for d in range(p):
            if not busy[d]:
                t = compute_pick(d, now)
                if t is not None:
                    a = acts[t]
                    assert isinstance(a, Action)
                    nxt[(a.stage, a.kind)] += 1
                    if a.kind is F:
                        mem[d] += act[a.stage]
                        in_flight[a.stage] += 1
                    start(d, t, now)
        for d in range(p, 2 * p):
            if not busy[d] and comm_ready[d]:
                start(d, heapq.heappop(comm_ready[d])[1], now)

    return dispatch


def stream_list_times(pipeline: TrainingPipeline, cap: Sequence[int], rule: ListRule,
                      prepared: StreamTasks | None = None,
                      fit_step: float = DEFAULT_STREAM_LIST_POLICY.fit_step) -> dict[str, int] | None:
    """Start tick of every task of `pipeline`'s unrolled instance (compute, sends, all-to-alls) under `rule`, or
    None when the pipeline has no communication streams or no placement, or the rule gets stuck (the cap admits
    no forward that would let the others progress).  `prepared`: `stream_tasks(pipeline)`, when the caller has it;
    `fit_step`: `StreamListPolicy.fit_step`."""
    prepared = prepared or stream_tasks(pipeline)
    std = pipeline.stage_to_device
    if prepared is None or std is None:
        return None
    tasks, stream, dur = prepared.tasks, prepared.stream, prepared.dur
    inst = tasks.instance
    n, p, nmb = inst.num_tasks, pipeline.num_devices, pipeline.num_microbatches
    acts = tasks.actions
    pos = {s: i for c in pipeline.chains for i, s in enumerate(c)}
    stages_of = [sorted(pipeline.device_stages(d), key=lambda s: -pos[s]) for d in range(p)]
    act = [int(c.activation_bytes) for c in pipeline.stages]
    reserve = [rule.reserve_slots * sum(act[x] for x in stages_of[std[s]] if pos[x] > pos[s])
               for s in range(pipeline.num_stages)]
    limits = _in_flight_limits(pipeline, prepared, rule, cap, fit_step)
    # task of (stage, kind, micro-batch), looked up without building an Action per probe (the hot loop)
    task_of = {(s, k): [tasks.index[Action(s, k, m)] for m in range(nmb)]
               for s in range(pipeline.num_stages) for k in (F, B, W)}
    pending = [len(x) for x in inst.predecessors]
    ready_at = [0] * n
    nxt = {(s, k): 0 for s in range(pipeline.num_stages) for k in (F, B, W)}
    mem = [sum(int(pipeline.stages[s].param_bytes) for s in stages_of[d]) for d in range(p)]
    in_flight = [0] * pipeline.num_stages
    busy = [False] * (2 * p)
    comm_ready: list[list[tuple[tuple[int, int, int, int], int]]] = [[] for _ in range(2 * p)]
    out: dict[str, int] = {}
    ends: list[tuple[int, int, int]] = []  # (end tick, stream, task)
    wake: list[tuple[int, int]] = []  # (tick, task): a compute task becomes ready (an event to dispatch at)
    comm_key = _comm_key_fn(acts, ready_at)
    compute_pick = _compute_picker(pipeline, rule, cap, acts, stages_of, task_of, nxt, pending, ready_at, mem, act,
                                   reserve, in_flight, limits)
    dispatch = _dispatcher(p, inst, acts, dur, compute_pick, nxt, busy, mem, act, in_flight, comm_ready, out, ends)
    waiting: list[tuple[int, int]] = []  # (ready tick, task): communication tasks whose predecessors all ended

    def released(t: int, now: int) -> None:
        """Count down the successors of task t, which ended at `now`."""
        for v, e in inst.successors[t]:
            pending[v] -= 1
            ready_at[v] = max(ready_at[v], now + inst.comm(e, stream[t], stream[v]))
            if pending[v] == 0:
                heapq.heappush(waiting if stream[v] >= p else wake, (ready_at[v], v))

    for t in range(n):
        if not pending[t]:
            heapq.heappush(waiting if stream[t] >= p else wake, (0, t))
    while ends or wake or waiting:
        now = min(h[0][0] for h in (ends, wake, waiting) if h)
        while wake and wake[0][0] <= now:
            heapq.heappop(wake)
        while ends and ends[0][0] <= now:
            _, d, t = heapq.heappop(ends)
            busy[d] = False
            a = acts[t]
            if d < p:
                assert isinstance(a, Action)
                if a.kind is B:
                    mem[d] -= int(pipeline.stages[a.stage].activation_freed_by_b_bytes)
                elif a.kind is W:
                    mem[d] -= act[a.stage] - int(pipeline.stages[a.stage].activation_freed_by_b_bytes)
                    in_flight[a.stage] -= 1
            released(t, now)
        while waiting and waiting[0][0] <= now:
            _, v = heapq.heappop(waiting)
            heapq.heappush(comm_ready[stream[v]], (comm_key(v), v))
        dispatch(now)
    return out if len(out) == n else None


def best_stream_list(pipeline: TrainingPipeline, cap: Sequence[int],
                     policy: StreamListPolicy = DEFAULT_STREAM_LIST_POLICY) -> tuple[dict[str, int], int] | None:
    """(times, makespan) of the shortest `stream_list_times` over `policy.portfolio`, or None when no rule gives
    one."""
    prepared = stream_tasks(pipeline)
    if prepared is None:
        return None
    names = prepared.tasks.instance.task_names
    best: tuple[dict[str, int], int] | None = None
    for rule in policy.portfolio:
        times = stream_list_times(pipeline, cap, rule, prepared, policy.fit_step)
        if times is None:
            continue
        span = max(times[name] + d for name, d in zip(names, prepared.dur, strict=True))
        if best is None or span < best[1]:
            best = (times, span)
    return best


def little_limits(prepared: StreamTasks, factor: float) -> list[int]:
    """Per stage, max(1, round(factor x L_s / I)) (`ListRule`, `StreamTasks.residence_per_interval`)."""
    return [max(1, round(factor * r)) for r in prepared.residence_per_interval]


def fitted_limits(prepared: StreamTasks, factor: float, cap: Sequence[int],
                  step: float = DEFAULT_STREAM_LIST_POLICY.fit_step) -> list[int]:
    """`little_limits` with, per device d, the largest factor g <= `factor` (in steps of `step`) whose limits
    l_s = max(1, round(g x L_s / I)) over d's stages s satisfy params(d) + sum_s l_s x activation(s) <= cap[d]: the
    activations of the micro-batches in flight then always fit, so with no reserve memory never refuses a forward (a
    stage's micro-batch holds its activation from F's start to W's end, the span the limit counts).  Where nothing
    down to g = `step` fits, the device keeps the limits at that g (1 for every stage whose L_s / I is below 25)
    and memory refuses forwards as without `fit`."""
    pipeline = prepared.pipeline
    residence = prepared.residence_per_interval
    limits = [0] * pipeline.num_stages
    for d in range(pipeline.num_devices):
        stages = pipeline.device_stages(d)
        room = cap[d] - sum(int(pipeline.stages[s].param_bytes) for s in stages)
        g = factor
        while True:
            here = {s: max(1, round(g * residence[s])) for s in stages}
            if g <= step or sum(here[s] * int(pipeline.stages[s].activation_bytes) for s in stages) <= room:
                break
            g -= step
        for s in stages:
            limits[s] = here[s]
    return limits
