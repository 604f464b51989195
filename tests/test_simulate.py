"""Simulator: properties on random DAGs, hand-derived examples, contention, deadlock, retiming."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from instances import random_instance, round_robin_orders

from planner.cost.instance import SchedulingInstance
from planner.schedule.errors import DeadlockError, SimulationError
from planner.schedule.memory import memory_intervals, memory_profile
from planner.schedule.simulate import plan_orders, retime_plan, simulate, simulate_plan
from planner.schedule.timeline import timeline_of_plan
from planner.schedule.validate import validate_plan

cases = st.tuples(
    st.integers(0, 2**31 - 1),  # instance seed
    st.integers(1, 12),  # tasks
    st.integers(1, 4),  # devices
    st.booleans(),  # heterogeneous
    st.integers(0, 2**31 - 1),  # order seed
    st.booleans(),  # random devices instead of round robin
    st.booleans(),  # link contention
)


def _check_timeline(inst: SchedulingInstance, tl, contention: bool) -> None:
    by = tl.by_task()
    # bound: makespan >= max(critical path, total work / total speed)
    assert tl.makespan_tick >= inst.trivial_lower_bound_tick()
    # each task runs its duration on an eligible device
    for t, name in enumerate(inst.task_names):
        p = by[name]
        assert inst.eligible(t, p.device)
        assert p.end_tick - p.start_tick == inst.duration_tick[t, p.device]
    # no overlap on a compute stream
    for d in range(inst.num_devices):
        row = [p for p in tl.device_order(d) if p.end_tick > p.start_tick]
        for a, b in zip(row, row[1:]):
            assert a.end_tick <= b.start_tick
    # every receive ends after its send, and before its consumer starts; cross-device edges all have a transfer
    cross = {e for e, (u, v) in enumerate(inst.edges)
             if by[inst.task_names[u]].device != by[inst.task_names[v]].device}
    assert {x.edge for x in tl.transfers} == cross
    for x in tl.transfers:
        assert x.start_tick >= by[x.src_task].end_tick
        assert x.end_tick - x.start_tick == inst.comm(x.edge, x.src_device, x.dst_device)
        assert x.end_tick >= x.start_tick
        assert by[x.dst_task].start_tick >= x.end_tick
        if not contention:
            assert x.start_tick == by[x.src_task].end_tick
    if contention:  # transfers on one directed link never overlap
        links: dict[tuple[int, int], list] = {}
        for x in tl.transfers:
            if x.end_tick > x.start_tick:
                links.setdefault((x.src_device, x.dst_device), []).append(x)
        for xs in links.values():
            xs.sort(key=lambda x: x.start_tick)
            for a, b in zip(xs, xs[1:]):
                assert a.end_tick <= b.start_tick
    # busy, idle, bubble ratio
    assert sum(tl.busy_tick) == sum(p.end_tick - p.start_tick for p in tl.placements)
    assert all(i >= 0 for i in tl.idle_tick)
    if tl.makespan_tick:
        assert tl.bubble_ratio == pytest.approx(sum(tl.idle_tick) / (inst.num_devices * tl.makespan_tick))
    assert sum(tl.link_bytes.values()) == sum(x.size_bytes for x in tl.transfers)


@settings(max_examples=150, deadline=None)
@given(cases)
@example((1306, 9, 3, True, 1306, False, False))  # two zero-length tasks tie at tick 24 on device 1
def test_random_orders_simulate_to_valid_plans(case):
    seed, n, d, hetero, order_seed, random_dev, contention = case
    inst = random_instance(seed, n, d, heterogeneous=hetero)
    orders = round_robin_orders(inst, order_seed, random_devices=random_dev)
    tl = simulate(inst, orders, link_contention=contention)
    _check_timeline(inst, tl, contention)
    plan = tl.to_plan(method="round-robin", lower_bound_tick=inst.trivial_lower_bound_tick())
    report = validate_plan(inst, plan)
    if not contention:  # same memory semantics, shared code: the validator sees what the simulator saw
        assert report.peak_memory_bytes == tl.memory.peak_bytes
        # and a tight plan replays to itself.  Only the order of zero-length tasks that share a start tick on one
        # device cannot be read back from the plan: then tasks may replay earlier (never later) on the same devices
        again = simulate_plan(inst, plan)
        zero = [(p.device, p.start_tick) for p in plan.placements if p.end_tick == p.start_tick]
        if len(zero) == len(set(zero)):
            assert again.placements == plan.placements
        else:
            for old, new in zip(plan.placements, again.placements, strict=True):
                assert (new.task, new.device) == (old.task, old.device) and new.start_tick <= old.start_tick
    # capacity exactly at the peak is fine, one byte less is not
    tight = dataclasses.replace(inst, capacity_bytes=np.array(report.peak_memory_bytes, dtype=np.int64))
    validate_plan(tight, plan)


def test_uniform_chain_hand_derived():
    # a(2) -> b(3) -> c(1), comm 4 across devices.  a, c on p0 and b on p1:
    # a [0,2), b starts 2+4 = 6 -> [6,9), c starts 9+4 = 13 -> [13,14).  makespan 14.
    inst = SchedulingInstance.uniform("chain", [2, 3, 1], [(0, 1, 4), (1, 2, 4)], 2, task_names=["a", "b", "c"])
    tl = simulate(inst, [["a", "c"], ["b"]])
    assert [(p.task, p.start_tick, p.end_tick) for p in tl.placements] == [("a", 0, 2), ("b", 6, 9), ("c", 13, 14)]
    assert tl.makespan_tick == 14
    assert tl.busy_tick == (3, 3) and tl.idle_tick == (11, 11)
    assert tl.bubble_ratio == pytest.approx(22 / 28)
    assert [(x.src_task, x.dst_task, x.start_tick, x.end_tick) for x in tl.transfers] == [
        ("a", "b", 2, 6), ("b", "c", 9, 13)]


def _fan_out(contention: bool):
    # s(1) on p0 feeds x, y (each 1 tick) on p1; each edge needs 5 ticks (10 bytes at 2 bytes/tick).
    # no contention: both arrive at 6 -> x [6,7), y [7,8).
    # contention on link p0->p1: s->x [1,6), s->y [6,11) -> x [6,7), y [11,12).
    inst = SchedulingInstance(
        name="fan", task_names=("s", "x", "y"), device_names=("p0", "p1"),
        duration_tick=np.ones((3, 2), dtype=np.int64), edges=((0, 1), (0, 2)),
        edge_tensors=(("tx",), ("ty",)), tensor_bytes={"tx": 10, "ty": 10},
        edge_fixed_tick=np.zeros(2, dtype=np.int64), link_class=np.array([[0, 1], [1, 0]]),
        link_latency_tick=np.zeros(2), link_bytes_per_tick=np.array([np.inf, 2.0]),
        param_bytes=np.zeros(3, dtype=np.int64), activation_bytes=np.array([7, 0, 0]),
        peak_internal_bytes=np.zeros(3, dtype=np.int64), capacity_bytes=np.full(2, 2**40, dtype=np.int64),
    )
    return inst, simulate(inst, [["s"], ["x", "y"]], link_contention=contention)


def test_link_contention_serializes_one_directed_link():
    inst, free = _fan_out(False)
    assert {p.task: (p.start_tick, p.end_tick) for p in free.placements} == {"s": (0, 1), "x": (6, 7), "y": (7, 8)}
    _, busy = _fan_out(True)
    assert {p.task: (p.start_tick, p.end_tick) for p in busy.placements} == {"s": (0, 1), "x": (6, 7), "y": (11, 12)}
    assert [(x.start_tick, x.end_tick) for x in busy.transfers] == [(1, 6), (6, 11)]
    assert dict(busy.link_bytes) == {(0, 1): 20}
    # memory: the sender holds s's output until its last transfer arrives; the receiver one copy from the first
    # arrival to the end of its last consumer
    assert busy.memory.steps[0] == ((0, 7), (11, 0))
    assert busy.memory.steps[1] == ((0, 0), (6, 7), (12, 0))
    assert free.memory.peak_bytes == (7, 7)


def test_deadlock_names_stuck_tasks():
    # a -> b, c -> d; p0 runs b before c, p1 runs d before a: each device waits for the other
    inst = SchedulingInstance.uniform("dl", [1, 1, 1, 1], [(0, 1, 0), (2, 3, 0)], 2, task_names=["a", "b", "c", "d"])
    with pytest.raises(DeadlockError) as info:
        simulate(inst, [["b", "c"], ["d", "a"]])
    assert set(info.value.stuck_tasks) == {"b", "d"}
    msg = str(info.value)
    assert "p0 is stuck at b, which waits for a (on p1)" in msg and "p1 is stuck at d, which waits for c (on p0)" in msg


def test_bad_orders_are_reported():
    inst = SchedulingInstance.uniform("u", [1, 1], [], 2, task_names=["a", "b"])
    with pytest.raises(SimulationError, match=r"\['b'\] are in no device's order"):
        simulate(inst, [["a"], []])
    with pytest.raises(SimulationError, match="'a' ordered twice"):
        simulate(inst, [["a", "b"], ["a"]])
    with pytest.raises(SimulationError, match="unknown task 'zz'"):
        simulate(inst, [["a", "b", "zz"]])
    with pytest.raises(SimulationError, match="3 devices"):
        simulate(inst, [["a"], ["b"], []])


def test_retime_on_other_hardware_keeps_devices_and_order():
    inst = random_instance(3, 12, 3, heterogeneous=False)
    plan = simulate(inst, round_robin_orders(inst)).to_plan(method="rr", status="heuristic")
    slower = dataclasses.replace(inst, duration_tick=inst.duration_tick * 2, edge_fixed_tick=inst.edge_fixed_tick * 2)
    new = retime_plan(plan, slower, hardware_path="slow.yaml", hardware_sha256="00" * 32)
    assert plan_orders(slower, new) == plan_orders(inst, plan)
    assert {p.task: p.device for p in new.placements} == {p.task: p.device for p in plan.placements}
    # every time doubles (all durations and delays doubled, same orders)
    assert all(q.start_tick == 2 * p.start_tick and q.end_tick == 2 * p.end_tick
               for p, q in zip(plan.placements, new.placements))
    assert new.makespan_tick == 2 * plan.makespan_tick and new.status == "heuristic" and new.method == "rr+retime"
    assert new.hardware_path == "slow.yaml"
    validate_plan(slower, new)
    with pytest.raises(SimulationError, match="uses 3 devices"):
        retime_plan(plan, random_instance(3, 12, 2, heterogeneous=False))


def test_timeline_of_plan_matches_simulation_for_tight_plans():
    inst = random_instance(11, 10, 3)
    tl = simulate(inst, round_robin_orders(inst, 2))
    same = timeline_of_plan(inst, tl.to_plan(method="x"))
    assert same.placements == tl.placements and same.transfers == tl.transfers
    assert same.memory.steps == tl.memory.steps and same.bubble_ratio == tl.bubble_ratio


def test_memory_semantics_single_device():
    # a(2) -> b(3) on one device; params 5 each; a's output 10 lives [0,5) (until b ends); b's output 20 [2,5);
    # b's internal 1 [2,5) -> 10 + 10 + 20 + 1 = 41 at [2,5)
    inst = SchedulingInstance.uniform("m", [2, 3], [(0, 1, 0)], 1, param_bytes=[5, 5], activation_bytes=[10, 20])
    inst = dataclasses.replace(inst, peak_internal_bytes=np.array([0, 1]))
    tl = simulate(inst, [[0, 1]])
    assert tl.memory.steps[0] == ((0, 20), (2, 41), (5, 0))
    assert tl.memory.peak_bytes == (41,) and tl.memory.peak_tick == (2,)
    prof = memory_profile(inst, memory_intervals(inst, [0, 0], [0, 2], [2, 5]))
    assert prof.steps == tl.memory.steps
    assert {iv.what for iv in prof.live_at(0, 3)} == {"param", "activation", "internal"}
