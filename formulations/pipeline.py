"""The pipeline formulation: order every F, B, W task of a training pipeline on its device to minimise makespan
under a memory cap per device, optionally merging a forward and a backward into one overlapped pair.

Sets.  T: the tasks of the unrolled pipeline with split backwards (``sFm``, ``sBm``, ``sWm``; `unroll.unroll`
with nothing fused), plus, when the pipeline has communication streams, the sends ``sSEND_Fm`` / ``sSEND_Bm``;
dev(t): the task's stream — a device's compute stream, or for a send the sender's communication stream
(placement fixed per device, looping or V-shape — given, not chosen); E: the precedence edges of `unroll`
(chains, or chains through the sends; F -> B, B -> W, F -> W).  Baselines are simulated on the same instance
(`planner.pipeline.streams`), so sends cost the same for both.
P (only when the pipeline's pairs gain, `TrainingPipeline.pairs_gain`: `fb_overlap` X < 1): candidate
overlapped pairs q = (f, b[, w]) of a forward f = F(s, m) and an input-gradient backward b = B(s', k) on the same
device, neither an ancestor of the other in E, either alone (``F&B``) or with b's weight gradient w = W(s', k)
fused in (``F&BW``, DualPipe's pair).  Restriction (documented, keeps P small): with a warm start, k is within
`pair_window` micro-batches of the B(s', .) that starts nearest to f in the warm start, and the warm start's own
pairs are always in P; without a warm start every k.  T_q: the tasks of q.

Data.  d_t duration (ticks); c_e the edge's delay when its ends sit on different devices (0 otherwise);
D_q = `pipeline.pair_tick` = round(X * (F_s + B_s' [+ W_s'])) the duration of pair q;
A_s activation of stage s allocated at F's start, of which A^B_s is released at B's end and the rest at W's end;
P_d parameters on device d (every stage copy it hosts); Cap_d memory cap of device d; H horizon (the warm start's
makespan, else the serial sum).

Variables.  S_t in [0, H] start of t; E_t in [0, H] its end (for a task in no candidate pair, E_t is the
expression S_t + d_t); x_q in {0, 1} pair q is run; a_t in {0, 1} t runs alone (t in some T_q; else a_t = 1);
C in [LB, H] makespan.

Objective.  minimise C.

Constraints (family name, building function):

1. ``prec[u=..,v=..]`` (`_precedence`): S_v >= E_u + c_e for every edge e = (u, v); for the edge B -> W of a
   (stage, micro-batch) whose W some full pair may run, only when W runs alone (a_W => ...; in the pair, B and W
   are one task).
2. ``device[d=..]`` (`_no_overlap`): on stream d the present intervals do not overlap: [S_t, E_t) of every task
   t of d, present iff a_t, and [S_f, S_f + D_q) of every pair q on d, present iff x_q (compute streams: F, B,
   W and pairs; communication streams: the sends of that device, in an order the solver chooses).
3. ``memory[d=..]`` (`_memory`): cumulative on device d of the intervals [S_F, E_W) with demand A_s - A^B_s
   and [S_F, E_B) with demand A^B_s, for every (stage, micro-batch) on d, against Cap_d - P_d — exactly the
   accounting of `planner.pipeline.metrics.pipeline_memory` (a pair's forward allocates at the pair's start,
   its backward frees at the pair's end).
4. ``makespan[t=..]`` (`_makespan`): C >= E_t for every task without successors.
5. ``fifo[s=..,k=..,m=..]`` (`_fifo`, optional, on by default): on every stage, F's, B's and W's run in micro-batch
   order: S_{k,m+1} >= E_{k,m}.  Every baseline keeps this order, so this keeps the warm start while cutting the
   micro-batch permutations.  Without candidate pairs it loses no schedule, so the bound holds for every order.
   The micro-batches are identical and independent: the same tasks, durations and delays, and no edge joins two.
   So from any schedule, give micro-batch k of each task (F, B, W of a stage, a send, an all-to-all) the k-th
   smallest start among that task's copies (`formulations.pipeline_units.renamed_in_order`).  Each stream runs the
   same intervals (family 2).  Memory takes and frees the same bytes at the same ticks (family 3).  An edge's
   S_v >= E_u + c_e, which holds for every micro-batch, holds between the sorted lists too: the k-th smallest S_v
   is at least the k-th smallest E_u + c_e (family 1).  So the renamed schedule is in order, with the same
   makespan.  Checked on random pipelines: the optimum is the same with and without family 5 (tests).  With
   pairs (a pair joins two micro-batches) the bound is the bound *among in-order schedules*.
6. Pairs (`_pairs`, only with P):
   ``pair_one[t=..]``: a_t + sum_{q : t in T_q} x_q = 1 — every half runs alone or in exactly one pair;
   ``alone[t=..]``: a_t => E_t = S_t + d_t;
   ``pair[q=..,t=..]``: x_q => S_t = S_f and E_t = S_f + D_q for every t in T_q (the pair starts and ends as one
   task: its forward's successors and its backward's wait for the pair's end).

Bound.  Besides the solver's bound, the instance's trivial bound (critical path, work / devices) and the
*device bound* max_d (min head on d + work of d + min tail on d) — no task of d can start before the longest path
into it, and after d's last task its longest path out remains — which is what proves the start-up of a V's or a
pipeline's far devices.  With pairs, durations in heads, tails and the critical path are min(d_t, D_q over q
containing t), and the work of d is its serial work less, for each forward (or each backward) on d, the largest
saving d_f + d_b (+ d_w) - D_q of a pair containing it (the larger of the two figures).

Building: `build_pipeline_model` creates the variables and calls one function per family; `hint_pipeline` hints a
known schedule; `prepare_pipeline` gathers the data, bounds and warm start of a solve (`PipelineSetup`) and
`finish_pipeline` turns a schedule into the `PipelineSolution` (both shared with the large-neighbourhood search,
`planner.search.pipeline`).  Tasks are keyed by their `Action` (`planner.pipeline.unroll.Unrolled`), never by
parsing names.
Solving: `formulations.driver.solve_formulation` on `PipelineFormulation` (the warm start is the known
solution; MILP backends bound family 3 conservatively, so a warm start they call infeasible comes back).

Result: `PipelineSolution` with the per-device `Schedule` (tasks sorted by start, chosen pairs as ``F&B`` /
``F&BW`` actions), the solver's times as a `Plan` on the instance with the chosen pairs merged (validated by the
independent validator before it is returned), the bound and the gap.  Infeasible caps raise `InfeasibleError`
naming the device and how much memory the parameters and one micro-batch need.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from formulations.backends import Backend, get_backend
from formulations.driver import Formulation, solve_formulation
from formulations.model_api import (
    LinExpr,
    ModelBuilder,
    SolveResult,
    Var,
    as_expr,
    cname,
    interval,
)
from formulations.pipeline_bounds import (
    PairCandidate,
    check_fits,
    device_bound_parts,
    device_bound_tick,
    device_of,
    heads_and_tails,
    pair_bound,
    pair_candidates,
    pipeline_device_bound,
)
from planner.cost.instance import SchedulingInstance
from planner.errors import OpplanError
from planner.pipeline.greedy import best_greedy
from planner.pipeline.metrics import peak_level
from planner.pipeline.unroll import (
    TrainingPipeline,
    Unrolled,
    UnrolledAction,
    action_of,
    unroll_actions,
)
from planner.schedule.actions import Action, ActionKind, OverlapAction, parse_action
from planner.schedule.plan import Plan, PlanMethod, PlanStatus, TaskPlacement
from planner.schedule.program import Schedule, schedule_from_plan
from planner.schedule.timeline import Timeline, timeline_of_plan
from planner.schedule.validate import validate_plan

F, B, W, BW = ActionKind.F, ActionKind.B, ActionKind.W, ActionKind.BW
log = logging.getLogger(__name__)

# the data and bounds of `formulations.pipeline_bounds` are importable from here too, beside the model they serve
__all__ = ["PairCandidate", "PipelineFormulation", "PipelineModel", "PipelineSetup", "PipelineSolution",
           "PipelineTimes", "build_pipeline_model", "device_bound_parts", "device_bound_tick", "device_of",
           "finish_pipeline", "heads_and_tails", "hint_pipeline", "pair_candidates", "pipeline_device_bound",
           "prepare_pipeline", "solve_pipeline", "split_start_times", "warm_by_action"]


@dataclass(frozen=True)
class PipelineSolution:
    schedule: Schedule
    plan: Plan
    timeline: Timeline
    instance: SchedulingInstance
    status: PlanStatus
    lower_bound_tick: int
    solve_time_s: float
    time_to_best_s: float = 0.0  # seconds from the call until the returned schedule was found (0: the warm start)
    pairs: tuple[str, ...] = ()  # the overlapped pairs the schedule runs (``F&B`` / ``F&BW`` names)

    @property
    def gap(self) -> float:
        return self.plan.gap


@dataclass(frozen=True)
class PipelineTimes:
    """A schedule of the split instance: the start tick of every task and the candidate pairs it runs
    (indices into the candidate list)."""

    start: tuple[int, ...]
    pairs: tuple[int, ...] = ()


@dataclass
class PipelineModel:
    """The variables of one built pipeline formulation (for hints and extraction)."""

    tasks: Unrolled
    pipeline: TrainingPipeline
    builder: ModelBuilder
    device: list[int]
    start: list[Var]
    makespan: Var
    horizon: int
    pairs: list[PairCandidate] = field(default_factory=list)
    end: list[LinExpr] = field(default_factory=list)
    end_var: dict[int, Var] = field(default_factory=dict)  # E_t of every task in some candidate pair
    alone: dict[int, Var] = field(default_factory=dict)  # a_t of every task in some candidate pair
    chosen: list[Var] = field(default_factory=list)  # x_q, one per candidate pair

    @property
    def inst(self) -> SchedulingInstance:
        return self.tasks.instance


def _dur(m: PipelineModel, t: int) -> int:
    return int(m.inst.duration_tick[t, m.device[t]])


# ------------------------------------------------------------------------------------------------ the model
def build_pipeline_model(tasks: Unrolled, pipeline: TrainingPipeline, builder: ModelBuilder, device: Sequence[int],
                         pairs: Sequence[PairCandidate], cap: Sequence[int], *, horizon: int, lower_bound: int,
                         fifo: bool = True) -> PipelineModel:
    """Create the variables (module docstring), the numbered constraint families and the objective on `builder`."""
    inst = tasks.instance
    in_pair = {t for q in pairs for t in q.tasks}
    start = [builder.int_var(0, max(0, horizon - (0 if t in in_pair else int(inst.duration_tick[t, device[t]]))),
                             f"S_{n}") for t, n in enumerate(inst.task_names)]
    makespan = builder.int_var(min(lower_bound, horizon), horizon, "C")
    m = PipelineModel(tasks, pipeline, builder, list(device), start, makespan, horizon, list(pairs))
    m.end = [start[t] + _dur(m, t) for t in range(inst.num_tasks)]
    for t in sorted(in_pair):
        m.end_var[t] = builder.int_var(0, horizon, f"E_{inst.task_names[t]}")
        m.end[t] = as_expr(m.end_var[t])
        m.alone[t] = builder.bool_var(f"a_{inst.task_names[t]}")
    m.chosen = [builder.bool_var(f"x_{q.name}") for q in pairs]
    _precedence(m)
    _no_overlap(m)
    _memory(m, cap)
    _makespan(m)
    if fifo:
        _fifo(m)
    if pairs:
        _pairs(m)
    builder.minimize(makespan)
    return m


def _precedence(m: PipelineModel) -> None:
    """1. prec: a task starts after each predecessor has ended and its data arrived."""
    inst, acts = m.inst, m.tasks.actions
    full = {q.w for q in m.pairs if q.w is not None}  # W's that a full pair may run together with their B
    for e, (u, v) in enumerate(inst.edges):
        delay = inst.comm(e, m.device[u], m.device[v])
        c = m.start[v] >= m.end[u] + delay
        name = cname("prec", u=inst.task_names[u], v=inst.task_names[v])
        wa = acts[v]
        if v in full and isinstance(wa, Action) and acts[u] == Action(wa.stage, B, wa.microbatch):
            m.builder.add_if(m.alone[v], c, name)  # B -> W inside a chosen full pair is the pair itself
        else:
            m.builder.add(c, name)


def _no_overlap(m: PipelineModel) -> None:
    """2. device: one task (or pair) at a time on every stream."""
    for d in range(m.inst.num_devices):
        ivs = [interval(m.start[t], _dur(m, t), m.end[t], m.alone.get(t), f"iv_{m.inst.task_names[t]}")
               for t in range(m.inst.num_tasks) if m.device[t] == d]
        ivs += [interval(m.start[q.f], q.tick, m.start[q.f] + q.tick, x, f"iv_{q.name}")
                for q, x in zip(m.pairs, m.chosen, strict=True) if m.device[q.f] == d]
        m.builder.no_overlap(ivs, cname("device", d=d))


def _memory(m: PipelineModel, cap: Sequence[int]) -> None:
    """3. memory: activations held from F's start to B's / W's end fit beside the device's parameters."""
    pl, task = m.pipeline, m.tasks.task
    for d in range(pl.num_devices):
        params = sum(int(pl.stages[s].param_bytes) for s in pl.device_stages(d))
        ivs, dem = [], []
        for s in pl.device_stages(d):
            cost = pl.stages[s]
            a_b = int(cost.activation_freed_by_b_bytes)
            a_w = int(cost.activation_bytes) - a_b
            for k in range(pl.num_microbatches):
                f, b, w = task(s, F, k), task(s, B, k), task(s, W, k)
                for demand, until in ((a_w, w), (a_b, b)):
                    if demand > 0:
                        end = m.end[until]
                        ivs.append(interval(m.start[f], end - m.start[f], end, None, f"act_{s}_{k}_{until}"))
                        dem.append(demand)
        if ivs:
            m.builder.cumulative(ivs, dem, int(cap[d]) - params, cname("memory", d=d))


def _makespan(m: PipelineModel) -> None:
    """4. makespan: C covers the end of every task without successors."""
    for t in range(m.inst.num_tasks):
        if not m.inst.successors[t]:
            m.builder.add(m.makespan >= m.end[t], cname("makespan", t=m.inst.task_names[t]))


def _fifo(m: PipelineModel) -> None:
    """5. fifo: on every stage, F's, B's and W's run in micro-batch order."""
    task = m.tasks.task
    for s in range(m.pipeline.num_stages):
        for kind in (F, B, W):
            for k in range(m.pipeline.num_microbatches - 1):
                a, b = task(s, kind, k), task(s, kind, k + 1)
                m.builder.add(m.start[b] >= m.end[a], cname("fifo", s=s, k=kind.value, m=k))


