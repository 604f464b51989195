"""Clusters that respect a plan: the plan is expressible on them, no longer than it is.

`respecting_clusters(fine, plan)` groups ops that the plan runs one after another on one device.  A cluster is a
run of consecutive ops of one device's order (so the plan never splits a cluster across devices, and its members
are consecutive there), grown greedily while every input of the next op from outside the run has arrived by the
run's start in the plan.  The projected plan (`project_respecting`) starts each cluster where the plan starts its
first member; the cluster then needs the sum of its members' durations, which ends no later than the plan's last
member did (members run back to back from the same start).

Why the projection is valid, and what is checked rather than argued: inside a run every outside input has arrived
by the run's start, so a cluster edge (a, b) joins a cluster that ended before b's start in the plan; but a
cluster edge carries the union of its fine edges' tensors, so its delay can exceed each fine edge's.  The
projection is therefore checked (precedence with the cluster delays, device overlap, memory with the contraction's
buffer semantics); clusters on a violated edge are split into single ops and the check repeats.  Single-op
clusters reproduce the plan itself, so the loop ends; when memory still fails there (a cluster holds its outputs
from its start, earlier than its members did), every op becomes its own cluster.  Hence: the warm start always
exists, is valid, and its makespan is at most the plan's.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.coarsen.contract import contract
from planner.coarsen.repair import quotient_is_acyclic
from planner.cost.instance import SchedulingInstance
from planner.schedule.errors import PlanInvalidError
from planner.schedule.plan import Plan, PlanMethod, PlanStatus, TaskPlacement
from planner.schedule.simulate import plan_orders
from planner.schedule.validate import validate_plan

__all__ = ["project_respecting", "respecting_clusters"]


def _runs(fine: SchedulingInstance, plan: Plan, max_cluster_ops: int) -> list[list[int]]:
    by = plan.by_task()
    names = fine.task_names
    start = [by[names[t]].start_tick for t in range(fine.num_tasks)]
    end = [by[names[t]].end_tick for t in range(fine.num_tasks)]
    device = [by[names[t]].device for t in range(fine.num_tasks)]
    clusters: list[list[int]] = []
    for order in plan_orders(fine, plan):
        run: list[int] = []
        for v in order:
            if run and len(run) < max_cluster_ops:
                members = set(run)
                run_start = start[run[0]]
                fits = all(u in members or end[u] + fine.comm(e, device[u], device[v]) <= run_start
                           for u, e in fine.predecessors[v])
                if fits:
                    run.append(v)
                    continue
            if run:
                clusters.append(run)
            run = [v]
        if run:
            clusters.append(run)
    return clusters


def project_respecting(fine: SchedulingInstance, plan: Plan, coarse: SchedulingInstance,
                       clusters: Sequence[Sequence[int]]) -> Plan:
    """The plan on the clusters: each cluster on its members' device, from its first member's start, for the sum of
    the members' durations (not checked here; `respecting_clusters` checks it)."""
    by = plan.by_task()
    names = fine.task_names
    rows = []
    for k, members in enumerate(clusters):
        first = min((by[names[v]] for v in members), key=lambda p: p.start_tick)
        dur = int(coarse.duration_tick[k, first.device])
        rows.append(TaskPlacement(coarse.task_names[k], first.device, first.start_tick, first.start_tick + dur))
    makespan = max((p.end_tick for p in rows), default=0) - min((p.start_tick for p in rows), default=0)
    return Plan(instance_name=coarse.name, placements=tuple(rows), device_names=tuple(coarse.device_names),
                makespan_tick=int(makespan), lower_bound_tick=min(coarse.trivial_lower_bound_tick(), int(makespan)),
                status=PlanStatus.FEASIBLE, method=PlanMethod.PROJECTED, tick_s=coarse.tick_s,
                time_unit=coarse.time_unit,
                task_ops=dict(coarse.task_ops))


def _violated(coarse: SchedulingInstance, projected: Plan) -> set[int]:
    """Clusters on a cluster edge whose delay the projection does not respect."""
    by = projected.by_task()
    names = coarse.task_names
    bad: set[int] = set()
    for k, (a, b) in enumerate(coarse.edges):
        pa, pb = by[names[a]], by[names[b]]
        if pb.start_tick < pa.end_tick + coarse.comm(k, pa.device, pb.device):
            bad.update((a, b))
    return bad


def respecting_clusters(fine: SchedulingInstance, plan: Plan, *, max_cluster_ops: int = 64,
                        ) -> tuple[list[list[int]], SchedulingInstance, Plan]:
    """(clusters, their contracted instance, the plan projected onto them) with the projection valid on the
    cluster instance and no longer than `plan` (module docstring).  `plan` must be a valid plan of `fine`."""
    clusters = _runs(fine, plan, max(1, max_cluster_ops))
    for _ in range(fine.num_tasks + 1):
        if quotient_is_acyclic(fine, clusters):
            coarse = contract(fine, clusters)
            projected = project_respecting(fine, plan, coarse, clusters)
            bad = _violated(coarse, projected)
            if not bad:
                try:
                    validate_plan(coarse, projected)
                    return clusters, coarse, projected
                except PlanInvalidError:
                    break  # memory: fall back on single ops below
            split = [[v] for k in sorted(bad) for v in clusters[k]]
            clusters = [c for k, c in enumerate(clusters) if k not in bad] + split
        else:
            break
    clusters = [[v] for v in range(fine.num_tasks)]
    coarse = contract(fine, clusters)
    projected = project_respecting(fine, plan, coarse, clusters)
    return clusters, coarse, projected
