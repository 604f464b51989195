"""t-levels, b-levels, critical path and the cost estimates, on hand-checked instances."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from strategies import random_dags

from planner.coarsen import (
    b_levels,
    critical_path,
    critical_path_length,
    edge_comm_estimate,
    t_levels,
    task_cost_estimate,
)
from planner.cost.instance import INELIGIBLE, SchedulingInstance


def diamond() -> SchedulingInstance:
    # 0 -> 1 -> 3 and 0 -> 2 -> 3; costs 2, 5, 1, 3; comm 0->1: 1, 0->2: 10, 1->3: 1, 2->3: 0
    return SchedulingInstance.uniform("diamond", [2, 5, 1, 3], [(0, 1, 1), (0, 2, 10), (1, 3, 1), (2, 3, 0)], 2)


def test_levels_of_a_diamond() -> None:
    inst = diamond()
    cost, comm = task_cost_estimate(inst), edge_comm_estimate(inst)
    assert cost.tolist() == [2, 5, 1, 3]
    assert comm.tolist() == [1, 10, 1, 0]
    # t: 0 at 0; 1 at 2+1=3; 2 at 2+10=12; 3 at max(3+5+1, 12+1+0) = 13
    assert t_levels(inst, cost, comm).tolist() == [0, 3, 12, 13]
    # b: 3: 3; 2: 1+0+3=4; 1: 5+1+3=9; 0: 2+max(1+9, 10+4)=16
    assert b_levels(inst, cost, comm).tolist() == [16, 9, 4, 3]
    assert critical_path(inst, cost, comm) == [0, 2, 3]
    assert critical_path_length(inst, cost, comm) == 16


def test_cost_estimate_is_the_mean_over_eligible_devices() -> None:
    inst = diamond()
    dur = np.array([[2, 4], [5, INELIGIBLE], [1, 3], [6, 6]], dtype=np.int64)
    inst = dataclasses.replace(inst, duration_tick=dur)
    assert task_cost_estimate(inst).tolist() == [3, 5, 2, 6]


def test_comm_estimate_uses_the_most_common_link_class() -> None:
    # 3 devices: pair (0,1) on a fast class 1, the other four ordered pairs on a slow class 2
    inst = SchedulingInstance.uniform("x", [1, 1], [(0, 1, 0)], 3)
    link = np.array([[0, 1, 2], [1, 0, 2], [2, 2, 0]], dtype=np.int64)
    inst = dataclasses.replace(inst, link_class=link, link_latency_tick=np.array([0.0, 1.0, 7.0]),
                               link_bytes_per_tick=np.array([np.inf, np.inf, np.inf]))
    assert edge_comm_estimate(inst).tolist() == [7]


def test_one_device_has_no_comm() -> None:
    inst = SchedulingInstance.uniform("x", [1, 1], [(0, 1, 9)], 1)
    assert edge_comm_estimate(inst).tolist() == [0]


@settings(max_examples=60, deadline=None)
@given(random_dags())
def test_levels_agree_with_the_critical_path(inst: SchedulingInstance) -> None:
    cost, comm = task_cost_estimate(inst), edge_comm_estimate(inst)
    t, b = t_levels(inst, cost, comm), b_levels(inst, cost, comm)
    length = critical_path_length(inst, cost, comm)
    assert np.isclose((t + b).max(), length)
    path = critical_path(inst, cost, comm)
    edge = {e: k for k, e in enumerate(inst.edges)}
    walked = sum(cost[v] for v in path) + sum(comm[edge[(u, v)]] for u, v in zip(path, path[1:]))
    assert np.isclose(walked, length)
    assert not inst.predecessors[path[0]] and not inst.successors[path[-1]]
