r"""Placement-and-ordering formulation: which device runs each task, and when.

A flexible job shop with precedence, topology-aware communication delays and device memory, written once against
`formulations.model_api.ModelBuilder`.  Time is integer ticks.

Sets
    T                       tasks; E ⊆ T×T precedence edges (u, v); D devices
    D_t ⊆ D                 devices eligible for task t (duration < INELIGIBLE; pins and exclusions are folded in)
    K_e                     the distinct positive delays ("levels") edge e can have between two different devices
    G_1, G_2, ...           classes of interchangeable devices (see family 10)

Data
    p[t,d]                  duration of t on d;  p_min[t] = min_d p[t,d]
    c[e,a,b]                comm_tick[e, link_class[a, b]]: delay of e from device a to b (0 when a = b)
    π[t], α[t], ι[t]        param, activation (output) and internal bytes of t;  cap[d] device memory
    H                       horizon: the makespan of a known feasible schedule (warm start, list schedule or the
                            serial bound); LB = max(critical path, work bound) (`trivial_lower_bound_tick`)
    head[t], tail[t]        longest chain of fastest durations before t, and from t (itself included) to the end

Variables
    x[t,d] ∈ {0,1}          t runs on d (only d ∈ D_t)
    s[t] ∈ [head[t], H - tail[t]]       start;  e[t] = s[t] + Σ_d p[t,d] x[t,d]  (an expression, or an integer
                                                variable when t's durations differ between devices)
    same[e] ∈ {0,1}         both ends of e on one device (only where a delay, memory or the comm term needs it)
    w[e,k] ∈ {0,1}          e crosses a link with delay level k (only for edges with two or more levels)
    C ∈ [LB, H]             makespan
    memory (only when some device's memory can bind, or the peak term is weighted):
    h[t]                    end of t's output buffer on its own device
    y[t,d], r[t,d], q[t,d]  a received copy of t's output is held on d during [r, q)
    u[i,j] ∈ {0,1}          symmetry breaking: some of the first i tasks (in the class order) is on device j of
                            its class
    P                       peak memory in objective units (only with a peak-memory weight)

Objective
    minimise  W_C·C + W_P·P + W_V·Σ_e ⌈bytes[e] / unit⌉·(1 - same[e])       (`Objective`; default W_C = 1, rest 0)

Delay of edge e = (u, v):  δ[e] = c_e·(1 - same[e]) with one level c_e, Σ_k c_k·w[e,k] with several, 0 with none;
arrival a[e] = e[u] + δ[e].

Constraint families (name: what, built by)
    1. assign[t]:  Σ_{d∈D_t} x[t,d] = 1                                          `_assignment`
    2. dur[t]:     e[t] = s[t] + Σ_d p[t,d] x[t,d] (heterogeneous tasks only)    `_durations`
    3. noover[d]:  no_overlap over the optional intervals (s[t], p[t,d], x[t,d]), t with p[t,d] > 0; pairs already
                   ordered by a path in the DAG are declared so MILP backends skip them   `_no_overlap`
    4. colo[e,a]:  same[e] + x[u,a] - x[v,a] <= 1 (same only if colocated);
       same_lb[e,a]: same[e] >= x[u,a] + x[v,a] - 1 (same when colocated)       `_colocation`
    5. lvl[e,k,a]: w[e,k] >= x[u,a] + Σ_{b: c[e,a,b]=k} x[v,b] - 1;
       lvl_ub[e,k,a]: w[e,k] <= 1 - x[u,a] + Σ_{b: c[e,a,b]=k} x[v,b];  lvl_one[e]: Σ_k w[e,k] <= 1   `_levels`
    6. prec[i,j]:  s[v] >= e[u] + δ[e]                                            `_precedence`
    7. mk[t]:      C >= e[t] for every sink t;  load[d]: Σ_t p[t,d] x[t,d] <= C   `_makespan`
       mk_tail[t]: C >= e[t] + q[t] for a given delivery time q[t] > 0 (optional; with optional release times
                   r[t] <= s[t], the model of a window of a larger plan: `planner.lns`)
    8. memory, per device d whose memory can bind (or all with a peak weight)      `_memory`
         hold[t], hold_out[e], hold_same[e]: h[t] >= e[t], h[t] >= a[e] (every out-edge), h[t] >= e[v] if same[e]
         recv_on[t,v,d]: y[t,d] >= x[v,d] - x[t,d];  recv_from[e,d]: r[t,d] <= a[e] if x[v,d];
         recv_until[e,d]: q[t,d] >= e[v] if x[v,d]
         param_cap[d]: Σ_t π[t] x[t,d] <= cap[d]
         mem[d]: cumulative over  (s[t], h[t]) demand α[t] present x[t,d];  (r[t,d], q[t,d]) demand α[t] present
                 y[t,d];  (s[t], e[t]) demand ι[t] present x[t,d];  capacity cap[d] - Σ_t π[t] x[t,d]
                 (with a peak weight: capacity room[d], room[d] <= cap[d] - Σ_t π[t] x[t,d] and
                 peak[d]: room[d] + Σ_t π[t] x[t,d] <= P·unit)
       This is exactly the memory model of `planner.schedule.memory` (params held all step, outputs until the last
       local consumer ends and the last transfer has arrived, received copies from the first arrival to the last
       consumer there).  The inequalities on h, r, q only let buffers grow, so any solution is memory-safe and
       the tight values are always available.  CP-SAT's cumulative is exact; on MILP backends it becomes the safe
       bound "every buffer that may exist on d fits at once" (`formulations/backends/_milp.py`).
    9. busy (redundant): cumulative of the task intervals (s[t], e[t]) with demand 1 and capacity |D| (at most |D|
       tasks run at once); CP-SAT uses it for energetic reasoning, MILP backends drop it.   `_redundant`
   10. sym[t,d] / symu[t,d]: symmetry breaking for interchangeable devices.  Devices a and b are interchangeable
       when swapping them maps the instance onto itself (equal durations and capacities, and link classes that
       agree with every third device and between the two: `SchedulingInstance.interchangeable_device_classes`).
       Within a class d_1 < ... < d_k and the tasks t_1,
       t_2, ... (topological order) that may run there:  x[t_i, d_j] <= u[i-1, j-1] and
       u[i,j] <= u[i-1,j] + x[t_i,d_j], u[0,·] = 0: device d_j is used only after d_{j-1} (the first task on the
       class goes to d_1).  Every solution has an equivalent one (relabel the class in order of first use), so
       no optimum is lost.  `_symmetry`

Size: |x| = Σ_t |D_t| booleans; one optional interval per (t, d); same/w literals only on edges with a delay
(none on zero-communication graphs such as STG); 2·|D| colocation rows per such edge, 2·|K_e|·|D| level rows;
k·n symmetry literals and rows per class of k devices.  Measured: STG rand0001 (52 tasks, 238 edges) has 259
variables / 450 named constraints on 2 devices and 1,701 / 1,920 on 16 (symmetry rows dominate); on the MILP
backends the no-overlap pairs not ordered by the DAG add an order binary and two big-M rows each (16 devices:
8,469 columns, 15,439 rows).

Warm starts: `hint_schedule` hints every variable from a timed assignment after `canonical_devices` relabels
interchangeable devices in order of first use (so the hint satisfies family 10).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from formulations.model_api import LinExpr, ModelBuilder, Var, cname, interval, linear
from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.schedule.memory import memory_intervals, memory_profile


@dataclass(frozen=True)
class Objective:
    """Weights of the objective terms, all integers (CP-SAT needs integer coefficients).

    `makespan_weight` per tick of makespan; `peak_memory_weight` per `memory_unit_bytes` of the largest peak over
    devices; `comm_volume_weight` per `memory_unit_bytes` (rounded up per edge) of data crossing devices.
    """

    makespan_weight: int = 1
    peak_memory_weight: int = 0
    comm_volume_weight: int = 0
    memory_unit_bytes: int = 2**20

    def __post_init__(self) -> None:
        for f in ("makespan_weight", "peak_memory_weight", "comm_volume_weight", "memory_unit_bytes"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"Objective.{f} must be a non-negative integer, got {v!r}")
        if self.memory_unit_bytes <= 0:
            raise ValueError("Objective.memory_unit_bytes must be positive")
        if self.makespan_weight == 0 and self.peak_memory_weight == 0 and self.comm_volume_weight == 0:
            raise ValueError("Objective: at least one weight must be positive")

    @property
    def makespan_only(self) -> bool:
        return self.peak_memory_weight == 0 and self.comm_volume_weight == 0


MAKESPAN = Objective()


@dataclass
class PlacementModel:
    """The variables of one built formulation (for hints and extraction)."""

    instance: SchedulingInstance
    builder: ModelBuilder
    horizon: int
    lower_bound: int
    objective: Objective
    eligible: list[list[int]]
    x: dict[tuple[int, int], Var]
    start: list[Var]
    end: list[LinExpr]
    end_var: dict[int, Var]
    makespan: Var
    same: dict[int, Var] = field(default_factory=dict)
    levels: dict[int, list[tuple[int, Var, set[tuple[int, int]]]]] = field(default_factory=dict)
    delay: dict[int, LinExpr] = field(default_factory=dict)
    memory_devices: list[int] = field(default_factory=list)
    hold: dict[int, Var] = field(default_factory=dict)
    recv: dict[tuple[int, int], tuple[Var, Var, Var]] = field(default_factory=dict)
    peak: Var | None = None
    room: dict[int, Var] = field(default_factory=dict)
    classes: list[list[int]] = field(default_factory=list)
    sym_order: dict[int, list[int]] = field(default_factory=dict)
    sym_used: dict[tuple[int, int, int], Var] = field(default_factory=dict)  # (class, pos, j) -> u
    tail_tick: list[int] | None = None  # delivery times (family 7), when given

    def arrival(self, e: int) -> LinExpr:
        u = self.instance.edges[e][0]
        return self.end[u] + self.delay.get(e, LinExpr({}, 0, {}))


# ------------------------------------------------------------------------------------------------ data helpers
def heads_and_tails(instance: SchedulingInstance, release_tick: Sequence[int] | None = None,
                    tail_tick: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per task, the earliest start (longest chain of fastest durations before it, at least its release time) and
    the longest chain of fastest durations from it (itself included) to the end (at least its own duration plus
    its delivery time `tail_tick`)."""
    fastest = instance.min_duration_tick()
    n = instance.num_tasks
    head = np.zeros(n, dtype=np.int64)
    tail = np.zeros(n, dtype=np.int64)
    order = instance.topological_order
    for t in order:
        head[t] = max((head[u] + fastest[u] for u, _ in instance.predecessors[t]),
                      default=0)
        if release_tick is not None:
            head[t] = max(head[t], int(release_tick[t]))
    for t in reversed(order):
        tail[t] = fastest[t] + max((tail[v] for v, _ in instance.successors[t]), default=0)
        if tail_tick is not None:
            tail[t] = max(tail[t], fastest[t] + int(tail_tick[t]))
    return head, tail


