"""`planner/schedule/memory.py` interval by interval on hand-placed instances, so that every rule of the module
docstring is pinned down (`make mutate` checks that its mutants die).  Each expected interval is derived from the
docstring's four kinds: param (whole step), activation (until the last local consumer ends or the last transfer
arrives), received (one copy per remote device, first arrival to last consumer's end), internal (while running)."""

from __future__ import annotations

from family_fixtures import instance

from planner.schedule.memory import MemoryInterval, memory_intervals, memory_profile


# a (d0 [0,2)) feeds b (d0 [2,5)) and c (d1 [6,8)) over a 4-tick edge.  Parameters 1, 2, 0; outputs 10, 20, 30;
# b needs 7 bytes of working memory.  a's output is held on d0 until max(2, b's end 5, arrival at d1 2 + 4 = 6)
# and received on d1 from 6 to c's end 8; b's output has no consumer: held while b runs.
def _three():
    inst = instance("three", [[2, 2], [3, 3], [2, 2]], [(0, 1, 0), (0, 2, 4)], params=[1, 2, 0],
                    acts=[10, 20, 30], internal=[0, 7, 0])
    return inst, memory_intervals(inst, [0, 0, 1], [0, 2, 6], [2, 5, 8])


def test_intervals_of_each_kind() -> None:
    _inst, ivs = _three()
    assert ivs == [
        MemoryInterval(0, 0, 8, 1, "t0", "param"), MemoryInterval(0, 0, 6, 10, "t0", "activation"),
        MemoryInterval(1, 6, 8, 10, "t0", "received"),
        MemoryInterval(0, 0, 8, 2, "t1", "param"), MemoryInterval(0, 2, 5, 7, "t1", "internal"),
        MemoryInterval(0, 2, 5, 20, "t1", "activation"),
        MemoryInterval(1, 6, 8, 30, "t2", "activation")]


def test_profile_steps_peaks_and_queries() -> None:
    inst, ivs = _three()
    prof = memory_profile(inst, ivs)
    # d0: 1 + 2 + 10 from 0; + 7 + 20 at 2; - 27 at 5; - 10 at 6; - 3 at 8.  d1: 10 + 30 on [6,8).
    assert prof.steps == (((0, 13), (2, 40), (5, 13), (6, 3), (8, 0)), ((0, 0), (6, 40), (8, 0)))
    assert prof.peak_bytes == (40, 40) and prof.peak_tick == (2, 6)
    assert [prof.usage_at(0, t) for t in (0, 1, 2, 4, 5, 6, 7, 8, 9)] == [13, 13, 40, 40, 13, 3, 3, 0, 0]
    assert [prof.usage_at(1, t) for t in (0, 5, 6, 7, 8)] == [0, 0, 40, 40, 0]
    assert [(iv.task, iv.what) for iv in prof.live_at(0, 2)] == [
        ("t1", "activation"), ("t0", "activation"), ("t1", "internal"), ("t1", "param"), ("t0", "param")]
    assert [(iv.task, iv.what) for iv in prof.live_at(0, 5)] == [("t0", "activation"), ("t1", "param"),
                                                                 ("t0", "param")]
    assert prof.live_at(1, 8) == ()


def test_first_excess_is_strictly_over_capacity() -> None:
    inst, ivs = _three()
    at40 = memory_profile(instance("cap", [[2, 2], [3, 3], [2, 2]], [(0, 1, 0), (0, 2, 4)], capacity=[40, 39]), ivs)
    assert at40.first_excess(0) is None and at40.first_excess(1) == (6, 40)
    at3 = memory_profile(instance("cap", [[2, 2], [3, 3], [2, 2]], [(0, 1, 0), (0, 2, 4)], capacity=[12, 2]), ivs)
    assert at3.first_excess(0) == (0, 13) and at3.first_excess(1) == (6, 40)
    assert memory_profile(inst, ivs).capacity_bytes == (2**50, 2**50)


# Given arrivals replace end + comm: a's data reaches d1 at 9 (a contended link), so a is held on d0 until 9 and
# the copy on d1 is held from 9 to c's end 11.  A given step holds the parameters over it.
def test_given_arrivals_and_step() -> None:
    inst = instance("arr", [[2, 2], [2, 2]], [(0, 1, 4)], params=[3, 0], acts=[10, 0])
    ivs = memory_intervals(inst, [0, 1], [0, 9], [2, 11], arrival_tick=[9], step=(-1, 20))
    assert ivs == [MemoryInterval(0, -1, 20, 3, "t0", "param"), MemoryInterval(0, 0, 9, 10, "t0", "activation"),
                   MemoryInterval(1, 9, 11, 10, "t0", "received")]


