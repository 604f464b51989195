r"""Pipeline-stage formulation: cut the tasks into S contiguous stages, map stages to devices, minimise the
bottleneck stage time (communication included) under device memory.  Its output feeds the training-pipeline
schedules (1F1B, DualPipe, ...).  The problem in words, and its exact DP, are in `planner.heuristics.stage_dp`.

Sets
    i = 0..n-1              positions in the fixed topological order π = ``inst.topological_order`` (task π_i)
    s = 0..S-1              stages;  b = 1..S-1 boundaries (boundary b separates stage b-1 from stage b)
    E                       edges e = (u, v), with positions pu < pv (every edge goes forward in π)
    D                       devices;  dev[s] the device of stage s (given: FIXED dev[s] = s, or a map)
    L                       link levels: link classes whose per-edge delays are identical form one level; level 0
                            is the free one (same device, or a link with zero delay);  lv(a, b) the level a -> b

Data
    p[i,d]                  duration of π_i on d;  ineligible pairs are forbidden (family 3)
    c[e,L]                  delay of edge e over a link of level L (``inst.comm_tick``);  c[e,0] = 0
    need[s,i]               param_copies · param_bytes + inflight[s] · activation_bytes of π_i
    cap[d]                  device memory (clipped to Σ_i need: a larger value cannot bind)
    LB, UB                  max(⌈Σ_i min_d p[i,d] / S⌉, max_i min_d p[i,d]) and the warm start's bottleneck

Variables
    g[i,b] ∈ {0,1}          π_i is in stage >= b  (g[i,0] = 1, g[i,S] = 0).  Fixed by position: g[i,b] = 0 for
                            b > i and g[i,b] = 1 for b <= i - (n - S) (each stage needs a task), so only n-S
                            positions per boundary carry a variable.  stage(i) = Σ_b g[i,b].
    y[i,s] = g[i,s] - g[i,s+1]          π_i is in stage s (an expression)
    x[e,b] = g[pv,b] - g[pu,b]          edge e crosses boundary b (an expression, 0/1 by family 1)
    B ∈ [LB, UB]            the bottleneck (steady-state period)
    FREE placement only:
    a[s,d] ∈ {0,1}          stage s runs on device d
    l[b,L] ∈ {0,1}          boundary b crosses a link of level L (only when the levels between distinct devices
                            differ; otherwise the delay of boundary b is known)
    w[s], k[s] ∈ ℤ≥0        compute time of stage s on its device, and its outgoing communication time

Why these variables.  The "staircase" g makes contiguity two families of two-term rows, and makes both the stage
membership y and the boundary crossing x linear without any product: an edge crosses boundary b exactly when its
target is at stage >= b and its source is not.  An edge that skips stages is counted on every boundary it crosses
(activations are forwarded stage by stage), each time over that boundary's link; the sender pays (comm of stage
b-1 is the traffic over boundary b).  On a FIXED map every delay is a constant, so no device variable exists.
On a FREE map the device-dependent sums are bounded with indicator rows (`add_if`: native on CP-SAT, big-M from
the variable bounds on MILP backends); the boundary's link level comes from l[b,L], which only needs a lower
bound (a larger l only adds a valid lower bound on k).

Objective
    minimise B;  optional second phase (``comm_tiebreak``): with B <= B* fixed, minimise Σ_b Σ_e bytes[e]·x[e,b]
    (the traffic summed over boundaries) - lexicographic, so no weight mixes ticks and bytes.

Constraint families (name: what, built by)
    1. mono[i,b]:   g[i-1,b] <= g[i,b]  (stage index nondecreasing along π)                        `_contiguity`
    2. step[i,b]:   g[i,b+1] <= g[i-1,b]  (it grows by at most one per position; with stage(0) = 0 and
                    stage(n-1) = S-1 fixed, every stage is non-empty)                               `_contiguity`
    3. elig[i,s]:   y[i,s] <= 0 where π_i is ineligible on dev[s] (FIXED / map);
       elig[i,s,d]: y[i,s] + a[s,d] <= 1 where π_i is ineligible on d (FREE)                        `_eligibility`
    4. assign[s]:   Σ_d a[s,d] = 1;  inject[d]: Σ_s a[s,d] <= 1   (FREE)                             `_mapping`
    5. link[b,L,d]: l[b,L] >= a[b-1,d] + Σ_{d': lv(d,d')=L} a[b,d'] - 1   (FREE, levels differ)    `_links`
    6. work[s,d]:   a[s,d] ⇒ w[s] >= Σ_i p[i,d]·y[i,s]                        (FREE)
       comm[b,L]:   l[b,L] ⇒ k[b-1] >= Σ_e c[e,L]·x[e,b]   (FREE, levels differ; comm[b] without ⇒ when the
                    delay is the same on every link)                                                `_stage_time`
    7. period[s]:   B >= Σ_i p[i,dev[s]]·y[i,s] + Σ_e c[e,lv(dev[s],dev[s+1])]·x[e,s+1]   (FIXED / map);
                    B >= w[s] + k[s]   (FREE)                                                       `_period`
    8. mem[s]:      Σ_i need[s,i]·y[i,s] <= cap[dev[s]]  (FIXED / map);
                    Σ_i need[s,i]·y[i,s] <= Σ_d cap[d]·a[s,d]  (FREE)                               `_memory`
    9. sym_used[d], sym_order[d] (FREE): for each class of interchangeable devices d_1 < ... < d_m
       (`SchedulingInstance.interchangeable_device_classes`: swapping any two changes nothing): Σ_s a[s,d_j] <= Σ_s
       a[s,d_{j-1}] and
       Σ_s s·a[s,d_j] - Σ_s s·a[s,d_{j-1}] >= 1 - S·(1 - Σ_s a[s,d_j]): a class's devices are used in index
       order along the pipeline.  Relabelling a class in stage order maps any solution to one that satisfies this,
       so no optimum is lost.                                                                      `_symmetry`
   10. bcap:        B <= B*  (second phase only)                                                   `_objective`

A row that the variables' domains already imply (e.g. mono where one side is fixed) is not added, so the counts
are: mono (S-1)(n-S-1), step max(0, S-2)(n-S), period S, and per stage one mem row where memory can bind.
Size: (S-1)(n-S) booleans g; FREE adds S·|D| a, (S-1)·|L| l, 2S integers.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from formulations.backends import Backend, get_backend
from formulations.driver import Formulation, Solved, solve_formulation
from formulations.model_api import (
    DEFAULT_SOLVE_POLICY,
    LinearConstraint,
    LinExpr,
    ModelBuilder,
    ProgressCallback,
    SolvePolicy,
    SolveResult,
    Var,
    as_expr,
    cname,
    linear,
)
from planner.cost.instance import SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics.stage_dp import (
    PlacementArg,
    StageData,
    StagePlacement,
    StagePlan,
    build_plan,
    canonical_maps,
    dp_for_map,
    infeasibility_report,
    min_uniform_capacity,
    resolve_placement,
    split_positions,
    stage_data,
    trivial_lower_bound,
)
from planner.schedule.plan import PlanMethod, PlanStatus

__all__ = ["StageFormulation", "StageModel", "build_stage_model", "dp_warm_start", "hint_split", "solve_stages",
           "StagePlacement", "StagePlan"]

G = Var | int  # a staircase entry: a variable, or a constant 0/1


@dataclass
class StageModel:
    """The variables of one built stage formulation (for hints and extraction)."""

    instance: SchedulingInstance
    builder: ModelBuilder
    data: StageData
    num_stages: int
    devices: tuple[int, ...] | None  # None: FREE
    lower_bound: int
    upper_bound: int
    g: list[list[G]]  # g[i][b], b = 0..S
    bottleneck: Var
    a: dict[tuple[int, int], Var] = field(default_factory=dict)
    link: dict[tuple[int, int], Var] = field(default_factory=dict)  # (b, level) -> l
    work: dict[int, Var] = field(default_factory=dict)
    comm: dict[int, Var] = field(default_factory=dict)
    free_levels: list[int] = field(default_factory=list)  # FREE: levels between distinct devices

    # ---- expressions
    def y(self, i: int, s: int) -> LinExpr:
        return as_expr(self.g[i][s]) - as_expr(self.g[i][s + 1])

    def x(self, e: int, b: int) -> LinExpr:
        pu, pv, _ = self.data.cross[e]
        return as_expr(self.g[pv][b]) - as_expr(self.g[pu][b])

    def stage_sum(self, coef: Sequence[int] | np.ndarray, s: int) -> LinExpr:
        """Σ_i coef[i]·y[i,s], built in one pass."""
        terms: list[tuple[int, Var]] = []
        const = 0
        for i, c in enumerate(coef):
            c = int(c)
            if not c:
                continue
            for sign, gv in ((1, self.g[i][s]), (-1, self.g[i][s + 1])):
                if isinstance(gv, Var):
                    terms.append((sign * c, gv))
                else:
                    const += sign * c * gv
        return linear(terms, const)

    def cross_sum(self, coef: Sequence[int] | np.ndarray, b: int) -> LinExpr:
        """Σ_e coef[e]·x[e,b]."""
        terms: list[tuple[int, Var]] = []
        const = 0
        for e, (pu, pv, _) in enumerate(self.data.cross):
            c = int(coef[e])
            if not c:
                continue
            for sign, gv in ((1, self.g[pv][b]), (-1, self.g[pu][b])):
                if isinstance(gv, Var):
                    terms.append((sign * c, gv))
                else:
                    const += sign * c * gv
        return linear(terms, const)


def _add(b: ModelBuilder, con: LinearConstraint, name: str) -> None:
    """Add `con` unless the variables' domains already imply it (then it would only be a redundant row)."""
    lo, hi = con.expr.bounds()
    if (con.lb is None or lo >= con.lb) and (con.ub is None or hi <= con.ub):
        return
    b.add(con, name)


