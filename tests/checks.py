"""Independent checks that tests share: a plan checker written apart from the project's validator, and the
partition property of a clustering.  No tests here."""

from __future__ import annotations

from planner.cost.instance import SchedulingInstance
from planner.schedule.plan import Plan
from planner.schedule.validate import validate_plan


def check_plan_valid(instance: SchedulingInstance, plan: Plan) -> None:
    """Independent check (times, eligibility, precedence + comm, overlap, parameter memory), then the project
    validator."""
    by = plan.by_task()
    assert sorted(by) == sorted(instance.task_names)
    dev = [by[t].device for t in instance.task_names]
    s = [by[t].start_tick for t in instance.task_names]
    e = [by[t].end_tick for t in instance.task_names]
    for t in range(instance.num_tasks):
        assert instance.eligible(t, dev[t]), f"task {t} on ineligible device {dev[t]}"
        assert e[t] - s[t] == instance.duration_tick[t, dev[t]] and s[t] >= 0
    for k, (u, v) in enumerate(instance.edges):
        assert s[v] >= e[u] + instance.comm(k, dev[u], dev[v]), f"edge {u}->{v} violated"
    for d in range(instance.num_devices):
        runs = sorted((s[t], e[t]) for t in range(instance.num_tasks) if dev[t] == d and e[t] > s[t])
        for (_, e0), (s1, _) in zip(runs, runs[1:]):
            assert s1 >= e0, f"overlap on device {d}"
        params = sum(int(instance.param_bytes[t]) for t in range(instance.num_tasks) if dev[t] == d)
        assert params <= instance.capacity_bytes[d]
    assert plan.makespan_tick == max(e) - min(s)
    assert instance.trivial_lower_bound_tick() <= plan.lower_bound_tick <= plan.makespan_tick
    validate_plan(instance, plan)


def assert_partition(inst: SchedulingInstance, clusters: list[list[int]]) -> None:
    """Every task in exactly one cluster, and no cluster empty."""
    members = sorted(v for c in clusters for v in c)
    assert members == list(range(inst.num_tasks))
    assert all(clusters)