def descendants(instance: SchedulingInstance) -> list[int]:
    """Per task, a bitmask (Python int) of the tasks reachable from it."""
    reach = [0] * instance.num_tasks
    for t in reversed(instance.topological_order):
        m = 0
        for v, _ in instance.successors[t]:
            m |= (1 << v) | reach[v]
        reach[t] = m
    return reach


def memory_may_bind(instance: SchedulingInstance) -> list[int]:
    """Devices whose capacity is below the sum of every byte any task could put there (others never overflow)."""
    worst = int(instance.param_bytes.sum() + instance.activation_bytes.sum() + instance.peak_internal_bytes.sum())
    return [d for d in range(instance.num_devices) if int(instance.capacity_bytes[d]) < worst]


# ------------------------------------------------------------------------------------------------ the model
def build_placement_model(
    instance: SchedulingInstance,
    builder: ModelBuilder,
    *,
    horizon: int,
    lower_bound: int = 0,
    objective: Objective = MAKESPAN,
    symmetry_breaking: bool = True,
    release_tick: Sequence[int] | None = None,
    tail_tick: Sequence[int] | None = None,
) -> PlacementModel:
    """Create variables, the numbered constraint families and the objective on `builder`.

    `release_tick` (optional, per task): task t may not start before `release_tick[t]` (a domain bound on s[t];
    large-neighbourhood search uses it to freeze the part of a plan it does not re-solve).  `tail_tick`
    (optional, per task): a delivery time, C >= e[t] + tail_tick[t] (family 7; the search uses it for the work
    that follows a task outside the model)."""
    n, nd = instance.num_tasks, instance.num_devices
    lower_bound = max(int(lower_bound), instance.trivial_lower_bound_tick())
    head, tail = heads_and_tails(instance, release_tick, tail_tick)
    if release_tick is not None or tail_tick is not None:  # these can push the earliest end past the trivial bound
        lower_bound = max(lower_bound, int((head + tail).max(initial=0)))
    horizon = max(int(horizon), lower_bound)
    eligible = [[d for d in range(nd) if instance.duration_tick[t, d] < INELIGIBLE] for t in range(n)]
    for t in range(n):
        if not eligible[t]:
            raise ValueError(f"task {instance.task_names[t]!r} has no eligible device")
    names = instance.task_names
    x = {(t, d): builder.bool_var(f"x[{names[t]},{d}]") for t in range(n) for d in eligible[t]}
    start = [builder.int_var(int(head[t]), int(horizon - tail[t]), f"s[{names[t]}]") for t in range(n)]
    fastest = instance.min_duration_tick()
    end: list[LinExpr] = []
    end_var: dict[int, Var] = {}
    for t in range(n):
        durs = {int(instance.duration_tick[t, d]) for d in eligible[t]}
        if len(durs) == 1:
            end.append(start[t] + durs.pop())
        else:
            ev = builder.int_var(int(head[t] + fastest[t]), int(horizon - tail[t] + fastest[t]), f"e[{names[t]}]")
            end_var[t] = ev
            end.append(ev + 0)
    makespan = builder.int_var(lower_bound, horizon, "C")
    m = PlacementModel(instance, builder, horizon, lower_bound, objective, eligible, x, start, end, end_var, makespan)
    m.tail_tick = [int(q) for q in tail_tick] if tail_tick is not None else None

    mem_devices = memory_may_bind(instance)
    if objective.peak_memory_weight:
        mem_devices = list(range(nd))
    m.memory_devices = mem_devices
    act = instance.activation_bytes

    _assignment(m)
    _durations(m)
    _no_overlap(m)
    need_same = set()
    for k, (u, _v) in enumerate(instance.edges):
        positive = {int(c) for c in instance.comm_tick[k, 1:] if c > 0}
        if len(positive) == 1:
            need_same.add(k)
        if mem_devices and act[u] > 0:
            need_same.add(k)
        if objective.comm_volume_weight and instance.edge_bytes[k] > 0:
            need_same.add(k)
    _colocation(m, sorted(need_same))
    _levels(m)
    _precedence(m)
    _makespan(m)
    if mem_devices:
        _memory(m)
    _redundant(m)
    if symmetry_breaking:
        _symmetry(m)
    _objective(m)
    return m


