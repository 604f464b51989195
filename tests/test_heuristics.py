"""List scheduling / HEFT, the baselines and the memory bounds of planner/heuristics.

Every plan goes through the shared validator (`planner.schedule.validate.validate_plan`) and through the small
independent check below (placement, durations, precedence + communication, no overlap), so a bug shared by the
heuristic and one checker still shows.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.bench_heft import bench_heft, random_layered_instance
from planner.cost.instance import INELIGIBLE, UNBOUNDED_BYTES, SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics import (
    Rank,
    capacity_lower_bound,
    heft,
    largest_memory_tasks,
    list_schedule,
    round_robin,
    single_device,
    smallest_feasible_capacity_bytes,
)
from planner.heuristics.memory import MemoryTracker, task_alone_bytes
from planner.schedule.plan import Plan
from planner.schedule.validate import validate_plan

# ---------------------------------------------------------------------------------------------------- helpers --


def check_basic(inst: SchedulingInstance, plan: Plan) -> dict[str, tuple[int, int, int]]:
    """Independent check (no memory): returns task -> (device, start, end)."""
    assert plan.device_names == inst.device_names
    got = {p.task: (p.device, p.start_tick, p.end_tick) for p in plan.placements}
    assert len(plan.placements) == inst.num_tasks == len(got)
    assert set(got) == set(inst.task_names)
    for t, name in enumerate(inst.task_names):
        d, s, e = got[name]
        assert 0 <= d < inst.num_devices and s >= 0
        assert inst.duration_tick[t, d] < INELIGIBLE, f"{name} on ineligible device {d}"
        assert e - s == inst.duration_tick[t, d], f"{name}: wrong duration"
    for k, (u, v) in enumerate(inst.edges):
        du, _, eu = got[inst.task_names[u]]
        dv, sv, _ = got[inst.task_names[v]]
        assert sv >= eu + inst.comm(k, du, dv), f"edge {u}->{v}: starts before data arrives"
    per_dev: dict[int, list[tuple[int, int]]] = {}
    for d, s, e in got.values():
        if e > s:
            per_dev.setdefault(d, []).append((s, e))
    for d, ivs in per_dev.items():
        ivs.sort()
        for (_, e1), (s2, _) in zip(ivs, ivs[1:], strict=False):
            assert s2 >= e1, f"overlap on device {d}"
    assert plan.makespan_tick == max((e for _, _, e in got.values()), default=0)
    assert plan.status == "heuristic"
    assert plan.lower_bound_tick == inst.trivial_lower_bound_tick()
    # ... and that bound recomputed here, not with the function the heuristic calls (so a bug there cannot hide): it
    # is at least
    # the longest chain of fastest durations, and at most the makespan.
    assert plan.lower_bound_tick >= _chain_bound(inst)
    if (inst.duration_tick == inst.duration_tick[:, :1]).all():  # identical devices: the bound is exact
        work = int(inst.duration_tick[:, 0].sum())
        assert plan.lower_bound_tick == max(_chain_bound(inst), -(-work // inst.num_devices))
    assert plan.makespan_tick >= plan.lower_bound_tick
    assert plan.instance_name == inst.name and plan.time_unit == inst.time_unit and plan.tick_s == inst.tick_s
    assert plan.solve_time_s >= 0
    return got


def _chain_bound(inst: SchedulingInstance) -> int:
    """Longest path of fastest eligible durations, communication ignored (by hand, for check_basic)."""
    finish: dict[int, int] = {}
    for t in inst.topological_order:
        fastest = min(int(d) for d in inst.duration_tick[t] if d < INELIGIBLE)
        finish[t] = max((finish[p] for p, _ in inst.predecessors[t]), default=0) + fastest
    return max(finish.values(), default=0)


def check(inst: SchedulingInstance, plan: Plan) -> dict[str, tuple[int, int, int]]:
    got = check_basic(inst, plan)
    validate_plan(inst, plan)
    return got


def hetero_instance(
    durations: np.ndarray,
    edges: list[tuple[int, int]],
    edge_bytes: list[int],
    *,
    link_class: np.ndarray | None = None,
    latency: tuple[float, float] = (5.0, 20.0),
    bytes_per_tick: tuple[float, float] = (100.0, 10.0),
    param_bytes=None,
    activation_bytes=None,
    internal_bytes=None,
    capacity_bytes=UNBOUNDED_BYTES,
    name: str = "hetero",
) -> SchedulingInstance:
    """Devices with their own durations; two link classes (1: fast, 2: slow); edge k carries tensor 'e{k}'."""
    n, d = durations.shape
    if link_class is None:  # two islands: fast inside, slow across
        island = np.arange(d) % 2
        link_class = np.where(island[:, None] == island[None, :], 1, 2)
        np.fill_diagonal(link_class, 0)
    zeros = np.zeros(n, dtype=np.int64)
    return SchedulingInstance(
        name=name,
        task_names=tuple(f"t{i}" for i in range(n)),
        device_names=tuple(f"d{i}" for i in range(d)),
        duration_tick=np.asarray(durations, dtype=np.int64),
        edges=tuple(edges),
        edge_tensors=tuple((f"e{k}",) for k in range(len(edges))),
        tensor_bytes={f"e{k}": int(b) for k, b in enumerate(edge_bytes)},
        edge_fixed_tick=np.zeros(len(edges), dtype=np.int64),
        link_class=np.asarray(link_class, dtype=np.int64),
        link_latency_tick=np.array([0.0, *latency]),
        link_bytes_per_tick=np.array([np.inf, *bytes_per_tick]),
        param_bytes=np.asarray(param_bytes if param_bytes is not None else zeros, dtype=np.int64),
        activation_bytes=np.asarray(activation_bytes if activation_bytes is not None else zeros, dtype=np.int64),
        peak_internal_bytes=np.asarray(internal_bytes if internal_bytes is not None else zeros, dtype=np.int64),
        capacity_bytes=np.full(d, capacity_bytes, dtype=np.int64),
    )


@st.composite
def dags(draw, max_tasks: int = 9):
    n = draw(st.integers(1, max_tasks))
    pairs = [(i, j) for j in range(n) for i in range(j)]
    mask = draw(st.lists(st.booleans(), min_size=len(pairs), max_size=len(pairs)))
    edges = [p for p, m in zip(pairs, mask, strict=True) if m and draw(st.integers(0, 2)) == 0]
    return n, edges


@st.composite
def uniform_instances(draw, zero_comm: bool = False):
    n, edges = draw(dags())
    durs = draw(st.lists(st.integers(0, 20), min_size=n, max_size=n))
    comm = [0 if zero_comm else draw(st.integers(0, 15)) for _ in edges]
    num_dev = draw(st.integers(1, 4))
    return SchedulingInstance.uniform("u", durs, [(s, t, c) for (s, t), c in zip(edges, comm, strict=True)],
                                      num_dev)


@st.composite
def hetero_instances(draw, zero_comm: bool = False, all_eligible: bool = False, memory: bool = False):
    n, edges = draw(dags())
    num_dev = draw(st.integers(2, 4))
    base = np.array(draw(st.lists(st.integers(1, 20), min_size=n, max_size=n)))
    speed = np.array(draw(st.lists(st.integers(1, 3), min_size=num_dev, max_size=num_dev)))
    dur = base[:, None] * speed[None, :]
    if not all_eligible:
        forbid = np.array(draw(st.lists(st.booleans(), min_size=n * num_dev, max_size=n * num_dev)))
        forbid = forbid.reshape(n, num_dev)
        forbid[np.arange(n), np.argmin(dur, axis=1)] = False  # every task keeps one eligible device
        dur = np.where(forbid, INELIGIBLE, dur)
    nbytes = [0 if zero_comm else draw(st.integers(0, 200)) for _ in edges]
    kw = {}
    if memory:
        kw = dict(
            param_bytes=draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)),
            activation_bytes=draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)),
            internal_bytes=draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)),
            capacity_bytes=draw(st.integers(0, 400)),
        )
    lat = (0.0, 0.0) if zero_comm else (2.0, 8.0)
    return hetero_instance(dur, edges, nbytes, latency=lat, **kw)


def serial_on_fastest(inst: SchedulingInstance) -> int:
    dur = inst.duration_tick
    ok = np.all(dur < INELIGIBLE, axis=0)
    return int(np.where(dur < INELIGIBLE, dur, 0).sum(axis=0)[ok].min())


# ------------------------------------------------------------------------------------------ property tests --

PROP = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROP
@given(inst=st.one_of(uniform_instances(), hetero_instances()), insertion=st.booleans(),
       rank=st.sampled_from(list(Rank)))
def test_heft_plans_are_valid(inst: SchedulingInstance, insertion: bool, rank: Rank) -> None:
    plan = heft(inst, insertion=insertion, rank=rank)
    check(inst, plan)
    assert plan.method == ("heft" if rank is Rank.UPWARD else "heft-sum")


@PROP
@given(inst=st.one_of(uniform_instances(zero_comm=True), hetero_instances(zero_comm=True, all_eligible=True)),
       insertion=st.booleans())
def test_heft_no_worse_than_serial_on_fastest_without_comm(inst: SchedulingInstance, insertion: bool) -> None:
    # With zero communication each placement ends at most dur(t, fastest) after the latest end so far.
    plan = heft(inst, insertion=insertion)
    check(inst, plan)
    assert plan.makespan_tick <= serial_on_fastest(inst)


@PROP
@given(inst=st.one_of(uniform_instances(), hetero_instances()))
def test_baselines_are_valid(inst: SchedulingInstance) -> None:
    rr = round_robin(inst)
    check(inst, rr)
    assert rr.method == "round_robin"
    if np.any(np.all(inst.duration_tick < INELIGIBLE, axis=0)):
        sd = single_device(inst)
        got = check(inst, sd)
        assert sd.method == "single_device"
        assert len({d for d, _, _ in got.values()}) <= 1
        assert sd.makespan_tick == serial_on_fastest(inst)
    else:
        with pytest.raises(InfeasibleError, match="may run every task"):
            single_device(inst)


@PROP
@given(inst=hetero_instances(memory=True), insertion=st.booleans(), rank=st.sampled_from(list(Rank)))
def test_memory_aware_plans_fit_or_raise(inst: SchedulingInstance, insertion: bool, rank: Rank) -> None:
    bound = smallest_feasible_capacity_bytes(inst)
    try:
        plan = heft(inst, insertion=insertion, rank=rank)
    except InfeasibleError as err:
        assert "fits on no device" in str(err) or "may run on no" in str(err)
        return
    report = validate_plan(inst, plan)  # includes the memory check
    check_basic(inst, plan)
    assert max(report.peak_memory_bytes) <= int(inst.capacity_bytes[0])
    assert int(inst.capacity_bytes[0]) >= bound  # the bound is a true lower bound: below it heft must fail


@PROP
@given(inst=hetero_instances(memory=True))
def test_capacity_bound_is_below_every_plans_peak(inst: SchedulingInstance) -> None:
    # Any valid plan's largest per-device peak is at least the smallest feasible capacity.
    plan = heft(inst, respect_memory=False)
    unbounded = hetero_instance(inst.duration_tick, list(inst.edges), [inst.tensor_bytes[f"e{k}"]
                                for k in range(len(inst.edges))], latency=(2.0, 8.0),
                                param_bytes=inst.param_bytes, activation_bytes=inst.activation_bytes,
                                internal_bytes=inst.peak_internal_bytes)
    report = validate_plan(unbounded, plan)
    assert max(report.peak_memory_bytes) >= smallest_feasible_capacity_bytes(inst)


# ---------------------------------------------------------------------------------------- hand-derived cases --


def test_chain_with_expensive_comm_stays_on_one_device() -> None:
    # 4 tasks of 10 ticks in a chain, 100 ticks per cross-device edge, 3 devices: moving ever costs 100 > 0 gain,
    # so all four run back to back on one device: makespan 40.
    inst = SchedulingInstance.uniform("chain", [10] * 4, [(0, 1, 100), (1, 2, 100), (2, 3, 100)], 3)
    for plan in (heft(inst), heft(inst, insertion=False), heft(inst, rank=Rank.SUM)):
        got = check(inst, plan)
        assert len({d for d, _, _ in got.values()}) == 1
        assert plan.makespan_tick == 40


def test_independent_equal_tasks_spread_over_devices() -> None:
    # 4 independent tasks of 10 ticks on 4 devices: one each, makespan 10 (= total work / devices).
    inst = SchedulingInstance.uniform("indep", [10] * 4, [], 4)
    plan = heft(inst)
    got = check(inst, plan)
    assert sorted(d for d, _, _ in got.values()) == [0, 1, 2, 3]
    assert plan.makespan_tick == 10 == plan.lower_bound_tick


def test_long_task_goes_to_fast_device() -> None:
    # L takes 100 on d0 and 50 on d1; S takes 10 on both.  Ranks: L 75 > S 10, so L goes first to d1 (finish 50
    # < 100), then S to d0 (finish 10 < 60).  Makespan 50.
    inst = hetero_instance(np.array([[100, 50], [10, 10]]), [], [])
    got = check(inst, heft(inst))
    assert got["t0"] == (1, 0, 50)
    assert got["t1"] == (0, 0, 10)


def test_insertion_fills_a_gap() -> None:
    # X (10, only d0) -> Y (10, only d1) with 20 ticks of comm: Y runs [30, 40) on d1, which idles [0, 30).
    # Z (5, only d1, independent) has the lowest rank (X 40, Y 10, Z 5) and is placed last.
    # Insertion: Z fills d1's gap at [0, 5), makespan 40.  Without: Z runs [40, 45), makespan 45.
    inf = INELIGIBLE
    inst = hetero_instance(np.array([[10, inf], [inf, 10], [inf, 5]]), [(0, 1)], [0],
                           link_class=np.array([[0, 1], [1, 0]]), latency=(20.0, 20.0))
    got = check(inst, heft(inst, insertion=True))
    assert got["t1"] == (1, 30, 40) and got["t2"] == (1, 0, 5)
    assert heft(inst, insertion=True).makespan_tick == 40
    got = check(inst, heft(inst, insertion=False))
    assert got["t2"] == (1, 40, 45)
    # Z may also run on d0: without insertion d0 ends it earliest (finish 15 < 45), with insertion d1's gap does (5).
    inst2 = hetero_instance(np.array([[10, inf], [inf, 10], [5, 5]]), [(0, 1)], [0],
                            link_class=np.array([[0, 1], [1, 0]]), latency=(20.0, 20.0))
    assert check(inst2, heft(inst2, insertion=True))["t2"] == (1, 0, 5)
    assert check(inst2, heft(inst2, insertion=False))["t2"] == (0, 10, 15)


def test_gap_scan_limit_keeps_plans_valid() -> None:
    inst = random_layered_instance(300, 4, seed=3)
    full, capped = heft(inst, max_gap_scan=10_000), heft(inst, max_gap_scan=0)
    check(inst, full)
    check(inst, capped)


def test_round_robin_deals_in_turn_and_single_device_picks_fastest() -> None:
    # 4 independent tasks, 2 devices: t0, t2 -> d0 and t1, t3 -> d1, each pair back to back.
    inst = SchedulingInstance.uniform("rr", [3, 4, 5, 6], [], 2)
    got = check(inst, round_robin(inst))
    assert [got[f"t{i}"][0] for i in range(4)] == [0, 1, 0, 1]
    assert got["t2"][1:] == (3, 8) and got["t3"][1:] == (4, 10)
    # d1 is twice as fast: single_device puts everything there, total 9.
    het = hetero_instance(np.array([[4, 2], [6, 3], [8, 4]]), [(0, 1), (1, 2)], [10, 10])
    sd = single_device(het)
    assert {d for d, _, _ in check(het, sd).values()} == {1} and sd.makespan_tick == 9
    assert {d for d, _, _ in check(het, single_device(het, device="d0")).values()} == {0}


def test_no_eligible_device_raises() -> None:
    inst = hetero_instance(np.array([[INELIGIBLE, INELIGIBLE]]), [], [])
    with pytest.raises(InfeasibleError, match="t0"):
        heft(inst)


def test_custom_priority_and_policy() -> None:
    # A reverse-topological priority is not a valid order by itself: the ready list still respects precedence.
    inst = SchedulingInstance.uniform("c", [1, 2, 3, 4], [(0, 1, 1), (1, 2, 1), (0, 3, 0)], 2)
    plan = list_schedule(inst, [0.0, 1.0, 2.0, 3.0], lambda t, k, d, fin: -d, method="custom")
    got = check(inst, plan)
    assert plan.method == "custom" and {d for d, _, _ in got.values()} == {1}


# ------------------------------------------------------------------------------------------------------ memory --


def test_capacity_forces_spreading() -> None:
    # Chain of 4 tasks, 100 param bytes each, comm 1000: unlimited, all four stay on one device (400 bytes).
    # With 250 bytes per device at most two fit per device, so the chain splits 2 + 2, paying one transfer.
    edges = [(0, 1, 1000), (1, 2, 1000), (2, 3, 1000)]
    free = SchedulingInstance.uniform("m", [10] * 4, edges, 2, param_bytes=[100] * 4)
    assert len({p.device for p in heft(free).placements}) == 1
    tight = SchedulingInstance.uniform("m", [10] * 4, edges, 2, param_bytes=[100] * 4, capacity_bytes=250)
    plan = heft(tight)
    report = validate_plan(tight, plan)
    check_basic(tight, plan)
    assert max(report.peak_memory_bytes) <= 250
    assert sorted(np.bincount([p.device for p in plan.placements], minlength=2)) == [2, 2]
    assert plan.makespan_tick == 40 + 1000


def test_capacity_too_small_names_task_and_bytes() -> None:
    inst = SchedulingInstance.uniform("m", [10, 10, 10], [(0, 1, 0), (1, 2, 0)], 2, param_bytes=[100, 300, 100],
                                      capacity_bytes=250)
    with pytest.raises(InfeasibleError) as err:
        heft(inst)
    msg = str(err.value)
    assert "'t1'" in msg and "300 bytes" in msg and "250 bytes" in msg and "no plan exists" in msg
    assert smallest_feasible_capacity_bytes(inst) == 300
    for baseline in (round_robin, single_device):
        with pytest.raises(InfeasibleError, match="t1"):
            baseline(inst)


def test_big_task_goes_to_the_device_with_room() -> None:
    # d0 is faster but holds 100 bytes; the 500-byte task must go to d1 (1000 bytes) although it ends later there.
    inst = hetero_instance(np.array([[5, 50], [5, 50]]), [], [], param_bytes=[500, 50])
    inst = dataclasses.replace(inst, capacity_bytes=np.array([100, 1000], dtype=np.int64))
    got = check(inst, heft(inst))
    assert got["t0"] == (1, 0, 50) and got["t1"] == (0, 0, 5)


def test_activations_are_released_along_a_chain() -> None:
    # Chain of 10 tasks, each output 100 bytes, on one device (1 device): at any time at most the input and the
    # output of the running task are live = 200 bytes.  "Outputs live until the end" would need 1000.
    inst = SchedulingInstance.uniform("act", [5] * 10, [(i, i + 1, 0) for i in range(9)], 1,
                                      activation_bytes=[100] * 10, capacity_bytes=200)
    report = validate_plan(inst, heft(inst))
    assert max(report.peak_memory_bytes) == 200
    tighter = SchedulingInstance.uniform("act", [5] * 10, [(i, i + 1, 0) for i in range(9)], 1,
                                         activation_bytes=[100] * 10, capacity_bytes=199)
    with pytest.raises(InfeasibleError, match="200 bytes"):
        heft(tighter)


def test_received_copies_are_counted() -> None:
    # t0 (d0 only) -> t1 (d1 only), output 100 bytes; t1 itself holds its output 50.  d1 holds the received copy
    # (100) and t1's output (50) while t1 runs: 150.  Capacity 149 on d1 is too small, 150 fits.
    inf = INELIGIBLE
    for cap, ok in ((150, True), (149, False)):
        inst = hetero_instance(np.array([[5, inf], [inf, 5]]), [(0, 1)], [10], activation_bytes=[100, 50],
                               link_class=np.array([[0, 1], [1, 0]]), capacity_bytes=cap)
        if ok:
            validate_plan(inst, heft(inst))
        else:
            with pytest.raises(InfeasibleError, match="150 bytes"):
                heft(inst)


def test_capacity_lower_bound_rules() -> None:
    # alone: t1 needs param 30 + internal 5 + output 10 + input (t0's output 20) = 65.
    inst = SchedulingInstance.uniform("b", [1, 1], [(0, 1, 0)], 2, param_bytes=[40, 30], activation_bytes=[20, 10])
    assert task_alone_bytes(inst).tolist() == [60, 60]
    assert smallest_feasible_capacity_bytes(inst) == 60
    # params 4 x 100 on 2 devices: 200 + smallest non-param need (0) = 200 > any single task (100).
    many = SchedulingInstance.uniform("p", [1] * 4, [], 2, param_bytes=[100] * 4)
    bound = capacity_lower_bound(many)
    assert bound.capacity_bytes == 200 and "parameters" in bound.reason
    assert largest_memory_tasks(inst, 1) == [("t0", 60)]
    assert [n for n, _ in largest_memory_tasks(many, 10)] == ["t0", "t1", "t2", "t3"]


def test_tracker_releases_when_all_consumers_are_placed() -> None:
    inst = SchedulingInstance.uniform("tr", [5, 5, 5], [(0, 1, 0), (0, 2, 0)], 1, activation_bytes=[100, 0, 0])
    tr = MemoryTracker(inst, 100)
    c = tr.check(0, 0, 0, [])
    tr.place(0, 0, 0, 5, c, [])
    assert tr.unbounded[0] == 100
    for t, s in ((1, 5), (2, 10)):
        arr = [(0, 0, 5)]
        tr.place(t, 0, s, s + 5, tr.check(t, 0, s, arr), arr)
    assert tr.unbounded[0] == 0 and tr.finite[0] == 100  # released at t2's end, 15
    assert tr.fen[0].prefix(14) == 0 and tr.fen[0].prefix(15) == 100


# ---------------------------------------------------------------------------------------------------- scale --


def test_heft_schedules_100k_tasks() -> None:
    inst = random_layered_instance(100_000, 8, seed=1)
    plan = heft(inst)
    check_basic(inst, plan)


def test_bench_heft_rows() -> None:
    rows = bench_heft((200,), insertion=(True,), memory_limited=True)
    assert len(rows) == 1 and rows[0]["num_tasks"] == 200 and rows[0]["makespan_tick"] >= rows[0]["lower_bound_tick"]
