"""Graph passes keep what the model computes: run before and after through onnxruntime and compare outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from planner.ir.onnx_export import export_onnx
from planner.ir.onnx_import import load_onnx
from planner.passes.clone import clone_cheap_ops
from planner.passes.dce import eliminate_dead_code
from planner.passes.fold import fold_constants, foldable_ops

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"

_NP = {TensorProto.FLOAT: np.float32, TensorProto.INT64: np.int64, TensorProto.INT32: np.int32}


def _random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        t = inp.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        dtype = _NP[t.elem_type]
        if np.issubdtype(dtype, np.integer):
            feeds[inp.name] = rng.integers(0, 8, size=shape).astype(dtype)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # compare our graphs, not ORT's
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _assert_same_outputs(path: Path, graph_after) -> None:
    original = onnx.load(str(path))
    rewritten = export_onnx(graph_after, path)
    onnx.checker.check_model(rewritten)
    feeds = _random_feeds(original)
    for before, after in zip(_run(original, feeds), _run(rewritten, feeds), strict=True):
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)


def _shape_chain_model(tmp_path: Path) -> Path:
    """x[2,3,4] -> Reshape(x, Concat(Shape(x)[0], [-1])) -> Add(., Constant*2) plus a dead branch."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["s0"], name="first_dim", axis=0),
        helper.make_node("Unsqueeze", ["s0", "axes0"], ["s0u"], name="unsq"),
        helper.make_node("Concat", ["s0u", "minus1"], ["newshape"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "newshape"], ["r"], name="reshape"),
        helper.make_node("Constant", [], ["c"], name="const",
                         value=numpy_helper.from_array(np.full((12,), 0.5, np.float32))),
        helper.make_node("Mul", ["c", "two"], ["c2"], name="double"),
        helper.make_node("Add", ["r", "c2"], ["y"], name="add"),
        helper.make_node("Relu", ["x"], ["dead"], name="dead_relu"),
        helper.make_node("Neg", ["dead"], ["dead2"], name="dead_neg"),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes0"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    model = helper.make_model(helper.make_graph(nodes, "chain", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "chain.onnx"
    onnx.save(model, path)
    return path


def test_folding_removes_shape_arithmetic_and_constant_math(tmp_path):
    path = _shape_chain_model(tmp_path)
    graph = load_onnx(path)
    assert set(foldable_ops(graph)) == {"shape", "first_dim", "unsq", "concat", "const", "double"}
    folded = fold_constants(graph)
    assert {op.name for op in folded.ops} == {"reshape", "add", "dead_relu", "dead_neg"}
    # the folded shape vector and the doubled constant are now weights of their consumers
    assert folded.op("reshape").param_bytes == 2 * 8
    assert folded.op("add").param_bytes == 12 * 4
    _assert_same_outputs(path, folded)


def test_the_shape_of_a_folded_tensor_is_evaluated_on_export(tmp_path):
    # as in Swin's legacy export (transformers SwinModel, torch.onnx.export dynamo=False): a Shape reads a tensor
    # that is itself a constant (a Concat of constants), so folding removes it from the op graph; rebuilding the
    # Reshape's shape input must evaluate that Concat rather than look for its static shape among the graph's
    # tensors (where it would raise a KeyError in every rank)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 4])
    nodes = [
        helper.make_node("Concat", ["k1", "k2"], ["c"], name="concat_consts", axis=0),
        helper.make_node("Shape", ["c"], ["s"], name="shape_of_consts"),
        helper.make_node("Concat", ["minus1", "s"], ["newshape"], name="concat_shape", axis=0),
        helper.make_node("Reshape", ["x", "newshape"], ["r"], name="reshape"),
        helper.make_node("Add", ["r", "one"], ["y"], name="add"),
    ]
    inits = [numpy_helper.from_array(np.array([1, 2, 3], np.int64), "k1"),
             numpy_helper.from_array(np.array([4], np.int64), "k2"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    model = helper.make_model(helper.make_graph(nodes, "shape_of_consts", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "shape_of_consts.onnx"
    onnx.save(model, path)
    folded = fold_constants(load_onnx(path))
    assert {op.name for op in folded.ops} == {"reshape", "add"}
    _assert_same_outputs(path, folded)


def test_dce_drops_ops_that_reach_no_output(tmp_path):
    path = _shape_chain_model(tmp_path)
    graph = eliminate_dead_code(load_onnx(path))
    assert "dead_relu" not in graph.index and "dead_neg" not in graph.index
    assert graph.num_ops == 8
    _assert_same_outputs(path, graph)


def test_cloning_a_cheap_shared_op_removes_the_cross_cluster_edge(tmp_path):
    # x -> Relu (cheap, cluster 0) -> feeds Sigmoid (cluster 1) and Tanh (cluster 2); outputs added in cluster 0.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Sigmoid", ["r"], ["a"], name="sig"),
        helper.make_node("Tanh", ["r"], ["b"], name="tanh"),
        helper.make_node("Add", ["a", "b"], ["y"], name="add"),
    ]
    model = helper.make_model(helper.make_graph(nodes, "fan", [x], [y]), opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "fan.onnx"
    onnx.save(model, path)
    graph = load_onnx(path)
    clusters = {"relu": 0, "sig": 1, "tanh": 2, "add": 0}
    cost = {name: 1.0 for name in clusters}
    cloned, new_clusters = clone_cheap_ops(graph, clusters, cost, lambda nbytes: 10.0, max_cost=2.0)
    # relu is copied into clusters 1 and 2; the original, now unused, is dead and gone
    assert sorted(op.name for op in cloned.ops) == ["add", "relu~c1", "relu~c2", "sig", "tanh"]
    assert new_clusters["relu~c1"] == 1 and new_clusters["relu~c2"] == 2
    cross = [e for e in cloned.edges if new_clusters[e.src] != new_clusters[e.dst]]
    assert {(e.src, e.dst) for e in cross} == {("sig", "add"), ("tanh", "add")}
    _assert_same_outputs(path, cloned)
    # an expensive op, or a cheap one whose transfer is cheaper than recomputing it, is left alone
    same, _ = clone_cheap_ops(graph, clusters, cost, lambda nbytes: 0.5, max_cost=2.0)
    assert same is graph


def _light_models() -> list[Path]:
    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return sorted(root.glob("*.onnx"))


@pytest.mark.parametrize("path", [MOE, *_light_models()], ids=lambda p: p.stem)
def test_fold_and_dce_keep_real_model_outputs(path):
    graph = load_onnx(path)
    after = eliminate_dead_code(fold_constants(graph))
    assert after.num_ops <= graph.num_ops
    _assert_same_outputs(path, after)


def test_repeated_and_omitted_inputs_survive_a_round_trip(tmp_path):
    # Mul(x, x) reads one tensor twice; Clip(x, '', max) omits its optional min: both must be rebuilt exactly.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             helper.make_node("Clip", ["sq", "", "hi"], ["y"], name="clip")]
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "hi")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "rep.onnx"
    onnx.save(model, path)
    graph = load_onnx(path)
    assert graph.op("square").inputs == ("x", "x") and graph.op("square").reads == ("x",)
    assert graph.op("square").bytes_read == 5 * 4  # a tensor read twice is read once
    _assert_same_outputs(path, eliminate_dead_code(fold_constants(graph)))
