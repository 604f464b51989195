r"""Cumulative formulation for identical devices without communication or memory (P|prec|Cmax), and the
relaxation bound it gives for any instance.

When every task lasts the same on every device and may run on all of them, no edge costs anything across devices
and memory can never bind, *which* device runs a task does not matter: a schedule is feasible iff its start times
respect the precedences and at no moment more than |D| tasks run.  The model keeps only start times and one
cumulative; devices are assigned afterwards (`assign_devices`).  Written once against
`formulations.model_api.ModelBuilder`; time is integer ticks.

Sets and data
    T, E ⊆ T×T          tasks and precedence edges (u, v);  P = |D| the capacity (number of devices)
    p[t]                duration of t (the same on every device)
    r[t], q[t]          optional release and delivery times (0 when not given): s[t] >= r[t]; objective
                        max(e[t] + q[t])  (`planner.lns` windows of a larger plan)
    H                   horizon: the value of a known feasible schedule (the best list schedule)
    LB                  a proven lower bound (the trivial bound, or the caller's)
    head[t]             earliest start: max(r[t], max over (u, t) of head[u] + p[u])
    tail[t]             p[t] + max(q[t], max over (t, v) of tail[v]): C >= s[t] + tail[t]
    W_anc[t], W_desc[t] total duration of t's ancestors / descendants (transitive)

Variables
    s[t] ∈ [max(head[t], ⌈W_anc[t] / P⌉), H - max(tail[t], p[t] + ⌈W_desc[t] / P⌉)]    start;  e[t] = s[t] + p[t]
    C ∈ [LB, H]         makespan (with delivery times: max(e[t] + q[t]))

Objective
    minimise C

Constraint families (name: what, built by)
    1. prec[i,j]:  s[j] >= s[i] + p[i]                                                `_precedence`
    2. cap:        cumulative over the intervals (s[t], p[t]) with p[t] > 0, demand 1, capacity P   `_capacity`
    3. mk[t]:      C >= s[t] + tail[t] for every task (a sink's tail is p[t] + q[t]: the objective; the others
                   are implied by families 1 and the sinks' rows, and let the bound propagate in one step)  `_makespan`
    4. energy:     P·C >= Σ_t p[t] (implied by family 2; a linear row for the LP relaxation)   `_makespan`
    5. twin[a,b]:  s[a] <= s[b] for tasks a < b with the same duration, release, delivery, predecessors and
                   successors (symmetry breaking: swapping the start times of two twins maps a schedule to one of
                   equal makespan, so sorting every twin group's start times keeps an optimum)   `_twins`

The domain bounds from W_anc and W_desc are energy arguments: all of t's ancestors end before s[t] and start at
or after 0, at most P at a time, so s[t] >= ⌈W_anc[t] / P⌉; likewise every descendant starts at or after e[t] and
ends by C, so C >= e[t] + ⌈W_desc[t] / P⌉.  (Only for instances of at most `SolvePolicy.energy_bound_max_tasks`
tasks: the ancestor sets take n² bytes.)

Device assignment (`assign_devices`): take the tasks by (start, end) and put each on a device that is free at its
start (its last task ended at or before).  One always exists for a task of positive duration: the tasks on the
devices' last places that still run at s[t] all contain the instant s[t], and with t at most P tasks of positive
length contain it (family 2), so at most P - 1 devices are busy.  Zero-length tasks occupy no time (the
validator's rule) and go on any device.

Which instances qualify (`cumulative_applies`): every task eligible on every device with one duration, every
edge's delay zero over every link class, `memory_never_binds` (holding everything at once fits each device), a
makespan-only objective and a backend with an exact cumulative (CP-SAT).  A MILP backend's `cumulative` is the
safe bound "all intervals at once" (P >= |T|), useless here, so those backends keep the general placement model.

`relaxed_bound_tick` solves the same model on a relaxation of any instance (see its docstring) for a lower bound.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from formulations.backends import Backend, get_backend
from formulations.driver import Formulation, Solved, solve_formulation
from formulations.model_api import (
    DEFAULT_SOLVE_POLICY,
    ModelBuilder,
    ProgressCallback,
    SolvePolicy,
    SolveResult,
    Var,
    cname,
    interval,
)
from formulations.placement import MAKESPAN, Objective
from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.errors import InfeasibleError, OpplanError
from planner.heuristics.horizon import TimedAssignment, critical_path_schedule
from planner.heuristics.list_schedule import Rank, heft
from planner.heuristics.memory import memory_never_binds


# ------------------------------------------------------------------------------------------------ the problem
@dataclass(frozen=True)
class CumulativeProblem:
    """P|prec|Cmax data: one duration per task, zero-delay edges, `capacity` identical devices; optional release
    and delivery times per task (None: all zero)."""

    name: str
    duration_tick: tuple[int, ...]
    edges: tuple[tuple[int, int], ...]
    capacity: int
    release_tick: tuple[int, ...] | None = None
    tail_tick: tuple[int, ...] | None = None

    @property
    def num_tasks(self) -> int:
        return len(self.duration_tick)

    def topological_order(self) -> list[int]:
        succ = self.successors()
        indeg = [0] * self.num_tasks
        for _, v in self.edges:
            indeg[v] += 1
        order = [t for t in range(self.num_tasks) if indeg[t] == 0]
        for t in order:  # the list grows while it is walked (Kahn's algorithm)
            for v in succ[t]:
                indeg[v] -= 1
                if indeg[v] == 0:
                    order.append(v)
        if len(order) != self.num_tasks:
            raise ValueError(f"instance {self.name!r} is not acyclic")
        return order

    def successors(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.num_tasks)]
        for u, v in self.edges:
            out[u].append(v)
        return out

    def predecessors(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.num_tasks)]
        for u, v in self.edges:
            out[v].append(u)
        return out


def problem_of(instance: SchedulingInstance, *, release_tick: Sequence[int] | None = None,
               tail_tick: Sequence[int] | None = None) -> CumulativeProblem:
    """The relaxation of `instance` (`relaxed_bound_tick`): each task at its fastest eligible duration, no delays,
    no memory, capacity |D|.  Exactly `instance` itself when `cumulative_applies`."""
    if instance.num_tasks and instance.num_devices == 0:
        raise InfeasibleError(f"instance {instance.name!r} has tasks but no devices", fix="give it a device")
    fastest = instance.min_duration_tick()
    if instance.num_tasks and int(fastest.max()) >= INELIGIBLE:
        t = int(np.argmax(fastest))
        raise InfeasibleError(f"task {instance.task_names[t]!r} may run on no device (pinned or excluded "
                              f"everywhere)", fix="remove a pin or an exclusion")
    return CumulativeProblem(instance.name, tuple(int(x) for x in fastest), tuple(instance.edges),
                             instance.num_devices,
                             None if release_tick is None else tuple(int(x) for x in release_tick),
                             None if tail_tick is None else tuple(int(x) for x in tail_tick))


def cumulative_applies(instance: SchedulingInstance, backend: Backend, objective: Objective = MAKESPAN) -> bool:
    """True when `solve_placement` may solve `instance` with this model (module docstring, "Which instances")."""
    if not backend.exact_cumulative or not objective.makespan_only or instance.num_devices == 0:
        return False
    dur = instance.duration_tick
    if (dur >= INELIGIBLE).any() or not (dur == dur[:, :1]).all():
        return False
    if instance.edges and int(instance.comm_tick.max()) != 0:
        return False
    return memory_never_binds(instance)


# ------------------------------------------------------------------------------------------------ the model
@dataclass(frozen=True)
class CumulativeModel:
    """The variables of one built model (for hints and read-back)."""

    builder: ModelBuilder
    start: list[Var]
    makespan: Var


def _heads_tails(problem: CumulativeProblem, order: list[int]) -> tuple[list[int], list[int]]:
    p = problem.duration_tick
    release = problem.release_tick or (0,) * problem.num_tasks
    delivery = problem.tail_tick or (0,) * problem.num_tasks
    pred, succ = problem.predecessors(), problem.successors()
    head = [0] * problem.num_tasks
    for t in order:
        head[t] = max([release[t]] + [head[u] + p[u] for u in pred[t]])
    tail = [0] * problem.num_tasks
    for t in reversed(order):
        tail[t] = p[t] + max([delivery[t]] + [tail[v] for v in succ[t]])
    return head, tail


def _energy(problem: CumulativeProblem, order: list[int], max_tasks: int) -> tuple[np.ndarray, np.ndarray]:
    """Per task, the total duration of its ancestors and of its descendants (zeros above `max_tasks` tasks)."""
    n = problem.num_tasks
    if n > max_tasks:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    p = np.asarray(problem.duration_tick, dtype=np.int64)
    pred, succ = problem.predecessors(), problem.successors()
    anc = np.zeros((n, n), dtype=bool)
    for t in order:
        for u in pred[t]:
            anc[t] |= anc[u]
            anc[t, u] = True
    desc = np.zeros((n, n), dtype=bool)
    for t in reversed(order):
        for v in succ[t]:
            desc[t] |= desc[v]
            desc[t, v] = True
    # row by row: a boolean matrix times a vector would first copy the matrix as integers (8 n² bytes)
    return (np.array([int(p[row].sum()) for row in anc], dtype=np.int64),
            np.array([int(p[row].sum()) for row in desc], dtype=np.int64))


def twin_groups(problem: CumulativeProblem) -> list[list[int]]:
    """Groups (two or more, each in index order) of tasks with the same duration, release, delivery,
    predecessors and successors: swapping two of them maps the problem onto itself."""
    pred, succ = problem.predecessors(), problem.successors()
    release = problem.release_tick or (0,) * problem.num_tasks
    delivery = problem.tail_tick or (0,) * problem.num_tasks
    groups: dict[tuple, list[int]] = defaultdict(list)
    for t in range(problem.num_tasks):
        key = (problem.duration_tick[t], release[t], delivery[t], frozenset(pred[t]), frozenset(succ[t]))
        groups[key].append(t)
    return [g for g in groups.values() if len(g) > 1]


def build_cumulative_model(problem: CumulativeProblem, builder: ModelBuilder, *, horizon: int,
                           lower_bound: int = 0, policy: SolvePolicy = DEFAULT_SOLVE_POLICY) -> CumulativeModel:
    """Create the variables, the numbered constraint families and the objective (module docstring); `policy`: up to
    what size the energy bounds are built."""
    n, cap = problem.num_tasks, problem.capacity
    p = problem.duration_tick
    order = problem.topological_order()
    head, tail = _heads_tails(problem, order)
    w_anc, w_desc = _energy(problem, order, policy.energy_bound_max_tasks)
    lower_bound = max(int(lower_bound), max(tail, default=0), -(-sum(p) // cap))
    horizon = max(int(horizon), lower_bound)
    start = []
    for t in range(n):
        lo = max(head[t], -(-int(w_anc[t]) // cap))
        hi = horizon - max(tail[t], p[t] + -(-int(w_desc[t]) // cap))
        start.append(builder.int_var(lo, max(lo, hi), f"s[{t}]"))
    makespan = builder.int_var(lower_bound, horizon, "C")
    model = CumulativeModel(builder, start, makespan)
    _precedence(problem, builder, model)
    _capacity(problem, builder, model)
    _makespan(problem, builder, model, tail)
    _twins(problem, builder, model)
    builder.minimize(makespan)
    return model


def _precedence(problem: CumulativeProblem, builder: ModelBuilder, model: CumulativeModel) -> None:
    s, p = model.start, problem.duration_tick
    for u, v in problem.edges:
        builder.add(s[v] >= s[u] + p[u], cname("prec", i=u, j=v))


def _capacity(problem: CumulativeProblem, builder: ModelBuilder, model: CumulativeModel) -> None:
    s, p = model.start, problem.duration_tick
    ivs = [interval(s[t], p[t], s[t] + p[t], None, f"run[{t}]") for t in range(problem.num_tasks) if p[t] > 0]
    builder.cumulative(ivs, [1] * len(ivs), problem.capacity, "cap")


def _makespan(problem: CumulativeProblem, builder: ModelBuilder, model: CumulativeModel, tail: list[int]) -> None:
    s, c = model.start, model.makespan
    for t in range(problem.num_tasks):
        builder.add(c >= s[t] + tail[t], cname("mk", t=t))
    builder.add(problem.capacity * c >= sum(problem.duration_tick), "energy")


def _twins(problem: CumulativeProblem, builder: ModelBuilder, model: CumulativeModel) -> None:
    s = model.start
    for group in twin_groups(problem):
        for a, b in zip(group, group[1:]):
            builder.add(s[a] <= s[b], cname("twin", a=a, b=b))


def sort_twins(problem: CumulativeProblem, start: Sequence[int]) -> list[int]:
    """`start` with every twin group's start times sorted into index order (family 5); still feasible."""
    out = list(start)
    for group in twin_groups(problem):
        for t, st in zip(group, sorted(out[t] for t in group)):
            out[t] = st
    return out


