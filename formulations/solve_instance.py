"""`solve_placement`: build the placement-and-ordering formulation on a backend, solve it, return a `Plan`.

Steps: check what can be seen without a solver (a task without an eligible device, a task or the parameters that
cannot fit in memory: `InfeasibleError`); pick the horizon from the best *valid* known schedule (the warm start,
a simple list schedule) or else the serial bound (any optimal schedule without a moment where nothing runs and
nothing is in flight is at most sum(slowest durations) + sum(slowest transfers) long, and removing such a moment
never hurts memory); hint the best known schedule; solve; extract (booleans read as > 0.5) and check the plan.

The solve itself is `formulations.driver.solve_formulation` on `PlacementFormulation` (model, hint, checked
read-back, infeasibility report); the driver's docstring states the result's meaning.  In short: `status`
OPTIMAL when the bound meets the makespan (with secondary objective terms: when the solver proved the weighted
objective optimal); else FEASIBLE.  `lower_bound_tick` = max(solver bound rounded up,
`instance.trivial_lower_bound_tick()`) for a makespan-only objective, the trivial bound otherwise, never above
the makespan.  Without an incumbent, the best valid known schedule (warm start or list schedule) comes back with
the solver's bound; one better than the solver's incumbent wins too; one that a MILP backend's conservative
memory bound calls infeasible comes back FEASIBLE.  Never returns None: no plan at all raises `InfeasibleError`
(proven infeasible, with the reason) or `OpplanError` (time limit too short to find one).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from formulations.backends import Backend, get_backend
from formulations.cumulative import cumulative_applies, solve_cumulative
from formulations.driver import Formulation, ceil_tick, solve_formulation
from formulations.model_api import DEFAULT_SOLVE_POLICY, ModelBuilder, ProgressCallback, SolvePolicy, SolveResult
from formulations.placement import (
    MAKESPAN,
    Objective,
    PlacementModel,
    build_placement_model,
    hint_schedule,
    memory_may_bind,
)
from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics.horizon import (
    TimedAssignment,
    critical_path_schedule,
    serial_bound_tick,
)
from planner.heuristics.memory import capacity_lower_bound, show_bytes, task_alone_bytes
from planner.schedule.memory import memory_intervals, memory_profile
from planner.schedule.plan import Plan, PlanMethod, PlanStatus, TaskPlacement


# ------------------------------------------------------------------------------------------------ checks
def schedule_problems(instance: SchedulingInstance, device: Sequence[int], start: Sequence[int],
                      end: Sequence[int], *, limit: int = 5) -> list[str]:
    """What is wrong with a timed assignment (empty when it is a valid schedule, memory included)."""
    out: list[str] = []
    n = instance.num_tasks
    names = instance.task_names
    for t in range(n):
        d = device[t]
        if not 0 <= d < instance.num_devices or not instance.eligible(t, d):
            out.append(f"task {names[t]} on ineligible device {d}")
            continue
        if end[t] - start[t] != int(instance.duration_tick[t, d]) or start[t] < 0:
            out.append(f"task {names[t]} runs [{start[t]}, {end[t]}) but takes {instance.duration_tick[t, d]}")
    if out:
        return out[:limit]
    for k, (u, v) in enumerate(instance.edges):
        arrive = end[u] + instance.comm(k, device[u], device[v])
        if start[v] < arrive:
            out.append(f"{names[v]} starts at {start[v]} before {names[u]}'s data arrives at {arrive}")
    for d in range(instance.num_devices):
        runs = sorted((start[t], end[t], t) for t in range(n) if device[t] == d and end[t] > start[t])
        for (_s0, e0, a), (s1, _e1, b) in zip(runs, runs[1:]):
            if s1 < e0:
                out.append(f"{names[a]} and {names[b]} overlap on device {d}")
    prof = memory_profile(instance, memory_intervals(instance, device, start, end))
    for d in range(instance.num_devices):
        exc = prof.first_excess(d)
        if exc is not None:
            out.append(f"device {d} holds {exc[1]} bytes at tick {exc[0]}, capacity {instance.capacity_bytes[d]}")
    return out[:limit]

def _from_plan(instance: SchedulingInstance, plan: Plan) -> TimedAssignment | None:
    by = plan.by_task()
    if any(name not in by for name in instance.task_names):
        return None
    rows = [by[name] for name in instance.task_names]
    return TimedAssignment(tuple(r.device for r in rows), tuple(r.start_tick for r in rows),
                           tuple(r.end_tick for r in rows))

def _valid(instance: SchedulingInstance, sched: TimedAssignment | None,
           release_tick: Sequence[int] | None = None) -> bool:
    if sched is None:
        return False
    if release_tick is not None and any(s < r for s, r in zip(sched.start, release_tick, strict=True)):
        return False
    return not schedule_problems(instance, sched.device, sched.start, sched.end, limit=1)

def _value(sched: TimedAssignment, tail_tick: Sequence[int] | None) -> int:
    """The makespan objective's value: the last end, or with delivery times the last end plus delivery."""
    if tail_tick is None:
        return sched.makespan_tick
    return max((e + int(q) for e, q in zip(sched.end, tail_tick, strict=True)), default=0)

