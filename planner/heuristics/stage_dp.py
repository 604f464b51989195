r"""Pipeline stages: the result type, the data both methods read, and the exact dynamic program.

The problem (the formulation in `formulations.stages` states it as a model; this DP is its warm start and, on
a given map, its proof).  Cut the tasks, taken in the fixed topological order ``inst.topological_order``
(position 0 .. n-1), into S non-empty contiguous stages 0 .. S-1 and put stage s on device dev[s] (distinct
devices).  Because every edge (u, v) goes forward in that order, stage(u) <= stage(v): the stage graph is the
chain 0 -> 1 -> ... -> S-1.

* compute[s] = sum of the stage's task durations on dev[s].
* comm[s] (s < S-1) = the time to send, over the link dev[s] -> dev[s+1], every edge that crosses the boundary
  s | s+1, i.e. every edge (u, v) with stage(u) <= s < stage(v).  An edge that skips stages is forwarded stage by
  stage (as pipeline runtimes do) and is counted on every boundary it crosses, each time over that boundary's
  link.  The edges of one boundary are sent one after the other: comm[s] = sum_e comm_tick[e, link(dev[s],
  dev[s+1])].  The sender pays: comm[S-1] = 0.
* stage time[s] = compute[s] + comm[s]; the bottleneck (the steady-state period of a pipeline whose devices do
  not overlap sending with computing) is max_s stage time[s]; minimise it.
* memory[s] = param_copies * (parameter bytes of the stage) + inflight[s] * (activation bytes of the stage)
  <= capacity_bytes[dev[s]].  Simplification: every task's output is kept for each of the `inflight[s]`
  micro-batches in flight at stage s (e.g. 1F1B: S - s; one number for all stages is the worst case), working
  memory and received inputs are not counted, and parameters are counted `param_copies` times (DualPipe: 2).
* A task may not go to a stage whose device it is ineligible on.

`stages_dp` solves this exactly for a given stage -> device map in O(n^2 S) (numpy over a matrix of segment
costs per stage: the classic linear partition with a cut cost), and for a free map by running it for every
*canonical* injective map (devices that the instance cannot tell apart are used in index order), as long as
there are at most `max_maps` of those.
"""

from __future__ import annotations

import enum
import itertools
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.errors import InfeasibleError, InputError
from planner.schedule.plan import PlanMethod, PlanStatus

_INF = np.int64(2**62)


class StagePlacement(enum.StrEnum):
    """How stages are mapped to devices (a sequence of devices, one per stage, gives the map itself).

    The stage problem (this module, `formulations.stages`) takes FIXED and FREE: its stages sit on distinct
    devices.  V and DUALPIPE put two stages on each device; they are layouts of a training pipeline
    (`planner.pipeline.unroll.uniform_pipeline`).  A `StrEnum`, so the names a command line passes ('fixed',
    'v', ...) convert with ``StagePlacement(name)``."""

    FIXED = "fixed"  # stage s on device s (mod p for a pipeline with fewer devices: Megatron's looping layout)
    FREE = "free"  # the solver chooses an injective map (a pipeline: every task eligible everywhere)
    V = "v"  # 2p stages in a V: device i holds stages i and 2p-1-i (ZB-V, DualPipeV)
    DUALPIPE = "dualpipe"  # 2p stage copies in the V layout, run as two chains (DualPipe)


PlacementArg = StagePlacement | Sequence[int | str]


