"""Discrete-event replay of per-device task orders on a `SchedulingInstance`.

Model.  Each device has one compute stream that runs its tasks in the given order, each as early as possible:

    start(t) = max(end of the previous task on t's device, max over edges (u, t) of arrival(u -> t))
    arrival(u -> t) = end(u)                                    if u and t share a device
                    = leave(u -> t) + comm(edge, dev(u), dev(t))  otherwise

Communication overlaps with compute (a separate stream per link).  Without contention (default) every transfer
leaves when its source ends.  With `link_contention=True` transfers on the same **directed device pair**
(src device -> dst device) serialize, first-come first-served in the order their sources end (ties: the order in
which the simulator processes those end events, deterministic); different pairs, and the two directions of a pair,
never interfere, and a device may send on several links at once (no send-port limit).  A transfer occupies its link
for its whole `comm` (latency included).

Orders inconsistent with precedence (a device must run t before u although t needs u, directly or through other
devices) raise `DeadlockError` naming the tasks each device is stuck on and what they wait for.

`retime_plan` keeps a plan's device assignment and per-device order and recomputes the times on an instance
(possibly of other hardware): the library side of ``plan-simulate --plan plan.json --hw other.yaml``.

Processor sharing (`sharing=`, optional; `planner.cost.sharing`): devices that are ranks of one host with fewer
cores than ranks slow each other down while they compute at once.  A task's duration is then its solo work
(duration x the speed at which the profile was measured, `SharedHosts.calibrated_speed`), drained at
`SharedHosts.speed(host, k)` while k devices of its host compute; the rates change whenever a task of that host
starts or ends, and a device waiting for an arrival wakes at that arrival.  Times are continuous inside and
rounded to ticks in the `Timeline`.  Without `sharing` (every existing call) the replay is the plain one above,
bit for bit.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Mapping, Sequence

from planner.cost.instance import SchedulingInstance
from planner.cost.sharing import SharedHosts
from planner.schedule.actions import try_parse_action
from planner.schedule.errors import DeadlockError, SimulationError
from planner.schedule.plan import Plan, PlanMethod, PlanStatus
from planner.schedule.program import Schedule, schedule_to_instance_order
from planner.schedule.timeline import Timeline, build_timeline


def _resolve_orders(instance: SchedulingInstance, orders: Sequence[Sequence[int | str]]) -> list[list[int]]:
    if len(orders) > instance.num_devices:
        raise SimulationError(
            f"orders name {len(orders)} devices, instance {instance.name!r} has {instance.num_devices}"
        )
    index = instance.task_index
    out: list[list[int]] = []
    seen: dict[int, int] = {}
    problems: list[str] = []
    for d, row in enumerate(orders):
        res: list[int] = []
        for x in row:
            if isinstance(x, str):
                if x not in index:
                    problems.append(f"unknown task {x!r} on device {instance.device_names[d]}")
                    continue
                t = index[x]
            else:
                t = int(x)
                if not 0 <= t < instance.num_tasks:
                    problems.append(f"task index {t} out of range on device {instance.device_names[d]}")
                    continue
            if t in seen:
                problems.append(
                    f"task {instance.task_names[t]!r} ordered twice (devices {instance.device_names[seen[t]]} and "
                    f"{instance.device_names[d]})"
                )
                continue
            if not instance.eligible(t, d):
                problems.append(f"task {instance.task_names[t]!r} cannot run on device {instance.device_names[d]}")
            seen[t] = d
            res.append(t)
        out.append(res)
    out.extend([] for _ in range(instance.num_devices - len(out)))
    missing = [instance.task_names[t] for t in range(instance.num_tasks) if t not in seen]
    if missing:
        problems.append(f"tasks {missing[:8]} are in no device's order" + (" ..." if len(missing) > 8 else ""))
    if problems:
        raise SimulationError(f"cannot simulate instance {instance.name!r}: " + "; ".join(problems[:6]))
    return out


def simulate(
    instance: SchedulingInstance,
    orders: Sequence[Sequence[int | str]],
    *,
    link_contention: bool = False,
    stages: Mapping[str, int | None] | None = None,
    sharing: SharedHosts | None = None,
    rank_transfer_tick: tuple[float, float] | None = None,
) -> Timeline:
    """Replay `orders[d]` (task indices or names, in execution order) on device d; return the `Timeline`.
    `sharing`: replay under processor sharing between the ranks of a host (module docstring).
    `rank_transfer_tick` (with `sharing` only): (send, receive) ticks of each transfer's own work on its ranks, as
    priced at the calibration's concurrency (a profile's `send_overhead`, `recv_overhead`, which its links' latency
    already holds): charged to the ranks' streams instead, i.e. subtracted from every transfer's comm time, the
    sender busy for its sends right after the producing task (its transfers leave when they are done), the
    receiver for its receives at the start of the consuming task; both shared like compute."""
    seq = _resolve_orders(instance, orders)
    if sharing is not None:
        if len(sharing.host_of_device) != instance.num_devices:
            raise SimulationError(f"sharing describes {len(sharing.host_of_device)} devices, instance "
                                  f"{instance.name!r} has {instance.num_devices}")
        return _simulate_shared(instance, seq, link_contention, stages, sharing, rank_transfer_tick or (0.0, 0.0))
    if rank_transfer_tick is not None:
        raise SimulationError("rank_transfer_tick needs sharing (a replay whose ranks' streams take extra work)")
    n, num_dev = instance.num_tasks, instance.num_devices
    device_of = _device_of(n, seq)
    dur = instance.duration_tick
    pending = [len(p) for p in instance.predecessors]
    ready_at = [0] * n
    start = [-1] * n
    end = [-1] * n
    pos = [0] * num_dev
    dev_free = [0] * num_dev
    busy = [False] * num_dev
    link_free: dict[tuple[int, int], int] = {}
    transfer_times: dict[int, tuple[int, int]] = {}
    heap: list[tuple[int, int, int]] = []
    counter = 0

    def try_start(d: int) -> None:
        nonlocal counter
        if busy[d] or pos[d] >= len(seq[d]):
            return
        t = seq[d][pos[d]]
        if pending[t]:
            return
        s = max(dev_free[d], ready_at[t])
        start[t], end[t] = s, s + int(dur[t, d])
        busy[d] = True
        heapq.heappush(heap, (end[t], counter, t))
        counter += 1

    for d in range(num_dev):
        try_start(d)
    while heap:
        now, _, u = heapq.heappop(heap)
        du = device_of[u]
        busy[du] = False
        dev_free[du] = now
        pos[du] += 1
        touched = {du}
        _deliver(instance, u, now, device_of, instance.comm, link_contention, link_free, transfer_times, ready_at,
                 pending, touched)
        for d in sorted(touched):
            try_start(d)

    if any(s < 0 for s in start):
        raise _deadlock(instance, seq, pos, device_of, start)
    return build_timeline(instance, device_of, start, end, transfer_times=transfer_times, stages=stages,
                          link_contention=link_contention)


def _simulate_shared(instance: SchedulingInstance, seq: list[list[int]], link_contention: bool,
                     stages: Mapping[str, int | None] | None, sharing: SharedHosts,
                     rank_transfer_tick: tuple[float, float]) -> Timeline:
    """`simulate` under processor sharing (module docstring): an event loop in continuous ticks whose events are
    a running task's end (at the rates of the moment) and a waiting device's next arrival."""
    n, num_dev = instance.num_tasks, instance.num_devices
    device_of = _device_of(n, seq)
    host = sharing.host_of_device
    cal_speed = [sharing.calibrated_speed(host[d]) for d in range(num_dev)]
    dur = instance.duration_tick
    pending = [len(p) for p in instance.predecessors]
    ready_at = [0.0] * n
    start = [-1.0] * n
    end = [-1.0] * n
    pos = [0] * num_dev
    dev_free = [0.0] * num_dev
    running: dict[int, int] = {}  # device -> its running task
    sending: set[int] = set()  # devices whose running task is done computing and is sending its outputs
    send_tick, recv_tick = rank_transfer_tick
    cross_out, cross_in = _rank_transfers(instance, seq, device_of)
    left: dict[int, float] = {}  # device -> solo work (ticks) its running task still has to do

    comm_on_link = _link_time(instance, send_tick, recv_tick)
    link_free: dict[tuple[int, int], float] = {}
    transfer_f: dict[int, tuple[float, float]] = {}
    wakes: list[tuple[float, int]] = []
    now = 0.0

    def try_start(d: int) -> None:
        if d in running or pos[d] >= len(seq[d]):
            return
        t = seq[d][pos[d]]
        if pending[t]:
            return
        s = max(dev_free[d], ready_at[t])
        if s > now:  # its inputs arrive later: wake then
            heapq.heappush(wakes, (s, d))
            return
        start[t] = now
        running[d] = t
        left[d] = (float(dur[t, d]) + cross_in[t] * recv_tick) * cal_speed[d]

    for d in range(num_dev):
        try_start(d)
    while running or wakes:
        computing: dict[int, int] = {}
        for d in running:
            computing[host[d]] = computing.get(host[d], 0) + 1
        rate = {d: sharing.speed(host[d], computing[host[d]]) for d in running}
        nxt = min((now + left[d] / rate[d] for d in running), default=math.inf)
        if wakes:
            nxt = min(nxt, wakes[0][0])
        for d in running:
            left[d] -= rate[d] * (nxt - now)
        now = nxt
        touched: set[int] = set()
        while wakes and wakes[0][0] <= now:
            touched.add(heapq.heappop(wakes)[1])
        for du in sorted(d for d in running if left[d] <= 1e-9 * max(1.0, now)):
            u = running[du]
            if du not in sending:
                end[u] = now
                if cross_out[u] and send_tick > 0:  # the rank packs and posts its sends before its next task
                    sending.add(du)
                    left[du] = cross_out[u] * send_tick * cal_speed[du]
                    continue
            sending.discard(du)
            del running[du]
            del left[du]
            dev_free[du] = now
            pos[du] += 1
            touched.add(du)
            _deliver(instance, u, now, device_of, comm_on_link, link_contention, link_free, transfer_f, ready_at,
                     pending, touched)
        for d in sorted(touched):
            try_start(d)
    return _shared_timeline(instance, seq, pos, device_of, start, end, transfer_f, stages, link_contention)


def _link_time(instance: SchedulingInstance, send_tick: float, recv_tick: float) -> Callable[[int, int, int], float]:
    """comm_on_link(e, du, dv): the transfer's time on the link, its comm time less the ranks' own send and
    receive work."""

    def comm_on_link(e: int, du: int, dv: int) -> float:
        return max(0.0, instance.comm(e, du, dv) - send_tick - recv_tick)

    return comm_on_link


def _shared_timeline(instance: SchedulingInstance, seq: list[list[int]], pos: list[int], device_of: list[int],
                     start: list[float], end: list[float], transfer_f: dict[int, tuple[float, float]],
                     stages: Mapping[str, int | None] | None, link_contention: bool) -> Timeline:
    """The timeline of a processor-sharing replay, its continuous ticks rounded (an end never before its start);
    raises `DeadlockError` when a task never started."""
    if any(s < 0 for s in start):
        raise _deadlock(instance, seq, pos, device_of, start)
    start_i = [round(s) for s in start]
    end_i = [max(a, round(b)) for a, b in zip(start_i, end, strict=True)]
    transfer_times = {e: (round(a), round(b)) for e, (a, b) in transfer_f.items()}
    return build_timeline(instance, device_of, start_i, end_i, transfer_times=transfer_times, stages=stages,
                          link_contention=link_contention)


def _rank_transfers(instance: SchedulingInstance, seq: Sequence[Sequence[int]], device_of: Sequence[int]
                    ) -> tuple[list[int], list[int]]:
    """Per task, the transfers its rank sends after it and receives before it, as the runtime makes them
    (`planner.execute.partition`): one send of a task's output per other device that reads it, received once
    there, before the first of its readers in that device's order."""
    n = instance.num_tasks
    pos = [0] * n
    for row in seq:
        for i, t in enumerate(row):
            pos[t] = i
    cross_out, cross_in = [0] * n, [0] * n
    for u in range(n):
        first: dict[int, int] = {}  # other device -> u's first reader there
        for v, _ in instance.successors[u]:
            dv = device_of[v]
            if dv != device_of[u] and (dv not in first or pos[v] < pos[first[dv]]):
                first[dv] = v
        cross_out[u] = len(first)
        for v in first.values():
            cross_in[v] += 1
    return cross_out, cross_in