# ------------------------------------------------------------------------------------------------ infeasibility
def memory_report(instance: SchedulingInstance, *, proven: bool, note: str = "") -> str:
    need = task_alone_bytes(instance)
    bound = capacity_lower_bound(instance)
    top = np.argsort(-need, kind="stable")[:3]
    largest = ", ".join(f"{instance.task_names[t]} ({show_bytes(int(need[t]))})" for t in top)
    caps = sorted({int(c) for c in instance.capacity_bytes})
    cap_txt = ", ".join(show_bytes(c) for c in caps)
    head = "no plan fits in device memory" if proven else "the device memory cannot hold this model"
    msg = (f"{head} (capacity {cap_txt}); the smallest capacity that could fit is at least "
           f"{show_bytes(bound.capacity_bytes)} per device ({bound.reason}); largest tasks by memory: {largest}")
    return msg + (f"; {note}" if note else "")

def precheck(instance: SchedulingInstance) -> None:
    """Raise InfeasibleError for what needs no solver: no eligible device, a task or the parameters too big."""
    for t in range(instance.num_tasks):
        if not (instance.duration_tick[t] < INELIGIBLE).any():
            raise InfeasibleError(f"task {instance.task_names[t]!r} may run on no device (pinned or excluded "
                                  f"everywhere)", fix="remove a pin or an exclusion")
    need = task_alone_bytes(instance)
    for t in range(instance.num_tasks):
        room = max(int(instance.capacity_bytes[d]) for d in range(instance.num_devices) if instance.eligible(t, d))
        if need[t] > room:
            raise InfeasibleError(memory_report(instance, proven=True,
                                                note=f"task {instance.task_names[t]} alone needs "
                                                     f"{show_bytes(int(need[t]))}, {show_bytes(int(need[t]) - room)}"
                                                     f" more than its largest eligible device"))
    total_params = int(instance.param_bytes.sum())
    total_cap = int(instance.capacity_bytes.astype(object).sum())
    if total_params > total_cap:
        raise InfeasibleError(memory_report(instance, proven=True,
                                            note=f"parameters exceed all memory together by "
                                                 f"{show_bytes(total_params - total_cap)}"))

