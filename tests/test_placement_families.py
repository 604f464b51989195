"""One instance per constraint family of `formulations/placement.py`, built so that the family is the only thing
between the solver and a wrong answer.  The model is built and solved directly (no list-schedule fallback, no
runtime self-check), on every backend; each expected optimum is derived by hand in the comment above it.

On MILP backends the memory families become the documented safe bound (every buffer that may exist on a device
fits at once), so the memory instances are infeasible there; that is asserted too, and it also needs the family.
"""

from __future__ import annotations

import pytest
from family_fixtures import BACKENDS, UNBOUNDED, instance, overlaps, solve_model

from formulations.backends import get_backend
from formulations.model_api import SolveStatus
from formulations.placement import Objective, heads_and_tails, hint_schedule, memory_may_bind
from formulations.solve_instance import solve_placement
from planner.errors import InfeasibleError

N = None  # ineligible


# 1. assign.  Three independent 4-tick tasks on two identical devices: two share a device, optimum 8.  Without
# "exactly one device" no task is placed and only the bound max(4, 12 / 2) = 6 remains.
@pytest.mark.parametrize("backend", BACKENDS)
def test_assign_every_task_is_placed(backend: str) -> None:
    inst = instance("assign", [[4, 4]] * 3)
    sol = solve_model(inst, backend)
    assert sol.makespan == 8
    assert sorted(sol.device).count(0) in (1, 2) and not overlaps(sol)


# 2. dur.  A takes 4 on d0 and 8 on d1; B (6) may only run on d0.  A on d1 ends at 8; A on d0 before or after B
# ends at 10.  Optimum 8.  Without end = start + duration A's end is free down to 4 on d1: 6.
@pytest.mark.parametrize("backend", BACKENDS)
def test_dur_end_follows_the_chosen_device(backend: str) -> None:
    inst = instance("dur", [[4, 8], [6, N]])
    sol = solve_model(inst, backend)
    assert sol.makespan == 8 and sol.device == (1, 0)


# 3. noover (the first survivor: only acting on devices with more than two tasks).  A (3) and B (3) pinned
# to d0, unordered, both feeding C (1) pinned to d1 (no delay).  One after the other: C starts at 6, optimum 7.
# If A and B may overlap, C starts at 3 and only the load row (6 ticks on d0) remains: 6.
@pytest.mark.parametrize("backend", BACKENDS)
def test_noover_two_unordered_tasks_pinned_to_one_device(backend: str) -> None:
    inst = instance("noover", [[3, N], [3, N], [N, 1]], [(0, 2, 0), (1, 2, 0)])
    sol = solve_model(inst, backend)
    assert sol.makespan == 7
    assert not overlaps(sol)


# 4. colo.  r (1) forks to a (4) and b (4) with 10 ticks per crossing.  Split: b starts at 1 + 10 = 11, ends 15;
# serial: 1 + 4 + 4 = 9.  Optimum 9, all on one device.  If "same" could be 1 across devices the split is free: 5.
@pytest.mark.parametrize("backend", BACKENDS)
def test_colo_a_split_edge_pays_its_delay(backend: str) -> None:
    inst = instance("colo", [[1, 1], [4, 4], [4, 4]], [(0, 1, 10), (0, 2, 10)])
    sol = solve_model(inst, backend)
    assert sol.makespan == 9 and len(set(sol.device)) == 1


# 5. lvl.  Three identical devices, d0-d1 one tick apart (class 1), d2 ten ticks from both (class 2).  r (1) forks to
# a, b, c (4 each).  Best: r, a, c on d0 ([0,1), [1,5), [5,9)) and b on d1 from 1 + 1 = 2 to 6: makespan 9 (using d2
# costs 1 + 10 + 4 = 15).  If a crossing's level literal may stay 0, every crossing is free: 5.
@pytest.mark.parametrize("backend", BACKENDS)
def test_lvl_the_crossing_pays_its_link_level(backend: str) -> None:
    lc = [[0, 1, 2], [1, 0, 2], [2, 2, 0]]
    inst = instance("lvl", [[1, 1, 1], [4, 4, 4], [4, 4, 4], [4, 4, 4]], [(0, 1, 0), (0, 2, 0), (0, 3, 0)],
                    link_class=lc, latency=[0, 1, 10])
    sol = solve_model(inst, backend)
    assert sol.makespan == 9 and 2 not in sol.device