# ------------------------------------------------------------------------------------------------ result
@dataclass(frozen=True, eq=False)
class StagePlan:
    """A split into pipeline stages.  Per-stage tuples are indexed by stage; times in ticks, memory in bytes.

    `param_bytes` and `activation_bytes` are the raw sums of the stage's tasks; `memory_bytes` is what the model
    charges (param_copies x params + inflight x activations).  `comm_tick[s]` is the outgoing transfer time of
    stage s (0 for the last stage).  `status` is 'optimal' when `lower_bound_tick` meets `bottleneck_tick`.
    """

    instance_name: str
    num_stages: int
    stage_of: Mapping[str, int]  # task name -> stage
    stage_device: tuple[int, ...]  # stage -> device index
    device_names: tuple[str, ...]  # stage -> device name
    compute_tick: tuple[int, ...]
    comm_tick: tuple[int, ...]
    param_bytes: tuple[int, ...]
    activation_bytes: tuple[int, ...]
    memory_bytes: tuple[int, ...]
    capacity_bytes: tuple[int, ...]
    comm_bytes: tuple[int, ...]  # bytes crossing boundary s | s+1 (0 for the last stage)
    bottleneck_tick: int
    lower_bound_tick: int
    status: PlanStatus  # OPTIMAL or FEASIBLE
    method: PlanMethod  # DP, MILP or MILP_DP
    solver: str  # e.g. 'cpsat', 'cpsat+dp', 'dp'
    solver_version: str
    solve_time_s: float
    param_copies: int = 1
    inflight_microbatches: tuple[int, ...] = ()
    tick_s: float | None = None
    time_unit: str = "tick"
    stage_tasks: tuple[tuple[str, ...], ...] = field(default=())  # per stage, its tasks in topological order

    @property
    def stage_time_tick(self) -> tuple[int, ...]:
        return tuple(c + m for c, m in zip(self.compute_tick, self.comm_tick))

    @property
    def gap(self) -> float:
        """(bottleneck - lower bound) / bottleneck (0 when proven optimal)."""
        return (self.bottleneck_tick - self.lower_bound_tick) / max(1, self.bottleneck_tick)

    @property
    def total_comm_bytes(self) -> int:
        return sum(self.comm_bytes)


# ------------------------------------------------------------------------------------------------ data
@dataclass(frozen=True, eq=False)
class StageData:
    """Everything the DP and the formulation read, indexed by *position* in the topological order.

    `dur[i, d]` is 0 where the task is ineligible (`inel[i, d]` True) so that sums stay small; `need[s, i]` the
    bytes task i costs in stage s; `cross` the edges as (position of source, position of target, edge index),
    source first; `levels` groups link classes whose per-edge delays are identical (level 0 = same device), and
    `level[a, b]` is the level of the link from device a to device b.
    """

    order: tuple[int, ...]
    dur: np.ndarray  # int64 [n, D]
    inel: np.ndarray  # bool [n, D]
    param: np.ndarray  # int64 [n]
    act: np.ndarray  # int64 [n]
    need: np.ndarray  # int64 [S, n]
    cross: tuple[tuple[int, int, int], ...]
    level_comm: np.ndarray  # int64 [n_edges, n_levels]; column 0 all zero
    level: np.ndarray  # int64 [D, D]
    edge_bytes: np.ndarray  # int64 [n_edges]
    param_copies: int
    inflight: tuple[int, ...]


