"""Iterated list scheduling in both directions of time: the graph as given, and its mirror.

A list scheduler places each task as early as its inputs allow, so its plans are left-justified; the same scheduler
on the *mirrored* graph (every edge reversed, the same delays: `planner.heuristics.justify.mirrored`) places each
task as late as its outputs allow, and a plan of the mirror read backwards in time is a plan of the graph.  The two
searches have different local optima: on the engine bench's random layered DAGs the mirror is often the better
search space, for the classic schedulers and for the iterated search alike, but not on every graph.  Which
direction wins differs by graph, so the two race:

    forward:  `iterated_list_schedule` on the graph, from `starts` (the classic starts and the incumbent's order),
              for `MirrorRacePolicy.share` of the budget (`planner.heuristics.policy`)
    mirrored: the same on the mirror, from the classic starts of the mirror and the incumbent read backwards
              (priority = its end tick), for that share of the budget; its plan is brought back to the graph by
              the forward half of `justify` (the mirror plan read backwards, decoded in its own start order on its
              own devices: no longer, and within memory where it binds, since that decode follows the list
              scheduler's tracker)
    the rest: the direction whose plan is shorter on the graph goes on from its best priority (and its classic
              starts) with the budget left

The mirror has no memory limits (an order is all it yields); where memory binds, the forward decode is the repair
and a mirrored plan it finds no slot for loses the race.  The result is the shortest forward plan seen (never
longer than the best of `starts`' decodes).  Deterministic for a seed and `max_moves` (each of the three searches
gets at most that many moves; `seed`, `seed + 1`, `seed + 2`); a time budget cuts the number of moves.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from planner.cost.instance import SchedulingInstance
from planner.heuristics.assignment_search import Decoder, decoded_of
from planner.heuristics.iterated import IteratedResult, Start, classic_starts, iterated_list_schedule
from planner.heuristics.justify import Justifier, mirrored, mirrored_plan
from planner.heuristics.list_schedule import earliest_finish, heuristic_plan
from planner.heuristics.policy import DEFAULT_MIRROR_RACE_POLICY
from planner.schedule.plan import Plan

__all__ = ["BidirectionalResult", "MIRRORED_METHOD", "bidirectional_iterated"]

MIRRORED_METHOD = "mirrored-iterated-list"
ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class BidirectionalResult:
    """The shortest plan of the graph found (method `iterated-list` or MIRRORED_METHOD), which direction found it
    ('forward' or 'mirrored'), the forward search's best plan (`plan` itself when the forward direction won), each
    direction's best makespan on the graph after the race (None: the mirrored plan found no slot in memory), the
    best start's makespan, and how the search went."""

    plan: Plan
    direction: str
    forward_plan: Plan
    forward_tick: int
    mirrored_tick: int | None
    start_makespan_tick: int
    moves: int
    improving_moves: int
    seconds: float


def _on_graph(justifier: Justifier, found: IteratedResult) -> Plan | None:
    """A plan of the mirror brought back to the graph (module docstring), or None when memory finds no slot."""
    back = justifier.forward_of_mirrored(decoded_of(justifier.backward.instance, found.plan))
    if back is None:
        return None
    return heuristic_plan(justifier.decoder.instance, back.dev, back.start, back.end, MIRRORED_METHOD, found.seconds)


def bidirectional_iterated(instance: SchedulingInstance, *, time_limit_s: float, starts: Sequence[Start] | None = None,
                           incumbent: Plan | None = None, bound_tick: int = 0, seed: int = 0,
                           max_moves: int | None = None, race_share: float = DEFAULT_MIRROR_RACE_POLICY.share,
                           progress: ProgressFn | None = None, unit: Callable[[int], str] = str,
                           search: Callable[..., IteratedResult] = iterated_list_schedule) -> BidirectionalResult:
    """The race of the module docstring within `time_limit_s`.  `starts`: the forward search's starting points
    (default `classic_starts`); `incumbent`, when given, also starts the mirrored search (read backwards).
    `search`: the iterated list scheduler each direction runs (`iterated_list_schedule`; the planner passes the one
    it imported, so that what replaces it there replaces it here too).  Raises `InfeasibleError` only when no
    forward start decodes."""
    say = progress or (lambda _msg: None)
    t0 = time.monotonic()
    deadline = t0 + time_limit_s
    fwd_starts = list(starts) if starts is not None else classic_starts(instance)
    forward = search(instance, time_limit_s=race_share * time_limit_s, starts=fwd_starts, bound_tick=bound_tick,
                     seed=seed, max_moves=max_moves)
    best, direction, forward_best = forward.plan, "forward", forward.plan
    moves, improving = forward.moves, forward.improving_moves
    mirrored_tick: int | None = None
    if best.makespan_tick > bound_tick:
        mirror = mirrored(instance)
        justifier = Justifier(Decoder(instance), mirror)
        mir_starts = classic_starts(mirror)
        if incumbent is not None:  # the incumbent read backwards: priority = minus its start in the mirror
            by = mirrored_plan(mirror, incumbent).by_task()
            mir_starts.append(Start("incumbent, mirrored", np.array(
                [-by[n].start_tick for n in mirror.task_names], dtype=np.float64), earliest_finish))
        budget = min(race_share * time_limit_s, max(0.0, deadline - time.monotonic()))
        mir = search(mirror, time_limit_s=budget, starts=mir_starts, bound_tick=bound_tick, seed=seed + 1,
                     max_moves=max_moves)
        moves += mir.moves
        improving += mir.improving_moves
        on_graph = _on_graph(justifier, mir)
        mirrored_tick = on_graph.makespan_tick if on_graph is not None else None
        say(f"iterated list scheduling race: forward {unit(forward.plan.makespan_tick)}, mirrored "
            f"{unit(mirrored_tick) if mirrored_tick is not None else 'no plan within memory'}")
        leader, lead_inst, lead_starts = forward, instance, fwd_starts
        if on_graph is not None and on_graph.makespan_tick < best.makespan_tick:
            best, direction = on_graph, "mirrored"
            leader, lead_inst, lead_starts = mir, mirror, mir_starts
        left = deadline - time.monotonic()
        if best.makespan_tick > bound_tick and left > 0 and leader.priority is not None:
            assert leader.policy is not None
            goes_on = search(lead_inst, time_limit_s=left,
                             starts=[Start("race best", leader.priority, leader.policy), *lead_starts],
                             bound_tick=bound_tick, seed=seed + 2, max_moves=max_moves)
            moves += goes_on.moves
            improving += goes_on.improving_moves
            found = goes_on.plan if lead_inst is instance else _on_graph(justifier, goes_on)
            if found is not None and found.makespan_tick < best.makespan_tick:
                best = found
                if lead_inst is instance:
                    forward_best = found
    elapsed = time.monotonic() - t0
    best = dataclasses.replace(best, solve_time_s=elapsed)
    return BidirectionalResult(best, direction, forward_best, forward.plan.makespan_tick, mirrored_tick,
                               forward.start_makespan_tick, moves, improving, elapsed)
