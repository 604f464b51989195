"""The planner: prove how good a plan can be, then search for it.

    prepare:   model file -> OpGraph -> fold constants, drop dead code -> op-level SchedulingInstance (the "fine" one)
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
    round k:   refine: split the clusters on the plan's critical path in two (contiguous halves of their member
               order, which keeps the cluster graph acyclic), merge pairs of clusters that run back to back on one
               device off the critical path (only when the cluster graph stays acyclic), so the model keeps its
               size; the previous plan, replayed on the new clusters, is the warm start; re-solve.
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from planner.coarsen import coarsen, contract, quotient_is_acyclic
from planner.coarsen.expand import expand_plan
from planner.decompose import Decomposition, decompose_and_solve
from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.cost.model import build_instance
from planner.errors import InputError
from planner.heuristics.baselines import round_robin, single_device
from planner.heuristics.list_schedule import heft
from planner.ir.graph import OpGraph
from planner.ir.topology import Topology
from planner.passes.dce import eliminate_dead_code
from planner.passes.fold import fold_constants
from planner.schedule.plan import Plan
from planner.schedule.simulate import plan_orders, simulate
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
class Prepared:
    """A model ready to plan: the graph after passes, the hardware, and the op-level instance."""

    graph: OpGraph
    topology: Topology
    instance: SchedulingInstance
    ops_before_passes: int


def apply_placement_rules(instance: SchedulingInstance, pins: Mapping[str, str], forbids: Mapping[str, str]
                          ) -> SchedulingInstance:
    """Restrict devices by op-name pattern (fnmatch): `pins[pattern] = device name` allows only that device,
    `forbids[pattern] = device name` excludes it.  A pattern that matches no op, or a device that does not exist,
    is an InputError; so is an op left with no device."""
    import fnmatch

    if not pins and not forbids:
        return instance
    duration = instance.duration_tick.copy()
    devices = {name: i for i, name in enumerate(instance.device_names)}
    for kind, rules in (("pin", pins), ("forbid", forbids)):
        for pattern, dev in rules.items():
            if dev not in devices:
                raise InputError(f"--{kind} {pattern}={dev}: no device named {dev!r}",
                                 fix=f"devices are {', '.join(instance.device_names[:4])}...")
            hits = [i for i, name in enumerate(instance.task_names) if fnmatch.fnmatchcase(name, pattern)]
            if not hits:
                raise InputError(f"--{kind} {pattern}={dev}: the pattern matches no op")
            d = devices[dev]
            for i in hits:
                if kind == "pin":
                    keep = duration[i, d]
                    duration[i, :] = INELIGIBLE
                    duration[i, d] = keep
                else:
                    duration[i, d] = INELIGIBLE
    stuck = [instance.task_names[i] for i in range(instance.num_tasks) if (duration[i] >= INELIGIBLE).all()]
    if stuck:
        raise InputError(f"pins and forbids leave {len(stuck)} ops with no device, e.g. {stuck[:3]}")
    return dataclasses.replace(instance, duration_tick=duration)


def prepare(model_path: str | Path, topology: Topology, *, input_shapes=None, capacity_bytes: int | None = None,
            measured_s: Mapping[str, float] | None = None, pins: Mapping[str, str] | None = None,
            forbids: Mapping[str, str] | None = None) -> Prepared:
    """Load the model, run the passes (constant folding, dead code), cost it on the topology."""
    from planner.ir.load import load_model

    graph = load_model(model_path, input_shapes)
    before = graph.num_ops
    unknown = [name for name in (measured_s or {}) if name not in graph.index]
    if unknown:
        raise InputError(f"the measured profile names {len(unknown)} ops that {Path(model_path).name} does not "
                         f"have, e.g. {unknown[:3]}", fix="profile the same model file")
    graph = eliminate_dead_code(fold_constants(graph))
    # Folded and dead ops are gone from the plan; their measured times no longer matter.
    measured = {k: v for k, v in (measured_s or {}).items() if k in graph.index} if measured_s else None
    instance = build_instance(graph, topology, capacity_bytes=capacity_bytes, measured_s=measured)
    instance = apply_placement_rules(instance, pins or {}, forbids or {})
    return Prepared(graph, topology, instance, before)


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


def _critical_tasks(instance: SchedulingInstance, plan: Plan) -> set[int]:
    """The tasks of the chain that ends last: walk back from the last task through whatever made each start."""
    by_task = plan.by_task()
    index = instance.task_index
    device_prev: dict[int, int] = {}
    for order in plan_orders(instance, plan):
        for a, b in zip(order, order[1:]):
            device_prev[b] = a
    t = index[max(plan.placements, key=lambda p: p.end_tick).task]
    chain = {t}
    while True:
        p = by_task[instance.task_names[t]]
        blocker = None
        for s, e in instance.predecessors[t]:
            ps = by_task[instance.task_names[s]]
            if ps.end_tick + instance.comm(e, ps.device, p.device) == p.start_tick:
                blocker = s
                break
        if blocker is None and t in device_prev and by_task[instance.task_names[device_prev[t]]].end_tick == p.start_tick:
            blocker = device_prev[t]
        if blocker is None or blocker in chain:
            return chain
        chain.add(blocker)
        t = blocker


def _refine(fine: SchedulingInstance, coarse: SchedulingInstance, clusters: Sequence[Sequence[int]], plan: Plan,
            target: int) -> tuple[list[list[int]], list[int]] | None:
    """New clusters (and, per new cluster, the old cluster it came from) or None when nothing can be split."""
    critical = _critical_tasks(coarse, plan)
    split = [k for k in sorted(critical) if len(clusters[k]) > 1]
    if not split:
        return None
    new: list[list[int]] = []
    parent: list[int] = []
    for k, members in enumerate(clusters):
        if k in split:
            half = len(members) // 2
            new += [list(members[:half]), list(members[half:])]
            parent += [k, k]
        else:
            new.append(list(members))
            parent.append(k)
    # Above 1.5 x the target size, merge back pairs of clusters that run back to back on one device off the
    # critical path, smallest first, so the model does not grow round after round.  Merging can delay the first
    # of the pair (a cluster starts when all its inputs are there), so below that size we never merge.
    by_task = plan.by_task()
    budget = max(0, len(new) - int(1.5 * target))
    merged_into: dict[int, int] = {}
    candidates = []
    for order in plan_orders(coarse, plan):
        for a, b in zip(order, order[1:]):
            if a in critical or b in critical:
                continue
            size = int(coarse.duration_tick[a, by_task[coarse.task_names[a]].device]
                       + coarse.duration_tick[b, by_task[coarse.task_names[b]].device])
            candidates.append((size, a, b))
    position = {k: i for i, k in enumerate(parent) if parent.count(k) == 1}
    for _, a, b in sorted(candidates):
        if budget == 0:
            break
        if a in merged_into or b in merged_into or a not in position or b not in position:
            continue
        trial = [list(m) for m in new]
        trial[position[a]] = trial[position[a]] + trial[position[b]]
        trial[position[b]] = []
        trial_clean = [m for m in trial if m]
        if not quotient_is_acyclic(fine, trial_clean):
            continue
        new = trial
        merged_into[a] = merged_into[b] = a
        budget -= 1
    keep = [i for i, m in enumerate(new) if m]
    return [new[i] for i in keep], [parent[i] for i in keep]


def split_to_target(fine: SchedulingInstance, clusters: Sequence[Sequence[int]], target: int) -> list[list[int]]:
    """Halve the most expensive clusters until there are `target` of them (or none can be split).

    Linear clustering can leave fewer, longer clusters than the MILP can handle; a long cluster must wait for all
    its inputs before it starts, which hides overlap.  A contiguous half of a cluster's member order (a topological
    order) keeps the cluster graph acyclic: a cycle through the halves would have been a cycle through the whole.
    """
    import heapq

    cost = fine.min_duration_tick()
    heap = [(-int(cost[list(m)].sum()), k) for k, m in enumerate(clusters) if len(m) > 1]
    heapq.heapify(heap)
    out = [list(m) for m in clusters]
    while len(out) < target and heap:
        _, k = heapq.heappop(heap)
        members = out[k]
        half = len(members) // 2
        out[k], tail = members[:half], members[half:]
        out.append(tail)
        for j in (k, len(out) - 1):
            if len(out[j]) > 1:
                heapq.heappush(heap, (-int(cost[out[j]].sum()), j))
    return out


def project_plan(fine_plan: Plan, coarse: SchedulingInstance, clusters: Sequence[Sequence[int]],
                 fine: SchedulingInstance) -> Plan:
    """An op-level plan seen on clusters: each cluster on the device that ran most of its work, ordered by its
    earliest member's start, then simulated (a warm start for the cluster model)."""
    by_task = fine_plan.by_task()
    rows: list[list[tuple[int, int]]] = [[] for _ in range(coarse.num_devices)]
    for k, members in enumerate(clusters):
        work = np.zeros(coarse.num_devices)
        first = None
        for v in members:
            p = by_task[fine.task_names[v]]
            work[p.device] += p.end_tick - p.start_tick
            first = p.start_tick if first is None else min(first, p.start_tick)
        device = int(np.argmax(work))
        if not coarse.eligible(k, device):
            device = int(np.argmin(coarse.duration_tick[k]))
        rows[device].append((first or 0, k))
    orders = [[k for _, k in sorted(row)] for row in rows]
    return simulate(coarse, orders).to_plan(method="projected", lower_bound_tick=coarse.trivial_lower_bound_tick())


