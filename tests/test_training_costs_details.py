"""`planner.cost.training_costs`, rule by rule with exact values: the ticks of one backward kernel, the stage sums of
activation memory (a stashed tensor counted once, what B frees), the totals, and how `training_costs` fills B and W
per device group (an op-level graph) or by the stage rule (a task graph)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, save
from onnx_models import make_model

from planner.cost.backward_rules import OpTrainingCost, op_training_cost, tensors_needing_grad
from planner.cost.model import build_instance
from planner.cost.training_costs import TrainingCosts, _ticks, training_costs
from planner.errors import InputError
from planner.ir.graph import Edge, Op, OpGraph, SourceInfo
from planner.ir.load import load_model
from planner.ir.topology import LOCAL, Device, Link, Topology
from planner.prepare import run_passes

# a kilo-FLOP/s device with a kilobyte/s memory and no launch overhead: a kernel's seconds are easy to count
SLOW = Device("slow", "toy", "h0", {"float": 1e3}, 2**30, 1e3, 0.0)


def test_no_work_is_no_kernel() -> None:
    assert _ticks(0, 0, "float", SLOW, 1.0) == 0


def test_any_flop_or_byte_is_a_kernel_of_at_least_one_tick() -> None:
    assert _ticks(1, 0, "float", SLOW, 1.0) == 1  # 1 ms on one-second ticks
    assert _ticks(0, 1, "float", SLOW, 1.0) == 1
    assert _ticks(1000, 0, "float", SLOW, 1.0) == 1


def test_ticks_are_seconds_over_the_tick_rounded_up_but_exact_values_stay() -> None:
    assert _ticks(4000, 0, "float", SLOW, 2.0) == 2  # 4 s on 2-second ticks: exactly 2, not 3
    assert _ticks(5000, 0, "float", SLOW, 2.0) == 3  # 2.5 ticks round up
    assert _ticks(0, 3000, "float", SLOW, 0.5) == 6  # the memory side of the roofline


def _cost(name: str, **kw) -> OpTrainingCost:
    return OpTrainingCost(name, "Toy", "toy", **kw)


def _costs(ops, tensor_bytes, output_bytes) -> TrainingCosts:
    n = len(ops)
    zero = np.zeros((n, 1), dtype=np.int64)
    return TrainingCosts(tuple(ops), zero, zero, zero, tensor_bytes, np.asarray(output_bytes, dtype=np.int64))


def test_stage_activation_memory_counts_each_tensor_once_and_what_b_frees() -> None:
    ops = [_cost("a", stash_b=("s",), stash_w=("x",), private_bytes=7),
           _cost("b", stash_b=("s", "t"), private_bytes=5, private_until_w=True),
           _cost("c", stash_w=("t",))]
    tc = _costs(ops, {"s": 100, "t": 20, "x": 3}, [0, 0, 0])
    # held: s, t, x once each (123) + private 7 + 5; freed by B: s (t is read by c's W) + a's private 7
    assert tc.stage_activation_bytes([0, 1, 2]) == (123 + 12, 100 + 7)
    # without c, t is B's only: freed too
    assert tc.stage_activation_bytes([0, 1]) == (123 + 12, 120 + 7)
    assert tc.stage_activation_bytes([2]) == (20, 0)
    assert tc.stage_activation_bytes([]) == (0, 0)


def test_a_tensor_of_unknown_size_counts_nothing() -> None:
    tc = _costs([_cost("a", stash_b=("ghost",), stash_w=("ghost2",))], {}, [0])
    assert tc.stage_activation_bytes([0]) == (0, 0)


def test_a_task_graph_task_holds_its_output_until_w_and_the_next_tasks_still_count() -> None:
    tc = _costs([None, _cost("b", stash_b=("s",), private_bytes=4)], {"s": 10}, [64, 999])
    assert tc.stage_activation_bytes([0]) == (64, 0)
    assert tc.stage_activation_bytes([0, 1]) == (64 + 10 + 4, 10 + 4)


def test_totals_sum_over_the_ops_and_skip_task_graph_tasks() -> None:
    ops = [_cost("a", forward_flops=1, forward_product_flops=2, input_grad_flops=3, input_grad_product_flops=4,
                 weight_grad_flops=5, weight_grad_product_flops=6), None,
           _cost("b", forward_flops=10, forward_product_flops=20, input_grad_flops=30, input_grad_product_flops=40,
                 weight_grad_flops=50, weight_grad_product_flops=60)]
    assert _costs(ops, {}, [0, 0, 0]).totals == {
        "forward": 11, "forward_product": 22, "input_grad": 33, "input_grad_product": 44, "weight_grad": 55,
        "weight_grad_product": 66}


F = TensorProto.FLOAT


@pytest.fixture(scope="module")
def matmul_relu(tmp_path_factory):
    """x[64,64] -> MatMul W[64,64] -> Relu: a weight gradient, and input gradients only when x needs one."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="fc"),
             helper.make_node("Relu", ["h"], ["r"], name="relu")]
    model = make_model(nodes, [("x", F, [64, 64])], [("r", F, [64, 64])],
                       {"W": rng.random((64, 64)).astype(np.float32)})
    path = tmp_path_factory.mktemp("tc") / "m.onnx"
    save(model, str(path))
    return run_passes(load_model(path))