def inflight_per_stage(num_stages: int, inflight_microbatches: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(inflight_microbatches, (int, np.integer)) and not isinstance(inflight_microbatches, bool):
        vals = (int(inflight_microbatches),) * num_stages
    else:
        vals = tuple(int(v) for v in inflight_microbatches)  # type: ignore[union-attr]
        if len(vals) != num_stages:
            raise ValueError(f"inflight_microbatches has {len(vals)} entries for {num_stages} stages")
    if any(v < 0 for v in vals):
        raise ValueError("inflight_microbatches must be non-negative")
    return vals


def stage_data(inst: SchedulingInstance, num_stages: int, *, param_copies: int = 1,
               inflight_microbatches: int | Sequence[int] = 1) -> StageData:
    if param_copies < 0:
        raise ValueError("param_copies must be non-negative")
    order = tuple(inst.topological_order)
    pos = np.empty(inst.num_tasks, dtype=np.int64)
    pos[list(order)] = np.arange(len(order))
    raw = inst.duration_tick[list(order), :] if order else np.zeros((0, inst.num_devices), dtype=np.int64)
    inel = raw >= INELIGIBLE
    dur = np.where(inel, 0, raw).astype(np.int64)
    param = inst.param_bytes[list(order)].astype(np.int64) if order else np.zeros(0, dtype=np.int64)
    act = inst.activation_bytes[list(order)].astype(np.int64) if order else np.zeros(0, dtype=np.int64)
    inflight = inflight_per_stage(num_stages, inflight_microbatches)
    need = np.array([param_copies * param + k * act for k in inflight], dtype=np.int64).reshape(num_stages, -1)
    cross = tuple((int(pos[u]), int(pos[v]), k) for k, (u, v) in enumerate(inst.edges))
    # Levels: link classes with the same delay for every edge are one level.
    cols: list[tuple[int, ...]] = [tuple([0] * len(inst.edges))]
    class_level = [0]
    for c in range(1, inst.num_link_classes):
        col = tuple(int(x) for x in inst.comm_tick[:, c])
        if col not in cols:
            cols.append(col)
        class_level.append(cols.index(col))
    level_comm = np.array(cols, dtype=np.int64).T.reshape(len(inst.edges), len(cols))
    level = np.array(class_level, dtype=np.int64)[inst.link_class]
    return StageData(order, dur, inel, param, act, need, cross, level_comm, level, inst.edge_bytes.copy(),
                     int(param_copies), inflight)


def cut_cost(data: StageData, lvl: int) -> np.ndarray:
    """int64 [n + 1]: at boundary position j (positions < j before, >= j after), the summed delay at link level
    `lvl` of the edges crossing it."""
    n = len(data.order)
    diff = np.zeros(n + 2, dtype=np.int64)
    for pu, pv, k in data.cross:
        c = int(data.level_comm[k, lvl])
        if c:
            diff[pu + 1] += c
            diff[pv + 1] -= c
    return np.cumsum(diff)[: n + 1]


def cut_bytes(data: StageData) -> np.ndarray:
    n = len(data.order)
    diff = np.zeros(n + 2, dtype=np.int64)
    for pu, pv, k in data.cross:
        diff[pu + 1] += int(data.edge_bytes[k])
        diff[pv + 1] -= int(data.edge_bytes[k])
    return np.cumsum(diff)[: n + 1]


# ------------------------------------------------------------------------------------------------ maps
def canonical_maps(inst: SchedulingInstance, num_stages: int) -> Iterator[tuple[int, ...]]:
    """Every injective stage -> device map up to symmetry: inside each device class the devices are taken in
    index order (the first stage on the class gets its first device, ...)."""
    classes = inst.interchangeable_device_classes()

    def rec(prefix: list[int], used: list[int]) -> Iterator[tuple[int, ...]]:
        if len(prefix) == num_stages:
            yield tuple(prefix)
            return
        for ci, cl in enumerate(classes):
            if used[ci] < len(cl):
                prefix.append(cl[used[ci]])
                used[ci] += 1
                yield from rec(prefix, used)
                used[ci] -= 1
                prefix.pop()

    yield from rec([], [0] * len(classes))


def resolve_placement(inst: SchedulingInstance, num_stages: int, placement: PlacementArg) -> tuple[int, ...] | None:
    """The stage -> device map (None for FREE); InfeasibleError when there are too few devices, InputError for a
    malformed map."""
    if not isinstance(num_stages, (int, np.integer)) or isinstance(num_stages, bool) or num_stages < 1:
        raise ValueError(f"num_stages must be a positive integer, got {num_stages!r}")
    if num_stages > inst.num_tasks:
        raise InfeasibleError(f"cannot cut {inst.num_tasks} tasks of {inst.name!r} into {num_stages} non-empty "
                              f"stages", fix=f"use at most {inst.num_tasks} stages")
    if placement in (StagePlacement.V, StagePlacement.DUALPIPE):
        raise InputError(f"placement {placement.value!r} puts two stages on a device; the stage split needs "
                         f"distinct devices", fix="use StagePlacement.FIXED, FREE or a list of devices")
    if isinstance(placement, StagePlacement):
        if num_stages > inst.num_devices:
            raise InfeasibleError(f"{num_stages} stages need {num_stages} distinct devices, {inst.name!r} has "
                                  f"{inst.num_devices}", fix=f"use at most {inst.num_devices} stages")
        return tuple(range(num_stages)) if placement is StagePlacement.FIXED else None
    if isinstance(placement, str):
        raise InputError(f"placement {placement!r} is neither StagePlacement.FIXED/FREE nor a list of devices")
    out = []
    for p in placement:
        if isinstance(p, str):
            if p not in inst.device_names:
                raise InputError(f"stage map names unknown device {p!r}",
                                 fix=f"choose from {', '.join(inst.device_names)}")
            out.append(inst.device_names.index(p))
        elif isinstance(p, (int, np.integer)) and 0 <= int(p) < inst.num_devices:
            out.append(int(p))
        else:
            raise InputError(f"stage map entry {p!r} is not a device of {inst.name!r}")
    if len(out) != num_stages:
        raise InputError(f"stage map has {len(out)} devices for {num_stages} stages")
    if len(set(out)) != len(out):
        raise InputError(f"stage map {out} uses a device twice (stages need distinct devices)")
    return tuple(out)


# ------------------------------------------------------------------------------------------------ evaluation
def build_plan(inst: SchedulingInstance, data: StageData, stage_of_pos: Sequence[int], devices: Sequence[int], *,
               lower_bound: int, status: PlanStatus, method: PlanMethod, solver: str, solver_version: str = "",
               solve_time_s: float = 0.0) -> StagePlan:
    """Measure a split (stage per position) on a map, checking that it is a valid one (contiguous, non-empty,
    eligible, within memory); a violation is a bug in the caller and raises RuntimeError."""
    n, S = len(data.order), len(devices)
    st = [int(x) for x in stage_of_pos]
    problems = []
    if len(st) != n or (n and (st[0] != 0 or st[-1] != S - 1)):
        problems.append(f"stages {st} do not start at 0 and end at {S - 1}")
    if any(b - a not in (0, 1) for a, b in zip(st, st[1:])):
        problems.append(f"stages {st} are not contiguous and non-empty")
    if problems:
        raise RuntimeError(f"invalid stage split of {inst.name!r}: {problems}")
    compute = [0] * S
    params = [0] * S
    acts = [0] * S
    mem = [0] * S
    for i, s in enumerate(st):
        d = devices[s]
        if data.inel[i, d]:
            raise RuntimeError(f"task {inst.task_names[data.order[i]]} is in stage {s} on ineligible device {d}")
        compute[s] += int(data.dur[i, d])
        params[s] += int(data.param[i])
        acts[s] += int(data.act[i])
        mem[s] += int(data.need[s, i])
    comm = [0] * S
    cbytes = [0] * S
    for pu, pv, k in data.cross:
        for s in range(st[pu], st[pv]):
            comm[s] += int(data.level_comm[k, data.level[devices[s], devices[s + 1]]])
            cbytes[s] += int(data.edge_bytes[k])
    caps = [int(inst.capacity_bytes[d]) for d in devices]
    for s in range(S):
        if mem[s] > caps[s]:
            raise RuntimeError(f"stage {s} holds {mem[s]} bytes on device {devices[s]} of {caps[s]}")
    bottleneck = max((c + m for c, m in zip(compute, comm)), default=0)
    names = inst.task_names
    return StagePlan(
        instance_name=inst.name, num_stages=S, stage_of={names[t]: st[i] for i, t in enumerate(data.order)},
        stage_device=tuple(int(d) for d in devices), device_names=tuple(inst.device_names[d] for d in devices),
        compute_tick=tuple(compute), comm_tick=tuple(comm), param_bytes=tuple(params), activation_bytes=tuple(acts),
        memory_bytes=tuple(mem), capacity_bytes=tuple(caps), comm_bytes=tuple(cbytes), bottleneck_tick=bottleneck,
        lower_bound_tick=min(int(lower_bound), bottleneck), status=status, method=method, solver=solver,
        solver_version=solver_version, solve_time_s=float(solve_time_s), param_copies=data.param_copies,
        inflight_microbatches=data.inflight, tick_s=inst.tick_s, time_unit=inst.time_unit,
        stage_tasks=tuple(tuple(names[t] for i, t in enumerate(data.order) if st[i] == s) for s in range(S)))


def trivial_lower_bound(inst: SchedulingInstance, data: StageData, num_stages: int,
                        devices: Sequence[int] | None) -> int:
    """max(ceil(total fastest work / S), largest single task at its fastest), over the devices stages may use."""
    cand = list(devices) if devices is not None else list(range(inst.num_devices))
    if not len(data.order):
        return 0
    dur = np.where(data.inel[:, cand], _INF, data.dur[:, cand]).min(axis=1)
    dur = np.where(dur >= _INF, 0, dur)
    return int(max(-(-int(dur.sum()) // num_stages), int(dur.max(initial=0))))


# ------------------------------------------------------------------------------------------------ the DP
def _partition(n: int, S: int, seg: Sequence[np.ndarray]) -> tuple[int, list[int]] | None:
    """min over cuts 0 = c_0 < c_1 < ... < c_S = n of max_s seg[s][c_s, c_{s+1}] (entries >= _INF: forbidden).
    Returns (value, [c_1, ..., c_{S-1}]) or None."""
    f = np.full(n + 1, _INF, dtype=np.int64)
    f[0] = 0
    arg: list[np.ndarray] = []
    mask = np.triu(np.ones((n + 1, n + 1), dtype=bool), k=1)  # i < j
    for s in range(S):
        cost = np.where(mask & (seg[s] < _INF), np.maximum(f[:, None], seg[s]), _INF)
        best = cost.argmin(axis=0)
        f = cost[best, np.arange(n + 1)]
        arg.append(best)
    if f[n] >= _INF:
        return None
    cuts = [n]
    for s in range(S - 1, 0, -1):
        cuts.append(int(arg[s][cuts[-1]]))
    return int(f[n]), cuts[::-1][:-1]


def _segments(inst: SchedulingInstance, data: StageData, devices: Sequence[int], *, memory: bool = True,
              time: bool = True) -> list[np.ndarray]:
    """Per stage, the [n+1, n+1] matrix of the cost of positions [i, j) as that stage (_INF when forbidden)."""
    n = len(data.order)
    S = len(devices)
    cuts: dict[int, np.ndarray] = {}
    out = []
    for s, d in enumerate(devices):
        work = np.concatenate([[0], np.cumsum(data.dur[:, d])])
        bad = np.concatenate([[0], np.cumsum(data.inel[:, d].astype(np.int64))])
        need = np.concatenate([[0], np.cumsum(data.need[s])])
        cost = (work[None, :] - work[:, None]) if time else np.zeros((n + 1, n + 1), dtype=np.int64)
        if time and s < S - 1:
            lvl = int(data.level[d, devices[s + 1]])
            if lvl not in cuts:
                cuts[lvl] = cut_cost(data, lvl)
            cost = cost + cuts[lvl][None, :]
        forbidden = (bad[None, :] - bad[:, None]) > 0
        if memory:
            forbidden |= (need[None, :] - need[:, None]) > int(inst.capacity_bytes[d])
        out.append(np.where(forbidden, _INF, cost))
    return out


def _split_from_cuts(n: int, cuts: Sequence[int]) -> list[int]:
    st = [0] * n
    for b, c in enumerate(cuts, start=1):
        for i in range(c, n):
            st[i] = b
    return st


def dp_for_map(inst: SchedulingInstance, data: StageData, devices: Sequence[int]) -> tuple[int, list[int]] | None:
    """Optimal (bottleneck, stage per position) for a fixed map, or None when no split fits."""
    n = len(data.order)
    res = _partition(n, len(devices), _segments(inst, data, devices))
    if res is None:
        return None
    return res[0], _split_from_cuts(n, res[1])


def min_uniform_capacity(inst: SchedulingInstance, data: StageData, num_stages: int) -> tuple[int, list[int]]:
    """The smallest capacity every stage device could have for some split to fit (eligibility ignored): the
    memory-balanced split's largest stage, and that split (stage per position)."""
    n = len(data.order)
    segs = []
    for s in range(num_stages):
        need = np.concatenate([[0], np.cumsum(data.need[s])])
        segs.append(need[None, :] - need[:, None])
    res = _partition(n, num_stages, segs)
    assert res is not None
    return res[0], _split_from_cuts(n, res[1])


def infeasibility_report(inst: SchedulingInstance, data: StageData, num_stages: int,
                         devices: Sequence[int] | None, *, note: str = "") -> str:
    """Why no split fits: eligibility (pins) or memory; for memory, the smallest capacity that could fit and the
    stage that does not fit on the memory-balanced split."""
    S = num_stages
    maps = [tuple(devices)] if devices is not None else None
    if maps is not None and _partition(len(data.order), S, _segments(inst, data, maps[0], memory=False)) is None:
        return (f"no split of {inst.name!r} into {S} contiguous stages on devices "
                f"{[inst.device_names[d] for d in maps[0]]} puts every task on an eligible device"
                + (f"; {note}" if note else ""))
    cap_needed, split = min_uniform_capacity(inst, data, S)
    least = data.need.min(axis=0) if len(data.order) else np.zeros(0, dtype=np.int64)
    total = int(least.sum())
    largest = int(least.max(initial=0))
    need_per_stage = [int(sum(data.need[s, i] for i, x in enumerate(split) if x == s)) for s in range(S)]
    if devices is not None:
        stage_dev = list(devices)
    else:  # the largest stages on the largest devices
        by_cap = sorted(range(inst.num_devices), key=lambda d: -int(inst.capacity_bytes[d]))[:S]
        by_need = sorted(range(S), key=lambda s: -need_per_stage[s])
        stage_dev = [0] * S
        for s, d in zip(by_need, by_cap):
            stage_dev[s] = d
    worst = max(range(S), key=lambda s: need_per_stage[s] - int(inst.capacity_bytes[stage_dev[s]]))
    d = stage_dev[worst]
    cap = int(inst.capacity_bytes[d])
    msg = (f"no split of {inst.name!r} into {S} contiguous stages fits in device memory: the smallest capacity "
           f"that could fit is {_fmt(cap_needed)} per stage device (memory-balanced split; at least total "
           f"{_fmt(total)} / {S} = {_fmt(-(-total // S))} and the largest task {_fmt(largest)}); on that split "
           f"stage {worst} needs {_fmt(need_per_stage[worst])} on {inst.device_names[d]} (capacity {_fmt(cap)}")
    msg += f", {_fmt(need_per_stage[worst] - cap)} over)" if need_per_stage[worst] > cap else ")"
    return msg + (f"; {note}" if note else "")


def _fmt(b: int) -> str:
    return f"{b} bytes" if b < 2**20 else f"{b} bytes ({b / 2**30:.3g} GiB)"


def stages_dp(inst: SchedulingInstance, num_stages: int, *, placement: PlacementArg = StagePlacement.FIXED,
              param_copies: int = 1, inflight_microbatches: int | Sequence[int] = 1,
              max_maps: int = 5040) -> StagePlan:
    """Exact optimum by dynamic programming (see the module docstring); InfeasibleError when nothing fits.

    FIXED or a given map: one DP, O(n^2 S).  FREE: one DP per canonical map (ValueError when there are more than
    `max_maps`; use `formulations.stages.solve_stages` then).
    """
    t0 = time.monotonic()
    devices = resolve_placement(inst, num_stages, placement)
    data = stage_data(inst, num_stages, param_copies=param_copies, inflight_microbatches=inflight_microbatches)
    if devices is not None:
        maps: list[tuple[int, ...]] = [devices]
    else:
        maps = list(itertools.islice(canonical_maps(inst, num_stages), max_maps + 1))
        if len(maps) > max_maps:
            raise ValueError(f"{inst.name!r}: more than {max_maps} distinct stage maps; the DP enumerates them all "
                             f"(use solve_stages for FREE placement on many devices)")
    best: tuple[int, list[int], tuple[int, ...]] | None = None
    for mp in maps:
        res = dp_for_map(inst, data, mp)
        if res is not None and (best is None or res[0] < best[0]):
            best = (res[0], res[1], mp)
    if best is None:
        raise InfeasibleError(infeasibility_report(inst, data, num_stages, devices))
    value, split, mp = best
    plan = build_plan(inst, data, split, mp, lower_bound=value, status=PlanStatus.OPTIMAL, method=PlanMethod.DP,
                      solver="dp", solve_time_s=time.monotonic() - t0)
    if plan.bottleneck_tick != value:  # pragma: no cover - the DP and the measurement disagree
        raise RuntimeError(f"DP value {value} but the split measures {plan.bottleneck_tick}")
    return plan


def split_positions(plan: StagePlan, data: StageData, inst: SchedulingInstance) -> list[int]:
    """Stage per position of a plan (for hints)."""
    return [plan.stage_of[inst.task_names[t]] for t in data.order]


__all__ = ["StagePlacement", "StagePlan", "StageData", "stage_data", "stages_dp", "resolve_placement",
           "canonical_maps", "build_plan", "trivial_lower_bound", "infeasibility_report",
           "min_uniform_capacity", "dp_for_map", "split_positions"]