# ------------------------------------------------------------------------------------------------ devices
def assign_devices(duration_tick: Sequence[int], start: Sequence[int], num_devices: int) -> list[int]:
    """A device per task such that no two tasks of positive duration overlap on one device (module docstring,
    "Device assignment"); ValueError when more than `num_devices` tasks run at some moment."""
    free = [0] * num_devices  # the end of each device's last task
    device = [0] * len(start)
    for t in sorted(range(len(start)), key=lambda t: (start[t], start[t] + duration_tick[t], t)):
        if duration_tick[t] == 0:
            continue  # occupies no time: device 0 is as good as any
        d = min(range(num_devices), key=lambda k: (free[k] > start[t], k))
        if free[d] > start[t]:
            raise ValueError(f"more than {num_devices} tasks run at tick {start[t]}")
        device[t], free[d] = d, start[t] + duration_tick[t]
    return device


def _timed(problem: CumulativeProblem, start: Sequence[int]) -> TimedAssignment:
    p = problem.duration_tick
    device = assign_devices(p, start, problem.capacity)
    return TimedAssignment(tuple(device), tuple(int(x) for x in start), tuple(int(s) + p[t] for t, s in
                                                                              enumerate(start)))


def problems_of(problem: CumulativeProblem, sched: TimedAssignment, *, limit: int = 5) -> list[str]:
    """What is wrong with a schedule of `problem` (empty when valid): durations, releases, precedences, overlaps."""
    out: list[str] = []
    p = problem.duration_tick
    release = problem.release_tick or (0,) * problem.num_tasks
    for t in range(problem.num_tasks):
        if sched.end[t] - sched.start[t] != p[t] or sched.start[t] < max(0, release[t]):
            out.append(f"task {t} runs [{sched.start[t]}, {sched.end[t]}), duration {p[t]}, release {release[t]}")
        if not 0 <= sched.device[t] < problem.capacity:
            out.append(f"task {t} on device {sched.device[t]} of {problem.capacity}")
    for u, v in problem.edges:
        if sched.start[v] < sched.end[u]:
            out.append(f"task {v} starts at {sched.start[v]} before task {u} ends at {sched.end[u]}")
    runs: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for t in range(problem.num_tasks):
        if p[t] > 0:
            runs[sched.device[t]].append((sched.start[t], sched.end[t]))
    for d, rs in runs.items():
        rs.sort()
        out.extend(f"two tasks overlap on device {d} at tick {b[0]}" for a, b in zip(rs, rs[1:]) if b[0] < a[1])
    return out[:limit]