def _pairs(m: PipelineModel) -> None:
    """6. pair_one / alone / pair: every half runs alone or in exactly one chosen pair, which runs as one task."""
    inst, bld = m.inst, m.builder
    member: dict[int, list[Var]] = {t: [] for t in m.alone}
    for q, x in zip(m.pairs, m.chosen, strict=True):
        for t in q.tasks:
            member[t].append(x)
            end = m.start[q.f] + q.tick
            if t != q.f:
                bld.add_if(x, m.start[t] == m.start[q.f], cname("pair", q=q.name, t=f"S{inst.task_names[t]}"))
            bld.add_if(x, m.end[t] == end, cname("pair", q=q.name, t=f"E{inst.task_names[t]}"))
    for t, a in m.alone.items():
        name = inst.task_names[t]
        bld.add(a + sum((as_expr(x) for x in member[t]), as_expr(0)) == 1, cname("pair_one", t=name))
        bld.add_if(a, m.end[t] == m.start[t] + _dur(m, t), cname("alone", t=name))


def _ends(tasks: Unrolled, device: Sequence[int], pairs: Sequence[PairCandidate], times: PipelineTimes) -> list[int]:
    """End tick of every task of a schedule (a half of a chosen pair ends with the pair)."""
    inst = tasks.instance
    ends = [times.start[t] + int(inst.duration_tick[t, device[t]]) for t in range(inst.num_tasks)]
    for i in times.pairs:
        q = pairs[i]
        for t in q.tasks:
            ends[t] = times.start[q.f] + q.tick
    return ends


