"""Parameters packed first, then scheduled: a plan near the least feasible capacity (the upper side of the
memory what-if's bracket, whose lower side is `planner/heuristics/memory_bound.py`).

`packed_plan(instance)` follows the shape of the assignment relaxation's optimum: device d is given a budget A_d of
memory besides parameters (at first the relaxation's per-device working sets m_1 >= ... >= m_D, largest to the
device with the most memory), then

1. **place**: a task may go to a device it is eligible on whose budget A_d covers its working set (any eligible
   device when none does).  *Light* tasks (at most 1/65536 of a device's even share of parameters, none included)
   come first, each to the allowed device with the largest budget (they cost little room, and keeping them
   together keeps their buffers off the parameter-heavy devices); then the heavy ones in the order (fewest allowed
   devices, most parameters, index), each to the allowed device with the most room left, capacity - A_d -
   parameters placed there; last, tasks move off a device still over its room onto one with room to spare;
2. **schedule**: tasks in topological order, each appended to its device as early as its inputs allow (or, in the
   serial variant, also after the previous task anywhere has ended and its data has arrived where it is consumed:
   one task at a time, so the fewest buffers are live; on Mixtral it keeps a layer's K and V projections, placed on
   one device, from holding both outputs at once);
3. **measure** every device's peak in the validator's memory model; if all fit, the plan is returned (checked by
   `check_plan`); otherwise each budget becomes at least what the device used besides parameters, and it repeats
   (`rounds` times, first appended, then serial).

It ignores speed beyond "as early as possible": its plans answer "how little memory suffices", not "how fast" (on
Mixtral-8x7B-like on 4x A100 at 22.161 GiB, 2 MiB above the proven bound, its plan takes 5.6 s where the planner's
takes 0.83 s at 80 GiB and 0.93 s at 23.80 GiB, the least capacity of the memory-aware list scheduler).  Raises
`InfeasibleError` when no round fits.
"""

from __future__ import annotations

import time

import numpy as np

from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics.list_schedule import heuristic_plan
from planner.heuristics.memory import show_bytes
from planner.heuristics.memory_bound import assignment_capacity_bound, working_set_bytes
from planner.schedule.memory import memory_intervals, memory_profile
from planner.schedule.plan import Plan
from planner.schedule.validate import check_plan

METHOD = "memory-pack"


def _initial_budgets(instance: SchedulingInstance) -> list[int]:
    """Per device, the relaxation's working set: the largest to the device with the most memory."""
    _, seq = assignment_capacity_bound(instance)
    caps = instance.capacity_bytes.tolist()
    ranked = sorted(range(instance.num_devices), key=lambda d: (-caps[d], d))
    budget = [0] * instance.num_devices
    for d, m in zip(ranked, seq, strict=True):
        budget[d] = int(m)
    return budget


def _place(instance: SchedulingInstance, budget: list[int], w: list[int]) -> list[int]:
    """Device per task (step 1 of the module docstring)."""
    n, num_dev = instance.num_tasks, instance.num_devices
    eligible = (instance.duration_tick < INELIGIBLE).tolist()
    param = instance.param_bytes.tolist()
    caps = instance.capacity_bytes.tolist()
    allowed: list[list[int]] = []
    for t in range(n):
        ok = [d for d in range(num_dev) if eligible[t][d]]
        fit = [d for d in ok if budget[d] >= w[t]]
        allowed.append(fit or ok)
    held = [0] * num_dev
    dev = [-1] * n
    light = _light_bytes(instance)
    # light tasks first (they go where the budget is largest, whatever their parameters), then the heavy ones
    for t in sorted(range(n), key=lambda t: (param[t] > light, len(allowed[t]), -param[t], t)):
        if not allowed[t]:
            raise InfeasibleError(f"{METHOD}: task {instance.task_names[t]!r} may run on no device")
        if param[t] > light:
            d = max(allowed[t], key=lambda d: (caps[d] - budget[d] - held[d], -d))
        else:
            d = max(allowed[t], key=lambda d: (budget[d], -d))
        dev[t] = d
        held[d] += param[t]
    _even_out(dev, held, [caps[d] - budget[d] for d in range(num_dev)], allowed, param)
    return dev