def _assignment(m: PlacementModel) -> None:
    """1. assign[t]: every task on exactly one eligible device."""
    for t in range(m.instance.num_tasks):
        m.builder.add(linear([(1, m.x[t, d]) for d in m.eligible[t]]) == 1, cname("assign", t=t))


def _durations(m: PlacementModel) -> None:
    """2. dur[t]: end = start + duration on the chosen device (only where durations differ)."""
    inst = m.instance
    for t, ev in m.end_var.items():
        expr = linear([(int(inst.duration_tick[t, d]), m.x[t, d]) for d in m.eligible[t]], 0)
        m.builder.add(ev == m.start[t] + expr, cname("dur", t=t))


def _no_overlap(m: PlacementModel) -> None:
    """3. noover[d]: one task at a time per device (zero-length tasks take no time and are left out)."""
    inst = m.instance
    reach = descendants(inst)
    for d in range(inst.num_devices):
        tasks = [t for t in range(inst.num_tasks) if (t, d) in m.x and inst.duration_tick[t, d] > 0]
        ivs = [interval(m.start[t], int(inst.duration_tick[t, d]), m.start[t] + int(inst.duration_tick[t, d]),
                        m.x[t, d], f"run[{inst.task_names[t]},{d}]") for t in tasks]
        ordered = [(i, j) for i, a in enumerate(tasks) for j, b in enumerate(tasks)
                   if i != j and (reach[a] >> b) & 1]
        if len(ivs) > 1:
            m.builder.no_overlap(ivs, cname("noover", d=d), ordered_pairs=ordered)


