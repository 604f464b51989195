"""The runtime's quantized ops against onnxruntime on one-node models: integer results exactly equal, dequantized
floats within 1e-6 (integer math in int32, round half to even, saturation, per-tensor and per-axis parameters)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import helper

from planner.execute.ops import OPS, OpContext
from planner.ir.onnx_values import plain_attributes

R = np.random.default_rng(3)


def u8(*shape):
    return R.integers(0, 256, size=shape).astype(np.uint8)


def i8(*shape):
    return R.integers(-128, 128, size=shape).astype(np.int8)


def f32(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


def s(value, dtype=np.float32):
    return np.array(value, dtype)


CASES = [
    ("QuantizeLinear", [f32(2, 3, 4, scale=3), s(0.02), s(128, np.uint8)], {}, 13),
    ("QuantizeLinear", [f32(2, 3, 4, scale=3), s(0.05), s(-3, np.int8)], {}, 13),
    ("QuantizeLinear", [f32(2, 3, 4), s([0.01, 0.02, 0.05]), s([0, 10, 250], np.uint8)], {"axis": 1}, 13),
    ("QuantizeLinear", [s([0.5, 1.5, 2.5, -0.5, -1.5], np.float32), s(1.0)], {}, 13),  # half to even, no zp
    ("DequantizeLinear", [u8(2, 3, 4), s(0.02), s(128, np.uint8)], {}, 13),
    ("DequantizeLinear", [i8(2, 3, 4), s([0.01, 0.02, 0.05]), s([0, 1, -2], np.int8)], {"axis": 1}, 13),
    ("DequantizeLinear", [s([-5, 0, 7], np.int32), s(0.5)], {}, 13),
    ("DynamicQuantizeLinear", [f32(3, 5, scale=2)], {}, 11),
    ("DynamicQuantizeLinear", [np.abs(f32(3, 5)) + 0.5], {}, 11),  # all positive: the range widens to 0
    ("DynamicQuantizeLinear", [np.zeros((2, 3), np.float32)], {}, 11),
    ("MatMulInteger", [u8(3, 7), u8(7, 4), s(12, np.uint8), s(200, np.uint8)], {}, 10),
    ("MatMulInteger", [i8(2, 3, 7), i8(7, 4)], {}, 10),
    ("MatMulInteger", [u8(3, 7), i8(7, 4), s(3, np.uint8), s([4, -5, 6, 0], np.int8)], {}, 10),
    ("ConvInteger", [u8(1, 2, 6, 6), u8(3, 2, 3, 3), s(100, np.uint8), s(7, np.uint8)],
     {"pads": [1, 1, 1, 1], "strides": [2, 1]}, 10),
    ("ConvInteger", [u8(2, 4, 5, 5), u8(4, 2, 2, 2)], {"group": 2}, 10),
    ("QLinearMatMul", [u8(3, 7), s(0.05), s(120, np.uint8), u8(7, 4), s(0.03), s(130, np.uint8), s(0.4),
                       s(110, np.uint8)], {}, 10),
    ("QLinearMatMul", [i8(2, 3, 7), s(0.05), s(1, np.int8), i8(7, 4), s(0.03), s(-2, np.int8), s(0.9),
                       s(-5, np.int8)], {}, 10),
    ("QLinearConv", [u8(1, 2, 6, 6), s(0.02), s(128, np.uint8), u8(3, 2, 3, 3), s(0.01), s(120, np.uint8), s(0.1),
                     s(100, np.uint8), R.integers(-500, 500, 3).astype(np.int32)], {"pads": [1, 1, 1, 1]}, 10),
    ("QLinearConv", [u8(1, 2, 5, 5), s(0.02), s(128, np.uint8), i8(3, 2, 3, 3), s([0.01, 0.02, 0.005]),
                     s([0, 0, 0], np.int8), s(0.05), s(10, np.uint8)], {"strides": [2, 2]}, 10),
]


def _run_both(op_type, inputs, attrs, opset):
    names = [f"x{i}" for i in range(len(inputs))]
    n_out = 3 if op_type == "DynamicQuantizeLinear" else 1
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op_type, names, outs, **attrs)
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in zip(names, inputs, strict=True)]
    graph = helper.make_graph([node], "t", vis, [helper.make_value_info(o, onnx.TypeProto()) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, dict(zip(names, inputs, strict=True)))
    ins = [torch.from_numpy(np.array(v)) for v in inputs]
    ours = OPS[op_type](ins, plain_attributes(node), OpContext(opset=opset, num_outputs=n_out))
    return [o.numpy() for o in ours], ref


@pytest.mark.parametrize("op_type,inputs,attrs,opset", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_quantized_op_matches_onnxruntime(op_type, inputs, attrs, opset):
    ours, ref = _run_both(op_type, inputs, attrs, opset)
    for a, b in zip(ours, ref, strict=True):
        assert a.shape == b.shape, (a.shape, b.shape)
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        if np.issubdtype(b.dtype, np.floating):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(a, b)
