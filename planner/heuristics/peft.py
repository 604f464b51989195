"""PEFT, Predict Earliest Finish Time (Arabnejad and Barbosa, 2014): HEFT's list scheduler with a look-ahead.

The optimistic cost table OCT[t, d] estimates the longest path from the end of t, placed on device d, to a sink,
when every later task goes to its best device and a transfer costs its mean delay when the devices differ:

    OCT[t, d] = max over edges e = (t, s) of  min over eligible d' of (OCT[s, d'] + w(s, d') + [d' != d] c(e))
    OCT[t, d] = 0 for a sink

with w(s, d') the duration of s on d' and c(e) the mean delay of e over pairs of distinct devices (`mean_comm`,
as HEFT's rank uses).  Priority: the mean of OCT[t, .] over t's eligible devices (higher first).  Device: the one
with the smallest EFT(t, d) + OCT[t, d], so a task is not put on a device where it finishes early but its
successors would wait for their inputs.  The scheduling itself (insertion, memory, validity) is
`list_schedule`'s; only the priority and the device key differ from HEFT.

PEFT is not always better than HEFT: it trades the finish time of one task for an estimate of the work after it.
The engine takes the best of the classic schedulers (`planner.solve`), so it only helps.
"""

from __future__ import annotations

import time

import numpy as np

from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.heuristics.list_schedule import list_schedule, mean_comm, with_solve_time
from planner.heuristics.policy import DEFAULT_LIST_POLICY
from planner.schedule.plan import Plan

__all__ = ["PEFT_METHOD", "optimistic_cost_table", "peft", "peft_rank"]

PEFT_METHOD = "peft"  # the plan's method (a list-scheduling policy of its own, see `PlanMethod`)


def optimistic_cost_table(instance: SchedulingInstance) -> np.ndarray:
    """float64 [n_tasks, n_devices]: OCT (module docstring); inf on devices where the task is not eligible."""
    n, nd = instance.num_tasks, instance.num_devices
    ok = instance.duration_tick < INELIGIBLE
    dur = np.where(ok, instance.duration_tick, np.inf).astype(np.float64)
    comm = mean_comm(instance)
    oct_ = np.zeros((n, nd), dtype=np.float64)
    succ = instance.successors
    for t in reversed(instance.topological_order):
        row = np.zeros(nd, dtype=np.float64)
        for s, e in succ[t]:
            after = oct_[s] + dur[s]  # ending on d' (inf where s is not eligible)
            # min over d' of after[d'] + [d' != d] c: staying costs after[d], moving costs min(after) + c
            row = np.maximum(row, np.minimum(after, after.min() + comm[e]))
        oct_[t] = np.where(ok[t], row, np.inf)
    return oct_


def peft_rank(oct_table: np.ndarray) -> np.ndarray:
    """float64 [n_tasks]: PEFT's priority, the mean of each task's finite OCT entries."""
    finite = np.isfinite(oct_table)
    count = finite.sum(axis=1)
    total = np.where(finite, oct_table, 0.0).sum(axis=1)
    return np.divide(total, count, out=np.zeros(len(total)), where=count > 0)


def peft(instance: SchedulingInstance, *, insertion: bool = True, respect_memory: bool = True,
         max_gap_scan: int = DEFAULT_LIST_POLICY.max_gap_scan) -> Plan:
    """PEFT (module docstring), memory-aware like `heft`; raises `InfeasibleError` like `list_schedule`."""
    t0 = time.perf_counter()
    table = optimistic_cost_table(instance)
    rows = table.tolist()

    def key(task: int, _k: int, device: int, finish: int) -> float:
        return finish + rows[task][device]

    plan = list_schedule(instance, peft_rank(table), key, insertion=insertion, respect_memory=respect_memory,
                         max_gap_scan=max_gap_scan, method=PEFT_METHOD)
    return with_solve_time(plan, time.perf_counter() - t0)
