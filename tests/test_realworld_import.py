"""The import failures real models show, each on a small graph written here: shapes that need constant evaluation, older
opsets, If on an input value (--input-value), constant folding the reference evaluator cannot do, an error that
names the node stopping propagation, and plans that keep their input shapes.

Outputs are compared with onnxruntime (random inputs and weights): max abs error <= 1e-5 (float32)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from planner.cli import solve_main
from planner.errors import InputError
from planner.execute.program import default_feeds, execute, prepared_graph
from planner.execute.runner import run_plan
from planner.ir.load import load_model, parse_input_value
from planner.ir.onnx_constants import upgrade_opset

F = TensorProto.FLOAT
I64 = TensorProto.INT64
R = np.random.default_rng(7)


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _save(tmp_path, nodes, inputs, outputs, inits=(), opset=17, name="m.onnx"):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def _check_against_ort(path, graph, extra_feeds=None):
    feeds = {k: (R.standard_normal(v.shape).astype(np.float32) if v.dtype == "float" else v)
             for k, v in ((k, graph.tensors[k]) for k in graph.graph_inputs)}
    feeds = {k: v if isinstance(v, np.ndarray) else default_feeds(graph)[k] for k, v in feeds.items()}
    ours = execute(graph, path, feeds)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {**feeds, **(extra_feeds or {})})
    for name, r in zip([o.name for o in sess.get_outputs()], ref):
        assert ours[name].shape == r.shape
        np.testing.assert_allclose(ours[name], r, atol=1e-5, rtol=1e-5)


def test_expand_shape_from_constant_of_shape_where_chain(tmp_path):
    # the legacy-exporter BERT pattern: Expand's shape = Where(Equal(ConstantOfShape * -1, -1), ...), all constant
    nodes = [
        helper.make_node("ConstantOfShape", ["rank"], ["ones"], value=_init("v", np.array([1], np.int64))),
        helper.make_node("Mul", ["ones", "minus1"], ["neg"]),
        helper.make_node("Equal", ["target", "neg"], ["eq"]),
        helper.make_node("Where", ["eq", "ones", "target"], ["shape"]),
        helper.make_node("Expand", ["x", "shape"], ["e"], name="expand"),
        helper.make_node("Add", ["e", "b"], ["y"]),
    ]
    inits = [_init("rank", np.array([3], np.int64)), _init("minus1", np.array(-1, np.int64)),
             _init("target", np.array([2, -1, 4], np.int64)), _init("b", R.standard_normal(4).astype(np.float32))]
    path = _save(tmp_path, nodes, [("x", F, [1, 5, 1])], [("y", F, [2, 5, 4])], inits, opset=11)
    graph = prepared_graph(path)
    assert graph.tensors["y"].shape == (2, 5, 4)
    _check_against_ort(path, graph)


def test_pad_with_pads_from_reversed_slice_transpose_cast(tmp_path):
    # torch's legacy exporter writes F.pad's pads as Reshape -> Slice(step -1) -> Transpose -> Reshape -> Cast
    nodes = [
        helper.make_node("Reshape", ["raw", "shape2"], ["r1"]),
        helper.make_node("Slice", ["r1", "starts", "ends", "axes", "steps"], ["r2"]),
        helper.make_node("Transpose", ["r2"], ["r3"], perm=[1, 0]),
        helper.make_node("Reshape", ["r3", "flat"], ["r4"]),
        helper.make_node("Cast", ["r4"], ["pads"], to=TensorProto.INT64),
        helper.make_node("Pad", ["x", "pads"], ["p"], name="pad"),
        helper.make_node("Relu", ["p"], ["y"]),
    ]
    inits = [_init("raw", np.array([0, 0, 0, 0, 1, 2, 3, 0], np.int32)), _init("shape2", np.array([-1, 2], np.int64)),
             _init("starts", np.array([-1], np.int64)), _init("ends", np.array([-1000], np.int64)),
             _init("axes", np.array([0], np.int64)), _init("steps", np.array([-1], np.int64)),
             _init("flat", np.array([-1], np.int64))]
    path = _save(tmp_path, nodes, [("x", F, [1, 2, 4, 5])], [("y", F, ["a", "b", "c", "d"])], inits, opset=13)
    graph = prepared_graph(path)
    assert graph.tensors["y"].shape == (1 + 3, 2 + 3, 4, 5)  # pads (3, 1, 0, 0, 0, 2, 0, 0)
    _check_against_ort(path, graph)


@pytest.mark.parametrize("opset", [12, 13])
def test_shape_slice_concat_reshape_at_old_opsets(tmp_path, opset):
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Slice", ["s", "st", "en"], ["s2"], name="slice"),
             helper.make_node("Concat", ["s2", "m1"], ["ns"], axis=0, name="concat"),
             helper.make_node("Reshape", ["x", "ns"], ["r"], name="reshape"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="matmul")]
    inits = [_init("st", np.array([0], np.int64)), _init("en", np.array([1], np.int64)),
             _init("m1", np.array([-1], np.int64)), _init("w", R.standard_normal((12, 3)).astype(np.float32))]
    path = _save(tmp_path, nodes, [("x", F, [2, 3, 4])], [("y", F, ["a", "b"])], inits, opset=opset)
    graph = load_model(path)
    assert graph.tensors["r"].shape == (2, 12) and graph.tensors["y"].shape == (2, 3)
    assert {"reshape", "matmul"} <= set(graph.index)  # the user's node names
    _check_against_ort(path, prepared_graph(path))
    upgraded = upgrade_opset(onnx.load(str(path)))
    assert upgraded is not None and upgraded.opset_import[0].version == 14
    assert [n.name for n in upgraded.graph.node] == ["shape", "slice", "concat", "reshape", "matmul"]


def _vad_model(tmp_path):
    """A top-level If on a runtime input (a sample rate) with a nested If, like a voice-activity detector."""
    def vi(n, shape=None):
        return helper.make_tensor_value_info(n, F, shape)
    inner = helper.make_node("If", ["is_small"], ["z"], name="inner_if",
                             then_branch=helper.make_graph([helper.make_node("Relu", ["h"], ["a"], name="relu")],
                                                           "t2", [], [vi("a", [1, 8])]),
                             else_branch=helper.make_graph([helper.make_node("Neg", ["h"], ["b"], name="neg")],
                                                           "e2", [], [vi("b", [1, 8])]))
    then = helper.make_graph([helper.make_node("MatMul", ["x", "w16"], ["h"], name="mm16"),
                              helper.make_node("Less", ["sr", "limit"], ["is_small"], name="less"), inner],
                             "then", [], [vi("z", [1, 8])],
                             [_init("w16", R.standard_normal((4, 8)).astype(np.float32))])
    other = helper.make_graph([helper.make_node("MatMul", ["x", "w8"], ["o"], name="mm8")], "else", [],
                              [vi("o", [1, 8])], [_init("w8", R.standard_normal((4, 8)).astype(np.float32))])
    nodes = [helper.make_node("Equal", ["sr", "k16000"], ["is16k"], name="eq"),
             helper.make_node("If", ["is16k"], ["feat"], name="by_rate", then_branch=then, else_branch=other),
             helper.make_node("Sigmoid", ["feat"], ["y"], name="sig")]
    inits = [_init("k16000", np.array(16000, np.int64)), _init("limit", np.array(20000, np.int64))]
    return _save(tmp_path, nodes, [("x", F, [1, 4]), ("sr", I64, [])], [("y", F, [1, 8])], inits, name="vad.onnx")


def test_input_value_inlines_if_and_nested_if(tmp_path):
    path = _vad_model(tmp_path)
    kept = load_model(path)  # without the value: one If op, estimated
    assert kept.op("by_rate").op_type == "If" and kept.op("by_rate").estimated
    name, values = parse_input_value("sr=16000")
    graph = prepared_graph(path, None, {name: values})
    assert "sr" not in graph.graph_inputs
    assert not any(op.op_type == "If" for op in graph.ops)
    assert {"by_rate/mm16", "by_rate/inner_if/relu"} <= set(graph.index)
    _check_against_ort(path, graph, {"sr": np.array(16000, np.int64)})
    other = prepared_graph(path, None, {"sr": (8000.0,)})
    assert "by_rate/mm8" in other.index
    _check_against_ort(path, other, {"sr": np.array(8000, np.int64)})


def test_if_on_an_unknown_value_runs_as_one_op(tmp_path):
    path = _vad_model(tmp_path)
    graph = prepared_graph(path)
    feeds = {"x": R.standard_normal((1, 4)).astype(np.float32), "sr": np.array(16000, np.int64)}
    ours = execute(graph, path, feeds)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(ours["y"], ref, atol=1e-5)


def test_folding_gather_elements_the_reference_evaluator_cannot_do(tmp_path):
    # onnx's reference GatherElements (numpy.choose) fails for an axis longer than 64: folding falls back
    nodes = [helper.make_node("GatherElements", ["table", "idx"], ["g"], axis=1, name="gather"),
             helper.make_node("MatMul", ["x", "g"], ["y"], name="mm")]
    inits = [_init("table", R.standard_normal((3, 100)).astype(np.float32)),
             _init("idx", R.integers(0, 100, (3, 100)).astype(np.int64))]
    path = _save(tmp_path, nodes, [("x", F, [2, 3])], [("y", F, [2, 100])], inits)
    graph = prepared_graph(path)
    assert "gather" not in graph.index  # folded
    _check_against_ort(path, graph)


def test_unknown_shape_error_names_the_node_and_the_input_value(tmp_path):
    nodes = [helper.make_node("Mul", ["n", "two"], ["n2"], name="double"),
             helper.make_node("Concat", ["n2", "m1"], ["shape"], axis=0, name="cat"),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape_by_value")]
    inits = [_init("two", np.array([2], np.int64)), _init("m1", np.array([-1], np.int64))]
    path = _save(tmp_path, nodes, [("x", F, [4, 6]), ("n", I64, [1])], [("y", F, ["a", "b"])], inits)
    with pytest.raises(InputError) as info:
        load_model(path)
    msg = str(info.value)
    assert "'reshape_by_value'" in msg and "'shape'" in msg and "--input-value n=" in msg
    assert load_model(path, None, {"n": (2.0,)}).tensors["y"].shape == (4, 6)


@pytest.fixture(scope="module")
def shaped_plan(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shaped")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "", "scales"], ["r"], name="resize", mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    inits = [_init("w", R.standard_normal((4, 3, 3, 3)).astype(np.float32)),
             _init("scales", np.array([1, 1, 0.5, 0.5], np.float32))]
    path = _save(tmp, nodes, [("x", F, ["n", 3, "h", "w"])], [("y", F, ["n", 4, "h2", "w2"])], inits,
                 name="det.onnx")
    out = tmp / "plan.json"
    assert solve_main(["--model", str(path), "--hw", "cpu-4.yaml", "--method", "round_robin", "--out", str(out),
                       "--input-shape", "x=1x3x16x24", "--no-pictures", "--quiet", "--format", "json"]) == 0
    return out


def test_plan_stores_input_shapes(shaped_plan):
    assert json.loads(shaped_plan.read_text())["input_shapes"] == {"x": [1, 3, 16, 24]}


@pytest.mark.dist
def test_plan_run_uses_the_plans_shapes_and_refuses_others_unless_replan(shaped_plan, tmp_path):
    out = run_plan(shaped_plan, nproc=2, check=True, comm_timeout_s=30, run_timeout_s=120)
    assert out.report["input_shapes"] == {"x": [1, 3, 16, 24]} and not out.report["replanned"]
    assert out.report["max_abs_error"] <= 1e-5
    with pytest.raises(InputError, match="made for input shapes x=1x3x16x24, not x=1x3x32x32.*--replan"):
        run_plan(shaped_plan, nproc=2, input_shapes={"x": (1, 3, 32, 32)})
    again = run_plan(shaped_plan, nproc=2, check=True, input_shapes={"x": (1, 3, 32, 32)}, replan=True,
                     comm_timeout_s=30, run_timeout_s=120)
    assert again.report["replanned"] and again.report["input_shapes"] == {"x": [1, 3, 32, 32]}
    assert again.report["max_abs_error"] <= 1e-5


def test_ir3_model_with_initializers_not_listed_as_inputs_imports_and_runs(tmp_path):
    # onnxruntime's shipped datasets/mul_1.onnx: IR 3, initializer W not among the graph inputs; onnxruntime runs it
    graph = helper.make_graph([helper.make_node("Mul", ["X", "W"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", F, [3, 2])],
                              [helper.make_tensor_value_info("Y", F, [3, 2])],
                              [_init("W", R.standard_normal((3, 2)).astype(np.float32))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=3)
    path = tmp_path / "ir3.onnx"
    onnx.save(model, str(path))
    with pytest.raises(onnx.checker.ValidationError):  # what the importer used to pass on as "invalid ONNX model"
        onnx.checker.check_model(model)
    g = prepared_graph(path)
    assert list(g.graph_inputs) == ["X"] and [op.op_type for op in g.ops] == ["Mul"]
    _check_against_ort(path, g)


def test_a_sequence_output_is_refused_with_the_zipmap_fix(tmp_path):
    # a classifier's ZipMap-style output (sequence of maps) is not a tensor: name it and say how to export tensors
    seq = helper.make_tensor_sequence_value_info("probs", F, None)
    graph = helper.make_graph([helper.make_node("SequenceConstruct", ["X"], ["probs"])], "g",
                              [helper.make_tensor_value_info("X", F, [3, 2])], [seq])
    path = tmp_path / "seq.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(InputError, match=r"graph output\(s\) 'probs' \(sequence_type\) are not tensors.*zipmap"):
        load_model(path)
