"""Warnings before planning (`planner.ir.model_warnings`): the torch-free list of what the runtime runs agrees with
its registry; models nobody here wrote (global pooling as a ceil_mode window, a quantized matmul, a data-dependent
NonZero) import and are costed sanely, run matching onnxruntime, or are named up front as beyond the runtime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx_models import make_model

from planner.execute.ops import _DTYPES, supported_op_types, unsupported_ops
from planner.execute.program import default_feeds, execute, prepared_graph
from planner.ir.graph import Op, OpGraph, TensorInfo
from planner.ir.load import load_model
from planner.ir.model_warnings import (
    RUNTIME_DTYPES,
    RUNTIME_OP_TYPES,
    CostSanity,
    implausible_costs,
    model_warnings,
    runtime_gaps,
)
from planner.report import estimated_why

F = TensorProto.FLOAT


def test_runtime_lists_match_the_registry():
    assert set(supported_op_types()) == RUNTIME_OP_TYPES
    assert set(_DTYPES) == RUNTIME_DTYPES


def _ort(path, feeds):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))


def _save(model, tmp_path, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def test_global_pooling_as_a_ceil_mode_window_is_costed_by_the_input_and_runs(tmp_path):
    w = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("AveragePool", ["c"], ["p"], kernel_shape=[224, 224], strides=[224, 224], ceil_mode=1),
         helper.make_node("MaxPool", ["c"], ["q"], kernel_shape=[224, 224], strides=[224, 224], ceil_mode=1)],
        [("x", F, [1, 3, 7, 7])], [("p", F, [1, 8, 1, 1]), ("q", F, [1, 8, 1, 1])], {"w": w}, opset=13)
    path = _save(model, tmp_path)
    graph = load_model(path)
    pools = [op for op in graph.ops if op.op_type in ("AveragePool", "MaxPool")]
    assert [op.flops for op in pools] == [8 * 49, 8 * 49]  # the 7x7 feature map, not the 224x224 window
    assert model_warnings(graph) == []
    ready = prepared_graph(path)
    feeds = default_feeds(ready)
    ours, ref = execute(ready, path, feeds), _ort(path, feeds)
    for name in ("p", "q"):
        np.testing.assert_allclose(ours[name], ref[name], rtol=1e-5, atol=1e-5)


def test_an_op_costed_far_above_its_tensors_is_named():
    tensors = {t: TensorInfo(t, (1, 8, 7, 7), "float", 4 * 392) for t in ("a", "b")}
    op = Op("pool", "AveragePool", ("a",), ("b",), flops=8 * 49 * 224 * 224)
    graph = OpGraph.build("g", [op], [], tensors=tensors, graph_inputs=("a",), graph_outputs=("b",))
    assert implausible_costs(graph) == ["pool (AveragePool: 1.97e+07 FLOPs for 784 tensor elements)"]
    assert implausible_costs(graph, CostSanity(flops_per_element=1e5)) == []
    (line,) = model_warnings(graph)
    assert "costed far above" in line and "pool (AveragePool" in line


def test_a_quantized_matmul_imports_and_runs_matching_onnxruntime(tmp_path):
    rng = np.random.default_rng(1)
    b = rng.integers(0, 256, size=(16, 4)).astype(np.uint8)
    scalars = {"xs": np.float32(0.05), "xz": np.uint8(128), "bs": np.float32(0.02), "bz": np.uint8(120),
               "ys": np.float32(0.3), "yz": np.uint8(100)}
    model = make_model(
        [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
         helper.make_node("QLinearMatMul", ["xq", "xs", "xz", "b", "bs", "bz", "ys", "yz"], ["yq"]),
         helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])],
        [("x", F, [3, 16])], [("y", F, [3, 4])], {"b": b, **scalars}, opset=13)
    path = _save(model, tmp_path)
    graph = load_model(path)
    assert model_warnings(graph) == []
    assert not any(op.estimated for op in graph.ops)
    ready = prepared_graph(path)
    feeds = {"x": rng.standard_normal((3, 16)).astype(np.float32) * 3}
    np.testing.assert_allclose(execute(ready, path, feeds)["y"], _ort(path, feeds)["y"], rtol=0, atol=1e-6)


def test_a_data_dependent_op_is_named_before_planning(tmp_path):
    model = make_model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["n"])],
        [("x", F, [2, 3])], [("n", TensorProto.INT64, [2, "k"])], opset=13)
    graph = load_model(_save(model, tmp_path))
    assert runtime_gaps(graph) == unsupported_ops(graph)
    (line,) = model_warnings(graph)
    assert "cannot run 1 op(s)" in line and "(NonZero)" in line and "\n" not in line


def test_the_estimated_ops_say_why(tmp_path):
    w = np.ones((2, 4), np.float32)
    model = make_model(
        [helper.make_node("NonZero", ["x"], ["n"]), helper.make_node("Cast", ["n"], ["c"], to=F),
         helper.make_node("Transpose", ["c"], ["t"]), helper.make_node("MatMul", ["t", "w"], ["y"]),
         helper.make_node("Det", ["m"], ["d"])],
        [("x", F, [2, 3]), ("m", F, [3, 3])], [("y", F, ["k", 4]), ("d", F, [])], {"w": w}, opset=13)
    graph = load_model(_save(model, tmp_path))
    assert estimated_why(graph, "MatMul") == "FLOPs counted on shapes bounded at import, not known"
    assert estimated_why(graph, "Det") == "no FLOP rule, costed by bytes moved"


def test_plan_solve_warns_in_one_line_and_still_writes_the_plan(tmp_path, capsys):
    from planner.cli import solve_main

    model = make_model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["n"])],
        [("x", F, [2, 3])], [("n", TensorProto.INT64, [2, "k"])], opset=13)
    out = tmp_path / "plan.json"
    assert solve_main(["--model", str(_save(model, tmp_path)), "--method", "heft", "--out", str(out), "--quiet",
                       "--no-pictures"]) == 0
    assert out.exists()
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "(NonZero)" in warnings[0] and "plan-run will refuse it" in warnings[0]
