"""Tiny instances with hand-derived optima, the model's constraint families, symmetry classes and the
solver-neutral expression layer."""

from __future__ import annotations

import numpy as np
import pytest
from checks import check_plan_valid
from instances import make_instance

import formulations.solve_instance as solve_module
from experiments.layered import layered_dag
from formulations.backends import available_backends, get_backend
from formulations.model_api import LinearConstraint, cname, family_of, linear
from formulations.placement import (
    Objective,
    build_placement_model,
    canonical_devices,
)
from formulations.solve_instance import solve_placement
from planner.cost.instance import SchedulingInstance
from planner.heuristics.list_schedule import heft
from planner.schedule.validate import check_plan

interchangeable_classes = SchedulingInstance.interchangeable_device_classes  # the one symmetry helper

BACKENDS = available_backends()


def _solve(inst, backend="cpsat", **kw):
    plan = solve_placement(inst, backend=backend, time_limit_s=10, threads=2, **kw)
    check_plan_valid(inst, plan)
    return plan


# Two independent tasks of 3 and 5 ticks, two identical devices: one per device, makespan max(3, 5) = 5.
@pytest.mark.parametrize("backend", BACKENDS)
def test_two_independent_tasks(backend: str) -> None:
    inst = SchedulingInstance.uniform("two", [3, 5], [], 2)
    plan = _solve(inst, backend)
    assert plan.makespan_tick == 5 and plan.status == "optimal"
    by = plan.by_task()
    assert by["t0"].device != by["t1"].device


# Chain a(2) -> b(2) -> c(2) with 10 ticks per cross-device edge: any split pays >= 10, so all on one device,
# makespan 2 + 2 + 2 = 6.
@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_with_expensive_comm_stays_on_one_device(backend: str) -> None:
    inst = SchedulingInstance.uniform("chain", [2, 2, 2], [(0, 1, 10), (1, 2, 10)], 2)
    plan = _solve(inst, backend)
    assert plan.makespan_tick == 6
    assert len({p.device for p in plan.placements}) == 1


# Fork r(1) -> a(4), r -> b(4), 1 tick per cross-device edge.  Serial: 1 + 4 + 4 = 9.  Split: r and a on one device
# [0,1), [1,5); b on the other from 1 + 1 = 2 to 6.  Nothing ends before 6: one of a, b starts at >= 1 after r and
# the other either waits for it (>= 9) or for the transfer (>= 2 + 4).  Optimum 6.
@pytest.mark.parametrize("backend", BACKENDS)
def test_fork_with_cheap_comm_splits(backend: str) -> None:
    inst = SchedulingInstance.uniform("fork", [1, 4, 4], [(0, 1, 1), (0, 2, 1)], 2)
    plan = _solve(inst, backend)
    assert plan.makespan_tick == 6
    by = plan.by_task()
    assert by["t1"].device != by["t2"].device


# Heterogeneous pair, independent: long task L = 4 on the fast device 0 / 8 on device 1; short S = 2 / 3.
# L fast + S slow: max(4, 3) = 4; L slow + S fast: 8; both fast: 6; both slow: 11.  Optimum 4, L on device 0.
@pytest.mark.parametrize("backend", BACKENDS)
def test_heterogeneous_fast_device_takes_the_long_task(backend: str) -> None:
    inst = make_instance("hetero", [[4, 8], [2, 3]], [])
    plan = _solve(inst, backend)
    assert plan.makespan_tick == 4
    assert plan.by_task()["t0"].device == 0 and plan.by_task()["t1"].device == 1


# a(2) -> b(2), 5 ticks across devices.  Without a memory limit both run on one device: 4.  With 6 + 6 bytes of
# parameters and 10 bytes per device they must split: b starts at 2 + 5 = 7, makespan 9.
@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_limit_forces_a_split(backend: str) -> None:
    free = make_instance("free", [[2, 2], [2, 2]], [(0, 1, 5)], params=[6, 6])
    assert _solve(free, backend).makespan_tick == 4
    tight = make_instance("tight", [[2, 2], [2, 2]], [(0, 1, 5)], params=[6, 6], capacity=10)
    plan = _solve(tight, backend)
    assert plan.makespan_tick == 9
    assert plan.by_task()["t0"].device != plan.by_task()["t1"].device


