"""Each torch op implementation against onnxruntime on a one-node model with random inputs (ONNX semantics:
broadcasting, integer types, TopK ties, negative indices, reductions, opset-dependent attributes).

Tolerance: float32 results within 1e-5 absolute + 1e-5 relative; integer and boolean results exactly equal."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from planner.execute.ops import OPS, OpContext, unsupported_ops
from planner.ir.onnx_values import plain_attributes

R = np.random.default_rng(0)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def i64(values):
    return np.asarray(values, dtype=np.int64)


def _run_both(op_type, inputs, attrs=None, opset=18, n_out=1):
    names = [f"x{i}" if v is not None else "" for i, v in enumerate(inputs)]
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op_type, names, outs, **(attrs or {}))
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in zip(names, inputs) if v is not None]
    graph = helper.make_graph([node], "t", vis, [helper.make_value_info(o, onnx.TypeProto()) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {n: v for n, v in zip(names, inputs) if v is not None})
    ins = [torch.from_numpy(np.array(v)) if v is not None else None for v in inputs]
    ours = OPS[op_type](ins, plain_attributes(node), OpContext(opset=opset, num_outputs=n_out))
    return [o.numpy() for o in ours], ref


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
    ("AveragePool", [f32(1, 2, 7, 8)], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                        "ceil_mode": 1}, 11),
    ("AveragePool", [f32(1, 2, 7, 8)], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 2],
                                        "count_include_pad": 1}, 11),
    ("AveragePool", [f32(1, 2, 7, 8)], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1,
                                        "count_include_pad": 1}, 11),
    ("GlobalAveragePool", [f32(2, 3, 4, 5)], {}, 11),
    ("LRN", [f32(1, 7, 3, 3)], {"size": 5, "alpha": 1e-2, "beta": 0.75, "bias": 2.0}, 11),
    ("LRN", [f32(1, 7, 3, 3)], {"size": 3}, 11),  # onnxruntime rejects even sizes
    ("BatchNormalization", [f32(2, 3, 4, 4), f32(3), f32(3), f32(3), np.abs(f32(3)) + 0.1], {"epsilon": 1e-3}, 9),
    ("Relu", [f32(3, 4)], {}, 13),
    ("Sigmoid", [f32(3, 4)], {}, 13),
    ("Tanh", [f32(3, 4)], {}, 13),
    ("Pad", [f32(2, 3), i64([0, 1, 1, 2]), np.float32(1.5)], {}, 13),
    ("Pad", [f32(2, 4), i64([1, 2, 1, 1])], {"mode": "reflect"}, 13),
    ("Pad", [f32(2, 4), i64([1, 2, 0, 1])], {"mode": "edge"}, 13),
    ("Tile", [f32(2, 3), i64([2, 1])], {}, 13),
    ("Identity", [f32(3)], {}, 13),
    ("Shape", [f32(2, 3, 4)], {"start": 1}, 15),
    ("ConstantOfShape", [i64([2, 3])], {"value": helper.make_tensor("v", TensorProto.INT64, [1], [7])}, 13),
]


@pytest.mark.parametrize("op_type,inputs,attrs,opset", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_op_matches_onnxruntime(op_type, inputs, attrs, opset):
    inputs = [np.asarray(v) if v is not None else None for v in inputs]
    ours, ref = _run_both(op_type, inputs, attrs, opset)
    for a, b in zip(ours, ref, strict=True):
        assert a.shape == b.shape, (a.shape, b.shape)
        if np.issubdtype(b.dtype, np.floating):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        else:
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)


def test_topk_ties_keep_the_lower_index_first():
    x = np.array([[3, 1, 3, 2, 3, 1]], np.float32)
    for largest in (1, 0):
        ours, ref = _run_both("TopK", [x, i64([4])], {"largest": largest}, 11, n_out=2)
        np.testing.assert_array_equal(ours[0], ref[0])
        np.testing.assert_array_equal(ours[1], ref[1])
    ours, _ = _run_both("TopK", [x, i64([3])], {}, 11, n_out=2)
    assert ours[1].tolist() == [[0, 2, 4]]  # torch.topk would not promise this order


def test_dropout_in_inference_is_identity_with_mask():
    x = f32(3, 4)
    ours, ref = _run_both("Dropout", [x], {}, 13, n_out=2)
    np.testing.assert_array_equal(ours[0], x)
    np.testing.assert_array_equal(ours[1], ref[1])


def test_split_sizes_and_even():
    x = f32(6, 4)
    ours, ref = _run_both("Split", [x, i64([1, 2, 3])], {"axis": 0}, 13, n_out=3)
    for a, b in zip(ours, ref):
        np.testing.assert_array_equal(a, b)
    ours, ref = _run_both("Split", [x], {"axis": 1, "num_outputs": 2}, 18, n_out=2)
    for a, b in zip(ours, ref):
        np.testing.assert_array_equal(a, b)


def test_unsupported_ops_are_listed_before_running():
    from planner.ir.graph import Op, OpGraph, TensorInfo

    tensors = {"x": TensorInfo("x", (4,), "float", 16), "y": TensorInfo("y", (4, 1), "int64", 32),
               "s": TensorInfo("s", (4,), "string", 32), "z": TensorInfo("z", (4,), "float", 16)}
    ops = [Op("nz", "NonZero", ("x",), ("y",)), Op("odd", "MyOp", ("x",), ("z",), domain="com.example"),
           Op("str", "Identity", ("s",), ("s2",)), Op("ok", "Relu", ("x",), ("z",))]
    g = OpGraph.build("g", ops, [], tensors=tensors, graph_inputs=["x", "s"])
    bad = unsupported_ops(g)
    assert [b.split()[0] for b in bad] == ["nz", "odd", "str"]
