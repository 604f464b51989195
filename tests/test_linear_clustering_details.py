"""Linear clustering (`planner.coarsen.linear`), rule by rule on hand-built graphs: which successor a path walks to
(comm + b-level, ties by topological position), which devices a path may still share, where peeling starts."""

from __future__ import annotations

import dataclasses

import numpy as np

from planner.coarsen import linear_clustering
from planner.cost.instance import INELIGIBLE, SchedulingInstance


def _only_on(inst: SchedulingInstance, allowed: dict[int, set[int]]) -> SchedulingInstance:
    """`inst` with task t eligible only on the devices `allowed[t]` (the others keep every device)."""
    dur = inst.duration_tick.copy()
    for t, devices in allowed.items():
        for d in range(inst.num_devices):
            if d not in devices:
                dur[t, d] = INELIGIBLE
    return dataclasses.replace(inst, duration_tick=dur)


def test_the_walk_adds_the_edge_delay_to_the_successor_level() -> None:
    # 0 -> 1 (delay 0, level 5) and 0 -> 2 (delay 4, level 2): 0 + 5 < 4 + 2, so the path takes 2
    inst = SchedulingInstance.uniform("d", [1, 5, 2], [(0, 1, 0), (0, 2, 4)], 2)
    assert linear_clustering(inst) == [[0, 2], [1]]


def test_the_walk_prefers_the_heavier_level_when_delays_are_equal() -> None:
    # 0 -> 1 (level 5) and 0 -> 2 (level 1), no delays: the path takes 1; 2 is peeled after 1 is done
    inst = SchedulingInstance.uniform("d", [1, 5, 1], [(0, 1, 0), (0, 2, 0)], 2)
    assert linear_clustering(inst) == [[0, 1], [2]]


def test_a_tie_goes_to_the_earlier_topological_position_listed_first() -> None:
    # 0 -> 1 and 0 -> 2 of equal weight: 1 is first in the topological order and first among 0's successors
    inst = SchedulingInstance.uniform("d", [3, 1, 1], [(0, 1, 0), (0, 2, 0)], 2)
    assert linear_clustering(inst) == [[0, 1], [2]]


def test_a_tie_goes_to_the_earlier_topological_position_listed_second() -> None:
    # edges (0, 1), (0, 2), (3, 1): the topological order is 0, 3, 2, 1, so 2 wins the tie though 1 is listed first
    inst = SchedulingInstance.uniform("d", [3, 1, 1, 1], [(0, 1, 0), (0, 2, 0), (3, 1, 0)], 2)
    assert linear_clustering(inst) == [[0, 2], [3, 1]]


def test_a_successor_that_shares_no_device_with_the_path_is_skipped_for_the_next() -> None:
    # 0 (device 0 only) -> 1 (device 1 only, heavy) and 0 -> 2 (light): 0 cannot join 1, so it walks to 2
    inst = _only_on(SchedulingInstance.uniform("d", [1, 9, 1], [(0, 1, 0), (0, 2, 0)], 2), {0: {0}, 1: {1}})
    assert linear_clustering(inst) == [[0, 2], [1]]


def test_the_path_keeps_only_the_devices_all_its_tasks_share() -> None:
    # 0 (both devices) -> 1 (device 0) -> 2 (device 1): 0 and 1 share device 0; 2 shares nothing with both
    inst = _only_on(SchedulingInstance.uniform("d", [1, 1, 1], [(0, 1, 0), (1, 2, 0)], 2), {1: {0}, 2: {1}})
    assert linear_clustering(inst) == [[0, 1], [2]]


def test_peeling_goes_on_past_tasks_already_clustered() -> None:
    # levels 6 (0), 5 (1), 2 (3), 1 (2): 1 is clustered with 0 when its turn comes; 3 and 2 still start clusters
    inst = SchedulingInstance.uniform("d", [1, 5, 1, 2], [(0, 1, 0), (0, 2, 0)], 2)
    assert linear_clustering(inst) == [[0, 1], [3], [2]]


def test_a_walk_can_reach_task_zero() -> None:
    # task numbers need not follow the edges: 1 -> 0 is one chain
    inst = SchedulingInstance.uniform("d", [1, 1], [(1, 0, 0)], 2)
    assert linear_clustering(inst) == [[1, 0]]


def test_no_tasks_no_clusters() -> None:
    inst = SchedulingInstance.uniform("d", [], [], 2)
    assert inst.duration_tick.shape == (0, 2) and np.asarray(linear_clustering(inst)).size == 0