def _colocation(m: PlacementModel, edges: Sequence[int]) -> None:
    """4. colo / same_lb: same[e] is 1 exactly when both ends of e share a device."""
    inst, b = m.instance, m.builder
    for k in edges:
        u, v = inst.edges[k]
        same = b.bool_var(f"same[{k}]")
        m.same[k] = same
        for a in m.eligible[u]:
            terms = [(1, same), (1, m.x[u, a])]
            if (v, a) in m.x:
                terms.append((-1, m.x[v, a]))
            b.add(linear(terms) <= 1, cname("colo", e=k, a=a))
            if (v, a) in m.x:
                b.add(linear([(1, same), (-1, m.x[u, a]), (-1, m.x[v, a])]) >= -1, cname("same_lb", e=k, a=a))
        positive = {int(c) for c in inst.comm_tick[k, 1:] if c > 0}
        if len(positive) == 1:
            delay = positive.pop()
            # One positive level; a link class with zero delay would make the delay (1 - same) * delay wrong.
            if all(inst.comm(k, a, bb) == delay for a in m.eligible[u] for bb in m.eligible[v] if a != bb):
                m.delay[k] = delay - delay * same


def _levels(m: PlacementModel) -> None:
    """5. lvl / lvl_ub / lvl_one: w[e,k] is 1 exactly when e crosses a link whose delay is level k."""
    inst, b = m.instance, m.builder
    for k, (u, v) in enumerate(inst.edges):
        if k in m.delay:
            continue
        pair_delay = {(a, bb): inst.comm(k, a, bb) for a in m.eligible[u] for bb in m.eligible[v] if a != bb}
        levels = sorted({c for c in pair_delay.values() if c > 0})
        if not levels:
            continue
        lits = []
        for li, delay in enumerate(levels):
            w = b.bool_var(f"w[{k},{delay}]")
            pairs = {p for p, c in pair_delay.items() if c == delay}
            lits.append((delay, w, pairs))
            for a in m.eligible[u]:
                partners = [bb for (aa, bb) in pairs if aa == a]
                if not partners:
                    b.add(linear([(1, w), (1, m.x[u, a])]) <= 1, cname("lvl_ub", e=k, k=li, a=a))
                    continue
                in_lvl = [(1, m.x[v, bb]) for bb in partners]
                b.add(linear([(1, w), (-1, m.x[u, a])] + [(-c, y) for c, y in in_lvl]) >= -1,
                      cname("lvl", e=k, k=li, a=a))
                b.add(linear([(1, w), (1, m.x[u, a])] + [(-c, y) for c, y in in_lvl]) <= 1,
                      cname("lvl_ub", e=k, k=li, a=a))
        if len(lits) > 1:
            b.add(linear([(1, w) for _, w, _ in lits]) <= 1, cname("lvl_one", e=k))
        m.levels[k] = lits
        m.delay[k] = linear([(delay, w) for delay, w, _ in lits])