def hint_pipeline(m: PipelineModel, times: PipelineTimes) -> None:
    """Hint every variable from a schedule of the split instance (its starts and the pairs it runs)."""
    bld = m.builder
    ends = _ends(m.tasks, m.device, m.pairs, times)
    for t, var in enumerate(m.start):
        bld.hint(var, int(times.start[t]))
    paired = {t for i in times.pairs for t in m.pairs[i].tasks}
    for t, ev in m.end_var.items():
        bld.hint(ev, ends[t])
        bld.hint(m.alone[t], 0 if t in paired else 1)
    for i, x in enumerate(m.chosen):
        bld.hint(x, 1 if i in times.pairs else 0)
    bld.hint(m.makespan, max(ends, default=0))


class PipelineFormulation(Formulation[PipelineModel, PipelineTimes]):
    """The pipeline formulation as the driver sees it."""

    name = "pipeline"
    solution_noun = "pipeline schedule"
    uses_cumulative = True  # family 3

    def __init__(self, tasks: Unrolled, pipeline: TrainingPipeline, device: Sequence[int],
                 pairs: Sequence[PairCandidate], cap: Sequence[int], *, horizon: int, lower_bound: int,
                 fifo: bool) -> None:
        self.tasks, self.pipeline, self.device, self.pairs, self.cap = tasks, pipeline, list(device), pairs, cap
        self.horizon, self.lower_bound, self.fifo = horizon, lower_bound, fifo
        self.subject = pipeline.name

    def build(self, builder: ModelBuilder) -> PipelineModel:
        return build_pipeline_model(self.tasks, self.pipeline, builder, self.device, self.pairs, self.cap,
                                    horizon=self.horizon, lower_bound=self.lower_bound, fifo=self.fifo)

    def hint(self, model: PipelineModel, solution: PipelineTimes) -> None:
        hint_pipeline(model, solution)

    def read(self, model: PipelineModel, result: SolveResult) -> PipelineTimes:
        return PipelineTimes(tuple(result.int_value(s) for s in model.start),
                             tuple(i for i, x in enumerate(model.chosen) if result.bool_value(x)))

    def value_tick(self, solution: PipelineTimes) -> int:
        ends = _ends(self.tasks, self.device, self.pairs, solution)
        return max(ends, default=0) - min(solution.start, default=0)

    def explain_infeasible(self, backend: Backend) -> str:
        return (f"no in-order schedule of {self.pipeline.name!r} fits memory caps {list(self.cap)} within horizon "
                f"{self.horizon} ticks")