# ------------------------------------------------------------------------------------------------ the model
def build_stage_model(inst: SchedulingInstance, builder: ModelBuilder, data: StageData, num_stages: int,
                      devices: Sequence[int] | None, *, lower_bound: int, upper_bound: int,
                      bottleneck_cap: int | None = None) -> StageModel:
    """Create the variables, the numbered constraint families and the objective on `builder`.

    `bottleneck_cap` given: the second phase (family 10, minimise the traffic); else minimise the bottleneck."""
    n, S = len(data.order), num_stages
    upper_bound = max(int(upper_bound), int(lower_bound))
    names = inst.task_names
    g: list[list[G]] = []
    for i in range(n):
        row: list[G] = [1]
        for b in range(1, S):
            if b > i:
                row.append(0)
            elif b <= i - (n - S):
                row.append(1)
            else:
                row.append(builder.bool_var(f"g[{names[data.order[i]]},{b}]"))
        row.append(0)
        g.append(row)
    bott = builder.int_var(int(lower_bound), upper_bound, "B")
    m = StageModel(inst, builder, data, S, None if devices is None else tuple(devices), int(lower_bound),
                   upper_bound, g, bott)
    if devices is None:
        nd = inst.num_devices
        m.a = {(s, d): builder.bool_var(f"a[{s},{inst.device_names[d]}]") for s in range(S) for d in range(nd)}
        m.free_levels = sorted({int(data.level[p, q]) for p in range(nd) for q in range(nd) if p != q})
        max_work = int(data.dur.sum(axis=0).max(initial=0))
        max_comm = int(data.level_comm.sum(axis=0).max(initial=0))
        for s in range(S):
            m.work[s] = builder.int_var(0, max_work, f"w[{s}]")
            m.comm[s] = builder.int_var(0, max_comm if s < S - 1 else 0, f"k[{s}]")
        if len(m.free_levels) > 1:
            for bnd in range(1, S):
                for lvl in m.free_levels:
                    if lvl:
                        m.link[bnd, lvl] = builder.bool_var(f"l[{bnd},{lvl}]")
    _contiguity(m)
    _eligibility(m)
    if devices is None:
        _mapping(m)
        _links(m)
        _stage_time(m)
    _period(m)
    _memory(m)
    if devices is None:
        _symmetry(m)
    _objective(m, bottleneck_cap)
    return m