# ------------------------------------------------------------------------------------------------ the driver's view
class CumulativeFormulation(Formulation[CumulativeModel, TimedAssignment]):
    """The cumulative model as the driver sees it: start times in, devices assigned on read-back."""

    name = "cumulative"
    solution_noun = "plan"
    uses_cumulative = True

    def __init__(self, problem: CumulativeProblem, *, horizon: int, lower_bound: int = 0,
                 policy: SolvePolicy = DEFAULT_SOLVE_POLICY) -> None:
        self.problem, self.horizon, self.lower_bound, self.policy = problem, horizon, lower_bound, policy
        self.subject = problem.name

    def build(self, builder: ModelBuilder) -> CumulativeModel:
        return build_cumulative_model(self.problem, builder, horizon=self.horizon, lower_bound=self.lower_bound,
                                      policy=self.policy)

    def hint(self, model: CumulativeModel, solution: TimedAssignment) -> None:
        start = sort_twins(self.problem, solution.start)
        for var, value in [*zip(model.start, start), (model.makespan, self.value_tick(solution))]:
            model.builder.hint(var, min(max(int(value), var.lb), var.ub))

    def read(self, model: CumulativeModel, result: SolveResult) -> TimedAssignment:
        start = [result.int_value(s) for s in model.start]
        try:
            sched = _timed(self.problem, start)
        except ValueError as exc:
            raise RuntimeError(f"{result.solver_name}: cumulative solution of {self.subject!r}: {exc}") from None
        problems = problems_of(self.problem, sched)
        if problems:
            raise RuntimeError(f"{result.solver_name} returned an invalid plan for {self.subject!r}: "
                               + "; ".join(problems))
        return sched

    def value_tick(self, solution: TimedAssignment) -> int:
        if self.problem.tail_tick is None:
            return solution.makespan_tick
        return max((e + q for e, q in zip(solution.end, self.problem.tail_tick, strict=True)), default=0)

    def explain_infeasible(self, backend: Backend) -> str:
        return (f"the cumulative model of {self.subject!r} is infeasible within its horizon {self.horizon} "
                f"(a known schedule should fit it: a bug)")