def _device_of(n: int, seq: Sequence[Sequence[int]]) -> list[int]:
    """Each task's device under the orders (-1: in no order)."""
    device_of = [-1] * n
    for d, row in enumerate(seq):
        for t in row:
            device_of[t] = d
    return device_of


def _deliver(instance: SchedulingInstance, u: int, now, device_of: Sequence[int], comm, link_contention: bool,
             link_free: dict, transfers: dict, ready_at: list, pending: list[int], touched: set[int]) -> None:
    """Task u ended at `now`: its outputs leave (after the link's previous transfer with `link_contention`) and
    arrive `comm(e, du, dv)` later on other devices, at once on its own; each successor's ready time and count of
    pending inputs follow, and the devices of successors that became ready are added to `touched`.  Both replays
    (plain ticks, shared continuous time) share it."""
    du = device_of[u]
    for v, e in instance.successors[u]:
        dv = device_of[v]
        if dv == du:
            arrive = now
        else:
            leave = max(now, link_free.get((du, dv), now)) if link_contention else now
            arrive = leave + comm(e, du, dv)
            if link_contention:
                link_free[(du, dv)] = arrive
            transfers[e] = (leave, arrive)
        ready_at[v] = max(ready_at[v], arrive)
        pending[v] -= 1
        if pending[v] == 0:
            touched.add(dv)


