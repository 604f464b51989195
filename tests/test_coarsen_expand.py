"""A valid plan over clusters expands to a valid plan over ops; plus the benchmark helper runs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import random_dags

from experiments.bench_coarsen import bench_coarsen
from planner.coarsen import coarsen
from planner.cost.instance import SchedulingInstance
from planner.schedule.plan import Plan, TaskPlacement


def list_schedule(inst: SchedulingInstance) -> Plan:
    """Greedy: tasks in topological order, each on the device where it finishes first (appended at the end)."""
    free = [0] * inst.num_devices
    where: dict[int, tuple[int, int]] = {}  # task -> (device, end)
    rows = []
    for t in inst.topological_order:
        best = None
        for d in range(inst.num_devices):
            if not inst.eligible(t, d):
                continue
            ready = max([free[d]] + [where[s][1] + inst.comm(e, where[s][0], d) for s, e in inst.predecessors[t]])
            end = ready + int(inst.duration_tick[t, d])
            if best is None or end < best[2]:
                best = (d, ready, end)
        d, start, end = best
        free[d] = end
        where[t] = (d, end)
        rows.append(TaskPlacement(inst.task_names[t], d, start, end))
    makespan = max((r.end_tick for r in rows), default=0)
    return Plan(inst.name, tuple(rows), inst.device_names, makespan, 0, "heuristic", "list")


def check_plan(inst: SchedulingInstance, plan: Plan) -> None:
    """Every task once, its own duration, precedence with comm, no overlap on a device."""
    by = plan.by_task()
    assert len(plan.placements) == inst.num_tasks == len(by)
    for t, name in enumerate(inst.task_names):
        p = by[name]
        assert p.end_tick - p.start_tick == inst.duration_tick[t, p.device]
    for e, (s, t) in enumerate(inst.edges):
        ps, pt = by[inst.task_names[s]], by[inst.task_names[t]]
        assert pt.start_tick >= ps.end_tick + inst.comm(e, ps.device, pt.device)
    for d in range(inst.num_devices):
        spans = sorted((p.start_tick, p.end_tick) for p in plan.placements if p.device == d)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


@settings(max_examples=60, deadline=None)
@given(random_dags(), st.integers(1, 8))
def test_a_valid_cluster_plan_expands_to_a_valid_op_plan(inst: SchedulingInstance, target: int) -> None:
    res = coarsen(inst, target_clusters=target)
    coarse_plan = list_schedule(res.instance)
    check_plan(res.instance, coarse_plan)
    fine_plan = res.expand_plan(coarse_plan)
    check_plan(inst, fine_plan)
    assert fine_plan.instance_name == inst.name
    assert fine_plan.makespan_tick <= coarse_plan.makespan_tick
    assert fine_plan.lower_bound_tick == inst.trivial_lower_bound_tick()


def test_bench_rows() -> None:
    rows = bench_coarsen([300, 600], target_clusters=20)
    assert [r["n_tasks"] for r in rows] == [300, 600]
    assert all(r["clusters"] <= 20 and r["coarsen_s"] >= 0 for r in rows)