# 6. prec and 7. mk.  a (2) pinned to d0 feeds b (2) pinned to d1 over 3 ticks: b starts at 5, makespan 7.  Without
# prec b may start at its head 2; without mk the makespan only covers the bound max(2 + 2, load 2) = 4.
@pytest.mark.parametrize("backend", BACKENDS)
def test_prec_and_mk_a_transfer_delays_the_sink(backend: str) -> None:
    inst = instance("prec", [[2, N], [N, 2]], [(0, 1, 3)])
    sol = solve_model(inst, backend)
    assert sol.makespan == 7 and sol.start == (0, 5)


# 8a. param_cap.  a (2) -> b (2), 5 ticks apart, 6 bytes of parameters each, 10 bytes per device: they must split,
# b starts at 7, makespan 9 (together it would be 4).  Parameters never leave, so this holds on every backend.
@pytest.mark.parametrize("backend", BACKENDS)
def test_param_cap_forces_a_split(backend: str) -> None:
    inst = instance("param", [[2, 2], [2, 2]], [(0, 1, 5)], params=[6, 6], capacity=10)
    sol = solve_model(inst, backend)
    assert sol.makespan == 9 and sol.device[0] != sol.device[1]


# 8b. hold_out and mem (the second survivor: the sender holds its output until the transfer arrives).
# u (2, d0) makes 10 bytes for v (1, d1) over 10 ticks; w (2, d0) needs 10 bytes of working memory; 15 bytes per
# device.  u's output lives on d0 until it arrives, so w cannot run during [start u, end u + 10).
#   u first: u [0,2), output until 12, w [12,14), v [12,13): 14.   w first: w [0,2), u [2,4), v [14,15): 15.
# Optimum 14.  If the output were freed when u ends, w [2,4) and v [12,13): 13.  With no memory rows at all: 13.
# MILP backends: the safe bound counts u's output and w's working memory together (20 > 15): infeasible.
@pytest.mark.parametrize("backend", BACKENDS)
def test_hold_out_sender_keeps_its_output_until_arrival(backend: str) -> None:
    inst = instance("hold_out", [[2, N], [N, 1], [2, N]], [(0, 1, 10)], acts=[10, 0, 0], internal=[0, 0, 10],
                    capacity=15)
    sol = solve_model(inst, backend)
    if get_backend(backend).exact_cumulative:
        assert sol.makespan == 14 and sol.start[2] >= 12
    else:
        assert sol.status is SolveStatus.INFEASIBLE


# The same instance through `solve_placement`: on cpsat the plan is the optimum (never a RuntimeError from its
# self-check); on MILP backends the safe bound says infeasible and the list schedule (which ignores memory) is not
# valid, so the user gets the documented InfeasibleError naming the conservative bound.
@pytest.mark.parametrize("backend", BACKENDS)
def test_hold_out_through_solve_placement(backend: str) -> None:
    inst = instance("hold_out", [[2, N], [N, 1], [2, N]], [(0, 1, 10)], acts=[10, 0, 0], internal=[0, 0, 10],
                    capacity=15)
    if get_backend(backend).exact_cumulative:
        plan = solve_placement(inst, backend=backend, time_limit_s=20, threads=1)
        assert plan.makespan_tick == 14 and plan.status == "optimal"
    else:
        with pytest.raises(InfeasibleError, match="bounds memory conservatively"):
            solve_placement(inst, backend=backend, time_limit_s=20, threads=1)


