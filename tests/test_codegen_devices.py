"""plan-codegen writes one rank per device the plan uses: a planned device left empty gets no rank."""

from __future__ import annotations

from planner.execute.partition import used_devices_only
from planner.schedule.plan import Plan, PlanStatus, TaskPlacement


def _plan(devices: tuple[int, ...], names=("gpu0", "gpu1", "gpu2")) -> Plan:
    placements = tuple(TaskPlacement(f"op{i}", d, i, i + 1) for i, d in enumerate(devices))
    return Plan("g", placements, tuple(names), len(devices), 1, PlanStatus.HEURISTIC, "milp")


def test_unused_devices_are_dropped_and_the_rest_renumbered_in_order():
    plan = used_devices_only(_plan((2, 0, 2)))
    assert plan.device_names == ("gpu0", "gpu2")
    assert [(p.task, p.device, p.start_tick) for p in plan.placements] == [("op0", 1, 0), ("op1", 0, 1),
                                                                           ("op2", 1, 2)]


def test_a_plan_that_uses_every_device_is_kept_as_is():
    plan = _plan((0, 1, 2))
    assert used_devices_only(plan) is plan