# Two consumers on one remote device share one copy, from the first arrival to the last end; a consumer on a
# third device has its own.  a (d0 [0,1)) -> b (d1 [3,4)) over 2, -> c (d1 [6,9)) over 5, -> d (d2 [2,3)) over 1.
def test_one_copy_per_remote_device() -> None:
    inst = instance("copies", [[1, 1, 1], [1, 1, 1], [3, 3, 3], [1, 1, 1]], [(0, 1, 2), (0, 2, 5), (0, 3, 1)],
                    acts=[10, 0, 0, 0])
    ivs = memory_intervals(inst, [0, 1, 1, 2], [0, 3, 6, 2], [1, 4, 9, 3])
    assert ivs == [MemoryInterval(0, 0, 6, 10, "t0", "activation"), MemoryInterval(1, 3, 9, 10, "t0", "received"),
                   MemoryInterval(2, 2, 3, 10, "t0", "received")]


# A task that is not placed (device -1) holds nothing, and its edges are skipped: a's output waits only for b.
def test_unplaced_tasks_and_their_edges_are_skipped() -> None:
    inst = instance("part", [[2, 2], [2, 2], [2, 2]], [(0, 2, 3), (0, 1, 0)], params=[1, 1, 1], acts=[10, 10, 10])
    ivs = memory_intervals(inst, [0, 0, -1], [0, 2, 0], [2, 4, 0])
    assert ivs == [MemoryInterval(0, 0, 4, 1, "t0", "param"), MemoryInterval(0, 0, 4, 10, "t0", "activation"),
                   MemoryInterval(0, 0, 4, 1, "t1", "param"), MemoryInterval(0, 2, 4, 10, "t1", "activation")]


# Zero-length tasks: the step [3,3) still holds parameters for one tick, a zero-length task has no working
# memory interval and no activation interval (it frees what it never held), and a consumer that arrives exactly
# when the copy would be freed gets no copy.
def test_zero_length_step_and_tasks() -> None:
    inst = instance("zero", [[0, 0], [0, 0]], [(0, 1, 0)], params=[5, 0], acts=[10, 0], internal=[4, 0])
    ivs = memory_intervals(inst, [0, 1], [3, 3], [3, 3])
    assert ivs == [MemoryInterval(0, 3, 4, 5, "t0", "param")]
    prof = memory_profile(inst, ivs)
    assert prof.steps[0] == ((0, 0), (3, 5), (4, 0)) and prof.peak_tick == (3, 0)


# The profile skips empty and zero-byte intervals and merges a free and an allocation at the same tick.
def test_profile_nets_out_at_equal_ticks_and_skips_empty_intervals() -> None:
    inst = instance("net", [[1], [1]], [])
    ivs = [MemoryInterval(0, 1, 1, 9, "t0", "internal"), MemoryInterval(0, 1, 3, 0, "t1", "internal"),
           MemoryInterval(0, 3, 2, 7, "t1", "param"),
           MemoryInterval(0, 0, 2, 5, "t0", "activation"), MemoryInterval(0, 2, 4, 5, "t1", "activation")]
    prof = memory_profile(inst, ivs)
    assert prof.steps == (((0, 5), (4, 0)),)
    assert prof.peak_bytes == (5,) and prof.peak_tick == (0,)


def test_profile_edges() -> None:
    inst = instance("edges", [[1, 1, 1]], [])
    # only an empty interval on d0, nothing on d1, a buffer from tick 1 on d2: every row starts at (0, 0)
    prof = memory_profile(inst, [MemoryInterval(0, 3, 3, 9, "t0", "internal"),
                                 MemoryInterval(2, 1, 4, 6, "t0", "activation")])
    assert prof.steps == (((0, 0),), ((0, 0),), ((0, 0), (1, 6), (4, 0)))
    assert prof.peak_bytes == (0, 0, 6) and prof.peak_tick == (0, 0, 1)
    assert prof.usage_at(2, -1) == 0 and prof.usage_at(2, 1) == 6
    # two equal maxima: the peak tick is the first
    twice = memory_profile(instance("twice", [[1]], []), [MemoryInterval(0, 0, 2, 5, "t0", "activation"),
                                                         MemoryInterval(0, 4, 6, 5, "t0", "activation")])
    assert twice.steps == (((0, 5), (2, 0), (4, 5), (6, 0)),) and twice.peak_tick == (0,)


# A one-byte output is an output: held while its task runs.
def test_a_one_byte_output_is_held() -> None:
    inst = instance("one", [[2]], [], acts=[1])
    assert memory_intervals(inst, [0], [0], [2]) == [MemoryInterval(0, 0, 2, 1, "t0", "activation")]
