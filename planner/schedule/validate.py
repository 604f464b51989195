"""The independent plan validator: does a `Plan` obey its `SchedulingInstance`?  No solver code is used.

Checks (each failure is a `Violation` whose `kind` is the name in brackets):

1. the plan's devices are the instance's [devices]; every task placed exactly once [missing, duplicate], no
   unknown task [unknown], device index in range [device]; times non-negative [negative];
2. the device may run the task [ineligible] and ``end - start`` equals its duration there [duration];
3. for every edge (u, v): ``start(v) >= end(u)`` [precedence] and, across devices,
   ``start(v) >= end(u) + comm(edge, dev(u), dev(v))`` over the link class actually used [comm];
4. no two tasks with positive duration overlap on one device's compute stream [overlap] (zero-length tasks
   occupy no time);
5. memory within each device's capacity at every moment [memory], with the semantics of `memory.py` (params for
   the whole step, live activations, received copies from the earliest arrival, internal peak while running);
6. the claimed makespan equals last end - first start [makespan] and the lower bound does not exceed it [bound].

Not checked: link contention (a plan carries no transfer times; the simulator models it).

`validate_plan` raises `PlanInvalidError` listing the first `max_violations` violations and a device-by-time text
grid around the first one; on success it returns a `ValidationReport` (per-device peak memory, busy time ...).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from planner.cost.instance import SchedulingInstance
from planner.ir.units import format_bytes
from planner.schedule.errors import PlanInvalidError
from planner.schedule.memory import MemoryProfile, memory_intervals, memory_profile
from planner.schedule.plan import Plan, TaskPlacement
from planner.schedule.textgrid import text_grid

__all__ = ["PlanInvalidError", "ValidationReport", "Violation", "check_plan", "validate_plan"]


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: `kind` (see module docstring), a readable `message` naming devices, tasks and times."""

    kind: str
    message: str
    device: int | None = None
    tasks: tuple[str, ...] = ()
    tick: int | None = None

    def __str__(self) -> str:
        return f"[{self.kind}] {self.message}"


@dataclass(frozen=True, eq=False)
class ValidationReport:
    """What a valid plan looks like: per-device peak memory (bytes) and when, busy ticks, makespan."""

    instance_name: str
    device_names: tuple[str, ...]
    makespan_tick: int
    busy_tick: tuple[int, ...]
    peak_memory_bytes: tuple[int, ...]
    peak_memory_tick: tuple[int, ...]
    memory: MemoryProfile


_DeviceName = Callable[[int], str]


def _placed_tasks(instance: SchedulingInstance, plan: Plan, out: list[Violation], dname: _DeviceName
                  ) -> tuple[dict[int, TaskPlacement], list[str]]:
    """(task index -> its one valid placement, the names of the tasks placed nowhere); appends the unknown,
    duplicate, device and missing violations."""
    names, num_dev = instance.task_names, instance.num_devices
    index = instance.task_index
    placed: dict[int, TaskPlacement] = {}
    for p in plan.placements:
        if p.task not in index:
            out.append(Violation("unknown", f"task {p.task!r} on {dname(p.device)} is not in instance "
                                 f"{instance.name!r}", p.device, (p.task,), p.start_tick))
            continue
        t = index[p.task]
        if t in placed:
            q = placed[t]
            out.append(Violation(
                "duplicate",
                f"task {p.task!r} is placed twice: on {dname(q.device)} [{q.start_tick},{q.end_tick}) and on "
                f"{dname(p.device)} [{p.start_tick},{p.end_tick})",
                p.device, (p.task,), p.start_tick,
            ))
            continue
        if not 0 <= p.device < num_dev:
            out.append(Violation("device", f"task {p.task!r} is on device index {p.device}, but the instance has "
                                 f"{num_dev} devices", None, (p.task,), p.start_tick))
            continue
        placed[t] = p
    appeared = {index[p.task] for p in plan.placements if p.task in index}
    missing = [names[t] for t in range(instance.num_tasks) if t not in appeared]
    for m in missing[:50]:
        out.append(Violation("missing", f"task {m!r} is not placed on any device", None, (m,)))
    if len(missing) > 50:
        out.append(Violation("missing", f"... and {len(missing) - 50} more tasks are not placed"))
    return placed, missing