# 8c. recv_on / recv_from / recv_until: a received copy lives on the receiver from its arrival to its last local
# consumer.  u (1, d0, 10 bytes out) feeds z (6, d0) and v (1, d1, one tick away); z feeds v too; s (2, d0) feeds
# w (2, d1, 10 bytes of working memory), one tick away; 15 bytes per device.  d0 runs u, z (after u) and s.
#   u, z, s: u [0,1), z [1,7), s [7,9); v [8,9); the copy of u's output lives on d1 during [2, 9); w [10,12): 12.
#   u, s, z: z ends at 9, v [10,11), copy until 11; w can start at 4 but the copy is there: w [11,13): 13.
#   s, u, z: u ends at 3 or later, copy from >= 4 to v's end 11; w ready at 3 would overlap it unless u starts at 3:
#            u [3,4), z [4,10), v [11,12), w [3,5) before the copy arrives at 5: 12.
# Optimum 12.  Without the received copy: u, s, z with w [4,6) and v [10,11): 11.
# MILP: the copy (10) and w's working memory (10) both may exist on d1: infeasible.
@pytest.mark.parametrize("backend", BACKENDS)
def test_recv_received_copy_blocks_the_receiver(backend: str) -> None:
    #                u        z        v        s        w
    inst = instance("recv", [[1, N], [6, N], [N, 1], [2, N], [N, 2]],
                    [(0, 1, 1), (0, 2, 1), (1, 2, 1), (3, 4, 1)], acts=[10, 0, 0, 0, 0],
                    internal=[0, 0, 0, 0, 10], capacity=15)
    sol = solve_model(inst, backend)
    if get_backend(backend).exact_cumulative:
        assert sol.makespan == 12
    else:
        assert sol.status is SolveStatus.INFEASIBLE


# 10. sym: breaking symmetry must not cut the optimum.  Three identical devices, independent tasks 5, 4, 3, 3:
# 15 ticks on 3 devices need >= 5, and 5 would need three loads of exactly 5 (impossible: 4 + 3 = 7), so the
# optimum is 6 with loads {5}, {4}, {3, 3}.  Symmetry rows that kept the third device unused give 7 or more.
@pytest.mark.parametrize("backend", BACKENDS)
def test_sym_keeps_the_optimum_on_interchangeable_devices(backend: str) -> None:
    inst = instance("sym", [[5, 5, 5], [4, 4, 4], [3, 3, 3], [3, 3, 3]])
    sol = solve_model(inst, backend)
    assert sol.makespan == 6 and len(set(sol.device)) == 3
    # the first task in topological order is on the class's first device (what family 10 promises)
    assert sol.device[0] == 0


# 8d. hold_same (and the same / same_lb literals it needs): an output stays until its last local consumer ends.
# Four devices, every task pinned, 15 bytes each.  d0: u (1, 10 bytes out), v (1), w (2, 10 bytes working memory);
# d1: y (10) after w;  d2: z (5) before v;  d3: q (11) after u.  No delays.
#   w first: w [0,2), y [2,12); u [2,3), q [3,14); v [5,6): 14.
#   u first: u [0,1), q [1,12); u's output stays on d0 until v ends (v >= 5 after z), so w waits until 6 and
#            y ends at 18.  Optimum 14.  If the output left with u's end, w [1,3) and y [3,13), q [1,12): 13.
@pytest.mark.parametrize("backend", BACKENDS)
def test_hold_same_output_stays_until_its_local_consumer_ends(backend: str) -> None:
    #                          u          v          w          y          z          q
    inst = instance("hold_same", [[1, N, N, N], [1, N, N, N], [2, N, N, N], [N, 10, N, N], [N, N, 5, N],
                                  [N, N, N, 11]],
                    [(0, 1, 0), (4, 1, 0), (2, 3, 0), (0, 5, 0)], acts=[10, 0, 0, 0, 0, 0],
                    internal=[0, 0, 10, 0, 0, 0], capacity=15)
    sol = solve_model(inst, backend)
    if get_backend(backend).exact_cumulative:
        assert sol.makespan == 14 and sol.start[2] == 0
    else:
        assert sol.status is SolveStatus.INFEASIBLE