def warm_by_action(tasks: Unrolled, warm_start: Mapping[str, int]) -> dict[UnrolledAction, int]:
    """A warm start keyed by task name (and pair name, `split_start_times`) keyed by action instead: a task's
    own action, or the overlapped pair a name denotes (the Action IR's own parser, once, at the boundary)."""
    by_name = {str(a): a for a in tasks.actions}
    return {by_name[k] if k in by_name else parse_action(k): int(v) for k, v in warm_start.items()}


def split_start_times(pipeline: TrainingPipeline, timeline: Timeline) -> dict[str, int] | None:
    """Start times of the split tasks (F, B, W) read off a baseline's timeline: BW at t -> B at t, W at t + B;
    an F&B pair at t -> F at t, then its backward.  When the pipeline's pairs gain (`fb_overlap` < 1) a pair
    at t is kept as a pair: its name (``F&B`` / ``F&BW``) -> t and each of its halves -> t (the formulation then
    hints that pair).  None when a pair is shorter than its two halves and pairs do not gain (the times would
    not fit the split model's durations)."""
    out: dict[str, int] = {}
    for p in timeline.placements:
        t = p.start_tick
        if p.device >= pipeline.num_devices:  # a send or an all-to-all on a communication stream: same task
            out[p.task] = t
            continue
        parts = action_of(p.task)
        if len(parts) == 2 and pipeline.pairs_gain:
            fa, ba = parts
            out[p.task] = t
            out[str(fa)] = t
            out[str(Action(ba.stage, B, ba.microbatch))] = t
            if ba.kind is BW:
                out[str(Action(ba.stage, W, ba.microbatch))] = t
            continue
        total = 0
        for a in parts:
            cost = pipeline.stages[a.stage]
            if a.kind is BW:
                out[str(Action(a.stage, B, a.microbatch))] = t
                out[str(Action(a.stage, W, a.microbatch))] = t + int(cost.input_grad_tick)
                t += cost.bw_tick
                total += cost.bw_tick
            else:
                out[str(a)] = t
                d = {ActionKind.F: cost.forward_tick, ActionKind.B: cost.input_grad_tick,
                     ActionKind.W: cost.weight_grad_tick}[a.kind]
                t += int(d)
                total += int(d)
        if p.end_tick - p.start_tick < total:
            return None
    return out