# ------------------------------------------------------------------------------------------------ solving
def _best(problem: CumulativeProblem, formulation: CumulativeFormulation,
          candidates: Sequence[TimedAssignment | None]) -> TimedAssignment | None:
    valid = [c for c in candidates if c is not None and not problems_of(problem, c, limit=1)]
    return min(valid, key=formulation.value_tick) if valid else None


def list_schedules(instance: SchedulingInstance) -> list[TimedAssignment]:
    """The list schedules tried as warm starts on a qualifying instance: the critical-path schedule and HEFT with
    insertion by upward rank and by upward + downward rank (on identical devices without delays the upward rank
    is the bottom level)."""
    out = [critical_path_schedule(instance)]
    for rank in (Rank.UPWARD, Rank.SUM):
        plan = heft(instance, rank=rank, respect_memory=False)
        by = plan.by_task()
        rows = [by[name] for name in instance.task_names]
        out.append(TimedAssignment(tuple(r.device for r in rows), tuple(r.start_tick for r in rows),
                                   tuple(r.end_tick for r in rows)))
    return out


def solve_cumulative(
    instance: SchedulingInstance,
    *,
    backend: str | Backend = "cpsat",
    time_limit_s: float = 60.0,
    rel_gap: float = 0.0,
    threads: int = 8,
    seed: int = 0,
    deterministic: bool = True,
    progress: ProgressCallback | None = None,
    known: Sequence[TimedAssignment] = (),
    release_tick: Sequence[int] | None = None,
    tail_tick: Sequence[int] | None = None,
    started_s: float | None = None,
    policy: SolvePolicy = DEFAULT_SOLVE_POLICY,
) -> Solved[TimedAssignment]:
    """Solve a qualifying instance (`cumulative_applies`) with the cumulative model on the driver
    (`formulations.driver.solve_formulation` states the result's meaning).  `known`: schedules of `instance`
    (valid or not; the valid ones compete with the list schedules for the warm start and the horizon)."""
    t0 = time.monotonic() if started_s is None else started_s
    problem = problem_of(instance, release_tick=release_tick, tail_tick=tail_tick)
    trivial = instance.trivial_lower_bound_tick()
    listed = list_schedules(instance) if release_tick is None else []
    probe = CumulativeFormulation(problem, horizon=0)
    best = _best(problem, probe, [*known, *listed])
    if best is None:  # no valid known schedule (release times): the serial schedule always is one
        best = _serial(problem)
    formulation = CumulativeFormulation(problem, horizon=probe.value_tick(best), lower_bound=trivial, policy=policy)
    return solve_formulation(formulation, backend=backend, time_limit_s=time_limit_s, rel_gap=rel_gap,
                             threads=threads, seed=seed, deterministic=deterministic, progress=progress,
                             known=best, lower_bound_tick=trivial, started_s=t0, policy=policy)


