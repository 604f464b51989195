"""`Timeline`: a timed execution of an instance — task times, transfers, busy/idle, bubble ratio, memory.

Built by the simulator (`simulate.py`) or read straight off a plan's own times (`timeline_of_plan`).  Immutable.

Definitions (ticks of the instance):

* makespan = last task end - first task start (the simulator starts at tick 0).
* busy[d] = sum of the durations of device d's tasks (its compute stream); idle[d] = makespan - busy[d].
* **bubble ratio = total idle time / (devices x makespan)** = sum_d idle[d] / (p * makespan), with p all devices
  of the instance (a device that runs nothing is idle all step).  0 for an empty or zero-length step.
* a transfer is one cross-device edge: it leaves when its source task ends (or later, when the link is busy
  under contention) and arrives `comm` ticks after it leaves; same-device edges are free and not listed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from planner.cost.instance import SchedulingInstance
from planner.schedule.memory import MemoryProfile, memory_intervals, memory_profile
from planner.schedule.plan import Plan, PlanMethod, PlanStatus, TaskPlacement


@dataclass(frozen=True, slots=True)
class Transfer:
    """Edge `edge` moves `size_bytes` from `src_device` (after `src_task`) to `dst_device` (for `dst_task`)."""

    edge: int
    src_task: str
    dst_task: str
    src_device: int
    dst_device: int
    start_tick: int
    end_tick: int
    size_bytes: int


@dataclass(frozen=True, eq=False)
class Timeline:
    """A timed step.  `placements` are in the instance's task order; see the module docstring for definitions."""

    instance_name: str
    device_names: tuple[str, ...]
    placements: tuple[TaskPlacement, ...]
    transfers: tuple[Transfer, ...]
    start_tick: int
    makespan_tick: int
    busy_tick: tuple[int, ...]
    memory: MemoryProfile
    link_bytes: Mapping[tuple[int, int], int] = field(default_factory=lambda: MappingProxyType({}))
    link_contention: bool = False
    tick_s: float | None = None
    time_unit: str = "tick"

    @property
    def num_devices(self) -> int:
        return len(self.device_names)

    @property
    def end_tick(self) -> int:
        return self.start_tick + self.makespan_tick

    @property
    def idle_tick(self) -> tuple[int, ...]:
        return tuple(self.makespan_tick - b for b in self.busy_tick)

    @property
    def bubble_ratio(self) -> float:
        """Total idle time / (devices x makespan)."""
        if self.makespan_tick <= 0 or not self.device_names:
            return 0.0
        return sum(self.idle_tick) / (len(self.device_names) * self.makespan_tick)

    @property
    def peak_memory_bytes(self) -> tuple[int, ...]:
        return self.memory.peak_bytes

    def by_task(self) -> dict[str, TaskPlacement]:
        return {p.task: p for p in self.placements}

    def device_order(self, device: int) -> tuple[TaskPlacement, ...]:
        """Device `device`'s tasks sorted by start (then end)."""
        return tuple(sorted((p for p in self.placements if p.device == device),
                            key=lambda p: (p.start_tick, p.end_tick)))

    def to_plan(self, *, method: PlanMethod | str, status: PlanStatus = PlanStatus.HEURISTIC,
                lower_bound_tick: int = 0, **provenance) -> Plan:
        """This timeline as a `Plan` (times relative to the timeline, makespan = last end - first start)."""
        return Plan(
            instance_name=self.instance_name,
            placements=self.placements,
            device_names=self.device_names,
            makespan_tick=self.makespan_tick,
            lower_bound_tick=lower_bound_tick,
            status=status,
            method=method,
            tick_s=self.tick_s,
            time_unit=self.time_unit,
            **provenance,
        )


def build_timeline(
    instance: SchedulingInstance,
    device_of: Sequence[int],
    start_tick: Sequence[int],
    end_tick: Sequence[int],
    *,
    transfer_times: Mapping[int, tuple[int, int]] | None = None,
    stages: Mapping[str, int | None] | None = None,
    link_contention: bool = False,
) -> Timeline:
    """Assemble a Timeline from per-task device and times.  `transfer_times[e]` = (leave, arrive) of each
    cross-device edge; default leave = end(src), arrive = leave + comm (no contention)."""
    n = instance.num_tasks
    names = instance.task_names
    stages = stages or {}
    placements = tuple(
        TaskPlacement(names[t], int(device_of[t]), int(start_tick[t]), int(end_tick[t]), stages.get(names[t]))
        for t in range(n)
    )
    t0 = min((int(s) for s in start_tick), default=0)
    t1 = max((int(e) for e in end_tick), default=0)
    busy = [0] * instance.num_devices
    for t in range(n):
        busy[device_of[t]] += int(end_tick[t]) - int(start_tick[t])
    transfers: list[Transfer] = []
    arrival = [0] * len(instance.edges)
    link_bytes: dict[tuple[int, int], int] = {}
    sizes = instance.edge_bytes
    for e, (u, v) in enumerate(instance.edges):
        du, dv = int(device_of[u]), int(device_of[v])
        if du == dv:
            arrival[e] = int(end_tick[u])
            continue
        if transfer_times is not None and e in transfer_times:
            leave, arrive = transfer_times[e]
        else:
            leave = int(end_tick[u])
            arrive = leave + instance.comm(e, du, dv)
        arrival[e] = int(arrive)
        size = int(sizes[e])
        transfers.append(Transfer(e, names[u], names[v], du, dv, int(leave), int(arrive), size))
        link_bytes[(du, dv)] = link_bytes.get((du, dv), 0) + size
    intervals = memory_intervals(instance, device_of, start_tick, end_tick, arrival_tick=arrival, step=(t0, t1))
    return Timeline(
        instance_name=instance.name,
        device_names=tuple(instance.device_names),
        placements=placements,
        transfers=tuple(sorted(transfers, key=lambda x: (x.start_tick, x.end_tick, x.edge))),
        start_tick=t0,
        makespan_tick=t1 - t0,
        busy_tick=tuple(busy),
        memory=memory_profile(instance, intervals),
        link_bytes=MappingProxyType(dict(sorted(link_bytes.items()))),
        link_contention=link_contention,
        tick_s=instance.tick_s,
        time_unit=instance.time_unit,
    )


def timeline_of_plan(instance: SchedulingInstance, plan: Plan) -> Timeline:
    """The plan's own times as a Timeline (no replay; transfers leave at the source's end, no contention).

    The plan must name every task of the instance exactly once (run `validate_plan` first for a clear error).
    """
    index = instance.task_index
    n = instance.num_tasks
    device_of, start, end = [-1] * n, [0] * n, [0] * n
    stages: dict[str, int | None] = {}
    for p in plan.placements:
        t = index[p.task]
        device_of[t], start[t], end[t] = p.device, p.start_tick, p.end_tick
        stages[p.task] = p.stage
    missing = [instance.task_names[t] for t in range(n) if device_of[t] < 0]
    if missing:
        raise ValueError(f"plan does not place tasks {missing[:8]}")
    return build_timeline(instance, device_of, start, end, stages=stages)