def _warm_times(tasks: Unrolled, pairs: Sequence[PairCandidate], warm: Mapping[UnrolledAction, int]) -> PipelineTimes:
    """The warm start as a schedule: every task's start, and the candidate pairs it runs."""
    return PipelineTimes(tuple(warm[a] for a in tasks.actions),
                         tuple(i for i, q in enumerate(pairs) if q.action in warm))


@dataclass(frozen=True)
class PipelineSetup:
    """What one solve of a pipeline works on (`prepare_pipeline`): its split instance, the stream of every task,
    the caps, the candidate pairs, the warm start as a schedule (`known`, None without one), the horizon and the
    trivial bound (critical path, work / devices, device bound: valid with or without family 5)."""

    pipeline: TrainingPipeline
    tasks: Unrolled
    device: list[int]
    cap: list[int]
    pairs: list[PairCandidate]
    known: PipelineTimes | None
    horizon: int
    trivial_tick: int
    fifo: bool
    warm_rejected: str | None = None  # why the caller's warm start was not taken as `known` (it broke a cap)

    def formulation(self) -> PipelineFormulation:
        """The full formulation (module docstring) of this setup."""
        return PipelineFormulation(self.tasks, self.pipeline, self.device, self.pairs, self.cap,
                                   horizon=self.horizon, lower_bound=self.trivial_tick, fifo=self.fifo)

    def ends(self, times: PipelineTimes) -> list[int]:
        """End tick of every task of `times` (a half of a chosen pair ends with the pair)."""
        return _ends(self.tasks, self.device, self.pairs, times)

    def makespan_tick(self, times: PipelineTimes) -> int:
        return max(self.ends(times), default=0) - min(times.start, default=0)

    def peak_bytes(self, times: PipelineTimes) -> list[int]:
        """Per device, the most memory `times` holds at once (`_peak_bytes`)."""
        return _peak_bytes(self.pipeline, self.tasks, self.ends(times), times)

    def over_cap(self, times: PipelineTimes) -> str | None:
        """None when `times` fits every device's cap, else which device it breaks, by how much (`_over_cap`)."""
        return _over_cap(self.peak_bytes(times), self.cap)


