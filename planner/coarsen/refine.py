"""Cluster surgery between rounds of the bi-level search (`planner.solve`): split, refine, and carry plans across.

* `split_to_target` — halve the most expensive clusters until there are `target` of them (round 0's clusters).
* `critical_tasks` — the chain of tasks that ends last in a plan (what made each one start when it did).
* `refine` — split the clusters on a plan's critical path in two (contiguous halves of their member order, which
  keeps the cluster graph acyclic) and, above 1.5 x the target size, merge pairs of clusters that run back to back
  on one device off the critical path (only when the cluster graph stays acyclic), so the model keeps its size.
* `replay` — the previous round's plan on the refined clusters (each keeps its parent's device and order): the
  next round's warm start.
* `project_plan` — an op-level plan seen on clusters (the phase-1 incumbent as round 0's warm start).
* `as_singletons` — an op plan as a plan over one-op clusters (the identity clustering).

Every plan made here is produced by the simulator from per-device orders, so it is valid by construction.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence

import numpy as np

from planner.coarsen.contract import contract
from planner.coarsen.repair import quotient_is_acyclic
from planner.cost.instance import SchedulingInstance
from planner.schedule.plan import Plan, PlanMethod
from planner.schedule.simulate import plan_orders, simulate

__all__ = ["Refinement", "as_singletons", "critical_tasks", "project_plan", "refine", "replay", "split_to_target"]


@dataclasses.dataclass(frozen=True)
class Refinement:
    """New clusters (member lists over the fine tasks) and, per new cluster, the index of the old cluster it came
    from (`parent`; a merged pair names its first cluster)."""

    clusters: list[list[int]]
    parent: list[int]


def critical_tasks(instance: SchedulingInstance, plan: Plan) -> set[int]:
    """The tasks of the chain that ends last: walk back from the last task through whatever made each start."""
    by_task = plan.by_task()
    index = instance.task_index
    device_prev: dict[int, int] = {}
    for order in plan_orders(instance, plan):
        for a, b in zip(order, order[1:]):
            device_prev[b] = a
    t = index[max(plan.placements, key=lambda p: p.end_tick).task]
    chain = {t}
    while True:
        p = by_task[instance.task_names[t]]
        blocker = None
        for s, e in instance.predecessors[t]:
            ps = by_task[instance.task_names[s]]
            if ps.end_tick + instance.comm(e, ps.device, p.device) == p.start_tick:
                blocker = s
                break
        if (blocker is None and t in device_prev
                and by_task[instance.task_names[device_prev[t]]].end_tick == p.start_tick):
            blocker = device_prev[t]
        if blocker is None or blocker in chain:
            return chain
        chain.add(blocker)
        t = blocker


def refine(fine: SchedulingInstance, coarse: SchedulingInstance, clusters: Sequence[Sequence[int]], plan: Plan,
           target: int) -> Refinement | None:
    """The refined clusters (module docstring), or None when no cluster on the critical path can be split."""
    critical = critical_tasks(coarse, plan)
    split = [k for k in sorted(critical) if len(clusters[k]) > 1]
    if not split:
        return None
    new: list[list[int]] = []
    parent: list[int] = []
    for k, members in enumerate(clusters):
        if k in split:
            half = len(members) // 2
            new += [list(members[:half]), list(members[half:])]
            parent += [k, k]
        else:
            new.append(list(members))
            parent.append(k)
    # Above 1.5 x the target size, merge back pairs of clusters that run back to back on one device off the
    # critical path, smallest first, so the model does not grow round after round.  Merging can delay the first
    # of the pair (a cluster starts when all its inputs are there), so below that size we never merge.
    by_task = plan.by_task()
    budget = max(0, len(new) - int(1.5 * target))
    merged_into: dict[int, int] = {}
    candidates = []
    for order in plan_orders(coarse, plan):
        for a, b in zip(order, order[1:]):
            if a in critical or b in critical:
                continue
            size = int(coarse.duration_tick[a, by_task[coarse.task_names[a]].device]
                       + coarse.duration_tick[b, by_task[coarse.task_names[b]].device])
            candidates.append((size, a, b))
    position = {k: i for i, k in enumerate(parent) if parent.count(k) == 1}
    for _, a, b in sorted(candidates):
        if budget == 0:
            break
        if a in merged_into or b in merged_into or a not in position or b not in position:
            continue
        trial = [list(m) for m in new]
        trial[position[a]] = trial[position[a]] + trial[position[b]]
        trial[position[b]] = []
        trial_clean = [m for m in trial if m]
        if not quotient_is_acyclic(fine, trial_clean):
            continue
        new = trial
        merged_into[a] = merged_into[b] = a
        budget -= 1
    keep = [i for i, m in enumerate(new) if m]
    return Refinement([new[i] for i in keep], [parent[i] for i in keep])


def split_to_target(fine: SchedulingInstance, clusters: Sequence[Sequence[int]], target: int) -> list[list[int]]:
    """Halve the most expensive clusters until there are `target` of them (or none can be split).

    Linear clustering can leave fewer, longer clusters than the MILP can handle; a long cluster must wait for all
    its inputs before it starts, which hides overlap.  A contiguous half of a cluster's member order (a topological
    order) keeps the cluster graph acyclic: a cycle through the halves would have been a cycle through the whole.
    """
    cost = fine.min_duration_tick()
    heap = [(-int(cost[list(m)].sum()), k) for k, m in enumerate(clusters) if len(m) > 1]
    heapq.heapify(heap)
    out = [list(m) for m in clusters]
    while len(out) < target and heap:
        _, k = heapq.heappop(heap)
        members = out[k]
        half = len(members) // 2
        out[k], tail = members[:half], members[half:]
        out.append(tail)
        for j in (k, len(out) - 1):
            if len(out[j]) > 1:
                heapq.heappush(heap, (-int(cost[out[j]].sum()), j))
    return out


def project_plan(fine_plan: Plan, coarse: SchedulingInstance, clusters: Sequence[Sequence[int]],
                 fine: SchedulingInstance) -> Plan:
    """An op-level plan seen on clusters: each cluster on the device that ran most of its work, ordered by its
    earliest member's start, then simulated (a warm start for the cluster model)."""
    by_task = fine_plan.by_task()
    rows: list[list[tuple[int, int]]] = [[] for _ in range(coarse.num_devices)]
    for k, members in enumerate(clusters):
        work = np.zeros(coarse.num_devices)
        first = None
        for v in members:
            p = by_task[fine.task_names[v]]
            work[p.device] += p.end_tick - p.start_tick
            first = p.start_tick if first is None else min(first, p.start_tick)
        device = int(np.argmax(work))
        if not coarse.eligible(k, device):
            device = int(np.argmin(coarse.duration_tick[k]))
        rows[device].append((first or 0, k))
    orders = [[k for _, k in sorted(row)] for row in rows]
    bound = coarse.trivial_lower_bound_tick()
    return simulate(coarse, orders).to_plan(method=PlanMethod.PROJECTED, lower_bound_tick=bound)


