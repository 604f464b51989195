"""One instance per constraint family of `formulations/stages.py`, built so that the family is the only thing
between the solver and a wrong answer (so a dropped family fails).  The model is built and solved directly
(`build_stage_model`:
no DP warm start, lower bound 0, so no bound hides a missing row), on every backend; the split is read back from
the staircase g by hand.  Each expected optimum is derived in the comment above its test, with what the solver
would return without the family.

Tasks form a chain t0 -> t1 -> ..., so position i of the topological order is task i.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from family_fixtures import BACKENDS, instance

from formulations.backends import get_backend
from formulations.model_api import SolveParams, SolvePolicy, SolveStatus, Var
from formulations.stages import build_stage_model, dp_warm_start, hint_split, solve_stages
from planner.cost.instance import SchedulingInstance
from planner.heuristics.stage_dp import stage_data
from planner.schedule.plan import PlanMethod

N = None  # ineligible
BIG = 10**6


@dataclass(frozen=True)
class Split:
    bottleneck: int
    stage_of: tuple[int, ...]  # stage per position
    devices: tuple[int, ...]  # stage -> device


def _chain(n: int, fixed=0) -> list[tuple[int, int, int]]:
    return [(i, i + 1, fixed) for i in range(n - 1)]


def solve_split(inst: SchedulingInstance, num_stages: int, backend: str, devices=None, *, cap=None) -> Split | None:
    """Build the stage model (FIXED map `devices`, or FREE when None) and solve it to optimality; None when
    infeasible.  `cap`: the second phase (family 10) under bottleneck cap `cap`."""
    data = stage_data(inst, num_stages)
    builder = get_backend(backend).new_builder()
    m = build_stage_model(inst, builder, data, num_stages, devices, lower_bound=0, upper_bound=BIG,
                          bottleneck_cap=cap)
    res = builder.solve(SolveParams(time_limit_s=20, threads=1, seed=0))
    if not res.has_solution:
        assert res.status is SolveStatus.INFEASIBLE, res.status
        return None
    assert res.status is SolveStatus.OPTIMAL, res.status

    def val(gv) -> int:
        return int(res.bool_value(gv)) if isinstance(gv, Var) else int(gv)

    stage_of = tuple(sum(val(gv) for gv in row[1:-1]) for row in m.g)
    if devices is None:
        mapped = tuple(tuple(d for d in range(inst.num_devices) if res.bool_value(m.a[s, d]))
                       for s in range(num_stages))
        assert all(len(on) == 1 for on in mapped), mapped
        devices = tuple(on[0] for on in mapped)
    return Split(res.int_value(m.bottleneck), stage_of, tuple(devices))


def measure(inst: SchedulingInstance, split: Split) -> int:
    """The bottleneck of a split by hand: compute per stage on its device plus the outgoing crossings."""
    S = len(split.devices)
    load = [0] * S
    for t, s in enumerate(split.stage_of):
        load[s] += int(inst.duration_tick[t, split.devices[s]])
    for e, (u, v) in enumerate(inst.edges):
        for s in range(split.stage_of[u], split.stage_of[v]):
            load[s] += inst.comm(e, split.devices[s], split.devices[s + 1])
    return max(load)


# 1. mono.  Two stages FIXED on d0, d1; t0 and t2 take 1 on d0 and 10 on d1, t1 and t3 the reverse.  Contiguous:
# {t0}|{t1,t2,t3} 12, {t0,t1}|{t2,t3} 11, {t0,t1,t2}|{t3} 12: optimum 11.  Without mono the stage index may drop
# back, and {t0,t2}|{t1,t3} costs 2.
@pytest.mark.parametrize("backend", BACKENDS)
def test_mono_stages_are_contiguous(backend: str) -> None:
    inst = instance("mono", [[1, 10], [10, 1], [1, 10], [10, 1]], _chain(4))
    sol = solve_split(inst, 2, backend, (0, 1))
    assert sol == Split(11, (0, 0, 1, 1), (0, 1))


# 2. step.  Three stages FIXED on d0, d1, d2; t0, t1 take 1 on d0, t2, t3 take 1 on d2, everything takes 10 on d1.
# Every stage needs a task, so one of them lands on d1: {t0,t1}|{t2}|{t3} or {t0}|{t1}|{t2,t3}, both 10
# ({t0}|{t1,t2}|{t3} is 20).  Without step stage 1 may be empty: {t0,t1}|{}|{t2,t3} costs 2.
@pytest.mark.parametrize("backend", BACKENDS)
def test_step_no_stage_is_empty(backend: str) -> None:
    inst = instance("step", [[1, 10, 10], [1, 10, 10], [10, 10, 1], [10, 10, 1]], _chain(4))
    sol = solve_split(inst, 3, backend, (0, 1, 2))
    assert sol is not None and sol.bottleneck == 10
    assert sorted(set(sol.stage_of)) == [0, 1, 2] and measure(inst, sol) == 10


# 3. elig.  t0, t1, t2 take 5 each; t1 may not run on d1.  FIXED on (d0, d1): only {t0,t1}|{t2} keeps t1 off d1:
# 10.  FREE: the map (d1, d0) with {t0}|{t1,t2} is 10 too, and every other split puts t1 on d1.  Without elig an
# ineligible task costs 0 (its duration is masked), so {t0}|{t1,t2} on (d0, d1) costs 5.
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("free", [False, True], ids=["fixed", "free"])
def test_elig_keeps_a_task_off_its_ineligible_device(backend: str, free: bool) -> None:
    inst = instance("elig", [[5, 5], [5, N], [5, 5]], _chain(3))
    sol = solve_split(inst, 2, backend, None if free else (0, 1))
    assert sol is not None and sol.bottleneck == 10 and measure(inst, sol) == 10
    t1_device = sol.devices[sol.stage_of[1]]
    assert t1_device == 0


# 4. assign.  FREE, two identical devices, t0 (4) -> t1 (4) in two stages: each stage 4 on its own device.
# Without "each stage on exactly one device" no work row binds (every a[s,d] = 0) and the bottleneck is 0.
@pytest.mark.parametrize("backend", BACKENDS)
def test_assign_every_stage_has_a_device(backend: str) -> None:
    inst = instance("assign", [[4, 4], [4, 4]], _chain(2))
    sol = solve_split(inst, 2, backend)
    assert sol == Split(4, (0, 1), (0, 1))


# 5. inject.  FREE, d0 runs every task in 1 tick, d1 in 10; t0 -> t1 in two stages.  One stage must go to d1:
# bottleneck 10.  Without "at most one stage per device" both stages sit on d0: 1.
@pytest.mark.parametrize("backend", BACKENDS)
def test_inject_one_stage_per_device(backend: str) -> None:
    inst = instance("inject", [[1, 10], [1, 10]], _chain(2))
    sol = solve_split(inst, 2, backend)
    assert sol is not None and sol.bottleneck == 10 and sorted(sol.devices) == [0, 1]


# 5-7. link, comm, work, period (FREE, two link levels).  d0-d1 are 1 tick apart (class 1), d2 is 10 ticks from
# both (class 2).  t0 takes 1 on d0 (20 elsewhere), t1 takes 1 on d2 (20 elsewhere).  Map (d0, d2): stage 0 pays
# 1 + 10 = 11, stage 1 1: bottleneck 11; (d0, d1) is max(1 + 1, 20) = 20; every other map has a 20 in it.
# Without link (the level literal may stay 0) or comm, the crossing is free on (d0, d2): 1.  Without work the
# stage compute is free: (d0, d1) costs its crossing 1.  Without period the bottleneck is 0.
@pytest.mark.parametrize("backend", BACKENDS)
def test_link_comm_work_period_the_boundary_pays_its_link_level(backend: str) -> None:
    lc = [[0, 1, 2], [1, 0, 2], [2, 2, 0]]
    inst = instance("link", [[1, 20, 20], [20, 20, 1]], _chain(2), link_class=lc, latency=[0, 1, 10])
    sol = solve_split(inst, 2, backend)
    assert sol == Split(11, (0, 1), (0, 2))


# 6. comm with one link level (no level literal: comm[b] without an indicator).  Two identical devices 5 ticks
# apart; t0 (1) -> t1 (1) in two stages: stage 0 pays 1 + 5 = 6.  Without the row: 1.
@pytest.mark.parametrize("backend", BACKENDS)
def test_comm_single_level_boundary_pays_the_delay(backend: str) -> None:
    inst = instance("comm1", [[1, 1], [1, 1]], _chain(2), latency=[0, 5])
    sol = solve_split(inst, 2, backend)
    assert sol == Split(6, (0, 1), (0, 1))


# 7. period on a FIXED map (stage compute plus the delay to the next stage's device).  t0 (3) -> t1 (3), d0 and
# d1 4 ticks apart: stage 0 is 3 + 4 = 7, on (d0, d1) and on (d1, d0).  Without the crossing term: 3; without
# period: 0.  Over a link whose delay is 0 for every edge (level 0) stage 0 pays nothing: 3.
@pytest.mark.parametrize("backend", BACKENDS)
def test_period_fixed_map_counts_compute_and_crossing(backend: str) -> None:
    inst = instance("period", [[3, 3], [3, 3]], _chain(2), latency=[0, 4])
    assert solve_split(inst, 2, backend, (0, 1)) == Split(7, (0, 1), (0, 1))
    assert solve_split(inst, 2, backend, (1, 0)) == Split(7, (0, 1), (1, 0))
    free_link = instance("period0", [[3, 3], [3, 3]], _chain(2), latency=[0, 0])
    assert solve_split(free_link, 2, backend, (0, 1)) == Split(3, (0, 1), (0, 1))


# 7'. period on a FIXED map, the last stage: three stages t0 (1), t1 (1), t2 (5) with 2-tick hops.  Stages 0 and 1
# pay 1 + 2 = 3, the last stage pays its compute 5 and no hop: bottleneck 5.
@pytest.mark.parametrize("backend", BACKENDS)
def test_period_last_stage_has_no_outgoing_hop(backend: str) -> None:
    inst = instance("last", [[1, 1, 1], [1, 1, 1], [5, 5, 5]], _chain(3), latency=[0, 2])
    assert solve_split(inst, 3, backend, (0, 1, 2)) == Split(5, (0, 1, 2), (0, 1, 2))
    heavy_hop = instance("last2", [[1, 1, 1], [1, 1, 1], [1, 1, 1]], _chain(3), latency=[0, 6])
    assert solve_split(heavy_hop, 3, backend, (0, 1, 2)) == Split(7, (0, 1, 2), (0, 1, 2))


# 8. mem, FIXED.  t0 (1), t1 (3), t2 (3); t0 and t1 hold 10 bytes of parameters each, d0 has 15 bytes.
# {t0,t1}|{t2} (bottleneck 4) needs 20 bytes on d0, so {t0}|{t1,t2}: 6.  Without mem: 4.
# mem, FREE: both devices have 15 bytes (so they are interchangeable): no stage may hold t0 and t1: 6 again.
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("free", [False, True], ids=["fixed", "free"])
def test_mem_stage_parameters_fit_the_device(backend: str, free: bool) -> None:
    caps = [15, 15] if free else [15, BIG]
    inst = instance("mem", [[1, 1], [3, 3], [3, 3]], _chain(3), params=[10, 10, 0], capacity=caps)
    sol = solve_split(inst, 2, backend, None if free else (0, 1))
    assert sol is not None and sol.bottleneck == 6 and sol.stage_of == (0, 1, 1)
    roomy = instance("mem", [[1, 1], [3, 3], [3, 3]], _chain(3), params=[10, 10, 0], capacity=[20, 20])
    assert solve_split(roomy, 2, backend, None if free else (0, 1)).bottleneck == 4


# 8'. mem, FREE, devices of different capacity: the stage that holds 20 bytes must go to the 20-byte device.
# t0 (3), t1 (1), t2 (4): {t0,t1}|{t2} is 4 ({t0}|{t1,t2} is 5); t0, t1 hold 10 bytes each, so stage 0 maps to
# d1 (20 bytes), not d0 (15).  A capacity row with the wrong device's capacity takes (d0, d1), or finds no split.
@pytest.mark.parametrize("backend", BACKENDS)
def test_mem_free_stage_goes_to_the_device_that_holds_it(backend: str) -> None:
    inst = instance("mem2", [[3, 3], [1, 1], [4, 4]], _chain(3), params=[10, 10, 0], capacity=[15, 20])
    sol = solve_split(inst, 2, backend)
    assert sol == Split(4, (0, 0, 1), (1, 0))


# 9. sym_used / sym_order.  Symmetry breaking may only remove relabellings: the optimum stays, in its canonical
# form.  Three identical devices, three unit stages: the devices are used in index order, (d0, d1, d2) — each
# sym_order row is tight there (stage positions one apart).  With d0, d1 identical and d2 the only device t1 may
# run on (t0 and t2 take 9 there): the class {d0, d1} is used in stage order around d2: (d0, d2, d1), bottleneck 1.
@pytest.mark.parametrize("backend", BACKENDS)
def test_sym_keeps_the_optimum_in_canonical_form(backend: str) -> None:
    inst = instance("sym", [[1, 1, 1]] * 3, _chain(3))
    assert solve_split(inst, 3, backend) == Split(1, (0, 1, 2), (0, 1, 2))
    two = instance("sym2", [[1, 1, 1]] * 2, _chain(2))
    assert solve_split(two, 2, backend) == Split(1, (0, 1), (0, 1))
    around = instance("sym3", [[1, 1, 9], [N, N, 1], [1, 1, 9]], _chain(3))
    assert solve_split(around, 3, backend) == Split(1, (0, 1, 2), (0, 2, 1))


# 10. bcap (traffic phase).  Four unit tasks, FIXED on (d0, d1), no delays; edge bytes t0->t1 1, t1->t2 100,
# t2->t3 1.  The bottleneck optimum 2 cuts after t1 (100 bytes); cuts after t0 or t2 carry 1 byte but cost 3.
# Under bcap B <= 2 the traffic phase keeps the 100-byte cut; without bcap it would move the cut: bottleneck 3.
@pytest.mark.parametrize("backend", BACKENDS)
def test_bcap_traffic_phase_keeps_the_bottleneck(backend: str) -> None:
    inst = instance("bcap", [[1, 1]] * 4, _chain(4), edge_bytes=[1, 100, 1])
    assert solve_split(inst, 2, backend, (0, 1)).bottleneck == 2
    sol = solve_split(inst, 2, backend, (0, 1), cap=2)
    assert sol is not None and sol.stage_of == (0, 0, 1, 1) and measure(inst, sol) == 2
    loose = solve_split(inst, 2, backend, (0, 1), cap=3)
    assert loose is not None and loose.stage_of in ((0, 1, 1, 1), (0, 0, 0, 1))


# Warm starts: `hint_split` hints every variable, and the hinted values are one consistent solution of the model
# with the split's bottleneck.  Recorded hints are turned into equalities (CP-SAT).
HINTED = [
    # (instance, stages, FIXED map or None, stage per position, map, bottleneck)
    (instance("hint_link", [[1, 20, 20], [20, 20, 1]], _chain(2), link_class=[[0, 1, 2], [1, 0, 2], [2, 2, 0]],
              latency=[0, 1, 10]), 2, None, [0, 1], (0, 2), 11),
    (instance("hint_one", [[2, 2, 2], [3, 3, 3], [1, 1, 1], [4, 4, 4]], _chain(4), latency=[0, 2]), 3, None,
     [0, 1, 1, 2], (0, 1, 2), 6),
    (instance("hint_fixed", [[3, 3], [1, 1], [4, 4]], _chain(3), latency=[0, 5]), 2, (1, 0), [0, 0, 1], (1, 0), 9),
]


@pytest.mark.parametrize(("inst", "S", "fixed", "split", "devices", "bottleneck"), HINTED,
                         ids=[h[0].name for h in HINTED])
def test_hint_is_one_consistent_solution(inst, S, fixed, split, devices, bottleneck) -> None:
    data = stage_data(inst, S)
    builder = get_backend("cpsat").new_builder()
    m = build_stage_model(inst, builder, data, S, fixed, lower_bound=0, upper_bound=BIG)
    hints: dict[int, int] = {}
    builder.hint = lambda var, value: hints.__setitem__(var.index, value)  # record instead of hinting
    hint_split(m, split, devices)
    by_index = {v.index: v for v in builder._vars}
    assert set(hints) == set(by_index)  # every variable of the formulation got a value
    for idx, value in hints.items():
        builder.add(by_index[idx] + 0 == value, f"fixed[{idx}]")
    res = builder.solve(SolveParams(time_limit_s=20, threads=1, seed=0))
    assert res.status is SolveStatus.OPTIMAL and res.int_value(m.bottleneck) == bottleneck


# The FREE warm start tries the S fastest devices first, then the canonical maps, at most `max_maps` + 1 in all,
# and is exact when it tried every canonical map.  Three distinct devices, two stages: 1 + 6 maps.
def test_warm_start_is_exact_only_when_every_map_was_tried() -> None:
    inst = instance("maps", [[1, 2, 3], [3, 2, 1], [2, 2, 2]], _chain(3))
    data = stage_data(inst, 2)
    plan, exact = dp_warm_start(inst, data, 2, None, 6, 1e6)
    assert exact and plan is not None and plan.bottleneck_tick == 3
    assert dp_warm_start(inst, data, 2, None, 5, 1e6)[1] is False
    # the time budget caps the maps too, at the policy's DP cells per second, S (n + 1)^2 = 32 cells per map:
    # 6.5 maps' worth allows 6 (+ the first), exact; 5.5 maps' worth is not
    cells_per_s = SolvePolicy().dp_cells_per_s
    assert dp_warm_start(inst, data, 2, None, 720, 6.5 * 32 / cells_per_s)[1] is True
    assert dp_warm_start(inst, data, 2, None, 720, 5.5 * 32 / cells_per_s)[1] is False
    # a policy's slower DP fits fewer maps in the same budget: half the speed, half the maps
    slow = SolvePolicy(dp_cells_per_s=cells_per_s // 2)
    assert dp_warm_start(inst, data, 2, None, 720, 13 * 32 / cells_per_s, policy=slow)[1] is True
    assert dp_warm_start(inst, data, 2, None, 720, 11 * 32 / cells_per_s, policy=slow)[1] is False


# solve_stages' traffic phase replaces a split of the same bottleneck with less traffic: five unit tasks, two
# stages, cuts after t1 (10 bytes) and after t2 (100 bytes) both give 3; without the phase the warm-started solve
# keeps the cut after t2, with it the cut moves to the 10-byte edge.
def test_comm_tiebreak_takes_an_equal_split_with_less_traffic() -> None:
    inst = instance("tie", [[1, 1]] * 5, _chain(5), edge_bytes=[1000, 10, 100, 1000])
    plain = solve_stages(inst, 2, threads=1, time_limit_s=10)
    assert plain.bottleneck_tick == 3 and plain.total_comm_bytes == 100
    assert plain.method is PlanMethod.MILP_DP  # warm-started from the DP by default
    assert solve_stages(inst, 2, threads=1, time_limit_s=10, warm_start=False).method is PlanMethod.MILP
    light = solve_stages(inst, 2, comm_tiebreak=True, threads=1, time_limit_s=10)
    assert light.bottleneck_tick == 3 and light.total_comm_bytes == 10
    assert light.stage_tasks == (("t0", "t1"), ("t2", "t3", "t4"))


# A stage may cost nothing: two 0-tick tasks, FREE: bottleneck 0 (the work variables start at 0).
@pytest.mark.parametrize("backend", BACKENDS)
def test_work_of_an_empty_stage_is_zero(backend: str) -> None:
    assert solve_split(instance("zero", [[0, 0], [0, 0]], _chain(2)), 2, backend) == Split(0, (0, 1), (0, 1))


# Rows the variables' domains already imply are not added: three tasks in three FREE stages (every g fixed), one
# edge t0 -> t1 with a 5-tick delay and a lone t2.  Boundary 1 carries the edge: comm row k[0] >= 5; nothing can
# cross boundary 2, so k[1] >= 0 is implied by k[1]'s domain and left out: one comm row.
def test_implied_rows_are_left_out() -> None:
    inst = instance("implied", [[1, 1, 1]] * 3, [(0, 1, 0)], latency=[0, 5])
    builder = get_backend("cpsat").new_builder()
    build_stage_model(inst, builder, stage_data(inst, 3), 3, None, lower_bound=0, upper_bound=BIG)
    assert builder.family_counts()["comm"] == 1


# The module docstring's counts: mono (S-1)(n-S-1) and step max(0, S-2)(n-S) - the rows with one side fixed
# (implied, hi == the bound) are not among them.  n = 5, S = 3: mono 2 x 1 = 2, step 1 x 2 = 2.
def test_contiguity_counts_leave_out_rows_with_a_fixed_side() -> None:
    inst = instance("count", [[1, 1, 1]] * 5, _chain(5))
    builder = get_backend("cpsat").new_builder()
    build_stage_model(inst, builder, stage_data(inst, 3), 3, (0, 1, 2), lower_bound=0, upper_bound=BIG)
    counts = builder.family_counts()
    assert (counts["mono"], counts["step"]) == (2, 2)


# A memory row is added only where the capacity is below everything the stage could hold: capacity equal to the
# sum of all parameters (20 bytes) never binds, 19 does.
def test_mem_rows_only_where_memory_can_bind() -> None:
    for cap, rows in ((20, 0), (19, 2)):
        inst = instance("memrow", [[1, 1]] * 3, _chain(3), params=[10, 5, 5], capacity=[cap, cap])
        builder = get_backend("cpsat").new_builder()
        build_stage_model(inst, builder, stage_data(inst, 2), 2, (0, 1), lower_bound=0, upper_bound=BIG)
        assert builder.family_counts().get("mem", 0) == rows, cap
