"""Bottleneck decomposition: split an op graph at the ops every path runs through, solve the pieces exactly,
add up their optima into a lower bound, and join their schedules into one plan.

Definitions.  A *bottleneck* is a task b such that every other task is an ancestor or a descendant of b (a
transformer layer's residual add, an Inception module's concat).  Bottlenecks are totally ordered by precedence:
b_1 < ... < b_k.  The *segments* are

    S_0 = anc(b_1) ∪ {b_1}                      (only when b_1 has ancestors)
    S_i = (desc(b_i) ∩ anc(b_{i+1})) ∪ {b_i, b_{i+1}}   for i = 1..k-1
    S_k = desc(b_k) ∪ {b_k}                     (only when b_k has descendants)

and, without any bottleneck, the whole graph is one segment.  Every task lies in one segment, except the inner
bottlenecks, which lie in the two segments they separate.  Each segment is solved as its own instance
(`induced_instance`: the tasks and the edges between them; edges that jump over a bottleneck are left out).

Lower bound.  In any schedule, every task of S_i lies within [start of S_i's first task, end of its last task]
(its unique source and sink, when they are bottlenecks), and those windows of consecutive segments overlap exactly
in the shared bottleneck's run.  So

    makespan = Σ_i span(S_i) - Σ_{shared b} duration(b)  >=  Σ_i OPT(S_i) - Σ_{shared b} max_d p[b, d]

where span(S_i) >= OPT(S_i) because the schedule restricted to S_i is a schedule of the segment instance (dropping
tasks and edges only removes constraints, memory included).  `OPT(S_i)` is replaced by any proven lower bound on
it (the best of the solver's bound and `planner.heuristics.comm_bound`'s, which is never below the trivial bound),
so the sum stays a valid bound.  It is usually
far stronger than max(critical path, work / speed): a segment's optimum includes the transfers its forks and joins
cannot avoid, which the critical path ignores.

Stitched plan.  The segments' schedules are joined device by device in segment order; the bottleneck shared by
two segments must sit on one device, so the later segment's devices are relabelled by swapping two
interchangeable devices (equal durations, capacities and links: a symmetry of the instance, which maps a schedule
to a schedule of equal makespan).  When the two devices are not interchangeable the plan is not stitched.  The
joined per-device orders are replayed by the simulator on the whole instance (edges that jump over bottlenecks may
delay a task) and the result is checked by the validator (memory included); a plan that fails is dropped.
Identical segments (same durations, edges, delays and bytes, in the same local order; e.g. repeated layers) are
solved once.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from formulations.model_api import SolveParams
from formulations.solve_instance import solve_placement
from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.heuristics.comm_bound import comm_lower_bound_tick
from planner.heuristics.iterated import classic_starts, iterated_list_schedule, order_start
from planner.heuristics.list_schedule import heft
from planner.ir.units import format_time
from planner.schedule.errors import PlanInvalidError, SimulationError
from planner.schedule.plan import Plan, PlanMethod, TaskPlacement
from planner.schedule.simulate import simulate
from planner.schedule.validate import validate_plan
from planner.search.budget import Budget
from planner.search.phases import Candidate
from planner.search.policy import SearchPolicy
from planner.search.state import SearchState

ProgressFn = Callable[[str], None]

DEFAULT_POLICY = SearchPolicy()


# ------------------------------------------------------------------------------------------------ structure
def bottleneck_tasks(instance: SchedulingInstance, policy: SearchPolicy = DEFAULT_POLICY) -> list[int]:
    """The bottlenecks in precedence order.

    Exact (ancestor and descendant sets as bit sets, O(tasks x edges / word size)) up to the policy's
    `exact_bottleneck_tasks` tasks.  Above that, a linear-time subset: in a topological order, a task b with no
    edge jumping over its position, no source after it and no sink before it is a bottleneck (a later task that
    were not b's descendant would lead, walking back over predecessors, all after b, to a source after b;
    likewise before).
    The subset misses bottlenecks that a skip connection jumps over; fewer cuts only give larger segments.
    """
    order = instance.topological_order
    n = len(order)
    if n == 0:
        return []
    if n <= policy.exact_bottleneck_tasks:
        desc = [0] * n
        for t in reversed(order):
            m = 0
            for v, _ in instance.successors[t]:
                m |= (1 << v) | desc[v]
            desc[t] = m
        anc = [0] * n
        for t in order:
            m = 0
            for u, _ in instance.predecessors[t]:
                m |= (1 << u) | anc[u]
            anc[t] = m
        return [t for t in order if anc[t].bit_count() + desc[t].bit_count() == n - 1]
    pos = np.empty(n, dtype=np.int64)
    pos[np.asarray(order, dtype=np.int64)] = np.arange(n)
    jump = np.zeros(n + 1, dtype=np.int64)  # jump[p] counts edges (a, b) with pos a < p < pos b
    for u, v in instance.edges:
        a, b = int(pos[u]), int(pos[v])
        if b - a > 1:
            jump[a + 1] += 1
            jump[b] -= 1
    jumping = np.cumsum(jump)[:n]
    is_source = np.array([not instance.predecessors[t] for t in order])
    is_sink = np.array([not instance.successors[t] for t in order])
    last_source = int(np.flatnonzero(is_source).max())
    first_sink = int(np.flatnonzero(is_sink).min())
    return [order[p] for p in range(n) if jumping[p] == 0 and last_source <= p <= first_sink]


@dataclass(frozen=True)
class Segment:
    """Tasks (global indices, topological order) between two consecutive bottlenecks, both included; `first`
    and `last` are the bottlenecks it shares with the previous and next segment (None at the ends)."""

    tasks: tuple[int, ...]
    first: int | None
    last: int | None


def segments(instance: SchedulingInstance, policy: SearchPolicy = DEFAULT_POLICY) -> list[Segment]:
    """The segments of the module docstring, in precedence order (cut at `bottleneck_tasks`)."""
    order = instance.topological_order
    if not order:
        return []
    pos = {t: i for i, t in enumerate(order)}
    cuts = [pos[b] for b in bottleneck_tasks(instance, policy)]
    is_cut = set(cuts)  # membership per segment: a list made this quadratic in the number of segments
    # A bottleneck is never preceded by a task that is not its ancestor, so the segments are position ranges.
    bounds = sorted({0, len(order) - 1, *cuts})
    out: list[Segment] = []
    for a, b in zip(bounds, bounds[1:]):
        tasks = tuple(order[a:b + 1])
        out.append(Segment(tasks, order[a] if a in is_cut and a != 0 else None,
                           order[b] if b in is_cut and b != len(order) - 1 else None))
    if len(bounds) == 1:
        out.append(Segment(tuple(order), None, None))
    # a bottleneck at position 0 (the only source) or at the end (the only sink) is shared with nothing
    shared = set(cuts) - {0, len(order) - 1}
    return [Segment(s.tasks, s.first if s.first is not None and pos[s.first] in shared else None,
                    s.last if s.last is not None and pos[s.last] in shared else None) for s in out]


def induced_instance(instance: SchedulingInstance, tasks: Sequence[int], name: str) -> SchedulingInstance:
    """The tasks (in the given order) and the edges among them; devices, links and memory as in `instance`."""
    tasks = list(tasks)
    local = {t: i for i, t in enumerate(tasks)}
    # the edges among the tasks, in edge order, read from the tasks' own out-edges: a scan of every edge per
    # segment is quadratic on graphs of many segments
    succ = instance.successors
    keep = sorted(k for t in tasks for v, k in succ[t] if v in local)
    idx = np.asarray(tasks, dtype=np.int64)
    return dataclasses.replace(
        instance,
        name=name,
        task_names=tuple(instance.task_names[t] for t in tasks),
        duration_tick=instance.duration_tick[idx],
        edges=tuple((local[instance.edges[k][0]], local[instance.edges[k][1]]) for k in keep),
        edge_tensors=tuple(instance.edge_tensors[k] for k in keep),
        edge_fixed_tick=instance.edge_fixed_tick[np.asarray(keep, dtype=np.int64)],
        param_bytes=instance.param_bytes[idx],
        activation_bytes=instance.activation_bytes[idx],
        peak_internal_bytes=instance.peak_internal_bytes[idx],
        task_ops={instance.task_names[t]: instance.task_ops[instance.task_names[t]] for t in tasks
                  if instance.task_names[t] in instance.task_ops},
    )


def segment_signature(sub: SchedulingInstance) -> tuple:
    """Equal signatures: the same instance up to task names (solved once)."""
    return (sub.duration_tick.tobytes(), sub.duration_tick.shape, sub.edges, sub.comm_tick.tobytes(),
            sub.param_bytes.tobytes(), sub.activation_bytes.tobytes(), sub.peak_internal_bytes.tobytes())


# ------------------------------------------------------------------------------------------------ solving
class SegmentSource(enum.Enum):
    """Where a segment's schedule and bound come from."""

    HEFT = "heft"  # HEFT meets the segment's trivial bound: optimal without a solver
    SOLVER = "solver"  # solved by the placement model
    CACHED = "cached"  # an identical segment was solved by the placement model
    TOO_LARGE = "too large"  # above the policy's segment_max_tasks: HEFT's schedule and the trivial bound
    NO_TIME = "no time"  # the budget ran out first: HEFT's schedule and the trivial bound