def _time_violations(instance: SchedulingInstance, placed: dict[int, TaskPlacement], out: list[Violation],
                     dname: _DeviceName) -> None:
    """Append each placed task's negative-start, ineligible-device and wrong-duration violations."""
    devs, num_dev = instance.device_names, instance.num_devices
    for t, p in placed.items():
        d = p.device
        if p.start_tick < 0:
            out.append(Violation("negative", f"task {p.task!r} on {dname(d)} starts at {p.start_tick} < 0",
                                 d, (p.task,), p.start_tick))
        if not instance.eligible(t, d):
            eligible = [devs[k] for k in range(num_dev) if instance.eligible(t, k)]
            out.append(Violation(
                "ineligible",
                f"task {p.task!r} is on {dname(d)} [{p.start_tick},{p.end_tick}), which cannot run it "
                f"(eligible: {eligible[:8]})",
                d, (p.task,), p.start_tick,
            ))
            continue
        want = int(instance.duration_tick[t, d])
        if p.end_tick - p.start_tick != want:
            out.append(Violation(
                "duration",
                f"task {p.task!r} on {dname(d)} runs [{p.start_tick},{p.end_tick}) = {p.end_tick - p.start_tick} "
                f"ticks, but its duration there is {want}",
                d, (p.task,), p.start_tick,
            ))


def _edge_violations(instance: SchedulingInstance, placed: dict[int, TaskPlacement], out: list[Violation],
                     dname: _DeviceName) -> None:
    """Append the precedence and communication-delay violations of the edges between placed tasks."""
    for e, (u, v) in enumerate(instance.edges):
        if u not in placed or v not in placed:
            continue
        pu, pv = placed[u], placed[v]
        if pv.start_tick < pu.end_tick:
            out.append(Violation(
                "precedence",
                f"task {pv.task!r} on {dname(pv.device)} starts at {pv.start_tick}, before its predecessor "
                f"{pu.task!r} on {dname(pu.device)} ends at {pu.end_tick}",
                pv.device, (pu.task, pv.task), pv.start_tick,
            ))
            continue
        if pu.device != pv.device:
            c = instance.comm(e, pu.device, pv.device)
            if pv.start_tick < pu.end_tick + c:
                k = int(instance.link_class[pu.device, pv.device])
                link = f" {instance.link_names[k]!r}" if k < len(instance.link_names) else ""
                out.append(Violation(
                    "comm",
                    f"task {pv.task!r} on {dname(pv.device)} starts at {pv.start_tick}, but {pu.task!r} on "
                    f"{dname(pu.device)} ends at {pu.end_tick} and edge {pu.task}->{pv.task} needs {c} ticks over "
                    f"link class {k}{link}: earliest start {pu.end_tick + c}",
                    pv.device, (pu.task, pv.task), pv.start_tick,
                ))


def _overlap_violations(placed: dict[int, TaskPlacement], out: list[Violation], dname: _DeviceName) -> None:
    """Append the overlaps of tasks (of nonzero length) on one device, each against the latest-ending before it."""
    by_dev: dict[int, list[TaskPlacement]] = defaultdict(list)
    for p in placed.values():
        if p.end_tick > p.start_tick:
            by_dev[p.device].append(p)
    for d in sorted(by_dev):
        row = sorted(by_dev[d], key=lambda p: (p.start_tick, p.end_tick, p.task))
        last = row[0]
        for p in row[1:]:
            if p.start_tick < last.end_tick:
                out.append(Violation(
                    "overlap",
                    f"on {dname(d)} task {p.task!r} [{p.start_tick},{p.end_tick}) overlaps {last.task!r} "
                    f"[{last.start_tick},{last.end_tick})",
                    d, (last.task, p.task), p.start_tick,
                ))
            if p.end_tick > last.end_tick:
                last = p


def _memory_violations(instance: SchedulingInstance, placed: dict[int, TaskPlacement], out: list[Violation],
                       dname: _DeviceName) -> MemoryProfile:
    """The memory profile of the placed tasks; appends each device's first tick over its capacity."""
    num_dev = instance.num_devices
    n = instance.num_tasks
    device_of, start, end = [-1] * n, [0] * n, [0] * n
    for t, p in placed.items():
        device_of[t], start[t], end[t] = p.device, p.start_tick, p.end_tick
    profile = memory_profile(instance, memory_intervals(instance, device_of, start, end))
    for d in range(num_dev):
        hit = profile.first_excess(d)
        if hit is None:
            continue
        tick, used = hit
        cap = profile.capacity_bytes[d]
        holders = profile.live_at(d, tick)
        top = ", ".join(f"{iv.task} {iv.what} {format_bytes(iv.size_bytes, exact=True)}" for iv in holders[:5])
        out.append(Violation(
            "memory",
            f"device {dname(d)} holds {format_bytes(used, exact=True)} at tick {tick}, over its capacity "
            f"{format_bytes(cap, exact=True)} by {format_bytes(used - cap, exact=True)}; largest: {top}",
            d, tuple(dict.fromkeys(iv.task for iv in holders[:5])), tick,
        ))
    return profile


