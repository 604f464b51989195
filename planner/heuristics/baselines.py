"""Simple baselines every planning method should beat; each returns a valid `Plan` (status 'heuristic').

* `single_device` — every task on one device, in the instance's topological order, back to back.  Without a device
  given: the fastest device (smallest total duration) that can run every task and whose memory check passes.
* `round_robin` — tasks in topological order dealt to the devices in turn (task k to device k mod D, or the next
  one in turn that may run it and has memory), each starting at max(device free, inputs arrived).

Both are `list_schedule` with a fixed device policy and no insertion, so timing and the memory rule are HEFT's.
"""

from __future__ import annotations

import time

import numpy as np

from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics.list_schedule import list_schedule, with_solve_time
from planner.schedule.plan import Plan, PlanMethod


def topological_priority(instance: SchedulingInstance) -> np.ndarray:
    """float64 [n_tasks]: a priority under which list scheduling follows the instance's topological order."""
    prio = np.empty(instance.num_tasks, dtype=np.float64)
    prio[np.asarray(instance.topological_order, dtype=np.int64)] = -np.arange(instance.num_tasks, dtype=np.float64)
    return prio


def _device_index(instance: SchedulingInstance, device: int | str) -> int:
    if isinstance(device, str):
        if device not in instance.device_names:
            raise InfeasibleError(f"unknown device {device!r}; devices: {', '.join(instance.device_names)}")
        return instance.device_names.index(device)
    d = int(device)
    if not 0 <= d < instance.num_devices:
        raise InfeasibleError(f"device index {d} out of range (instance has {instance.num_devices} devices)")
    return d


def single_device(instance: SchedulingInstance, device: int | str | None = None, *,
                  respect_memory: bool = True) -> Plan:
    """Everything on one device (given, or the fastest that can run every task and fits), topological order."""
    t0 = time.perf_counter()
    dur = instance.duration_tick
    if device is not None:
        options = [_device_index(instance, device)]
    else:
        runs_all = np.all(dur < INELIGIBLE, axis=0)
        total = np.where(dur < INELIGIBLE, dur, 0).sum(axis=0)
        options = sorted((d for d in range(instance.num_devices) if runs_all[d]), key=lambda d: (int(total[d]), d))
        if not options:
            raise InfeasibleError(f"single_device: no device of instance {instance.name!r} may run every task")
    prio = topological_priority(instance)
    first_error: InfeasibleError | None = None
    for d in options:
        def only_d(task: int, k: int, device: int, finish: int, _d: int = d) -> int | None:
            return 0 if device == _d else None

        try:
            plan = list_schedule(instance, prio, only_d, insertion=False, respect_memory=respect_memory,
                                 method=PlanMethod.SINGLE_DEVICE)
        except InfeasibleError as err:
            first_error = first_error or err
            continue
        return with_solve_time(plan, time.perf_counter() - t0)
    assert first_error is not None
    if len(options) > 1:
        reason = str(first_error).removeprefix("single_device: ")
        raise InfeasibleError(f"single_device: no single device holds the whole model; on the fastest, {reason}")
    raise first_error


def round_robin(instance: SchedulingInstance, *, respect_memory: bool = True) -> Plan:
    """Tasks in topological order dealt to devices in turn (skipping devices that cannot run or hold them)."""
    num_dev = instance.num_devices

    def in_turn(task: int, k: int, device: int, finish: int) -> int:
        return (device - k) % num_dev

    return list_schedule(instance, topological_priority(instance), in_turn, insertion=False,
                         respect_memory=respect_memory, method=PlanMethod.ROUND_ROBIN)