@dataclass(frozen=True)
class SegmentResult:
    segment: Segment
    instance: SchedulingInstance
    device: tuple[int, ...]  # per local task
    start: tuple[int, ...]
    makespan_tick: int
    bound_tick: int
    how: SegmentSource


@dataclass(frozen=True)
class Decomposition:
    """`bound_tick`: a lower bound on the whole instance's makespan; `plan`: the stitched, validated op plan
    (None when it could not be stitched or failed validation)."""

    segments: tuple[SegmentResult, ...]
    bound_tick: int
    plan: Plan | None
    seconds: float

    @property
    def solved(self) -> int:
        return sum(1 for r in self.segments if r.how in (SegmentSource.SOLVER, SegmentSource.CACHED))


def segment_rows(plan: Plan, sub: SchedulingInstance, by: Mapping[str, TaskPlacement] | None = None
                 ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The device and start tick `plan` (of the whole graph) gives each of the segment's tasks, in its order; `by`:
    `plan.by_task()`, when the caller has it (built once for many segments)."""
    by = plan.by_task() if by is None else by
    rows = [by[name] for name in sub.task_names]
    return tuple(r.device for r in rows), tuple(r.start_tick for r in rows)


def restricted_plan(plan: Plan, sub: SchedulingInstance, by: Mapping[str, TaskPlacement] | None = None) -> Plan | None:
    """`plan` (of the whole graph) on the segment's tasks, shifted to start at tick 0, when that is a valid plan of
    the segment `sub` (checked: memory counts differently on a part); else None.  `by`: `plan.by_task()`, when the
    caller has it (built once for all segments rather than once per segment)."""
    by = plan.by_task() if by is None else by
    rows = [by[name] for name in sub.task_names]
    t0 = min((r.start_tick for r in rows), default=0)
    placements = tuple(TaskPlacement(r.task, r.device, r.start_tick - t0, r.end_tick - t0) for r in rows)
    cut = dataclasses.replace(plan, instance_name=sub.name, placements=placements, task_ops={},
                              makespan_tick=max((p.end_tick for p in placements), default=0), lower_bound_tick=0)
    try:
        validate_plan(sub, cut)
    except PlanInvalidError:
        return None
    return cut


def _heft(sub: SchedulingInstance, memo: dict[tuple, Plan] | None) -> Plan:
    """HEFT on the segment.  `memo` (signature -> HEFT's plan) serves identical segments (a stacked model's
    layers) from the first one's plan under the segment's own names: HEFT reads nothing but what the signature
    holds (durations, edges, delays, memory) and breaks ties by task index, so the plan is the one it would find."""
    if memo is None:
        return heft(sub)
    sig = segment_signature(sub)
    seen = memo.get(sig)
    if seen is None:
        memo[sig] = plan = heft(sub)
        return plan
    names = sub.task_names
    return dataclasses.replace(
        seen, instance_name=sub.name, task_ops={k: tuple(v) for k, v in sub.task_ops.items()},
        placements=tuple(TaskPlacement(names[k], p.device, p.start_tick, p.end_tick, p.stage)
                         for k, p in enumerate(seen.placements)))


def _list_schedule(sub: SchedulingInstance, incumbent: Plan | None,
                   by: Mapping[str, TaskPlacement] | None = None, memo: dict[tuple, Plan] | None = None) -> Plan:
    """The shorter of HEFT on the segment and the incumbent's schedule of it (when valid there); `by` as in
    `restricted_plan`, `memo` as in `_heft`."""
    plan = _heft(sub, memo)
    if incumbent is None:
        return plan
    if by is not None and segment_span(by, sub) >= plan.makespan_tick:
        return plan  # the incumbent's part is no shorter: no need to cut it out and validate it
    cut = restricted_plan(incumbent, sub, by)
    return cut if cut is not None and cut.makespan_tick < plan.makespan_tick else plan


def segment_span(by: Mapping[str, TaskPlacement], sub: SchedulingInstance) -> int:
    """The makespan `restricted_plan` would give the segment's part of a plan (last end - first start)."""
    rows = [by[name] for name in sub.task_names]
    if not rows:
        return 0
    return max(r.end_tick for r in rows) - min(r.start_tick for r in rows)


def decompose_and_solve(instance: SchedulingInstance, params: SolveParams, *, backend: str = "cpsat",
                        progress: ProgressFn | None = None, incumbent: Plan | None = None,
                        policy: SearchPolicy = DEFAULT_POLICY) -> Decomposition:
    """Solve every segment (time shared by size; identical segments once), add up the bound, stitch the plan.

    `incumbent` (optional, a valid plan of `instance`): each segment starts from the shorter of HEFT on it and the
    incumbent's schedule of it, so a segment's plan is never longer than the incumbent's part (segments run one
    after another: a bottleneck op separates them), whatever time the solver gets.  A segment given to the solver
    first gets the policy's `segment_iterated_share` of its time for the iterated list scheduler
    (`planner.heuristics.iterated`, from the classic schedulers and that start's order), whose plan replaces the
    warm start when shorter; the solver's progress is reported every `progress_every_s` seconds of the policy.
    The segments share `params.time_limit_s`; every solve gets `params.threads` and `params.seed`."""
    say = progress or (lambda _msg: None)
    t0 = time.monotonic()
    segs = segments(instance, policy)
    subs = [induced_instance(instance, s.tasks, f"{instance.name}[seg{i}]") for i, s in enumerate(segs)]
    results, known = _listed_segments(segs, subs, incumbent, policy)
    todo = [i for i, r in enumerate(results) if r.how is SegmentSource.NO_TIME]
    cache: dict[tuple, int] = {}
    sizes = {segment_signature(subs[i]): subs[i].num_tasks for i in todo}
    left_size = sum(sizes.values())
    for i in todo:
        sub = subs[i]
        sig = segment_signature(sub)
        if sig in cache:
            src = results[cache[sig]]
            results[i] = dataclasses.replace(src, segment=segs[i], instance=sub,
                                             how=SegmentSource.CACHED if src.how is SegmentSource.SOLVER else src.how)
            continue
        remaining = params.time_limit_s - (time.monotonic() - t0)
        share = remaining * sub.num_tasks / max(1, left_size)
        left_size -= sub.num_tasks
        cache[sig] = i
        if share >= policy.segment_min_solve_s:
            results[i] = _solved_segment(i, results[i], known[i], share, params, backend, say, policy)
    dur = instance.duration_tick
    shared = {s.first for s in segs if s.first is not None}
    overlap = sum(int(np.where(dur[b] < INELIGIBLE, dur[b], 0).max()) for b in shared)
    bound = max(0, sum(r.bound_tick for r in results) - overlap)
    stitched = stitch_segments(instance, results)
    return Decomposition(tuple(results), bound, stitched, time.monotonic() - t0)


def _listed_segments(segs: Sequence[Segment], subs: Sequence[SchedulingInstance], incumbent: Plan | None,
                     policy: SearchPolicy) -> tuple[list[SegmentResult], list[Plan]]:
    """Each segment's list schedule (`_list_schedule`) with its communication-aware bound (identical segments
    share it), and how it is settled: by the list schedule when that meets the bound, else too large for the
    solver or waiting for it (`SegmentSource.NO_TIME`).  (the results, the list schedules)."""
    incumbent_by = incumbent.by_task() if incumbent is not None else None
    memo: dict[tuple, Plan] = {}
    bounds: dict[tuple, int] = {}  # segment signature -> its communication-aware bound
    results: list[SegmentResult] = []
    known: list[Plan] = []
    for seg, sub in zip(segs, subs, strict=True):
        plan = _list_schedule(sub, incumbent, incumbent_by, memo)
        known.append(plan)
        dev, start = segment_rows(plan, sub)
        # the trivial bound raised by the transfers joins cannot avoid; identical segments share it
        sig = segment_signature(sub)
        if sig not in bounds:
            bounds[sig] = comm_lower_bound_tick(sub, policy=policy.comm_bound)
        trivial = bounds[sig]
        if plan.makespan_tick <= trivial:
            how = SegmentSource.HEFT
        else:
            how = SegmentSource.TOO_LARGE if sub.num_tasks > policy.segment_max_tasks else SegmentSource.NO_TIME
        results.append(SegmentResult(seg, sub, dev, start, plan.makespan_tick, min(trivial, plan.makespan_tick), how))
    return results, known


def _solved_segment(index: int, prev: SegmentResult, warm: Plan, share_s: float, params: SolveParams, backend: str,
                    say: ProgressFn, policy: SearchPolicy) -> SegmentResult:
    """Segment `index` solved in `share_s` seconds: first the iterated list scheduler from `warm` (the policy's
    share of the time), then the placement model from the shorter of the two; its bound never below `prev`'s."""
    sub = prev.instance
    s0 = time.monotonic()
    searched = iterated_list_schedule(sub, time_limit_s=policy.segment_iterated_share * share_s, seed=params.seed,
                                      starts=[*classic_starts(sub), order_start(sub, warm)],
                                      bound_tick=prev.bound_tick, tuning=policy.iterated)
    if searched.plan.makespan_tick < warm.makespan_tick:
        warm = searched.plan
    solve_s = max(policy.segment_min_solve_s, share_s - (time.monotonic() - s0))
    plan = solve_placement(sub, backend=backend, time_limit_s=solve_s, threads=params.threads, seed=params.seed,
                           warm_start=warm, progress=_segment_progress(say, index, sub.num_tasks, _time_text(sub),
                                                                       every_s=policy.progress_every_s),
                           policy=policy.solve)
    dev, start = segment_rows(plan, sub)
    told = _time_text(sub)
    say(f"segment {index} ({sub.num_tasks} tasks): makespan {told(plan.makespan_tick)}, segment bound "
        f"{told(plan.lower_bound_tick)} (trivial {told(sub.trivial_lower_bound_tick())}, warm start "
        f"{told(warm.makespan_tick)} from {warm.method}), {plan.status}")
    return SegmentResult(prev.segment, sub, dev, start, plan.makespan_tick,
                         max(prev.bound_tick, min(plan.lower_bound_tick, plan.makespan_tick)), SegmentSource.SOLVER)


def _time_text(instance: SchedulingInstance) -> Callable[[float], str]:
    """Ticks of `instance` -> its time with a unit (`format_time`: seconds with a prefix, or the instance's own
    unit), so that progress lines never print bare solver ticks."""
    tick_s, unit = instance.tick_s, instance.time_unit or "tick"
    return (lambda tick: format_time(tick * tick_s)) if tick_s else (lambda tick: format_time(tick, unit=unit))


def _segment_progress(say: ProgressFn, index: int, size: int,
                      told: Callable[[float], str] = lambda tick: format_time(tick, unit="tick"), *,
                      every_s: float = DEFAULT_POLICY.progress_every_s):
    """A solver progress callback that reports a segment's incumbent and bound (the segment's own, not the
    plan's) as they improve, in time units, at most every `every_s` seconds (a long segment solve otherwise
    prints nothing for half the budget)."""
    last = [-every_s]

    def report(elapsed_s: float, value: float | None, bound: float | None, _gap: float | None) -> None:
        if value is None or elapsed_s - last[0] < every_s:
            return
        last[0] = elapsed_s
        say(f"segment {index} ({size} tasks): {elapsed_s:5.1f}s incumbent {told(value)}, segment bound "
            f"{told(bound) if bound is not None else '-'}")

    return report


def stitch_segments(instance: SchedulingInstance, results: Sequence[SegmentResult]) -> Plan | None:
    """Join the segment schedules (module docstring); None when devices cannot be matched or the plan is invalid."""
    cls = {d: i for i, c in enumerate(instance.interchangeable_device_classes()) for d in c}
    nd = instance.num_devices
    device_of: dict[int, int] = {}
    rows: list[list[int]] = [[] for _ in range(nd)]
    for r in results:
        seg = r.segment
        perm = list(range(nd))
        if seg.first is not None and seg.first in device_of:
            want, have = device_of[seg.first], r.device[seg.tasks.index(seg.first)]
            if want != have:
                if cls[want] != cls[have]:
                    return None
                perm[want], perm[have] = have, want
        local = sorted(range(len(seg.tasks)), key=lambda i: (r.start[i], i))
        for i in local:
            t = seg.tasks[i]
            if t in device_of:
                continue
            d = perm[r.device[i]]
            device_of[t] = d
            rows[d].append(t)
    try:
        timeline = simulate(instance, rows)
        plan = timeline.to_plan(method=PlanMethod.DECOMPOSITION, lower_bound_tick=0)
        validate_plan(instance, plan)
    except (SimulationError, PlanInvalidError):
        return None
    return plan


__all__ = ["Decomposition", "Segment", "SegmentResult", "SegmentSource", "bottleneck_tasks", "decompose_and_solve",
           "induced_instance", "restricted_plan", "segment_rows", "segment_signature", "segment_span", "segments",
           "stitch_segments"]


def _one_segment(state: SearchState) -> bool:
    """A graph without bottlenecks above the policy's size: one large segment, a bound and rarely a plan."""
    return state.fine.num_tasks > state.policy.one_segment_tasks and len(segments(state.fine, state.policy)) == 1


def decomposition_applies(state: SearchState) -> bool:
    return state.options.decomposition_share > 0 and state.fine.num_tasks > 1


def decomposition_startup_s(state: SearchState) -> float:
    """The work before any solver runs (per segment a list schedule, a bound, a validation; the stitch) cannot be
    stopped; on one segment it includes the whole graph's communication-aware bound."""
    policy = state.policy
    return state.startup_s(policy.decomposition_cost + (policy.comm_bound_cost if _one_segment(state) else 0))


def decomposition_phase(state: SearchState, budget: Budget) -> Candidate | None:
    """Phase 1 of the placement search: decompose and solve within the options' share of the whole time limit
    (less on one large segment: LNS gets the time), never past `budget`.  Leaves the decomposition in `state` and
    its bound on the incumbent; offers the stitched plan as 'decomposition'."""
    options, unit, incumbent = state.options, state.unit, state.plan
    share = options.decomposition_share
    if _one_segment(state):
        share = min(share, state.policy.one_segment_share)
    params = state.params
    time_limit_s = min(share * params.time_limit_s, budget.left_s())
    decomposition = decompose_and_solve(
        state.fine, dataclasses.replace(params, time_limit_s=time_limit_s), backend=options.backend,
        progress=state.say, incumbent=incumbent, policy=state.policy)
    state.decomposition = decomposition
    state.incumbent.raise_bound(decomposition.bound_tick)
    stitched = decomposition.plan
    shorter = stitched is not None and stitched.makespan_tick < incumbent.makespan_tick
    summary = (f"decomposition: {len(decomposition.segments)} segments ({decomposition.solved} by the solver), "
               f"op-level bound {unit(state.bound_tick)}, stitched plan "
               f"{unit(stitched.makespan_tick) if stitched is not None else 'none'}; incumbent "
               f"{unit((stitched if shorter and stitched else incumbent).makespan_tick)}; "
               f"{decomposition.seconds:.1f}s")
    if stitched is None or not shorter:
        state.say(summary)
        return None
    return Candidate(stitched, stitched.makespan_tick, "decomposition", summary=summary)