def _contiguity(m: StageModel) -> None:
    """1. mono: the stage index never decreases along π;  2. step: it grows by at most one per position."""
    b, g = m.builder, m.g
    for i in range(1, len(g)):
        for bnd in range(1, m.num_stages):
            _add(b, as_expr(g[i - 1][bnd]) - as_expr(g[i][bnd]) <= 0, cname("mono", i=i, b=bnd))
        for bnd in range(1, m.num_stages - 1):
            _add(b, as_expr(g[i][bnd + 1]) - as_expr(g[i - 1][bnd]) <= 0, cname("step", i=i, b=bnd))


def _eligibility(m: StageModel) -> None:
    """3. elig: no task in a stage whose device it may not run on."""
    b, data = m.builder, m.data
    for i in range(len(data.order)):
        for s in range(m.num_stages):
            if m.devices is not None:
                if data.inel[i, m.devices[s]]:
                    _add(b, m.y(i, s) <= 0, cname("elig", i=i, s=s))
            else:
                for d in np.flatnonzero(data.inel[i]):
                    _add(b, m.y(i, s) + m.a[s, int(d)] <= 1, cname("elig", i=i, s=s, d=int(d)))


def _mapping(m: StageModel) -> None:
    """4. assign: each stage on one device;  inject: each device hosts at most one stage."""
    b, nd, S = m.builder, m.instance.num_devices, m.num_stages
    for s in range(S):
        b.add(linear([(1, m.a[s, d]) for d in range(nd)]) == 1, cname("assign", s=s))
    for d in range(nd):
        _add(b, linear([(1, m.a[s, d]) for s in range(S)]) <= 1, cname("inject", d=d))