def _replay(coarse: SchedulingInstance, old: Plan, old_names: Sequence[str], parent: Sequence[int]) -> Plan:
    """The old plan on new clusters: each keeps its parent's device, ordered by the parent's start, then simulated."""
    by_task = old.by_task()
    rows: list[list[tuple[int, int, int]]] = [[] for _ in range(coarse.num_devices)]
    for k, p in enumerate(parent):
        placement = by_task[old_names[p]]
        rows[placement.device].append((placement.start_tick, k, k))
    orders = [[k for _, _, k in sorted(row)] for row in rows]
    return simulate(coarse, orders).to_plan(method="replay", lower_bound_tick=coarse.trivial_lower_bound_tick())


def _op_level(fine: SchedulingInstance, coarse: SchedulingInstance, clusters, plan: Plan) -> Plan:
    """A cluster plan as an op plan: members back to back inside their cluster's interval (same makespan)."""
    return expand_plan(fine, coarse, clusters, plan)


def _baseline(fine: SchedulingInstance, method: Method) -> Plan:
    if method is Method.HEFT:
        return heft(fine)
    if method is Method.ROUND_ROBIN:
        return round_robin(fine)
    return single_device(fine)


def baseline_makespans(fine: SchedulingInstance) -> dict[str, int]:
    """Makespan (ticks) of each list-scheduling baseline on the op graph; infeasible ones are left out."""
    from planner.errors import InfeasibleError

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
    from formulations.solve_instance import solve_placement

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
    best: tuple[Plan, Plan, SchedulingInstance, list[list[int]]] | None = None
    rounds: list[RoundLog] = []
    cluster_bound = 0
    if incumbent.makespan_tick > fine_bound:
        best, rounds, cluster_bound = _bilevel(fine, incumbent, options, t0, say, solve_placement)
    else:
        say(f"the incumbent ({incumbent.method}, {incumbent.makespan_tick} ticks) meets the lower bound: optimal")
    if best is None or incumbent.makespan_tick < best[1].makespan_tick:
        coarse, clusters, plan = _as_singletons(fine, incumbent)
        best = (plan, incumbent, coarse, clusters)
        cluster_bound = fine_bound
    plan, op_plan, coarse, clusters = best
    fine_bound = min(fine_bound, op_plan.makespan_tick)
    status = "optimal" if op_plan.makespan_tick <= fine_bound else "feasible"
    elapsed = time.monotonic() - t0
    solver = {}
    if not plan.solver and (rounds or (decomposition is not None and decomposition.solved)):
        from formulations.backends import get_backend

        backend = get_backend(options.backend)  # it proved the bound (and maybe found nothing better than HEFT)
        solver = {"solver": backend.name, "solver_version": backend.version}
    final = dataclasses.replace(plan, method="milp", status=status, lower_bound_tick=fine_bound,
                                solve_time_s=elapsed, task_ops=dict(coarse.task_ops), **solver)
    op_plan = dataclasses.replace(op_plan, method="milp", status=status, lower_bound_tick=fine_bound,
                                  solve_time_s=elapsed, **solver)
    validate_plan(coarse, final)
    validate_plan(fine, op_plan)
    return Outcome(plan=final, op_plan=op_plan, fine=fine, coarse=coarse, clusters=tuple(map(tuple, clusters)),
                   rounds=tuple(rounds), cluster_bound_tick=cluster_bound, baselines=baseline_makespans(fine),
                   lower_bound_tick=fine_bound, decomposition=decomposition)


