"""The communication-aware bound of the op graph as a step of the placement search (`planner.heuristics.comm_bound`).

It runs after the decomposition, which adds up the same bound over segments (on one segment: the same graph), so
when time is short the stronger bound of the two is the one kept.  It cannot be stopped once started.
"""

from __future__ import annotations

from planner.heuristics.comm_bound import comm_lower_bound_tick
from planner.search.budget import Budget
from planner.search.phases import Candidate
from planner.search.state import SearchState

NAME = "communication-aware bound"


def run(state: SearchState, _budget: Budget) -> Candidate | None:
    """Raise the incumbent's bound; never a plan."""
    bound = comm_lower_bound_tick(state.fine, policy=state.policy.comm_bound)
    state.incumbent.raise_bound(bound)
    state.say(f"{NAME} {state.unit(bound)}")
    return None


def startup_s(state: SearchState) -> float:
    return state.startup_s(state.policy.comm_bound_cost)
