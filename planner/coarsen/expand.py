"""Expand a plan over clusters into a plan over the fine tasks (ops).

Definition: a cluster placed on device d from `start_tick` runs its members **one after another, in the cluster's
member order (a topological order of the fine graph), each for its own duration on d**, starting at the cluster's
start.  That is exactly the contraction's duration (sum of member durations), so the members fill the cluster's
interval from its start (and leave any slack the plan gave the cluster at its end).  Every member keeps the
cluster's device and stage.

Why the result is valid when the cluster plan is: members of one cluster run in precedence order without overlap
inside the cluster's interval; for a fine edge u -> v between clusters a and b on different devices, the cluster
edge (a, b) carries a superset of its tensors and at least its fixed delay, so its delay over any link is at least
the fine edge's, and v starts no earlier than b, which starts after a's end (>= u's end) plus that delay.

The result is a plan for the fine instance: its `lower_bound_tick` is the fine instance's trivial bound (a bound
proved on the coarse instance does not hold for the fine one, whose optimum may be shorter), and a plan proved
'optimal' on clusters becomes 'feasible'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from planner.coarsen.adjacency import Adjacency
from planner.cost.instance import SchedulingInstance
from planner.schedule.plan import Plan, PlanStatus


def expand_plan(fine: SchedulingInstance, coarse: SchedulingInstance, clusters: Sequence[Sequence[int]],
                plan: Plan) -> Plan:
    """The fine-task plan of the cluster plan `plan` (a plan over `coarse`'s tasks).

    `clusters[k]` holds the fine task indices of `coarse`'s task k.  ValueError if the plan names an unknown task,
    places a cluster on a device where a member is ineligible, or gives it an interval shorter than its duration.
    """
    if len(clusters) != coarse.num_tasks:
        raise ValueError(f"{len(clusters)} clusters for a coarse instance of {coarse.num_tasks} tasks")
    pos = Adjacency.of(fine).pos
    index = coarse.task_index
    dur = fine.duration_tick
    names = fine.task_names
    placements = []
    for p in plan.placements:
        if p.task not in index:
            raise ValueError(f"plan places {p.task!r}, which is no task of {coarse.name!r}")
        members = sorted(clusters[index[p.task]], key=pos.__getitem__)
        t = p.start_tick
        for v in members:
            if not fine.eligible(v, p.device):
                raise ValueError(f"{names[v]!r} (in {p.task!r}) may not run on device {p.device}")
            end = t + int(dur[v, p.device])
            placements.append(dataclasses.replace(p, task=names[v], start_tick=t, end_tick=end))
            t = end
        if t > p.end_tick:
            raise ValueError(f"{p.task!r} gets [{p.start_tick}, {p.end_tick}) but its members need {t - p.start_tick}"
                             " ticks")
    makespan = (max(p.end_tick for p in placements) - min(p.start_tick for p in placements)) if placements else 0
    return dataclasses.replace(
        plan,
        instance_name=fine.name,
        placements=tuple(placements),
        makespan_tick=makespan,
        lower_bound_tick=fine.trivial_lower_bound_tick(),
        status=PlanStatus.FEASIBLE if plan.status == PlanStatus.OPTIMAL else PlanStatus(plan.status),
        task_ops=dict(fine.task_ops),
    )
