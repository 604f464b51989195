"""Phase 3a of the placement search: iterated list scheduling (`planner.heuristics.iterated`).

A (1+1) evolution strategy over task priorities, decoded by the list scheduler, from the classic schedulers'
priorities and the incumbent's order; every plan is a list schedule, hence valid.  It races in both directions of
time (`planner.heuristics.bidirectional`): on the graph and on its mirror, the policy's race share of the budget
each, then the direction whose plan is shorter gets the rest; the forward search alone when that share cannot
hold the mirror's starts (they cost about as much again as the forward ones).
"""

from __future__ import annotations

from functools import partial

from planner.heuristics.bidirectional import bidirectional_iterated
from planner.heuristics.iterated import classic_starts, iterated_list_schedule, order_start
from planner.search.budget import Budget
from planner.search.phases import Candidate
from planner.search.state import SearchState

NAME = "iterated list scheduling"


def _raced(state: SearchState, time_limit_s: float) -> Candidate | None:
    """Both directions of time; each direction's step in the history: the forward search's plan, then the
    mirror's when shorter."""
    fine, unit, start = state.fine, state.unit, state.plan
    raced = bidirectional_iterated(
        fine, time_limit_s=time_limit_s, starts=[*classic_starts(fine), order_start(fine, start)],
        incumbent=start, bound_tick=state.bound_tick, seed=state.params.seed,
        race_share=state.policy.mirror_race_share, progress=state.say, unit=unit,
        search=partial(iterated_list_schedule, tuning=state.policy.iterated))
    summary = (f"{NAME}: {raced.moves} moves ({raced.improving_moves} improving) in {raced.seconds:.1f}s in both "
               f"directions of time, from {unit(raced.start_makespan_tick)}: {unit(raced.plan.makespan_tick)} "
               f"({raced.direction})")
    forward = Candidate(raced.forward_plan, raced.forward_plan.makespan_tick, NAME, seconds=raced.seconds,
                        summary=summary)
    if raced.direction != "mirrored":
        return forward
    return Candidate(raced.plan, raced.plan.makespan_tick, f"{NAME} (mirrored)", seconds=raced.seconds,
                     summary=summary, before=forward)


def _forward(state: SearchState, time_limit_s: float) -> Candidate:
    """The forward search alone."""
    fine, unit = state.fine, state.unit
    searched = iterated_list_schedule(
        fine, time_limit_s=time_limit_s, starts=[*classic_starts(fine), order_start(fine, state.plan)],
        bound_tick=state.bound_tick, seed=state.params.seed, progress=state.say, unit=unit,
        tuning=state.policy.iterated)
    summary = (f"{NAME}: {searched.moves} moves ({searched.improving_moves} improving) in {searched.seconds:.1f}s "
               f"from {searched.start_name} {unit(searched.start_makespan_tick)}: "
               f"{unit(searched.plan.makespan_tick)}")
    return Candidate(searched.plan, searched.plan.makespan_tick, NAME, seconds=searched.seconds, summary=summary)


def run(state: SearchState, budget: Budget) -> Candidate | None:
    """The phase within `budget`: the race when its share of the budget holds the mirror's starts."""
    time_limit_s = budget.left_s()
    race_share = state.policy.mirror_race_share
    if race_share > 0 and race_share * time_limit_s >= startup_s(state):
        return _raced(state, time_limit_s)
    return _forward(state, time_limit_s)


def applies(state: SearchState) -> bool:
    return state.fine.num_tasks > 1


def startup_s(state: SearchState) -> float:
    """The priorities and the first decodes of the starts cannot be stopped."""
    return state.startup_s(state.policy.iterated_start_cost)