def replay(coarse: SchedulingInstance, old: Plan, old_names: Sequence[str], parent: Sequence[int]) -> Plan:
    """The old plan on new clusters: each keeps its parent's device, ordered by the parent's start, then simulated."""
    by_task = old.by_task()
    rows: list[list[tuple[int, int, int]]] = [[] for _ in range(coarse.num_devices)]
    for k, p in enumerate(parent):
        placement = by_task[old_names[p]]
        rows[placement.device].append((placement.start_tick, k, k))
    orders = [[k for _, _, k in sorted(row)] for row in rows]
    bound = coarse.trivial_lower_bound_tick()
    return simulate(coarse, orders).to_plan(method=PlanMethod.REPLAY, lower_bound_tick=bound)


def as_singletons(fine: SchedulingInstance, op_plan: Plan) -> tuple[SchedulingInstance, list[list[int]], Plan]:
    """An op plan as a plan over one-op clusters: (the cluster instance of the identity clustering, its clusters,
    the plan over it)."""
    clusters = [[i] for i in range(fine.num_tasks)]
    coarse = contract(fine, clusters)
    by = op_plan.by_task()
    placements = tuple(dataclasses.replace(by[fine.task_names[k]], task=coarse.task_names[k])
                       for k in range(fine.num_tasks))
    plan = dataclasses.replace(op_plan, instance_name=coarse.name, placements=placements,
                               task_ops=dict(coarse.task_ops))
    return coarse, clusters, plan