# 8a'. param_cap counts one-byte parameters too: two 1-byte tasks, 1 byte per device, a -> b over 5 ticks: 9.
@pytest.mark.parametrize("backend", BACKENDS)
def test_param_cap_counts_small_parameters(backend: str) -> None:
    inst = instance("param1", [[2, 2], [2, 2]], [(0, 1, 5)], params=[1, 1], capacity=1)
    assert solve_model(inst, backend).makespan == 9


# Objective: comm volume in units rounded up per edge.  r (1) forks to a (4), b (4), no delay, 2.5 MiB per edge,
# weights 1 per tick and 1 per MiB.  Serial: makespan 9, nothing crosses: 9.  Split: makespan 5, one edge crosses,
# ceil(2.5) = 3 units: 8.  Optimum 8 (split); with floor it would be 7, with no rounding to units far above 9.
@pytest.mark.parametrize("backend", BACKENDS)
def test_comm_volume_objective_rounds_each_edge_up_to_units(backend: str) -> None:
    inst = instance("volume", [[1, 1], [4, 4], [4, 4]], [(0, 1, 0), (0, 2, 0)],
                    edge_bytes=[5 * 2**19, 5 * 2**19])
    sol = solve_model(inst, backend, objective=Objective(comm_volume_weight=1))
    assert sol.objective == pytest.approx(8) and sol.makespan == 5 and len(set(sol.device)) == 2


# Objective: peak memory in units rounded up.  t0 (2) -> t1 (2) over 10 ticks, 30 bytes of parameters each,
# units of 10 bytes, weights 1 per tick and 5 per unit.  Together on one device: makespan 4, peak 60 = 6 units:
# 4 + 30 = 34.  Apart: makespan 14, peak 30 = 3 units: 14 + 15 = 29.  Optimum 29 (apart); makespan alone keeps
# them together (4).  Memory is unbounded, so only the peak weight puts the memory rows in the model.
@pytest.mark.parametrize("backend", BACKENDS)
def test_peak_memory_objective_spreads_the_parameters(backend: str) -> None:
    inst = instance("peak", [[2, 2], [2, 2]], [(0, 1, 10)], params=[30, 30])
    sol = solve_model(inst, backend, objective=Objective(peak_memory_weight=5, memory_unit_bytes=10))
    assert sol.objective == pytest.approx(29) and sol.makespan == 14 and len(set(sol.device)) == 2
    assert solve_model(inst, backend).makespan == 4
    # 25 bytes each: 3 units apart (rounded up), 5 together: 14 + 15 = 29 against 4 + 25 = 29, a tie
    tie = instance("peak25", [[2, 2], [2, 2]], [(0, 1, 10)], params=[25, 25])
    assert solve_model(tie, backend, objective=Objective(peak_memory_weight=5, memory_unit_bytes=10)).objective \
        == pytest.approx(29)


def test_objective_makespan_only() -> None:
    assert Objective().makespan_only
    assert not Objective(comm_volume_weight=1).makespan_only
    assert not Objective(peak_memory_weight=1).makespan_only


def test_heads_and_tails_by_hand() -> None:
    # a [2, 4] -> b [3, 3] -> c [1, 5]; a -> c.  Fastest: 2, 3, 1.  head: a 0, b 2, c 5; tail: c 1, b 4, a 6.
    inst = instance("ht", [[2, 4], [3, 3], [1, 5]], [(0, 1, 0), (1, 2, 0), (0, 2, 0)])
    head, tail = heads_and_tails(inst)
    assert head.tolist() == [0, 2, 5] and tail.tolist() == [6, 4, 1]


# 10. sym, exactly: on three identical devices the devices are used in order of first use (topological order).
# The assignment t0 -> d0, t1 -> d2, t2 -> d1 skips d1 and must be infeasible; its canonical relabelling
# (t0 -> d0, t1 -> d1, t2 -> d2) is feasible.
@pytest.mark.parametrize("backend", BACKENDS)
def test_sym_rejects_a_device_used_before_its_predecessor_in_the_class(backend: str) -> None:
    inst = instance("sym3", [[3, 3, 3]] * 3)

    def pin(devices):
        def fix(m, b):
            for t, d in enumerate(devices):
                b.add(m.x[t, d] + 0 >= 1, f"pin[{t}]")
        return fix

    assert solve_model(inst, backend, fix=pin([0, 2, 1])).status is SolveStatus.INFEASIBLE
    assert solve_model(inst, backend, fix=pin([0, 1, 2])).makespan == 3


