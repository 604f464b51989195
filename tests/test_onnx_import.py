"""ONNX import: real CNN topologies, published FLOP counts, edges, names, subgraphs, external data, scale."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_models import make_model

from planner.ir.onnx_import import load_onnx

F = TensorProto.FLOAT


_model = make_model


def _load(tmp_path: Path, model, name="m.onnx", **kw):
    path = tmp_path / name
    onnx.save(model, path)
    return load_onnx(path, **kw)


def synthetic_chain(n: int, width: int = 16) -> onnx.ModelProto:
    """A chain of n ops cycling MatMul (shared weight), Add (x + x), Relu, Sigmoid on a 4 x width tensor."""
    w = numpy_helper.from_array(np.ones((width, width), np.float32), "W")
    nodes, prev = [], "x"
    for i in range(n):
        kind, out = ("MatMul", "Add", "Relu", "Sigmoid")[i % 4], f"t{i}"
        ins = {"MatMul": [prev, "W"], "Add": [prev, prev]}.get(kind, [prev])
        nodes.append(helper.make_node(kind, ins, [out], name=f"n{i}"))
        prev = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", F, [4, width])],
                              [helper.make_tensor_value_info(prev, F, [4, width])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# --------------------------------------------------------------------------- the onnx wheel's light models
LIGHT = ["light_bvlc_alexnet", "light_densenet121", "light_inception_v1", "light_inception_v2", "light_resnet50",
         "light_shufflenet", "light_squeezenet", "light_vgg19", "light_zfnet512"]


def test_light_model_list_is_complete(light_models_dir):
    assert sorted(p.stem for p in light_models_dir.glob("*.onnx")) == sorted(LIGHT)


@pytest.mark.parametrize("name", LIGHT)
def test_light_models_import(light_models_dir, name):
    g = load_onnx(light_models_dir / f"{name}.onnx")
    assert g.num_ops > 0 and g.edges
    assert g.source is not None and g.source.kind == "onnx" and len(g.source.sha256) == 64
    assert g.graph_inputs and not set(g.graph_inputs) & g.initializers
    for op in g.ops:
        for t in (*op.reads, *op.writes):
            assert t in g.tensors, (op.name, t)  # every tensor an op touches has a static shape
        assert not op.estimated, op.name
        assert op.output_bytes == op.bytes_written == sum(g.tensors[t].size_bytes for t in op.outputs)
    assert g.total_flops > 0 and g.activation_bytes > 0 and g.param_bytes > 0
    assert all(e.size_bytes > 0 for e in g.edges)


# Published multiply-accumulate counts; we count FLOPs = 2 x MACs over ALL ops (conv, gemm, and also bias adds,
# BatchNorm, ReLU, pooling, LRN, Softmax...), so our total sits slightly above 2 x the published MACs (which
# count conv and fully connected layers only); the tests allow 5%.  All four light models take a 1x3x224x224
# input, the resolution the figures are for.
#
# ResNet-50: the light model (Caffe2 'gpu_0/' names) puts the downsampling stride on the 3x3 conv of each
# bottleneck (res3_0/res4_0/res5_0 'branch2b'), i.e. the "ResNet v1.5" variant, which is what torchvision's
# resnet50 implements.  Published: torchvision model docs, resnet50 IMAGENET1K_V1, "GFLOPS 4.09"
# (https://pytorch.org/vision/stable/models/generated/torchvision.models.resnet50.html; torchvision's GFLOPS
# count one multiply-add as one operation: its VGG-19 entry, 19.63, matches the paper's 19.6 G multiply-adds).
# The original paper's "3.8 x 10^9 FLOPs" (He et al. 2016, Table 1) is v1 (stride on the first 1x1 conv): moving
# the stride removes 3 x (102.8 M - 25.7 M) = 231 M MACs from 4.09 G -> 3.86 G, so it does NOT fit this model
# within 5% (it is 7% lower); this is a variant difference, not a counting error.
# Ours: conv + gemm = 4.089 G MACs; all ops 8.218 GFLOPs = 2 x 4.09 G x 1.0046.
#
# Inception-v1 (GoogLeNet, BVLC Caffe model): Szegedy et al., "Going deeper with convolutions" (CVPR 2015),
# section 5 / Table 1: "a computational budget of 1.5 billion multiply-adds at inference time" (the Table 1 ops
# column sums to about 1.50 G).  Ours: conv + gemm = 1.433 G MACs (the BVLC model pads and pools slightly
# differently from the paper's table); all ops 2.891 GFLOPs = 2 x 1.5 G x 0.964.
#
# SqueezeNet: the light model's conv1 is 64 filters of 3x3 stride 2, i.e. SqueezeNet 1.1 (1.0 has 96 filters of
# 7x7).  Published: torchvision model docs, squeezenet1_1 "GFLOPS 0.35", consistent with the SqueezeNet repo's
# statement that v1.1 needs "2.4x less computation than SqueezeNet 1.0" (torchvision squeezenet1_0: 0.82;
# 0.82 / 2.4 = 0.34).  Ours: conv = 0.350 G MACs; all ops 0.707 GFLOPs = 2 x 0.35 G x 1.009.
#
# VGG-19 (configuration E, 224x224): He et al. 2016, Fig. 3 caption: "VGG-19 model (19.6 billion FLOPs)"
# (multiply-adds, as the paper counts them).  Ours: conv + gemm = 19.64 G MACs; all ops 39.30 GFLOPs
# = 2 x 19.6 G x 1.0026.
PUBLISHED_MACS = {
    "light_resnet50": 4.09e9,
    "light_inception_v1": 1.5e9,
    "light_squeezenet": 0.35e9,
    "light_vgg19": 19.6e9,
}


@pytest.mark.parametrize(("name", "macs"), sorted(PUBLISHED_MACS.items()))
def test_flops_match_published_counts(light_models_dir, name, macs):
    g = load_onnx(light_models_dir / f"{name}.onnx")
    assert g.total_flops == pytest.approx(2 * macs, rel=0.05)
    dense = sum(op.flops for op in g.ops if op.op_type in ("Conv", "Gemm"))
    assert dense <= g.total_flops
    # the elementwise remainder stays small next to the convolutions
    assert g.total_flops - dense < 0.02 * g.total_flops


def test_resnet50_is_the_v15_variant(light_models_dir):
    # The published v1 figure (3.8 G MACs, stride on the 1x1 conv) is outside 5%: this model is v1.5.
    g = load_onnx(light_models_dir / "light_resnet50.onnx")
    assert abs(g.total_flops - 2 * 3.8e9) > 0.05 * 2 * 3.8e9


def test_light_graph_io(light_models_dir):
    g = load_onnx(light_models_dir / "light_resnet50.onnx")
    assert g.graph_inputs == ("gpu_0/data_0",)  # IR 3 lists initializers as inputs too; they are not graph inputs
    assert g.tensors["gpu_0/data_0"].shape == (1, 3, 224, 224)
    (out,) = g.graph_outputs
    assert g.tensors[out].shape == (1, 1000)
    assert {op.dtype for op in g.ops} == {"float"}
    assert g.ops[0].domain == ""


# --------------------------------------------------------------------------- edges and params
def test_edges_tensor_twice_one_node_and_three_consumers(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="src"),
             helper.make_node("Mul", ["a", "a"], ["sq"], name="square"),  # consumes a twice: one edge
             helper.make_node("Neg", ["a"], ["n"], name="neg"),
             helper.make_node("Add", ["sq", "n"], ["y"], name="add")]
    g = _load(tmp_path, _model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])]))
    pairs = sorted((e.src, e.dst, e.tensor) for e in g.edges)
    assert pairs == [("neg", "add", "n"), ("square", "add", "sq"), ("src", "neg", "a"), ("src", "square", "a")]
    assert all(e.size_bytes == 24 for e in g.edges)
    assert g.op("square").inputs == ("a", "a") and g.op("square").reads == ("a",)
    assert g.op("square").bytes_read == 24

    fan = [helper.make_node("Relu", ["x"], ["a"], name="src")] + [
        helper.make_node("Neg", ["a"], [f"o{i}"], name=f"c{i}") for i in range(3)]
    g = _load(tmp_path, _model(fan, [("x", F, [4])], [(f"o{i}", F, [4]) for i in range(3)]), name="fan.onnx")
    assert sorted((e.src, e.dst) for e in g.edges) == [("src", "c0"), ("src", "c1"), ("src", "c2")]
    assert {e.tensor for e in g.edges} == {"a"}


def test_initializers_make_no_edges_but_count_as_params(tmp_path):
    w = np.zeros((3, 3), np.float32)  # 36 bytes, shared by two MatMuls
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm1"),
             helper.make_node("MatMul", ["h", "w"], ["y"], name="mm2")]
    g = _load(tmp_path, _model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])], {"w": w}))
    assert [(e.src, e.dst, e.tensor) for e in g.edges] == [("mm1", "mm2", "h")]
    assert g.op("mm1").param_bytes == 36 and g.op("mm2").param_bytes == 36
    assert g.param_bytes == 36  # counted once in the graph total
    assert g.initializers == frozenset({"w"})
    assert g.graph_inputs == ("x",)
    assert g.tensors["w"].shape == (3, 3)


def test_constant_and_shape_ops_are_ops(tmp_path):
    nodes = [helper.make_node("Constant", [], ["shape"], name="const",
                              value=numpy_helper.from_array(np.array([3, 2], np.int64))),
             helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             helper.make_node("Shape", ["r"], ["s"], name="shape_of")]
    g = _load(tmp_path, _model(nodes, [("x", F, [2, 3])], [("r", F, [3, 2]), ("s", TensorProto.INT64, [2])]))
    assert {op.name for op in g.ops} == {"const", "reshape", "shape_of"}
    assert ("const", "reshape", "shape") in {(e.src, e.dst, e.tensor) for e in g.edges}
    assert g.op("const").bytes_written == 16 and g.op("const").dtype == "int64"
    assert all(op.flops == 0 and not op.estimated for op in g.ops)


# --------------------------------------------------------------------------- names
def test_unnamed_and_duplicate_names_get_unique_deterministic_names(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"]),  # unnamed -> Relu_0
             helper.make_node("Neg", ["a"], ["b"], name="dup"),
             helper.make_node("Neg", ["b"], ["c"], name="dup"),  # duplicate -> Neg_2
             helper.make_node("Abs", ["c"], ["d"], name="Neg_2"),  # a real name that the scheme would produce
             helper.make_node("Abs", ["d"], ["y"])]  # unnamed -> Abs_4
    g = _load(tmp_path, _model(nodes, [("x", F, [2])], [("y", F, [2])]))
    names = [op.name for op in g.ops]
    assert names == ["Relu_0", "dup", "Neg_2_1", "Neg_2", "Abs_4"]
    assert g.op("Neg_2_1").op_type == "Neg" and g.op("Neg_2").op_type == "Abs"
    assert [op.name for op in _load(tmp_path, _model(nodes, [("x", F, [2])], [("y", F, [2])]),
                                    name="again.onnx").ops] == names


# --------------------------------------------------------------------------- subgraphs
def test_if_captures_outer_tensors(tmp_path):
    # then: y = a + a; else: y = -a.  `a` comes from the outer Relu: the If op must depend on it.
    then_g = helper.make_graph([helper.make_node("Add", ["a", "a"], ["ty"])], "then", [],
                               [helper.make_tensor_value_info("ty", F, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["a"], ["ey"])], "else", [],
                               [helper.make_tensor_value_info("ey", F, [2])])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)]
    g = _load(tmp_path, _model(nodes, [("x", F, [2]), ("c", TensorProto.BOOL, [])], [("y", F, [2])]))
    op = g.op("if")
    assert op.inputs == ("c",) and op.implicit_inputs == ("a",) and op.reads == ("c", "a")
    assert [(e.src, e.dst, e.tensor) for e in g.edges] == [("relu", "if", "a")]
    assert op.flops == 2 and op.estimated  # the larger branch; which one runs is data-dependent
    assert op.bytes_read == 1 + 8


def test_loop_with_constant_trip_count(tmp_path):
    # body: v_out = v + a (a captured from outside), 3 iterations on a (2,) tensor -> 3 x 2 = 6 FLOPs.
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v", "a"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", F, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [2])])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Loop", ["m", "", "x"], ["y"], name="loop", body=body)]
    g = _load(tmp_path, _model(nodes, [("x", F, [2])], [("y", F, [2])], {"m": np.array(3, np.int64)}))
    op = g.op("loop")
    assert op.flops == 6 and op.estimated
    assert ("relu", "loop", "a") in {(e.src, e.dst, e.tensor) for e in g.edges}
    assert "a" in op.reads and op.param_bytes == 8


# --------------------------------------------------------------------------- shapes
def test_input_shapes_fix_dynamic_dims(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    m = _model(nodes, [("x", F, ["batch", 3])], [("y", F, ["batch", 4])], {"w": np.zeros((3, 4), np.float32)})
    g = _load(tmp_path, m, input_shapes={"x": (5, 3)})
    assert g.tensors["x"].shape == (5, 3) and g.tensors["y"].shape == (5, 4)
    assert g.op("mm").flops == 2 * 5 * 4 * 3


def test_input_shapes_override_stale_value_info(tmp_path):
    # an export wrote batch 1 into value_info; a new batch must not contradict it
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="r"), helper.make_node("Neg", ["h"], ["y"], name="n")]
    m = _model(nodes, [("x", F, ["b", 3])], [("y", F, [1, 3])],
               value_info=[helper.make_tensor_value_info("h", F, [1, 3])])
    g = _load(tmp_path, m, input_shapes={"x": [8, 3]})
    assert g.tensors["h"].shape == (8, 3) and g.tensors["y"].shape == (8, 3)


def test_shape_computation_is_folded(tmp_path):
    # Shape -> Gather -> Unsqueeze -> Concat -> Reshape: data propagation gives the Reshape a static shape.
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "i0"], ["d0"], name="gather", axis=0),
             helper.make_node("Unsqueeze", ["d0", "ax"], ["d0u"], name="unsq"),
             helper.make_node("Concat", ["d0u", "minus1"], ["target"], name="concat", axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape")]
    m = _model(nodes, [("x", F, [2, 3, 4])], [("y", F, ["a", "b"])],
               {"i0": np.array(0, np.int64), "ax": np.array([0], np.int64), "minus1": np.array([-1], np.int64)})
    g = _load(tmp_path, m)
    assert g.tensors["y"].shape == (2, 12)


# --------------------------------------------------------------------------- other sources of ops
def test_external_data_is_found_next_to_the_model(tmp_path, monkeypatch):
    w = np.ones((64, 64), np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    m = _model(nodes, [("x", F, [1, 64])], [("y", F, [1, 64])], {"w": w})
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save_model(m, folder / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    monkeypatch.chdir(tmp_path)  # not the model's folder
    g = load_onnx(folder / "m.onnx")
    assert g.op("mm").param_bytes == 64 * 64 * 4 == g.param_bytes
    assert g.op("mm").flops == 2 * 64 * 64


def test_model_local_functions_are_inlined(tmp_path):
    fn = helper.make_function("com.example", "Swish2", ["x"], ["y"],
                              [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
                              [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("Swish2", ["x"], ["y"], name="act", domain="com.example")]
    m = _model(nodes, [("x", F, [4])], [("y", F, [4])], extra_opsets=[helper.make_opsetid("com.example", 1)],
               functions=[fn])
    g = _load(tmp_path, m)
    assert sorted(op.op_type for op in g.ops) == ["Mul", "Sigmoid"]
    assert g.total_flops == 4 * 4 + 4


def test_com_microsoft_ops_with_given_shapes(tmp_path):
    # FusedMatMul has a rule (2 x M x N x K); an unknown contrib op is estimated by bytes.
    nodes = [helper.make_node("FusedMatMul", ["a", "b"], ["c"], name="fmm", domain="com.microsoft"),
             helper.make_node("SomeContribOp", ["c"], ["y"], name="other", domain="com.microsoft")]
    m = _model(nodes, [("a", F, [2, 3]), ("b", F, [3, 4])], [("y", F, [2, 4])],
               value_info=[helper.make_tensor_value_info("c", F, [2, 4])],
               extra_opsets=[helper.make_opsetid("com.microsoft", 1)])
    g = _load(tmp_path, m)
    assert g.op("fmm").flops == 48 and not g.op("fmm").estimated and g.op("fmm").domain == "com.microsoft"
    assert g.op("other").estimated and g.op("other").flops == 0 and g.op("other").bytes_read == 32


# --------------------------------------------------------------------------- scale
def test_synthetic_chain_10k(tmp_path):
    n = 10_000
    g = _load(tmp_path, synthetic_chain(n))
    assert g.num_ops == n and len(g.edges) == n - 1
    # per 4 ops on a 4x16 tensor: MatMul 2 x 64 x 16, Add 64, Relu 64, Sigmoid 64 x 4
    assert g.total_flops == (n // 4) * (2 * 64 * 16 + 64 + 64 + 64 * 4)


@pytest.mark.slow
def test_synthetic_chain_100k(tmp_path):
    n = 100_000
    g = _load(tmp_path, synthetic_chain(n))
    assert g.num_ops == n and len(g.edges) == n - 1
