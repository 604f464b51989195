"""Per-op FLOP rules, checked on tiny models whose counts are derived by hand in the comments.

Each model is built with onnx.helper, saved, and imported with `load_onnx`, so the rules see the shapes onnx's
inference gives (stride, padding, broadcasting) exactly as a real import does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_models import make_model

from planner.ir.onnx_import import load_onnx
from planner.ir.op_workload import TRANSCENDENTAL, NodeShapes, einsum, op_flops

F = TensorProto.FLOAT


_model = make_model


def _load(tmp_path: Path, model, name="m.onnx", **kw):
    path = tmp_path / name
    onnx.save(model, path)
    return load_onnx(path, **kw)


def _one(graph, op_type):
    (op,) = [o for o in graph.ops if o.op_type == op_type]
    return op


def test_conv_groups_stride_padding_bias(tmp_path):
    # X 1x4x8x8, W 6x2x3x3 (group 2: each output channel sees 4/2 = 2 input channels), stride 2, pads 1:
    # out H = W = floor((8 + 2 - 3) / 2) + 1 = 4, so Y is 1x6x4x4 = 96 elements.
    # MACs = 96 x (2 x 3 x 3) = 1728; FLOPs = 2 x 1728 + 96 (bias) = 3552.
    w = np.zeros((6, 2, 3, 3), np.float32)
    b = np.zeros(6, np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", group=2, strides=[2, 2],
                            pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    g = _load(tmp_path, _model([node], [("x", F, [1, 4, 8, 8])], [("y", F, [1, 6, 4, 4])], {"w": w, "b": b}))
    op = g.op("conv")
    assert op.flops == 3552
    assert not op.estimated
    x_bytes, w_bytes, b_bytes, y_bytes = 256 * 4, 108 * 4, 6 * 4, 96 * 4  # elements x 4 bytes
    assert op.bytes_read == x_bytes + w_bytes + b_bytes
    assert op.param_bytes == w_bytes + b_bytes
    assert op.bytes_written == op.output_bytes == y_bytes
    assert op.dtype == "float"
    assert g.tensors["y"].shape == (1, 6, 4, 4)


def test_conv_without_bias(tmp_path):
    # X 1x3x5x5, W 2x3x3x3, no padding: Y 1x2x3x3 = 18 elements x 27 MACs = 486 MACs -> 972 FLOPs, no bias.
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv")
    g = _load(tmp_path, _model([node], [("x", F, [1, 3, 5, 5])], [("y", F, [1, 2, 3, 3])],
                               {"w": np.zeros((2, 3, 3, 3), np.float32)}))
    assert g.op("conv").flops == 972


def test_conv_transpose(tmp_path):
    # X 1x2x3x3, W 2x3x2x2 (C=2 -> M=3): each of the 18 input elements scatters into 3 x 2 x 2 = 12 outputs:
    # 216 MACs -> 432 FLOPs, + bias over Y 1x3x4x4 = 48 -> 480.
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="ct")
    g = _load(tmp_path, _model([node], [("x", F, [1, 2, 3, 3])], [("y", F, [1, 3, 4, 4])],
                               {"w": np.zeros((2, 3, 2, 2), np.float32), "b": np.zeros(3, np.float32)}))
    assert g.op("ct").flops == 480


def test_gemm_trans_b_with_bias(tmp_path):
    # A 3x5, B 4x5 with transB -> Y 3x4; 2 x M x N x K = 2 x 3 x 4 x 5 = 120, + 12 for the bias C -> 132.
    node = helper.make_node("Gemm", ["a", "w", "c"], ["y"], name="gemm", transB=1, alpha=0.5, beta=2.0)
    g = _load(tmp_path, _model([node], [("a", F, [3, 5])], [("y", F, [3, 4])],
                               {"w": np.zeros((4, 5), np.float32), "c": np.zeros(4, np.float32)}))
    op = g.op("gemm")
    assert op.flops == 132
    assert op.param_bytes == (20 + 4) * 4


def test_gemm_trans_a_without_bias(tmp_path):
    # A' with A 5x3 (transA) -> M=3, K=5; B 5x4 -> N=4: 2 x 3 x 4 x 5 = 120.
    node = helper.make_node("Gemm", ["a", "b"], ["y"], name="gemm", transA=1)
    g = _load(tmp_path, _model([node], [("a", F, [5, 3]), ("b", F, [5, 4])], [("y", F, [3, 4])]))
    assert g.op("gemm").flops == 120


def test_batched_matmul_broadcast(tmp_path):
    # A 2x1x3x5 @ B 4x5x6: batch dims broadcast (2,1) x (4,) -> (2,4); Y 2x4x3x6 = 144 elements, K = 5:
    # 2 x 144 x 5 = 1440.
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")
    g = _load(tmp_path, _model([node], [("a", F, [2, 1, 3, 5]), ("b", F, [4, 5, 6])], [("y", F, [2, 4, 3, 6])]))
    assert g.tensors["y"].shape == (2, 4, 3, 6)
    assert g.op("mm").flops == 1440


def test_matmul_vector_operands(tmp_path):
    # a (5,) @ B 5x6 -> (6,): 6 outputs x 5 MACs = 30 MACs -> 60.  B 5x6 @ v (6,) -> (5,): 5 x 6 -> 60.
    n1 = helper.make_node("MatMul", ["v5", "m"], ["y1"], name="vm")
    n2 = helper.make_node("MatMul", ["m", "v6"], ["y2"], name="mv")
    g = _load(tmp_path, _model([n1, n2], [("v5", F, [5]), ("m", F, [5, 6]), ("v6", F, [6])],
                               [("y1", F, [6]), ("y2", F, [5])]))
    assert g.op("vm").flops == 60
    assert g.op("mv").flops == 60


def test_softmax(tmp_path):
    # 5 FLOPs per element (max, subtract, exp, sum, divide): X 2x10 -> 100.
    node = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=-1)
    g = _load(tmp_path, _model([node], [("x", F, [2, 10])], [("y", F, [2, 10])]))
    assert g.op("sm").flops == 100


def test_elementwise_broadcast_and_transcendental(tmp_path):
    # Add (2,3,4) + (4,) -> 24 elements, 1 each; Relu 24; Exp 24 x TRANSCENDENTAL; Clip 2 each.
    nodes = [helper.make_node("Add", ["x", "b"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r"], name="relu"),
             helper.make_node("Exp", ["r"], ["e"], name="exp"),
             helper.make_node("Clip", ["e"], ["y"], name="clip")]
    g = _load(tmp_path, _model(nodes, [("x", F, [2, 3, 4])], [("y", F, [2, 3, 4])],
                               {"b": np.zeros(4, np.float32)}))
    assert g.op("add").flops == 24
    assert g.op("relu").flops == 24
    assert g.op("exp").flops == 24 * TRANSCENDENTAL
    assert g.op("clip").flops == 48
    assert g.op("add").param_bytes == 16


def test_pooling_and_reduction(tmp_path):
    # MaxPool 2x2 stride 2 on 1x1x4x4 -> 1x1x2x2: 4 outputs x 4 = 16.  GlobalAveragePool on 1x1x4x4: 16 inputs.
    # ReduceMean over 2x3x4 on the last axis -> 24 (one per input) + 6 (divide per output) = 30.
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], name="mp", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["x"], ["q"], name="gap"),
             helper.make_node("ReduceMean", ["z"], ["r"], name="rm", axes=[-1], keepdims=0)]
    g = _load(tmp_path, _model(nodes, [("x", F, [1, 1, 4, 4]), ("z", F, [2, 3, 4])],
                               [("p", F, [1, 1, 2, 2]), ("q", F, [1, 1, 1, 1]), ("r", F, [2, 3])], opset=13))
    assert g.op("mp").flops == 16
    assert g.op("gap").flops == 16
    assert g.op("rm").flops == 30


def test_batchnorm_layernorm(tmp_path):
    # BatchNormalization (inference): 2 per element over 1x3x2x2 = 12 -> 24.
    # LayerNormalization with scale and bias: (5 + 2) per element over 2x4 = 8 -> 56.
    c = np.ones(3, np.float32)
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn"),
             helper.make_node("LayerNormalization", ["z", "g", "h"], ["w"], name="ln", axis=-1)]
    g = _load(tmp_path, _model(nodes, [("x", F, [1, 3, 2, 2]), ("z", F, [2, 4])],
                               [("y", F, [1, 3, 2, 2]), ("w", F, [2, 4])],
                               {"s": c, "b": c, "m": c, "v": c, "g": np.ones(4, np.float32),
                                "h": np.ones(4, np.float32)}))
    assert g.op("bn").flops == 24
    assert g.op("ln").flops == 56


def test_topk_einsum_and_data_movement(tmp_path):
    # TopK k=2 along the last axis of 2x8: 2 slices x 8 x max(1, ceil(log2 2)) = 16.
    # Einsum bij,bjk->bik on 2x3x4, 2x4x5 = batched matmul: 2 x (2 x 3 x 4 x 5) = 240.
    # Transpose / Concat: 0 FLOPs but bytes moved.
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk"),
             helper.make_node("Einsum", ["a", "b"], ["c"], name="ein", equation="bij,bjk->bik"),
             helper.make_node("Transpose", ["c"], ["t"], name="tr", perm=[0, 2, 1]),
             helper.make_node("Concat", ["t", "t"], ["cc"], name="cat", axis=0)]
    g = _load(tmp_path, _model(nodes, [("x", F, [2, 8]), ("a", F, [2, 3, 4]), ("b", F, [2, 4, 5])],
                               [("v", F, [2, 2]), ("i", TensorProto.INT64, [2, 2]), ("cc", F, [4, 5, 3])],
                               {"k": np.array([2], np.int64)}))
    assert g.op("topk").flops == 16
    assert g.op("ein").flops == 240
    assert g.op("tr").flops == 0 and g.op("tr").bytes_read == 120 and g.op("tr").bytes_written == 120
    cat = g.op("cat")
    assert cat.flops == 0 and not cat.estimated
    assert cat.bytes_read == 120  # the same tensor read twice counts once
    assert cat.bytes_written == 240


def test_op_without_rule_is_estimated_by_bytes(tmp_path):
    # Det has an ONNX schema but no FLOP rule: 0 FLOPs, estimated, bytes still counted.
    node = helper.make_node("Det", ["x"], ["y"], name="det")
    g = _load(tmp_path, _model([node], [("x", F, [3, 4, 4])], [("y", F, [3])]))
    op = g.op("det")
    assert op.estimated and op.flops == 0
    assert op.bytes_read == 3 * 16 * 4 and op.bytes_written == 12


def test_nonzero_is_bounded_and_estimated_downstream(tmp_path):
    # NonZero's output size depends on the data: bounded by (rank, numel) = (2, 6); it and its consumer are
    # estimated, an unrelated op is not.
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nz"),
             helper.make_node("Transpose", ["nz"], ["t"], name="tr"),
             helper.make_node("Relu", ["x"], ["r"], name="relu")]
    g = _load(tmp_path, _model(nodes, [("x", F, [2, 3])],
                               [("t", TensorProto.INT64, ["n", "r"]), ("r", F, [2, 3])]))
    assert g.tensors["nz"].shape == (2, 6)
    assert g.tensors["t"].shape == (6, 2)
    assert g.op("nz").estimated and g.op("nz").flops == 6
    assert g.op("tr").estimated
    assert not g.op("relu").estimated


def test_dtype_names_and_sizes(tmp_path):
    # float16 is 2 bytes per element, int64 8, bool 1.
    nodes = [helper.make_node("Cast", ["x"], ["h"], name="c16", to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["x"], ["i"], name="c64", to=TensorProto.INT64),
             helper.make_node("Cast", ["x"], ["b"], name="cb", to=TensorProto.BOOL)]
    g = _load(tmp_path, _model(nodes, [("x", F, [2, 5])], [("h", TensorProto.FLOAT16, [2, 5]),
                                                           ("i", TensorProto.INT64, [2, 5]),
                                                           ("b", TensorProto.BOOL, [2, 5])]))
    assert (g.op("c16").dtype, g.op("c16").output_bytes) == ("float16", 20)
    assert (g.op("c64").dtype, g.op("c64").output_bytes) == ("int64", 80)
    assert (g.op("cb").dtype, g.op("cb").output_bytes) == ("bool", 10)


# ----- rules called directly -----
def test_rules_direct():
    # LSTM, 1 direction, seq 5, batch 2, I = 3, H = 4, with bias:
    # per step and row 2 x 4 x 4 x (3 + 4) = 224, + 2 x 4 x 4 = 32 (bias), + 24 x 4 = 96 -> 352; x 5 x 2 = 3520.
    lstm = NodeShapes("LSTM", "", ((5, 2, 3), (1, 16, 3), (1, 16, 4), (1, 32)), ((5, 1, 2, 4),),
                      {"hidden_size": 4})
    assert op_flops(lstm) == (3520, False)
    # an unknown op type in the standard domain, and a missing shape: estimated with 0 FLOPs
    assert op_flops(NodeShapes("NoSuchOp", "", ((2,),), ((2,),))) == (0, True)
    assert op_flops(NodeShapes("Conv", "", ((1, 3, 4, 4), None), ((1, 2, 2, 2),))) == (0, True)
    # 'ai.onnx' is the standard domain
    assert op_flops(NodeShapes("Relu", "ai.onnx", ((3,),), ((3,),))) == (3, False)


@pytest.mark.parametrize(("eq", "shapes", "expected"), [
    ("ij,jk->ik", [(3, 4), (4, 5)], 2 * 3 * 4 * 5),  # matmul: 2 x MACs
    ("ij->ji", [(3, 4)], 0),  # a permutation
    ("ij->", [(3, 4)], 12),  # a full sum
    ("i,j->ij", [(3,), (4,)], 12),  # outer product: one multiply each
    ("...ij,...jk", [(2, 3, 4), (4, 5)], 2 * 2 * 3 * 4 * 5),  # ellipsis broadcast, implicit output
])
def test_einsum_rule(eq, shapes, expected):
    assert einsum(NodeShapes("Einsum", "", tuple(shapes), (None,), {"equation": eq})) == expected
