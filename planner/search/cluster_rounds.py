"""Phase 2b of the placement search: cluster rounds on the incumbent's runs (`planner.coarsen.respect`).

The incumbent's runs (ops it runs one after another on one device whose outside inputs have arrived when the run
starts) become clusters, so the incumbent is expressible on them: its projection is a valid warm start no longer
than it, and the placement model on those clusters can only keep or improve it.  Repeated on the improved plan
while a round improves it.  Skipped when the runs are too many for a round's model (tight plans of large graphs:
LNS handles those) or nearly single ops (the op-level model again).
"""

from __future__ import annotations

from formulations.solve_instance import solve_placement
from planner.coarsen import expand_plan
from planner.coarsen.respect import respecting_clusters
from planner.cost.instance import SchedulingInstance
from planner.schedule.validate import validate_plan
from planner.search.budget import Budget
from planner.search.phases import Candidate
from planner.search.state import ClusterSolution, RoundLog, SearchState, cluster_candidate


def _too_many(state: SearchState, coarse: SchedulingInstance, limit: int) -> bool:
    """Whether the runs are too many clusters for a round (said when so)."""
    factor, fine = state.policy.cluster_round_factor, state.fine
    if coarse.num_tasks > factor * limit:
        state.say(f"cluster round skipped: the incumbent's runs make {coarse.num_tasks} clusters, more than "
                  f"{factor * limit} (LNS handles it)")
        return True
    if coarse.num_tasks > state.policy.cluster_min_shrink * fine.num_tasks:
        state.say(f"cluster round skipped: the incumbent's runs make {coarse.num_tasks} clusters of "
                  f"{fine.num_tasks} ops (nearly single ops; the later phases handle it)")
        return True
    return False


def cluster_rounds(state: SearchState, budget: Budget) -> tuple[ClusterSolution | None, list[RoundLog]]:
    """Rounds on the incumbent's runs within `budget`, each on the plan the one before improved: (the best round,
    or None; the rounds)."""
    fine, options, say, unit = state.fine, state.options, state.say, state.unit
    limit = state.cluster_target()
    best: ClusterSolution | None = None
    rounds: list[RoundLog] = []
    current = state.plan
    for rnd in range(options.max_rounds):
        remaining = budget.left_s()
        if remaining <= state.policy.cluster_round_min_left_s:
            break
        clusters, coarse, warm = respecting_clusters(fine, current)
        if _too_many(state, coarse, limit):
            break
        r0 = budget.clock()

        def report(elapsed_s, value, bound, gap, _rnd=rnd):
            if value is not None:
                say(f"cluster round {_rnd}: {elapsed_s:5.1f}s incumbent {unit(int(value))} cluster bound "
                    f"{unit(int(bound)) if bound is not None else '-'}")

        plan = solve_placement(coarse, backend=options.backend,
                               time_limit_s=max(state.policy.cluster_round_min_solve_s,
                                                  remaining * state.policy.cluster_share),
                               rel_gap=options.rel_gap, threads=options.threads, seed=options.seed, warm_start=warm,
                               progress=report, policy=state.policy.solve)
        op_plan = expand_plan(fine, coarse, clusters, plan)
        validate_plan(fine, op_plan)
        rounds.append(RoundLog(rnd, coarse.num_tasks, op_plan.makespan_tick, plan.lower_bound_tick, plan.status,
                               budget.clock() - r0))
        say(f"cluster round {rnd}: {coarse.num_tasks} clusters (the incumbent's runs; warm start "
            f"{unit(warm.makespan_tick)}), plan {unit(op_plan.makespan_tick)} ({plan.status} on these clusters)")
        if best is not None and op_plan.makespan_tick >= best.op_plan.makespan_tick:
            break
        if op_plan.makespan_tick >= current.makespan_tick:
            break
        best = ClusterSolution(plan, op_plan, coarse, clusters, plan.lower_bound_tick)
        current = op_plan
    return best, rounds


def run(state: SearchState, budget: Budget) -> Candidate | None:
    """The phase: its rounds within `budget`, their best plan offered as 'cluster round'."""
    return cluster_candidate("cluster round", cluster_rounds(state, budget), state)


def startup_s(state: SearchState) -> float:
    """Finding the incumbent's runs cannot be stopped."""
    return state.startup_s(state.policy.cluster_runs_cost)
