"""Memory intervals of zero-length tasks at tick 0 pinned by hand: a copy received on another device that the
reader consumes at once, at tick 0, is never held (the last reader's end, 0, is no later than the arrival)."""

from __future__ import annotations

from planner.cost.instance import SchedulingInstance
from planner.schedule.memory import MemoryInterval, memory_intervals


def test_a_copy_read_at_once_at_tick_zero_is_never_held():
    # t0 (0 ticks, a 1-byte output) on d0 at tick 0 feeds t1 (0 ticks) on d1 at tick 0 over a free hop: the output
    # arrives at 0 and its reader ends at 0, so neither the sender's copy nor the receiver's is held
    inst = SchedulingInstance.uniform("zero", [0, 0], [(0, 1, 0)], 2, activation_bytes=[1, 0])
    assert memory_intervals(inst, [0, 1], [0, 0], [0, 0]) == []
    # the same reader ending at 2 holds the received copy from the arrival to its end; the sender's copy is gone
    # once it has arrived
    assert memory_intervals(inst, [0, 1], [0, 0], [0, 2]) == [MemoryInterval(1, 0, 2, 1, "t0", "received")]