def _serial(problem: CumulativeProblem) -> TimedAssignment:
    """Every task one after another in topological order on device 0, each at or after its release."""
    p = problem.duration_tick
    release = problem.release_tick or (0,) * problem.num_tasks
    start = [0] * problem.num_tasks
    now = 0
    for t in problem.topological_order():
        start[t] = max(now, release[t])
        now = start[t] + p[t]
    return TimedAssignment((0,) * problem.num_tasks, tuple(start), tuple(s + p[t] for t, s in enumerate(start)))


def relaxed_bound_tick(
    instance: SchedulingInstance,
    time_limit_s: float,
    *,
    backend: str | Backend = "cpsat",
    threads: int = 8,
    seed: int = 0,
    deterministic: bool = True,
    release_tick: Sequence[int] | None = None,
    tail_tick: Sequence[int] | None = None,
    policy: SolvePolicy = DEFAULT_SOLVE_POLICY,
) -> int:
    """A proven lower bound on the makespan of every valid plan of any `instance` (with `tail_tick`: on
    max(end + delivery); with `release_tick`: no task starts before its release), at least
    `instance.trivial_lower_bound_tick()`, from the cumulative model of the relaxation (`problem_of`): each task
    at its fastest eligible duration, every delay 0, memory dropped, at most |D| tasks at once.

    Soundness: take any valid plan of `instance` and keep every start time.  Shortening a task to its fastest
    duration only ends it earlier, so each edge (u, v) still has s[v] >= e[u] + delay >= s[u] + p_min[u];
    releases still hold; a device runs one task at a time, so at most |D| tasks of positive length run at any
    moment; memory is not part of the relaxation.  So the plan's start times are a schedule of the relaxation
    whose objective is at most the plan's (every end moved earlier or stayed), and any lower bound on the
    relaxation's optimum (the solver's proven bound, rounded up by the driver's one rule) bounds the plan.  The
    trivial bound is added because the relaxation's own work bound uses |D| where the instance's divides by the
    devices' total relative speed (<= |D|), which can be larger.

    Needs a backend whose `cumulative` is exact (CP-SAT): `OpplanError` otherwise.  Within `time_limit_s` the
    solver may not prove the relaxation's optimum; the bound is then what it proved by the limit."""
    t0 = time.monotonic()
    be = get_backend(backend) if isinstance(backend, str) else backend
    if not be.exact_cumulative:
        raise OpplanError(f"the relaxation bound needs an exact cumulative constraint, which the {be.name} backend "
                          f"does not have", fix="use the cpsat backend")
    trivial = instance.trivial_lower_bound_tick()
    if instance.num_tasks == 0:
        return 0
    problem = problem_of(instance, release_tick=release_tick, tail_tick=tail_tick)
    relaxed = SchedulingInstance.uniform(instance.name, problem.duration_tick, [(u, v, 0) for u, v in problem.edges],
                                         max(1, problem.capacity))
    probe = CumulativeFormulation(problem, horizon=0)
    known = _best(problem, probe, [critical_path_schedule(relaxed) if release_tick is None else None]) \
        or _serial(problem)
    formulation = CumulativeFormulation(problem, horizon=probe.value_tick(known), lower_bound=0, policy=policy)
    solved = solve_formulation(formulation, backend=be, time_limit_s=time_limit_s, threads=threads, seed=seed,
                               deterministic=deterministic, known=known, started_s=t0, policy=policy)
    return max(trivial, solved.lower_bound_tick)