# Topology: devices 0 and 1 share a fast link (1 tick), device 2 is 10 ticks away from both.  Fork r(2) -> a(5),
# r -> b(5): r and a on one of {0, 1}, b on the other from 2 + 1 = 3 to 8.  Using device 2 costs 2 + 10 + 5 = 17,
# serial 12.  Optimum 8, device 2 unused.
@pytest.mark.parametrize("backend", BACKENDS)
def test_topology_aware_comm_avoids_the_slow_link(backend: str) -> None:
    lc = np.array([[0, 1, 2], [1, 0, 2], [2, 2, 0]])
    inst = make_instance("topo", [[2, 2, 2], [5, 5, 5], [5, 5, 5]], [(0, 1, 0), (0, 2, 0)], link_class=lc,
                         latency=[0.0, 1.0, 10.0])
    plan = _solve(inst, backend)
    assert plan.makespan_tick == 8
    assert all(p.device != 2 for p in plan.placements)


# Activation memory, exact on CP-SAT.  One device, a(1) -> b(1) and c(1) -> d(1), outputs of a and c 6 bytes each,
# capacity 10.  An output lives from its producer's start to its consumer's end, so a's and c's lifetimes must not
# overlap: a, b, c, d (or c, d, a, b).  Makespan 4 (one device, 4 ticks of work).
def test_activation_lifetimes_are_exact_on_cpsat() -> None:
    inst = make_instance("acts", [[1], [1], [1], [1]], [(0, 1, 0), (2, 3, 0)], acts=[6, 0, 6, 0], capacity=10)
    plan = _solve(inst, "cpsat")
    assert plan.makespan_tick == 4
    order = [p.task for p in sorted(plan.placements, key=lambda p: p.start_tick)]
    assert order in (["t0", "t1", "t2", "t3"], ["t2", "t3", "t0", "t1"])


# Two devices, a(1) -> b(1) with comm 2 and a 6-byte output; capacity 8.  Splitting would hold a's output on both
# devices at different times (sender until arrival, receiver until b ends), which fits, but staying on one device
# is faster: 2.  With a 5-byte capacity nothing fits: the output alone needs 6 bytes.
def test_received_copies_and_the_smallest_capacity() -> None:
    inst = make_instance("recv", [[1, 1], [1, 1]], [(0, 1, 2)], acts=[6, 0], capacity=8)
    assert _solve(inst, "cpsat").makespan_tick == 2
    from planner.errors import InfeasibleError

    tight = make_instance("recv", [[1, 1], [1, 1]], [(0, 1, 2)], acts=[6, 0], capacity=5)
    with pytest.raises(InfeasibleError, match="at least 6 bytes"):
        solve_placement(tight, time_limit_s=5)


def test_families_are_named_and_counted() -> None:
    # chain 0 -> 1 -> 2 with comm 10 on 2 identical devices
    inst = SchedulingInstance.uniform("chain", [2, 2, 2], [(0, 1, 10), (1, 2, 10)], 2)
    b = get_backend("cpsat").new_builder()
    build_placement_model(inst, b, horizon=6)
    fam = b.family_counts()
    assert fam["assign"] == 3
    assert fam["prec"] == 2
    assert fam["mk"] == 1  # one sink
    assert fam["noover"] == 2  # one per device
    assert fam["colo"] == 2 * 2 and fam["same_lb"] == 2 * 2  # per delayed edge and device
    assert fam["load"] == 2
    assert "mem" not in fam  # unbounded memory never binds
    assert fam["sym"] >= 1  # the two devices are interchangeable


def test_memory_families_appear_only_when_memory_can_bind() -> None:
    inst = make_instance("m", [[1, 1], [1, 1]], [(0, 1, 2)], acts=[6, 0], params=[3, 3], capacity=8)
    b = get_backend("cpsat").new_builder()
    m = build_placement_model(inst, b, horizon=10)
    fam = b.family_counts()
    assert fam["mem"] == 2 and fam["param_cap"] == 2 and fam["hold"] == 1
    assert fam["recv_on"] == 2  # t0's output may be received on either device
    assert m.memory_devices == [0, 1]


def test_zero_comm_edges_need_no_colocation_literals() -> None:
    inst = SchedulingInstance.uniform("stg-like", [1, 2, 3, 4], [(0, 1, 0), (0, 2, 0), (1, 3, 0), (2, 3, 0)], 4)
    b = get_backend("cpsat").new_builder()
    m = build_placement_model(inst, b, horizon=20)
    assert not m.same and not m.levels and "colo" not in b.family_counts()


def test_interchangeable_classes() -> None:
    lc = np.array([[0, 1, 2], [1, 0, 2], [2, 2, 0]])
    inst = make_instance("topo", [[2, 2, 2]], [], link_class=lc, latency=[0.0, 1.0, 10.0])
    assert interchangeable_classes(inst) == [[0, 1], [2]]
    hetero = make_instance("h", [[2, 3, 2]], [])
    assert interchangeable_classes(hetero) == [[0, 2], [1]]
    caps = make_instance("c", [[2, 2]], [], capacity=[10, 20])
    assert interchangeable_classes(caps) == [[0], [1]]


