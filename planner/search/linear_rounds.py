"""Phase 2a of the placement search: linear-clustering rounds (the original bi-level loop), on graphs with
bottlenecks.

Critical-path linear clustering and merging to the backend's cluster count, warm started from the incumbent
projected onto the clusters (or HEFT on them), solved, then refined on the plan's critical path and solved again
while a round improves.  Each round's plan is expanded to ops and validated like every candidate.
"""

from __future__ import annotations

from formulations.solve_instance import solve_placement
from planner.coarsen import coarsen, contract, critical_paths, expand_plan
from planner.coarsen.refine import project_plan, refine, replay, split_to_target
from planner.cost.instance import SchedulingInstance
from planner.errors import InfeasibleError, OpplanError
from planner.heuristics.list_schedule import heft
from planner.schedule.plan import Plan
from planner.search.budget import Budget
from planner.search.phases import Candidate
from planner.search.policy import SearchPolicy
from planner.search.state import ClusterSolution, RoundLog, SearchState, cluster_candidate, valid_on


def _warm_start(fine: SchedulingInstance, coarse: SchedulingInstance, clusters: list[list[int]],
                incumbent: Plan) -> Plan | None:
    """The shorter of HEFT on the clusters and the incumbent projected onto them; either may not exist (memory
    binds on clusters, since a cluster holds all its members' memory; the incumbent need not be expressible)."""
    warm: Plan | None = None
    try:
        warm = heft(coarse)
    except InfeasibleError:
        pass
    try:
        projected = project_plan(incumbent, coarse, clusters, fine)
        if warm is None or projected.makespan_tick < warm.makespan_tick:
            warm = projected
    except OpplanError:
        pass
    return warm


def _clustered(state: SearchState, target: int) -> tuple[list[list[int]], SchedulingInstance] | None:
    """The linear clusters split to `target`, and their instance; None (said) when the phase does not apply."""
    fine, say, unit = state.fine, state.say, state.unit
    if fine.num_tasks > state.policy.linear_max_ops:
        say(f"linear clustering skipped: {fine.num_tasks} ops (above {state.policy.linear_max_ops}, merging that "
            f"keeps the critical path leaves far more clusters than the solver takes)")
        return None
    coarsening = state.policy.coarsen
    result = coarsen(fine, target_clusters=target, cp_tolerance=coarsening.cp_tolerance, policy=coarsening)
    clusters = split_to_target(fine, result.clusters, target)
    coarse = contract(fine, clusters)
    op_cp, coarse_cp = critical_paths(fine, clusters)  # the clusters the round solves (after split_to_target)
    say(f"linear clustering: {fine.num_tasks} ops into {coarse.num_tasks} clusters "
        f"({result.num_linear_clusters} linear clusters; critical path estimate "
        f"{unit(int(op_cp))} on ops -> {unit(int(coarse_cp))} on clusters)")
    limit = state.policy.cluster_round_factor * target
    if coarse.num_tasks > limit:
        say(f"linear cluster rounds skipped: {coarse.num_tasks} clusters, above the {limit} the "
            f"{state.options.backend} model is solved on in a round")
        return None
    return clusters, coarse


def _round_share_s(remaining_s: float, rnd: int, max_rounds: int,
                   first_share: float = SearchPolicy.linear_first_round_share) -> float:
    """A round's time: `first_share` of what is left for the first of several rounds, else an even split of the
    rest."""
    if rnd == 0 and max_rounds > 1:
        return remaining_s * first_share
    return remaining_s / max(1, max_rounds - rnd)


def linear_rounds(state: SearchState, budget: Budget) -> tuple[ClusterSolution | None, list[RoundLog]]:
    """The rounds within `budget`: (the best round whose expansion passed the validator and is shorter than the
    incumbent, or None; the rounds).  Infeasible on these clusters is no proof for the ops: such a round ends the
    phase and is not reported to the user as a failure."""
    fine, options, say, unit = state.fine, state.options, state.say, state.unit
    target = state.cluster_target()
    clustered = _clustered(state, target)
    if clustered is None:
        return None, []
    clusters, coarse = clustered
    incumbent = state.plan
    warm = _warm_start(fine, coarse, clusters, incumbent)
    valid = valid_on(fine)
    best: ClusterSolution | None = None
    rounds: list[RoundLog] = []
    for rnd in range(options.max_rounds):
        remaining = budget.left_s()
        if remaining <= state.policy.cluster_round_min_left_s:
            break
        share = _round_share_s(remaining, rnd, options.max_rounds, state.policy.linear_first_round_share)
        r0 = budget.clock()
        try:
            plan = solve_placement(coarse, backend=options.backend,
                                   time_limit_s=max(state.policy.cluster_round_min_solve_s, share),
                                   rel_gap=options.rel_gap, threads=options.threads, seed=options.seed,
                                   warm_start=warm, policy=state.policy.solve)
        except OpplanError as exc:  # infeasible or no plan in time on these clusters: the phase ends
            say(f"linear cluster round {rnd}: no plan on these clusters ({exc}); phase skipped")
            break
        op_plan = expand_plan(fine, coarse, clusters, plan)  # members back to back: the same makespan
        rounds.append(RoundLog(len(rounds), coarse.num_tasks, op_plan.makespan_tick, plan.lower_bound_tick,
                               plan.status, budget.clock() - r0))
        say(f"linear cluster round {rnd}: {coarse.num_tasks} clusters, plan {unit(op_plan.makespan_tick)} "
            f"({plan.status} on these clusters)")
        improved = best is None or op_plan.makespan_tick < best.op_plan.makespan_tick
        if improved and op_plan.makespan_tick < incumbent.makespan_tick and valid(op_plan):
            best = ClusterSolution(plan, op_plan, coarse, clusters, plan.lower_bound_tick)
        elif rnd > 0:
            break
        refined = refine(fine, coarse, clusters, plan, target)
        if refined is None:
            break
        old_names = coarse.task_names
        clusters = refined.clusters
        coarse = contract(fine, clusters)
        warm = replay(coarse, plan, old_names, refined.parent)
    return best, rounds


def run(state: SearchState, budget: Budget) -> Candidate | None:
    """The phase: its rounds within `budget`, their best plan offered as 'linear cluster round'."""
    return cluster_candidate("linear cluster round", linear_rounds(state, budget), state)