def _links(m: StageModel) -> None:
    """5. link: l[b,L] is 1 when stages b-1 and b sit on devices joined by a link of level L."""
    b, lv, nd = m.builder, m.data.level, m.instance.num_devices
    for (bnd, lvl), lit in m.link.items():
        for d in range(nd):
            partners = [q for q in range(nd) if q != d and int(lv[d, q]) == lvl]
            if not partners:
                continue
            expr = linear([(1, lit), (-1, m.a[bnd - 1, d])] + [(-1, m.a[bnd, q]) for q in partners])
            b.add(expr >= -1, cname("link", b=bnd, L=lvl, d=d))


def _stage_time(m: StageModel) -> None:
    """6. work: w[s] covers the stage's compute on its device;  comm: k[b-1] covers boundary b's traffic."""
    b, data, nd = m.builder, m.data, m.instance.num_devices
    for s in range(m.num_stages):
        for d in range(nd):
            b.add_if(m.a[s, d], m.work[s] - m.stage_sum(data.dur[:, d], s) >= 0, cname("work", s=s, d=d))
    for bnd in range(1, m.num_stages):
        if m.link:
            for lvl in m.free_levels:
                if lvl:
                    b.add_if(m.link[bnd, lvl], m.comm[bnd - 1] - m.cross_sum(data.level_comm[:, lvl], bnd) >= 0,
                             cname("comm", b=bnd, L=lvl))
        elif m.free_levels and m.free_levels[0]:
            lvl = m.free_levels[0]
            _add(b, m.comm[bnd - 1] - m.cross_sum(data.level_comm[:, lvl], bnd) >= 0, cname("comm", b=bnd))


def _period(m: StageModel) -> None:
    """7. period: the bottleneck covers every stage's compute plus outgoing communication."""
    b, data, S = m.builder, m.data, m.num_stages
    for s in range(S):
        if m.devices is None:
            expr = m.work[s] + m.comm[s]
        else:
            d = m.devices[s]
            expr = m.stage_sum(data.dur[:, d], s)
            if s < S - 1:
                lvl = int(data.level[d, m.devices[s + 1]])
                if lvl:
                    expr = expr + m.cross_sum(data.level_comm[:, lvl], s + 1)
        b.add(m.bottleneck - expr >= 0, cname("period", s=s))


