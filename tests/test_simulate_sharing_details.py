"""The replay under processor sharing (`simulate(..., sharing=)`) pinned by hand on small instances: three ranks
whose speed changes as each stops, a rank that waits for its input while another host's device runs on, the ranks'
own send and receive work (one send per reading device, one receive before the first reader there), a transfer
whose link time is all the ranks' work, a send priced at the calibration speed, a one-tick send, a device that wakes
at a tick below its index, and the checks of the sharing description.  Every expected time is derived in the
comment above it.
"""

from __future__ import annotations

import pytest

from planner.cost.instance import SchedulingInstance
from planner.cost.sharing import SharedHosts
from planner.schedule.errors import DeadlockError, SimulationError
from planner.schedule.simulate import simulate


def _times(tl) -> dict[str, tuple[int, int, int]]:
    return {p.task: (p.device, p.start_tick, p.end_tick) for p in tl.placements}


def test_three_ranks_speed_up_as_one_stops():
    # one host, E = 1.5, figures measured with 3 ranks busy: speed(3) = 0.5, so solo work is half the priced
    # ticks: 30, 30, 15.  All three at 0.5 until t2 ends at 30 (15 solo done each); then two at min(1, 1.5 / 2) =
    # 0.75: t0 and t1 have 15 left, 20 more ticks: both end at 50
    inst = SchedulingInstance.uniform("three", [60, 60, 30], [], 3)
    hosts = SharedHosts((0, 0, 0), (1.5,), (3,))
    tl = simulate(inst, [[0], [1], [2]], sharing=hosts)
    assert _times(tl) == {"t0": (0, 0, 50), "t1": (1, 0, 50), "t2": (2, 0, 30)}
    assert tl.makespan_tick == 50
    assert simulate(inst, [[0], [1], [2]]).makespan_tick == 60  # the plain replay: as priced


def test_a_rank_waits_for_its_input_while_a_device_on_its_own_host_runs_on():
    # d0 and d1 share one core measured with both busy (solo = half the priced ticks); d2 is on its own.
    # t0 (priced 40, solo 20) alone on the shared host: 0-20; its output crosses 10 ticks: arrives at 30.
    # t2 (priced 25) on d2 at full speed: 0-25.  From 25 nothing runs until t1's input arrives at 30; t1 (priced
    # 20, solo 10) alone: 30-40
    inst = SchedulingInstance.uniform("wait", [40, 20, 25], [(0, 1, 10)], 3)
    hosts = SharedHosts((0, 0, -1), (1.0,), (2,))
    tl = simulate(inst, [[0], [1], [2]], sharing=hosts)
    assert _times(tl) == {"t0": (0, 0, 20), "t1": (1, 30, 40), "t2": (2, 0, 25)}
    (x,) = tl.transfers
    assert (x.start_tick, x.end_tick) == (20, 30)


@pytest.mark.parametrize(("comm", "arrive"), [(20, 24), (5, 14)])
def test_the_ranks_send_and_receive_work_on_their_own_streams(comm, arrive):
    # a core per rank (E = 2): nobody is slowed.  Send 4, receive 6 ticks of each transfer's work on the ranks.
    # t0 (10) on d0 feeds t1 on d1; t3 (6) follows t0 on d0, t2 (5) follows t1 on d1 and reads nothing across.
    # d0: t0 0-10, then its one send 10-14, then t3 14-20.  The link holds comm - 4 - 6 (never below 0): 10 ticks
    # for comm 20 (arrival 24), 0 for comm 5 (arrival 14).  d1: t1 receives (6) and computes (8) from the arrival,
    # t2 after it
    inst = SchedulingInstance.uniform("ranks", [10, 8, 5, 6], [(0, 1, comm)], 2)
    hosts = SharedHosts((0, 0), (2.0,), (2,))
    tl = simulate(inst, [[0, 3], [1, 2]], sharing=hosts, rank_transfer_tick=(4.0, 6.0))
    assert _times(tl) == {"t0": (0, 0, 10), "t3": (0, 14, 20), "t1": (1, arrive, arrive + 14),
                          "t2": (1, arrive + 14, arrive + 19)}
    (x,) = tl.transfers
    assert (x.start_tick, x.end_tick) == (14, arrive)


