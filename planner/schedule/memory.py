"""Memory over time on each device, one implementation shared by the validator and the simulator.

Semantics (of `SchedulingInstance`, made precise here; all intervals are half-open ``[start, end)`` in ticks):

* **param** `param_bytes[t]` is held on t's device for the whole step, ``[step_start, step_end)``.
* **activation** `activation_bytes[t]` (t's output) is held on t's device from t's start until the latest of:
  t's end, the end of its last consumer on that device, and the arrival of its last outgoing transfer (the
  sender keeps the buffer until the data has left).  A task with no consumers keeps its output until its own end.
* **received** for every other device D that runs consumers of t, one copy of `activation_bytes[t]` is held on D
  from the first arrival of t's data there until the last of t's consumers on D ends (one copy per device, shared
  by all consumers there).
* **internal** `peak_internal_bytes[t]` is held on t's device while t runs, ``[start, end)``.

Arrival of edge (u, v) across devices is what the caller passes: the simulator passes the transfer's end (which
includes link contention when modelled); the validator passes nothing, and then arrival = end(u) + comm over the
link actually used (the earliest possible arrival).  Usage at a moment is the sum of intervals containing it, so a
buffer freed at tick t and one allocated at tick t never count together.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.cost.instance import SchedulingInstance


@dataclass(frozen=True, slots=True)
class MemoryInterval:
    """`size_bytes` held on `device` during ``[start_tick, end_tick)`` because of `task` (`what`: param,
    activation, received, internal)."""

    device: int
    start_tick: int
    end_tick: int
    size_bytes: int
    task: str
    what: str


@dataclass(frozen=True, eq=False)
class MemoryProfile:
    """Per device, memory in use over time as a step function, and its peak.

    `steps[d]` is a tuple of (tick, bytes): from that tick until the next listed tick, `bytes` are in use.
    """

    device_names: tuple[str, ...]
    capacity_bytes: tuple[int, ...]
    steps: tuple[tuple[tuple[int, int], ...], ...]
    peak_bytes: tuple[int, ...]
    peak_tick: tuple[int, ...]
    intervals: tuple[MemoryInterval, ...]

    def usage_at(self, device: int, tick: int) -> int:
        """Bytes in use on `device` at `tick`."""
        level = 0
        for t, b in self.steps[device]:
            if t > tick:
                break
            level = b
        return level

    def live_at(self, device: int, tick: int) -> tuple[MemoryInterval, ...]:
        """The intervals holding memory on `device` at `tick`, largest first."""
        live = [iv for iv in self.intervals if iv.device == device and iv.start_tick <= tick < iv.end_tick]
        return tuple(sorted(live, key=lambda iv: (-iv.size_bytes, iv.task, iv.what)))

    def first_excess(self, device: int) -> tuple[int, int] | None:
        """(tick, bytes) of the first moment `device` uses more than its capacity, or None."""
        cap = self.capacity_bytes[device]
        for t, b in self.steps[device]:
            if b > cap:
                return t, b
        return None


def memory_intervals(
    instance: SchedulingInstance,
    device_of: Sequence[int],
    start_tick: Sequence[int],
    end_tick: Sequence[int],
    *,
    arrival_tick: Sequence[int] | None = None,
    step: tuple[int, int] | None = None,
) -> list[MemoryInterval]:
    """All memory intervals of a placed, timed instance (semantics in the module docstring).

    `device_of[t] < 0` marks a task that is not placed (skipped, as are the edges touching it).  `arrival_tick[e]`
    is when edge e's data is available on its destination device (ignored for same-device edges); default
    end(src) + comm.  `step` = (start, end) of the step for parameters; default (min start, max end).
    """
    n = instance.num_tasks
    placed = [t for t in range(n) if device_of[t] >= 0]
    if step is None:
        step = (min((start_tick[t] for t in placed), default=0), max((end_tick[t] for t in placed), default=0))
    names = instance.task_names
    out: list[MemoryInterval] = []
    # plain Python numbers, read once: indexing numpy arrays per task and per edge dominates this loop on large
    # graphs; same values (`comm` is comm_tick over the link class)
    params = instance.param_bytes.tolist()
    internal = instance.peak_internal_bytes.tolist()
    act = instance.activation_bytes.tolist()
    comm_rows = instance.comm_tick.tolist() if arrival_tick is None else []
    link = instance.link_class.tolist()
    successors = instance.successors
    param_end = max(step[1], step[0] + 1)
    for t in placed:
        d = device_of[t]
        if params[t] > 0:
            out.append(MemoryInterval(d, step[0], param_end, params[t], names[t], "param"))
        if internal[t] > 0 and end_tick[t] > start_tick[t]:
            out.append(MemoryInterval(d, start_tick[t], end_tick[t], internal[t], names[t], "internal"))
        if act[t] <= 0:
            continue
        hold_until = end_tick[t]
        remote_first: dict[int, int] = {}
        remote_last: dict[int, int] = {}
        for v, e in successors[t]:
            dv = device_of[v]
            if dv < 0:
                continue
            if dv == d:
                hold_until = max(hold_until, end_tick[v])
                continue
            arr = arrival_tick[e] if arrival_tick is not None else end_tick[t] + comm_rows[e][link[d][dv]]
            hold_until = max(hold_until, arr)
            remote_first[dv] = min(remote_first.get(dv, arr), arr)
            remote_last[dv] = max(remote_last.get(dv, 0), end_tick[v])
        if hold_until > start_tick[t]:
            out.append(MemoryInterval(d, start_tick[t], hold_until, act[t], names[t], "activation"))
        for dv, first in remote_first.items():
            if remote_last[dv] > first:
                out.append(MemoryInterval(dv, first, remote_last[dv], act[t], names[t], "received"))
    return out


def memory_profile(instance: SchedulingInstance, intervals: Sequence[MemoryInterval]) -> MemoryProfile:
    """Sweep the intervals into per-device step functions and peaks."""
    num_dev = instance.num_devices
    deltas: list[dict[int, int]] = [defaultdict(int) for _ in range(num_dev)]
    for iv in intervals:
        if iv.end_tick <= iv.start_tick or iv.size_bytes == 0:
            continue
        deltas[iv.device][iv.start_tick] += iv.size_bytes
        deltas[iv.device][iv.end_tick] -= iv.size_bytes
    steps: list[tuple[tuple[int, int], ...]] = []
    peaks: list[int] = []
    peak_ticks: list[int] = []
    for d in range(num_dev):
        level = 0
        row: list[tuple[int, int]] = []
        peak, peak_t = 0, 0
        for t in sorted(deltas[d]):
            level += deltas[d][t]
            if row and row[-1][1] == level:
                continue
            row.append((t, level))
            if level > peak:
                peak, peak_t = level, t
        if not row or row[0][0] > 0:
            row.insert(0, (0, 0))
        steps.append(tuple(row))
        peaks.append(peak)
        peak_ticks.append(peak_t)
    return MemoryProfile(
        device_names=tuple(instance.device_names),
        capacity_bytes=tuple(int(c) for c in np.asarray(instance.capacity_bytes)),
        steps=tuple(steps),
        peak_bytes=tuple(peaks),
        peak_tick=tuple(peak_ticks),
        intervals=tuple(intervals),
    )