def _two_kinds() -> Topology:
    """Two devices priced differently (each its own group), the second four times faster."""
    fast = Device("fast", "toy", "h0", {"float": 4e9}, 2**30, 4e9, 0.0)
    slow = Device("slow", "toy", "h0", {"float": 1e9}, 2**30, 1e9, 0.0)
    link = Link("l", 0.0, 1e9)
    return Topology("two", (slow, fast), ((LOCAL, link), (link, LOCAL)))


def test_b_and_w_are_priced_per_device_group_in_the_instance_tick(matmul_relu) -> None:
    topo = _two_kinds()
    inst = build_instance(matmul_relu, topo, tick_s=1e-6)
    tc = training_costs(matmul_relu, topo, inst)
    t = inst.task_index["fc"]
    cost = op_training_cost(next(o for o in matmul_relu.ops if o.name == "fc"), matmul_relu,
                            tensors_needing_grad(matmul_relu))
    assert tc.ops[t] == cost and cost.weight_grad_flops == 2 * 64 * 64 * 64
    for d, dev in enumerate(topo.devices):
        assert tc.weight_grad_tick[t, d] == _ticks(cost.weight_grad_flops, cost.weight_grad_bytes, "float", dev, 1e-6)
    assert tc.weight_grad_tick[t, 0] > tc.weight_grad_tick[t, 1] > 1  # the slow device's own price, in microseconds
    assert tc.input_grad_tick[t].tolist() == [0, 0]  # x needs no gradient by default
    assert (tc.forward_tick == inst.duration_tick).all()


def test_inputs_that_need_a_gradient_give_the_first_op_a_b(matmul_relu) -> None:
    topo = _two_kinds()
    inst = build_instance(matmul_relu, topo, tick_s=1e-6)
    t = inst.task_index["fc"]
    assert training_costs(matmul_relu, topo, inst, inputs_need_grad=True).input_grad_tick[t, 0] > 0


def test_an_instance_that_is_not_the_graphs_is_refused(matmul_relu) -> None:
    other = OpGraph.build("g", [Op("a", "task", duration=1.0)], [], source=SourceInfo("g", "", "taskgraph"))
    inst = build_instance(other, Topology.identical(2))
    with pytest.raises(InputError, match="no op"):
        training_costs(matmul_relu, _two_kinds(), inst)


def test_a_task_graph_takes_the_stage_rule_b_and_w_equal_to_f() -> None:
    ops = [Op("a", "task", duration=1.5, output_bytes=8), Op("b", "task", duration=2.25, output_bytes=16)]
    g = OpGraph.build("g", ops, [Edge("a", "b", "a->b", comm=0.5)], source=SourceInfo("g", "", "taskgraph"))
    inst = build_instance(g, Topology.identical(2))
    tc = training_costs(g, Topology.identical(2), inst)
    assert tc.ops == (None, None)
    assert tc.input_grad_tick.tolist() == tc.weight_grad_tick.tolist() == inst.duration_tick.tolist()
    assert tc.output_bytes.tolist() == [8, 16]
    assert tc.stage_ticks([0, 1], 1) == (math.fsum(inst.duration_tick[:, 1]),) * 3