def _peak_bytes(pipeline: TrainingPipeline, tasks: Unrolled, ends: Sequence[int], times: PipelineTimes) -> list[int]:
    """Per device, the most memory a schedule (`times`, its tasks' `ends`) holds at once (parameters +
    activations) under family 3's accounting (`_memory`: a stage's activation from its F's start, the part B frees
    until B's end, the rest until W's end; an interval [start, end) gives its memory back at its end tick)."""
    peaks = []
    for d in range(pipeline.num_devices):
        events: list[tuple[int, int]] = []  # (tick, +bytes / -bytes)
        for s in pipeline.device_stages(d):
            cost = pipeline.stages[s]
            a_b = int(cost.activation_freed_by_b_bytes)
            for k in range(pipeline.num_microbatches):
                f = tasks.task(s, F, k)
                for demand, until in ((int(cost.activation_bytes) - a_b, tasks.task(s, W, k)),
                                      (a_b, tasks.task(s, B, k))):
                    if demand > 0:
                        events += [(times.start[f], demand), (ends[until], -demand)]
        peaks.append(peak_level(events) + sum(int(pipeline.stages[s].param_bytes) for s in pipeline.device_stages(d)))
    return peaks


def _over_cap(peaks: Sequence[int], cap: Sequence[int]) -> str | None:
    """None when every device's peak fits its cap, else the first device over it and by how much."""
    for d, (peak, limit) in enumerate(zip(peaks, cap, strict=True)):
        if peak > limit:
            return f"device {d} holds {peak} bytes at its peak, {peak - limit} more than its memory cap {limit}"
    return None


