"""HEFT's ranks, tested directly (a mutant that ranks without communication, or by the downward rank, must die).

Instance: three devices; d0-d1 is link class 1 (2 ticks latency), every link to d2 is class 2 (8 ticks).
Tasks (durations on d0, d1, d2):  a [2, 4, 6], b [3, 3, 3], c [1, 2, -] (not on d2), d [6, 6, 6].
Edges: a -> b (0 fixed ticks), a -> c (4), b -> d (0), c -> d (0).

Mean durations (over eligible devices): a 4, b 3, c 1.5, d 6.
Mean delay of an edge with f fixed ticks, over the 6 ordered pairs of distinct devices: two pairs of class 1
(f + 2) and four of class 2 (f + 8): f + 6.  So a->b 6, a->c 10, b->d 6, c->d 6.
Upward ranks:   d = 6;  b = 3 + 6 + 6 = 15;  c = 1.5 + 6 + 6 = 13.5;  a = 4 + max(6 + 15, 10 + 13.5) = 27.5.
  (without communication: d 6, b 9, c 7.5, a 13)
Downward ranks: a = 0;  b = 0 + 4 + 6 = 10;  c = 0 + 4 + 10 = 14;  d = max(10 + 3 + 6, 14 + 1.5 + 6) = 21.5.
"""

from __future__ import annotations

import numpy as np
import pytest
from family_fixtures import instance
from instances import random_instance

from planner.heuristics.list_schedule import (
    Rank,
    downward_rank,
    earliest_finish,
    heft,
    list_schedule,
    mean_comm,
    mean_duration,
    upward_rank,
)

N = None
LINKS = [[0, 1, 2], [1, 0, 2], [2, 2, 0]]


def _diamond():
    return instance("rank", [[2, 4, 6], [3, 3, 3], [1, 2, N], [6, 6, 6]],
                    [(0, 1, 0), (0, 2, 4), (1, 3, 0), (2, 3, 0)], link_class=LINKS, latency=[0, 2, 8])


def test_mean_duration_and_mean_comm_by_hand() -> None:
    inst = _diamond()
    np.testing.assert_allclose(mean_duration(inst), [4, 3, 1.5, 6])
    np.testing.assert_allclose(mean_comm(inst), [6, 10, 6, 6])


def test_upward_rank_by_hand() -> None:
    np.testing.assert_allclose(upward_rank(_diamond()), [27.5, 15, 13.5, 6])


def test_downward_rank_by_hand() -> None:
    np.testing.assert_allclose(downward_rank(_diamond()), [0, 10, 14, 21.5])


def test_one_device_has_no_communication_in_the_rank() -> None:
    # With one device no edge can be crossed: the upward rank is the b-level of the mean durations alone.
    inst = instance("one", [[2], [3], [1], [6]], [(0, 1, 0), (0, 2, 4), (1, 3, 0), (2, 3, 0)])
    np.testing.assert_allclose(mean_comm(inst), [0, 0, 0, 0])
    np.testing.assert_allclose(upward_rank(inst), [11, 9, 7, 6])


def _placements(plan):
    return sorted((p.task, p.device, p.start_tick, p.end_tick) for p in plan.placements)


@pytest.mark.parametrize("seed", [4, 5, 7])
def test_heft_schedules_by_upward_rank(seed: int) -> None:
    # HEFT is the list schedule with the upward rank as priority; on these instances the downward rank and the
    # rank without communication give other plans (asserted: the premise), so HEFT must use the right one.
    inst = random_instance(seed, 30, 3)
    by_upward = list_schedule(inst, upward_rank(inst), earliest_finish)
    by_downward = list_schedule(inst, -downward_rank(inst), earliest_finish)
    no_comm = instance_without_comm_rank(inst)
    by_no_comm = list_schedule(inst, no_comm, earliest_finish)
    assert _placements(by_upward) != _placements(by_downward)
    assert _placements(by_upward) != _placements(list_schedule(inst, downward_rank(inst), earliest_finish))
    assert _placements(by_upward) != _placements(by_no_comm)
    assert _placements(heft(inst)) == _placements(by_upward)
    assert heft(inst).method == "heft"


def test_heft_sum_schedules_by_upward_plus_downward() -> None:
    inst = random_instance(4, 30, 3)
    want = list_schedule(inst, upward_rank(inst) + downward_rank(inst), earliest_finish)
    got = heft(inst, rank=Rank.SUM)
    assert _placements(got) == _placements(want) and got.method == "heft-sum"
    assert _placements(got) != _placements(heft(inst))


def instance_without_comm_rank(inst) -> np.ndarray:
    """b-level of the mean durations, ignoring every delay (what a ranking bug would compute)."""
    w = mean_duration(inst)
    rank = np.zeros(inst.num_tasks)
    for t in reversed(inst.topological_order):
        rank[t] = w[t] + max((rank[v] for v, _ in inst.successors[t]), default=0.0)
    return rank
