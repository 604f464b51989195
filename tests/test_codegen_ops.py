"""The lines plan-codegen writes per op, run on their own, against onnxruntime: every case of the runtime's op
table (tests/test_execute_ops.py), once with the extra inputs as weights (constants, as after folding: the emitter
may write them out) and once as computed tensors (it may not).  Plus: the helper file is the runtime's own ops, and
the common ops of the bundled models are direct torch calls, not helper calls.

Tolerance as in test_execute_ops: float32 within 1e-5 absolute + relative; integers and booleans exactly equal."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper
from op_cases import CASES

from planner.execute.codegen_ops import EmitContext, emit
from planner.execute.codegen_support import onnx_ops_source, p2p_source
from planner.execute.ops import OPS
from planner.ir.onnx_values import NodeSpec, plain_attributes


@pytest.fixture(scope="module")
def onnx_ops(tmp_path_factory):
    path = tmp_path_factory.mktemp("helper") / "onnx_ops.py"
    path.write_text(onnx_ops_source())
    spec = importlib.util.spec_from_file_location("onnx_ops_generated", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks its module up while the file runs
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_the_helper_file_is_the_runtime_op_table(onnx_ops):
    assert sorted(onnx_ops.OPS) == sorted(OPS)
    assert "planner" not in {line.split()[1].split(".")[0] for line in onnx_ops_source().splitlines()
                             if line.startswith(("import ", "from "))}
    assert "import torch" in p2p_source() and "planner" not in p2p_source()


def _onnx_type(arr: np.ndarray) -> str:
    return TensorProto.DataType.Name(helper.np_dtype_to_tensor_dtype(arr.dtype)).lower()


def _reference(op_type, names, inputs, attrs, opset, n_out):
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op_type, names, outs, **(attrs or {}))
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in zip(names, inputs, strict=True) if v is not None]
    graph = helper.make_graph([node], "t", vis, [helper.make_value_info(o, onnx.TypeProto()) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return node, outs, sess.run(None, {n: v for n, v in zip(names, inputs, strict=True) if v is not None})


def _run_generated(op_type, inputs, attrs, opset, onnx_ops, *, constants: bool):
    inputs = [np.asarray(v) if v is not None else None for v in inputs]
    names = [f"x{i}" if v is not None else "" for i, v in enumerate(inputs)]
    n_out = 2 if op_type == "TopK" else 1
    node, outs, ref = _reference(op_type, names, inputs, attrs, opset, n_out)
    values = {n: v for n, v in zip(names, inputs, strict=True) if n}
    values.update(zip(outs, ref, strict=True))
    weights = {n: v for n, v in values.items() if constants and n.startswith("x") and n != "x0"}
    cx = EmitContext(expr=lambda t: f"W[{t!r}]" if t in weights else t, const=weights.get,
                     shape=lambda t: tuple(values[t].shape), dtype=lambda t: _onnx_type(values[t]), opset=opset)
    spec = NodeSpec("n", op_type, "", tuple(names), tuple(outs), plain_attributes(node))
    lines, used_helper = emit(spec, cx, outs)
    env = {"torch": torch, "F": F, "onnx_op": onnx_ops.onnx_op,
           "W": {k: torch.from_numpy(np.array(v)) for k, v in weights.items()}}
    env.update({n: torch.from_numpy(np.array(values[n])) for n in names if n and n not in weights})
    exec(compile("\n".join(lines), "<generated>", "exec"), env)  # noqa: S102 - the code under test
    return [env[o].numpy() for o in outs], ref, lines, used_helper


@pytest.mark.parametrize("constants", [True, False], ids=["weights", "computed"])
@pytest.mark.parametrize("op_type,inputs,attrs,opset", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_generated_line_matches_onnxruntime(op_type, inputs, attrs, opset, constants, onnx_ops):
    ours, ref, lines, _ = _run_generated(op_type, inputs, attrs, opset, onnx_ops, constants=constants)
    for a, b in zip(ours, ref, strict=True):
        assert a.shape == b.shape, (lines, a.shape, b.shape)
        if np.issubdtype(b.dtype, np.floating):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg="\n".join(lines))
        else:
            assert a.dtype == b.dtype, lines
            np.testing.assert_array_equal(a, b, err_msg="\n".join(lines))


def test_topk_keeps_ties_in_index_order_in_plain_torch(onnx_ops):
    x = np.array([[1, 3, 3, 2, 3]], np.float32)
    (_, indices), ref, lines, helper_used = _run_generated("TopK", [x, np.array([3])], {}, 18, onnx_ops,
                                                                constants=True)
    assert not helper_used and "torch.sort(" in lines[0] and "stable=True" in lines[0]
    assert indices.tolist() == [[1, 2, 4]] == ref[1].tolist()


# The ops of the bundled MoE and the light CNNs are direct torch calls, spelled as a PyTorch user would.
DIRECT = [
    ("MatMul", [np.zeros((2, 3), np.float32), np.zeros((3, 4), np.float32)], {}, "torch.matmul("),
    ("Conv", [np.zeros((1, 2, 5, 5), np.float32), np.zeros((3, 2, 3, 3), np.float32)], {"pads": [1, 1, 1, 1]},
     "F.conv2d("),
    ("MaxPool", [np.zeros((1, 2, 6, 6), np.float32)], {"kernel_shape": [2, 2], "strides": [2, 2]}, "F.max_pool2d("),
    ("Concat", [np.zeros((1, 2), np.float32), np.zeros((1, 3), np.float32)], {"axis": 1}, "torch.cat("),
    ("Relu", [np.zeros((3,), np.float32)], {}, "torch.relu("),
    ("Softmax", [np.zeros((2, 3), np.float32)], {"axis": -1}, "torch.softmax("),
    ("Gelu", [np.zeros((2, 3), np.float32)], {}, "F.gelu("),
    ("LayerNormalization", [np.zeros((2, 3), np.float32), np.ones(3, np.float32), np.zeros(3, np.float32)], {},
     "F.layer_norm("),
    ("Gemm", [np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32), np.zeros(4, np.float32)],
     {"transB": 1}, "torch.matmul("),
    ("ScatterElements", [np.zeros((3, 4), np.float32), np.zeros((1, 4), np.int64), np.ones((1, 4), np.float32)],
     {"axis": 0}, "torch.scatter("),
    ("CumSum", [np.zeros((2, 3), np.int64), np.array(1)], {}, "torch.cumsum("),
    ("Gather", [np.zeros((5, 3), np.float32), np.array([0, 2])], {"axis": 0}, "["),
]


@pytest.mark.parametrize("op_type,inputs,attrs,call", DIRECT, ids=[d[0] for d in DIRECT])
def test_common_ops_are_direct_torch_calls(op_type, inputs, attrs, call, onnx_ops):
    opset = {"Softmax": 13, "Gelu": 20}.get(op_type, 18)
    _, _, lines, used_helper = _run_generated(op_type, inputs, attrs, opset, onnx_ops, constants=True)
    assert not used_helper and call in lines[0], lines
