"""Roofline and tick arithmetic on hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.cost.compute import compute_time_s
from planner.cost.model import MAX_SERIAL_TICKS, build_instance, choose_tick_s
from planner.ir.graph import Edge, Op, OpGraph, SourceInfo
from planner.ir.topology import LOCAL, Device, Link, Topology

# H100 SXM5 figures (dense): bf16 989.4 TFLOP/s, fp32 67 TFLOP/s, HBM3 3.35 TB/s.
H100 = Device("gpu0", "H100", "node0", {"float": 67e12, "bfloat16": 989.4e12}, 80 * 2**30, 3.35e12, 5e-6)


def test_gemm_on_h100_is_compute_bound():
    # GEMM 4096x4096x4096 in bf16: FLOPs = 2*4096^3 = 1.374e11; compute 1.374e11/989.4e12 = 138.9 us.
    # Bytes: A, B, C each 4096*4096*2 = 33.5 MB, total 100.7 MB -> 100.7e6/3.35e12 = 30.0 us.  Roofline = compute.
    n = 4096
    flops = 2 * n**3
    nbytes = n * n * 2
    op = Op("gemm", "MatMul", flops=flops, bytes_read=2 * nbytes, bytes_written=nbytes, dtype="bfloat16")
    expected = flops / 989.4e12 + 5e-6
    assert compute_time_s(op, H100) == pytest.approx(expected, rel=1e-12)
    assert compute_time_s(op, H100) == pytest.approx(143.9e-6, rel=1e-3)


def test_elementwise_add_is_memory_bound():
    # Add of two fp32 tensors of 2^24 elements: 2^24 FLOPs -> 0.25 us of compute; bytes 3 * 64 MiB = 201.3 MB
    # -> 201.3e6 / 3.35e12 = 60.1 us.  Roofline = memory.
    n = 2**24
    op = Op("add", "Add", flops=n, bytes_read=2 * 4 * n, bytes_written=4 * n, dtype="float")
    assert compute_time_s(op, H100) == pytest.approx(3 * 4 * n / 3.35e12 + 5e-6, rel=1e-12)


def test_dtype_without_a_figure_falls_back_to_fp32():
    op = Op("mm", "MatMul", flops=10**12, dtype="int8")
    assert compute_time_s(op, H100) == pytest.approx(10**12 / 67e12 + 5e-6)


def test_estimated_op_is_never_free():
    op = Op("odd", "NonMaxSuppression", bytes_read=1000, bytes_written=1000, estimated=True)
    assert compute_time_s(op, H100) > H100.launch_overhead_s


def test_choose_tick_keeps_serial_time_within_budget():
    for serial in (1e-6, 3.7e-4, 0.05, 12.0):
        tick = choose_tick_s(serial)
        assert serial / tick <= MAX_SERIAL_TICKS * (1 + 1e-9)
        assert tick == MIN_TICK or serial / (tick / 10) > MAX_SERIAL_TICKS


MIN_TICK = 1e-9


def _two_device_topology(latency_s: float, bw: float) -> Topology:
    link = Link("nvlink", latency_s, bw)
    return Topology("two", (H100, H100), ((LOCAL, link), (link, LOCAL)))


def test_instance_comm_is_latency_plus_bytes_over_bandwidth():
    # Edge of 1 MB over a 1 us / 100 GB/s link: 1e-6 + 1e6/1e11 = 11 us.  With tick 1 us: 11 ticks.
    a = Op("a", "Relu", flops=10, bytes_read=4, bytes_written=4, output_bytes=10**6)
    b = Op("b", "Relu", flops=10, bytes_read=4, bytes_written=4)
    g = OpGraph.build("g", [a, b], [Edge("a", "b", "x", 10**6)], source=SourceInfo("g", "", "onnx"))
    inst = build_instance(g, _two_device_topology(1e-6, 1e11), tick_s=1e-6)
    assert inst.comm(0, 0, 1) == 11
    assert inst.comm(0, 1, 1) == 0
    # each op: launch overhead 5 us dominates -> ceil(5.0000x) = 6 ticks
    assert inst.duration_tick.tolist() == [[6, 6], [6, 6]]
    assert inst.activation_bytes.tolist() == [10**6, 0]


def test_tensor_consumed_twice_by_one_op_makes_one_edge_with_the_bytes_once():
    a = Op("a", "Relu", output_bytes=100)
    b = Op("b", "Add")
    g = OpGraph.build("g", [a, b], [Edge("a", "b", "x", 100), Edge("a", "b", "x", 100), Edge("a", "b", "y", 7)],
                      source=SourceInfo("g", "", "onnx"))
    inst = build_instance(g, _two_device_topology(0.0, 1.0), tick_s=1.0)
    assert inst.edges == ((0, 1),)
    assert inst.edge_bytes.tolist() == [107]
    assert inst.comm(0, 0, 1) == 107


def test_taskgraph_decimals_scale_the_tick():
    ops = [Op("a", "task", duration=1.5), Op("b", "task", duration=2.25)]
    g = OpGraph.build("g", ops, [Edge("a", "b", "a->b", comm=0.5)], source=SourceInfo("g", "", "taskgraph", "ms"))
    inst = build_instance(g, Topology.identical(2))
    assert inst.tick_s == pytest.approx(0.01)
    assert inst.duration_tick[:, 0].tolist() == [150, 225]
    assert inst.comm(0, 0, 1) == 50
    assert inst.time_unit == "ms"
    assert math.isclose(float(np.sum(inst.duration_tick[:, 0])) * inst.tick_s, 3.75)
