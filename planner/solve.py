"""The planner: prove how good a plan can be, then search for it.

The input is an op-level SchedulingInstance (the "fine" one; `planner.prepare` makes it from a model file).  The
search is a table of phases (`planner.search.phases.Phase`) run by one loop (`run_phases`), after phase 0; its
tuning is a `SearchPolicy` passed in, its time one `Budget` for the whole search:

    phase 0, list scheduling (`planner.search.list_scheduling`): the shortest of HEFT, HEFT with CPoP's priority
               and PEFT, the first incumbent.  Its fastest run's seconds are the unit of the startup estimates:
               a step that cannot be stopped starts only when its estimated cost is left.
    phase 1, decomposition (`planner.decompose.decomposition_phase`): cut the op graph at its bottlenecks, solve
               each segment's placement model; the segment optima add up to a lower bound for the op graph, and
               the segment schedules join into an op plan.  Then the communication-aware bound
               (`planner.search.comm_bound`).  When the incumbent meets the bound it is optimal and the search
               stops.
    phase 2a, linear-clustering rounds (`planner.search.linear_rounds`), only on graphs with bottlenecks (model
               graphs such as the bundled MoE, where they find good plans; on graphs without bottlenecks they
               lose to HEFT).
    phase 2b, cluster rounds on the incumbent's runs (`planner.search.cluster_rounds`): the model on clusters the
               incumbent is expressible on can only keep or improve it.
    phase 2c, segment neighbourhoods (`planner.segment_lns.segment_phase`) on graphs with bottlenecks whose
               segments the incumbent does not run in their proven bound; their proofs raise the bound.  A whole
               segment's solve reaches plans that the windows of phase 3b do not.
    phase 3a, iterated list scheduling in both directions of time (`planner.search.iterated`).
    phase 3a', assignment search from the incumbent (`planner.search.assignment`).
    phase 3b, large-neighbourhood search on the op plan (`planner.lns.lns_phase`) with the time left, until the
               budget is spent or the plan meets the bound.

Every candidate is checked before it can become the incumbent (the validator on the op graph); a phase that fails
inside is a bug, logged with its traceback, and the search continues with the incumbent it has, so a valid input
always gets a valid plan.  A phase that finds no plan at all (its heuristics run into a memory dead end near the
least feasible capacity: `InfeasibleError`) proves nothing once phase 0 has a plan: it is reported and skipped the
same way, without a traceback.  `Outcome.phases` (and the plan file's `search`) lists each step that improved the
incumbent: the list scheduler, then 'decomposition', 'linear cluster round', 'cluster round', 'segment LNS',
'iterated list scheduling', 'iterated list scheduling (mirrored)', 'assignment search', 'LNS'; the last one found
the plan.  When the plan is an op plan, it is returned over one-op clusters, so `Outcome.plan` is always a plan of
`Outcome.coarse` whose `task_ops` lead back to the ops.

The reported lower bound is for the real (op-level) problem: the best of the decomposition bound and the
communication-aware bound, never below max(critical path, total work / total speed) of the fine instance.  The
solver's bound on the clusters is reported apart (`cluster_bound_tick`), since a coarser problem's optimum is no
bound for the finer one (with one-op clusters the two coincide).  Time is integer ticks throughout; with
`deterministic` CP-SAT (the default of `solve_placement`) and a budget the solver does not hit, results are the
same from run to run (the iterated list scheduler's number of moves depends on the clock, like LNS's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from formulations.backends import get_backend
from formulations.stop import SearchStopped
from planner.coarsen.refine import as_singletons
from planner.cost.instance import SchedulingInstance
from planner.decompose import (
    Decomposition,
    decomposition_applies,
    decomposition_phase,
    decomposition_startup_s,
    segments,
)
from planner.errors import InfeasibleError
from planner.heuristics.baselines import round_robin, single_device
from planner.heuristics.list_schedule import heft
from planner.ir.units import format_time
from planner.lns import lns_phase
from planner.schedule.plan import Plan, PlanMethod, PlanStatus
from planner.schedule.validate import validate_plan
from planner.search import assignment, cluster_rounds, comm_bound, iterated, linear_rounds
from planner.search.budget import Budget
from planner.search.list_scheduling import phase_zero
from planner.search.options import Method, SolveOptions
from planner.search.phases import Incumbent, Phase, PhaseLog, ProgressFn, run_phases
from planner.search.policy import DEFAULT_CLUSTERS, SearchPolicy
from planner.search.state import ClusterSolution, RoundLog, SearchState, valid_on
from planner.segment_lns import segment_phase, segment_phase_applies

__all__ = ["DEFAULT_CLUSTERS", "ClusterSolution", "Method", "Outcome", "PhaseLog", "RoundLog", "SearchPolicy",
           "SolveOptions", "baseline_makespans", "plan_instance", "tick_formatter"]

DEFAULT_OPTIONS = SolveOptions()
DEFAULT_POLICY = SearchPolicy()


def _history(phases: Sequence[PhaseLog], unit: Callable[[int], str]) -> str:
    """The incumbent's history, each step with how much it took off the one before (a small gain would otherwise
    print as the same rounded time twice): ``heft 1.388ms -> decomposition 1.302ms (-6.2%)``."""
    parts = []
    for i, p in enumerate(phases):
        prev = phases[i - 1].makespan_tick if i else 0
        change = 100 * (p.makespan_tick - prev) / prev if i and prev > 0 else 0.0
        gain = f" ({'+' if change > 0 else '-'}{abs(change):.2g}%)" if i and prev > 0 else ""
        parts.append(f"{p.source} {unit(p.makespan_tick)}{gain}")
    return " -> ".join(parts)


def tick_formatter(instance: SchedulingInstance) -> Callable[[int], str]:
    """Ticks -> text with a unit: seconds when the instance has a tick length, else its own time unit."""
    if instance.tick_s:
        tick_s = instance.tick_s
        return lambda t: format_time(t * tick_s)
    unit = instance.time_unit or "tick"
    return lambda t: f"{t} {unit}"


@dataclass(frozen=True)
class Outcome:
    """The chosen plan over clusters (with `task_ops`), its expansion to ops, and how it was found.  Both plans
    have the same makespan; `op_plan` passed the validator on the fine instance.  `saved_plan()` is what a plan
    file stores."""

    plan: Plan
    op_plan: Plan
    fine: SchedulingInstance
    coarse: SchedulingInstance
    clusters: tuple[tuple[int, ...], ...]
    rounds: tuple[RoundLog, ...] = ()
    cluster_bound_tick: int = 0
    baselines: Mapping[str, int] = field(default_factory=dict)
    lower_bound_tick: int = 0  # for the op graph (decomposition bound); equals op_plan.lower_bound_tick
    decomposition: Decomposition | None = None
    phases: tuple[PhaseLog, ...] = ()  # the incumbent's history: first the list schedule, last what found the plan

    @property
    def found_by(self) -> str:
        """The part of the search that found the returned plan (see `PhaseLog`)."""
        return self.phases[-1].source if self.phases else str(self.op_plan.method)

    def saved_plan(self) -> Plan:
        """The cluster plan (with its map back to ops), or, when no op was grouped with another, the op plan itself
        (task ids are the ops' own names) with the solver's bound, which is then a bound for the op graph too."""
        if not all(len(c) == 1 for c in self.clusters):
            return self.plan
        op = self.op_plan
        bound = max(op.lower_bound_tick, min(self.cluster_bound_tick, op.makespan_tick))
        status = PlanStatus.OPTIMAL if bound >= op.makespan_tick else PlanStatus(op.status)
        return dataclasses.replace(op, lower_bound_tick=bound, status=status, task_ops={},
                                   instance_name=self.fine.name, search=self.plan.search or op.search)


def _baseline(fine: SchedulingInstance, method: Method) -> Plan:
    if method is Method.HEFT:
        return heft(fine)
    if method is Method.ROUND_ROBIN:
        return round_robin(fine)
    return single_device(fine)


def baseline_makespans(fine: SchedulingInstance, known: Mapping[str, int] | None = None) -> dict[str, int]:
    """Makespan (ticks) of each list-scheduling baseline on the op graph; infeasible ones are left out.  `known`:
    baselines already computed (method value -> makespan), taken as they are (HEFT from phase 0: 1-4 s at 100k ops)."""
    out = dict(known or {})
    for method in (Method.HEFT, Method.ROUND_ROBIN, Method.SINGLE_DEVICE):
        if method.value in out:
            continue
        try:
            out[method.value] = _baseline(fine, method).makespan_tick
        except InfeasibleError:
            pass
    return out


def _has_bottlenecks(state: SearchState) -> bool:
    return state.fine.num_tasks > 1 and len(segments(state.fine)) > 1


def _bound_phases() -> tuple[Phase[SearchState], ...]:
    """Phase 1 and the communication-aware bound: they run even when phase 0's plan meets the trivial bound."""
    return (Phase("decomposition", decomposition_phase, applies=decomposition_applies,
                  startup_s=decomposition_startup_s, startup_why="before any segment is solved", while_open=False),
            Phase(comm_bound.NAME, comm_bound.run, startup_s=comm_bound.startup_s, while_open=False))


def _search_phases(policy: SearchPolicy) -> tuple[Phase[SearchState], ...]:
    """Phases 2a to 3b (module docstring), each while the incumbent is above its bound."""
    return (Phase("linear cluster rounds", linear_rounds.run, applies=_has_bottlenecks, share=policy.linear_share),
            Phase("cluster rounds", cluster_rounds.run, startup_s=cluster_rounds.startup_s,
                  startup_why="to find the incumbent's runs"),
            Phase("segment LNS", segment_phase, applies=segment_phase_applies, share=policy.segment_lns_share),
            Phase(iterated.NAME, iterated.run, applies=iterated.applies, share=policy.iterated_share,
                  min_left_s=policy.least_left_s, startup_s=iterated.startup_s, startup_why="to decode its starts"),
            Phase("assignment search", assignment.run, applies=assignment.applies, share=policy.assignment_share,
                  min_left_s=policy.least_left_s, startup_s=assignment.startup_s, startup_share=policy.assignment_share,
                  startup_why="to set it up"),
            Phase("LNS", lns_phase, min_left_s=policy.least_left_s))


def plan_instance(fine: SchedulingInstance, options: SolveOptions = DEFAULT_OPTIONS,
                  progress: ProgressFn | None = None, *, policy: SearchPolicy = DEFAULT_POLICY) -> Outcome:
    """Plan an op-level instance with the chosen method (see module docstring) and `policy`; the result is
    validated.

    On a valid input this never fails because of the search: every candidate is checked before it can become the
    incumbent, and a phase that fails inside (a bug) is logged with its traceback and skipped, so the plan of
    the phases before it is returned.  Only what no search can fix (no device for a task, memory nothing fits:
    `InfeasibleError` from the list schedulers) reaches the caller."""
    say = progress or (lambda _msg: None)
    budget = Budget.starting_now(options.time_limit_s)  # phase 0 counts against the budget too
    started_s = budget.clock()
    if options.method is not Method.MILP:
        return _baseline_outcome(fine, options.method)
    get_backend(options.backend)  # an unknown or missing backend is the user's error, raised before the search
    unit = tick_formatter(fine)
    computed: dict[str, int] = {}  # baselines phase 0 ran anyway
    first, list_s = phase_zero(fine, computed, budget, say, unit)
    incumbent = Incumbent(first, first.makespan_tick, fine.trivial_lower_bound_tick(), valid_on(fine),
                          [PhaseLog(str(first.method), first.makespan_tick, budget.clock() - started_s)])
    state = SearchState(fine, incumbent, options, policy, budget, list_s, say, unit)
    try:
        run_phases(_bound_phases(), state, budget, say)
        if incumbent.closed():
            say(f"the incumbent ({incumbent.plan.method}, {unit(incumbent.makespan_tick)}) meets the lower bound: "
                f"optimal")
        else:
            run_phases(_search_phases(policy), state, budget, say)
    except SearchStopped:  # the user's first Ctrl-C (formulations.stop): the incumbent is a valid plan
        say(f"search stopped; the best plan so far: {incumbent.plan.method}, {unit(incumbent.makespan_tick)}")
    return _outcome(state, computed, budget.clock() - started_s)


def _baseline_outcome(fine: SchedulingInstance, method: Method) -> Outcome:
    """A list-scheduling baseline's plan as the outcome, over one-op clusters."""
    plan = _baseline(fine, method)
    validate_plan(fine, plan)
    singletons = tuple((i,) for i in range(fine.num_tasks))
    return Outcome(plan=plan, op_plan=plan, fine=fine, coarse=fine, clusters=singletons,
                   baselines=baseline_makespans(fine))


def _solver_fields(state: SearchState, plan: Plan, decomposition: Decomposition | None) -> dict[str, str]:
    """The solver's name and version when a solver ran and the plan does not name one: it proved the bound (and
    maybe found nothing better than HEFT)."""
    solved = decomposition is not None and decomposition.solved
    if plan.solver or not (state.rounds or solved or len(state.incumbent.history) > 1):
        return {}
    backend = get_backend(state.options.backend)
    return {"solver": backend.name, "solver_version": backend.version}


def _outcome(state: SearchState, computed: dict[str, int], elapsed_s: float) -> Outcome:
    """The search's result: the incumbent (over its clusters when a cluster phase found it, else over one-op
    clusters) with the op-level bound, its status and history; both plans validated."""
    fine, incumbent, unit = state.fine, state.incumbent, state.unit
    best = incumbent.detail if isinstance(incumbent.detail, ClusterSolution) else None
    if best is None:
        coarse, clusters, plan = as_singletons(fine, incumbent.plan)
        best = ClusterSolution(plan, incumbent.plan, coarse, clusters, incumbent.bound_tick)
    plan, op_plan, coarse, clusters = best.plan, best.op_plan, best.coarse, best.clusters
    fine_bound = min(incumbent.bound_tick, op_plan.makespan_tick)
    status = PlanStatus.OPTIMAL if op_plan.makespan_tick <= fine_bound else PlanStatus.FEASIBLE
    decomposition = state.decomposition if isinstance(state.decomposition, Decomposition) else None
    solver = _solver_fields(state, plan, decomposition)
    phases = incumbent.history
    search = tuple((p.source, p.makespan_tick) for p in phases)
    final = dataclasses.replace(plan, method=PlanMethod.MILP, status=status, lower_bound_tick=fine_bound,
                                solve_time_s=elapsed_s, task_ops=dict(coarse.task_ops), search=search,
                                **solver)  # type: ignore[arg-type]  # mypy reads **dict as every field
    op_plan = dataclasses.replace(op_plan, method=PlanMethod.MILP, status=status, lower_bound_tick=fine_bound,
                                  solve_time_s=elapsed_s, search=search, **solver)  # type: ignore[arg-type]
    validate_plan(coarse, final)
    validate_plan(fine, op_plan)
    state.say(f"found by {phases[-1].source}: " + _history(phases, unit) + f"; bound {unit(fine_bound)}, gap "
              f"{100 * op_plan.gap:.1f}%")
    return Outcome(plan=final, op_plan=op_plan, fine=fine, coarse=coarse, clusters=tuple(map(tuple, clusters)),
                   rounds=tuple(state.rounds), cluster_bound_tick=best.cluster_bound_tick,
                   baselines=baseline_makespans(fine, computed), lower_bound_tick=fine_bound,
                   decomposition=decomposition, phases=tuple(phases))