# Warm starts: `hint_schedule` hints every variable, and the hinted values are one consistent solution of the
# model.  Recorded hints are turned into equalities: the model must stay feasible with the hint's makespan.
HINTED = [
    # (instance, device, start): memory (outputs, received copies), two link levels, interchangeable devices
    (instance("hint_mem", [[1, N], [6, N], [N, 1], [2, N], [N, 2]], [(0, 1, 1), (0, 2, 1), (1, 2, 1), (3, 4, 1)],
              acts=[10, 0, 0, 0, 0], internal=[0, 0, 0, 0, 10], capacity=15),
     [0, 0, 1, 0, 1], [0, 1, 8, 7, 10]),
    (instance("hint_lvl", [[1, 1, 1], [4, 4, 4], [4, 4, 4], [4, 4, 4]], [(0, 1, 0), (0, 2, 0), (0, 3, 0)],
              link_class=[[0, 1, 2], [1, 0, 2], [2, 2, 0]], latency=[0, 1, 10]),
     [1, 1, 0, 2], [0, 1, 2, 11]),
    (instance("hint_sym", [[2, 2, 2]] * 4, [(0, 1, 3), (0, 2, 3)], acts=[5, 5, 5, 5], capacity=12),
     [2, 2, 0, 1], [0, 2, 5, 0]),
    # a received copy with two consumers whose inputs arrive at 2 and 4 (edge delays 1 and 3): the copy is hinted
    # from its first arrival (r <= every arrival on d1); only d1's memory can bind (12 < 15 bytes in all)
    (instance("hint_recv2", [[1, N], [N, 1], [N, 1], [1, N]], [(0, 1, 1), (0, 2, 3)], acts=[10, 0, 0, 0],
              internal=[0, 0, 0, 5], capacity=[UNBOUNDED, 12]),
     [0, 1, 1, 0], [0, 2, 4, 1]),
]


@pytest.mark.parametrize(("inst", "device", "start"), HINTED, ids=[h[0].name for h in HINTED])
def test_hint_is_one_consistent_solution(inst, device, start) -> None:
    hints: dict[int, int] = {}

    def fix(m, b):
        b.hint = lambda var, value: hints.__setitem__(var.index, value)  # record instead of hinting
        hint_schedule(m, device, start)
        by_index = {v.index: v for v in b._vars}
        for idx, value in hints.items():
            b.add(by_index[idx] + 0 == value, f"fixed[{idx}]")
        # every variable of the formulation got a value
        assert set(hints) == set(by_index)

    end = [s + int(inst.duration_tick[t, device[t]]) for t, s in enumerate(start)]
    sol = solve_model(inst, "cpsat", fix=fix)
    assert sol.status is SolveStatus.OPTIMAL and sol.makespan == max(end)
    assert sorted(zip(sol.start, sol.end)) == sorted(zip(start, end))


# End variables (a task whose duration depends on the device) are bounded by the horizon less the tail: with the
# horizon exactly the optimum 8 of the dur instance, A still ends at 8 on d1 (an upper bound tighter by A's
# fastest duration would leave only A on d0, and B after it until 10: infeasible).
@pytest.mark.parametrize("backend", BACKENDS)
def test_end_variables_reach_a_tight_horizon(backend: str) -> None:
    inst = instance("dur", [[4, 8], [6, N]])
    sol = solve_model(inst, backend, horizon=8)
    assert sol.makespan == 8 and sol.device == (1, 0) and sol.end[0] == 8


