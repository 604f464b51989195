"""Phase 3a' of the placement search: the assignment search (`planner.heuristics.assignment_search`).

A local search over (device per task, order) from the incumbent, decoded by a list schedule that follows the given
devices, with moves at the plan's critical chain; it hands its time on to LNS after the policy's number of moves
without gain.
"""

from __future__ import annotations

from planner.heuristics.assignment_search import assignment_search
from planner.search.budget import Budget
from planner.search.phases import Candidate
from planner.search.state import SearchState


def run(state: SearchState, budget: Budget) -> Candidate | None:
    """The phase within `budget`."""
    unit = state.unit
    moved = assignment_search(state.fine, state.plan, time_limit_s=budget.left_s(), bound_tick=state.bound_tick,
                              seed=state.params.seed, stall_moves=state.policy.assignment_stall_moves,
                              progress=state.say, unit=unit, policy=state.policy.assignment)
    summary = (f"assignment search: {moved.moves} moves ({moved.improving_moves} improving) in "
               f"{moved.seconds:.1f}s from {unit(moved.start_makespan_tick)}: {unit(moved.plan.makespan_tick)}")
    return Candidate(moved.plan, moved.plan.makespan_tick, "assignment search", seconds=moved.seconds,
                     summary=summary)


def applies(state: SearchState) -> bool:
    return state.fine.num_tasks > 1 and state.policy.assignment_share > 0


def startup_s(state: SearchState) -> float:
    """Its decoder, first decode and linear clusters, and a first move, none of which can be stopped."""
    if state.policy.assignment_share * state.budget.left_s() <= state.policy.assignment_short_share_s:
        return 0.0
    return state.startup_s(state.policy.assignment_start_cost)