def prepare_pipeline(pipeline: TrainingPipeline, memory_cap_bytes: int | Sequence[int] | None = None, *,
                     warm_start: dict[str, int] | None = None, fifo: bool = True,
                     pair_window: int | None = 2, constructive: bool = True) -> PipelineSetup:
    """Everything `solve_pipeline` builds before it calls the solver (its arguments, same meaning).
    `constructive` False: no list schedule in place of a missing warm start (`known` stays None; for a caller
    that needs only the bounds, which do not depend on it: the list schedules take seconds on large pipelines)."""
    if pipeline.stage_to_device is None:
        raise OpplanError("the pipeline formulation needs a placement (fixed or V-shape)")
    tasks = unroll_actions(pipeline)
    inst = tasks.instance
    p = pipeline.num_devices
    if memory_cap_bytes is None:
        cap = [2**40] * p
    elif isinstance(memory_cap_bytes, int):
        cap = [int(memory_cap_bytes)] * p
    else:
        cap = [int(c) for c in memory_cap_bytes]
    check_fits(pipeline, cap)
    device = device_of(inst)
    warm = warm_by_action(tasks, warm_start) if warm_start is not None else None
    pairs = pair_candidates(pipeline, tasks, device, warm, pair_window)
    rejected = None
    if warm is not None:
        # The warm start becomes the solve's known schedule, which the driver returns when the solver finds
        # nothing better, and its hint: one over a cap would come back over it (nothing else checks memory), and
        # CP-SAT 9.15 has aborted the process on such a hint ("Check failed: heuristics.fixed_search != nullptr",
        # GPT-2 export at p = 8, cap 1.1x DualPipe's peak, hint 1.41x).  So it is dropped, and the reason kept.
        times = _warm_times(tasks, pairs, warm)
        rejected = _over_cap(_peak_bytes(pipeline, tasks, _ends(tasks, device, pairs, times), times), cap)
        if rejected is not None:
            log.warning("%s: the warm start was not used: %s", pipeline.name, rejected)
            warm = None
    if warm is None and constructive:
        # Always start from a valid schedule (DESIGN 6): without one, a solve cut short by its time limit (a loaded
        # machine) ends with no schedule at all.  The constructive list schedule is valid under the cap; it only
        # hints, the pair candidates stay those of the caller's (absent) warm start.
        greedy = best_greedy(pipeline, cap)
        warm = warm_by_action(tasks, greedy[0]) if greedy is not None else None
    known = _warm_times(tasks, pairs, warm) if warm is not None else None
    if known is not None:
        horizon = max(_ends(tasks, device, pairs, known), default=0)
    else:
        horizon = int(sum(int(inst.duration_tick[t, device[t]]) for t in range(inst.num_tasks))) + \
            int(sum(int(x) for x in inst.edge_fixed_tick))
    trivial = pair_bound(inst, device, pairs) if pairs else \
        max(inst.trivial_lower_bound_tick(), device_bound_tick(inst, device))
    return PipelineSetup(pipeline, tasks, device, cap, pairs, known, horizon, trivial, fifo,
                         None if rejected is None else f"the warm start was not used: {rejected}")