def test_one_send_per_reading_device_and_one_receive_before_its_first_reader():
    # t0 (10) on d0 is read by t1 and t2 on d1 (in that order) and by nothing else: one send (3) and one receive
    # (2), before t1 only.  Comm 5 = 3 + 2: the link adds nothing.  d0: t0 0-10, send 10-13; d1: t1 receives and
    # computes 2 + 4 from 13 to 19, t2 (4) 19-23
    inst = SchedulingInstance.uniform("fan", [10, 4, 4], [(0, 1, 5), (0, 2, 5)], 2)
    hosts = SharedHosts((0, 0), (2.0,), (2,))
    tl = simulate(inst, [[0], [1, 2]], sharing=hosts, rank_transfer_tick=(3.0, 2.0))
    assert _times(tl) == {"t0": (0, 0, 10), "t1": (1, 13, 19), "t2": (1, 19, 23)}


def test_the_sharing_description_must_cover_every_device_and_a_cycle_deadlocks():
    inst = SchedulingInstance.uniform("two", [4, 4], [(0, 1, 0)], 2)
    with pytest.raises(SimulationError, match=r"sharing describes 3 devices, instance 'two' has 2"):
        simulate(inst, [[0], [1]], sharing=SharedHosts((0, 0, 0), (1.0,), (2,)))
    with pytest.raises(DeadlockError):
        simulate(inst, [[1, 0], []], sharing=SharedHosts((0, 0), (1.0,), (2,)))


def test_a_send_under_sharing_is_priced_at_the_calibration_speed():
    # one core for both ranks, figures measured with both busy (solo work = half the priced ticks).  t0 (priced 10,
    # solo 5) runs alone on d0: 0-5; its one send (priced 4, solo 2) alone: 5-7; the link holds 20 - 4 = 16 ticks:
    # arrival 23; t1 (priced 6, solo 3) alone on d1: 23-26
    inst = SchedulingInstance.uniform("send", [10, 6], [(0, 1, 20)], 2)
    hosts = SharedHosts((0, 0), (1.0,), (2,))
    tl = simulate(inst, [[0], [1]], sharing=hosts, rank_transfer_tick=(4.0, 0.0))
    assert _times(tl) == {"t0": (0, 0, 5), "t1": (1, 23, 26)}
    (x,) = tl.transfers
    assert (x.start_tick, x.end_tick) == (7, 23)


def test_a_one_tick_send_is_a_send_and_a_late_device_wakes_on_time():
    # a core per rank: nobody is slowed.  A send of exactly 1 tick still holds d0: t0 (10) 0-10, its send 10-11, t2
    # (3) 11-14; the link holds 5 - 1 = 4 ticks: arrival 15, t1 (2) on d1 15-17
    inst = SchedulingInstance.uniform("one", [10, 2, 3], [(0, 1, 5)], 2)
    tl = simulate(inst, [[0, 2], [1]], sharing=SharedHosts((0, 0), (2.0,), (2,)), rank_transfer_tick=(1.0, 0.0))
    assert _times(tl) == {"t0": (0, 0, 10), "t2": (0, 11, 14), "t1": (1, 15, 17)}
    # t0 takes no time on d0 and its output reaches d2 at tick 1: d2 (index 2, above that tick) wakes then
    late = SchedulingInstance.uniform("late", [0, 3], [(0, 1, 1)], 3)
    tl = simulate(late, [[0], [], [1]], sharing=SharedHosts((0, 0, 0), (3.0,), (3,)))
    assert _times(tl) == {"t0": (0, 0, 0), "t1": (2, 1, 4)}
