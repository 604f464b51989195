"""The pipeline formulation: order every F, B, W task of a training pipeline on its device to minimise makespan
under a memory cap per device.

Sets.  T: the tasks of the unrolled pipeline with split backwards (``sFm``, ``sBm``, ``sWm``; `unroll.unroll`
with nothing fused), plus, when the pipeline has communication streams, the sends ``sSEND_Fm`` / ``sSEND_Bm``;
dev(t): the task's stream — a device's compute stream, or for a send the sender's communication stream
(placement fixed per device, looping or V-shape — given, not chosen); E: the precedence edges of `unroll`
(chains, or chains through the sends; F -> B, B -> W, F -> W).  Baselines are simulated on the same instance
(`planner.pipeline.streams`), so sends cost the same for both.

Data.  d_t duration (ticks); c_e the edge's delay when its ends sit on different devices (0 otherwise);
A_s activation of stage s allocated at F's start, of which A^B_s is released at B's end and the rest at W's end;
P_d parameters on device d (every stage copy it hosts); Cap_d memory cap of device d; H horizon (the warm start's
makespan, else the serial sum).

Variables.  S_t in [0, H - d_t] start of t (E_t = S_t + d_t); C in [LB, H] makespan.

Objective.  minimise C.

Constraints (family name, building function):

1. ``prec[u=..,v=..]`` (`_precedence`): S_v >= S_u + d_u + c_e for every edge e = (u, v).
2. ``device[d=..]`` (`_no_overlap`): the intervals [S_t, E_t) of the tasks of stream d do not overlap (compute
   streams: F, B, W; communication streams: the sends of that device, in an order the solver chooses).
3. ``memory[d=..]`` (`_memory`): cumulative on device d of the intervals [S_F, E_W) with demand A_s - A^B_s
   and [S_F, E_B) with demand A^B_s, for every (stage, micro-batch) on d, against Cap_d - P_d — exactly the
   accounting of `planner.pipeline.metrics.pipeline_memory`.
4. ``makespan[t=..]`` (`_makespan`): C >= E_t for every task without successors.
5. ``fifo[s=..,k=..,m=..]`` (`_fifo`, optional, on by default): on every stage, F's, B's and W's run in micro-batch
   order.  Micro-batches are identical, and every baseline keeps this order, so this keeps the warm start while
   cutting the micro-batch permutations; the bound reported is then the bound *among in-order schedules*.

Bound.  Besides the solver's bound and the instance's trivial bound (critical path, work / devices), the
*device bound* max_d (min head on d + work of d + min tail on d) — no task of d can start before the longest path
into it, and after d's last task its longest path out remains — which is what proves the start-up of a V's or a
pipeline's far devices.

Result: `PipelineSolution` with the per-device `Schedule` (tasks sorted by start), the solver's times as a
`Plan` (validated by the independent validator before it is returned), the bound and the gap.  Infeasible caps
raise `InfeasibleError` naming the device and how much memory the parameters and one micro-batch need.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

from formulations.backends import get_backend
from formulations.model_api import ModelBuilder, SolveParams, SolveStatus, Var, cname, interval
from planner.cost.instance import SchedulingInstance
from planner.errors import InfeasibleError, OpplanError
from planner.pipeline.unroll import TrainingPipeline, unroll
from planner.schedule.plan import Plan, TaskPlacement
from planner.schedule.program import Schedule, schedule_from_plan
from planner.schedule.timeline import Timeline, timeline_of_plan
from planner.schedule.validate import validate_plan


@dataclass(frozen=True)
class PipelineSolution:
    schedule: Schedule
    plan: Plan
    timeline: Timeline
    instance: SchedulingInstance
    status: str
    lower_bound_tick: int
    solve_time_s: float
    time_to_best_s: float = 0.0  # seconds from the call until the returned schedule was found (0: the warm start)

    @property
    def gap(self) -> float:
        return self.plan.gap


@dataclass
class _Model:
    inst: SchedulingInstance
    pipeline: TrainingPipeline
    builder: ModelBuilder
    device: list[int]
    start: list[Var]
    makespan: Var
    horizon: int


def _device_of(inst: SchedulingInstance) -> list[int]:
    out = []
    for t in range(inst.num_tasks):
        ok = [d for d in range(inst.num_devices) if inst.eligible(t, d)]
        if len(ok) != 1:
            raise OpplanError(f"the pipeline formulation needs every stage placed on one device; task "
                              f"{inst.task_names[t]} may run on {len(ok)} devices",
                              fix="use a fixed or V-shape placement")
        out.append(ok[0])
    return out


def _precedence(m: _Model) -> None:
    inst = m.inst
    for e, (u, v) in enumerate(inst.edges):
        delay = inst.comm(e, m.device[u], m.device[v])
        m.builder.add(m.start[v] >= m.start[u] + int(inst.duration_tick[u, m.device[u]]) + delay,
                      cname("prec", u=inst.task_names[u], v=inst.task_names[v]))


def _dur(m: _Model, t: int) -> int:
    return int(m.inst.duration_tick[t, m.device[t]])


def _no_overlap(m: _Model) -> None:
    for d in range(m.inst.num_devices):
        ivs = [interval(m.start[t], _dur(m, t), m.start[t] + _dur(m, t), None, f"iv_{m.inst.task_names[t]}")
               for t in range(m.inst.num_tasks) if m.device[t] == d]
        m.builder.no_overlap(ivs, cname("device", d=d))


def _memory(m: _Model, cap: Sequence[int]) -> None:
    idx = m.inst.task_index
    pl = m.pipeline
    for d in range(m.inst.num_devices):
        params = sum(int(pl.stages[s].param_bytes) for s in pl.device_stages(d))
        ivs, dem = [], []
        for s in pl.device_stages(d):
            cost = pl.stages[s]
            a_b = int(cost.activation_freed_by_b_bytes)
            a_w = int(cost.activation_bytes) - a_b
            for k in range(pl.num_microbatches):
                f, b, w = idx[f"{s}F{k}"], idx[f"{s}B{k}"], idx[f"{s}W{k}"]
                for demand, until in ((a_w, w), (a_b, b)):
                    if demand > 0:
                        end = m.start[until] + _dur(m, until)
                        ivs.append(interval(m.start[f], end - m.start[f], end, None, f"act_{s}_{k}_{until}"))
                        dem.append(demand)
        if ivs:
            m.builder.cumulative(ivs, dem, int(cap[d]) - params, cname("memory", d=d))


def _makespan(m: _Model) -> None:
    for t in range(m.inst.num_tasks):
        if not m.inst.successors[t]:
            m.builder.add(m.makespan >= m.start[t] + _dur(m, t), cname("makespan", t=m.inst.task_names[t]))


def _fifo(m: _Model) -> None:
    idx = m.inst.task_index
    for s in range(m.pipeline.num_stages):
        for kind in ("F", "B", "W"):
            for k in range(m.pipeline.num_microbatches - 1):
                a, b = idx[f"{s}{kind}{k}"], idx[f"{s}{kind}{k + 1}"]
                m.builder.add(m.start[b] >= m.start[a] + _dur(m, a), cname("fifo", s=s, k=kind, m=k))


def _check_fits(pipeline: TrainingPipeline, cap: Sequence[int]) -> None:
    for d in range(pipeline.num_devices):
        stages = pipeline.device_stages(d)
        params = sum(int(pipeline.stages[s].param_bytes) for s in stages)
        one = max((int(pipeline.stages[s].activation_bytes) for s in stages), default=0)
        if params + one > cap[d]:
            raise InfeasibleError(f"device {d}: parameters ({params}) plus one micro-batch's activation ({one}) "
                                  f"need {params + one}, {params + one - cap[d]} more than its memory cap {cap[d]}")


def device_bound_tick(inst: SchedulingInstance, device: Sequence[int]) -> int:
    """max over devices of (earliest head + work + shortest tail) of its tasks, with communication where the
    ends of an edge sit on different devices (the placement is fixed)."""
    dur = [int(inst.duration_tick[t, device[t]]) for t in range(inst.num_tasks)]
    head = [0] * inst.num_tasks
    for t in inst.topological_order:
        for u, e in inst.predecessors[t]:
            head[t] = max(head[t], head[u] + dur[u] + inst.comm(e, device[u], device[t]))
    tail = [0] * inst.num_tasks
    for t in reversed(inst.topological_order):
        for v, e in inst.successors[t]:
            tail[t] = max(tail[t], tail[v] + dur[v] + inst.comm(e, device[t], device[v]))
    best = 0
    for d in range(inst.num_devices):
        on = [t for t in range(inst.num_tasks) if device[t] == d]
        if on:
            best = max(best, min(head[t] for t in on) + sum(dur[t] for t in on) + min(tail[t] for t in on))
    return best


def split_start_times(pipeline: TrainingPipeline, timeline: Timeline) -> dict[str, int] | None:
    """Start times of the split tasks (F, B, W) read off a baseline's timeline: BW at t -> B at t, W at t + B;
    an F&B pair at t -> F at t, then its backward.  None when a pair is shorter than its two halves (the times
    would not fit the split model's durations)."""
    from planner.pipeline.unroll import action_of
    from planner.schedule.actions import ActionKind

    out: dict[str, int] = {}
    for p in timeline.placements:
        t = p.start_tick
        parts = action_of(p.task)
        if parts and parts[0].is_comm:  # a send on a communication stream: same task in the split model
            out[p.task] = t
            continue
        total = 0
        for a in parts:
            cost = pipeline.stages[a.stage]
            if a.kind is ActionKind.BW:
                out[f"{a.stage}B{a.microbatch}"] = t
                out[f"{a.stage}W{a.microbatch}"] = t + int(cost.input_grad_tick)
                t += cost.bw_tick
                total += cost.bw_tick
            else:
                out[str(a)] = t
                d = {ActionKind.F: cost.forward_tick, ActionKind.B: cost.input_grad_tick,
                     ActionKind.W: cost.weight_grad_tick}[a.kind]
                t += int(d)
                total += int(d)
        if p.end_tick - p.start_tick < total:
            return None
    return out


def solve_pipeline(
    pipeline: TrainingPipeline,
    memory_cap_bytes: int | Sequence[int] | None = None,
    *,
    warm_start: dict[str, int] | None = None,
    time_limit_s: float = 60.0,
    backend: str = "cpsat",
    fifo: bool = True,
    threads: int = 8,
    seed: int = 0,
) -> PipelineSolution:
    """Solve the pipeline formulation (module docstring).  `warm_start`: task name -> start tick of a valid
    schedule of the split instance (e.g. `split_start_times` of the best baseline that fits the cap)."""
    t0 = time.monotonic()
    if pipeline.stage_to_device is None:
        raise OpplanError("the pipeline formulation needs a placement (fixed or V-shape)")
    inst = unroll(pipeline)
    p = pipeline.num_devices
    if memory_cap_bytes is None:
        cap = [2**40] * p
    elif isinstance(memory_cap_bytes, int):
        cap = [int(memory_cap_bytes)] * p
    else:
        cap = [int(c) for c in memory_cap_bytes]
    _check_fits(pipeline, cap)
    device = _device_of(inst)
    serial = int(sum(int(inst.duration_tick[t, device[t]]) for t in range(inst.num_tasks)))
    comm = int(sum(int(x) for x in inst.edge_fixed_tick))
    horizon = serial + comm
    if warm_start is not None:
        horizon = max(warm_start[inst.task_names[t]] + int(inst.duration_tick[t, device[t]])
                      for t in range(inst.num_tasks))
    trivial = max(inst.trivial_lower_bound_tick(), device_bound_tick(inst, device))
    be = get_backend(backend)
    builder = be.new_builder()
    start = [builder.int_var(0, max(0, horizon - int(inst.duration_tick[t, device[t]])), f"S_{n}")
             for t, n in enumerate(inst.task_names)]
    mk = builder.int_var(min(trivial, horizon), horizon, "C")
    m = _Model(inst, pipeline, builder, device, start, mk, horizon)
    _precedence(m)
    _no_overlap(m)
    _memory(m, cap)
    _makespan(m)
    if fifo:
        _fifo(m)
    builder.minimize(mk)
    if warm_start is not None:
        for t, n in enumerate(inst.task_names):
            builder.hint(start[t], int(warm_start[n]))
        builder.hint(mk, horizon)
    remaining = max(0.1, time_limit_s - (time.monotonic() - t0))
    found: list[tuple[float, float]] = []  # (seconds since t0, incumbent) at each improvement

    def progress(_wall: float, incumbent: float | None, _bound: float | None, _gap: float | None) -> None:
        if incumbent is not None and (not found or incumbent < found[-1][1]):
            found.append((time.monotonic() - t0, incumbent))

    res = builder.solve(SolveParams(time_limit_s=remaining, threads=threads, seed=seed, progress=progress))
    if res.status is SolveStatus.INFEASIBLE:
        raise InfeasibleError(f"no in-order schedule of {pipeline.name!r} fits memory caps {cap} within horizon "
                              f"{horizon} ticks")
    if res.status is SolveStatus.MODEL_INVALID:
        raise RuntimeError(f"{be.name} rejected the pipeline model (a formulation bug)")
    if res.has_solution:
        starts = [res.int_value(s) for s in start]
    elif warm_start is not None:
        starts = [int(warm_start[n]) for n in inst.task_names]
    else:
        raise OpplanError(f"{be.name} found no pipeline schedule within {time_limit_s:g} s",
                          fix="raise the time limit or give a warm start")
    ends = [s + int(inst.duration_tick[t, device[t]]) for t, s in enumerate(starts)]
    makespan = max(ends) - min(starts)
    bound = trivial
    if res.best_bound is not None:
        bound = max(bound, int(-(-res.best_bound // 1)))
    if res.status is SolveStatus.OPTIMAL and res.has_solution:
        bound = max(bound, makespan)
    bound = min(bound, makespan)
    status = "optimal" if bound >= makespan else "feasible"
    placements = tuple(TaskPlacement(n, device[t], starts[t], ends[t], _stage_of(n))
                       for t, n in enumerate(inst.task_names))
    plan = Plan(inst.name, placements, tuple(inst.device_names), makespan, bound, status, "pipeline-milp",
                solver=be.name, solver_version=be.version, solve_time_s=time.monotonic() - t0)
    validate_plan(inst, plan)
    timeline = timeline_of_plan(inst, plan)
    compute_plan = dataclasses.replace(plan, placements=tuple(x for x in placements if x.device < p),
                                       device_names=tuple(inst.device_names[:p]))
    schedule = schedule_from_plan(compute_plan, num_microbatches=pipeline.num_microbatches,
                                  num_stages=pipeline.num_stages, name="opplan")
    to_best = next((t for t, v in found if v <= makespan), 0.0) if res.has_solution else 0.0
    if warm_start is not None and makespan >= horizon:
        to_best = 0.0
    return PipelineSolution(schedule, plan, timeline, inst, status, bound, time.monotonic() - t0, to_best)


def _stage_of(name: str) -> int:
    digits = len(name) - len(name.lstrip("0123456789"))
    return int(name[:digits])  # a send's stage is the stage that sends it
