"""Contraction semantics on hand-built instances: tensors sent once, fixed delays summed, memory, names, task_ops."""

from __future__ import annotations

import numpy as np
import pytest

from planner.coarsen import cluster_name, contract
from planner.cost.instance import SchedulingInstance


def tensor_instance() -> SchedulingInstance:
    """a -> b, a -> c (both carry tensor x, 100 bytes; fixed 2 and 3); b -> d (y, 10 bytes), c -> d (z, 20 bytes).

    Two devices, one link class with latency 1 and 10 bytes per tick.  Activation bytes: a 100, b 10, c 20, d 5;
    own working memory: b 7, others 0."""
    d = 2
    return SchedulingInstance(
        name="t", task_names=("m/a", "m/b", "m/c", "m/d"), device_names=("p0", "p1"),
        duration_tick=np.array([[1, 2], [3, 4], [5, 6], [7, 8]], dtype=np.int64),
        edges=((0, 1), (0, 2), (1, 3), (2, 3)), edge_tensors=(("x",), ("x",), ("y",), ("z",)),
        tensor_bytes={"x": 100, "y": 10, "z": 20}, edge_fixed_tick=np.array([2, 3, 0, 0], dtype=np.int64),
        link_class=1 - np.eye(d, dtype=np.int64), link_latency_tick=np.array([0.0, 1.0]),
        link_bytes_per_tick=np.array([np.inf, 10.0]), param_bytes=np.array([1, 2, 3, 4], dtype=np.int64),
        activation_bytes=np.array([100, 10, 20, 5], dtype=np.int64),
        peak_internal_bytes=np.array([0, 7, 0, 0], dtype=np.int64),
        capacity_bytes=np.full(d, 10**9, dtype=np.int64))


def test_a_tensor_read_twice_by_one_cluster_is_sent_once() -> None:
    inst = tensor_instance()
    coarse = contract(inst, [[0], [1, 2, 3]])
    assert coarse.edges == ((0, 1),)
    assert coarse.edge_tensors == (("x",),)
    assert coarse.edge_bytes.tolist() == [100]  # not 200
    assert coarse.edge_fixed_tick.tolist() == [5]  # 2 + 3, two distinct fine edges
    # comm over the link: 5 + ceil(1 + 100 / 10) = 16
    assert coarse.comm(0, 0, 1) == 16
    assert coarse.duration_tick.tolist() == [[1, 2], [15, 18]]
    assert coarse.param_bytes.tolist() == [1, 9]


def test_memory_of_a_cluster() -> None:
    inst = tensor_instance()
    coarse = contract(inst, [[0, 1], [2], [3]])
    # cluster {a, b}: both outputs leave it (x to c, y to d) -> activation 110, and nothing stays inside, so the
    # peak is b's own working memory 7
    assert coarse.activation_bytes.tolist() == [110, 20, 5]
    assert coarse.peak_internal_bytes.tolist() == [7, 0, 0]
    whole = contract(inst, [[0, 1, 2, 3]])
    # everything internal but d (a step output: activation 5).  Turns a, b, c, d:
    #   a: x live (100); b: x, y live + 7 = 117; c: x (last read now), y, z = 130; d: y, z = 30  -> peak 130
    assert whole.activation_bytes.tolist() == [5]
    assert whole.peak_internal_bytes.tolist() == [130]
    assert whole.edges == ()


def test_contract_rejects_a_cycle_and_a_bad_partition() -> None:
    inst = tensor_instance()
    with pytest.raises(ValueError, match="cycle"):
        contract(inst, [[0, 3], [1, 2]])
    with pytest.raises(ValueError):
        contract(inst, [[0, 1], [2]])
    with pytest.raises(ValueError):
        contract(inst, [[0, 1], [1, 2, 3]])


def test_ineligible_member_makes_the_cluster_ineligible() -> None:
    import dataclasses

    from planner.cost.instance import INELIGIBLE

    inst = tensor_instance()
    dur = inst.duration_tick.copy()
    dur[1, 0] = INELIGIBLE
    coarse = contract(dataclasses.replace(inst, duration_tick=dur), [[0, 1], [2, 3]])
    assert coarse.duration_tick[0, 0] == INELIGIBLE and coarse.duration_tick[0, 1] == 6
    assert coarse.duration_tick[1].tolist() == [12, 14]


def test_task_ops_expand_nested_coarsening_and_names_are_unique() -> None:
    inst = tensor_instance()
    first = contract(inst, [[0], [1, 2], [3]])
    assert first.task_names == ("m/a#0", "m#1", "m/d#2")
    assert first.task_ops["m#1"] == ("m/b", "m/c")
    second = contract(first, [[0, 1], [2]])
    assert second.task_ops[second.task_names[0]] == ("m/a", "m/b", "m/c")
    assert second.task_ops[second.task_names[1]] == ("m/d",)


def test_cluster_names() -> None:
    assert cluster_name(["layer0/expert2/mm", "layer0/expert2/add"], 5) == "layer0/expert2#5"
    assert cluster_name(["layer0/expert2", "layer0/expert21"], 1) == "layer0#1"
    assert cluster_name(["t1", "t12"], 3) == "cluster#3"
    assert cluster_name(["conv_1"], 0) == "conv_1#0"