def _memory(m: StageModel) -> None:
    """8. mem: the stage's parameters and in-flight activations fit on its device."""
    b, data, inst = m.builder, m.data, m.instance
    for s in range(m.num_stages):
        total = int(data.need[s].sum())
        load = m.stage_sum(data.need[s], s)
        if m.devices is not None:
            cap = int(inst.capacity_bytes[m.devices[s]])
            if cap < total:
                b.add(load <= cap, cname("mem", s=s))
        else:
            caps = [min(int(c), total) for c in inst.capacity_bytes]
            if min(caps, default=total) < total:
                b.add(load - linear([(c, m.a[s, d]) for d, c in enumerate(caps)]) <= 0, cname("mem", s=s))


def _symmetry(m: StageModel) -> None:
    """9. sym_used / sym_order: interchangeable devices are used in index order along the pipeline."""
    b, S = m.builder, m.num_stages
    for cl in m.instance.interchangeable_device_classes():
        for prev, d in zip(cl, cl[1:]):
            used_d = linear([(1, m.a[s, d]) for s in range(S)])
            used_p = linear([(1, m.a[s, prev]) for s in range(S)])
            _add(b, used_d - used_p <= 0, cname("sym_used", d=d))
            pos_d = linear([(s, m.a[s, d]) for s in range(S)])
            pos_p = linear([(s, m.a[s, prev]) for s in range(S)])
            _add(b, pos_d - pos_p - S * used_d >= 1 - S, cname("sym_order", d=d))


def _objective(m: StageModel, bottleneck_cap: int | None) -> None:
    """Objective, and 10. bcap in the traffic phase."""
    if bottleneck_cap is None:
        m.builder.minimize(m.bottleneck)
        return
    m.builder.add(m.bottleneck <= int(bottleneck_cap), "bcap")
    traffic = LinExpr({}, 0, {})
    for bnd in range(1, m.num_stages):
        traffic = traffic + m.cross_sum(m.data.edge_bytes, bnd)
    m.builder.minimize(traffic)


# ------------------------------------------------------------------------------------------------ hints, reading
def hint_split(m: StageModel, stage_of_pos: Sequence[int], devices: Sequence[int]) -> None:
    """Hint every variable from a split (stage per position) and its map."""
    b, data, S = m.builder, m.data, m.num_stages
    for i, row in enumerate(m.g):
        for bnd, gv in enumerate(row):
            if isinstance(gv, Var):
                b.hint(gv, int(stage_of_pos[i] >= bnd))
    if m.devices is None:
        for (s, d), av in m.a.items():
            b.hint(av, int(devices[s] == d))
        for (bnd, lvl), lit in m.link.items():
            b.hint(lit, int(int(data.level[devices[bnd - 1], devices[bnd]]) == lvl))
    compute = [0] * S
    for i, s in enumerate(stage_of_pos):
        compute[s] += int(data.dur[i, devices[s]])
    comm = [0] * S
    for pu, pv, k in data.cross:
        for s in range(stage_of_pos[pu], stage_of_pos[pv]):
            comm[s] += int(data.level_comm[k, data.level[devices[s], devices[s + 1]]])
    for s in m.work:
        b.hint(m.work[s], min(compute[s], m.work[s].ub))
        b.hint(m.comm[s], min(comm[s], m.comm[s].ub))
    period = max(c + k for c, k in zip(compute, comm))
    b.hint(m.bottleneck, min(max(period, m.bottleneck.lb), m.bottleneck.ub))


def _canonical(inst: SchedulingInstance, devices: Sequence[int]) -> tuple[int, ...]:
    """Relabel each class of interchangeable devices in stage order (what family 9 demands)."""
    out = list(devices)
    for cl in inst.interchangeable_device_classes():
        members = set(cl)
        used = [s for s, d in enumerate(devices) if d in members]
        for j, s in enumerate(used):
            out[s] = cl[j]
    return tuple(out)


def _read(m: StageModel, res: SolveResult) -> tuple[list[int], tuple[int, ...]]:
    """(stage per position, stage -> device) of a solution."""
    stage = [sum(1 for gv in row[1:-1] if (res.bool_value(gv) if isinstance(gv, Var) else gv)) for row in m.g]
    if m.devices is not None:
        return stage, m.devices
    devices = []
    for s in range(m.num_stages):
        on = [d for d in range(m.instance.num_devices) if res.bool_value(m.a[s, d])]
        if len(on) != 1:
            raise RuntimeError(f"stage {s} mapped to devices {on}")
        devices.append(on[0])
    return stage, tuple(devices)


