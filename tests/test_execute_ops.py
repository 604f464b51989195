"""Each torch op implementation against onnxruntime on a one-node model with random inputs (ONNX semantics:
broadcasting, integer types, TopK ties, negative indices, reductions, opset-dependent attributes).

Tolerance: float32 results within 1e-5 absolute + 1e-5 relative; integer and boolean results exactly equal."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import helper
from op_cases import CASES, f32, i64  # noqa: E402 - the shared op cases

from planner.execute.ops import OPS, OpContext, unsupported_ops
from planner.ir.onnx_values import plain_attributes


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