def _precedence(m: PlacementModel) -> None:
    """6. prec[i,j]: a task starts after each input has arrived."""
    for k, (u, v) in enumerate(m.instance.edges):
        m.builder.add(m.start[v] >= m.arrival(k), cname("prec", i=u, j=v))


def _makespan(m: PlacementModel) -> None:
    """7. mk[t]: the makespan covers every sink; load[d]: and every device's busy time."""
    inst, b = m.instance, m.builder
    for t in range(inst.num_tasks):
        if not inst.successors[t]:
            b.add(m.makespan >= m.end[t], cname("mk", t=t))
        if m.tail_tick is not None and m.tail_tick[t] > 0:
            b.add(m.makespan >= m.end[t] + m.tail_tick[t], cname("mk_tail", t=t))
    for d in range(inst.num_devices):
        terms = [(int(inst.duration_tick[t, d]), m.x[t, d]) for t in range(inst.num_tasks)
                 if (t, d) in m.x and inst.duration_tick[t, d] > 0]
        if len(terms) > 1:
            b.add(linear(terms) - m.makespan <= 0, cname("load", d=d))


def _memory(m: PlacementModel) -> None:
    """8. memory: parameters, outputs, received copies and working memory fit on every device at every moment."""
    inst, b = m.instance, m.builder
    n, H = inst.num_tasks, m.horizon
    act, par, internal = inst.activation_bytes, inst.param_bytes, inst.peak_internal_bytes
    mem = set(m.memory_devices)
    ivs: dict[int, list] = {d: [] for d in mem}
    dem: dict[int, list[int]] = {d: [] for d in mem}
    for t in range(n):
        if act[t] <= 0 or not any(d in mem for d in m.eligible[t]):
            continue
        h = b.int_var(int(m.start[t].lb), H, f"h[{inst.task_names[t]}]")
        m.hold[t] = h
        b.add(h >= m.end[t], cname("hold", t=t))
        for v, k in inst.successors[t]:
            b.add(h >= m.arrival(k), cname("hold_out", e=k))
            if k in m.same:
                b.add_if(m.same[k], h >= m.end[v], cname("hold_same", e=k))
        for d in m.eligible[t]:
            if d in mem:
                ivs[d].append(interval(m.start[t], h - m.start[t], h, m.x[t, d], f"act[{t},{d}]"))
                dem[d].append(int(act[t]))
    for t in range(n):
        if act[t] <= 0:
            continue
        for d in sorted(mem):
            consumers = [(v, k) for v, k in inst.successors[t] if (v, d) in m.x]
            if not consumers or m.eligible[t] == [d]:
                continue
            y = b.bool_var(f"y[{t},{d}]")
            r = b.int_var(0, H, f"r[{t},{d}]")
            q = b.int_var(0, H, f"q[{t},{d}]")
            m.recv[t, d] = (y, r, q)
            for v, k in consumers:
                terms = [(1, y), (-1, m.x[v, d])]
                if (t, d) in m.x:
                    terms.append((1, m.x[t, d]))
                b.add(linear(terms) >= 0, cname("recv_on", t=t, v=v, d=d))
                b.add_if(m.x[v, d], r <= m.arrival(k), cname("recv_from", e=k, d=d))
                b.add_if(m.x[v, d], q >= m.end[v], cname("recv_until", e=k, d=d))
            ivs[d].append(interval(r, q - r, q, y, f"recv[{t},{d}]"))
            dem[d].append(int(act[t]))
    for t in range(n):
        if internal[t] <= 0:
            continue
        for d in m.eligible[t]:
            if d in mem and inst.duration_tick[t, d] > 0:
                p = int(inst.duration_tick[t, d])
                ivs[d].append(interval(m.start[t], p, m.start[t] + p, m.x[t, d], f"work[{t},{d}]"))
                dem[d].append(int(internal[t]))
    obj = m.objective
    worst = int(par.sum() + act.sum() + internal.sum())
    if obj.peak_memory_weight:
        m.peak = b.int_var(0, -(-worst // obj.memory_unit_bytes), "P")
    for d in sorted(mem):
        params = linear([(int(par[t]), m.x[t, d]) for t in range(n) if (t, d) in m.x and par[t] > 0])
        cap = min(int(inst.capacity_bytes[d]), worst)  # beyond `worst` the capacity never binds
        if params.terms:
            b.add(params <= cap, cname("param_cap", d=d))
        if m.peak is not None:
            room = b.int_var(0, cap, f"room[{d}]")
            m.room[d] = room
            b.add(room + params <= cap, cname("room", d=d))
            b.add(room + params - obj.memory_unit_bytes * m.peak <= 0, cname("peak", d=d))
            capacity = room + 0
        else:
            capacity = cap - params
        if ivs[d]:
            b.cumulative(ivs[d], dem[d], capacity, cname("mem", d=d))


def _redundant(m: PlacementModel) -> None:
    """9. busy: at most |D| tasks run at once (implied; for the CP solver's propagation)."""
    inst, b = m.instance, m.builder
    ivs = []
    fastest = inst.min_duration_tick()
    for t in range(inst.num_tasks):
        if fastest[t] <= 0:
            continue
        ivs.append(interval(m.start[t], m.end[t] - m.start[t], m.end[t], None, f"busy[{t}]"))
    if len(ivs) > inst.num_devices:
        b.cumulative(ivs, [1] * len(ivs), inst.num_devices, "busy", redundant=True)


def _symmetry(m: PlacementModel) -> None:
    """10. sym / symu: interchangeable devices are used in order of first use."""
    inst, b = m.instance, m.builder
    m.classes = inst.interchangeable_device_classes()
    for ci, cl in enumerate(m.classes):
        if len(cl) < 2:
            continue
        order = [t for t in inst.topological_order if (t, cl[0]) in m.x]
        m.sym_order[ci] = order
        prev: list[Var | None] = [None] * len(cl)  # u[i-1, j]; None = 0
        for pos, t in enumerate(order):
            cur: list[Var | None] = [None] * len(cl)
            last = pos == len(order) - 1
            for j, d in enumerate(cl):
                if j > 0:
                    if prev[j - 1] is None:
                        b.add(m.x[t, d] + 0 <= 0, cname("sym", t=t, d=d))
                    else:
                        b.add(m.x[t, d] - prev[j - 1] <= 0, cname("sym", t=t, d=d))
                if last:
                    continue
                u = b.bool_var(f"u[{ci},{pos},{j}]")
                m.sym_used[ci, pos, j] = u
                rhs = m.x[t, d] + (prev[j] if prev[j] is not None else 0)
                b.add(u - rhs <= 0, cname("symu", t=t, d=d))
                cur[j] = u
            prev = cur


def _objective(m: PlacementModel) -> None:
    inst, obj = m.instance, m.objective
    expr = obj.makespan_weight * m.makespan
    if m.peak is not None:
        expr = expr + obj.peak_memory_weight * m.peak
    if obj.comm_volume_weight:
        unit = obj.memory_unit_bytes
        terms = []
        const = 0
        for k, same in m.same.items():
            units = -(-int(inst.edge_bytes[k]) // unit)
            if units:
                const += obj.comm_volume_weight * units
                terms.append((-obj.comm_volume_weight * units, same))
        expr = expr + linear(terms, const)
    m.builder.minimize(expr)


# ------------------------------------------------------------------------------------------------ warm starts
def canonical_devices(m: PlacementModel, device_of: Sequence[int]) -> list[int]:
    """Relabel devices inside each interchangeable class in order of first use (what family 10 demands)."""
    out = list(device_of)
    for ci, order in m.sym_order.items():
        cl = m.classes[ci]
        members = set(cl)
        mapping: dict[int, int] = {}
        for t in order:
            d = device_of[t]
            if d in members and d not in mapping:
                mapping[d] = cl[len(mapping)]
        for t in range(len(out)):
            if device_of[t] in mapping:
                out[t] = mapping[device_of[t]]
    return out


def hint_schedule(m: PlacementModel, device_of: Sequence[int], start: Sequence[int]) -> None:
    """Hint every formulation variable from a timed assignment (devices are relabelled canonically first)."""
    inst, b = m.instance, m.builder
    dev = canonical_devices(m, device_of)
    if any((t, dev[t]) not in m.x for t in range(inst.num_tasks)):
        return  # the schedule uses an ineligible device: not a usable hint
    n = inst.num_tasks
    s = [int(v) for v in start]
    end = [s[t] + int(inst.duration_tick[t, dev[t]]) for t in range(n)]
    vals: dict[int, int] = {}

    def put(var: Var, value: int) -> None:
        value = min(max(int(value), var.lb), var.ub)
        vals[var.index] = value
        b.hint(var, value)

    for (t, d), var in m.x.items():
        put(var, 1 if dev[t] == d else 0)
    for t in range(n):
        put(m.start[t], s[t])
        if t in m.end_var:
            put(m.end_var[t], end[t])
    tails = m.tail_tick or [0] * n
    put(m.makespan, max((end[t] + tails[t] for t in range(n)), default=0))
    for k, same in m.same.items():
        u, v = inst.edges[k]
        put(same, 1 if dev[u] == dev[v] else 0)
    for k, lits in m.levels.items():
        u, v = inst.edges[k]
        for _delay, w, pairs in lits:
            put(w, 1 if (dev[u], dev[v]) in pairs else 0)

    def arrival(k: int) -> int:
        u, v = inst.edges[k]
        return end[u] + inst.comm(k, dev[u], dev[v])

    for t, h in m.hold.items():
        val = end[t]
        for v, k in inst.successors[t]:
            val = max(val, arrival(k), end[v] if dev[v] == dev[t] else 0)
        put(h, val)
    for (t, d), (y, r, q) in m.recv.items():
        local = [(v, k) for v, k in inst.successors[t] if dev[v] == d]
        put(y, 1 if local and dev[t] != d else 0)
        put(r, min((arrival(k) for _, k in local), default=0))
        put(q, max((end[v] for v, _ in local), default=0))
    for (ci, pos, j), used in m.sym_used.items():
        order = m.sym_order[ci]
        d = m.classes[ci][j]
        put(used, 1 if any(dev[t] == d for t in order[: pos + 1]) else 0)
    if m.peak is not None:
        prof = memory_profile(inst, memory_intervals(inst, dev, s, end))
        unit = m.objective.memory_unit_bytes
        put(m.peak, -(-max(prof.peak_bytes, default=0) // unit))
        for d, room_var in m.room.items():
            params = sum(int(inst.param_bytes[t]) for t in range(n) if dev[t] == d)
            put(room_var, room_var.ub - params)