def test_canonical_devices_follow_first_use() -> None:
    inst = SchedulingInstance.uniform("ind", [1, 1, 1, 1], [], 3)
    m = build_placement_model(inst, get_backend("cpsat").new_builder(), horizon=4)
    assert canonical_devices(m, [2, 2, 0, 1]) == [0, 0, 1, 2]


def test_objective_rejects_bad_weights() -> None:
    with pytest.raises(ValueError):
        Objective(makespan_weight=0)
    with pytest.raises(ValueError):
        Objective(peak_memory_weight=-1)
    with pytest.raises(ValueError):
        Objective(comm_volume_weight=0.5)  # type: ignore[arg-type]


# Fork r(1) -> a(4), r -> b(4) with 1 tick and 100 MiB per cross-device edge.  Makespan alone splits (6, see the
# fork test, one edge crossing); with a comm-volume weight of 1 per MiB the split costs 6 + 100 = 106 against the
# serial 9 + 0: the plan stays on one device.
def test_comm_volume_weight_keeps_data_local() -> None:
    inst = make_instance("fork", [[1, 1], [4, 4], [4, 4]], [(0, 1, 1, 100 * 2**20), (0, 2, 1, 100 * 2**20)])
    assert _solve(inst).makespan_tick == 6
    plan = _solve(inst, objective=Objective(comm_volume_weight=1))
    assert plan.makespan_tick == 9 and len({p.device for p in plan.placements}) == 1


# Two independent tasks (1 tick, 8 MiB of parameters each) on two devices: makespan alone puts them apart (peak
# 8 MiB either way).  A peak-memory weight changes nothing here but must build and report a valid plan.
def test_peak_memory_weight_builds_and_solves() -> None:
    inst = make_instance("peak", [[1, 1], [1, 1]], [], params=[8 * 2**20, 8 * 2**20])
    plan = _solve(inst, objective=Objective(peak_memory_weight=1))
    assert plan.makespan_tick == 1


def test_expressions_and_names() -> None:
    b = get_backend("cpsat").new_builder()
    x, y = b.bool_var("x"), b.int_var(0, 5, "y")
    c = 2 * x + y - 3 <= 4
    assert isinstance(c, LinearConstraint) and c.ub == 7 and c.lb is None
    e = linear([(2, x), (1, ~x)], 1)  # 2x + (1 - x) + 1 = x + 2
    assert e.terms == {x.index: 1} and e.const == 2
    assert family_of(cname("prec", i=3, j=5)) == "prec" and cname("prec", i=3, j=5) == "prec[i=3,j=5]"
    with pytest.raises(TypeError):
        _ = 1.5 * y
    with pytest.raises(ValueError):
        b.add(y <= 3, "not a name!")
    b.add(y <= 3, "cap[k=1]")
    with pytest.raises(ValueError):
        b.add(y <= 4, "cap[k=1]")
    assert b.family_counts() == {"cap": 1}


class _Stop(Exception):
    pass


@pytest.mark.parametrize("capacity", [6, None])
def test_an_invalid_warm_start_is_no_hint_where_memory_may_bind(monkeypatch, capacity) -> None:
    """Where memory may bind, only a valid schedule becomes the solver's hint (OR-Tools 9.15 aborts the process on
    an infeasible model with a hint under its deterministic search, and an invalid warm start is how such a model
    arrives); without memory limits any warm start is a hint."""
    free = layered_dag(24, 2, seed=3, comm_ratio=1.0)
    inst = free if capacity is None else layered_dag(24, 2, seed=3, comm_ratio=1.0, capacity_bytes=capacity)
    warm = heft(free)  # ignores memory: too many outputs live at once on a device for the tight capacity
    seen = {}

    def capture(formulation, **kwargs):
        seen["hint"] = kwargs["hint"]
        raise _Stop

    monkeypatch.setattr(solve_module, "solve_formulation", capture)
    monkeypatch.setattr(solve_module, "critical_path_schedule", lambda _inst: None)  # only the warm start is known
    with pytest.raises(_Stop):
        solve_placement(inst, warm_start=warm, time_limit_s=1)
    if capacity is None:
        assert seen["hint"] is not None
    else:
        violations, _profile = check_plan(inst, warm)
        assert violations, "the warm start must break memory for this test to mean something"
        assert seen["hint"] is None