# ------------------------------------------------------------------------------------------------ entry point
def dp_warm_start(inst: SchedulingInstance, data: StageData, num_stages: int, devices: tuple[int, ...] | None,
                  max_maps: int, budget_s: float, *,
                  policy: SolvePolicy = DEFAULT_SOLVE_POLICY) -> tuple[StagePlan | None, bool]:
    """Best DP split over candidate maps (measured as a plan), and whether that is exact (every canonical map
    was tried).

    FREE: first the S fastest devices in index order, then the canonical maps in turn, at most `max_maps` of them
    and at most as many as fit in `budget_s` at `policy.dp_cells_per_s` (each DP fills S (n+1)^2 cells).  The count
    depends only on the inputs, so the warm start is the same on a fast and a slow machine."""
    cells = num_stages * (len(data.order) + 1) ** 2
    max_maps = min(max_maps, max(1, int(policy.dp_cells_per_s * budget_s / cells)))
    if devices is not None:
        res = dp_for_map(inst, data, devices)
        return (None if res is None else _dp_plan(inst, data, res[1], devices)), True
    fastest = sorted(range(inst.num_devices), key=lambda d: (int(data.dur[:, d].sum()), d))[:num_stages]
    best = None
    exact = True
    maps = itertools.chain([_canonical(inst, sorted(fastest))], canonical_maps(inst, num_stages))
    for count, mp in enumerate(maps):
        if count > max_maps:
            exact = False
            break
        res = dp_for_map(inst, data, mp)
        if res is not None and (best is None or res[0] < best[0]):
            best = (res[0], res[1], tuple(mp))
    return (None if best is None else _dp_plan(inst, data, best[1], best[2])), exact


def _dp_plan(inst: SchedulingInstance, data: StageData, split: Sequence[int], devices: Sequence[int]) -> StagePlan:
    """A DP split as the known solution of the MILP (its status and bound are the driver's to set)."""
    return build_plan(inst, data, split, devices, lower_bound=0, status=PlanStatus.FEASIBLE,
                      method=PlanMethod.MILP_DP, solver="dp")


class StageFormulation(Formulation[StageModel, StagePlan]):
    """The stage formulation as the driver sees it.  `bottleneck_cap` given: the traffic phase (family 10),
    whose objective is bytes, not the bottleneck."""

    name = "stage"
    solution_noun = "stage split"

    def __init__(self, instance: SchedulingInstance, data: StageData, num_stages: int,
                 devices: tuple[int, ...] | None, *, lower_bound: int, upper_bound: int, method: PlanMethod,
                 bottleneck_cap: int | None = None) -> None:
        self.instance, self.data, self.num_stages, self.devices = instance, data, num_stages, devices
        self.lower_bound, self.upper_bound, self.method = lower_bound, upper_bound, method
        self.bottleneck_cap = bottleneck_cap
        self.objective_is_value = bottleneck_cap is None
        self.subject = instance.name

    def build(self, builder: ModelBuilder) -> StageModel:
        return build_stage_model(self.instance, builder, self.data, self.num_stages, self.devices,
                                 lower_bound=self.lower_bound, upper_bound=self.upper_bound,
                                 bottleneck_cap=self.bottleneck_cap)

    def hint(self, model: StageModel, solution: StagePlan) -> None:
        devices = solution.stage_device
        if self.devices is None:
            devices = _canonical(self.instance, devices)  # what family 9 demands of a FREE map
        hint_split(model, split_positions(solution, self.data, self.instance), devices)

    def read(self, model: StageModel, result: SolveResult) -> StagePlan:
        stage, devices = _read(model, result)
        return build_plan(self.instance, self.data, stage, devices, lower_bound=0, status=PlanStatus.FEASIBLE,
                          method=self.method, solver=result.solver_name, solver_version=result.solver_version)

    def value_tick(self, solution: StagePlan) -> int:
        return solution.bottleneck_tick

    def explain_infeasible(self, backend: Backend) -> str:
        return infeasibility_report(self.instance, self.data, self.num_stages, self.devices)