def _deadlock(instance, seq, pos, device_of, start) -> DeadlockError:
    names, devs = instance.task_names, instance.device_names
    parts: list[str] = []
    stuck: list[str] = []
    for d, row in enumerate(seq):
        if pos[d] >= len(row):
            continue
        t = row[pos[d]]
        stuck.append(names[t])
        waits = [f"{names[u]} (on {devs[device_of[u]]})" for u, _ in instance.predecessors[t] if start[u] < 0]
        parts.append(f"{devs[d]} is stuck at {names[t]}, which waits for {', '.join(waits[:4])}")
    never = sum(1 for s in start if s < 0)
    return DeadlockError(
        f"deadlock in instance {instance.name!r}: the per-device orders contradict precedence; {never} tasks never "
        f"run; " + "; ".join(parts[:8]),
        tuple(stuck),
    )


def plan_orders(instance: SchedulingInstance, plan: Plan) -> tuple[tuple[int, ...], ...]:
    """Per instance device, the plan's tasks on it sorted by (start, end, topological position)."""
    if len(plan.device_names) != instance.num_devices:
        raise SimulationError(
            f"plan for {plan.instance_name!r} uses {len(plan.device_names)} devices, instance {instance.name!r} has "
            f"{instance.num_devices}"
        )
    index = instance.task_index
    topo_pos = {t: i for i, t in enumerate(instance.topological_order)}
    rows: list[list[tuple[int, int, int, int]]] = [[] for _ in range(instance.num_devices)]
    unknown = [p.task for p in plan.placements if p.task not in index]
    if unknown:
        raise SimulationError(f"plan names tasks {unknown[:8]} that instance {instance.name!r} does not have")
    for p in plan.placements:
        if not 0 <= p.device < instance.num_devices:
            raise SimulationError(f"plan puts task {p.task!r} on device index {p.device}, out of range")
        t = index[p.task]
        rows[p.device].append((p.start_tick, p.end_tick, topo_pos[t], t))
    return tuple(tuple(t for *_, t in sorted(row)) for row in rows)


