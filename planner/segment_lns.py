"""Segment neighbourhoods: free one bottleneck segment of the op plan, keep the rest, re-solve it exactly.

A large-neighbourhood search whose neighbourhoods are the decomposition's segments (`planner.decompose`: the
ops between two consecutive bottlenecks).  It exists because the window neighbourhoods of `planner.lns` do not
reach the plans a whole segment's solve reaches: on the bundled MoE (cpu-4) every plan's gap to the bound sat in
the 96-op expert segment, where 20 s more of CP-SAT on the whole segment shortened the segment's schedule and
windows of 16-48 ops of it did not (issue 16's notes).

One move, on the incumbent P:

1. **Pick** the group of identical segments (same signature: a stacked model's repeated layers) with the largest
   sum over its copies of (span in P - the segment's proven bound); segments proven optimal, too large for the
   solver (`planner.decompose.SEGMENT_MAX_TASKS`) or solved by a list schedule to their bound are never picked.
2. **Solve** the copy with the longest span in P as its own instance (the decomposition's induced instance, the
   same model as phase 1: devices free, symmetry rows on), warm-started from P's schedule of it, for a share of
   the time left proportional to its group's gap.
3. **Put back** the solution on every copy of the group, and P's own schedule on every other segment, joined by
   `planner.decompose.stitch_segments` (the later segments' devices relabelled by a swap of interchangeable devices
   where a bottleneck moved; replayed on the whole op graph and validated, memory included).  A plan shorter than P is
   accepted; a stitch that fails (devices not interchangeable, memory) is a rejected move.

Because segments run one after another (every op of a segment is after its first bottleneck and before its last),
a shorter segment schedule shortens the plan by as much, times the number of copies, unless an edge that jumps
over a bottleneck holds it back (the replay counts those).

**Bound.**  The model solved in step 2 is the decomposition's segment model, so its proven bound is a bound on
that segment's optimum and raises the decomposition bound (the sum over segments, `planner.decompose`) by the
gain times the number of copies: `SegmentLnsResult.bound_tick`.

A group whose move found nothing shorter is not picked again until every other group has had as many moves (ties
in the gap go to the group tried least); the search ends when the budget is spent or no group is left open.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from formulations.solve_instance import solve_placement
from planner.cost.instance import SchedulingInstance
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

__all__ = ["SegmentLnsResult", "open_segment_groups", "segment_lns"]

log = logging.getLogger(__name__)
ProgressFn = Callable[[str], None]

MIN_MOVE_S = 2.0  # least time a segment solve gets (a CP-SAT model of ~100 ops takes about a second to build)
SOLVED_SOURCES = (SegmentSource.SOLVER, SegmentSource.CACHED, SegmentSource.NO_TIME)  # segments a move may take


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
    """Identical segments (indices into the decomposition's segments) and what the search knows of them."""

    members: list[int]
    bound_tick: int  # the segment's proven bound (raised by the moves)
    first_bound_tick: int  # the decomposition's
    tries: int = 0


def _rows(by: Mapping[str, TaskPlacement], sub: SchedulingInstance) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`segment_rows` from a plan's `by_task()` (built once per move rather than once per segment)."""
    rows = [by[name] for name in sub.task_names]
    return tuple(r.device for r in rows), tuple(r.start_tick for r in rows)


def open_segment_groups(fine: SchedulingInstance, decomposition: Decomposition | None) -> int:
    """How many groups of identical segments a move could take (module docstring, step 1): 0 when the graph is
    one segment (then the segment is the whole graph, which the other phases search) or none is left open."""
    if decomposition is None or len(decomposition.segments) < 2:
        return 0
    return len(_groups(decomposition))


def _groups(decomposition: Decomposition) -> list[_Group]:
    by_sig: dict[tuple, _Group] = {}
    for i, r in enumerate(decomposition.segments):
        if r.how not in SOLVED_SOURCES or r.bound_tick >= r.makespan_tick:
            continue
        sig = segment_signature(r.instance)
        group = by_sig.get(sig)
        if group is None:
            by_sig[sig] = _Group([i], r.bound_tick, r.bound_tick)
        else:
            group.members.append(i)
    return list(by_sig.values())


def segment_lns(fine: SchedulingInstance, plan: Plan, decomposition: Decomposition, *, time_limit_s: float,
                bound_tick: int = 0, backend: str = "cpsat", threads: int = 8, seed: int = 0,
                progress: ProgressFn | None = None, unit: Callable[[int], str] = str) -> SegmentLnsResult:
    """Improve `plan` (a valid plan of `fine`) by re-solving its segments (module docstring) until `time_limit_s`
    is spent, no segment is left open, or the plan meets `bound_tick`.  `decomposition` is phase 1's for `fine`.
    A move that fails in the solver is a rejected move, never an error."""
    say = progress or (lambda _msg: None)
    t0 = time.monotonic()
    results = list(decomposition.segments)
    groups = _groups(decomposition)
    every_group = list(groups)  # `groups` loses the ones proven optimal; the bound counts them all
    best = plan
    moves = improving = rejected = 0
    while groups and best.makespan_tick > bound_tick:
        left = time_limit_s - (time.monotonic() - t0)
        if left < MIN_MOVE_S:
            break
        by = best.by_task()
        gaps = [sum(max(0, segment_span(by, results[i].instance) - g.bound_tick) for i in g.members) for g in groups]
        if not any(gaps):
            break
        least_tried = min(g.tries for g, gap in zip(groups, gaps) if gap > 0)
        pick = max((k for k, g in enumerate(groups) if gaps[k] > 0 and g.tries == least_tried),
                   key=lambda k: gaps[k])
        group = groups[pick]
        open_gap = sum(gap for g, gap in zip(groups, gaps) if g.tries == least_tried)
        move_s = min(left, max(MIN_MOVE_S, left * gaps[pick] / max(1, open_gap)))
        moves += 1
        group.tries += 1
        rep = max(group.members, key=lambda i: segment_span(by, results[i].instance))
        sub = results[rep].instance
        warm = restricted_plan(best, sub, by)
        try:
            # CP-SAT's free parallel portfolio, not its interleaved deterministic search: on the MoE's 96-op expert
            # segment (cpu-4, 15 s from the planner's plan, 34004 ticks) the deterministic search found 34003-34004
            # in three solves and the portfolio 33435-33627 in four; the moves hit their time limit, so their
            # result depends on the clock anyway (as the iterated list scheduler's and LNS's do)
            solved = solve_placement(sub, backend=backend, time_limit_s=move_s, threads=threads, seed=seed + moves,
                                     warm_start=warm, deterministic=False)
        except OpplanError as exc:  # no plan within the move's time: a rejected move
            log.debug("segment move rejected: %s", exc)
            rejected += 1
            continue
        proven = min(solved.lower_bound_tick, solved.makespan_tick)
        if proven > group.bound_tick:
            group.bound_tick = proven
        span_before = segment_span(by, sub)
        new = None
        if solved.makespan_tick < span_before:
            device, start = segment_rows(solved, sub)
            trial = [SegmentResult(r.segment, r.instance, *_rows(by, r.instance), r.makespan_tick, r.bound_tick,
                                   r.how) for r in results]
            for i in group.members:
                trial[i] = SegmentResult(results[i].segment, results[i].instance, device, start,
                                         solved.makespan_tick, group.bound_tick, results[i].how)
            new = stitch_segments(fine, trial)
            if new is None:
                rejected += 1
        say(f"segment LNS: segment {rep} ({sub.num_tasks} ops, {len(group.members)} "
            f"{'copy' if len(group.members) == 1 else 'copies'}) {span_before} -> {solved.makespan_tick} ticks in "
            f"{move_s:.1f}s, its bound {group.first_bound_tick} -> {group.bound_tick}; plan "
            f"{unit(best.makespan_tick)} -> {unit(new.makespan_tick) if new is not None else 'unchanged'}")
        if new is not None and new.makespan_tick < best.makespan_tick:
            best = new
            improving += 1
            group.tries -= 1  # an improving group stays first in line
        if group.bound_tick >= min(solved.makespan_tick, segment_span(best.by_task(), sub)):
            groups.remove(group)  # proven optimal
    raised = decomposition.bound_tick + sum(len(g.members) * (g.bound_tick - g.first_bound_tick) for g in every_group)
    return SegmentLnsResult(best, plan.makespan_tick, raised, moves, improving, rejected, time.monotonic() - t0)