def _even_out(dev: list[int], held: list[int], target: list[int], allowed: list[list[int]], param: list[int]) -> None:
    """Move tasks off devices whose parameters exceed `target` onto allowed devices with room to spare, the largest
    that fit first (the greedy leaves a device a little over while another has a few MiB free)."""
    room = [t - h for t, h in zip(target, held, strict=True)]
    for d in range(len(room)):
        if room[d] >= 0:
            continue
        for t in sorted((t for t in range(len(dev)) if dev[t] == d and param[t]), key=lambda t: (-param[t], t)):
            if room[d] >= 0:
                break
            dest = max((e for e in allowed[t] if e != d), key=lambda e: room[e], default=None)
            if dest is None or room[dest] < param[t]:
                continue
            dev[t] = dest
            room[d] += param[t]
            room[dest] -= param[t]
            held[d] -= param[t]
            held[dest] += param[t]


def _light_bytes(instance: SchedulingInstance) -> int:
    """Parameters up to which a task counts as light: 1/65536 of a device's even share of all parameters (170 KiB
    on Mixtral-8x7B-like over 8 devices: its scalars and 64 KiB weights, nothing else).  Spreading such tasks for
    their parameters gains next to nothing and costs buffers: their inputs and outputs would then live on the
    parameter-heavy devices too.  (At 1/1024 the 8 MiB K/V projections were light as well, and the 112 MiB
    experts alone could not even out the devices' parameters: 30-50 MiB over.)"""
    return int(instance.param_bytes.sum()) // (max(1, instance.num_devices) * 65536)


def _schedule(instance: SchedulingInstance, dev: list[int], serial: bool) -> tuple[list[int], list[int]]:
    """Start and end ticks: topological order, appended per device (and when `serial`, one at a time: each task
    after the previous one has ended and its outgoing transfers have arrived)."""
    n = instance.num_tasks
    dur = instance.duration_tick.tolist()
    comm = instance.comm_tick.tolist()
    link = instance.link_class.tolist()
    start, end = [0] * n, [0] * n
    free = [0] * instance.num_devices
    last_end = 0
    for t in instance.topological_order:
        d = dev[t]
        st = max(free[d], last_end) if serial else free[d]
        for u, e in instance.predecessors[t]:
            st = max(st, end[u] if dev[u] == d else end[u] + comm[e][link[dev[u]][d]])
        start[t], end[t] = st, st + dur[t][d]
        free[d] = end[t]
        if serial:  # the next task waits for this one's outgoing transfers too, so its output can be freed first
            last_end = max([last_end, end[t], *(end[t] + comm[e][link[d][dev[v]]]
                                                for v, e in instance.successors[t] if dev[v] != d)])
    return start, end


def packed_plan(instance: SchedulingInstance, *, rounds: int = 4) -> Plan:
    """A plan within every device's capacity, built parameters-first (module docstring); status 'heuristic'.

    Raises `InfeasibleError` (with the closest miss) when no round fits."""
    t0 = time.perf_counter()
    n, num_dev = instance.num_tasks, instance.num_devices
    if n and num_dev == 0:
        raise InfeasibleError(f"{METHOD}: instance {instance.name!r} has tasks but no devices")
    w = working_set_bytes(instance).tolist()
    param = instance.param_bytes.tolist()
    caps = instance.capacity_bytes.tolist()
    closest: tuple[int, int, int] | None = None  # (excess bytes, device, peak) of the best failed round
    for serial in (False, True):
        budget = _initial_budgets(instance) if n else [0] * num_dev
        for _ in range(rounds):
            dev = _place(instance, budget, w)
            start, end = _schedule(instance, dev, serial)
            peaks = memory_profile(instance, memory_intervals(instance, dev, start, end)).peak_bytes
            excess = [p - c for p, c in zip(peaks, caps, strict=True)]
            if max(excess, default=0) <= 0:
                plan = heuristic_plan(instance, dev, start, end, METHOD, time.perf_counter() - t0)
                violations, _ = check_plan(instance, plan)
                if not violations:
                    return plan
                break  # not expected (same memory model); try the next variant rather than return a bad plan
            worst = int(np.argmax(excess))
            if closest is None or excess[worst] < closest[0]:
                closest = (excess[worst], worst, int(peaks[worst]))
            held = [0] * num_dev
            for t in range(n):
                held[dev[t]] += param[t]
            new = [max(b, int(p) - h) for b, p, h in zip(budget, peaks, held, strict=True)]
            if new == budget:
                break  # the same placement again: more rounds would not change anything
            budget = new
    assert closest is not None
    over, d, peak = closest
    raise InfeasibleError(
        f"{METHOD}: no packed plan fits; the closest needs {show_bytes(peak)} on {instance.device_names[d]}"
        f" ({show_bytes(over)} over its {show_bytes(int(caps[d]))})",
        fix="more memory per device, or the memory-aware list scheduler / planner at this capacity")
