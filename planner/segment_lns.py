"""Segment neighbourhoods: free one bottleneck segment of the op plan, keep the rest, re-solve it exactly.

A large-neighbourhood search whose neighbourhoods are the decomposition's segments (`planner.decompose`: the
ops between two consecutive bottlenecks).  It exists because the window neighbourhoods of `planner.lns` do not
reach the plans a whole segment's solve reaches: on model graphs the gap to the bound sits in a few segments (a
MoE's expert block), and a window of 16-48 ops of such a segment cannot reorder the segment as a whole.

One move, on the incumbent P:

1. **Pick** the group of identical segments (same signature: a stacked model's repeated layers) with the largest
   sum over its copies of (span in P - the least span a move can reach: the segment's proven bound, raised by
   the moves' proofs); segments too large for the solver (`SearchPolicy.segment_max_tasks`) are never
   picked.  A segment phase 1 solved to optimality can still be loose in P (P is not phase 1's plan when the
   stitch failed or a later phase moved it).
2. **Solve** the copy with the longest span in P as its own instance (the decomposition's induced instance, the
   same model as phase 1), warm-started from P's schedule of it, for a share of the time left proportional to
   its group's gap.  Where the devices are not all interchangeable (*pinned mode*), the segment's bottlenecks
   are pinned to their devices in P (and copies are grouped only with the same pins): the stitch below can swap
   only interchangeable devices, so a free solution that moved a bottleneck to another kind of device could not
   be put back (on mixed hardware phase 1's own stitch fails for that reason, and P is then a list schedule).
3. **Put back** the solution on every copy of the group, and P's own schedule on every other segment, joined by
   `planner.decompose.stitch_segments` (the later segments' devices relabelled by a swap of interchangeable devices
   where a bottleneck moved; replayed on the whole op graph and validated, memory included).  A plan shorter than
   P is accepted; a stitch that fails (memory) is a rejected move.

**Sweep** (pinned mode's first move, with the policy's `segment_sweep_share` of the budget).  Pinned to P's
devices, a segment keeps P's choice of device kind for its bottlenecks, often a poor one (P is a list schedule
there).  So first every segment is solved once per kind of device for its first and for its last bottleneck
(identical segments once per pair), and dynamic programming along the segments picks the kinds: a bottleneck two
segments share runs on one kind, and the sum of the spans less the shared bottlenecks' runs is least.

Because segments run one after another (every op of a segment is after its first bottleneck and before its last),
a shorter segment schedule shortens the plan by as much, times the number of copies, unless an edge that jumps
over a bottleneck holds it back (the replay counts those).

**Bound.**  Outside pinned mode the model solved in step 2 is the decomposition's segment model, so its proven
bound is a bound on that segment's optimum and raises the decomposition bound (the sum over segments,
`planner.decompose`) by the gain times the number of copies: `SegmentLnsResult.bound_tick`.  A pinned model's
proof bounds only the pinned segment (it stops further moves on that group, no more).

A group whose move found nothing shorter is not picked again until every other open group has had as many moves;
the search ends when the budget is spent, the plan meets the bound, or no group is left open.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from formulations.model_api import SolveParams, SolvePolicy
from formulations.solve_instance import solve_placement
from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.decompose import (
    Decomposition,
    SegmentResult,
    SegmentSource,
    restricted_plan,
    segment_rows,
    segment_signature,
    segment_span,
    stitch_segments,
)
from planner.errors import OpplanError
from planner.schedule.plan import Plan, TaskPlacement
from planner.search.budget import Budget
from planner.search.phases import Candidate
from planner.search.policy import SearchPolicy
from planner.search.state import SearchState

__all__ = ["SegmentLnsResult", "open_segment_groups", "segment_lns"]

log = logging.getLogger(__name__)
ProgressFn = Callable[[str], None]

DEFAULT_POLICY = SearchPolicy()


@dataclass(frozen=True)
class SegmentLnsResult:
    """The best plan found (the start plan when nothing improved), the decomposition bound raised by the moves'
    proofs (`bound_tick`; the decomposition's own when none proved more), and how the search went."""

    plan: Plan
    start_makespan_tick: int
    bound_tick: int
    moves: int
    improving_moves: int
    rejected_moves: int  # the stitch failed (devices not interchangeable, memory) or the solver found no plan
    seconds: float


@dataclass
class _Group:
    """Identical segments (indices into the decomposition's segments; in pinned mode also with the same devices
    for their bottlenecks in P) and what the search knows of them."""

    members: list[int]
    bound_tick: int  # a proven bound on the segment's optimum (raised by the free moves' proofs)
    first_bound_tick: int  # the decomposition's
    floor_tick: int  # least span a move can reach: the bound, or in pinned mode the pinned model's proof
    tries: int = 0


def _pins(result: SegmentResult, by: Mapping[str, TaskPlacement]) -> dict[int, list[int]]:
    """The segment's bottlenecks (global index), each allowed only on its device in P (`_restrict`'s form)."""
    names = result.instance.task_names
    seg = result.segment
    return {b: [by[names[seg.tasks.index(b)]].device] for b in (seg.first, seg.last) if b is not None}


def _groups(fine: SchedulingInstance, decomposition: Decomposition, plan: Plan, pinned: bool) -> list[_Group]:
    """The groups a move could take: every segment the solver may take (not too large for it), grouped by
    signature (and, `pinned`, by the devices P gives its bottlenecks), whose span in `plan` is above its bound."""
    by = plan.by_task()
    by_key: dict[tuple, _Group] = {}
    for i, r in enumerate(decomposition.segments):
        if r.how is SegmentSource.TOO_LARGE:
            continue
        key = (segment_signature(r.instance), tuple((b, d[0]) for b, d in _pins(r, by).items()) if pinned else ())
        group = by_key.get(key)
        if group is None:
            by_key[key] = _Group([i], r.bound_tick, r.bound_tick, r.bound_tick)
        else:
            group.members.append(i)
    return [g for g in by_key.values()
            if any(segment_span(by, decomposition.segments[i].instance) > g.bound_tick for i in g.members)]


def open_segment_groups(fine: SchedulingInstance, decomposition: Decomposition | None, plan: Plan) -> int:
    """How many groups of identical segments a move could take on `plan` (module docstring, step 1): 0 when the
    graph is one segment (then the segment is the whole graph, which the other phases search) or when every
    segment's span in `plan` meets its bound."""
    if decomposition is None or len(decomposition.segments) < 2:
        return 0
    return len(_groups(fine, decomposition, plan, _pinned_mode(fine)))


def _pinned_mode(fine: SchedulingInstance) -> bool:
    """Moves pin the segment's bottlenecks where the devices are not all interchangeable (module docstring)."""
    return len(fine.interchangeable_device_classes()) > 1


def _restrict(sub: SchedulingInstance, result: SegmentResult,
              allowed: Mapping[int, Sequence[int]]) -> SchedulingInstance:
    """The segment with each task of `allowed` (global index) allowed only on the devices given for it."""
    dur = sub.duration_tick.copy()
    for t, devices in allowed.items():
        i = result.segment.tasks.index(t)
        keep = dur[i, list(devices)].copy()
        dur[i, :] = INELIGIBLE
        dur[i, list(devices)] = keep
    return dataclasses.replace(sub, duration_tick=dur)


@dataclass(frozen=True)
class _Option:
    """A schedule of one segment with its bottlenecks on given kinds of device: per local task device and start,
    its span, and how long its first bottleneck runs there (counted in the segment before it too)."""

    device: tuple[int, ...]
    start: tuple[int, ...]
    span_tick: int
    first_tick: int


def _sweep(fine: SchedulingInstance, plan: Plan, results: Sequence[SegmentResult], *, time_limit_s: float,
           backend: str, threads: int, seed: int,
           min_solve_s: float = DEFAULT_POLICY.segment_option_min_s,
           solve: SolvePolicy = DEFAULT_POLICY.solve) -> Plan | None:
    """Pinned mode's first move (module docstring, "Sweep"): every segment the solver may take solved once per
    kind of device (class of interchangeable devices) for its first and for its last bottleneck; the kinds chosen
    along the segments by dynamic programming, so that a bottleneck two segments share runs on one kind and the
    sum of the spans less the shared bottlenecks' runs is least; stitched (within a kind the stitch relabels).
    A segment too large for the solver keeps `plan`'s schedule and its kinds.  Identical segments are solved once
    per pair of kinds; each solve gets a share of `time_limit_s` by size.  None when the time runs out before
    every segment has been solved, no choice exists, or the stitch fails."""
    t0 = time.monotonic()
    by = plan.by_task()
    names = fine.task_names
    classes = fine.interchangeable_device_classes()
    kind = {d: c for c, members in enumerate(classes) for d in members}
    kinds = range(len(classes))
    memo: dict[tuple, _Option | None] = {}
    combos = [(len(classes) if r.segment.first is not None else 1) * (len(classes) if r.segment.last is not None
                                                                         else 1) for r in results]
    left_work = sum(r.instance.num_tasks * c for r, c in zip(results, combos) if r.how is not SegmentSource.TOO_LARGE)
    options: list[dict[tuple[int | None, int | None], _Option]] = []
    for k, r in enumerate(results):
        seg, sub = r.segment, r.instance
        local_first = seg.tasks.index(seg.first) if seg.first is not None else None
        if r.how is SegmentSource.TOO_LARGE:
            device, start = segment_rows(plan, sub, by)
            span = segment_span(by, sub)
            first = int(sub.duration_tick[local_first, device[local_first]]) if local_first is not None else 0
            key = (kind[device[local_first]] if local_first is not None else None,
                   kind[by[names[seg.last]].device] if seg.last is not None else None)
            options.append({key: _Option(device, start, span, first)})
            continue
        table: dict[tuple[int | None, int | None], _Option] = {}
        for cf in (kinds if seg.first is not None else [None]):
            for cl in (kinds if seg.last is not None else [None]):
                sig = (segment_signature(sub), cf, cl)
                if sig not in memo and time.monotonic() - t0 > time_limit_s:
                    return None  # out of time before every segment has its options: no plan to join
                if sig not in memo:
                    allowed: dict[int, Sequence[int]] = {}
                    if seg.first is not None and cf is not None:
                        allowed[seg.first] = [classes[cf][0]]
                    if seg.last is not None and cl is not None:
                        allowed[seg.last] = classes[cl]
                    share = (time_limit_s - (time.monotonic() - t0)) * sub.num_tasks / max(1, left_work)
                    left_work -= sub.num_tasks
                    memo[sig] = _solve_option(_restrict(sub, r, allowed), local_first, max(min_solve_s, share),
                                              backend=backend, threads=threads, seed=seed + k, solve=solve)
                found = memo[sig]
                if found is not None:
                    table[(cf, cl)] = found
        options.append(table)
    # least cost of the segments so far, by the kind of the last one's last bottleneck; with the choices made
    cost: dict[int | None, tuple[int, list[tuple[int | None, int | None]]]] = {None: (0, [])}
    for k, table in enumerate(options):
        nxt: dict[int | None, tuple[int, list[tuple[int | None, int | None]]]] = {}
        for (cf, cl), opt in table.items():
            if cf not in cost:
                continue
            total = cost[cf][0] + opt.span_tick - (opt.first_tick if k else 0)
            if cl not in nxt or total < nxt[cl][0]:
                nxt[cl] = (total, [*cost[cf][1], (cf, cl)])
        if not nxt:
            return None
        cost = nxt
    _, choice = min(cost.values(), key=lambda v: v[0])
    chosen = [options[k][c] for k, c in enumerate(choice)]
    trial = [SegmentResult(r.segment, r.instance, o.device, o.start, o.span_tick, r.bound_tick, r.how)
             for r, o in zip(results, chosen)]
    return stitch_segments(fine, trial)


def _solve_option(model: SchedulingInstance, local_first: int | None, limit_s: float, *, backend: str,
                  threads: int, seed: int, solve: SolvePolicy = DEFAULT_POLICY.solve) -> _Option | None:
    """`model` (a segment with its bottlenecks restricted) solved for `limit_s`; None when no plan is found."""
    try:
        solved = solve_placement(model, backend=backend, time_limit_s=limit_s, threads=threads, seed=seed,
                                 deterministic=False, symmetry_breaking=False, policy=solve)
    except OpplanError as exc:
        log.debug("segment option not solved: %s", exc)
        return None
    device, start = segment_rows(solved, model)
    first = int(model.duration_tick[local_first, device[local_first]]) if local_first is not None else 0
    return _Option(device, start, solved.makespan_tick, first)


def _first_sweep(fine: SchedulingInstance, plan: Plan, results: Sequence[SegmentResult], policy: SearchPolicy,
                 time_limit_s: float, params: SolveParams, backend: str) -> Plan | None:
    """The sweep over every segment that opens a pinned search, within its share of the time; None for none."""
    return _sweep(fine, plan, results, time_limit_s=policy.segment_sweep_share * time_limit_s, backend=backend,
                  threads=params.threads, seed=params.seed, min_solve_s=policy.segment_option_min_s,
                  solve=policy.solve)


def _choose_group(groups: list[_Group], gaps: list[int], left_s: float, min_move_s: float) -> tuple[int, float]:
    """(index of the group to move, the move's seconds): among the least-tried open groups the one with the
    largest gap, given time in proportion to its share of their gaps (at least `min_move_s`, at most `left_s`)."""
    least_tried = min(g.tries for g, gap in zip(groups, gaps) if gap > 0)
    pick = max((k for k, g in enumerate(groups) if gaps[k] > 0 and g.tries == least_tried),
               key=lambda k: gaps[k])
    open_gap = sum(gap for g, gap in zip(groups, gaps) if g.tries == least_tried)
    return pick, min(left_s, max(min_move_s, left_s * gaps[pick] / max(1, open_gap)))


def _stitched_move(fine: SchedulingInstance, best: Plan, results: Sequence[SegmentResult], group: _Group,
                   solved: Plan, model: SchedulingInstance, by: Mapping[str, TaskPlacement]) -> Plan | None:
    """`best` with every copy of `group` replaced by the solved segment, or None when the pieces do not stitch."""
    device, start = segment_rows(solved, model)
    trial = [SegmentResult(r.segment, r.instance, *segment_rows(best, r.instance, by), r.makespan_tick,
                           r.bound_tick, r.how) for r in results]
    for i in group.members:
        trial[i] = SegmentResult(results[i].segment, results[i].instance, device, start,
                                 solved.makespan_tick, group.bound_tick, results[i].how)
    return stitch_segments(fine, trial)


def segment_lns(fine: SchedulingInstance, plan: Plan, decomposition: Decomposition, params: SolveParams, *,
                bound_tick: int = 0, backend: str = "cpsat", progress: ProgressFn | None = None,
                unit: Callable[[int], str] = str, policy: SearchPolicy = DEFAULT_POLICY) -> SegmentLnsResult:
    """Improve `plan` (a valid plan of `fine`) by re-solving its segments (module docstring) until
    `params.time_limit_s` is spent, no segment is left open, or the plan meets `bound_tick`.  `decomposition` is
    phase 1's for `fine`.  A move that fails in the solver is a rejected move, never an error."""
    time_limit_s, threads, seed = params.time_limit_s, params.threads, params.seed
    say = progress or (lambda _msg: None)
    t0 = time.monotonic()
    results = list(decomposition.segments)
    pinned = _pinned_mode(fine)
    groups = _groups(fine, decomposition, plan, pinned)
    best = plan
    moves = improving = rejected = 0
    min_move_s = policy.segment_min_move_s
    if pinned and groups and time_limit_s >= 2 * min_move_s:
        moves += 1
        swept = _first_sweep(fine, best, results, policy, time_limit_s, params, backend)
        say(f"segment LNS: sweep over {len(results)} segments (each solved per kind of device for its bottlenecks, "
            f"the kinds chosen along the graph): plan {unit(best.makespan_tick)} -> "
            f"{unit(swept.makespan_tick) if swept is not None else 'none'} ({time.monotonic() - t0:.1f}s)")
        if swept is None:
            rejected += 1
        elif swept.makespan_tick < best.makespan_tick:
            best = swept
            improving += 1
            groups = _groups(fine, decomposition, best, pinned)  # the sweep may have moved the bottlenecks
    while groups and best.makespan_tick > bound_tick:
        left = time_limit_s - (time.monotonic() - t0)
        if left < min_move_s:
            break
        by = best.by_task()
        gaps = [sum(max(0, segment_span(by, results[i].instance) - g.floor_tick) for i in g.members) for g in groups]
        if not any(gaps):
            break
        pick, move_s = _choose_group(groups, gaps, left, min_move_s)
        group = groups[pick]
        moves += 1
        group.tries += 1
        rep = max(group.members, key=lambda i: segment_span(by, results[i].instance))
        sub = results[rep].instance
        model = _restrict(sub, results[rep], _pins(results[rep], by)) if pinned else sub
        warm = restricted_plan(best, model, by)
        try:
            # CP-SAT's free parallel portfolio, not its interleaved deterministic search: a move on a segment of
            # ~100 ops hits its time limit, so its result depends on the clock anyway (as the iterated list
            # scheduler's and LNS's do), and within that time the portfolio's diverse workers find shorter
            # schedules than the interleaved search.  Pinned bottlenecks leave few devices interchangeable: no
            # symmetry rows then (as `planner.lns`).
            solved = solve_placement(model, backend=backend, time_limit_s=move_s, threads=threads, seed=seed + moves,
                                     warm_start=warm, deterministic=False, symmetry_breaking=not pinned,
                                     policy=policy.solve)
        except OpplanError as exc:  # no plan within the move's time: a rejected move
            log.debug("segment move rejected: %s", exc)
            rejected += 1
            continue
        proven = min(solved.lower_bound_tick, solved.makespan_tick)
        group.floor_tick = max(group.floor_tick, proven)
        if not pinned:  # the free segment model is phase 1's: its proof bounds the segment's optimum
            group.bound_tick = max(group.bound_tick, proven)
        span_before = segment_span(by, sub)
        new = None
        if solved.makespan_tick < span_before:
            new = _stitched_move(fine, best, results, group, solved, model, by)
            if new is None:
                rejected += 1
        say(f"segment LNS: segment {rep} ({sub.num_tasks} ops, {len(group.members)} "
            f"{'copy' if len(group.members) == 1 else 'copies'}{', bottlenecks pinned' if pinned else ''}) "
            f"{unit(span_before)} -> {unit(solved.makespan_tick)} in {move_s:.1f}s, the segment's bound "
            f"{unit(group.first_bound_tick)} -> {unit(group.bound_tick)}; plan {unit(best.makespan_tick)} -> "
            f"{unit(new.makespan_tick) if new is not None else 'unchanged'}")
        if new is not None and new.makespan_tick < best.makespan_tick:
            best = new
            improving += 1
            group.tries -= 1  # an improving group stays first in line
    raised = decomposition.bound_tick + sum(len(g.members) * (g.bound_tick - g.first_bound_tick) for g in groups)
    return SegmentLnsResult(best, plan.makespan_tick, raised, moves, improving, rejected, time.monotonic() - t0)


def segment_phase_applies(state: SearchState) -> bool:
    """Phase 2c runs on a decomposition of several segments when its share of the time left holds a move."""
    decomposition = state.decomposition
    return (isinstance(decomposition, Decomposition) and len(decomposition.segments) > 1
            and state.policy.segment_lns_share * state.budget.left_s() >= state.policy.segment_min_move_s)


def segment_phase(state: SearchState, budget: Budget) -> Candidate | None:
    """Phase 2c of the placement search: `segment_lns` from the incumbent within `budget`; its proofs raise the
    incumbent's bound.  None when it made no move (every segment meets its bound in the incumbent)."""
    assert isinstance(state.decomposition, Decomposition)  # segment_phase_applies
    start, unit, params = state.plan, state.unit, state.params
    resolved = segment_lns(state.fine, start, state.decomposition,
                           dataclasses.replace(params, time_limit_s=budget.left_s()), bound_tick=state.bound_tick,
                           backend=state.options.backend, progress=state.say, unit=unit, policy=state.policy)
    if not resolved.moves:
        return None
    state.incumbent.raise_bound(resolved.bound_tick)
    summary = (f"segment LNS: {resolved.moves} moves ({resolved.improving_moves} improving, "
               f"{resolved.rejected_moves} rejected) in {resolved.seconds:.1f}s: {unit(start.makespan_tick)} -> "
               f"{unit(resolved.plan.makespan_tick)}; op-level bound {unit(state.bound_tick)}")
    return Candidate(resolved.plan, resolved.plan.makespan_tick, "segment LNS", seconds=resolved.seconds,
                     summary=summary)