def solve_pipeline(
    pipeline: TrainingPipeline,
    memory_cap_bytes: int | Sequence[int] | None = None,
    *,
    warm_start: dict[str, int] | None = None,
    time_limit_s: float = 60.0,
    backend: str = "cpsat",
    fifo: bool = True,
    threads: int = 8,
    seed: int = 0,
    pair_window: int | None = 2,
) -> PipelineSolution:
    """Solve the pipeline formulation (module docstring).  `warm_start`: task name -> start tick of a valid
    schedule of the split instance (e.g. `split_start_times` of the best baseline that fits the cap; pair names
    in it mark the pairs it runs).  `pair_window`: the candidate-pair restriction (None: every micro-batch)."""
    t0 = time.monotonic()
    setup = prepare_pipeline(pipeline, memory_cap_bytes, warm_start=warm_start, fifo=fifo, pair_window=pair_window)
    solved = solve_formulation(setup.formulation(), backend=get_backend(backend), time_limit_s=time_limit_s,
                               threads=threads, seed=seed, known=setup.known, lower_bound_tick=setup.trivial_tick,
                               started_s=t0)
    return finish_pipeline(setup, solved.solution, solved.lower_bound_tick, solved.status, solver=solved.solver,
                           solver_version=solved.solver_version, started_s=t0, time_to_best_s=solved.time_to_best_s)


def finish_pipeline(setup: PipelineSetup, times: PipelineTimes, lower_bound_tick: int, status: PlanStatus, *,
                    solver: str, solver_version: str, started_s: float, time_to_best_s: float) -> PipelineSolution:
    """The `PipelineSolution` of a schedule `times` of `setup` (validated by the independent validator)."""
    pipeline, tasks, device, p = setup.pipeline, setup.tasks, setup.device, setup.pipeline.num_devices
    used = [setup.pairs[i] for i in times.pairs]
    plan_inst, placements = _placements(pipeline, tasks, device, times.start, used)
    makespan = max(x.end_tick for x in placements) - min(x.start_tick for x in placements)
    plan = Plan(plan_inst.name, placements, tuple(plan_inst.device_names), makespan, lower_bound_tick,
                status, PlanMethod.PIPELINE_MILP, solver=solver, solver_version=solver_version,
                solve_time_s=time.monotonic() - started_s)
    validate_plan(plan_inst, plan)
    over = setup.over_cap(times)
    if over is not None:  # the validator sees no memory: the caps are checked here, on family 3's own accounting
        raise RuntimeError(f"the schedule of {pipeline.name!r} breaks a memory cap: {over} (a formulation bug)")
    timeline = timeline_of_plan(plan_inst, plan)
    compute_plan = dataclasses.replace(plan, placements=tuple(x for x in placements if x.device < p),
                                       device_names=tuple(plan_inst.device_names[:p]))
    schedule = schedule_from_plan(compute_plan, num_microbatches=pipeline.num_microbatches,
                                  num_stages=pipeline.num_stages, name="opplan")
    return PipelineSolution(schedule, plan, timeline, plan_inst, status, lower_bound_tick,
                            time.monotonic() - started_s, time_to_best_s, tuple(q.name for q in used))


def _placements(pipeline: TrainingPipeline, tasks: Unrolled, device: Sequence[int], starts: Sequence[int],
                used: Sequence[PairCandidate]) -> tuple[SchedulingInstance, tuple[TaskPlacement, ...]]:
    """The instance with the chosen pairs merged (`unroll` with them fused and paired) and its placements."""
    inst = tasks.instance
    if not used:
        return inst, tuple(TaskPlacement(n, device[t], starts[t], starts[t] + int(inst.duration_tick[t, device[t]]),
                                         tasks.stage_of(t)) for t, n in enumerate(inst.task_names))
    overlap = [q.action for q in used]
    fused = {(o.backward.stage, o.backward.microbatch) for o in overlap if o.backward.kind is BW}
    merged = unroll_actions(pipeline, fused=fused, pairs=overlap)
    mdev = device_of(merged.instance)
    out = []
    for t, a in enumerate(merged.actions):
        s = starts[tasks.index[a.forward if isinstance(a, OverlapAction) else a]]
        out.append(TaskPlacement(str(a), mdev[t], s, s + int(merged.instance.duration_tick[t, mdev[t]]),
                                 merged.stage_of(t)))
    return merged.instance, tuple(out)