def solve_stages(
    instance: SchedulingInstance,
    num_stages: int,
    *,
    placement: PlacementArg = StagePlacement.FIXED,
    backend: str = "cpsat",
    time_limit_s: float = 30.0,
    threads: int = 8,
    seed: int = 0,
    param_copies: int = 1,
    inflight_microbatches: int | Sequence[int] = 1,
    comm_tiebreak: bool = False,
    warm_start: bool = True,
    max_dp_maps: int = 720,
    progress: ProgressCallback | None = None,
    policy: SolvePolicy = DEFAULT_SOLVE_POLICY,
) -> StagePlan:
    """Split `instance` into `num_stages` pipeline stages (see the module docstring).

    `placement`: StagePlacement.FIXED (stage s on device s), StagePlacement.FREE, or a list of devices (indices or
    names), one per stage.  `inflight_microbatches`: one number or one per stage.  `warm_start`: hint the DP's
    best split (exact on a given map, and on FREE when all canonical maps - at most `max_dp_maps` - fit in about
    a fifth of the time limit; its value is then also a proven bound); False leaves the formulation on its own
    (tests use it); `policy`: the DP's assumed speed and the driver's knobs.  `comm_tiebreak`: a second solve that keeps
    the bottleneck and minimises the traffic summed over all boundaries (taken when it finds a split with no more
    traffic; its optimality is not reported).

    Returns a StagePlan (OPTIMAL when the bound meets the bottleneck); raises InfeasibleError when no split fits
    (the message gives the smallest capacity that could), OpplanError when the time limit ends without a split.
    Both solves go through `formulations.driver.solve_formulation` (the DP split is the known solution).
    """
    t0 = time.monotonic()
    be = get_backend(backend)
    devices = resolve_placement(instance, num_stages, placement)
    data = stage_data(instance, num_stages, param_copies=param_copies, inflight_microbatches=inflight_microbatches)
    lb = trivial_lower_bound(instance, data, num_stages, devices)
    warm, exact = ((None, False) if not warm_start else
                   dp_warm_start(instance, data, num_stages, devices, max_dp_maps, 0.2 * time_limit_s,
                                 policy=policy))
    if warm_start and warm is None and exact:
        raise InfeasibleError(infeasibility_report(instance, data, num_stages, devices))
    if devices is None:
        cap_needed, _ = min_uniform_capacity(instance, data, num_stages)
        if cap_needed > int(instance.capacity_bytes.max(initial=0)):
            raise InfeasibleError(infeasibility_report(instance, data, num_stages, None))
    if warm is not None:
        ub = warm.bottleneck_tick
        if exact:
            lb = max(lb, warm.bottleneck_tick)
    else:
        ub = int(data.dur.sum(axis=0).max(initial=0)) + int(data.level_comm.sum(axis=0).max(initial=0))
    ub = max(ub, lb)
    method = PlanMethod.MILP_DP if warm is not None else PlanMethod.MILP

    def solve(cap: int | None, known: StagePlan | None) -> Solved[StagePlan]:
        """One driver call: the bottleneck phase (cap None), or the traffic phase under the cap."""
        formulation = StageFormulation(instance, data, num_stages, devices, lower_bound=lb, upper_bound=ub,
                                       method=method, bottleneck_cap=cap)
        return solve_formulation(formulation, backend=be, time_limit_s=time_limit_s, threads=threads, seed=seed,
                                 progress=progress, known=known, lower_bound_tick=lb, started_s=t0, policy=policy)

    first = solve(None, warm)
    plan, lb = first.solution, first.lower_bound_tick
    if comm_tiebreak and time.monotonic() - t0 < time_limit_s:
        second = solve(plan.bottleneck_tick, plan).solution
        if second.bottleneck_tick <= plan.bottleneck_tick and second.total_comm_bytes <= plan.total_comm_bytes:
            plan = second
    lb = min(lb, plan.bottleneck_tick)
    status = PlanStatus.OPTIMAL if lb >= plan.bottleneck_tick else PlanStatus.FEASIBLE
    return replace(plan, lower_bound_tick=lb, status=status, method=method, solver=be.name,
                   solver_version=be.version, solve_time_s=time.monotonic() - t0)