# Memory rows exist only for devices that could overflow: a capacity below every byte any task could place there.
def test_memory_may_bind_below_the_worst_case_only() -> None:
    worst = 1 + 2 + 4 + 8 + 16 + 32  # params + outputs + working memory
    def inst(caps):
        return instance("mb", [[1, 1], [1, 1]], [(0, 1, 0)], params=[1, 2], acts=[4, 8], internal=[16, 32],
                        capacity=caps)
    assert memory_may_bind(inst([worst, worst - 1])) == [1]
    assert memory_may_bind(inst([worst + 1, worst])) == []


# 7. mk_tail (delivery times).  One device; A (2) with a delivery time of 10, B (5) with 8.  A first: A ends 2 -> 12,
# B ends 7 -> 15.  B first: B ends 5 -> 13, A ends 7 -> 17.  Optimum 15 (A first).  Without mk_tail only the bound
# max(head + tail) = max(0 + 2 + 10, 0 + 5 + 8) = 13 and the ends (7) remain: 13.
@pytest.mark.parametrize("backend", BACKENDS)
def test_mk_tail_delivery_times_order_the_device(backend: str) -> None:
    inst = instance("tail", [[2], [5]])
    sol = solve_model(inst, backend, tail_tick=[10, 8])
    assert sol.makespan == 15 and sol.start == (0, 2)


# Release times raise the lower bound past the trivial one, and the horizon with it: one task (2) released at 5
# ends at 7 at the earliest, so C in [7, 7] even when the caller's horizon is 1 (a bound that kept the smaller
# trivial bound 2 would leave the start's domain [5, 2 - 2] empty: infeasible).
@pytest.mark.parametrize("backend", BACKENDS)
def test_release_time_raises_the_bound_and_the_horizon(backend: str) -> None:
    inst = instance("release", [[2]])
    sol = solve_model(inst, backend, horizon=1, release_tick=[5])
    assert sol.makespan == 7 and sol.start == (5,)


# 3. noover leaves zero-length tasks out.  d0: A (4) and Z (0); d1: P (2) then Q (2); P -> Z -> Q without delay.
# Z starts at 2 (after P), strictly inside A [0, 4), and Q runs [2, 4): optimum 4.  A zero-length Z in the no-overlap
# set could not sit inside A: Z at 4 (Q [4, 6)) or A after Z ([2, 6)): 6.
@pytest.mark.parametrize("backend", BACKENDS)
def test_noover_a_zero_length_task_may_sit_inside_another(backend: str) -> None:
    #                            A       Z       P       Q
    inst = instance("zero", [[4, N], [0, N], [N, 2], [N, 2]], [(2, 1, 0), (1, 3, 0)])
    sol = solve_model(inst, backend)
    assert sol.makespan == 4 and sol.start[1] == 2


# 8a''. param_cap only sums tasks eligible on the device: t0 (2, d0 only) -> t1 (2, either) over 5 ticks, 6 bytes of
# parameters each, 10 per device.  t1 cannot join t0 on d0 (12 > 10): t1 on d1 from 2 + 5 = 7, makespan 9.
@pytest.mark.parametrize("backend", BACKENDS)
def test_param_cap_with_an_ineligible_device(backend: str) -> None:
    inst = instance("param_pin", [[2, N], [2, 2]], [(0, 1, 5)], params=[6, 6], capacity=10)
    sol = solve_model(inst, backend)
    assert sol.makespan == 9 and sol.device == (0, 1)


# 7. mk_tail with a one-tick delivery time.  One device, A (1) and B (1), each delivered one tick after it ends:
# the second ends at 2 and is delivered at 3.  Optimum 3; without the row for a one-tick tail, only the bound
# max(head + tail) = 2 and the ends (2) remain: 2.
@pytest.mark.parametrize("backend", BACKENDS)
def test_mk_tail_one_tick_delivery(backend: str) -> None:
    inst = instance("tail1", [[1], [1]])
    assert solve_model(inst, backend, tail_tick=[1, 1]).makespan == 3


