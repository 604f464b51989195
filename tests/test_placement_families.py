"""One instance per constraint family of `formulations/placement.py`, built so that the family is the only thing
between the solver and a wrong answer.  The model is built and solved directly (no list-schedule fallback, no
runtime self-check), on every backend; each expected optimum is derived by hand in the comment above it.

On MILP backends the memory families become the documented safe bound (every buffer that may exist on a device
fits at once), so the memory instances are infeasible there; that is asserted too, and it also needs the family.
"""

from __future__ import annotations

import pytest
from family_fixtures import BACKENDS, instance, overlaps, solve_model

from formulations.backends import get_backend
from formulations.model_api import SolveStatus
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