def _total_violations(plan: Plan, placed: dict[int, TaskPlacement], out: list[Violation]) -> None:
    """Append the claimed makespan's and lower bound's violations (all tasks placed)."""
    t0 = min(p.start_tick for p in placed.values())
    t1 = max(p.end_tick for p in placed.values())
    if plan.makespan_tick != t1 - t0:
        out.append(Violation("makespan", f"the plan claims makespan {plan.makespan_tick}, but its tasks span "
                             f"[{t0},{t1}) = {t1 - t0} ticks"))
    if plan.lower_bound_tick > plan.makespan_tick:
        out.append(Violation("bound", f"the plan claims lower bound {plan.lower_bound_tick} above its makespan "
                             f"{plan.makespan_tick}"))


def check_plan(
    instance: SchedulingInstance, plan: Plan, *, check_memory: bool = True
) -> tuple[list[Violation], MemoryProfile | None]:
    """All violations of `plan` on `instance` (in the order of the module docstring), and the memory profile
    of the validly placed tasks (None when memory is not checked)."""
    out: list[Violation] = []
    devs = instance.device_names
    num_dev = instance.num_devices

    def dname(d: int) -> str:
        return devs[d] if 0 <= d < num_dev else f"#{d}"

    if tuple(plan.device_names) != tuple(devs):
        out.append(Violation(
            "devices",
            f"the plan's devices {list(plan.device_names)[:8]} are not the instance's {list(devs)[:8]}",
        ))
    placed, missing = _placed_tasks(instance, plan, out, dname)
    _time_violations(instance, placed, out, dname)
    _edge_violations(instance, placed, out, dname)
    _overlap_violations(placed, out, dname)
    profile = None
    if check_memory and placed:
        profile = _memory_violations(instance, placed, out, dname)
    if placed and not missing:
        _total_violations(plan, placed, out)
    return out, profile


def _grid_for(v: Violation, plan: Plan, instance: SchedulingInstance) -> str:
    involved = [p for p in plan.placements if p.task in v.tasks]
    if not involved and v.tick is None:
        return ""
    lo = min([p.start_tick for p in involved] + ([v.tick] if v.tick is not None else []))
    hi = max([p.end_tick for p in involved] + ([v.tick + 1] if v.tick is not None else []))
    pad = max(2, (hi - lo) // 2)
    devices = None
    if instance.num_devices > 16:
        devices = sorted({p.device for p in involved} | ({v.device} if v.device is not None else set()))
    return text_grid(plan.placements, instance.device_names, (max(0, lo - pad), hi + pad), devices=devices,
                     mark=(v.tick,) if v.tick is not None else ())


def validate_plan(
    instance: SchedulingInstance, plan: Plan, *, max_violations: int = 20, check_memory: bool = True
) -> ValidationReport:
    """Raise `PlanInvalidError` (all violations, the first `max_violations` in the message, plus a text grid around
    the first one) unless `plan` is valid for `instance`; otherwise return a `ValidationReport`."""
    violations, profile = check_plan(instance, plan, check_memory=check_memory)
    if violations:
        shown = violations[:max_violations]
        lines = [f"plan for {plan.instance_name!r} (method {str(plan.method)!r}) is invalid: {len(violations)} "
                 f"violation{'s' if len(violations) != 1 else ''}"]
        lines += [f"  {v}" for v in shown]
        if len(violations) > len(shown):
            lines.append(f"  ... and {len(violations) - len(shown)} more")
        grid = _grid_for(violations[0], plan, instance)
        if grid:
            lines.append(grid)
        raise PlanInvalidError("\n".join(lines), tuple(violations))
    busy = [0] * instance.num_devices
    for p in plan.placements:
        busy[p.device] += p.end_tick - p.start_tick
    if profile is None:
        profile = memory_profile(instance, [])
    return ValidationReport(
        instance_name=instance.name,
        device_names=tuple(instance.device_names),
        makespan_tick=plan.makespan_tick,
        busy_tick=tuple(busy),
        peak_memory_bytes=profile.peak_bytes,
        peak_memory_tick=profile.peak_tick,
        memory=profile,
    )