# 8e. mem's capacity is the device memory less the parameters placed there.  a (2, d0 only, 6 bytes of parameters)
# -> b (2, either device, 6 bytes of working memory) over 5 ticks; 10 bytes per device.  b on d0 would need
# 6 + 6 = 12 > 10: b runs on d1 from 2 + 5 = 7, makespan 9 (b on d0 after a would give 4).
@pytest.mark.parametrize("backend", BACKENDS)
def test_mem_capacity_is_less_the_parameters(backend: str) -> None:
    inst = instance("mem_params", [[2, N], [2, 2]], [(0, 1, 5)], params=[6, 0], internal=[0, 6], capacity=10)
    sol = solve_model(inst, backend)
    assert sol.makespan == 9 and sol.device == (0, 1)


# 8e'. the same with a one-tick b: its working memory counts too (b on d1 from 7, makespan 8; on d0 it would be 3).
@pytest.mark.parametrize("backend", BACKENDS)
def test_mem_counts_one_tick_working_memory(backend: str) -> None:
    inst = instance("mem_params1", [[2, N], [1, 1]], [(0, 1, 5)], params=[6, 0], internal=[0, 6], capacity=10)
    sol = solve_model(inst, backend)
    assert sol.makespan == 8 and sol.device == (0, 1)


# 4'. the one-level shortcut (delay = c·(1 - same)) only where every eligible crossing pays c.  Three devices:
# d0-d1 link class 1 with no delay, d2 five ticks (class 2) from both; every task runs on d0 or d1 only.
# r (1) forks to a (4) and b (4): the only crossing (d0-d1) is free, so a and b run side by side: 5.  Charging the
# class-2 delay to that crossing would give max(serial 9, split 1 + 5 + 4 = 10) = 9.
@pytest.mark.parametrize("backend", BACKENDS)
def test_colo_shortcut_only_where_every_eligible_crossing_pays(backend: str) -> None:
    lc = [[0, 1, 2], [1, 0, 2], [2, 2, 0]]
    inst = instance("free_pair", [[1, 1, N], [4, 4, N], [4, 4, N]], [(0, 1, 0), (0, 2, 0)], link_class=lc,
                    latency=[0, 0, 5])
    sol = solve_model(inst, backend)
    assert sol.makespan == 5 and sol.device[1] != sol.device[2]


# Warm start with a peak-memory weight (the room and peak variables exist): t0 (3 bytes of parameters) on d0, t1
# (5 bytes) on d1, both at 0, independent.  room[d] is hinted as the capacity less d's own parameters
# (room + params <= cap on each device); the hinted values, fixed, must stay one feasible solution with makespan 3
# (t1 takes 3 on d1).
def test_hint_with_a_peak_weight_is_one_consistent_solution() -> None:
    inst = instance("hint_peak", [[2, 2], [2, 3]], params=[3, 5])
    hints: dict[int, int] = {}

    def fix(m, b):
        b.hint = lambda var, value: hints.__setitem__(var.index, value)  # record instead of hinting
        hint_schedule(m, [0, 1], [0, 0])
        by_index = {v.index: v for v in b._vars}
        for idx, value in hints.items():
            b.add(by_index[idx] + 0 == value, f"fixed[{idx}]")
        assert set(hints) == set(by_index) and m.room

    sol = solve_model(inst, "cpsat", fix=fix, objective=Objective(peak_memory_weight=1))
    assert sol.status is SolveStatus.OPTIMAL and sol.makespan == 3 and sol.device == (0, 1)


# 8e''. the same instance as 8e with a peak-memory weight (the capacity becomes room[d], room + params <= cap):
# b still cannot join a on d0 (6 + 6 > 10), so the makespan stays 9 (peak 1 unit of 1 MiB: objective 10).
@pytest.mark.parametrize("backend", BACKENDS)
def test_room_is_the_capacity_less_the_parameters(backend: str) -> None:
    inst = instance("room", [[2, N], [2, 2]], [(0, 1, 5)], params=[6, 0], internal=[0, 6], capacity=10)
    sol = solve_model(inst, backend, objective=Objective(peak_memory_weight=1))
    assert sol.makespan == 9 and sol.device == (0, 1) and sol.objective == pytest.approx(10)