# ------------------------------------------------------------------------------------------------ the driver's view
class PlacementFormulation(Formulation[PlacementModel, TimedAssignment]):
    """The placement formulation as the driver sees it: model, hint, read-back (checked), infeasibility."""

    name = "placement"
    solution_noun = "plan"
    uses_cumulative = True  # device memory (family 8)

    def __init__(self, instance: SchedulingInstance, *, horizon: int, objective: Objective,
                 symmetry_breaking: bool, release_tick: Sequence[int] | None = None,
                 tail_tick: Sequence[int] | None = None) -> None:
        self.instance, self.horizon, self.objective = instance, horizon, objective
        self.release_tick, self.tail_tick = release_tick, tail_tick
        self.symmetry_breaking = symmetry_breaking
        self.objective_is_value = objective.makespan_only
        self.subject = instance.name
        self._families: list[str] = []

    def build(self, builder: ModelBuilder) -> PlacementModel:
        model = build_placement_model(self.instance, builder, horizon=self.horizon,
                                      lower_bound=self.instance.trivial_lower_bound_tick(),
                                      objective=self.objective, symmetry_breaking=self.symmetry_breaking,
                                      release_tick=self.release_tick, tail_tick=self.tail_tick)
        self._families = sorted(builder.family_counts())
        return model

    def hint(self, model: PlacementModel, solution: TimedAssignment) -> None:
        hint_schedule(model, solution.device, solution.start)

    def read(self, model: PlacementModel, result: SolveResult) -> TimedAssignment:
        inst = self.instance
        device = []
        for t in range(inst.num_tasks):
            on = [d for d in model.eligible[t] if result.bool_value(model.x[t, d])]
            if len(on) != 1:
                raise RuntimeError(f"{result.solver_name}: task {inst.task_names[t]} placed on {on}")
            device.append(on[0])
        start = [result.int_value(model.start[t]) for t in range(inst.num_tasks)]
        end = [start[t] + int(inst.duration_tick[t, device[t]]) for t in range(inst.num_tasks)]
        problems = schedule_problems(inst, device, start, end)
        if self.release_tick is not None:
            problems += [f"task {inst.task_names[t]} starts at {start[t]} before its release {r}"
                         for t, r in enumerate(self.release_tick) if start[t] < r][:5]
        if problems:
            raise RuntimeError(f"{result.solver_name} returned an invalid schedule for {inst.name!r}: {problems}")
        return TimedAssignment(tuple(device), tuple(start), tuple(end))

    def value_tick(self, solution: TimedAssignment) -> int:
        return _value(solution, self.tail_tick)

    def bound_tick(self, solver_bound: float) -> int:
        return ceil_tick(solver_bound / self.objective.makespan_weight)

    def explain_infeasible(self, backend: Backend) -> str:
        if memory_may_bind(self.instance):
            note = "" if backend.exact_cumulative else (f"the {backend.name} backend bounds memory conservatively "
                                                        f"(all buffers at once); the cpsat backend models it "
                                                        f"exactly")
            return memory_report(self.instance, proven=True, note=note)
        return (f"the placement model of {self.instance.name!r} is infeasible within horizon {self.horizon} ticks "
                f"(constraint families: {self._families})")


# ------------------------------------------------------------------------------------------------ entry point
def _plan(instance: SchedulingInstance, sched: TimedAssignment, *, status: PlanStatus, lower_bound: int,
          solver: str, version: str, elapsed: float, shift: bool = True) -> Plan:
    # Makespan is first start to last end: shift so the first task starts at tick 0 (a uniform shift changes
    # nothing else, memory included).  With release times the times are absolute and nothing is shifted.
    offset = min(sched.start, default=0) if shift else 0
    makespan = sched.makespan_tick - offset
    placements = tuple(TaskPlacement(instance.task_names[t], int(sched.device[t]), int(sched.start[t] - offset),
                                     int(sched.end[t] - offset)) for t in range(instance.num_tasks))
    return Plan(instance_name=instance.name, placements=placements, device_names=tuple(instance.device_names),
                makespan_tick=int(makespan), lower_bound_tick=int(min(lower_bound, makespan)), status=status,
                method=PlanMethod.PLACEMENT, solver=solver, solver_version=version, solve_time_s=float(elapsed),
                tick_s=instance.tick_s, time_unit=instance.time_unit,
                task_ops={k: tuple(v) for k, v in instance.task_ops.items()})


