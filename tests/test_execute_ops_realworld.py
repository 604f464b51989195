"""The runtime ops real models need, against onnxruntime with random inputs and random weights: Resize
(every mode onnxruntime runs on CPU), LSTM, GRU, RNN, and If/Loop/Scan run as one op with their bodies through the
op table.

Tolerance: float32 within 1e-5 absolute + 1e-4 relative (recurrences accumulate rounding over the steps);
nearest-neighbour Resize exactly.  Recurrences with layout=1 are checked against onnx's reference evaluator
(onnxruntime's CPU kernels refuse batch-first layout)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from planner.execute.ops import OPS, OpContext, supported_op_types
from planner.ir.onnx_values import plain_attributes

R = np.random.default_rng(12)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _one_node(op_type, inputs, attrs, opset, n_out, reference="onnxruntime"):
    names = [f"x{i}" if v is not None else "" for i, v in enumerate(inputs)]
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op_type, names, outs, **attrs)
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in zip(names, inputs) if v is not None]
    graph = helper.make_graph([node], "t", vis, [helper.make_value_info(o, onnx.TypeProto()) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    feeds = {n: v for n, v in zip(names, inputs) if v is not None}
    ref = _ort(model, feeds) if reference == "onnxruntime" else ReferenceEvaluator(model).run(None, feeds)
    ins = [torch.from_numpy(np.array(v)) if v is not None else None for v in inputs]
    ours = OPS[op_type](ins, plain_attributes(node), OpContext(opset=opset, num_outputs=n_out))
    return [o.numpy() for o in ours], ref


def _close(ours, ref, exact=False):
    assert len(ours) >= len(ref)
    for a, b in zip(ours, ref):
        assert a.shape == b.shape
        if exact:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


X = f32(1, 2, 5, 7)
SCALES = np.array([1, 1, 2.0, 1.5], np.float32)
SIZES = np.array([1, 2, 3, 11], np.int64)
NONE = np.zeros(0, np.float32)
RESIZE = []
for coord in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"):
    for nearest in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        RESIZE.append(({"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": nearest},
                       [X, NONE, SCALES], 19))
    RESIZE.append(({"mode": "linear", "coordinate_transformation_mode": coord}, [X, NONE, SCALES], 19))
    RESIZE.append(({"mode": "cubic", "coordinate_transformation_mode": coord}, [X, NONE, None, SIZES], 19))
RESIZE += [
    ({"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, [X, NONE, SCALES], 13),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 3.0},
     [X, np.array([0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3], np.float32), None, SIZES], 13),
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
     [X, NONE, np.array([1, 1, 0.6, 0.5], np.float32)], 11),  # downsampling, the OCR detector's mode
    ({"mode": "linear", "axes": [3, 2], "keep_aspect_ratio_policy": "not_larger"},
     [X, None, None, np.array([20, 9], np.int64)], 18),
    ({"mode": "nearest"}, [X, np.array([1, 1, 2, 3], np.float32)], 10),
    ({"mode": "linear"}, [X, np.array([1, 1, 2, 3], np.float32)], 10),
]


@pytest.mark.parametrize("attrs,inputs,opset", RESIZE, ids=[f"{i}" for i in range(len(RESIZE))])
def test_resize_matches_onnxruntime(attrs, inputs, opset):
    ours, ref = _one_node("Resize", inputs, attrs, opset, 1)
    _close(ours, ref, exact=attrs["mode"] == "nearest")


def _rnn_inputs(kind, num_dir, seq, batch, inp, hidden, layout=0, lens=None, peep=False):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    x = f32(batch, seq, inp) if layout else f32(seq, batch, inp)
    h0 = f32(batch, num_dir, hidden) if layout else f32(num_dir, batch, hidden)
    ins = [x, f32(num_dir, gates * hidden, inp), f32(num_dir, gates * hidden, hidden),
           f32(num_dir, 2 * gates * hidden), np.array(lens, np.int32) if lens else None, h0]
    if kind == "LSTM":
        ins.append(f32(batch, num_dir, hidden) if layout else f32(num_dir, batch, hidden))
        ins.append(f32(num_dir, 3 * hidden) if peep else None)
    while ins[-1] is None:
        ins.pop()
    return ins


RNN_CASES = []
for kind in ("RNN", "GRU", "LSTM"):
    for direction, nd in (("forward", 1), ("reverse", 1), ("bidirectional", 2)):
        RNN_CASES.append((kind, direction, nd, {}, {}))
    RNN_CASES.append((kind, "bidirectional", 2, {"layout": 1}, {"layout": 1}))
    RNN_CASES.append((kind, "bidirectional", 2, {}, {"lens": [5, 2, 4]}))
    RNN_CASES.append((kind, "forward", 1, {"clip": 0.5}, {}))
RNN_CASES.append(("GRU", "bidirectional", 2, {"linear_before_reset": 1}, {}))
RNN_CASES.append(("LSTM", "forward", 1, {}, {"peep": True}))
RNN_CASES.append(("RNN", "forward", 1, {"activations": ["Relu"]}, {}))
RNN_CASES.append(("GRU", "forward", 1, {"activations": ["HardSigmoid", "Tanh"], "activation_alpha": [0.3],
                                        "activation_beta": [0.4]}, {}))


@pytest.mark.parametrize("kind,direction,nd,attrs,extra", RNN_CASES, ids=[f"{c[0]}-{i}" for i, c in
                                                                          enumerate(RNN_CASES)])
def test_recurrent_ops_match_onnxruntime(kind, direction, nd, attrs, extra):
    hidden = 4
    ins = _rnn_inputs(kind, nd, 5, 3, 6, hidden, extra.get("layout", 0), extra.get("lens"), extra.get("peep"))
    n_out = 3 if kind == "LSTM" else 2
    # onnxruntime's CPU kernels refuse layout=1 (batch first): those cases are checked against onnx's reference
    reference = "onnx" if attrs.get("layout") else "onnxruntime"
    ours, ref = _one_node(kind, ins, {"hidden_size": hidden, "direction": direction, **attrs}, 14, n_out, reference)
    _close(ours, ref)


def _graph(nodes, inputs, outputs, inits=()):
    return helper.make_graph(nodes, "body", inputs, outputs, list(inits))


def _vi(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _run_model(nodes, inputs, feeds, outputs, opset=17):
    model = helper.make_model(helper.make_graph(nodes, "m", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    ref = _ort(model, feeds)
    env = {k: torch.from_numpy(v) for k, v in feeds.items()}
    for node in model.graph.node:
        ins = [env[t] if t else None for t in node.input]
        ctx = OpContext(opset=opset, num_outputs=len(node.output), scope=env)
        for name, value in zip(node.output, OPS[node.op_type](ins, plain_attributes(node), ctx)):
            env[name] = value
    return [env[o.name].numpy() for o in outputs], ref


@pytest.mark.parametrize("flag", [True, False])
def test_if_runs_the_chosen_branch_with_outer_scope_and_nested_if(flag):
    w = numpy_helper.from_array(f32(4, 3), "w")
    inner = helper.make_node("If", ["c2"], ["t"], then_branch=_graph(
        [helper.make_node("Relu", ["x"], ["r"])], [], [_vi("r")]), else_branch=_graph(
        [helper.make_node("Neg", ["x"], ["n"])], [], [_vi("n")]))
    then = _graph([helper.make_node("MatMul", ["x", "w"], ["mm"]), inner,
                   helper.make_node("Sum", ["t", "x"], ["s"])], [], [_vi("mm"), _vi("s")], [w])
    other = _graph([helper.make_node("Sigmoid", ["x"], ["a"]), helper.make_node("Tanh", ["x"], ["b"])], [],
                   [_vi("a"), _vi("b")])
    node = helper.make_node("If", ["c"], ["o1", "o2"], then_branch=then, else_branch=other)
    feeds = {"c": np.array(flag), "c2": np.array(not flag), "x": f32(2, 4)}
    if flag:  # then-branch output shapes differ from the else-branch's: give no shape
        outs = [_vi("o1"), _vi("o2")]
    else:
        outs = [_vi("o1", shape=[2, 4]), _vi("o2", shape=[2, 4])]
    ours, ref = _run_model([node], [_vi("c", TensorProto.BOOL, []), _vi("c2", TensorProto.BOOL, []),
                                    _vi("x", shape=[2, 4])], feeds, outs)
    _close(ours, ref)


def test_loop_with_trip_count_condition_carried_values_and_scan_outputs():
    body = _graph(
        [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["acc_out", "fi"], ["scan_out"]),
         helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"])],
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("acc_in", shape=[3])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", shape=[3]), _vi("scan_out", shape=[3])])
    node = helper.make_node("Loop", ["M", "cond", "acc0"], ["acc", "scans"], body=body)
    feeds = {"M": np.array(6, np.int64), "cond": np.array(True), "acc0": f32(3),
             "x": np.abs(f32(3)) + 0.5, "limit": np.array(6.0, np.float32)}
    ours, ref = _run_model([node], [_vi("M", TensorProto.INT64, []), _vi("cond", TensorProto.BOOL, []),
                                    _vi("acc0", shape=[3]), _vi("x", shape=[3]), _vi("limit", shape=[])],
                           feeds, [_vi("acc"), _vi("scans")])
    _close(ours, ref)


@pytest.mark.parametrize("directions", [(0, 0), (1, 1)])
def test_scan_with_state_axes_and_directions(directions):
    body = _graph(
        [helper.make_node("Add", ["s_in", "xt"], ["s_out"]), helper.make_node("MatMul", ["xt", "w"], ["y"])],
        [_vi("s_in", shape=[4]), _vi("xt", shape=[4])], [_vi("s_out", shape=[4]), _vi("y", shape=[2])])
    node = helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
                            scan_input_axes=[1], scan_input_directions=[directions[0]],
                            scan_output_axes=[1], scan_output_directions=[directions[1]])
    feeds = {"s0": f32(4), "xs": f32(4, 5), "w": f32(4, 2)}
    ours, ref = _run_model([node], [_vi("s0", shape=[4]), _vi("xs", shape=[4, 5]), _vi("w", shape=[4, 2])],
                           feeds, [_vi("s"), _vi("ys")])
    _close(ours, ref)


def test_supported_op_list_names_the_new_ops():
    ops = supported_op_types()
    for op in ("Resize", "LSTM", "GRU", "RNN", "Einsum", "If", "Loop", "Scan"):
        assert op in ops
    assert ops == sorted(ops)
    assert "NonZero" not in ops
