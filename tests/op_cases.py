"""The op cases every runtime-op test runs (one ONNX node, its random inputs, attributes, opset): shared by the
runtime's per-op tests (tests/test_execute_ops.py) and the generated-code per-op tests (tests/test_codegen_ops.py)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

R = np.random.default_rng(0)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def i64(values):
    return np.asarray(values, dtype=np.int64)


CASES = [
    ("Add", [f32(2, 3, 4), f32(4)], {}, 18),
    ("Sub", [i64([[5, -7]]), i64([[2], [3]])], {}, 18),
    ("Div", [i64([7, -7, 9]), i64([2, 2, -4])], {}, 18),
    ("Mod", [i64([7, -7, 9]), i64([3, 3, -4])], {}, 18),
    ("Pow", [f32(3, 4), np.float32(2.0).reshape(())], {}, 18),
    ("Where", [R.random((3, 4)) > 0.5, f32(3, 4), f32(1, 4)], {}, 18),
    ("Cast", [f32(3, 4) * 10], {"to": TensorProto.INT32}, 18),
    ("Cast", [i64([0, 2, -1])], {"to": TensorProto.BOOL}, 18),
    ("Equal", [i64([1, 2, 3]), i64([1, 0, 3])], {}, 18),
    ("Less", [f32(3, 4), f32(3, 1)], {}, 18),
    ("Not", [R.random((5,)) > 0.5], {}, 18),
    ("CumSum", [f32(3, 5), i64(1)], {"exclusive": 1, "reverse": 1}, 18),
    ("CumSum", [i64([[1, 2, 3], [4, 5, 6]]), i64(0)], {}, 18),
    ("Gelu", [f32(4, 5)], {"approximate": "tanh"}, 20),
    ("Gelu", [f32(4, 5)], {}, 20),
    ("Erf", [f32(4, 5)], {}, 18),
    ("Sqrt", [np.abs(f32(4, 5))], {}, 18),
    ("Clip", [f32(4, 5), np.float32(-0.5), np.float32(0.5)], {}, 13),
    ("Clip", [f32(4, 5)], {"min": -0.2, "max": 0.3}, 9),
    ("Softmax", [f32(2, 3, 4)], {"axis": 1}, 11),
    ("Softmax", [f32(2, 3, 4)], {"axis": 1}, 13),
    ("LogSoftmax", [f32(2, 3, 4)], {}, 13),
    ("LayerNormalization", [f32(2, 3, 4), f32(3, 4), f32(3, 4)], {"axis": 1, "epsilon": 1e-3}, 17),
    ("Gather", [f32(5, 3), i64([[0, -1], [2, -5]])], {"axis": 0}, 13),
    ("Gather", [f32(2, 5, 3), i64(-2)], {"axis": 1}, 13),
    ("GatherElements", [f32(3, 4), i64([[0, -1], [2, 1], [-4, 3]])], {"axis": 1}, 13),
    ("ScatterND", [f32(4, 3), i64([[1], [-1]]), f32(2, 3)], {}, 18),
    ("ScatterND", [f32(4, 3), i64([[1], [1], [0]]), f32(3, 3)], {"reduction": "add"}, 18),
    ("ScatterND", [f32(4, 3), i64([[1, 2], [1, 2]]), f32(2)], {"reduction": "max"}, 18),
    ("ScatterElements", [f32(3, 4), i64([[0, 1], [2, -1]]), f32(2, 2)], {"axis": 1}, 18),
    ("ScatterElements", [f32(3, 4), i64([[0, 0], [2, 2]]), f32(2, 2)], {"axis": 0, "reduction": "add"}, 18),
    ("ScatterElements", [f32(3, 4), i64([[0, 0], [1, 1]]), f32(2, 2)], {"axis": 1, "reduction": "min"}, 18),
    ("Reshape", [f32(2, 3, 4), i64([0, -1])], {}, 14),
    ("Slice", [f32(5, 6), i64([-1, 1]), i64([-6, 100]), i64([0, 1]), i64([-2, 2])], {}, 13),
    ("Slice", [f32(5, 6)], {"starts": [1], "ends": [-1], "axes": [1]}, 9),
    ("Expand", [f32(3, 1), i64([2, 1, 4])], {}, 13),
    ("Squeeze", [f32(1, 3, 1, 2), i64([0, -2])], {}, 13),
    ("Unsqueeze", [f32(3, 2), i64([0, -1])], {}, 13),
    ("Unsqueeze", [f32(3, 2)], {"axes": [1]}, 11),
    ("Concat", [f32(2, 3), f32(2, 1)], {"axis": -1}, 13),
    ("Transpose", [f32(2, 3, 4)], {"perm": [2, 0, 1]}, 13),
    ("Flatten", [f32(2, 3, 4)], {"axis": 2}, 13),
    ("Range", [np.float32(1.0), np.float32(2.0), np.float32(0.3)], {}, 13),
    ("Range", [np.int64(10), np.int64(1), np.int64(-3)], {}, 13),
    ("OneHot", [i64([0, -1, 5, 2]), i64(4), np.array([0.0, 1.0], np.float32)], {"axis": 0}, 13),
    ("ReduceSum", [f32(2, 3, 4), i64([1, -1])], {"keepdims": 0}, 13),
    ("ReduceMean", [f32(2, 3, 4), i64([1])], {}, 18),
    ("ReduceMean", [f32(2, 3, 4)], {"axes": [0, 2], "keepdims": 0}, 13),
    ("ReduceMax", [f32(2, 3, 4)], {}, 18),
    ("ArgMax", [np.array([[1, 3, 3], [2, 2, 1]], np.float32)], {"axis": 1, "select_last_index": 1}, 13),
    ("ArgMin", [np.array([[1, 3, 1], [2, 2, 1]], np.float32)], {"axis": 1, "keepdims": 0}, 13),
    ("MatMul", [f32(2, 1, 3, 4), f32(3, 4, 5)], {}, 13),
    ("Gemm", [f32(4, 3), f32(5, 4), f32(5)], {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, 13),
    ("Sum", [f32(2, 3), f32(3), f32(2, 1)], {}, 13),
    ("Mean", [f32(2, 3), f32(3)], {}, 13),
    ("Max", [f32(2, 3), f32(3)], {}, 13),
    ("Min", [i64([1, 5]), i64([3, 2])], {}, 13),
    ("Conv", [f32(1, 4, 7, 8), f32(6, 2, 3, 2), f32(6)],
     {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2], "group": 2}, 11),
    ("Conv", [f32(1, 3, 7, 8), f32(4, 3, 3, 3)], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 11),
    ("Conv", [f32(1, 3, 7, 8), f32(4, 3, 2, 2)], {"auto_pad": "SAME_LOWER"}, 11),
    ("Conv", [f32(2, 2, 9), f32(3, 2, 3)], {"auto_pad": "VALID", "strides": [2]}, 11),
    ("ConvTranspose", [f32(1, 4, 5, 5), f32(4, 3, 3, 3), f32(6)],
     {"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 1], "group": 2}, 11),
    ("ConvTranspose", [f32(1, 2, 4, 4), f32(2, 3, 3, 3)], {"strides": [2, 2], "output_shape": [9, 8]}, 11),
    ("ConvTranspose", [f32(1, 2, 4, 4), f32(2, 3, 2, 2)], {"strides": [2, 2], "dilations": [2, 1]}, 11),
    ("MaxPool", [f32(1, 2, 7, 8)], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
     12),
    ("MaxPool", [f32(1, 2, 6, 6)], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, 12),
    ("MaxPool", [f32(1, 2, 7, 8)], {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 1]}, 12),
    # the runtime's separable max (one spatial dimension at a time): dilations, 1-D and 3-D windows, integers
    ("MaxPool", [f32(1, 3, 9, 10)], {"kernel_shape": [3, 2], "dilations": [2, 3], "strides": [1, 2],
                                     "pads": [2, 1, 0, 1]}, 12),
    ("MaxPool", [f32(2, 3, 11)], {"kernel_shape": [4], "strides": [3], "pads": [1, 2]}, 12),
    ("MaxPool", [f32(1, 2, 5, 6, 7)], {"kernel_shape": [2, 3, 2], "strides": [2, 1, 3], "ceil_mode": 1}, 12),
    ("MaxPool", [(np.arange(2 * 3 * 6 * 6) % 37 - 18).astype(np.int8).reshape(2, 3, 6, 6)],
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 12),
    ("AveragePool", [f32(1, 2, 7, 8)], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                        "ceil_mode": 1}, 11),
    ("AveragePool", [f32(1, 2, 7, 8)], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 2],
                                        "count_include_pad": 1}, 11),
    ("AveragePool", [f32(1, 2, 7, 8)], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1,
                                        "count_include_pad": 1}, 11),
    # global pooling as exporters write it: a ceil_mode window larger than the (padded) feature map
    ("AveragePool", [f32(1, 2, 7, 7)], {"kernel_shape": [224, 224], "strides": [224, 224], "ceil_mode": 1}, 11),
    ("AveragePool", [f32(1, 2, 7, 5)], {"kernel_shape": [14, 9], "strides": [14, 9], "ceil_mode": 1,
                                        "pads": [1, 0, 1, 2], "count_include_pad": 1}, 11),
    ("MaxPool", [f32(1, 2, 7, 7)], {"kernel_shape": [224, 224], "strides": [224, 224], "ceil_mode": 1}, 12),
    ("MaxPool", [f32(1, 2, 6, 9)], {"kernel_shape": [13, 3], "strides": [13, 3], "ceil_mode": 1}, 12),
    ("GlobalAveragePool", [f32(2, 3, 4, 5)], {}, 11),
    ("LRN", [f32(1, 7, 3, 3)], {"size": 5, "alpha": 1e-2, "beta": 0.75, "bias": 2.0}, 11),
    ("LRN", [f32(1, 7, 3, 3)], {"size": 3}, 11),  # onnxruntime rejects even sizes
    ("LRN", [f32(1, 6, 4, 3)], {"size": 3, "alpha": 0.5, "beta": 0.6, "bias": 1.5}, 11),  # beta other than 0.75
    ("BatchNormalization", [f32(2, 3, 4, 4), f32(3), f32(3), f32(3), np.abs(f32(3)) + 0.1], {"epsilon": 1e-3}, 9),
    ("Relu", [f32(3, 4)], {}, 13),
    ("Sigmoid", [f32(3, 4)], {}, 13),
    ("Shrink", [f32(3, 4)], {"bias": 0.25, "lambd": 0.5}, 13),  # both sides of the band and inside it
    ("Shrink", [i64([-3, -1, 0, 1, 3])], {"bias": 1.0, "lambd": 1.0}, 13),  # an integer x stays integer
    ("Tanh", [f32(3, 4)], {}, 13),
    ("Pad", [f32(2, 3), i64([0, 1, 1, 2]), np.float32(1.5)], {}, 13),
    ("Pad", [f32(2, 4), i64([1, 2, 1, 1])], {"mode": "reflect"}, 13),
    ("Pad", [f32(2, 4), i64([1, 2, 0, 1])], {"mode": "edge"}, 13),
    ("Tile", [f32(2, 3), i64([2, 1])], {}, 13),
    ("Identity", [f32(3)], {}, 13),
    ("Shape", [f32(2, 3, 4)], {"start": 1}, 15),
    ("ConstantOfShape", [i64([2, 3])], {"value": helper.make_tensor("v", TensorProto.INT64, [1], [7])}, 13),
    # Opset-dependent defaults (a wrong default axis for one opset can pass every per-op test that sets the
    # attribute, and only a whole-model test would notice): each op with its default left out, at an opset before
    # and after the change.
    # Softmax family: before 13 the default axis is 1 and the input is coerced to 2-D at it; from 13 it is -1.
    ("Softmax", [f32(2, 3, 4)], {}, 11),
    ("Softmax", [f32(2, 3, 4)], {}, 13),
    ("Softmax", [f32(2, 3, 4)], {"axis": -2}, 11),
    ("LogSoftmax", [f32(2, 3, 4)], {}, 11),
    ("Hardmax", [f32(2, 3, 4)], {}, 11),
    ("Hardmax", [f32(2, 3, 4)], {}, 13),
    # Squeeze / Unsqueeze: axes an attribute before 13, an input from 13; Squeeze without axes drops every 1
    ("Squeeze", [f32(1, 3, 1, 2)], {"axes": [0, -2]}, 11),
    ("Squeeze", [f32(1, 3, 1, 2)], {}, 13),
    ("Squeeze", [f32(1, 3, 1, 2)], {}, 11),
    ("Unsqueeze", [f32(3, 2), i64([1])], {}, 13),
    # Reductions: axes an attribute before 13 (ReduceSum) / 18 (the others), an input after; no axes: all of
    # them, keepdims 1 by default
    ("ReduceSum", [f32(2, 3, 4)], {"axes": [0, -1]}, 11),
    ("ReduceSum", [f32(2, 3, 4)], {}, 13),
    ("ReduceSum", [f32(2, 3, 4)], {}, 11),
    ("ReduceMax", [f32(2, 3, 4)], {"axes": [1]}, 13),
    ("ReduceMax", [f32(2, 3, 4), i64([1])], {"keepdims": 0}, 18),
    ("ReduceMin", [f32(2, 3, 4)], {"axes": [-1], "keepdims": 0}, 13),
    ("ReduceMin", [f32(2, 3, 4), i64([-1])], {}, 18),
    ("ReduceMean", [f32(2, 3, 4)], {}, 13),
    # Flatten's default axis is 1 at every opset
    ("Flatten", [f32(2, 3, 4)], {}, 11),
    ("Flatten", [f32(2, 3, 4)], {}, 13),
    ("Flatten", [f32(2, 3, 4)], {"axis": 0}, 13),
    # ArgMax / ArgMin: axis 0 and keepdims 1 by default
    ("ArgMax", [np.array([[1, 3, 3], [2, 2, 1]], np.float32)], {}, 11),
    ("ArgMax", [np.array([[1, 3, 3], [2, 2, 1]], np.float32)], {}, 13),
    ("ArgMin", [np.array([[1, 3, 1], [2, 2, 1]], np.float32)], {"axis": -1}, 11),
]
