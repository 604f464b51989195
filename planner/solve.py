"""The planner: prove how good a plan can be, then search for it.

The input is an op-level SchedulingInstance (the "fine" one; `planner.prepare` makes it from a model file).

    phase 1, decomposition (`planner.decompose`): cut the op graph at its bottlenecks (ops that every other op
               precedes or follows: a layer's residual add, a module's concat); solve each segment's placement
               model at op level (CP-SAT, time shared by size, identical segments once; segments HEFT solves to
               their trivial bound need no solver).  The segment optima add up to a lower bound for the whole
               op graph (usually far above max(critical path, work / speed), since it counts the transfers forks
               and joins cannot avoid), and the segment schedules join into an op plan.  The best of that plan and
               HEFT on the op graph is the incumbent.  When it meets the bound it is optimal and we stop.
    phase 2, the bi-level loop, with the time left:
    round 0:   coarsen (linear clustering + merging) -> cluster instance -> warm start (HEFT on clusters, or the
               incumbent projected onto the clusters) -> placement model (CP-SAT by default) -> cluster plan
    round k:   refine (`planner.coarsen.refine`): split the clusters on the plan's critical path in two
               (contiguous halves of their member order, which keeps the cluster graph acyclic), merge pairs of
               clusters that run back to back on one device off the critical path (only when the cluster graph
               stays acyclic), so the model keeps its size; the previous plan, replayed on the new clusters, is
               the warm start; re-solve.
    stop:      when the time budget is spent, a round brings no improvement, or `max_rounds` is reached.

Every round's cluster plan is expanded to ops (members back to back inside their cluster's interval, so the
makespan is the same) and checked on the fine instance by the validator; the shortest plan wins, the phase-1
incumbent included.  When that is an op plan (phase 1 won), it is returned over one-op clusters, so `Outcome.plan`
is always a plan of `Outcome.coarse` whose `task_ops` lead back to the ops.

The reported lower bound is for the real (op-level) problem: the decomposition bound, never below
max(critical path, total work / total speed) of the fine instance.  The solver's bound on the clusters is
reported apart (`cluster_bound_tick`), since a coarser problem's optimum is no bound for the finer one (with
one-op clusters the two coincide).  Time is integer ticks throughout; with `deterministic` CP-SAT (the default of
`solve_placement`) and a budget the solver does not hit, results are the same from run to run.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from formulations.backends import get_backend
from formulations.solve_instance import solve_placement
from planner.coarsen import coarsen, contract, expand_plan
from planner.coarsen.refine import as_singletons, project_plan, refine, replay, split_to_target
from planner.cost.instance import SchedulingInstance
from planner.decompose import Decomposition, decompose_and_solve
from planner.errors import InfeasibleError
from planner.heuristics.baselines import round_robin, single_device
from planner.heuristics.list_schedule import heft
from planner.schedule.plan import Plan
from planner.schedule.validate import validate_plan

ProgressFn = Callable[[str], None]


class Method(enum.Enum):
    """How to plan: the bi-level MILP, or one of the list-scheduling baselines on the op graph."""

    MILP = "milp"
    HEFT = "heft"
    ROUND_ROBIN = "round_robin"
    SINGLE_DEVICE = "single_device"


@dataclass(frozen=True)
class SolveOptions:
    method: Method = Method.MILP
    backend: str = "cpsat"
    time_limit_s: float = 60.0
    rel_gap: float = 0.0
    threads: int = 8
    seed: int = 0
    target_clusters: int | None = None  # None: DEFAULT_CLUSTERS[backend]
    max_rounds: int = 4
    decomposition_share: float = 0.5  # most of the budget phase 1 (decomposition) may use; 0 skips it


# CP-SAT handles a hundred-odd clusters on 8 devices comfortably; big-M MILPs stall far earlier (see README).
DEFAULT_CLUSTERS = {"cpsat": 96, "scip": 24, "cbc": 16, "highs": 16}
FIRST_ROUND_SHARE = 0.5


@dataclass(frozen=True)
class ClusterSolution:
    """One candidate answer of the search: a plan over clusters, its expansion to ops (same makespan), the cluster
    instance and the clusters (member lists over the op-level instance), and the solver's bound on those clusters
    (for the phase-1 incumbent over one-op clusters: the op-level bound)."""

    plan: Plan
    op_plan: Plan
    coarse: SchedulingInstance
    clusters: list[list[int]]
    cluster_bound_tick: int


@dataclass(frozen=True)
class RoundLog:
    round: int
    clusters: int
    makespan_tick: int
    cluster_bound_tick: int
    status: str
    seconds: float


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

    def saved_plan(self) -> Plan:
        """The cluster plan (with its map back to ops), or, when no op was grouped with another, the op plan itself
        (task ids are the ops' own names) with the solver's bound, which is then a bound for the op graph too."""
        if not all(len(c) == 1 for c in self.clusters):
            return self.plan
        op = self.op_plan
        bound = max(op.lower_bound_tick, min(self.cluster_bound_tick, op.makespan_tick))
        status = "optimal" if bound >= op.makespan_tick else op.status
        return dataclasses.replace(op, lower_bound_tick=bound, status=status, task_ops={},
                                   instance_name=self.fine.name)


def _baseline(fine: SchedulingInstance, method: Method) -> Plan:
    if method is Method.HEFT:
        return heft(fine)
    if method is Method.ROUND_ROBIN:
        return round_robin(fine)
    return single_device(fine)


def baseline_makespans(fine: SchedulingInstance) -> dict[str, int]:
    """Makespan (ticks) of each list-scheduling baseline on the op graph; infeasible ones are left out."""
    out = {}
    for method in (Method.HEFT, Method.ROUND_ROBIN, Method.SINGLE_DEVICE):
        try:
            out[method.value] = _baseline(fine, method).makespan_tick
        except InfeasibleError:
            pass
    return out


def plan_instance(fine: SchedulingInstance, options: SolveOptions = SolveOptions(),
                  progress: ProgressFn | None = None) -> Outcome:
    """Plan an op-level instance with the chosen method (see module docstring); the result is validated."""
    say = progress or (lambda _msg: None)
    t0 = time.monotonic()
    if options.method is not Method.MILP:
        plan = _baseline(fine, options.method)
        validate_plan(fine, plan)
        singletons = tuple((i,) for i in range(fine.num_tasks))
        return Outcome(plan=plan, op_plan=plan, fine=fine, coarse=fine, clusters=singletons,
                       baselines=baseline_makespans(fine))
    fine_bound = fine.trivial_lower_bound_tick()
    incumbent = heft(fine)  # the op-level incumbent: HEFT, or the stitched decomposition plan when shorter
    decomposition = None
    if options.decomposition_share > 0 and fine.num_tasks > 1:
        decomposition = decompose_and_solve(fine, time_limit_s=options.decomposition_share * options.time_limit_s,
                                            backend=options.backend, threads=options.threads, seed=options.seed,
                                            progress=say)
        fine_bound = max(fine_bound, min(decomposition.bound_tick, incumbent.makespan_tick))
        if decomposition.plan is not None and decomposition.plan.makespan_tick < incumbent.makespan_tick:
            incumbent = decomposition.plan
        say(f"decomposition: {len(decomposition.segments)} segments ({decomposition.solved} by the solver), "
            f"op-level bound {fine_bound}, stitched plan "
            f"{decomposition.plan.makespan_tick if decomposition.plan is not None else 'none'}, HEFT "
            f"{incumbent.makespan_tick if incumbent.method == 'heft' else '(worse)'}; {decomposition.seconds:.1f}s")
    best: ClusterSolution | None = None
    rounds: list[RoundLog] = []
    if incumbent.makespan_tick > fine_bound:
        best, rounds = _bilevel(fine, incumbent, options, t0, say)
    else:
        say(f"the incumbent ({incumbent.method}, {incumbent.makespan_tick} ticks) meets the lower bound: optimal")
    if best is None or incumbent.makespan_tick < best.op_plan.makespan_tick:
        coarse, clusters, plan = as_singletons(fine, incumbent)
        best = ClusterSolution(plan, incumbent, coarse, clusters, fine_bound)
    plan, op_plan, coarse, clusters = best.plan, best.op_plan, best.coarse, best.clusters
    fine_bound = min(fine_bound, op_plan.makespan_tick)
    status = "optimal" if op_plan.makespan_tick <= fine_bound else "feasible"
    elapsed = time.monotonic() - t0
    solver = {}
    if not plan.solver and (rounds or (decomposition is not None and decomposition.solved)):
        backend = get_backend(options.backend)  # it proved the bound (and maybe found nothing better than HEFT)
        solver = {"solver": backend.name, "solver_version": backend.version}
    final = dataclasses.replace(plan, method="milp", status=status, lower_bound_tick=fine_bound,
                                solve_time_s=elapsed, task_ops=dict(coarse.task_ops), **solver)
    op_plan = dataclasses.replace(op_plan, method="milp", status=status, lower_bound_tick=fine_bound,
                                  solve_time_s=elapsed, **solver)
    validate_plan(coarse, final)
    validate_plan(fine, op_plan)
    return Outcome(plan=final, op_plan=op_plan, fine=fine, coarse=coarse, clusters=tuple(map(tuple, clusters)),
                   rounds=tuple(rounds), cluster_bound_tick=best.cluster_bound_tick,
                   baselines=baseline_makespans(fine), lower_bound_tick=fine_bound, decomposition=decomposition)


def _bilevel(fine: SchedulingInstance, incumbent: Plan, options: SolveOptions, t0: float, say: ProgressFn
             ) -> tuple[ClusterSolution | None, list[RoundLog]]:
    """Phase 2 (module docstring): the best round's solution (None when no round ran) and the rounds."""
    target = options.target_clusters or DEFAULT_CLUSTERS.get(options.backend, 32)
    result = coarsen(fine, target_clusters=target)
    clusters = split_to_target(fine, result.clusters, target)
    coarse = contract(fine, clusters)
    say(f"coarsened {fine.num_tasks} ops into {coarse.num_tasks} clusters "
        f"({result.num_linear_clusters} linear clusters; critical path estimate "
        f"{result.critical_path_before_tick:.0f} -> {result.critical_path_after_tick:.0f} ticks)")
    warm = heft(coarse)
    try:
        projected = project_plan(incumbent, coarse, clusters, fine)
        if projected.makespan_tick < warm.makespan_tick:
            warm = projected
    except Exception as exc:  # noqa: BLE001 - a warm start is optional; memory may forbid the projection
        say(f"(no warm start from the op-level incumbent: {exc})")
    best: ClusterSolution | None = None
    rounds: list[RoundLog] = []
    for rnd in range(options.max_rounds):
        elapsed = time.monotonic() - t0
        remaining = options.time_limit_s - elapsed
        if remaining <= 0.5:  # the caller falls back on the incumbent
            break
        share = remaining * FIRST_ROUND_SHARE if rnd == 0 and options.max_rounds > 1 else remaining / max(
            1, options.max_rounds - rnd)
        r0 = time.monotonic()

        def report(elapsed_s, incumbent, bound, gap, _rnd=rnd):
            if incumbent is not None:
                say(f"round {_rnd}: {elapsed_s:6.1f}s incumbent {incumbent:.0f} bound "
                    f"{(bound if bound is not None else float('nan')):.0f} gap {100 * (gap or 0):.1f}%")

        plan = solve_placement(coarse, backend=options.backend, time_limit_s=max(0.5, share), rel_gap=options.rel_gap,
                               threads=options.threads, seed=options.seed, warm_start=warm, progress=report)
        op_plan = expand_plan(fine, coarse, clusters, plan)  # members back to back: the same makespan
        rounds.append(RoundLog(rnd, coarse.num_tasks, op_plan.makespan_tick, plan.lower_bound_tick, plan.status,
                               time.monotonic() - r0))
        say(f"round {rnd}: {coarse.num_tasks} clusters, makespan {op_plan.makespan_tick} ticks "
            f"({plan.status} on clusters, cluster bound {plan.lower_bound_tick})")
        improved = best is None or op_plan.makespan_tick < best.op_plan.makespan_tick
        if improved:
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