def simulate_plan(instance: SchedulingInstance, plan: Plan, *, link_contention: bool = False,
                  sharing: SharedHosts | None = None, rank_transfer_tick: tuple[float, float] | None = None
                  ) -> Timeline:
    """Replay a plan's device assignment and per-device order (its times are recomputed, not trusted);
    `sharing` and `rank_transfer_tick` as in `simulate`."""
    stages = {p.task: p.stage for p in plan.placements}
    return simulate(instance, plan_orders(instance, plan), link_contention=link_contention, stages=stages,
                    sharing=sharing, rank_transfer_tick=rank_transfer_tick)


def simulate_schedule(instance: SchedulingInstance, schedule: Schedule, *, link_contention: bool = False) -> Timeline:
    """Replay a pipeline `Schedule` on an instance whose tasks are named by action strings."""
    orders = schedule_to_instance_order(schedule, instance)
    stages: dict[str, int | None] = {}
    for name in instance.task_names:
        a = try_parse_action(name)
        stages[name] = a.stages[0] if a is not None else None
    return simulate(instance, orders, link_contention=link_contention, stages=stages)


def retime_plan(
    plan: Plan,
    instance: SchedulingInstance,
    *,
    link_contention: bool = False,
    method: PlanMethod | str | None = None,
    **provenance,
) -> Plan:
    """Keep the plan's devices and per-device order, recompute its times on `instance` (e.g. other hardware).

    The result has status 'heuristic' (nothing is proven on the new instance), lower bound = the instance's
    trivial bound, and the plan's provenance with any `provenance` fields (e.g. `hardware_path`,
    `hardware_sha256`) replaced.
    """
    timeline = simulate_plan(instance, plan, link_contention=link_contention)
    return replayed_plan(plan, instance, timeline, method=method, **provenance)


def replayed_plan(plan: Plan, instance: SchedulingInstance, timeline: Timeline, *,
                  method: PlanMethod | str | None = None, **provenance) -> Plan:
    """`retime_plan`'s result from `timeline`, the replay of `plan` on `instance` (`simulate_plan`) the caller has
    already made (a 100k-op replay takes seconds; the plan writer needs the timeline too)."""
    lb = instance.trivial_lower_bound_tick()
    out = dataclasses.replace(
        plan,
        instance_name=instance.name,
        placements=timeline.placements,
        device_names=tuple(instance.device_names),
        makespan_tick=timeline.makespan_tick,
        lower_bound_tick=min(lb, timeline.makespan_tick),
        status=PlanStatus.HEURISTIC,
        method=method if method is not None else f"{plan.method}+retime",
        tick_s=instance.tick_s,
        time_unit=instance.time_unit,
    )
    return dataclasses.replace(out, **provenance) if provenance else out