def _as_singletons(fine: SchedulingInstance, op_plan: Plan) -> tuple[SchedulingInstance, list[list[int]], Plan]:
    """An op plan as a plan over one-op clusters (the cluster instance of the identity clustering)."""
    clusters = [[i] for i in range(fine.num_tasks)]
    coarse = contract(fine, clusters)
    by = op_plan.by_task()
    placements = tuple(dataclasses.replace(by[fine.task_names[k]], task=coarse.task_names[k])
                       for k in range(fine.num_tasks))
    plan = dataclasses.replace(op_plan, instance_name=coarse.name, placements=placements,
                               task_ops=dict(coarse.task_ops))
    return coarse, clusters, plan


def _bilevel(fine: SchedulingInstance, incumbent: Plan, options: SolveOptions, t0: float, say: ProgressFn,
             solve_placement) -> tuple[tuple[Plan, Plan, SchedulingInstance, list[list[int]]] | None,
                                       list[RoundLog], int]:
    """Phase 2 (module docstring): the best (cluster plan, op plan, cluster instance, clusters), the rounds, and the
    solver's bound on the winning round's clusters."""
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
    best: tuple[Plan, Plan, SchedulingInstance, list[list[int]]] | None = None
    rounds: list[RoundLog] = []
    cluster_bound = 0
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
        op_plan = _op_level(fine, coarse, clusters, plan)
        rounds.append(RoundLog(rnd, coarse.num_tasks, op_plan.makespan_tick, plan.lower_bound_tick, plan.status,
                               time.monotonic() - r0))
        say(f"round {rnd}: {coarse.num_tasks} clusters, makespan {op_plan.makespan_tick} ticks "
            f"({plan.status} on clusters, cluster bound {plan.lower_bound_tick})")
        improved = best is None or op_plan.makespan_tick < best[1].makespan_tick
        if improved:
            best = (plan, op_plan, coarse, clusters)
            cluster_bound = plan.lower_bound_tick
        elif rnd > 0:
            break
        refined = _refine(fine, coarse, clusters, plan, target)
        if refined is None:
            break
        new_clusters, parent = refined
        old_names = coarse.task_names
        coarse = contract(fine, new_clusters)
        clusters = new_clusters
        warm = _replay(coarse, plan, old_names, parent)
    return best, rounds, cluster_bound