def solve_placement(
    instance: SchedulingInstance,
    *,
    backend: str = "cpsat",
    time_limit_s: float = 60.0,
    rel_gap: float = 0.0,
    threads: int = 8,
    seed: int = 0,
    warm_start: Plan | None = None,
    objective: Objective = MAKESPAN,
    progress: ProgressCallback | None = None,
    deterministic: bool = True,
    symmetry_breaking: bool = True,
    release_tick: Sequence[int] | None = None,
    tail_tick: Sequence[int] | None = None,
    policy: SolvePolicy = DEFAULT_SOLVE_POLICY,
) -> Plan:
    """Place and order every task of `instance` (see the module docstring for the result's meaning); `policy`: the
    formulations' knobs (`formulations.model_api.SolvePolicy`).

    `release_tick` (optional, per task): earliest start of each task.  With it, times are absolute (the plan is
    not shifted to start at tick 0) and the makespan is the last end; known schedules that start a task before
    its release are not used.  `tail_tick` (optional, per task): delivery times; the objective becomes
    max(end + delivery) (the returned plan's `makespan_tick` stays its last end)."""
    t0 = time.monotonic()
    be = get_backend(backend)
    if instance.num_tasks == 0:
        return _plan(instance, TimedAssignment((), (), ()), status=PlanStatus.OPTIMAL, lower_bound=0,
                     solver=be.name, version=be.version, elapsed=time.monotonic() - t0)
    precheck(instance)

    # Known schedules: the warm start and a list schedule; the valid ones bound the horizon.  Where memory may bind,
    # only a valid one is given to the solver as a hint: OR-Tools 9.15 aborts the whole process ("Check failed:
    # heuristics.fixed_search != nullptr") on an infeasible model with a hint under its interleaved (deterministic)
    # search, and a model where no plan fits memory with an invalid warm start is exactly that (a cluster round on
    # the Mixtral model at 22.17 GiB).  A valid hint proves the model feasible; without memory the model always is.
    warm = _from_plan(instance, warm_start) if warm_start is not None else None
    listed = critical_path_schedule(instance)
    valid = [s for s in (warm, listed) if s is not None and _valid(instance, s, release_tick)]
    best_known = min(valid, key=lambda s: _value(s, tail_tick)) if valid else None
    binds = memory_may_bind(instance)
    if cumulative_applies(instance, be, objective):  # P|prec|Cmax: start times and one cumulative suffice
        solved = solve_cumulative(instance, backend=be, time_limit_s=time_limit_s, rel_gap=rel_gap, threads=threads,
                                  seed=seed, deterministic=deterministic, progress=progress, known=valid,
                                  release_tick=release_tick, tail_tick=tail_tick, started_s=t0, policy=policy)
        return _plan(instance, solved.solution, status=solved.status, lower_bound=solved.lower_bound_tick,
                     solver=solved.solver, version=solved.solver_version, elapsed=solved.solve_time_s,
                     shift=release_tick is None)
    if best_known is not None and objective.makespan_only:
        horizon = _value(best_known, tail_tick)
    else:
        serial = serial_bound_tick(instance, slowest=bool(binds))
        serial += max(release_tick, default=0) if release_tick is not None else 0
        horizon = max([serial + max(tail_tick, default=0) if tail_tick is not None else serial]
                      + [_value(s, tail_tick) for s in valid])

    formulation = PlacementFormulation(instance, horizon=horizon, objective=objective,
                                       symmetry_breaking=symmetry_breaking, release_tick=release_tick,
                                       tail_tick=tail_tick)
    solved = solve_formulation(formulation, backend=be, time_limit_s=time_limit_s, rel_gap=rel_gap,
                               threads=threads, seed=seed, deterministic=deterministic, progress=progress,
                               hint=best_known or (None if binds else
                                                   warm or (listed if release_tick is None else None)),
                               known=best_known,
                               lower_bound_tick=instance.trivial_lower_bound_tick(), started_s=t0, policy=policy)
    return _plan(instance, solved.solution, status=solved.status, lower_bound=solved.lower_bound_tick,
                 solver=solved.solver, version=solved.solver_version, elapsed=solved.solve_time_s,
                 shift=release_tick is None)
